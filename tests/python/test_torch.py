# SPDX-License-Identifier: Apache-2.0
"""krex.torch: krex as PyTorch Inductor's GPU benchmark lock.

Each test runs against the real PyTorch when it is installed (its hook,
torch._inductor.runtime.benchmarking.set_gpu_benchmark_lock_context, is
PyTorch 2.13's and newer; scripts/ci/test-python.sh installs PyTorch with
KREX_PY_TORCH=ON) and against a stand-in torch package everywhere: the hook's
API as PyTorch defines it (stand-in 2.13), or without it (stand-in 2.12). The
stand-in shadows an installed PyTorch on its child's sys.path."""

import importlib.util
import unittest

from pyutil import Child, TempTree, cleanup, unique_name

LIGHT_ENV = {"KREX_FREEZE": "none", "KREX_PIN": "0", "KREX_CONFINE": "0",
             "KREX_LOCK_WAIT_MS": "60000"}

# PyTorch's hook (torch/_inductor/runtime/benchmarking.py, 2.13 to 2.15), as
# Inductor uses it: benchmark methods decorated with gpu_benchmark_lock, some
# of which call others (nested entry from the same thread).
_HOOK_API = """
    import contextlib
    from functools import wraps
    _gpu_benchmark_lock_context = None
    def set_gpu_benchmark_lock_context(context_factory):
        global _gpu_benchmark_lock_context
        previous = _gpu_benchmark_lock_context
        _gpu_benchmark_lock_context = context_factory
        return previous
    @contextlib.contextmanager
    def maybe_gpu_benchmark_lock():
        context_factory = _gpu_benchmark_lock_context
        if context_factory is None:
            yield
            return
        with context_factory():
            yield
    def gpu_benchmark_lock(fn):
        @wraps(fn)
        def wrapper(*args, **kwargs):
            with maybe_gpu_benchmark_lock():
                return fn(*args, **kwargs)
        return wrapper
"""


def _standin(version, hook):
    return {
        "torch/__init__.py": "__version__ = %r\n" % version,
        "torch/_inductor/__init__.py": "",
        "torch/_inductor/config.py": "autotune_in_subproc = False\n",
        "torch/_inductor/runtime/__init__.py": "",
        "torch/_inductor/runtime/benchmarking.py": _HOOK_API if hook else "benchmarker = None\n",
    }


STANDIN_213 = _standin("2.13.0+standin", hook=True)
STANDIN_212 = _standin("2.12.1+standin", hook=False)


def _real_torch():
    return importlib.util.find_spec("torch") is not None


def _variants():
    """(label, files of a stand-in or None for the installed PyTorch)."""
    out = [("stand-in 2.13", STANDIN_213)]
    if _real_torch():
        out.append(("installed PyTorch", None))
    return out


def _variant_outs(code, prefix, check_exit=True):
    """(label, what the child running `code` said under "out") for each of
    _variants(), each on its own segment; with check_exit, the child must exit 0."""
    for label, files in _variants():
        name = unique_name(prefix)
        with _tree(files) as tree:
            c = _child(code, name, tree)
            try:
                out = c.expect("out", timeout=180)
                if check_exit:
                    assert c.wait(60) == 0, (label, c.stderr_now())
            finally:
                cleanup(name, [c])
        yield label, out


def _need_real_torch():
    if not _real_torch():
        raise unittest.SkipTest("PyTorch is not installed: pip install torch (2.13 or newer has "
                                "the hook; scripts/ci/test-python.sh installs it with "
                                "KREX_PY_TORCH=ON); the stand-in variants ran")


# Child code: sys.argv[1] the segment, sys.argv[2] a directory to put first
# on sys.path (a stand-in torch) or "".
_PRELUDE = """
    if sys.argv[2]:
        sys.path.insert(0, sys.argv[2])
    import krex.torch
    from torch._inductor.runtime import benchmarking as b
"""


def _child(code, name, tree, env=None):
    return Child(_PRELUDE + code, env=dict(LIGHT_ENV, **(env or {})),
                 args=[name, tree.path if tree else ""])


class _NoTree:
    path = ""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _tree(files):
    return TempTree(files) if files is not None else _NoTree()


