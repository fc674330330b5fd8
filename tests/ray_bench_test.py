#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/python/ray_bench.py's summary on synthetic results with known
answers: inflation per band against the reference's medians, flips of the
close set against the reference order, overlapping regions, throughput.
(The bench itself needs Ray, PyTorch and a GPU.) Exits 1 on failure.

usage: ray_bench_test.py [SOURCE_DIR]
"""
import importlib.util
import os
import sys
import unittest

ROOT = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
spec = importlib.util.spec_from_file_location("ray_bench", os.path.join(ROOT, "bench/python/ray_bench.py"))
rb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rb)
CLOSE = ["c0", "c1", "c2"]


def job(name, ms, enter=0, exit_=0, level="none", ok=True, n=10):
    return {"name": name, "samples_ms": [ms] * n, "ok": ok, "level": level, "enter_ns": enter, "exit_ns": exit_}


def solo():
    return [job("tiny", 0.05), job("c0", 1.0), job("c1", 1.1), job("c2", 1.2)]


class Summary(unittest.TestCase):
    def test_inflation_flips_and_throughput(self):
        runs = {"solo": {"results": solo(), "wall_s": 4.0},
                "unprotected": {"results": [job("tiny", 0.06), job("c0", 1.3), job("c1", 1.1), job("c2", 1.2)],
                                "wall_s": 1.0}}
        s = rb.summarize(runs, close=CLOSE)
        self.assertEqual(s["close_order"], CLOSE)
        u = s["modes"]["unprotected"]
        self.assertAlmostEqual(u["jobs_per_min"], 240.0)
        self.assertAlmostEqual(u["bands"]["<= 0.1 ms"]["cmd_max"], 20.0)
        self.assertEqual(u["bands"]["<= 0.1 ms"]["jobs"], 1)
        self.assertAlmostEqual(u["bands"]["> 1 ms"]["cmd_max"], 0.0)  # c1, c2 (c0 is 1.0 ms: not > 1 ms)
        self.assertAlmostEqual(u["bands"]["> 0.1 ms"]["cmd_max"], 30.0)  # c0 at 1.3 against 1.0
        self.assertEqual((u["flips"], u["pairs"]), (2, 3))  # c0 now slower than c1 and c2
        ref = s["modes"]["solo"]
        self.assertEqual((ref["flips"], ref["pairs"]), (0, 3))
        self.assertAlmostEqual(ref["bands"]["> 0.1 ms"]["cmd_p95"], 0.0)

    def test_rounds_pair_the_kth_run_of_each_candidate(self):
        again = solo() + [job("c0", 1.0), job("c1", 0.9), job("c2", 1.2)]
        s = rb.summarize({"solo": {"results": solo(), "wall_s": 1.0},
                          "krex": {"results": again, "wall_s": 1.0}}, close=CLOSE)
        self.assertEqual((s["modes"]["krex"]["flips"], s["modes"]["krex"]["pairs"]), (1, 6))

    def test_overlapping_regions_are_counted(self):
        k = [job("c0", 1.0, 0, 10, "gate+drain"), job("c1", 1.1, 10, 20, "gate+drain"),
             job("c2", 1.2, 15, 30, "gate+drain")]
        s = rb.summarize({"solo": {"results": solo(), "wall_s": 1.0}, "krex": {"results": k, "wall_s": 1.0}},
                         close=CLOSE)
        self.assertEqual(s["modes"]["krex"]["overlaps"], 1)
        self.assertEqual(s["modes"]["krex"]["levels"], {"gate+drain": 3})
        self.assertEqual(s["modes"]["solo"]["overlaps"], 0)  # level none: no regions
        self.assertIn("| krex, 8 actors |", rb.markdown(s, 8))

    def test_failed_checks_are_counted(self):
        s = rb.summarize({"solo": {"results": solo()[:1] + [job("c0", 1.0, ok=False)], "wall_s": 1.0}},
                         close=CLOSE)
        self.assertEqual(s["modes"]["solo"]["failed_checks"], 1)


if __name__ == "__main__":
    unittest.main()
