# SPDX-License-Identifier: Apache-2.0
"""bench/python/kernelbench_throughput.py: its time breakdown on a synthetic
evaluation with known answers, and a --fake run (CPU stand-ins, no GPU)
through every shape and mode: a process per evaluation under `python -m
krex.run` and persistent krex.Pool workers, unprotected, behind an flock,
a region per do_bench call, a region per evaluation."""

import importlib.util
import inspect
import json
import os
import subprocess
import sys
import tempfile

import krex

HERE = os.path.dirname(os.path.abspath(__file__))
# Whether this krex's python -m krex.run joins before the script (patch(join=True)).
EARLY_JOIN = "join" in inspect.signature(krex.patch).parameters
DRIVER = os.path.join(HERE, "..", "..", "bench", "python", "kernelbench_throughput.py")


def _driver():
    spec = importlib.util.spec_from_file_location("kernelbench_throughput", DRIVER)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def _region(lock, gate, drain, freeze, quiet, pin, body, exit_):
    return {"lock_ms": lock, "gate_ms": gate, "drain_ms": drain, "freeze_ms": freeze,
            "quiet_ms": quiet, "pin_ms": pin, "body_ms": body, "exit_ms": exit_,
            "quiet_wait_ms": 0.0, "siblings": 0, "frozen": 0,
            "level": "gate+drain+freeze(cgroup2)+pin"}


def test_breakdown_of_a_synthetic_evaluation():
    d = _driver()
    # Spawned at 10.0 s; ready 10.5; inputs 10.6; checked 10.9; timing 10.9-12.0.
    r = {"t_spawn": 10.0, "t_start": 10.2, "t_ready": 10.5, "t_inputs": 10.6, "t_checked": 10.9,
         "t_timed": 10.9, "t_done": 12.0, "levels": ["x"],
         "execs": {"a": [100, 90], "b": [50]},
         "regions": [_region(300, 1, 2, 3, 4, 5, 400, 6), _region(100, 1, 1, 1, 1, 1, 200, 2)]}
    b = d.breakdown(r)
    want = {"command": 2000, "context": 500, "inputs": 100, "check": 300, "wait": 400,
            "gate": 2, "drain": 3, "freeze": 4, "quiet": 5, "pin": 6, "critical": 600,
            "exit": 8, "wrapper": 1100 - 400 - 20 - 600 - 8, "other": 0}
    assert set(b) == set(want), sorted(b)
    for k, v in want.items():
        assert abs(b[k] - v) < 1e-6, (k, b[k], v)
    # Held: the steps after the lock, the body, the exit (not the wait).
    assert abs(d.held_ms(r) - (15 + 400 + 6 + 5 + 200 + 2)) < 1e-9
    # A process's join, out of context (it joined before its imports were
    # done) or out of wrapper (its first do_bench joined).
    early = d.breakdown(dict(r, join={"total_ms": 120.0}, joined_early=True))
    late = d.breakdown(dict(r, join={"total_ms": 50.0}, joined_early=False))
    assert abs(early["join"] - 120) < 1e-9 and abs(early["context"] - 380) < 1e-6
    assert abs(early["wrapper"] - want["wrapper"]) < 1e-6
    assert abs(late["join"] - 50) < 1e-9 and abs(late["wrapper"] - (want["wrapper"] - 50)) < 1e-6
    assert abs(late["context"] - 500) < 1e-6
    # In a pool the command starts when the task does.
    pooled = dict(r, t_spawn=None)
    assert abs(d.breakdown(pooled)["command"] - 1800) < 1e-6
    assert abs(d.breakdown(pooled)["context"] - 300) < 1e-6
    # Unprotected: the whole timing loop is critical, nothing waits.
    plain = dict(r, regions=[])
    bp = d.breakdown(plain)
    assert "wait" not in bp and abs(bp["critical"] - 1100) < 1e-6 and abs(bp["wrapper"]) < 1e-6
    # A lock: its wait and hold, no steps.
    locked = dict(r, regions=[{"lock_ms": 50, "body_ms": 1000}])
    bl = d.breakdown(locked)
    assert "gate" not in bl and abs(bl["wrapper"] - 50) < 1e-6 and d.held_ms(locked) == 1000
    s = d.summarize([r, r], 4.0, 2, "krex", "run")
    assert s["evaluations"] == 2 and abs(s["evals_per_min"] - 30.0) < 1e-9
    assert s["execs"] == 480 and s["calls"] == 6 and abs(s["execs_per_min"] - 7200) < 1e-6
    assert abs(s["lock_busy"] - 2 * 628 / 4000) < 1e-9
    assert abs(s["entry_exit_share_of_held"] - 2 * (20 + 8) / (2 * 628)) < 1e-9
    assert abs(s["median_ms"]["wait"] - 400) < 1e-9
    assert abs(s["held_ms_per_eval"] - 628) < 1e-9 and abs(s["entry_exit_ms_per_eval"] - 28) < 1e-9
    assert abs(s["critical_us_per_exec"] - 2 * 600 * 1e3 / 480) < 1e-9
    st = s["steps"]
    assert st["regions"] == 4 and st["pin"]["median"] == 3 and st["pin"]["max"] == 5
    assert st["exit"]["p90"] == 6 and st["exit"]["median"] == 4 and st["frozen_median"] == 0 and st["shared"] == 0
    assert d.summarize([dict(r, regions=[])], 1.0, 1, "unprotected", "run")["steps"] is None
    # The gap split at the lock: krex / unprotected = (lock / unprotected) x (krex / lock).
    u = dict(s, mode="unprotected", evals_per_min=60.0)
    lk = dict(s, mode="lock", evals_per_min=40.0)
    lines = d.gap_lines({"phases": {"2-run-unprotected": u, "2-run-lock": lk, "2-run-krex": s}})
    row = [x for x in lines if x.startswith("| 2 | run | krex |")]
    assert len(row) == 1 and row[0].startswith("| 2 | run | krex | 0.500 | 0.667 | 0.750 |"), lines