REGISTRATION = """
    import contextlib, warnings
    out = {"supported": krex.torch.supported(), "status0": krex.torch.status()}
    if not out["supported"]:
        try:
            krex.torch.enable(segment=sys.argv[1])
        except krex.Error as e:
            out["error"], out["step"] = str(e), e.step
        say("out", out)
        sys.exit(0)
    # A lock context registered before krex (a harness's own): it keeps
    # running, inside krex's region, and disable() restores it.
    theirs = []
    @contextlib.contextmanager
    def their_lock():
        theirs.append(krex.in_region())
        yield
    b.set_gpu_benchmark_lock_context(their_lock)
    out["enable"] = krex.torch.enable(segment=sys.argv[1])
    out["joined"] = krex.process_tenant().joined          # join=True: joined at enable()
    out["again"] = krex.torch.enable(segment=sys.argv[1])  # one registration
    out["registered"] = b._gpu_benchmark_lock_context is not their_lock
    out["enabled"] = krex.torch.enabled()

    # Nested entry from the same thread, as Inductor does it: no deadlock,
    # no second region.
    with b.maybe_gpu_benchmark_lock():
        outer = krex.in_region()
        with b.maybe_gpu_benchmark_lock():
            inner = krex.in_region()
        after_inner = krex.in_region()
    out["outer"], out["inner"], out["after_inner"] = outer, inner, after_inner
    out["after"] = krex.in_region()
    out["report"] = krex.torch.last_report()
    # The decorator Inductor's benchmark methods carry, nested twice.
    bench = b.gpu_benchmark_lock(b.gpu_benchmark_lock(lambda: krex.in_region()))
    out["decorated"] = bench()
    # An exception inside a section: region left, exception unchanged.
    try:
        with b.maybe_gpu_benchmark_lock():
            raise KeyError("from the benchmark")
    except KeyError as e:
        out["exception"] = str(e)
    out["after_exception"] = krex.in_region()
    # A section inside the harness's own region opens none of its own.
    with krex.region(krex.process_tenant()) as r:
        with b.maybe_gpu_benchmark_lock():
            out["in_harness_region"] = krex.in_region()
    out["status"] = krex.torch.status()
    out["theirs"] = theirs
    out["disable"] = krex.torch.disable()
    out["restored"] = b._gpu_benchmark_lock_context is their_lock
    with b.maybe_gpu_benchmark_lock():
        out["disabled_in_region"] = krex.in_region()
    out["disable_again"] = krex.torch.disable()
    say("out", out)
"""


def test_enable_registers_krex_and_nested_sections_open_one_region():
    for label, out in _variant_outs(REGISTRATION, "pytorchreg"):
        if not out["supported"]:  # an installed PyTorch older than the hook
            assert label == "installed PyTorch", (label, out)
            assert out["step"] == "torch" and "no Inductor GPU benchmark lock hook" in out["error"]
            continue
        assert out["status0"]["hook"] is True and out["status0"]["enabled"] is False, out
        assert out["enable"] is True and out["again"] is True and out["joined"] is True, out
        assert out["registered"] is True and out["enabled"] is True, (label, out)
        assert (out["outer"], out["inner"], out["after_inner"], out["after"]) == \
            (True, True, True, False), (label, out)
        assert out["report"]["level"].startswith("gate+drain"), out["report"]
        assert out["report"]["epoch"] % 2 == 1, out["report"]
        assert out["decorated"] is True
        assert out["exception"] == "'from the benchmark'" and out["after_exception"] is False
        assert out["in_harness_region"] is True
        st = out["status"]
        # Regions: the outer section, the decorated pair's outer, the one that
        # raised; nested: the inner section, the decorated inner, the one in the
        # harness's region.
        assert (st["sections"], st["nested"], st["errors"]) == (3, 3, 0), (label, st)
        # Their lock ran in every section (6), each time inside krex's region,
        # then alone once krex was disabled.
        assert out["theirs"] == [True] * 6 + [False], (label, out["theirs"])
        assert out["disable"] is True and out["restored"] is True, (label, out)
        assert out["disabled_in_region"] is False and out["disable_again"] is False


