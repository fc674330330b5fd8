#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/krex_compare.py on synthetic inputs whose significance is known:
the Mann-Whitney U p-values against hand-derived values and a brute-force
permutation count, and the tool on Google Benchmark, krex_eval, kernelbench
and demo JSON where one benchmark is clearly slower and one is the same.

usage: krex_compare_test.py [SOURCE_DIR]
"""
import itertools
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SCRIPT = os.path.join(ROOT, "scripts", "krex_compare.py")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import krex_compare as kc  # noqa: E402


def brute_force_p(x, y):
    """Two-sided exact p by enumerating every split of the pooled samples."""
    pooled = list(x) + list(y)
    n1 = len(x)

    def u_of(idx):
        xs = [pooled[i] for i in idx]
        ys = [pooled[i] for i in range(len(pooled)) if i not in idx]
        return sum((a > b) + 0.5 * (a == b) for a in xs for b in ys)

    u_obs = u_of(tuple(range(n1)))
    mean = n1 * len(y) / 2.0
    splits = list(itertools.combinations(range(len(pooled)), n1))
    extreme = sum(abs(u_of(s) - mean) >= abs(u_obs - mean) - 1e-9 for s in splits)
    return extreme / float(len(splits))


class MannWhitney(unittest.TestCase):
    def test_fully_separated_samples(self):
        u, p = kc.mann_whitney_u([1, 2, 3, 4, 5], [6, 7, 8, 9, 10])
        self.assertEqual(u, 0)
        self.assertAlmostEqual(p, 2.0 / 252)  # 2 of C(10, 5) splits are this extreme

    def test_exact_small_sample(self):
        # x ranks 3,5,7,8,9 in the pooled 9: U = 17 of 20; P(U <= 3) = 7/126.
        u, p = kc.mann_whitney_u([19, 22, 16, 29, 24], [20, 11, 17, 12])
        self.assertEqual(u, 17)
        self.assertAlmostEqual(p, 14.0 / 126)

    def test_exact_matches_brute_force(self):
        rng = random.Random(21)
        for n1, n2 in ((3, 4), (5, 5), (6, 4), (4, 7)):
            x = [rng.random() for _ in range(n1)]
            y = [rng.random() + 0.3 for _ in range(n2)]
            self.assertAlmostEqual(kc.mann_whitney_u(x, y)[1], brute_force_p(x, y), places=12)

    def test_normal_approximation_with_ties(self):
        # Ties: the normal approximation, tie- and continuity-corrected.
        x, y = [19, 22, 16, 29, 24, 24], [20, 11, 17, 12, 24]
        u, p = kc.mann_whitney_u(x, y)
        ranks, ties = kc._ranks(x + y)
        self.assertEqual(max(ties), 3)  # 24 three times
        # Hand-computed: x's ranks 3, 5, 7, 9, 9, 11 (the 24s share 8..10), so
        # U = 44 - 21 = 23 of 30; the ties correct the variance to
        # 6*5/12 * (12 - (27-3)/110) = 29.4545...; z = (23 - 15 - 0.5) / sqrt(that).
        self.assertEqual(u, 23)
        self.assertAlmostEqual(p, math.erfc(7.5 / math.sqrt(29.454545454545453) / math.sqrt(2)))
        # Close to the brute-force permutation p (11 values: 462 splits).
        self.assertLess(abs(p - brute_force_p(x, y)), 0.03)

    def test_large_samples_same_and_shifted(self):
        rng = random.Random(7)
        a = [10 + rng.gauss(0, 0.2) for _ in range(200)]
        same = [10 + rng.gauss(0, 0.2) for _ in range(200)]
        slower = [10.3 + rng.gauss(0, 0.2) for _ in range(200)]
        self.assertGreater(kc.mann_whitney_u(a, same)[1], 0.01)
        self.assertLess(kc.mann_whitney_u(a, slower)[1], 1e-20)

    def test_all_equal(self):
        self.assertEqual(kc.mann_whitney_u([1.0] * 60, [1.0] * 60)[1], 1.0)


def gbench_json(samples):
    rows = []
    for name, vals in samples.items():
        for v in vals:
            rows.append({"name": name + "/manual_time", "run_name": name + "/manual_time",
                         "run_type": "iteration", "real_time": v * 1e6, "time_unit": "ns",
                         "label": "gate+drain+freeze(cgroup2)+pin", "krex_warnings": 0})
        rows.append({"name": name + "_mean", "run_name": name, "run_type": "aggregate",
                     "real_time": 1.0, "time_unit": "ns"})
    rows.append({"name": "bm_broken", "run_name": "bm_broken", "run_type": "iteration",
                 "error_occurred": True, "real_time": 0, "time_unit": "ns"})
    return {"context": {}, "benchmarks": rows}


class Tool(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        rng = random.Random(11)
        noise = lambda m, n: [m * (1 + rng.gauss(0, 0.01)) for _ in range(n)]  # noqa: E731
        self.base = {"bm_same": noise(2.0, 12), "bm_slower": noise(1.0, 12),
                     "bm_faster": noise(3.0, 12), "bm_few": noise(1.0, 3)}
        self.new = {"bm_same": noise(2.0, 12), "bm_slower": noise(1.2, 12),
                    "bm_faster": noise(2.4, 12), "bm_few": noise(2.0, 3)}

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, data):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            json.dump(data, f)
        return path

    def run_tool(self, *args):
        return subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True,
                              text=True, timeout=60)

    def verdicts(self, out_json):
        with open(out_json) as f:
            return {r["benchmark"]: r for r in json.load(f)["rows"]}

    def test_gbench(self):
        a = self.write("a.json", gbench_json(self.base))
        b = self.write("b.json", gbench_json(self.new))
        out = os.path.join(self.dir.name, "out.json")
        r = self.run_tool(a, b, "--json", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        v = self.verdicts(out)
        self.assertEqual(v["bm_same"]["verdict"], "same")
        self.assertEqual(v["bm_slower"]["verdict"], "slower")
        self.assertAlmostEqual(v["bm_slower"]["change"], 0.2, delta=0.02)
        self.assertLess(v["bm_slower"]["p"], 0.001)
        self.assertEqual(v["bm_faster"]["verdict"], "faster")
        self.assertEqual(v["bm_few"]["verdict"], "too few")  # 3 samples: never significant
        self.assertNotIn("bm_broken", v)  # error rows are not samples
        self.assertEqual(v["bm_slower"]["n_a"], 12)  # aggregates are not samples
        self.assertIn("bm_slower", r.stdout)
        self.assertIn("slower", r.stdout)

    def test_gbench_krex_warnings_are_shown(self):
        data = gbench_json(self.new)
        data["benchmarks"][0]["label"] += " | WARNING (1): other tasks ran"
        a = self.write("a.json", gbench_json(self.base))
        b = self.write("b.json", data)
        r = self.run_tool(a, b)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("krex warnings: 0 A, 1 B", r.stdout)

    def test_eval_groups(self):
        def cmd(cid, samples):
            return {"id": cid, "ok": True, "result": {"samples_ms": samples}}

        data = {"meta": {}, "reference": {}, "configs": [
            {"label": "krex:16", "commands": [cmd("gemm", self.base["bm_slower"]),
                                              cmd("axpy", self.base["bm_same"])]},
            {"label": "lock:16", "commands": [cmd("gemm", self.new["bm_slower"]),
                                              cmd("axpy", self.new["bm_same"]),
                                              {"id": "bad", "ok": False, "result": None}]}]}
        e = self.write("eval.json", data)
        out = os.path.join(self.dir.name, "out.json")
        r = self.run_tool(e, e, "--a-group", "krex:16", "--b-group", "lock:16", "--json", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        v = self.verdicts(out)
        self.assertEqual(set(v), {"gemm", "axpy"})
        self.assertEqual(v["gemm"]["verdict"], "slower")
        self.assertEqual(v["axpy"]["verdict"], "same")
        # The same file against itself, whole keys: nothing changed.
        r = self.run_tool(e, e, "--json", out)
        self.assertTrue(all(x["verdict"] == "same" for x in self.verdicts(out).values()))

    def test_python_and_demo(self):
        def py(s):
            return {"modes": {}, "raw": {"krex": [
                {"problem": "matmul", "samples_ms": {"a@b": s["bm_slower"][:6],
                                                     "torch": s["bm_same"]}},
                {"problem": "matmul", "samples_ms": {"a@b": s["bm_slower"][6:]}}]}}

        out = os.path.join(self.dir.name, "out.json")
        r = self.run_tool(self.write("p1.json", py(self.base)), self.write("p2.json", py(self.new)),
                          "--json", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        v = self.verdicts(out)
        self.assertEqual(v["krex/matmul/a@b"]["n_a"], 12)  # both workers' samples
        self.assertEqual(v["krex/matmul/a@b"]["verdict"], "slower")
        self.assertEqual(v["krex/matmul/torch"]["verdict"], "same")

        demo = {"solo_median_ms": 2.0, "modes": [
            {"mode": "unprotected", "samples_ms": self.new["bm_slower"]},
            {"mode": "krex", "samples_ms": self.base["bm_slower"]}]}
        d = self.write("demo.json", demo)
        r = self.run_tool(d, d, "--a-group", "krex", "--b-group", "unprotected", "--json", out)
        # Demo keys have no "/": a group is its one benchmark, named "-".
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(self.verdicts(out)["-"]["verdict"], "slower")

    def test_errors(self):
        a = self.write("a.json", gbench_json(self.base))
        r = self.run_tool(a, os.path.join(self.dir.name, "missing.json"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot read", r.stderr)
        r = self.run_tool(a, self.write("x.json", {"something": 1}))
        self.assertEqual(r.returncode, 2)
        self.assertIn("not Google Benchmark", r.stderr)
        r = self.run_tool(a, self.write("c.json", gbench_json({"bm_other": [1.0] * 6})))
        self.assertEqual(r.returncode, 2)
        self.assertIn("no benchmark in common", r.stderr)
        self.assertEqual(self.run_tool(a).returncode, 64)
        self.assertEqual(self.run_tool(a, a, "--alpha", "2").returncode, 64)


if __name__ == "__main__":
    unittest.main()