def test_fake_run_through_every_shape_and_mode():
    out = tempfile.mkdtemp(prefix="krex-kbtp-test-")
    # krex@KREX_PIN=0: a variant, its variables reach every tenant (no "+pin").
    modes = ("unprotected", "lock", "krex", "krex-held", "krex-late", "krex@KREX_PIN=0")
    p = subprocess.run(
        [sys.executable, DRIVER, "--fake", "--workers", "2", "--evals-per-worker", "1",
         "--reps", "2", "--warmup-ms", "1", "--rep-ms", "4", "--problems", "matmul,add_relu",
         "--modes", ",".join(modes), "--timeout", "120", "--out", out],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-4000:]
    with open(os.path.join(out, "kernelbench_throughput.json")) as f:
        res = json.load(f)
    with open(os.path.join(out, "kernelbench_throughput.md")) as f:
        md = f.read()
    want = ["2-%s-%s" % (shape, mode) for shape in ("run", "pool") for mode in modes
            if (shape, mode) != ("pool", "krex-late")]  # pool workers join when they start
    assert sorted(res["phases"]) == sorted(want), sorted(res["phases"])
    for key in want:
        s = res["phases"][key]
        shape, mode = key.split("-", 2)[1:]
        assert not res["failures"][key], (key, res["failures"][key])
        assert s["evaluations"] == 2 and s["evals_per_min"] > 0, (key, s["evaluations"])
        assert s["execs"] > 0 and s["calls"] == 2 * 4 * 2, (key, s["calls"])
        assert "| 2 | %s | %s |" % (shape, mode) in md, key
        assert key in res["accuracy"] and res["accuracy"][key]["samples"] == 16
        base = mode.partition("@")[0]
        per_eval = {"unprotected": 0, "lock": 8, "krex": 8, "krex-held": 1, "krex-late": 8}[base]
        for r in s["records"]:
            assert r["mode"] == base and len(r["regions"]) == per_eval, (key, len(r["regions"]))
            b = {}
            b.update(_driver().breakdown(r))
            parts = sum(v for k, v in b.items() if k != "command")
            assert abs(parts - b["command"]) < 1e-6, (key, b)
            assert (r["t_spawn"] is not None) == (shape == "run"), key
            # A process per evaluation under krex: its join, from Tenant.join_report.
            assert (r["join"] is not None) == (shape == "run" and base != "unprotected"
                                               and base != "lock"), (key, r["join"])
            # Joined before the evaluation's own code: a pool worker always;
            # python -m krex.run where it joins early (patch(join=True)), not
            # with KREX_PATCH_JOIN=0.
            if base.startswith("krex"):
                early = shape == "pool" or (base != "krex-late" and EARLY_JOIN)
                assert r["joined_early"] == early, (key, r["joined_early"])
            if r["join"] is not None:
                assert r["join"]["total_ms"] > 0 and 0 < b["join"] == r["join"]["total_ms"], key
            if mode.startswith("krex"):
                assert r["levels"] and all(lv.startswith("gate+drain") for lv in r["levels"]), \
                    (key, r["levels"])
                assert b["critical"] > 0 and b["exit"] >= 0 and b["pin"] >= 0
                assert all(("+pin" in lv) == (mode != "krex@KREX_PIN=0") for lv in r["levels"]), \
                    (key, r["levels"])
            else:
                assert not r["levels"] and "gate" not in b, key
        if mode.startswith("krex"):
            assert s["lock_busy"] > 0 and 0 < s["entry_exit_share_of_held"] < 1, key
            assert s["median_ms"]["gate"] is not None, key
        elif mode == "lock":
            assert s["lock_busy"] > 0 and s["median_ms"]["wait"] is not None, key
            assert s["median_ms"]["gate"] is None, key
        else:
            assert s["lock_busy"] == 0 and s["median_ms"]["wait"] is None, key
        if shape == "pool":
            assert s["pool"]["warm_s"] > 0, key
    assert res["solo_split_half"]["pairs"] == 12, res["solo_split_half"]
    assert "## The gap, split at the lock" in md
    assert "## Region steps" in md and "| 2-pool-krex | 16 |" in md, md
    for shape in ("run", "pool"):
        for mode in ("krex", "krex-held", "krex@KREX_PIN=0"):
            assert "| 2 | %s | %s | " % (shape, mode) in md.split("## The gap")[1], (shape, mode)