UNSUPPORTED = """
    import warnings
    out = {"supported": krex.torch.supported(), "status": krex.torch.status()}
    try:
        krex.torch.enable(segment=sys.argv[1])
    except krex.Error as e:
        out["error"], out["step"], out["hint"] = str(e), e.step, e.hint
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out["lenient"] = krex.torch.enable(strict=False, segment=sys.argv[1])
    out["warnings"] = [(x.category.__name__, str(x.message)) for x in w]
    out["enabled"] = krex.torch.enabled()
    say("out", out)
"""

NO_TORCH = """
    out = {"supported": krex.torch.supported(), "status": krex.torch.status()}
    try:
        krex.torch.enable()
    except krex.Error as e:
        out["error"], out["step"] = str(e), e.step
    say("out", out)
"""


def test_enable_where_pytorch_has_no_hook_says_so_and_what_to_do():
    name = unique_name("pytorchold")
    with TempTree(STANDIN_212) as tree:
        c = Child("\n    sys.path.insert(0, sys.argv[2])\n    import krex.torch\n" + UNSUPPORTED,
                  env=LIGHT_ENV, args=[name, tree.path])
        try:
            out = c.expect("out", timeout=60)
            assert c.wait(30) == 0, c.stderr_now()
        finally:
            cleanup(name, [c])
    assert out["supported"] is False and out["status"]["hook"] is False, out
    assert out["status"]["torch"] == "2.12.1+standin", out["status"]
    assert out["step"] == "torch", out
    for words in ("PyTorch 2.12.1+standin", "no Inductor GPU benchmark lock hook",
                  "set_gpu_benchmark_lock_context", "2.13 or newer", "strict=False"):
        assert words in out["error"], (words, out["error"])
    assert out["hint"] and out["hint"] in out["error"], out
    assert out["lenient"] is False and out["enabled"] is False, out
    assert len(out["warnings"]) == 1 and out["warnings"][0][0] == "RuntimeWarning", out
    assert "outside krex regions" in out["warnings"][0][1], out["warnings"]

    # No PyTorch at all (hidden even where one is installed).
    c = Child("\n    sys.modules['torch'] = None\n    import krex.torch\n" + NO_TORCH,
              env=LIGHT_ENV)
    try:
        out = c.expect("out", timeout=60)
        assert c.wait(30) == 0, c.stderr_now()
    finally:
        c.close()
    assert out["supported"] is False and out["status"]["torch"] is None, out
    assert out["step"] == "torch" and "PyTorch is not installed" in out["error"], out


MISUSE = """
    out = {}
    for label, call in (("tenant", lambda: krex.torch.enable(tenant="krex")),
                        ("both", lambda: krex.torch.enable(tenant=krex.Tenant(segment=sys.argv[1]),
                                                           lease_ms=5000)),
                        ("option", lambda: krex.torch.enable(segment=sys.argv[1], lease=5000))):
        try:
            call()
            out[label] = "no error"
        except (TypeError, krex.Error) as e:
            out[label] = [type(e).__name__, str(e), getattr(e, "step", None)]
    out["enabled"] = krex.torch.enabled()
    say("out", out)
"""

CONTROL = """
    out = {"enable": krex.torch.enable(segment=sys.argv[1])}
    out["registered"] = b._gpu_benchmark_lock_context is not None
    say("out", out)
"""


def test_enable_misuse_and_krex_patch_0():
    name = unique_name("pytorchmis")
    with TempTree(STANDIN_213) as tree:
        c = _child(MISUSE, name, tree)
        off = _child(CONTROL, name, tree, env={"KREX_PATCH": "0"})
        bad = _child(CONTROL, name, tree, env={"KREX_PATCH": "maybe"})
        try:
            out = c.expect("out", timeout=60)
            got_off = off.expect("out", timeout=60)
            bad.wait(60)
            bad_err = bad.stderr_now()
        finally:
            cleanup(name, [c, off, bad])
    assert out["tenant"][0] == "TypeError" and "krex.Tenant" in out["tenant"][1], out
    assert out["both"][0] == "TypeError" and "lease_ms" in out["both"][1], out
    assert out["option"][0] == "Error" and out["option"][2] == "options", out
    assert "lease_ms" in out["option"][1], out  # did you mean
    assert out["enabled"] is False, out
    assert got_off == {"enable": False, "registered": False}, got_off
    assert "invalid value 'maybe' for KREX_PATCH" in bad_err, bad_err


