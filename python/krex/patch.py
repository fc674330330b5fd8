# SPDX-License-Identifier: Apache-2.0
"""krex.patch(): protect harnesses that time through well-known functions.

Harnesses look their timing function up when they call it: as a module
attribute (``triton.testing.do_bench(...)``, KernelBench's
``timing.get_timing_function(...)`` returning a module global, or a module
global called by name). patch() replaces those attributes with wrappers that
run each call inside a region of a process-wide tenant:

- in modules already imported, and in every imported module that bound the
  original by ``from triton.testing import do_bench``;
- in modules imported later, through an import hook that patches the module
  right after it has executed (before anyone can import names from it).

Calls made while the thread is already inside a region (a patched function
calling another one, or a harness timing inside its own ``krex.region``) go
straight through. unpatch() restores every attribute it replaced.

The process-wide tenant joins at the first patched call, or, with
``patch(join=True)`` (what ``python -m krex.run`` does; KREX_PATCH_JOIN
overrides either way), when patch() is called: then the process's GPU work
before its first timing call (imports, inputs, correctness checks) is gated
and drained like any tenant's, and the region reports of the other tenants do
not count it as foreign ("-shared").
"""

import atexit
import functools
import importlib.abc
import os
import sys
import threading

from . import _krex

# Module -> the timing functions in it that patch() wraps.
_kernelbench_timing = (
    "time_execution_with_cuda_event",
    "time_execution_with_do_bench_interface",
    "time_execution_with_do_bench_impl",
    "time_execution_with_host_time",
)
TARGETS = {
    "triton.testing": ("do_bench", "do_bench_cudagraph"),
    # KernelBench as a package (src/kernelbench/timing.py, current layout).
    "kernelbench.timing": _kernelbench_timing,
    # KernelBench run from its checkout: src/timing.py, and the older
    # src/eval.py that defined time_execution_with_cuda_event itself.
    "src.timing": _kernelbench_timing,
    "src.eval": ("time_execution_with_cuda_event",),
}

_lock = threading.RLock()
_state = {
    "active": False,
    "targets": {},       # module name -> attribute names
    "options": {},       # keyword options of the process tenant
    "replaced": [],      # (namespace, attribute, original, wrapper), in order
    "wrappers": {},      # id(original) -> wrapper
    "finder": None,
    "tenants": {},       # device -> krex.Tenant
    "last_report": None,
    "calls": 0,
    "early_device": None,  # the device patch(join=True) joined, before any patched call
    "adopted": {},         # device -> a tenant the process joined itself (Pool worker, Ray actor)
    "warned_device": False,
    "prepared": set(),     # devices whose tenant ran prepare_measure()
}


def _package():
    return sys.modules[__package__]


def _env_device():
    """KREX_DEVICE as an int, or None when unset (or not a number: the
    tenant's join then refuses it with krex's own message)."""
    v = os.environ.get("KREX_DEVICE", "").strip()
    return int(v) if v.isdigit() else None


def process_tenant(device=None):
    """The process-wide tenant patched calls use, joined on first use (or
    already by ``patch(join=True)`` / ``python -m krex.run``).

    Its options are those given to patch() (KREX_* variables override them).
    The device, unless patch() named one: KREX_DEVICE if set; else, in a
    krex.Pool worker or krex.ray actor, its tenant's device (that tenant is
    the process tenant); else PyTorch's current device when PyTorch is
    imported and CUDA is initialized on a CUDA build; else 0.
    """
    with _lock:
        opts = dict(_state["options"])
        if device is None:
            device = opts.pop("device", None)
        else:
            opts.pop("device", None)
        if device is None:
            device = _env_device()
        if device is None and _state["adopted"]:
            device = next(iter(_state["adopted"]))
        if device is None:
            device = 0
            torch = sys.modules.get("torch")
            if _krex.backend == "cuda" and torch is not None and torch.cuda.is_initialized():
                device = torch.cuda.current_device()
                _warn_device_moved(device)
        t = _state["adopted"].get(device)
        if t is not None and t.joined:
            return t
        t = _state["tenants"].get(device)
        if t is None or not t.joined:
            t = _krex.Tenant(device, **opts)
            _state["tenants"][device] = t
            _prepare_measure(device)
        return t


