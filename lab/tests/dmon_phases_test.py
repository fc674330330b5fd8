#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Tests lab/scripts/dmon_phases.py on a synthetic `nvidia-smi dmon -s pc -o T` log
(the header lines and columns dmon prints, as in lab/results/*/dmon.log.gz)."""
import os
import tempfile
import unittest

from script_json import run_json

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "dmon_phases.py")
HEADER = ("#Time         gpu    pwr  gtemp  mtemp   mclk   pclk \n"
          "#HH:MM:SS     Idx      W      C      C    MHz    MHz \n")


def line(t, pwr, pclk):
    return f" {t}       0    {pwr:3d}     40     45   3201   {pclk:4d} \n"


class DmonPhases(unittest.TestCase):
    def run_script(self, log, phases, *extra):
        with tempfile.TemporaryDirectory() as d:
            lp, pp, jp = (os.path.join(d, n) for n in ("dmon.log", "phases.tsv", "out.json"))
            with open(lp, "w") as f:
                f.write(log)
            with open(pp, "w") as f:
                f.write(phases)
            return run_json(SCRIPT, [lp, pp, "--json", jp, *extra], jp)

    def test_samples_fall_into_their_phases(self):
        log = HEADER
        log += "".join(line(f"23:59:{s:02d}", 100, 1980) for s in range(55, 60))   # idle, before midnight
        log += "".join(line(f"00:00:{s:02d}", 690, 1500) for s in range(0, 5))      # busy, after it
        log += " 00:00:05       0      -     40     45   3201      - \n"             # unreadable values
        phases = "idle\t23:59:55\t23:59:59\nbusy\t00:00:00\t00:00:05\nacross\t23:59:58\t00:00:01\nnone\t01:00:00\t01:00:10\n"
        p, r = self.run_script(log, phases, "--limit", "700")
        self.assertEqual(p.returncode, 0, p.stderr)
        ph = {e["phase"]: e for e in r["phases"]}
        self.assertEqual(ph["idle"]["samples"], 5)
        self.assertEqual((ph["idle"]["clock_mean"], ph["idle"]["near_peak"]), (1980, 0))
        self.assertEqual(ph["busy"]["samples"], 5)
        self.assertEqual((ph["busy"]["clock_min"], ph["busy"]["power_max"], ph["busy"]["near_peak"]), (1500, 690, 5))
        self.assertEqual(ph["across"]["samples"], 4)
        self.assertEqual(ph["across"]["seconds"], 3)
        self.assertEqual(ph["across"]["clock_mean"], (2 * 1980 + 2 * 1500) / 4)
        self.assertEqual(ph["none"]["samples"], 0)
        self.assertIn("| none | 10 | 0 | n/a |", p.stdout)
        self.assertEqual(r["peak_is"], "limit")

    def test_without_a_limit_the_highest_power_seen_is_the_peak(self):
        log = HEADER + line("10:00:00", 200, 1900) + line("10:00:01", 400, 1700)
        p, r = self.run_script(log, "a\t10:00:00\t10:00:01\n")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual((r["peak_power_w"], r["phases"][0]["near_peak"]), (400, 1))

    def test_bad_input_is_refused_with_what_to_do(self):
        p, _ = self.run_script(line("10:00:00", 1, 1), "a\t10:00:00\t10:00:01\n")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("run dmon with -o T", p.stderr)
        p, _ = self.run_script(HEADER, "a 10:00:00 10:00:01\n")
        self.assertIn("NAME<TAB>START<TAB>END", p.stderr)
        p, _ = self.run_script(HEADER, "a\t10:00\t10:00:01\n")
        self.assertIn("HH:MM:SS", p.stderr)
        p, _ = self.run_script(HEADER, "a\t10:00:00\t10:00:01\n", "--limit", "-3")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--limit wants", p.stderr)


if __name__ == "__main__":
    unittest.main()
