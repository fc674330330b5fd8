# SPDX-License-Identifier: Apache-2.0
"""krex as PyTorch Inductor's GPU benchmark lock.

PyTorch 2.13 and newer let a harness wrap every Inductor GPU benchmark
(autotuning's timing of each choice, CUDA-graph benchmarking with its warm-up
and capture, ``do_bench_using_profiling``; from 2.15 also the whole
comparison of a runtime multi-kernel) in a context of its own:
``torch._inductor.runtime.benchmarking.set_gpu_benchmark_lock_context``.
PyTorch owns no lock policy. ``krex.torch.enable()`` registers krex there:

    import krex.torch
    krex.torch.enable()                  # krex.Error if this PyTorch has no hook
    f = torch.compile(fn, mode="max-autotune")
    f(x)                                 # each Inductor benchmark: a krex region

Each outermost locked section is a region of the process-wide tenant
(``krex.process_tenant()``, shared with ``krex.patch()``): the device's FIFO
region lock, then gate, drain and freeze of the other tenants, and the pin.
A section entered while the thread is already in a region (Inductor nests
them: CUDA-graph benchmarking calls ``benchmark_gpu`` inside its own locked
section) opens no second region and waits for nothing. A lock context
registered before ``enable()`` keeps running, inside krex's region.

krex never imports PyTorch on ``import krex``; this module imports it only
when one of its functions is called.
"""

import contextlib
import os
import sys
import threading
import warnings

import krex

from . import _krex
from .patch import _lock as _patch_lock
from .patch import _state as _patch_state
from .patch import process_tenant

__all__ = ["enable", "disable", "enabled", "supported", "status", "last_report", "HOOK",
           "FIRST_VERSION"]

#: The PyTorch function krex registers with.
HOOK = "torch._inductor.runtime.benchmarking.set_gpu_benchmark_lock_context"
#: The first PyTorch release that has it.
FIRST_VERSION = "2.13"

_lock = threading.RLock()
_state = {
    "enabled": False,
    "factory": None,     # our context factory, as registered
    "previous": None,    # the factory registered before enable() (restored by disable())
    "tenant": None,      # a tenant given to enable(), else None: the process tenant
    "sections": 0,       # regions opened by a locked section
    "nested": 0,         # sections entered inside a region (no region of their own)
    "errors": 0,         # sections that raised krex.Error
    "last_error": None,
    "last_report": None,
}


def _error(what, hint):
    e = _krex.Error("krex: torch: %s — %s" % (what, hint))
    e.step, e.hint, e.code = "torch", hint, 0
    return e


def _probe():
    """(benchmarking module or None, torch version or None, reason or None)."""
    try:
        import torch  # noqa: PLC0415 (lazy: krex works without PyTorch)
    except ImportError as e:
        return None, None, ("PyTorch is not installed here (import torch: %s)" % e)
    version = str(getattr(torch, "__version__", "?"))
    try:
        from torch._inductor.runtime import benchmarking  # noqa: PLC0415
    except ImportError as e:
        return None, version, ("PyTorch %s (%s) has no Inductor GPU benchmark lock hook "
                               "(import torch._inductor.runtime.benchmarking: %s)"
                               % (version, _where(torch), e))
    if not callable(getattr(benchmarking, "set_gpu_benchmark_lock_context", None)):
        return None, version, ("PyTorch %s (%s) has no Inductor GPU benchmark lock hook (%s, "
                               "in PyTorch %s and newer)"
                               % (version, _where(torch), HOOK, FIRST_VERSION))
    return benchmarking, version, None


def _where(module):
    path = getattr(module, "__file__", None)
    return os.path.dirname(path) if path else "?"


def supported():
    """Whether the importable PyTorch has Inductor's GPU benchmark lock hook
    (imports PyTorch; False when it is not installed)."""
    return _probe()[0] is not None


