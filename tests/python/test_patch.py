# SPDX-License-Identifier: Apache-2.0
"""krex.patch() / unpatch() and `python -m krex.run` with stand-ins for
triton.testing and KernelBench's timing module (neither is installed in CI):
fake modules that record whether they ran inside a krex region."""

import os
import subprocess
import sys

from pyutil import Child, TempTree, children_say, cleanup, unique_name

LIGHT_ENV = {"KREX_FREEZE": "none", "KREX_PIN": "0", "KREX_CONFINE": "0",
             "KREX_LOCK_WAIT_MS": "30000"}

# On-disk stand-ins, importable once their directory is on sys.path.
FAKE_TRITON = {
    "triton/__init__.py": "",
    "triton/testing.py": """
        import krex
        def do_bench(fn, warmup=25, rep=100, quantiles=None, return_mode="mean"):
            fn()
            return {"in_region": krex.in_region(), "name": "do_bench"}
        def do_bench_cudagraph(fn, rep=20):
            # Real do_bench_cudagraph may call do_bench: a nested patched call.
            inner = do_bench(fn)
            return {"in_region": krex.in_region(), "inner": inner, "name": "do_bench_cudagraph"}
    """,
}
FAKE_KERNELBENCH = {
    "kernelbench/__init__.py": "",
    "kernelbench/timing.py": """
        import krex
        def time_execution_with_cuda_event(kernel_fn, args, num_warmup=3, num_trials=10,
                                           discard_first=1, verbose=True, device=None):
            kernel_fn(*args)
            return [1.0 if krex.in_region() else -1.0] * num_trials
        def get_timing_function(method="cuda_event"):
            if method == "cuda_event":
                return time_execution_with_cuda_event
            raise ValueError(method)
    """,
}


def test_patch_wraps_an_imported_fake_triton_and_unpatch_restores_it():
    name = unique_name("pypatch")
    c = Child("""
        import types
        # A triton.testing installed in sys.modules before patch(), and a
        # harness module that bound do_bench by name before patch().
        triton = types.ModuleType("triton")
        testing = types.ModuleType("triton.testing")
        calls = []
        def do_bench(fn, **kw):
            calls.append(krex.in_region())
            return fn()
        testing.do_bench = do_bench
        original = [do_bench]    # a reference patch() does not rebind
        triton.testing = testing
        sys.modules["triton"], sys.modules["triton.testing"] = triton, testing
        harness = types.ModuleType("harness")
        harness.do_bench = testing.do_bench
        sys.modules["harness"] = harness
        out = {"before": testing.do_bench(lambda: 1)}

        out["patch"] = krex.patch(segment=sys.argv[1])
        out["patched"] = krex.patched()
        out["wrapped"] = testing.do_bench is not original[0]
        out["value"] = testing.do_bench(lambda: 7)
        out["report"] = krex.last_report()
        harness.do_bench(lambda: 2)
        # Inside an explicit region the patched call goes straight through.
        t = krex.process_tenant()
        with krex.region(t) as r:
            testing.do_bench(lambda: 3)
            epoch_inside = r.report["epoch"]
        out["nested_kept_last_report"] = krex.last_report()["epoch"] != epoch_inside

        krex.unpatch()
        out["restored"] = all(f is original[0] for f in (testing.do_bench, harness.do_bench,
                                                         do_bench))
        out["patched_after"] = krex.patched()
        testing.do_bench(lambda: 4)
        out["calls"] = calls
        say("out", out)
    """, env=LIGHT_ENV, args=[name])
    try:
        out = c.expect("out")
        assert out["before"] == 1 and out["patch"] is True
        assert "triton.testing.do_bench" in out["patched"], out["patched"]
        assert "harness.do_bench" in out["patched"], out["patched"]
        assert "__main__.do_bench" in out["patched"], out["patched"]  # the script's own global
        assert out["wrapped"] is True and out["value"] == 7, out
        assert out["report"]["level"].startswith("gate+drain"), out["report"]
        assert out["report"]["epoch"] % 2 == 1
        assert out["nested_kept_last_report"] is True
        assert out["restored"] is True and out["patched_after"] == []
        # before, patched, harness (patched), explicit region, after unpatch
        assert out["calls"] == [False, True, True, True, False], out["calls"]
        assert c.wait() == 0
    finally:
        cleanup(name, [c])