def _warn_device_moved(device):
    """The early join took device 0 (or another default); PyTorch works on another one."""
    early = _state["early_device"]
    if early is None or early == device or _state["warned_device"]:
        return
    _state["warned_device"] = True
    sys.stderr.write(
        "krex: warning: this process joined krex on device %d early (python -m krex.run, or "
        "patch(join=True)), but PyTorch's current device is %d: its work on device %d before "
        "this first timing call was not gated; set KREX_DEVICE=%d (or patch(device=%d)) so the "
        "early join uses it\n"
        % (early, device, device, device, device))


def _join_now():
    """patch(join=True): the process tenant joins now, before the harness's own
    code runs (krex.run) or before it goes on (krex.patch). Its device is the
    one process_tenant() picks now (before the script, PyTorch has none: then
    patch(device=), KREX_DEVICE or 0)."""
    t = process_tenant()
    if _state["early_device"] is None:
        _state["early_device"] = t.device
    return t


def _prepare_measure(device):
    """Outside any region: krex.prepare_measure() once per device, where the
    process has a CUDA context already (PyTorch initialized it), so a patched
    call's region neither allocates the probe and flush buffers nor loads NVML
    with the device held. Never creates a context; a failure here only leaves
    that work to the region. Runs after a join, and before each patched call
    until done (a tenant joined before the script ran has no context yet)."""
    if _krex.backend != "cuda" or device in _state["prepared"]:
        return
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return
    _state["prepared"].add(device)
    try:
        _krex.prepare_measure()
    except _krex.Error:
        pass


def last_report():
    """The report (dict) of the region around the latest patched call, or None."""
    return _state["last_report"]


def patched():
    """The 'module.attribute' names currently wrapped (sorted)."""
    with _lock:
        return sorted({"%s.%s" % (getattr(ns, "__name__", "?"), a)
                       for ns, a, _, _ in _state["replaced"]})


def _wrap(original, name):
    wrapper = _state["wrappers"].get(id(original))
    if wrapper is not None:
        return wrapper

    @functools.wraps(original)
    def krex_timed(*args, **kwargs):
        pkg = _package()
        if pkg.in_region():
            return original(*args, **kwargs)
        t = process_tenant()
        _prepare_measure(t.device)
        with pkg.region(t) as r:
            result = original(*args, **kwargs)
        _state["last_report"] = r.report
        _state["calls"] += 1
        return result

    krex_timed.__krex_original__ = original
    krex_timed.__krex_name__ = name
    _state["wrappers"][id(original)] = krex_timed
    return krex_timed


def _replace(namespace, attr, original, wrapper):
    setattr(namespace, attr, wrapper)
    _state["replaced"].append((namespace, attr, original, wrapper))


def _patch_module(module):
    """Wraps the target attributes of a just-loaded or already-loaded module."""
    with _lock:
        if not _state["active"]:
            return
        for attr in _state["targets"].get(module.__name__, ()):
            original = getattr(module, attr, None)
            if not callable(original) or hasattr(original, "__krex_original__"):
                continue
            _replace(module, attr, original, _wrap(original, module.__name__ + "." + attr))


def _rebind_imported_names():
    """Modules that did `from triton.testing import do_bench` before patch()."""
    originals = {id(w.__krex_original__): w for w in _state["wrappers"].values()}
    for mod in list(sys.modules.values()):
        d = getattr(mod, "__dict__", None)
        if not isinstance(d, dict) or mod is sys.modules.get(__name__):
            continue
        for attr, value in list(d.items()):
            w = originals.get(id(value))
            if w is not None and value is w.__krex_original__:
                _replace(mod, attr, value, w)


class _PatchingLoader(importlib.abc.Loader):
    """Delegates to the real loader, then patches the module it executed."""

    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        _patch_module(module)

    def __getattr__(self, name):  # get_resource_reader, is_package, get_source, ...
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of the target modules' real spec."""

    def find_spec(self, name, path, target=None):
        if name not in _state["targets"] or not _state["active"]:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _PatchingLoader(spec.loader)
        return spec


