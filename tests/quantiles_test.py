#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/quantiles.py: the one quantile of the Python scripts. Checks its
values (the same ones tests/test_measure.cpp checks krex::measure's C++
statistics with) and that every script that reports quantiles uses it rather
than a copy of its own. Exits 1 on failure.

usage: quantiles_test.py [SOURCE_DIR]
"""
import importlib.util
import math
import os
import re
import sys
import unittest

ROOT = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import quantiles  # noqa: E402

USERS = ["lab/scripts/gbench_compare.py", "lab/scripts/cutlass_compare.py", "scripts/krex_compare.py",
         "bench/python/kernelbench_style.py", "bench/python/kernelbench_throughput.py",
         "bench/python/ray_bench.py", "lab/scripts/flip_forensics.py"]


def load(rel):
    spec = importlib.util.spec_from_file_location(
        "krex_q_" + re.sub(r"\W", "_", rel), os.path.join(ROOT, rel))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class Quantiles(unittest.TestCase):
    def test_linear_between_closest_ranks(self):
        q = quantiles.quantile
        v = list(range(101, 0, -1))  # 101..1, unsorted
        self.assertEqual(q(v, 0.5), 51)
        self.assertAlmostEqual(q(v, 0.05), 6)
        self.assertAlmostEqual(q(v, 0.95), 96)
        self.assertEqual(q(v, 0), 1)
        self.assertEqual(q(v, 1), 101)
        self.assertEqual(v[0], 101, "the caller's list keeps its order")
        self.assertAlmostEqual(q([1, 2], 0.5), 1.5)
        self.assertAlmostEqual(q([1, 2], 0.95), 1.95)
        self.assertEqual(q([7], 0.95), 7)
        self.assertTrue(math.isnan(q([], 0.5)))

    def test_every_script_uses_the_one_quantile(self):
        for rel in USERS:
            with self.subTest(script=rel):
                with open(os.path.join(ROOT, rel)) as f:
                    text = f.read()
                self.assertNotRegex(text, r"(?m)^def (quantile|percentile)\b",
                                    "a copy of its own")
                self.assertIs(load(rel).quantile, quantiles.quantile)

    def test_no_other_copy_in_scripts_bench_or_lab(self):
        for top in ("scripts", "bench", "lab"):
            for d, _, files in os.walk(os.path.join(ROOT, top)):
                for name in files:
                    path = os.path.join(d, name)
                    if not name.endswith(".py") or path == quantiles.__file__:
                        continue
                    with open(path) as f:
                        self.assertNotRegex(f.read(), r"(?m)^\s*def quantile\b", path)


if __name__ == "__main__":
    unittest.main()