SUBPROC = """
    import warnings
    from torch._inductor import config
    config.autotune_in_subproc = True
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = {"enable": krex.torch.enable(segment=sys.argv[1])}
    out["warnings"] = [str(x.message) for x in w if x.category is RuntimeWarning]
    say("out", out)
"""


def test_enable_warns_that_subprocess_autotuning_is_out_of_reach():
    for label, out in _variant_outs(SUBPROC, "pytorchsub", check_exit=False):
        assert out["enable"] is True, (label, out)
        assert len(out["warnings"]) == 1, (label, out)
        assert "autotune_in_subproc" in out["warnings"][0], out


SECTIONS = """
    import time
    out = {"enable": krex.torch.enable(segment=sys.argv[1], lease_ms=60000)}
    @b.gpu_benchmark_lock
    def benchmark(ms):            # a benchmark method calling another, as Inductor's do
        with b.maybe_gpu_benchmark_lock():
            t0 = time.monotonic_ns()
            end = t0 + int(ms * 1e6)
            while time.monotonic_ns() < end:
                pass
            return [t0, time.monotonic_ns()]
    say("ready", None)
    sys.stdin.readline()          # go
    out["intervals"] = [benchmark(40) for _ in range(6)]
    out["status"] = krex.torch.status()
    say("out", out)
"""


def _overlaps(runs):
    """Pairs of intervals of different processes that overlap in time."""
    s = sorted((a, b, who) for who, ivs in enumerate(runs) for a, b in ivs)
    found = []
    for i, (a0, a1, wa) in enumerate(s):
        for b0, b1, wb in s[i + 1:]:
            if b0 >= a1:
                break
            if wa != wb:
                found.append(((a0, a1, wa), (b0, b1, wb)))
    return found


def _two_processes(tree, name, env):
    children = [_child(SECTIONS, name, tree, env=env) for _ in range(2)]
    try:
        for c in children:
            c.expect("ready", timeout=180)
        for c in children:
            c.send("go")
        outs = [c.expect("out", timeout=120) for c in children]
        for c in children:
            assert c.wait(60) == 0, c.stderr_now()
    finally:
        cleanup(name, children)
    return outs


def test_two_processes_locked_sections_never_overlap():
    """Two processes benchmark at once through Inductor's lock with krex.torch
    on: no two sections of different processes overlap in time; the control
    (KREX_PATCH=0: nothing registered) overlaps, so the check can fail."""
    files = None if _real_torch() else STANDIN_213
    with _tree(files) as tree:
        protected = _two_processes(tree, unique_name("pytorch2p"), {})
        control = _two_processes(tree, unique_name("pytorch2c"), {"KREX_PATCH": "0"})
    for out in protected:
        assert out["enable"] is True, out
        st = out["status"]
        assert (st["sections"], st["nested"], st["errors"]) == (6, 6, 0), st
    assert _overlaps([o["intervals"] for o in protected]) == []
    assert all(o["enable"] is False for o in control), control
    assert _overlaps([o["intervals"] for o in control]), \
        "the unprotected control never overlapped: the test could not have failed"


