#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tests lab/scripts/kernelbench_real.py's analysis on synthetic worker
results (no GPU, no PyTorch): inflation over the solo median per problem,
throughput against one worker, region levels, and who the foreign processes
of "-shared" regions were; and the driver's user errors."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts",
                      "kernelbench_real.py")
spec = importlib.util.spec_from_file_location("kernelbench_real", SCRIPT)
kr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kr)


def worker(pid, medians, t_started=0.0, t_done=100.0, calls_extra=None, name="p"):
    """A worker result: {problem: [median per call]}, calls at t0 = 10, 11, ..."""
    problems, t = {}, 10.0
    for prob, ms in medians.items():
        calls = []
        for m in ms:
            c = {"t0": t, "t1": t + 0.5, "median_ms": m}
            c.update((calls_extra or {}).get((prob, len(calls)), {}))
            calls.append(c)
            t += 1
        problems[prob] = {"name": "%s_%s.py" % (prob, name), "calls": calls, "correct": True}
    return {"pid": pid, "t_started": t_started, "t_done": t_done, "problems": problems,
            "patched": True, "import": "source (x)", "status": 0}


FULL = {"level": "gate+drain+freeze(cgroup2)+quiet+pin", "foreign_pids": [], "lock_ms": 0.0}


class Analysis(unittest.TestCase):
    def test_inflation_throughput_levels_and_foreign_processes(self):
        solo = [worker(1, {"a": [1.0, 1.0, 1.0], "b": [2.0, 2.0, 2.0]})]
        again = [worker(2, {"a": [1.01, 0.99, 1.0], "b": [2.0, 2.02, 2.0]})]
        unprot = [worker(10 + i, {"a": [2.0, 3.0, 2.0], "b": [2.0, 4.0, 2.0]}) for i in range(2)]
        # krex: worker 21 ran from t = 11 to 12.5. Worker 20's first call on "a"
        # (entered at 10) saw it before its first line; its second (t0 = 11, entered
        # after 2 s of lock wait: 13) and its first on "b" (13) after it was done;
        # that one also saw a process outside the run (pid 99).
        extra20 = {("a", 0): dict(FULL, level=FULL["level"] + "-shared(1 foreign)",
                                  foreign_pids=[21]),
                   ("a", 1): dict(FULL, level=FULL["level"] + "-shared(1 foreign)",
                                  foreign_pids=[21], lock_ms=2000.0),
                   ("b", 0): dict(FULL, level=FULL["level"] + "-shared(2 foreign)",
                                  foreign_pids=[21, 99])}
        for k in [("a", 2), ("b", 1), ("b", 2)]:
            extra20[k] = FULL
        extra21 = {(p, i): FULL for p in "ab" for i in range(3)}
        krex = [worker(20, {"a": [1.0, 1.02, 1.0], "b": [2.0, 2.0, 2.1]}, calls_extra=extra20),
                worker(21, {"a": [1.0, 1.0, 1.0], "b": [2.0, 2.0, 2.0]}, t_started=11.0,
                       t_done=12.5, calls_extra=extra21)]
        phases = {"solo": {"results": solo, "wall": 6.0, "workers": 1},
                  "solo-again": {"results": again, "wall": 6.0, "workers": 1},
                  "unprotected-2": {"results": unprot, "wall": 6.0, "workers": 2},
                  "krex-2": {"results": krex, "wall": 8.0, "workers": 2}}
        a = kr.analyze(phases)
        self.assertEqual(a["solo_ms"], {"a": 1.0, "b": 2.0})
        u = a["phases"]["unprotected-2"]
        self.assertAlmostEqual(u["inflation_pct"]["max"], 200.0)      # 3.0 ms / 1.0 ms
        self.assertAlmostEqual(u["per_problem_pct"]["b"]["max"], 100.0)
        self.assertAlmostEqual(u["throughput_x_solo"], 2.0)          # 12 calls in 6 s vs 6 in 6 s
        self.assertEqual(u["levels"], {})
        k = a["phases"]["krex-2"]
        self.assertAlmostEqual(k["throughput_x_solo"], 1.5)
        self.assertAlmostEqual(k["inflation_pct"]["max"], 5.0)       # 2.1 / 2.0
        self.assertEqual(k["shared_regions"], 3)
        self.assertEqual(sum(k["levels"].values()), 12)
        self.assertEqual(k["foreign_seen"], {
            "a worker before its first line": 1,
            "a worker after its last timing call (exiting)": 2,
            "not a worker of this run": 1})
        self.assertAlmostEqual(a["phases"]["solo-again"]["inflation_pct"]["max"], 1.0)
        md = kr.markdown(a, {"method": "cuda_event", "trials": 100, "reps": 3})
        self.assertIn("| krex-2 | 2 | 8.0 s | 1.50x |", md)
        self.assertIn("not a worker of this run: 1", md)
        self.assertIn("| a_p.py | 1.000 |", md)

    def test_against_the_serial_phase_s_median(self):
        # The solo process landed slow on "a" (1.05); the serial phase's four
        # calls put its median at 1.0, and krex's 1.04 reads +4% against it.
        solo = [worker(1, {"a": [1.05, 1.05], "b": [2.0, 2.0]})]
        serial = [worker(10, {"a": [1.0, 1.0], "b": [2.0, 2.0]}),
                  worker(11, {"a": [1.0, 1.05], "b": [2.0, 2.0]})]
        krex = [worker(20, {"a": [1.04, 1.0], "b": [2.0, 2.0]})]
        phases = {"solo": {"results": solo, "wall": 4.0, "workers": 1},
                  "serial-2": {"results": serial, "wall": 8.0, "workers": 2},
                  "krex-2": {"results": krex, "wall": 4.0, "workers": 2}}
        a = kr.analyze(phases)
        ag = a["against_serial"]
        self.assertEqual(ag["reference"], "serial-2")
        self.assertAlmostEqual(ag["phases"]["krex-2"]["max"], 4.0)
        self.assertEqual(ag["phases"]["krex-2"]["over_2pct"], 1)
        self.assertEqual(ag["phases"]["serial-2"]["over_2pct"], 1)    # its own 1.05
        self.assertAlmostEqual(ag["phases"]["solo"]["median"], 2.5)   # 1.05 x2, 2.0 x2
        # Against solo, krex's "a" reads below it: the reference moved, not krex.
        self.assertLess(a["phases"]["krex-2"]["per_problem_pct"]["a"]["median"], 0)
        md = kr.markdown(a, {"method": "cuda_event", "trials": 100, "reps": 2})
        self.assertIn("Against serial-2's median of each problem", md)
        self.assertIn("| krex-2 | 4 | +0.00% |", md)
        self.assertIsNone(kr.analyze({"solo": phases["solo"],
                                      "krex-2": phases["krex-2"]})["against_serial"])

    def test_solo_from_reuses_an_earlier_serial_phase(self):
        # --modes serial with --solo-from a run that has serial-2: no worker
        # starts, and the report compares against the reused serial phase.
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "KernelBench", "level1"))
            for prob in ("1_Square", "2_Other"):
                open(os.path.join(d, "KernelBench", "level1", prob + ".py"), "w").close()
            raw = {"solo": [worker(1, {"1": [1.0, 1.0], "2": [2.0, 2.0]})],
                   "solo-again": [worker(2, {"1": [1.0, 1.01], "2": [2.0, 2.0]})],
                   "serial-2": [worker(3, {"1": [1.0, 1.0], "2": [2.0, 2.0]}),
                                worker(4, {"1": [1.03, 1.0], "2": [2.0, 2.0]})]}
            old = {"raw": raw, "analysis": {
                "config": {"problems": "1,2", "method": "cuda_event", "trials": 100},
                "walls": {"solo": 4.0, "solo-again": 4.0, "serial-2": 8.0}}}
            path = os.path.join(d, "old.json")
            with open(path, "w") as f:
                json.dump(old, f)
            out = os.path.join(d, "out")
            p = subprocess.run([sys.executable, SCRIPT, "--kernelbench", d, "--problems", "1,2",
                                "--workers", "2", "--modes", "serial", "--solo-from", path,
                                "--out", out], capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("serial-2: taken from", p.stdout)
            self.assertNotIn("worker(s) started", p.stdout)
            with open(os.path.join(out, "kernelbench_real.md")) as f:
                md = f.read()
        self.assertIn("Against serial-2's median of each problem", md)
        self.assertIn("| serial-2 | 8 | +0.00% |", md)
        self.assertIn("100 trials per call, 2 calls", md)  # one placement: said as before

    def test_over_placements_splits_the_trials_over_copies_behind_spacers(self):
        import types
        events = []

        class Tensor:
            def clone(self):
                events.append("clone")
                return Tensor()
        fake = types.ModuleType("torch")
        fake.Tensor, fake.uint8 = Tensor, "uint8"
        fake.empty = lambda n, dtype=None, device=None: events.append(("empty", n, device))
        fake.cuda = types.SimpleNamespace(empty_cache=lambda: events.append("empty_cache"))
        calls = []

        def timing(kernel_fn, args, num_warmup=3, num_trials=10, **kw):
            calls.append((args, num_trials, num_warmup, kw))
            return [float(len(calls))] * num_trials
        x = Tensor()
        saved = sys.modules.get("torch")
        sys.modules["torch"] = fake
        try:
            times = kr.over_placements(timing, 4)(None, [x, 7], num_warmup=2, num_trials=10,
                                                  device="cuda:0")
        finally:
            if saved is None:
                del sys.modules["torch"]
            else:
                sys.modules["torch"] = saved
        self.assertEqual(times, [1.0] * 3 + [2.0] * 3 + [3.0] * 2 + [4.0] * 2)
        self.assertEqual([c[1] for c in calls], [3, 3, 2, 2])
        self.assertIs(calls[0][0][0], x)  # placement 0: the caller's tensors
        for args, _, warmup, kw in calls[1:]:
            self.assertIsNot(args[0], x)
            self.assertEqual((args[1], warmup, kw), (7, 2, {"device": "cuda:0"}))
        step = kr.PLACEMENT_STEP
        self.assertEqual(events, [e for p in (1, 2, 3)
                                  for e in ("empty_cache", ("empty", p * step, "cuda:0"), "clone")])

    def test_placements_are_checked_and_must_match_a_reused_run(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "KernelBench", "level1"))
            open(os.path.join(d, "KernelBench", "level1", "1_Square.py"), "w").close()
            base = [sys.executable, SCRIPT, "--kernelbench", d, "--problems", "1", "--out", d]
            p = subprocess.run(base + ["--placements", "0"], capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("--placements: 1 to 64", p.stderr)
            p = subprocess.run(base + ["--smi-ms", "5"], capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("--smi-ms: 0 (off) or 10 and more", p.stderr)
            old = {"raw": {"solo": [worker(1, {"1": [1.0]})]}, "analysis": {
                "config": {"problems": "1", "method": "cuda_event", "trials": 100},
                "walls": {"solo": 4.0}}}
            path = os.path.join(d, "old.json")
            with open(path, "w") as f:
                json.dump(old, f)
            p = subprocess.run(base + ["--placements", "8", "--solo-from", path],
                               capture_output=True, text=True, timeout=60)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("trials or placements differ", p.stderr)
        md = kr.markdown(kr.analyze({"solo": {"results": [worker(1, {"1": [1.0]})],
                                              "wall": 1.0, "workers": 1}}),
                         {"method": "cuda_event", "trials": 100, "reps": 2, "placements": 8})
        self.assertIn("# The real KernelBench: cuda_event, 100 trials per call over 8 placements,",
                      md)

    def test_the_held_mode_s_memory_holder(self):
        # A stand-in torch: the holder allocates mixed chunks to twice its
        # share, keeps every other one, says what it holds, waits for a line.
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "torch"))
            with open(os.path.join(d, "torch", "__init__.py"), "w") as f:
                f.write("uint8 = 'uint8'\n"
                        "class _T:\n"
                        "    def __init__(self, n): self.n = n\n"
                        "    def numel(self): return self.n\n"
                        "    def fill_(self, v): return self\n"
                        "def empty(n, dtype=None, device=None): return _T(n)\n"
                        "class cuda:\n"
                        "    set_device = staticmethod(lambda i: None)\n"
                        "    synchronize = staticmethod(lambda: None)\n"
                        "    empty_cache = staticmethod(lambda: None)\n")
            env = dict(os.environ, PYTHONPATH=d)
            p = kr.Proc([sys.executable, SCRIPT, "--ballast", "--index", "3",
                         "--ballast-gb", "1"], env)
            held = json.loads(p.line("holding ", time.monotonic() + 30))
            self.assertIsNone(p.p.poll())            # holds until told
            p.send("")
            self.assertEqual(p.p.wait(timeout=20), 0)
        self.assertGreater(held["chunks"], 1)
        self.assertGreater(held["bytes"], 0.5 * 2**30)   # about half of twice 1 GB
        self.assertLess(held["bytes"], 1.5 * 2**30)
        self.assertEqual(kr.parse_mode("held"), ("held", {}))
        self.assertEqual(kr.phase_name("held", 8), "held-8")

    def test_preparation_and_flock_wait(self):
        solo = [worker(1, {"a": [1.0], "b": [2.0]})]
        lock = [worker(2, {"a": [1.0], "b": [2.0]},
                       calls_extra={("a", 0): {"flock_ms": 300.0}, ("b", 0): {"flock_ms": 100.0}})]
        for r, (pa, pb) in ((solo[0], (1.0, 3.0)), (lock[0], (2.0, 6.0))):
            r["problems"]["a"].update(t_loaded=10.0, t_ready=10.0 + pa)
            r["problems"]["b"].update(t_loaded=20.0, t_ready=20.0 + pb)
        a = kr.analyze({"solo": {"results": solo, "wall": 10.0, "workers": 1},
                        "lock-1": {"results": lock, "wall": 10.0, "workers": 1}})
        p = a["phases"]["lock-1"]
        self.assertEqual(p["prep_s"]["n"], 2)
        self.assertAlmostEqual(p["prep_s"]["sum"], 8.0)
        self.assertAlmostEqual(p["prep_s"]["max"], 6.0)
        self.assertAlmostEqual(p["flock_wait_s"], 0.4)
        md = kr.markdown(a, {"method": "cuda_event", "trials": 100, "reps": 1})
        self.assertIn("| lock-1 | 2 | ", md)
        self.assertIn("| 8.0 | 0.4 |", md)

    def test_clocks_at_the_regions_exits(self):
        solo = [worker(1, {"a": [1.0, 1.0]})]
        ck = {("a", 0): dict(FULL, report={"clocks_exit": {"sm_mhz": 1980, "power_mw": 300000,
                                                           "reasons": 0}}),
              ("a", 1): dict(FULL, report={"clocks_exit": {"sm_mhz": 1500, "power_mw": 700000,
                                                           "reasons": 4}})}
        krex = [worker(2, {"a": [1.0, 1.1]}, calls_extra=ck)]
        a = kr.analyze({"solo": {"results": solo, "wall": 10.0, "workers": 1},
                        "krex-1": {"results": krex, "wall": 10.0, "workers": 1}})
        c = a["phases"]["krex-1"]["clocks_exit"]
        self.assertEqual((c["n"], c["throttled"], c["sm_mhz_min"]), (2, 1, 1500.0))
        self.assertAlmostEqual(c["power_w"]["max"], 700.0)
        self.assertIsNone(a["phases"]["krex-1"]["prep_s"])
        md = kr.markdown(a, {"method": "cuda_event", "trials": 100, "reps": 2})
        self.assertIn("| krex-1 | 2 | 1740 / 1500 | 500 / 700 | 1 |", md)

    def test_a_worker_foreign_while_running_is_named(self):
        w = {7: {"t_started": 1.0, "t_done": 9.0}}
        self.assertEqual(kr.classify_foreign(7, 5.0, w), "a worker while running")
        self.assertEqual(kr.classify_foreign(8, 5.0, w), "not a worker of this run")