def test_patch_wraps_modules_imported_later_through_the_import_hook():
    name = unique_name("pyhook")
    with TempTree({**FAKE_TRITON, **FAKE_KERNELBENCH}) as tree:
        c = Child("""
            sys.path.insert(0, sys.argv[2])
            krex.patch(segment=sys.argv[1])
            import triton.testing
            from triton.testing import do_bench          # bound after patch(): the wrapper
            import kernelbench.timing as kt
            out = {
                "do_bench": triton.testing.do_bench(lambda: None),
                "from_import": do_bench(lambda: None)["in_region"],
                "cudagraph": triton.testing.do_bench_cudagraph(lambda: None),
                "kernelbench": kt.get_timing_function("cuda_event")(lambda: None, [],
                                                                   num_trials=3),
                "patched": krex.patched(),
                "loader_ok": triton.testing.__spec__.loader.get_source("triton.testing") is not None,
            }
            krex.unpatch()
            out["after"] = kt.time_execution_with_cuda_event(lambda: None, [], num_trials=1)
            import importlib
            out["not_hooked"] = not any(type(f).__name__ == "_Finder" for f in sys.meta_path)
            say("out", out)
        """, env=LIGHT_ENV, args=[name, tree.path])
        try:
            out = c.expect("out")
            assert out["do_bench"]["in_region"] is True, out
            assert out["from_import"] is True
            assert out["cudagraph"]["in_region"] is True
            assert out["cudagraph"]["inner"]["in_region"] is True  # nested: passed through
            assert out["kernelbench"] == [1.0, 1.0, 1.0], out["kernelbench"]
            for n in ("triton.testing.do_bench", "triton.testing.do_bench_cudagraph",
                      "kernelbench.timing.time_execution_with_cuda_event"):
                assert n in out["patched"], (n, out["patched"])
            assert out["loader_ok"] is True
            assert out["after"] == [-1.0] and out["not_hooked"] is True
            assert c.wait() == 0
        finally:
            cleanup(name, [c])


def test_patch_is_off_with_krex_patch_0_and_rejects_other_values():
    off, bad = children_say("""
        import types
        testing = types.ModuleType("triton.testing")
        testing.do_bench = lambda fn, **kw: krex.in_region()
        sys.modules["triton.testing"] = testing
        try:
            on = krex.patch(segment=sys.argv[1])
            say("out", {"patch": on, "in_region": testing.do_bench(None)})
        except krex.Error as e:
            say("out", {"error": str(e), "step": e.step})
    """, "pyoff", [dict(LIGHT_ENV, KREX_PATCH="0"), dict(LIGHT_ENV, KREX_PATCH="maybe")])
    assert off == {"patch": False, "in_region": False}
    assert bad["step"] == "options" and "KREX_PATCH" in bad["error"], bad