def status():
    """A dict: ``torch`` (the version, or None when PyTorch cannot be
    imported), ``hook`` (whether it has Inductor's GPU benchmark lock hook),
    ``multi_kernel_lock`` (whether its runtime multi-kernel comparison takes
    the lock around all candidates: PyTorch 2.15 and newer), ``reason`` (why
    not, or None), ``enabled``, ``sections`` (regions opened by locked
    sections), ``nested`` (sections entered inside a region), ``errors``
    (sections that raised krex.Error) and ``last_error``."""
    benchmarking, version, reason = _probe()
    multi = False
    if benchmarking is not None:
        try:
            from torch._inductor.codegen import multi_kernel  # noqa: PLC0415
            fn = getattr(multi_kernel.MultiKernelCall, "benchmark_sub_kernels", None)
            # gpu_benchmark_lock's wrappers all share one code object.
            lock_code = benchmarking.gpu_benchmark_lock(lambda: None).__code__
            while fn is not None and not multi:
                multi = getattr(fn, "__code__", None) is lock_code
                fn = getattr(fn, "__wrapped__", None)
        except Exception:  # noqa: BLE001 - a report, never a failure
            multi = False
    with _lock:
        return {"torch": version, "hook": benchmarking is not None, "multi_kernel_lock": multi,
                "reason": reason, "enabled": _state["enabled"], "sections": _state["sections"],
                "nested": _state["nested"], "errors": _state["errors"],
                "last_error": _state["last_error"]}


def enabled():
    """Whether krex is registered as Inductor's GPU benchmark lock."""
    return _state["enabled"]


def last_report():
    """The report (dict) of the region of the latest locked section, or None."""
    return _state["last_report"]


def _tenant():
    t = _state["tenant"]
    return t if t is not None else process_tenant()


@contextlib.contextmanager
def _section():
    """One entry of Inductor's lock: a region, unless the thread is in one."""
    previous = _state["previous"]
    inner = previous() if previous is not None else contextlib.nullcontext()
    if krex.in_region():
        with _lock:
            _state["nested"] += 1
        with inner:
            yield
        return
    try:
        r = krex.region(_tenant())  # the process tenant may join here (join=False)
        r.enter()
    except _krex.Error as e:
        _count_error(e)
        raise
    try:
        with inner:
            yield
    except BaseException as e:
        try:
            r.__exit__(type(e), e, e.__traceback__)  # leaves the body's exception alone
        finally:
            _finish(r)
        raise
    try:
        r.exit()
    except _krex.Error as e:  # the lease was lost: the benchmark was not protected to its end
        _count_error(e)
        raise
    finally:
        _finish(r)


def _count_error(e):
    with _lock:
        _state["errors"] += 1
        _state["last_error"] = str(e)


def _finish(r):
    with _lock:
        _state["sections"] += 1
        _state["last_report"] = r.report


