#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tests lab/scripts/nvbench_inflation.py on synthetic nvbench JSON files laid
out as lab/scripts/nvbench_gpu.sh writes them (MODE-wI-EXAMPLE.json; the
summaries as nvbench's JSON printer writes them, krex's level among them)."""
import json
import os
import tempfile
import unittest

from script_json import run_json

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts",
                      "nvbench_inflation.py")


def summary(tag, value, kind="float64"):
    return {"tag": tag, "data": [{"name": "value", "type": kind, "value": str(value)}]}


def nvbench_json(times, level=None, skipped=()):
    """One benchmark 'copy' with a state per entry of `times` (seconds)."""
    states = []
    for i, t in enumerate(times):
        s = [summary("nv/cold/time/gpu/mean", t), summary("nv/cold/sample_size", 100, "int64")]
        if level is not None:
            s.append(summary("krex/level", level[i] if isinstance(level, list) else level, "string"))
        states.append({"name": "Device=0 N=%d" % i, "summaries": s, "is_skipped": i in skipped})
    return {"meta": {}, "devices": [], "benchmarks": [{"name": "copy", "states": states}]}


class NvbenchInflation(unittest.TestCase):
    def run_script(self, files):
        with tempfile.TemporaryDirectory() as d:
            for name, data in files.items():
                with open(os.path.join(d, name), "w") as f:
                    if isinstance(data, str):
                        f.write(data)
                    else:
                        json.dump(data, f)
            jp = os.path.join(d, "out.json")
            return run_json(SCRIPT, [d, "--workers", "2", "--json", jp], jp)

    def test_inflation_per_benchmark_and_overall(self):
        good = "gate+drain+freeze(cgroup2)+pin"
        p, out = self.run_script({
            "solo-w0-ex.json": nvbench_json([1e-3, 2e-3]),
            "solo-again-w0-ex.json": nvbench_json([1.01e-3, 2e-3]),
            "unprotected-w0-ex.json": nvbench_json([2e-3, 4e-3]),
            "unprotected-w1-ex.json": nvbench_json([3e-3, 2e-3]),
            "krex-w0-ex.json": nvbench_json([1e-3, 2.02e-3], [good, good]),
            "krex-w1-ex.json": nvbench_json([1e-3, 2e-3], [good, good + "-shared(1 foreign)"]),
            "wall-solo.txt": "10.0\n", "wall-unprotected.txt": "5.0\n", "wall-krex.txt": "12.5\n",
            "notes.txt": "not a run",
        })
        self.assertEqual(p.returncode, 0, p.stderr)
        b = out["benchmarks"]
        self.assertEqual(len(b), 1)
        self.assertEqual((b[0]["example"], b[0]["benchmark"]), ("ex", "copy"))
        self.assertEqual(b[0]["solo-again"]["n"], 2)
        self.assertAlmostEqual(b[0]["solo-again"]["max"], 1.0, places=6)
        # unprotected: +100%, +100%, +200%, 0% -> median 100, max 200
        self.assertEqual(b[0]["unprotected"]["n"], 4)
        self.assertAlmostEqual(b[0]["unprotected"]["median"], 100.0, places=6)
        self.assertAlmostEqual(b[0]["unprotected"]["max"], 200.0, places=6)
        # p95 by linear interpolation over [0, 100, 100, 200]: 185
        self.assertAlmostEqual(b[0]["unprotected"]["p95"], 185.0, places=6)
        self.assertAlmostEqual(b[0]["krex"]["max"], 1.0, places=6)
        self.assertEqual(out["krex_levels"]["states"], 4)
        self.assertEqual(out["krex_levels"]["not_fully_protected"], 1)
        self.assertIn("-shared(1 foreign)", out["krex_levels"]["examples"][0])
        self.assertIn("throughput, krex x2 vs one at a time: 1.60x; unprotected x2: 4.00x", p.stdout)
        self.assertIn("| **all states** |", p.stdout)

    def test_skipped_and_missing_states_are_left_out_and_counted(self):
        p, out = self.run_script({
            "solo-w0-ex.json": nvbench_json([1e-3, 2e-3]),
            "krex-w0-ex.json": nvbench_json([1e-3, 2e-3], "gate+drain", skipped=(1,)),
            "krex-w1-ex.json": "{not json",
        })
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(out["overall"]["krex"]["n"], 1)
        self.assertEqual(out["missing"]["krex"], 1)
        self.assertIn("krex-w1-ex.json unreadable", p.stderr)

    def test_no_solo_run_is_an_error_that_says_what_to_run(self):
        p, _ = self.run_script({"krex-w0-ex.json": nvbench_json([1e-3], "gate+drain")})
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("nvbench_gpu.sh solo", p.stderr)


    def test_foreign_processes_starting_or_ending(self):
        good = "gate+drain+freeze(cgroup2)+pin"
        shared = good + "-shared(1 foreign)"

        def with_reports(data, foreign):
            for st, pids in zip(data["benchmarks"][0]["states"], foreign):
                st["summaries"].append(summary("krex/report", json.dumps(
                    {"level": shared if pids else good, "foreign_pids": pids}), "string"))
            return data
        # Worker 0's example ran 10-20 s (pid 100). Foreign: pid 201 started at
        # 15 (starting), 202 ended at 12 (ending), 203 ran 5-30 (throughout),
        # 999 is no example process of the run.
        p, out = self.run_script({
            "solo-w0-ex.json": nvbench_json([1e-3, 2e-3, 3e-3]),
            "krex-w0-ex.json": with_reports(nvbench_json([1e-3, 2e-3, 3e-3], shared),
                                            [[201, 202], [203, 999], []]),
            "krex-w0-pids.txt": "100 ex start 10.0\n100 ex end 20.0\n",
            "krex-w1-pids.txt": "201 ex start 15.0\n201 ex end 40.0\n"
                                "202 other start 1.0\n202 other end 12.0\n"
                                "203 ex2 start 5.0\n203 ex2 end 30.0\n",
        })
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(out["foreign"], {"starting": 1, "ending": 1, "both": 0,
                                          "running throughout": 1,
                                          "not an example process": 1, "states": 2})
        self.assertIn("starting 1, ending 1", p.stdout)

if __name__ == "__main__":
    unittest.main()
