#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""What krex costs a harness's build: the compile time of one translation unit
that includes <krex/region.hpp> and constructs a tenant and a region,
header-only against KREX_SEPARATE_COMPILATION (krex::compiled), and the one
translation unit that compiles krex's part under separate compilation
(<krex/impl/src.hpp>). Each compile runs --repeat times (no ccache: the
compiler is called directly; the units take turns), with a trivial translation
unit as the yardstick; prints a table of the minimum, the median, the
median's ratio to the trivial unit's and the median CPU seconds (user + system
of the compiler: steadier than wall time on a loaded machine), and writes JSON.

usage: compile_time.py [--cxx g++] [--opt -O2] [--repeat 5] [--json FILE] [SOURCE_DIR]
"""
import argparse
import json
import os
import platform
import resource
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
# The yardstick: what a translation unit costs with no krex in it, so that
# runs on a loaded machine compare as ratios to it.
TRIVIAL = """#include <cstdio>
int main() { std::printf("%d\\n", 0); }
"""


def compile_seconds(cxx, units, repeat):
    """Wall seconds of `repeat` compiles (to an object, discarded) of each
    (flags, source) in `units`, taken in turns (one of each per round), so
    that a machine whose load changes slows every unit alike."""
    out = [[] for _ in units]
    cpu = [[] for _ in units]
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, (_, source) in enumerate(units):
            paths.append(os.path.join(d, f"tu{i}.cpp"))
            with open(paths[-1], "w", encoding="utf-8") as f:
                f.write(source)
        for _ in range(repeat):
            for i, (flags, _) in enumerate(units):
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                t0 = time.monotonic()
                p = subprocess.run([cxx] + flags + ["-c", paths[i], "-o",
                                                    os.path.join(d, "tu.o")],
                                   capture_output=True, text=True, check=False)
                out[i].append(time.monotonic() - t0)
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                cpu[i].append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
                if p.returncode != 0:
                    raise SystemExit(f"compile_time: {cxx} {' '.join(flags)} failed:\n"
                                     f"{p.stderr}")
    return out, cpu


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
    units = [
        ("trivial TU (<cstdio>, no krex)", base, TRIVIAL),
        ("harness TU, header-only", base, HARNESS),
        ("harness TU, KREX_SEPARATE_COMPILATION", sep, HARNESS),
        ("krex's compiled part (once per program)", sep, SRC),
    ]
    seconds, cpu = compile_seconds(a.cxx, [(f, s) for _, f, s in units], a.repeat)
    rows = [(name, s, c) for (name, _, _), s, c in zip(units, seconds, cpu)]
    cxx_version = subprocess.run([a.cxx, "--version"], capture_output=True, text=True,
                                 check=False).stdout.splitlines()[0]
    print(f"compile_time: {a.cxx} {a.opt} ({cxx_version}), {a.repeat} compiles each, "
          f"{os.cpu_count()} CPUs, {platform.machine()}")
    print()
    print("| translation unit | min s | median s | median / trivial TU's | median CPU s |")
    print("|---|---|---|---|---|")
    trivial = statistics.median(rows[0][1])
    for name, s, c in rows:
        print(f"| {name} | {min(s):.2f} | {statistics.median(s):.2f} | "
              f"{statistics.median(s) / trivial:.1f} | {statistics.median(c):.2f} |")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"cxx": a.cxx, "cxx_version": cxx_version, "opt": a.opt,
                       "repeat": a.repeat,
                       "rows": [{"tu": n, "seconds": s, "cpu_seconds": c} for n, s, c in rows]},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
