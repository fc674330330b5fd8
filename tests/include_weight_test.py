#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The include weight of <krex/region.hpp>: how many krex headers, and how
many lines of them, a translation unit that includes it compiles (the host
backend, as `g++ -E -H` lists them). Fails above the limits below, so the
weight can only go down (docs/ARCHITECTURE.md, "Include weight").

usage: include_weight_test.py SOURCE_DIR [CXX]
"""
import os
import subprocess
import sys

# Before issue 22: 37 headers, 7,959 lines. The floor is the join's code: see
# docs/ARCHITECTURE.md for why half of that is out of reach header-only.
LIMITS = {"krex/region.hpp": (44, 8712)}


def weight(root, cxx, header):
    """(krex headers, their lines) that including `header` compiles."""
    inc = os.path.join(root, "include")
    p = subprocess.run([cxx, "-std=c++17", "-I" + inc, "-x", "c++", "-E", "-H", "-", "-o",
                        os.devnull], input=f"#include <{header}>\n", capture_output=True,
                       text=True, check=False)
    if p.returncode != 0:
        raise SystemExit(f"include_weight_test: {cxx} failed:\n{p.stderr}")
    files = set()
    for line in p.stderr.splitlines():
        name = line.lstrip(".").strip()
        if line.startswith(".") and os.path.realpath(name).startswith(
                os.path.realpath(os.path.join(inc, "krex")) + os.sep):
            files.add(os.path.realpath(name))
    lines = 0
    for f in files:
        with open(f, encoding="utf-8") as fh:
            lines += sum(1 for _ in fh)
    return files, lines


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    cxx = argv[2] if len(argv) > 2 else "c++"
    problems = []
    for header, (max_headers, max_lines) in LIMITS.items():
        files, lines = weight(root, cxx, header)
        print(f"include_weight_test: <{header}> pulls {len(files)} krex headers, {lines} lines "
              f"(limits {max_headers}, {max_lines})")
        # The measurement itself must see the header it starts from.
        if not any(f.endswith(os.sep + header.replace("/", os.sep)) for f in files):
            problems.append(f"{header} itself was not seen: the -H parsing is broken")
        if len(files) > max_headers:
            problems.append(f"<{header}> pulls {len(files)} krex headers, over {max_headers}")
        if lines > max_lines:
            problems.append(f"<{header}> pulls {lines} lines, over {max_lines}")
    for p in problems:
        print("include_weight_test:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
