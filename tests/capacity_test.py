#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/capacity.py: the capacity model on a synthetic eval JSON whose
answers are known in closed form, its command line, and its predictions for
the committed H200 runs of the current protocol (within 10% of what was
measured, lab/results/fleet.md), and the numbers FLEET.md and that note quote
from it. Exits 1 on failure.

usage: capacity_test.py [SOURCE_DIR]
"""
import contextlib
import io
import json
import math
import os
import sys
import tempfile
import unittest

ROOT = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import capacity  # noqa: E402

# Synthetic command (seconds): start 0.1, context 0.2, compile 0.5, inputs
# and check 0.05 each, timed loop 0.1, exit 0.1: 1.1 s serial.
PRE, CTX, WORK, CRIT, POST = 0.1, 0.2, 0.6, 0.1, 0.1
REGION = 0.005  # drain 2 + freeze 1 + pin 1 + exit 1 ms
JOIN = 0.1


def command(i, t0, krex=False):
    cmd_ms = (CTX + WORK + CRIT) * 1e3
    r = {"t_context_ms": CTX * 1e3, "t_compile_ms": 500.0, "t_inputs_ms": 50.0, "t_check_ms": 50.0,
         "t_critical_ms": CRIT * 1e3, "t_cmd_ms": cmd_ms, "ok": True}
    if krex:
        r.update({"drain_ms": 2.0, "freeze_ms": 1.0, "pin_ms": 1.0, "quiet_ms": 0.0,
                  "region_exit_ms": 1.0, "gate_ms": 300.0, "t_join_ms": JOIN * 1e3})
    return {"id": "c%d" % i, "start_ms": t0, "worker_start_ms": t0 + PRE * 1e3,
            "end_ms": t0 + (PRE + POST) * 1e3 + cmd_ms, "t_total_ms": (PRE + POST) * 1e3 + cmd_ms,
            "result": r}


def synthetic(busy_krex16=None):
    ref = {"label": "reference (serial)", "mode": "serial", "c": 1, "shape": "process",
           "role": "reference", "throughput_cpm": 60 / 1.1, "busy_cpm": 60 / 1.1,
           "commands": [command(i, i * 1100.0) for i in range(10)]}
    k16 = {"label": "krex C=16", "mode": "krex", "c": 16, "shape": "process",
           "throughput_cpm": 100.0, "busy_cpm": busy_krex16 if busy_krex16 else 100.0,
           "commands": [command(i, 0.0, krex=True) for i in range(16)]}
    lock = {"label": "lock C=16", "mode": "lock", "c": 16, "shape": "process",
            "throughput_cpm": 1.0, "commands": []}
    return {"meta": {}, "configs": [ref, k16, lock]}


class Model(unittest.TestCase):
    def setUp(self):
        self.p = capacity.phases(synthetic())

    def test_phases_from_the_reference_pass(self):
        p = self.p
        for k, v in (("pre", PRE), ("ctx", CTX), ("work", WORK), ("crit", CRIT), ("post", POST),
                     ("region", REGION), ("join", JOIN)):
            self.assertAlmostEqual(p[k], v, places=9, msg=k)
        self.assertAlmostEqual(p["region_pool"], 0.006, msg="no persistent krex config: the default")

    def test_serial_is_one_command_at_a_time(self):
        self.assertAlmostEqual(capacity.predict(self.p, "serial", 1)["x"], 1 / 1.1)

    def test_process_shape(self):
        e = CRIT + REGION + CTX + 0.5 * POST
        z = PRE + JOIN + WORK + 0.5 * POST
        # One slot: nothing overlaps.
        self.assertAlmostEqual(capacity.predict(self.p, "process", 1)["x"], 1 / (e + z))
        # Two slots, by hand: n=1 gives Q1 = E / (Z + E); n=2 waits behind it.
        q1 = e / (z + e)
        self.assertAlmostEqual(capacity.predict(self.p, "process", 2)["x"], 2 / (z + e * (1 + q1)))
        # Many slots: the exclusive resource is the bound, from below.
        x = capacity.predict(self.p, "process", 64)
        self.assertLessEqual(x["x"], 1 / e)
        self.assertGreater(x["x"], 0.999 / e)
        self.assertEqual(x["bound"], "device")
        self.assertAlmostEqual(capacity.predict(self.p, "process", 64, exit_share=0)["x"],
                               1 / (CRIT + REGION + CTX), places=3)

    def test_pool_pays_no_context_per_command(self):
        e = CRIT + 0.006
        self.assertAlmostEqual(capacity.predict(self.p, "pool", 1)["x"],
                               1 / (e + WORK + capacity.DISPATCH_S))
        self.assertAlmostEqual(capacity.predict(self.p, "pool", 100)["x"], 1 / e, places=6)

    def test_cpu_bound(self):
        # 2 cores, 1 reserved for the region's pin: one core for 0.602 s of work a command.
        x = capacity.predict(self.p, "pool", 16, cores=2)
        self.assertEqual(x["bound"], "cpu")
        self.assertAlmostEqual(x["x"], 1 / (WORK + capacity.DISPATCH_S))

    def test_mva_limits(self):
        self.assertEqual(capacity.mva(0, 1, 1), 0.0)
        self.assertAlmostEqual(capacity.mva(1, 1, 3), 0.25)
        self.assertAlmostEqual(capacity.mva(1000, 0.5, 3), 2.0, places=6)
        xs = [capacity.mva(c, 0.3, 1.0) for c in range(1, 20)]
        self.assertEqual(xs, sorted(xs), "more slots never lower throughput")

    def test_mix(self):
        q = capacity.mix_phases(self.p, 2.6, 0.12)
        self.assertAlmostEqual(q["crit"], 0.312)
        self.assertAlmostEqual(q["work"], 2.6 - 0.312 - PRE - CTX - POST)
        self.assertAlmostEqual(capacity.predict(q, "serial", 1)["x"], 1 / 2.6)
        with self.assertRaises(SystemExit):
            capacity.mix_phases(self.p, 0.3, 0.12)

    def test_fleet(self):
        f = {r["mode"]: r for r in capacity.fleet(self.p, 300000, 8, 16, 16, 0.5, 1.0)}
        s = f["serial"]
        self.assertAlmostEqual(s["per_gpu_day"], 86400 / 1.1)
        self.assertAlmostEqual(s["gpus"], 300000 * 1.1 / 86400)
        self.assertEqual(s["gpus_whole"], 4)
        self.assertEqual(s["nodes"], 1)
        half = {r["mode"]: r for r in capacity.fleet(self.p, 300000, 8, 16, 16, 0.5, 0.5)}
        self.assertAlmostEqual(half["serial"]["gpus"], 2 * s["gpus"])
        self.assertLess(f["krex pool"]["gpus"], f["krex, a process per command"]["gpus"])
        self.assertLess(f["krex, a process per command"]["gpus"], s["gpus"])

    def test_check_against_a_run(self):
        want = capacity.predict(self.p, "process", 16)["x"] * 60
        rows = capacity.check(synthetic(busy_krex16=want), self.p, 16, 0.5)
        self.assertEqual([r["label"] for r in rows], ["krex C=16"], "lock-only is not modelled")
        self.assertAlmostEqual(rows[0]["error_pct"], 0.0)
        self.assertEqual(rows[0]["measured_is"], "busy")


class CommandLine(unittest.TestCase):
    def run_main(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = capacity.main(list(args))
            except SystemExit as e:
                rc = e.code
        return rc, out.getvalue(), err.getvalue()

    def test_json_and_usage_errors(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "eval.json")
            with open(path, "w") as f:
                json.dump(synthetic(), f)
            rc, out, _ = self.run_main(path, "--json", "--fleet", "300000", "--median-s", "2.6",
                                       "--critical", "0.12")
            self.assertEqual(rc, 0)
            j = json.loads(out)
            self.assertAlmostEqual(j["per_gpu"]["serial"]["per_day"], 86400 / 2.6)
            self.assertEqual(len(j["fleet"]), 3)
            rc, _, err = self.run_main(path, "--median-s", "2.6")
            self.assertEqual(rc, 2)
            self.assertIn("go together", err)
            rc, _, err = self.run_main(path, "--median-s", "2.6", "--critical", "12")
            self.assertEqual(rc, 2)
            self.assertIn("fraction", err)


class MeasuredRuns(unittest.TestCase):
    """The committed H200 runs of the current protocol (context gating and
    the hand-off: issue 11 runs 2 and 3, the quiet run): every modelled
    configuration within 10% of its measured steady-state throughput."""

    RUNS = ["lab/results/h200-issue11/run2/eval.json.gz", "lab/results/h200-issue11/run3/eval.json.gz",
            "lab/results/h200-quiet/eval.json.gz", "lab/results/h200-quiet-native/eval.json.gz",
            "lab/results/h200-ranks/run1-krex/eval.json.gz", "lab/results/h200-ranks/run3-scope-all/eval.json.gz",
            "lab/results/h200-ranks/run4-c4/eval.json.gz"]

    def test_within_ten_percent(self):
        n = walls = 0
        for rel in self.RUNS:
            d = capacity.load(os.path.join(ROOT, rel))
            for r in capacity.check(d, capacity.phases(d), 16, capacity.EXIT_SHARE):
                n += 1
                self.assertLess(abs(r["error_pct"]), 10.0, "%s %s: predicted %.1f, measured %.1f" % (
                    rel, r["label"], r["predicted_cpm"], r["measured_cpm"]))
                if r["commands"] >= 80:  # shorter runs: ramp-up and drain weigh much (docs/FLEET.md)
                    walls += 1
                    self.assertLess(abs(r["wall_error_pct"]), 10.0, "%s %s: predicted wall %.1f, measured %.1f" % (
                        rel, r["label"], r["predicted_wall_cpm"], r["wall_cpm"]))
        self.assertGreaterEqual(n, 20)
        self.assertGreaterEqual(walls, 15)
        self.assertFalse(math.isnan(n))

    def test_startup_is_a_pools_contexts(self):
        p = {"pre": 0.1, "ctx": 0.2, "join": 0.05, "work": 0.5, "crit": 0.1, "post": 0.1,
             "region": 0.01, "region_pool": 0.005}
        self.assertAlmostEqual(capacity.startup_s(p, "pool", 16), 0.1 + 16 * 0.2 + 0.05)
        self.assertEqual(capacity.startup_s(p, "process", 16), 0.0)
        self.assertEqual(capacity.startup_s(p, "serial", 1), 0.0)
        x = capacity.predict(p, "pool", 16)["x"]
        self.assertAlmostEqual(capacity.predict_wall(p, "pool", 16, 100), 100 / (100 / x + 3.35))
        self.assertLess(capacity.predict_wall(p, "pool", 16, 100), capacity.predict_wall(p, "pool", 16, 10000))
        self.assertAlmostEqual(capacity.predict_wall(p, "process", 16, 100), capacity.predict(p, "process", 16)["x"])


class DocsMatchTheModel(unittest.TestCase):
    """The numbers the docs quote are the script's: the check table of
    lab/results/fleet.md (predicted and measured cmd/min of each run) and
    docs/FLEET.md's fleet table, for the command FLEET.md gives."""

    FLEET_RUN = "lab/results/h200-quiet/eval.json.gz"
    RUN_NAMES = {"issue 11 run 2": "lab/results/h200-issue11/run2/eval.json.gz",
                 "issue 11 run 3": "lab/results/h200-issue11/run3/eval.json.gz",
                 "quiet run": "lab/results/h200-quiet/eval.json.gz",
                 "3-copy run": "lab/results/h200-quiet-native/eval.json.gz",
                 "ranks run 1": "lab/results/h200-ranks/run1-krex/eval.json.gz",
                 "ranks run 3": "lab/results/h200-ranks/run3-scope-all/eval.json.gz",
                 "ranks run 4": "lab/results/h200-ranks/run4-c4/eval.json.gz"}

    @staticmethod
    def read(rel):
        with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
            return f.read()

    @staticmethod
    def section(text, heading):
        start = text.index(heading)
        end = text.find("\n#", start + len(heading))
        return text[start:end if end >= 0 else len(text)]

    @staticmethod
    def rows(text):
        return [[c.strip() for c in line.strip().strip("|").split("|")]
                for line in text.splitlines()
                if line.startswith("| ") and not line.startswith("| run ") and
                not line.startswith("| |") and "---" not in line]

    def fleet_rows(self):
        d = capacity.load(os.path.join(ROOT, self.FLEET_RUN))
        q = capacity.mix_phases(capacity.phases(d), 2.6, 0.12)
        return capacity.fleet(q, 300000, 8, 16, 16, capacity.EXIT_SHARE, 0.8)

    def test_check_table(self):
        doc = self.rows(self.section(self.read("lab/results/fleet.md"), "## Checked against the H200 runs"))
        self.assertGreaterEqual(len(doc), 10, doc)
        want = {}
        for name, rel in self.RUN_NAMES.items():
            d = capacity.load(os.path.join(ROOT, rel))
            want[name] = sorted((str(r["commands"]), "%.1f" % r["predicted_cpm"], "%.1f" % r["measured_cpm"],
                                 "%+.1f%%" % r["error_pct"], "%.1f" % r["predicted_wall_cpm"],
                                 "%.1f" % r["wall_cpm"], "%+.1f%%" % r["wall_error_pct"])
                                for r in capacity.check(d, capacity.phases(d), 16, capacity.EXIT_SHARE))
        got = {}
        for run, _, n, pred, meas, err, pwall, wall, werr in doc:
            self.assertIn(run, self.RUN_NAMES, "FLEET.md names a run the test does not know")
            got.setdefault(run, []).append((n, pred, meas, err.replace("\u2212", "-"), pwall, wall,
                                            werr.replace("\u2212", "-")))
        self.assertEqual({k: sorted(v) for k, v in got.items()}, want)

    def test_fleet_table(self):
        fl = self.fleet_rows()
        doc = self.rows(self.section(self.read("docs/FLEET.md"), "### The fleet answer"))
        self.assertEqual(len(doc), len(fl), doc)
        for (_, hour, day, gpus, nodes), r in zip(doc, fl):
            self.assertEqual(hour, "{:,.0f}".format(r["per_gpu_hour"]), r["mode"])
            self.assertEqual(day, "{:,.0f}".format(r["per_gpu_day"]), r["mode"])
            self.assertEqual(gpus, "%.1f \u2192 %d" % (r["gpus"], r["gpus_whole"]), r["mode"])
            self.assertEqual(nodes, str(r["nodes"]), r["mode"])


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
