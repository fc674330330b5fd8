# SPDX-License-Identifier: Apache-2.0
"""krex.nvbench: regions around cuda.bench's State.exec.

cuda.bench's extension loads only where a CUDA driver is (it lists the GPUs
when imported), so the host tests use a stand-in cuda.bench whose State.exec
calls the launcher as nvbench does (warm-up, then samples) and records
whether each call ran inside a krex region; the regions are krex's own
(host backend), in a child process. test_real_cuda_bench_* run cuda.bench
itself and skip, saying why, where it cannot load."""

import json
import os
import subprocess
import sys
import tempfile

from pyutil import Child, TempTree, children_say, cleanup, unique_name

LIGHT_ENV = {"KREX_FREEZE": "none", "KREX_PIN": "0", "KREX_CONFINE": "0",
             "KREX_LOCK_WAIT_MS": "30000"}

FAKE_CUDA_BENCH = {
    "cuda/__init__.py": "",
    "cuda/bench/__init__.py": """
        import krex

        class Launch:
            def get_stream(self):
                return None

        class State:
            def __init__(self, device=0, skipped=False):
                self.device = device
                self.skipped = skipped
                self.summaries = {}
                self.in_region = []
                self.kwargs = None

            def get_device(self):
                return self.device

            def is_skipped(self):
                return self.skipped

            def add_summary(self, name, value):
                self.summaries[name] = value

            def exec(self, fn, /, *, batched=None, sync=False, timer=False):
                self.kwargs = {"batched": batched, "sync": sync, "timer": timer}
                if self.skipped:
                    return
                for _ in range(5):  # a warm-up and samples
                    fn(Launch())
                    self.in_region.append(krex.in_region())
    """,
}


def _child(code, name, extra_env=None):
    env = dict(LIGHT_ENV, KREX_SEGMENT=name)
    env.update(extra_env or {})
    return Child(code, env=env)


def test_exec_runs_every_launch_in_a_region_and_adds_the_columns():
    name = unique_name("pynvb")
    with TempTree(FAKE_CUDA_BENCH) as tree:
        c = _child("""
            sys.path.insert(0, %r)
            import cuda.bench as bench
            import krex.nvbench
            st = bench.State(device=0)
            calls = []
            krex.nvbench.exec(st, lambda launch: calls.append(krex.in_region()), sync=True)
            out = {"in_region": st.in_region, "calls": calls, "kwargs": st.kwargs,
                   "summaries": st.summaries, "after": krex.in_region(),
                   "report": krex.nvbench.last_report()}
            # A CPU-only state (no device) uses device 0's tenant too.
            cpu = bench.State(device=None)
            krex.nvbench.exec(cpu, lambda launch: None)
            out["cpu"] = cpu.summaries
            # A skipped state: nvbench's exec does nothing, and no region is taken.
            before = krex.nvbench.last_report()["epoch"]
            skipped = bench.State(skipped=True)
            krex.nvbench.exec(skipped, lambda launch: None)
            out["skipped"] = skipped.summaries
            out["skipped_no_region"] = krex.nvbench.last_report()["epoch"] == before
            # Inside an explicit region: straight through, no second region.
            inner = bench.State()
            with krex.region(krex.process_tenant(0)):
                krex.nvbench.exec(inner, lambda launch: None)
            out["inner"] = {"in_region": inner.in_region, "summaries": inner.summaries}
            try:
                krex.nvbench.exec(bench.State(), 42)
                out["bad_fn"] = None
            except TypeError as e:
                out["bad_fn"] = str(e)
            say("out", out)
        """ % tree.path, name)
        try:
            out = c.expect("out")
            assert out["in_region"] == [True] * 5 and out["calls"] == [True] * 5, out
            assert out["after"] is False
            assert out["kwargs"] == {"batched": None, "sync": True, "timer": False}, out["kwargs"]
            assert out["summaries"]["krex"].startswith("gate+drain"), out["summaries"]
            # The column is the level, then " | WARNING (n): ..." when another krex
            # user of the machine shares the device (e.g. a second segment).
            assert out["summaries"]["krex"].split(" | WARNING")[0] == out["report"]["level"], out
            assert 0 <= out["summaries"]["krex Wait (s)"] < 10, out["summaries"]
            assert out["cpu"]["krex"].startswith("gate+drain"), out["cpu"]
            assert out["skipped"] == {} and out["skipped_no_region"] is True, out
            assert out["inner"] == {"in_region": [True] * 5, "summaries": {}}, out["inner"]
            assert "fn must be callable" in out["bad_fn"], out["bad_fn"]
            assert c.wait() == 0
        finally:
            cleanup(name, [c])


