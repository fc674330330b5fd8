#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tests lab/scripts/kernelbench_levels.py's analysis on synthetic calls (no
GPU, no PyTorch): the draws' levels and the spread across draws against the
spread within a draw; the series' slow calls, their flush time, launch path
and steal, and the stretches of consecutive slow calls; and its user errors."""
import importlib.util
import os
import subprocess
import sys
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts",
                      "kernelbench_levels.py")
spec = importlib.util.spec_from_file_location("kernelbench_levels", SCRIPT)
kl = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kl)


def call(pid, draw, rnd, ms, cond="fresh", outside=100.0):
    return {"condition": cond, "pid": pid, "name": "%s_p.py" % pid, "draw": draw, "round": rnd,
            "median_ms": ms, "outside_us": outside}


class Levels(unittest.TestCase):
    def test_placement_spread_and_time_spread(self):
        # Draw 1 sits 3% high in every round (placement); draw 0 moves 1% between rounds (time).
        calls = [call("6", 0, 0, 1.00), call("6", 0, 1, 1.01), call("6", 1, 0, 1.03),
                 call("6", 1, 1, 1.03), call("6", 2, 0, 1.00), call("6", 2, 1, 1.00)]
        (row,) = kl.analyze(calls)
        self.assertEqual(row["draws"], 3)
        self.assertEqual(row["calls"], 6)
        ref = 1.005  # the median of the six calls
        self.assertAlmostEqual(row["median_ms"], ref)
        self.assertAlmostEqual(row["across_draws_pct"], 100 * (1.03 - 1.00) / ref)
        self.assertAlmostEqual(row["within_draw_max_pct"], 100 * 0.01 / ref)
        self.assertAlmostEqual(row["within_draw_median_pct"], 0.0)
        self.assertEqual(len(row["draw_levels_pct"]), 3)
        self.assertGreater(row["draw_levels_pct"][-1], 2.0)

    def test_conditions_apart_fresh_first(self):
        calls = [call("10", 0, 0, 2.0, cond="fragmented 40 GB"), call("10", 0, 0, 1.0),
                 call("6", 0, 0, 1.0)]
        rows = kl.analyze(calls)
        self.assertEqual([(r["condition"], r["pid"]) for r in rows],
                         [("fresh", "6"), ("fresh", "10"), ("fragmented 40 GB", "10")])
        self.assertIsNone(rows[0]["within_draw_max_pct"])  # one round: no spread in time
        self.assertIn("| fragmented 40 GB | 10_p |", kl.markdown(rows, {"command": "x"}))


def scall(pid, t, ms, flush=0.06, launch=20.0, steal=0.0):
    return {"pid": pid, "name": "%s_p.py" % pid, "t": t, "wall_s": 0.5, "median_ms": ms,
            "flush_ms": flush, "launch_us": launch, "steal_ms": steal}


class Series(unittest.TestCase):
    def test_slow_calls_and_stretches(self):
        # Problem 16 at 2.0 ms, slow (+3%) at t = 2 and 3 with a slower flush; problem 12 never.
        calls = []
        for t in range(6):
            slow = t in (2, 3)
            calls.append(scall("16", 2 * t, 2.06 if slow else 2.0, flush=0.09 if slow else 0.06))
            calls.append(scall("12", 2 * t + 1, 0.054, launch=15.0))
        rows, spans = kl.analyze_series(calls)
        r16, r12 = rows
        self.assertEqual((r16["pid"], r16["slow"], r12["slow"]), ("16", 2, 0))
        self.assertAlmostEqual(r16["max_pct"], 3.0, places=6)
        self.assertEqual(r16["flush_ms"], (0.09, 0.06))
        self.assertEqual(r12["flush_ms"], (None, 0.06))
        self.assertEqual(r12["launch_us"], (None, 15.0))
        # The two slow calls are apart in the series (a call of 12 between them).
        self.assertEqual([s["calls"] for s in spans], [1, 1])
        self.assertEqual(spans[0]["from_s"], 4.0)
        md = kl.markdown_series(rows, spans, {"command": "x"})
        self.assertIn("| 16_p | 6 | 2.0000 | 2 | +3.00% | 0.0900 / 0.0600 |", md)
        self.assertIn("Stretches of consecutive slow calls (seconds into the series): 2", md)

    def test_stretch_of_consecutive_slow_calls(self):
        calls = [scall("1", t, 1.0) for t in range(4)] + [scall("1", 4 + t, 1.05) for t in range(3)]
        calls += [scall("1", 7, 1.0)]
        calls.append(scall("1", 8, 1.0, steal=None))
        rows, spans = kl.analyze_series(calls)
        self.assertEqual(rows[0]["slow"], 3)
        self.assertEqual(rows[0]["steal_ms"], (0.0, 0.0))  # a call without steal is left out
        self.assertEqual(len(spans), 1)
        self.assertEqual((spans[0]["calls"], spans[0]["from_s"], spans[0]["to_s"]), (3, 4.0, 6.5))
        self.assertIn("- 4.0-6.5 s: 3 calls, problems 1", kl.markdown_series(rows, spans, {"command": "x"}))


class Segments(unittest.TestCase):
    def test_host_slow_calls_per_segment(self):
        # Launch path 20 us normally; 50 us (2.5x, host-slow) for two calls while burning,
        # one of them slow (+3%).
        calls = []
        for i, seg in enumerate(["idle"] * 4 + ["burn"] * 4 + ["after"] * 4):
            host_slow = i in (5, 6)
            c = scall("16", i, 2.06 if i == 5 else 2.0, launch=50.0 if host_slow else 20.0)
            c.update(segment=seg, probe_us=900.0 if host_slow else 300.0)
            calls.append(c)
        kl.analyze_series(calls)
        segs = kl.analyze_segments(calls)
        self.assertEqual([g["segment"] for g in segs], ["idle", "burn", "after"])
        burn = segs[1]
        self.assertEqual((burn["calls"], burn["host_slow"], burn["slow_in_host_slow"],
                          burn["slow_in_others"]), (4, 2, 1, 0))
        self.assertEqual((burn["probe_us"], burn["probe_us_host_slow"]), (600.0, 900.0))
        self.assertEqual((segs[0]["host_slow"], segs[0]["probe_us_host_slow"]), (0, None))
        md = kl.markdown_series(*kl.analyze_series(calls), {"command": "x"}, segments=segs)
        self.assertIn("| burn | 4 | 2 | 1 | 0 | 600 / 900 |", md)

    def test_without_probes(self):
        # A series recorded before the CPU probe existed: no probe_us, one segment.
        calls = [scall("1", t, 1.0, launch=80.0 if t == 3 else 20.0) for t in range(6)]
        kl.analyze_series(calls)
        (seg,) = kl.analyze_segments(calls)
        self.assertEqual((seg["segment"], seg["host_slow"], seg["probe_us"],
                          seg["probe_us_host_slow"]), ("idle", 1, None, None))


class Errors(unittest.TestCase):
    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True,
                              timeout=60)

    def test_bad_counts(self):
        for flag in ("--draws", "--rounds", "--trials"):
            r = self.run_script("--kernelbench", "x", "--out", "y", flag, "0")
            self.assertEqual(r.returncode, 2)
            self.assertIn("%s must be at least 1" % flag, r.stderr)
        r = self.run_script("--kernelbench", "x", "--out", "y", "--burn", "2")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--burn must be 0 or more, and only with --series", r.stderr)
        for flag in ("--fragment", "--series"):
            r = self.run_script("--kernelbench", "x", "--out", "y", flag, "-1")
            self.assertEqual(r.returncode, 2)
            self.assertIn("%s must be 0 or more" % flag, r.stderr)


if __name__ == "__main__":
    unittest.main()