def test_krex_run_runs_an_unmodified_script_with_patch_applied():
    name = unique_name("pyrun")
    files = dict(FAKE_TRITON)
    files["script.py"] = """
        import json, sys
        import triton.testing
        import krex
        r = triton.testing.do_bench(lambda: None)
        opts = sys.modules["krex.patch"]._state["options"]
        print("RESULT", json.dumps({"argv": sys.argv, "main": __name__,
                                    "in_region": r["in_region"],
                                    "level": (krex.last_report() or {}).get("level"),
                                    "release_on_leave": opts.get("release_on_leave")}))
        sys.exit(int(sys.argv[-1]))
    """
    with TempTree(files) as tree:
        script = os.path.join(tree.path, "script.py")
        env = dict(os.environ, KREX_SEGMENT=name, **LIGHT_ENV)
        try:
            runs = {}
            for label, extra in (("krex", {}), ("control", {"KREX_PATCH": "0"})):
                p = subprocess.run([sys.executable, "-m", "krex.run", script, "a b", "3"],
                                   env=dict(env, **extra), capture_output=True, text=True,
                                   timeout=60)
                lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
                assert lines, (label, p.stdout, p.stderr)
                import json
                runs[label] = (p.returncode, json.loads(lines[0][len("RESULT "):]))
            rc, got = runs["krex"]
            assert rc == 3, runs
            assert got["argv"] == [script, "a b", "3"] and got["main"] == "__main__", got
            assert got["in_region"] is True and got["level"].startswith("gate+drain"), got
            # The process tenant resets the device at its leave (the exit), so an
            # exiting worker's context teardown is gated (KREX_RELEASE_ON_LEAVE=0
            # overrides it, as every KREX_* variable overrides patch()'s options).
            assert got["release_on_leave"] is True, got
            rc, got = runs["control"]
            assert rc == 3 and got["in_region"] is False and got["level"] is None, got
            p = subprocess.run([sys.executable, "-m", "krex.run"], capture_output=True,
                               text=True, timeout=60)
            assert p.returncode == 2 and "usage" in p.stderr
        finally:
            cleanup(name)


# A script that does nothing krex-related before the test lets it go: its
# first line prints STARTED, then it answers "ping" with PONG (a frozen
# process cannot) until "go"; then one patched timing call.
EARLY_SCRIPT = """
    import sys
    print("STARTED", flush=True)
    for line in sys.stdin:
        if line.strip() != "ping":
            break
        print("PONG", flush=True)
    import json
    import triton.testing
    import krex
    r = triton.testing.do_bench(lambda: None)
    print("RESULT", json.dumps({
        "in_region": r["in_region"], "level": (krex.last_report() or {}).get("level"),
        "tenants": len(sys.modules["krex.patch"]._state["tenants"])}), flush=True)
"""

# Another tenant of the segment: one region, whose report says which siblings
# it saw, drained and froze; it holds the region until the test sends a line.
PROBE = """
    t = krex.Tenant(segment=sys.argv[1], lock_wait_ms=30000, scope="all", pin=False,
                    confine=False, freeze=sys.argv[2])
    with krex.region(t) as r:
        say("inside", {"freeze": t.freeze})
        sys.stdin.readline()
    say("report", r.report)
    t.leave()
"""


def _probe(name, freeze="none", target=None):
    """A region of another tenant; with `target` (a Child), pings it while the
    region holds the device. Returns (report, whether target answered inside)."""
    probe = Child(PROBE, args=[name, freeze])
    try:
        inside = probe.expect("inside")
        answered = None
        if target is not None:
            target.send("ping")
            answered = target.readline(1.0)
        probe.send("go")
        rep = probe.expect("report")
        assert probe.wait() == 0
        return rep, answered, inside["freeze"]
    finally:
        probe.close()


class _Script(Child):
    """`python -m krex.run script.py` as a Child (bounded reads, cleanup)."""

    def __init__(self, script, env):
        import selectors
        self.proc = subprocess.Popen([sys.executable, "-m", "krex.run", script],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1,
                                     env=dict(os.environ, **env))
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)


