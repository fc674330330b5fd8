#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""lab/scripts/when_to_use_plot.py reads its points from the results notes
lab/results/eval.md and lab/results/issue11.md (no matplotlib needed for
this): every point the README's picture shows is found, with the numbers the
tables give, so the picture cannot silently lose a mode when a note changes.
Exits 1 on failure.

usage: when_to_use_plot_test.py [SOURCE_DIR]
"""
import importlib.util
import os
import sys
import unittest

ROOT = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


def load():
    spec = importlib.util.spec_from_file_location(
        "when_to_use_plot", os.path.join(ROOT, "lab", "scripts", "when_to_use_plot.py"))
    mod = importlib.util.module_from_spec(spec)
    saved = sys.argv
    sys.argv = [saved[0], ROOT]
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.argv = saved
    return mod


class Points(unittest.TestCase):
    def setUp(self):
        self.mod = load()
        self.eval = self.mod.note("eval.md")
        self.issue11 = self.mod.note("issue11.md")

    def test_run_b(self):
        pts = {p[3]: (p[1], p[2]) for p in self.mod.points(self.eval)}
        self.assertEqual(set(pts), {"native repeat", "unprotected", "lock-only",
                                    "lock-only-persistent", "krex", "krex-persistent"})
        self.assertEqual(pts["native repeat"][0], 1.0)
        for style, (t, p) in pts.items():
            self.assertTrue(0.5 <= t <= 20 and 0 <= p <= 10000, (style, t, p))
        self.assertLess(pts["krex"][1], pts["lock-only"][1])
        self.assertLess(pts["lock-only"][1], pts["unprotected"][1])

    def test_issue11(self):
        pts = {p[3]: (p[1], p[2]) for p in self.mod.issue11_points(self.issue11)}
        self.assertEqual(set(pts), {"native repeat", "lock-only", "lock-only-persistent", "krex",
                                    "krex-persistent"})
        for style, (t, p) in pts.items():
            self.assertTrue(0.5 <= t <= 20 and 0 <= p <= 10000, (style, t, p))

    def test_picture_is_committed(self):
        self.assertTrue(os.path.getsize(os.path.join(ROOT, "docs", "when_to_use.png")) > 10000)


if __name__ == "__main__":
    unittest.main()
