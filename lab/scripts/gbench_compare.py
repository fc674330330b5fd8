#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compares Google Benchmark JSON outputs of concurrent runs with a solo run.

usage: gbench_compare.py SOLO.json MODE=RUN.json[,RUN.json...] [MODE=...] [--json OUT]

For every benchmark (per-repetition rows; aggregates are ignored) it prints,
per mode, the number of samples, the median and p95 inflation over the solo
median, and the worst sample; then, for each pair of benchmarks that differ
only in their last argument, how many processes ranked the pair the other way
round than the solo run did (each process's median of its repetitions).
"""
import json
import os
import re
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from quantiles import quantile  # noqa: E402  (scripts/quantiles.py: the scripts' one quantile)
from report_files import write_json  # noqa: E402  (scripts/report_files.py)


def rows(path):
    with open(path) as f:
        data = json.load(f)
    out = defaultdict(list)
    for b in data.get("benchmarks", []):
        if b.get("run_type") != "iteration" or b.get("error_occurred"):
            continue
        name = re.sub(r"/manual_time$", "", b.get("run_name", b["name"]))
        t = b["real_time"]
        unit = b.get("time_unit", "ns")
        t *= {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[unit]
        out[name].append(t)
    return out


def pairs(names):
    groups = defaultdict(list)
    for n in names:
        head, _, _ = n.rpartition("/")
        groups[head].append(n)
    for head, members in sorted(groups.items()):
        members.sort(key=lambda n: int(n.rpartition("/")[2]) if n.rpartition("/")[2].isdigit() else 0)
        for a, b in zip(members, members[1:]):
            yield a, b


def main(argv):
    out_json = None
    if "--json" in argv:
        i = argv.index("--json")
        out_json = argv[i + 1]
        del argv[i:i + 2]
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    solo = rows(argv[1])
    modes = {}
    for spec in argv[2:]:
        mode, _, files = spec.partition("=")
        modes[mode] = [rows(p) for p in files.split(",") if p]
    ref = {n: statistics.median(v) for n, v in solo.items() if v}
    result = {"solo_median_ms": ref, "modes": {}}
    print("| benchmark | solo median ms | mode | processes | samples | median inflation | p95 inflation | worst |")
    print("|---|---|---|---|---|---|---|---|")
    for name in sorted(ref):
        for mode, procs in modes.items():
            samples = [t for p in procs for t in p.get(name, [])]
            if not samples:
                continue
            infl = [t / ref[name] - 1 for t in samples]
            r = {"processes": sum(1 for p in procs if p.get(name)), "samples": len(samples),
                 "median_inflation": quantile(infl, 0.5), "p95_inflation": quantile(infl, 0.95),
                 "worst_inflation": max(infl)}
            result["modes"].setdefault(mode, {})[name] = r
            print(f"| {name} | {ref[name]:.4f} | {mode} | {r['processes']} | {r['samples']} | "
                  f"{100 * r['median_inflation']:+.2f}% | {100 * r['p95_inflation']:+.2f}% | "
                  f"{100 * r['worst_inflation']:+.2f}% |")
    print()
    print("| pair | solo gap | mode | processes ranking it the other way |")
    print("|---|---|---|---|")
    flips = {}
    for a, b in pairs(ref):
        gap = ref[b] / ref[a] - 1
        solo_order = ref[a] < ref[b]
        for mode, procs in modes.items():
            judged = [p for p in procs if p.get(a) and p.get(b)]
            flipped = sum(1 for p in judged
                          if (statistics.median(p[a]) < statistics.median(p[b])) != solo_order)
            flips.setdefault(mode, [0, 0])
            flips[mode][0] += flipped
            flips[mode][1] += len(judged)
            print(f"| {a} vs {b} | {100 * gap:+.2f}% | {mode} | {flipped} of {len(judged)} |")
    result["flips"] = {m: {"flipped": f, "judged": n} for m, (f, n) in flips.items()}
    write_json(out_json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