def test_patch_makes_state_exec_itself_take_a_region_and_unpatch_restores_it():
    name = unique_name("pynvbp")
    with TempTree(FAKE_CUDA_BENCH) as tree:
        c = _child("""
            sys.path.insert(0, %r)
            import cuda.bench as bench
            import krex.nvbench
            original = bench.State.exec
            krex.nvbench.patch()
            krex.nvbench.patch()  # idempotent
            out = {"patched": krex.nvbench.patched()}
            st = bench.State()
            st.exec(lambda launch: None, batched=False)  # the script's own call, unchanged
            out["in_region"] = st.in_region
            out["kwargs"] = st.kwargs
            out["summary"] = st.summaries.get("krex", "")
            krex.nvbench.unpatch()
            out["restored"] = bench.State.exec is original
            plain = bench.State()
            plain.exec(lambda launch: None)
            out["plain"] = {"in_region": plain.in_region, "summaries": plain.summaries}
            say("out", out)
        """ % tree.path, name)
        try:
            out = c.expect("out")
            assert out["patched"] is True
            assert out["in_region"] == [True] * 5, out
            assert out["kwargs"]["batched"] is False, out["kwargs"]
            assert out["summary"].startswith("gate+drain"), out
            assert out["restored"] is True
            assert out["plain"] == {"in_region": [False] * 5, "summaries": {}}, out["plain"]
            assert c.wait() == 0
        finally:
            cleanup(name, [c])


def test_regions_switch_off_says_unprotected_and_a_bad_value_is_an_error():
    code = """
        sys.path.insert(0, %r)
        import cuda.bench as bench
        import krex.nvbench
        st = bench.State()
        try:
            krex.nvbench.exec(st, lambda launch: None)
            say("out", {"in_region": st.in_region, "summaries": st.summaries})
        except krex.Error as e:
            say("out", {"error": str(e), "ran": st.in_region})
    """
    with TempTree(FAKE_CUDA_BENCH) as tree:
        off, bad = children_say(code % tree.path, "pynvbs",
                                [dict(LIGHT_ENV, KREX_NVBENCH_REGIONS=v) for v in ("0", "maybe")],
                                segment_env=True)
    assert off == {"in_region": [False] * 5, "summaries": {"krex": "unprotected"}}, off
    assert "invalid value 'maybe' for KREX_NVBENCH_REGIONS" in bad["error"], bad
    assert "set KREX_NVBENCH_REGIONS=1" in bad["error"], bad
    assert bad["ran"] == [], bad


def _cuda_bench_unavailable():
    """Why cuda.bench cannot run here ('' when it can)."""
    r = subprocess.run([sys.executable, "-c", "import cuda.bench; cuda.bench.State"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode == 0:
        return ""
    last = (r.stderr.strip().splitlines() or ["?"])[-1]
    return "cuda.bench cannot load here (needs the cuda-bench package and a CUDA driver): " + last


def test_real_cuda_bench_states_get_regions_and_nvbench_json_has_the_columns():
    why = _cuda_bench_unavailable()
    if why:
        import unittest
        raise unittest.SkipTest(why)
    name = unique_name("pynvbr")
    with tempfile.TemporaryDirectory() as d:
        out_json = os.path.join(d, "out.json")
        c = _child("""
            import cuda.bench as bench
            import krex.nvbench
            seen = []
            def host_work(state):
                krex.nvbench.exec(state, lambda launch: seen.append(krex.in_region()))
            b = bench.register(host_work)
            b.set_is_cpu_only(True)
            b.set_min_samples(5)
            b.set_timeout(0.5)
            bench.run_all_benchmarks([sys.argv[0], "--json", sys.argv[1]])
            say("out", {"seen": sorted(set(seen))})
        """.replace("sys.argv[1]", repr(out_json)), name)
        try:
            out = c.expect("out", timeout=120)
            assert out["seen"] == [True], out
            with open(out_json) as f:
                data = json.load(f)
            states = [s for b in data["benchmarks"] for s in b["states"]]
            assert states
            for s in states:
                tags = {x["tag"]: x for x in s["summaries"]}
                assert "nv/python/krex" in tags, sorted(tags)
                value = [v["value"] for v in tags["nv/python/krex"]["data"] if v["name"] == "value"]
                assert value and value[0].startswith("gate+drain"), tags["nv/python/krex"]
            assert c.wait(60) == 0
        finally:
            cleanup(name, [c])
