#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What krex costs a harness's build: the compile time of one translation unit
that includes <krex/region.hpp> and constructs a tenant and a region,
header-only against KREX_SEPARATE_COMPILATION (krex::compiled), and the one
translation unit that compiles krex's part under separate compilation
(<krex/impl/src.hpp>). Each compile runs --repeat times (no ccache: the
compiler is called directly); prints a table of the minimum and the median,
and writes JSON.

usage: compile_time.py [--cxx g++] [--opt -O2] [--repeat 5] [--json FILE] [SOURCE_DIR]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HARNESS = """#include <krex/region.hpp>
#include <cstdio>
int main() {
  krex::tenant t{krex::options{}.device(0)};
  krex::region r{t};
  std::printf("%d\\n", static_cast<int>(r.report().gated));
}
"""
SRC = "#include <krex/impl/src.hpp>\n"


def compile_seconds(cxx, flags, source, repeat):
    """Wall seconds of `repeat` compiles of `source` (to an object, discarded)."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tu.cpp")
        with open(path, "w", encoding="utf-8") as f:
            f.write(source)
        out = []
        for _ in range(repeat):
            t0 = time.monotonic()
            p = subprocess.run([cxx] + flags + ["-c", path, "-o", os.path.join(d, "tu.o")],
                               capture_output=True, text=True, check=False)
            out.append(time.monotonic() - t0)
            if p.returncode != 0:
                raise SystemExit(f"compile_time: {cxx} {' '.join(flags)} failed:\n{p.stderr}")
        return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source_dir", nargs="?", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--cxx", default="g++")
    ap.add_argument("--opt", default="-O2")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json")
    a = ap.parse_args(argv)
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    base = ["-std=c++17", a.opt, "-I" + os.path.join(a.source_dir, "include")]
    sep = base + ["-DKREX_SEPARATE_COMPILATION"]
    rows = [
        ("harness TU, header-only", compile_seconds(a.cxx, base, HARNESS, a.repeat)),
        ("harness TU, KREX_SEPARATE_COMPILATION", compile_seconds(a.cxx, sep, HARNESS, a.repeat)),
        ("krex's compiled part (once per program)", compile_seconds(a.cxx, sep, SRC, a.repeat)),
    ]
    cxx_version = subprocess.run([a.cxx, "--version"], capture_output=True, text=True,
                                 check=False).stdout.splitlines()[0]
    print(f"compile_time: {a.cxx} {a.opt} ({cxx_version}), {a.repeat} compiles each, "
          f"{os.cpu_count()} CPUs, {platform.machine()}")
    print()
    print("| translation unit | min s | median s |")
    print("|---|---|---|")
    for name, s in rows:
        print(f"| {name} | {min(s):.2f} | {statistics.median(s):.2f} |")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"cxx": a.cxx, "cxx_version": cxx_version, "opt": a.opt,
                       "repeat": a.repeat,
                       "rows": [{"tu": n, "seconds": s} for n, s in rows]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