def _env_switch(name, default):
    """A 0/1 variable: its value as a bool, ``default`` when unset; any other
    value is a krex.Error (step "options")."""
    v = os.environ.get(name)
    if v is None:
        return default
    if v in ("0", "1"):
        return v == "1"
    e = _krex.Error("krex: options: invalid value '%s' for %s — accepted: 1, 0" % (v, name))
    e.step, e.hint, e.code = "options", "accepted: 1, 0", 0
    raise e


def patch(also=(), join=False, **options):
    """Wraps triton.testing.do_bench / do_bench_cudagraph and KernelBench's
    timing functions (see TARGETS) so each call runs inside a krex region.

    ``also``: more ("module", "attribute") pairs to wrap. ``join``: join the
    process-wide tenant now (before the harness's next line), not at the first
    patched call, so that the process's GPU work before its first timing call
    is gated and drained like any tenant's and other tenants' regions do not
    see it as foreign; KREX_PATCH_JOIN=1 or 0 overrides it (``python -m
    krex.run`` passes True). A join that fails raises krex.Error here.
    ``options``: keyword options of the process-wide tenant (as krex.Tenant
    takes them; device included). Returns True, or False when KREX_PATCH=0
    turns krex off (the control run of a comparison).
    Calling patch() again adds targets and updates options.
    """
    if not _env_switch("KREX_PATCH", True):
        return False
    join = _env_switch("KREX_PATCH_JOIN", bool(join))
    with _lock:
        targets = {k: tuple(v) for k, v in TARGETS.items()}
        for pair in also:
            module, attr = pair
            targets[module] = targets.get(module, ()) + (attr,)
        for module, attrs in _state["targets"].items():
            targets[module] = tuple(dict.fromkeys(attrs + targets.get(module, ())))
        _state["targets"] = targets
        _state["options"].update(options)
        _state["active"] = True
        if _state["finder"] is None:
            _state["finder"] = _Finder()
            sys.meta_path.insert(0, _state["finder"])
        for name in targets:
            if name in sys.modules:
                _patch_module(sys.modules[name])
        _rebind_imported_names()
        if join:
            _join_now()
    return True


def _adopt(tenant):
    """A tenant the process joined itself (a krex.Pool worker's, a krex.ray
    actor's) becomes the process tenant of its device: patched calls,
    process_tenant() and patch(join=True) use it instead of joining a second
    one, and a call without a device goes to its device. Its owner leaves it
    (unpatch() and the exit handler do not)."""
    with _lock:
        _state["adopted"][tenant.device] = tenant
        if _state["early_device"] is None:
            _state["early_device"] = tenant.device


def unpatch(leave=True):
    """Restores every attribute patch() replaced and removes the import hook.
    With ``leave``, the process tenants leave the node too."""
    with _lock:
        for namespace, attr, original, wrapper in reversed(_state["replaced"]):
            if getattr(namespace, attr, None) is wrapper:
                setattr(namespace, attr, original)
        _state["replaced"].clear()
        _state["wrappers"].clear()
        if _state["finder"] is not None:
            try:
                sys.meta_path.remove(_state["finder"])
            except ValueError:
                pass
            _state["finder"] = None
        _state["active"] = False
        _state["targets"] = {}
        _state["options"] = {}
        if leave:
            _leave_all()
            _state["early_device"] = next(iter(_state["adopted"]), None)
            _state["warned_device"] = False


def _forget_in_child():
    # A forked child inherits the parent's tenants as Python objects; their
    # slots are the parent's. Never leave them here (that would free the
    # parent's slot): keep them referenced for the child's life, and join anew.
    _inherited.extend(_state["tenants"].values())
    _inherited.extend(_state["adopted"].values())
    _state["tenants"].clear()
    _state["adopted"] = {}
    _state["last_report"] = None
    _state["early_device"] = None
    _state["prepared"] = set()


_inherited: list = []
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _leave_all():
    for t in _state["tenants"].values():
        try:
            t.leave()
        except _krex.Error:
            pass  # a region is still open on it; its process is exiting anyway
    _state["tenants"].clear()


atexit.register(_leave_all)