def test_krex_run_joins_before_the_scripts_first_line():
    # Before the script has called anything of krex's, another tenant's region
    # sees it as a sibling, drains it and (where cgroups allow) freezes it: its
    # GPU work before its first timing call would be gated and drained, not
    # foreign. Its first patched call then uses that same tenant.
    name = unique_name("pyearly")
    with TempTree({**FAKE_TRITON, "script.py": EARLY_SCRIPT}) as tree:
        env = {"KREX_SEGMENT": name, "KREX_PIN": "0", "KREX_CONFINE": "0",
               "KREX_LOCK_WAIT_MS": "30000"}
        script = _Script(os.path.join(tree.path, "script.py"), env)
        try:
            script.expect("STARTED")
            rep, answered, freeze = _probe(name, "auto", script)
            assert rep["siblings_seen"] == 1 and rep["siblings_drained"] == 1, rep
            if freeze != "none":
                assert rep["frozen_pids"] == [script.pid], (rep["frozen_pids"], script.pid)
                assert answered is None, "the script answered while frozen"
                assert script.readline(10) == "PONG"  # thawed at the region's exit
            else:
                assert answered == "PONG"
            script.send("go")
            got = script.expect("RESULT")
            assert got["in_region"] is True and got["level"].startswith("gate+drain"), got
            assert got["tenants"] == 1, got  # the early tenant, not a second one
            assert script.wait() == 0, script.stderr_now()
        finally:
            cleanup(name, [script])


def test_krex_patch_join_0_keeps_the_join_at_the_first_patched_call():
    name = unique_name("pylate")
    with TempTree({**FAKE_TRITON, "script.py": EARLY_SCRIPT}) as tree:
        env = dict(LIGHT_ENV, KREX_SEGMENT=name, KREX_PATCH_JOIN="0")
        script = _Script(os.path.join(tree.path, "script.py"), env)
        try:
            script.expect("STARTED")
            rep, answered, _ = _probe(name, "none", script)
            assert rep["siblings_seen"] == 0, rep  # not a tenant yet
            assert answered == "PONG"
            script.send("go")
            got = script.expect("RESULT")
            assert got["in_region"] is True and got["tenants"] == 1, got
            assert script.wait() == 0, script.stderr_now()
            # A value other than 0 or 1: krex.run stops before the script runs.
            p = subprocess.run([sys.executable, "-m", "krex.run",
                                os.path.join(tree.path, "script.py")],
                               env=dict(os.environ, **dict(env, KREX_PATCH_JOIN="early")),
                               capture_output=True, text=True, timeout=60)
            assert p.returncode == 2 and "STARTED" not in p.stdout, (p.stdout, p.stderr)
            assert "KREX_PATCH_JOIN" in p.stderr and "accepted: 1, 0" in p.stderr, p.stderr
        finally:
            cleanup(name, [script])


def test_an_early_join_on_another_device_than_pytorchs_warns_and_joins_that_device():
    # krex.run joins device 0 before the script; PyTorch then works on device 1
    # (a stand-in: the host backend has no PyTorch, so the child pretends to be
    # a CUDA build with PyTorch initialized on device 1). The first patched
    # call warns, naming KREX_DEVICE, and runs on a tenant of device 1.
    name = unique_name("pymoved")
    files = dict(FAKE_TRITON)
    files["script.py"] = """
        import json, sys, types
        import krex
        torch = types.ModuleType("torch")
        torch.cuda = types.SimpleNamespace(is_initialized=lambda: True, current_device=lambda: 1)
        sys.modules["torch"] = torch
        sys.modules["krex._krex"].backend = "cuda"   # what a CUDA build would say
        import triton.testing
        r = triton.testing.do_bench(lambda: None)
        r2 = triton.testing.do_bench(lambda: None)
        tenants = sys.modules["krex.patch"]._state["tenants"]
        print("RESULT", json.dumps({"in_region": r["in_region"] and r2["in_region"],
                                    "devices": sorted(t.device for t in tenants.values()),
                                    "process_tenant": krex.process_tenant().device}))
    """
    with TempTree(files) as tree:
        env = dict(os.environ, KREX_SEGMENT=name, KREX_HOST_DEVICES="2", **LIGHT_ENV)
        try:
            p = subprocess.run([sys.executable, "-m", "krex.run",
                                os.path.join(tree.path, "script.py")],
                               env=env, capture_output=True, text=True, timeout=60)
            assert p.returncode == 0, p.stderr
            import json
            got = json.loads([ln for ln in p.stdout.splitlines()
                              if ln.startswith("RESULT ")][0][len("RESULT "):])
            assert got == {"in_region": True, "devices": [0, 1], "process_tenant": 1}, got
            assert p.stderr.count("krex: warning: this process joined krex on device 0") == 1, \
                p.stderr
            assert "set KREX_DEVICE=1" in p.stderr, p.stderr
            # Told the device, it joins that one before the script and warns nothing.
            p = subprocess.run([sys.executable, "-m", "krex.run",
                                os.path.join(tree.path, "script.py")],
                               env=dict(env, KREX_DEVICE="1"), capture_output=True, text=True,
                               timeout=60)
            assert p.returncode == 0 and "warning" not in p.stderr, p.stderr
            got = json.loads([ln for ln in p.stdout.splitlines()
                              if ln.startswith("RESULT ")][0][len("RESULT "):])
            assert got["devices"] == [1] and got["process_tenant"] == 1, got
        finally:
            cleanup(name)


