#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/compile_time.py runs: one compile of each translation unit (the
trivial yardstick, the harness header-only and under
KREX_SEPARATE_COMPILATION, krex's compiled part), its table printed with the
ratio to the trivial unit and its JSON written with the four rows. No speed
is checked here (docs/RESULTS.md, "Compile time", has the measurements).

usage: compile_time_test.py SOURCE_DIR [CXX]
"""
import json
import os
import subprocess
import sys
import tempfile


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    cxx = argv[2] if len(argv) > 2 else "c++"
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "ct.json")
        p = subprocess.run([sys.executable, os.path.join(root, "bench", "compile_time.py"),
                            "--cxx", cxx, "--repeat", "1", "--json", out, root],
                           capture_output=True, text=True, check=False)
        print(p.stdout, p.stderr, sep="")
        problems = []
        if p.returncode != 0:
            problems.append(f"exit {p.returncode}")
        elif "| harness TU, KREX_SEPARATE_COMPILATION |" not in p.stdout:
            problems.append("the table lacks the separate-compilation row")
        elif "| median / trivial TU's |" not in p.stdout:
            problems.append("the table lacks the ratio to the trivial unit")
        else:
            with open(out, encoding="utf-8") as fh:
                rows = json.load(fh)["rows"]
            if len(rows) != 4 or any(len(r["seconds"]) != 1 or r["seconds"][0] <= 0
                                     or len(r["cpu_seconds"]) != 1 for r in rows):
                problems.append(f"JSON rows: {rows}")
        # A bad argument is a usage error, not a traceback.
        bad = subprocess.run([sys.executable, os.path.join(root, "bench", "compile_time.py"),
                              "--repeat", "0", root], capture_output=True, text=True, check=False)
        if bad.returncode != 2 or "--repeat must be at least 1" not in bad.stderr:
            problems.append(f"--repeat 0: exit {bad.returncode}, {bad.stderr.strip()!r}")
    for pr in problems:
        print("compile_time_test:", pr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