class BodyClocks(unittest.TestCase):
    CSV = ("2026/12/04 05:00:00.000, 1980, 3201, 450.10, 50, 60, 0x0000000000000000\n"
           "2026/12/04 05:00:00.050, 1755, 3201, 690.00, 51, 61, 0x0000000000000004\n"
           "not a sample\n"
           "2026/12/04 05:00:00.100, 1980, 3201, [N/A], 52, [N/A], 0x0000000000000001\n"
           "2026/12/04 05:00:00.150, 1980, 3201, 400.00, 50, 60, 0x0000000000000000\n")

    def samples(self):
        import datetime
        wall0 = datetime.datetime(2026, 12, 4, 5, 0, 0).timestamp()
        return kr.parse_smi(self.CSV, (wall0, 100.0))  # monotonic 100.0 at 05:00:00

    def test_nvidia_smi_lines_become_samples_on_the_workers_clock(self):
        s = self.samples()
        self.assertEqual(len(s), 4)
        self.assertAlmostEqual(s[1]["t"], 100.05, places=3)
        self.assertEqual((s[1]["sm"], s[1]["power"], s[1]["reasons"]), (1755, 690.0, 4))
        self.assertIsNone(s[2]["power"])
        self.assertIsNone(s[2]["mem_temp"])

    def test_what_a_call_saw_and_slow_calls_against_the_others(self):
        s = self.samples()
        b = kr.body_clocks(s, 100.04, 100.11)  # the 2nd and 3rd samples
        self.assertEqual(b["samples"], 2)
        self.assertEqual((b["sm_min"], b["reasons"], b["temp_max"], b["mem_temp_max"]),
                         (1755, 4, 52, 61))  # the idle bit (0x1) is left out
        self.assertAlmostEqual(b["power_mean"], 690.0)
        self.assertIsNone(kr.body_clocks(s, 200.0, 201.0))
        quiet = kr.body_clocks(s, 100.14, 100.16)
        self.assertEqual(quiet["reasons"], 0)
        w = worker(1, {"1": [1.05, 1.0]}, calls_extra={("1", 0): {"body_clocks": b},
                                                       ("1", 1): {"body_clocks": quiet}})
        phases = {"solo": {"results": [worker(2, {"1": [1.0, 1.0]})], "wall": 2.0, "workers": 1},
                  "krex-1": {"results": [w], "wall": 2.0, "workers": 1}}
        a = kr.analyze(phases)
        g = a["body_clocks"]["krex-1"]
        self.assertEqual((g["slow"]["calls"], g["slow"]["throttled"], g["slow"]["reasons"]),
                         (1, 1, ["0x4"]))
        self.assertEqual((g["other"]["calls"], g["other"]["throttled"], g["other"]["sm_min_min"]),
                         (1, 0, 1980))
        self.assertNotIn("solo", a["body_clocks"])  # no samples there
        md = kr.markdown(a, {"method": "cuda_event", "trials": 100, "reps": 2})
        self.assertIn("| krex-1, slow | 1 | 1755 / 1755 | 1 (0x4) | 690 | 52 / 61 |", md)
        self.assertIn("| krex-1, other | 1 | 1980 / 1980 | 0 | 400 | 50 / 60 |", md)

    def test_host_time_outside_the_timed_window(self):
        # 10 calls of kernel_fn per timing call. Problem 1: a fast call with a
        # 10.5 ms body at a 1.0 ms mean (50 us of host time per call) and a
        # slow one (+5%) with a 11.5 ms body at 1.05 ms (100 us); solo's call
        # took 10.2 ms (no region: t1 - t0) at 1.0 ms (20 us).
        w = worker(1, {"1": [1.0, 1.05]}, calls_extra={
            ("1", 0): {"mean_ms": 1.0, "body_ms": 10.5},
            ("1", 1): {"mean_ms": 1.05, "body_ms": 11.5}})
        solo = worker(2, {"1": [1.0]}, calls_extra={("1", 0): {"mean_ms": 1.0}})
        solo["problems"]["1"]["calls"][0]["t1"] = solo["problems"]["1"]["calls"][0]["t0"] + 0.0102
        phases = {"solo": {"results": [solo], "wall": 1.0, "workers": 1},
                  "krex-1": {"results": [w], "wall": 1.0, "workers": 1}}
        a = kr.analyze(phases, per_call=10)
        h = a["host_time"]
        self.assertAlmostEqual(h["solo"]["median_us"], 20.0, places=3)
        self.assertEqual((h["krex-1"]["problems_with_slow"], h["krex-1"]["slow_calls"],
                          h["krex-1"]["other_calls"]), (1, 1, 1))
        self.assertAlmostEqual(h["krex-1"]["slow_us"], 100.0, places=3)
        self.assertAlmostEqual(h["krex-1"]["other_us"], 50.0, places=3)
        md = kr.markdown(a, {"method": "cuda_event", "trials": 8, "reps": 2})
        self.assertIn("| krex-1 | 75 | 1 | 1 | 1 | 100 | 50 |", md)
        self.assertIn("| solo | 20 | 0 | 0 | 0 | - | - |", md)
        self.assertNotIn("host_time", kr.analyze(phases))  # no per_call: no table

    def test_the_churn_mode(self):
        self.assertEqual(kr.parse_mode("churn"), ("churn", {}))
        self.assertEqual(kr.phase_name("churn", 8), "churn-8")
        with self.assertRaises(ValueError):
            kr.parse_mode("churn@KREX_PIN=0")