def enable(tenant=None, strict=True, join=True, **options):
    """Registers krex as Inductor's GPU benchmark lock in this process.

    ``tenant``: a krex.Tenant to open the regions on (a child forked later
    uses its own process tenant instead); by default the
    process-wide tenant of ``krex.process_tenant()`` with ``options``
    (krex.Tenant's keywords; ``KREX_*`` variables override them, as for
    ``krex.patch()``). ``join``: join it now, so the process's work before
    its first benchmark is gated and drained like any sibling's, and the
    processes it starts afterwards (Inductor's compile workers) are frozen
    with it; its device: ``device=``, ``KREX_DEVICE``, PyTorch's current
    device once CUDA is initialized, else 0. ``join=False``: at the first
    section, on PyTorch's current device then.

    Returns True. Returns False, registering nothing, when ``KREX_PATCH=0``
    (a control run). Where the installed PyTorch has no hook (older than
    2.13, or not installed) it raises krex.Error (step ``"torch"``) saying
    so, or with ``strict=False`` warns (RuntimeWarning) and returns False.
    Calling it again updates the options and keeps one registration.
    """
    if os.environ.get("KREX_PATCH", "1") == "0":
        return False
    if os.environ.get("KREX_PATCH", "1") != "1":
        e = _krex.Error("krex: options: invalid value '%s' for KREX_PATCH — accepted: 1, 0"
                        % os.environ["KREX_PATCH"])
        e.step, e.hint, e.code = "options", "accepted: 1, 0", 0
        raise e
    if tenant is not None and not isinstance(tenant, _krex.Tenant):
        raise TypeError("krex.torch.enable: tenant must be a krex.Tenant or None, not %s"
                        % type(tenant).__name__)
    if tenant is not None and options:
        raise TypeError("krex.torch.enable: give tenant options either to the krex.Tenant you "
                        "pass or as keywords, not both (%s)" % ", ".join(sorted(options)))
    benchmarking, version, reason = _probe()
    if benchmarking is None:
        hint = ("install PyTorch %s or newer to have Inductor's autotuning benchmarks in krex "
                "regions; with this one, put your own timed loops in krex.region or run under "
                "python -m krex.run (triton.testing.do_bench); krex.torch.enable(strict=False) "
                "goes on without the hook, with a warning" % FIRST_VERSION)
        if strict:
            raise _error(reason, hint)
        warnings.warn("krex.torch: %s: Inductor's benchmarks run outside krex regions — %s"
                      % (reason, hint.split("; krex.torch")[0]), RuntimeWarning, stacklevel=2)
        return False
    with _lock:
        with _patch_lock:
            kept = dict(_patch_state["options"])
            _patch_state["options"].update(options)
        if join and tenant is None:
            try:
                process_tenant()
            except BaseException:
                with _patch_lock:  # a bad option: nothing registered, nothing kept
                    _patch_state["options"].clear()
                    _patch_state["options"].update(kept)
                raise
        _state["tenant"] = tenant
        current = getattr(benchmarking, "_gpu_benchmark_lock_context", None)
        if not _state["enabled"] or current is not _state["factory"]:
            previous = benchmarking.set_gpu_benchmark_lock_context(_section)
            if previous is _section:
                previous = _state["previous"]
            _state["previous"] = previous
            _state["factory"] = _section
            _state["enabled"] = True
    _warn_subprocess_autotuning()
    return True


def _warn_subprocess_autotuning():
    config = sys.modules.get("torch._inductor.config")
    if config is None:
        try:
            from torch._inductor import config  # noqa: PLC0415
        except Exception:  # noqa: BLE001 - only a warning depends on it
            return
    if getattr(config, "autotune_in_subproc", False):
        warnings.warn("krex.torch: torch._inductor.config.autotune_in_subproc is on "
                      "(TORCHINDUCTOR_AUTOTUNE_IN_SUBPROC=1): Inductor benchmarks autotuning "
                      "choices in worker processes of its own, where this process's hook does "
                      "not reach, so those benchmarks run outside krex regions — turn it off "
                      "to have them protected", RuntimeWarning, stacklevel=3)


def _forget_in_child():
    # A forked child has the registration (PyTorch's hook is a module global)
    # but not the parent's tenant: a tenant given to enable() is the parent's
    # slot. Its sections use the child's own process tenant (krex.patch's
    # fork handler makes that one anew), and count afresh.
    _state["tenant"] = None
    _state.update(sections=0, nested=0, errors=0, last_error=None, last_report=None)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def disable():
    """Unregisters krex: restores the lock context registered before
    ``enable()`` (where krex's is still the registered one). Returns whether
    krex was enabled. The process tenant stays joined (``krex.unpatch()`` or
    process exit leaves it)."""
    with _lock:
        if not _state["enabled"]:
            return False
        benchmarking = sys.modules.get("torch._inductor.runtime.benchmarking")
        if benchmarking is not None and \
                getattr(benchmarking, "_gpu_benchmark_lock_context", None) is _state["factory"]:
            benchmarking.set_gpu_benchmark_lock_context(_state["previous"])
        _state["enabled"] = False
        _state["factory"] = None
        _state["previous"] = None
        _state["tenant"] = None
        return True