def test_patch_join_true_joins_when_patch_is_called():
    name = unique_name("pyjoin")
    code = """
        joined = krex.patch(segment=sys.argv[1], join=sys.argv[2] == "1")
        say("patched", joined)
        sys.stdin.readline()
        t = krex.process_tenant()
        say("tenants", len(sys.modules["krex.patch"]._state["tenants"]))
    """
    cases = {  # (join=, KREX_PATCH_JOIN) -> a tenant right after patch()
        ("1", None): 1, ("0", None): 0, ("0", "1"): 1, ("1", "0"): 0}
    try:
        for (arg, var), want in cases.items():
            env = dict(LIGHT_ENV, **({"KREX_PATCH_JOIN": var} if var else {}))
            c = Child(code, env=env, args=[name, arg])
            try:
                assert c.expect("patched") is True
                rep, _, _ = _probe(name)
                assert rep["siblings_seen"] == want, ((arg, var), rep)
                c.send("go")
                assert c.expect("tenants") == 1  # process_tenant(): the early one, or joined now
                assert c.wait() == 0
            finally:
                c.close()
        bad = Child("""
            try:
                krex.patch(segment=sys.argv[1], join=True)
                say("out", "joined")
            except krex.Error as e:
                say("out", {"error": str(e), "step": e.step, "hint": e.hint})
        """, env=dict(LIGHT_ENV, KREX_PATCH_JOIN="yes"), args=[name])
        try:
            got = bad.expect("out")
            assert got["step"] == "options" and "KREX_PATCH_JOIN" in got["error"], got
            assert got["hint"] == "accepted: 1, 0", got
        finally:
            bad.close()
    finally:
        cleanup(name)


def test_a_forked_child_joins_its_own_tenant_and_leaves_the_parents_alone():
    name = unique_name("pyfork")
    c = Child("""
        import types
        testing = types.ModuleType("triton.testing")
        testing.do_bench = lambda fn, **kw: krex.in_region()
        sys.modules["triton.testing"] = testing
        krex.patch(segment=sys.argv[1])
        out = {"parent_first": testing.do_bench(None), "parent_slot": krex.process_tenant().slot}
        def in_child():
            res = {"in_region": testing.do_bench(None), "slot": krex.process_tenant().slot,
                   "level": krex.last_report()["level"]}
            krex.process_tenant().leave()
            return res
        out["child"] = in_fork(in_child)
        t = krex.process_tenant()
        out["parent_after"] = testing.do_bench(None)
        out["parent_joined"] = t.joined and t.slot == out["parent_slot"]
        say("out", out)
    """, env=LIGHT_ENV, args=[name])
    try:
        out = c.expect("out")
        assert out["parent_first"] is True and out["parent_after"] is True
        child = out["child"]
        assert child.get("in_region") is True, child
        assert child["slot"] != out["parent_slot"], out
        assert out["parent_joined"] is True
        assert c.wait() == 0
    finally:
        cleanup(name, [c])


if __name__ == "__main__":
    import run_tests
    raise SystemExit(run_tests.main([os.path.abspath(__file__)]))