class UserErrors(unittest.TestCase):
    def test_a_path_that_is_no_kernelbench_checkout_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run([sys.executable, SCRIPT, "--kernelbench", d, "--out", d],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("not a KernelBench checkout", p.stderr)

    def test_an_unknown_problem_is_refused(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "KernelBench", "level1"))
            open(os.path.join(d, "KernelBench", "level1", "1_Square.py"), "w").close()
            p = subprocess.run([sys.executable, SCRIPT, "--kernelbench", d, "--problems", "1,777",
                                "--out", d], capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("level-1 problem 777 not found", p.stderr)

    def test_modes_lock_and_krex_with_settings(self):
        self.assertEqual(kr.parse_mode("lock"), ("lock", {}))
        self.assertEqual(kr.parse_mode("krex@KREX_HANDOFF_GRACE_MS=20@KREX_FREEZE=none"),
                         ("krex", {"KREX_HANDOFF_GRACE_MS": "20", "KREX_FREEZE": "none"}))
        self.assertEqual(kr.phase_name("krex@KREX_FREEZE=none", 8), "krex-8@KREX_FREEZE=none")
        self.assertEqual(kr.phase_name("lock", 16), "lock-16")
        for bad in ("mutex", "unprotected@KREX_FREEZE=none", "krex@FREEZE=none", "krex@KREX_X"):
            with self.assertRaises(ValueError, msg=bad):
                kr.parse_mode(bad)
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "KernelBench", "level1"))
            open(os.path.join(d, "KernelBench", "level1", "1_Square.py"), "w").close()
            p = subprocess.run([sys.executable, SCRIPT, "--kernelbench", d, "--problems", "1",
                                "--modes", "krex,fast", "--out", d],
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--modes: mode 'fast'", p.stderr)



class Timeline(unittest.TestCase):
    def test_held_bodies_gaps_steps_and_the_rest(self):
        # Two workers from t = 0 to 10. Calls (t0, t1, lock ms, body ms, steps):
        # A: 1.0-2.0, no wait, body 600 ms, gate 50 + quiet 100 (+ its wait 80, not
        #    counted twice) + exit 50: rest 1000 - 600 - 200 = 200 ms.
        # B: 1.5-3.0, waited 500 ms: holds from 2.0 to 3.0 (right after A), body 800.
        # A: 5.0-5.5, no wait: a 2 s gap after B; body 300.
        steps = {"gate_ms": 50.0, "drain_ms": 0.0, "freeze_ms": 0.0, "quiet_ms": 100.0,
                 "quiet_wait_ms": 80.0, "pin_ms": 0.0, "exit_ms": 50.0}
        a = {"pid": 1, "t_started": 0.0, "t_done": 10.0, "problems": {"p": {"calls": [
            dict(steps, t0=1.0, t1=2.0, lock_ms=0.0, body_ms=600.0),
            dict(steps, t0=5.0, t1=5.5, lock_ms=0.0, body_ms=300.0)]}}}
        b = {"pid": 2, "t_started": 0.5, "t_done": 9.0, "problems": {"p": {"calls": [
            dict(steps, t0=1.5, t1=3.0, lock_ms=500.0, body_ms=800.0)]}}}
        t = kr.timeline([a, b])
        self.assertAlmostEqual(t["span_s"], 10.0)
        self.assertAlmostEqual(t["held_s"], 2.5)  # 1.0-3.0 and 5.0-5.5
        self.assertAlmostEqual(t["bodies_s"], 1.7)
        self.assertAlmostEqual(t["before_first_s"], 1.0)
        self.assertAlmostEqual(t["between_s"], 2.0)
        self.assertEqual(t["handoffs"], 1)
        self.assertAlmostEqual(t["after_last_s"], 4.5)
        self.assertTrue(t["steps_recorded"])
        # The rest: A's first 1000 - 0 - 600 - 200 = 200 ms; B's 1500 - 500 - 800 -
        # 200 = 0; A's second 500 - 0 - 300 - 200 = 0.
        rest = t["per_call"]["rest_ms"]
        self.assertAlmostEqual(rest["median_ms"], 0.0, places=6)
        self.assertAlmostEqual(rest["sum_s"], 0.2)
        self.assertAlmostEqual(t["per_call"]["quiet_ms"]["sum_s"], 0.3)

    def test_a_run_without_steps_folds_them_into_the_rest(self):
        a = {"pid": 1, "t_started": 0.0, "t_done": 3.0, "problems": {"p": {"calls": [
            {"t0": 1.0, "t1": 2.0, "lock_ms": 100.0, "body_ms": 700.0}]}}}
        t = kr.timeline([a])
        self.assertFalse(t["steps_recorded"])
        self.assertNotIn("gate_ms", t["per_call"])
        self.assertAlmostEqual(t["per_call"]["rest_ms"]["sum_s"], 0.2)
        self.assertIsNone(kr.timeline([{"pid": 1, "t_started": 0.0, "problems": {
            "p": {"calls": [{"t0": 1.0, "t1": 2.0, "median_ms": 1.0}]}}}]))


class Driver(unittest.TestCase):
    """The driver's reading of its workers (kr.Proc): lines that arrive
    together, a worker that exits, and a late one's stacks."""

    def child(self, body):
        d = tempfile.mkdtemp()
        path = os.path.join(d, "child.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(body)
        return d, [sys.executable, path]

    def test_lines_in_one_write_are_all_read(self):
        _, cmd = self.child("import sys\nsys.stdout.write('started {}\\nready\\n')\n"
                            "sys.stdout.flush()\nsys.stdin.readline()\n")
        p = kr.Proc(cmd, dict(os.environ))
        self.assertEqual(p.line("ready", time.monotonic() + 20), "")
        p.send("go")
        p.p.wait(timeout=20)

    def test_a_worker_that_exits_is_named(self):
        _, cmd = self.child("import sys\nprint('started {}', flush=True)\nsys.exit(3)\n")
        p = kr.Proc(cmd, dict(os.environ))
        with self.assertRaisesRegex(RuntimeError, r"exited \(status 3\) before 'ready'"):
            p.line("ready", time.monotonic() + 20)

    def test_a_late_worker_s_stacks_are_in_the_error(self):
        d, cmd = self.child(
            "import faulthandler, signal, sys, time\n"
            "log = open(sys.argv[1], 'a', buffering=1)\n"
            "faulthandler.register(signal.SIGUSR1, file=log, all_threads=True)\n"
            "print('started {}', flush=True)\n"
            "def stuck_here():\n    time.sleep(60)\n"
            "stuck_here()\n")
        log = os.path.join(d, "w.log")
        p = kr.Proc(cmd + [log], dict(os.environ), log)
        try:
            with self.assertRaisesRegex(RuntimeError, r"(?s)no 'ready' line in time.*stuck_here"):
                p.line("ready", time.monotonic() + 1.5)
        finally:
            p.p.kill()
            p.p.wait(timeout=20)

    def test_the_serial_mode_runs_each_worker_alone_in_turn(self):
        # Each stand-in worker reports when it started and finished; the serial
        # mode must start worker i+1 only after worker i exited, with i's index.
        _, cmd = self.child(
            "import json, sys, time\n"
            "i = int(sys.argv[sys.argv.index('--index') + 1])\n"
            "t = time.monotonic()\n"
            "print('ready', flush=True)\n"
            "sys.stdin.readline()\n"
            "time.sleep(0.2)\n"
            "print('result ' + json.dumps({'pid': i, 't_started': t, 't_done': time.monotonic(),"
            " 'problems': {}}), flush=True)\n")
        with tempfile.TemporaryDirectory() as logs:
            def start(i):
                log = os.path.join(logs, "w%d.log" % i)
                return kr.Proc(cmd + ["--index", str(i), "--log", log], dict(os.environ), log)

            class Args:
                linger = False
            res, wall = kr.run_serial(Args, start, 3, time.monotonic() + 30)
        self.assertEqual([r["pid"] for r in res], [0, 1, 2])
        self.assertEqual([r["status"] for r in res], [0, 0, 0])
        for a, b in zip(res, res[1:]):
            self.assertGreaterEqual(b["t_started"], a["t_exit"])
        self.assertGreaterEqual(wall, 0.6)
        self.assertEqual(kr.parse_mode("serial"), ("serial", {}))
        self.assertEqual(kr.phase_name("serial", 8), "serial-8")
        with self.assertRaises(ValueError):
            kr.parse_mode("serial@KREX_PIN=0")


if __name__ == "__main__":
    unittest.main()