def test_real_pytorch_hook_is_the_one_krex_registers_with():
    """The installed PyTorch's own hook and decorators (not the stand-in):
    Inductor's benchmark methods carry gpu_benchmark_lock, and a registered
    krex section is what they enter."""
    _need_real_torch()
    name = unique_name("pytorchreal")
    c = Child("""
        import krex.torch
        st = krex.torch.status()
        out = {"status": st}
        if st["hook"]:
            from torch._inductor.runtime import benchmarking as b
            lock_code = b.gpu_benchmark_lock(lambda: None).__code__
            def locked(fn):               # through the other decorators' wrappers
                while fn is not None:
                    if getattr(fn, "__code__", None) is lock_code:
                        return True
                    fn = getattr(fn, "__wrapped__", None)
                return False
            out["locked"] = sorted(
                "%s.%s" % (cls.__name__, m) for cls in (b.Benchmarker, b.TritonBenchmarker,
                                                          b.InductorBenchmarker)
                for m in ("benchmark_gpu", "benchmark_gpu_with_cuda_graph")
                if locked(cls.__dict__.get(m)))
            krex.torch.enable(segment=sys.argv[1])
            seen = []
            b.gpu_benchmark_lock(lambda: seen.append(krex.in_region()))()
            out["seen"] = seen
        say("out", out)
    """, env=LIGHT_ENV, args=[name])
    try:
        out = c.expect("out", timeout=180)
        assert c.wait(60) == 0, c.stderr_now()
    finally:
        cleanup(name, [c])
    st = out["status"]
    if not st["hook"]:
        raise unittest.SkipTest("the installed PyTorch %s has no hook: %s (the registration "
                                "test checked its error)" % (st["torch"], st["reason"]))
    # The CUDA-graph helper, which nests benchmark_gpu, and the timing paths.
    assert "Benchmarker.benchmark_gpu_with_cuda_graph" in out["locked"], out
    assert "TritonBenchmarker.benchmark_gpu" in out["locked"], out
    assert "InductorBenchmarker.benchmark_gpu" in out["locked"], out
    assert out["seen"] == [True], out


FORK = """
    from krex.patch import _state as patch_state
    t = krex.Tenant(segment=sys.argv[1])
    krex.torch.enable(tenant=t)
    with b.maybe_gpu_benchmark_lock():
        pass
    parent = {"sections": krex.torch.status()["sections"], "process_tenants": len(patch_state["tenants"])}
    def in_child():
        with b.maybe_gpu_benchmark_lock():
            inside = krex.in_region()
        return {"inside": inside, "sections": krex.torch.status()["sections"],
                "process_tenants": [x.slot for x in patch_state["tenants"].values()],
                "level": krex.torch.last_report()["level"]}
    say("out", {"parent": parent, "child": in_fork(in_child), "parent_slot": t.slot})
"""


def test_a_forked_child_opens_its_sections_on_its_own_tenant():
    """enable(tenant=t), then fork: the child's sections are regions of its
    own process tenant, not of the parent's t (fails without the fork handler)."""
    name = unique_name("pytorchfork")
    with TempTree(STANDIN_213) as tree:
        c = _child(FORK, name, tree, env={"KREX_SEGMENT": name})
        try:
            out = c.expect("out", timeout=60)
            assert c.wait(30) == 0, c.stderr_now()
        finally:
            cleanup(name, [c])
    assert out["parent"] == {"sections": 1, "process_tenants": 0}, out
    child = out["child"]
    assert "error" not in child, child
    assert child["inside"] is True and child["sections"] == 1, child
    assert len(child["process_tenants"]) == 1, child
    assert child["process_tenants"][0] != out["parent_slot"], out
    assert child["level"].startswith("gate+drain"), child


SECTION_ERROR = """
    out = {"enable": krex.torch.enable(join=False, segment=sys.argv[1], lease=5000)}
    try:
        with b.maybe_gpu_benchmark_lock():
            out["body"] = True
    except krex.Error as e:
        out["raised"] = [e.step, str(e)]
    st = krex.torch.status()
    out["errors"], out["last_error"], out["sections"] = st["errors"], st["last_error"], st["sections"]
    out["in_region"] = krex.in_region()
    say("out", out)
"""


def test_a_krex_error_in_a_section_is_raised_and_counted():
    """join=False defers the join to the first section: a bad option then
    fails that section (Inductor would drop the choice), and status() counts it."""
    name = unique_name("pytorcherr")
    with TempTree(STANDIN_213) as tree:
        c = _child(SECTION_ERROR, name, tree)
        try:
            out = c.expect("out", timeout=60)
            assert c.wait(30) == 0, c.stderr_now()
        finally:
            cleanup(name, [c])
    assert out["enable"] is True and "body" not in out, out
    assert out["raised"][0] == "options" and "lease_ms" in out["raised"][1], out
    assert out["errors"] == 1 and "lease_ms" in out["last_error"], out
    assert out["sections"] == 0 and out["in_region"] is False, out
