#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Per-benchmark timing inflation of nvbench's examples run N at once,
against the same examples run one at a time (lab/scripts/nvbench_gpu.sh).

    nvbench_inflation.py OUT_DIR [--workers N] [--json FILE] [--metric TAG]

OUT_DIR holds nvbench JSON files named MODE-wI-EXAMPLE.json, MODE one of
solo, solo-again (worker 0 only), unprotected, krex (workers 0..N-1). For
every state (example, benchmark, axis values) that solo measured, each other
run of it gives one inflation sample: its time over solo's, minus 1, in
percent. The metric is nvbench's mean isolated GPU time
(nv/cold/time/gpu/mean; --metric picks another summary tag). Printed per
benchmark and over all states: samples, median, p95 and max inflation for
solo-again (the noise floor: the same state one at a time again),
unprotected and krex; then the wall time of each way and, from krex's
summaries, the states whose region was not fully protected (a level with
-shared, -split, contended, busy or a WARNING). Skipped states are left out.
"""

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from quantiles import quantile  # noqa: E402  (scripts/quantiles.py: the scripts' one quantile)

MODES = ("solo-again", "unprotected", "krex")
NAME = re.compile(r"^(solo|solo-again|unprotected|krex)-w(\d+)-(.+)\.json$")


def summary_value(state, tag):
    for s in state.get("summaries") or []:
        if s.get("tag") != tag:
            continue
        for d in s.get("data") or []:
            if d.get("name") == "value":
                if d.get("type") in ("float64", "int64"):
                    return float(d["value"])
                return d["value"]
    return None


def load(out_dir, metric, foreign=None):
    """{mode: {worker: {(example, bench, state): (value, krex level or None)}}}.
    With `foreign` (a dict), also fills it with the krex run's foreign pids:
    {(worker, example): [the foreign_pids of each state's report that has any]}."""
    runs = {}
    for name in sorted(os.listdir(out_dir)):
        m = NAME.match(name)
        if not m:
            continue
        mode, worker, example = m.group(1), int(m.group(2)), m.group(3)
        path = os.path.join(out_dir, name)
        try:
            with open(path) as f:
                data = json.load(f)
        except (OSError, ValueError) as e:
            print("nvbench_inflation: %s unreadable (%s): left out" % (path, e), file=sys.stderr)
            continue
        states = runs.setdefault(mode, {}).setdefault(worker, {})
        for bench in data.get("benchmarks") or []:
            for st in bench.get("states") or []:
                if st.get("is_skipped"):
                    continue
                if foreign is not None and mode == "krex":
                    pids = report_foreign_pids(st)
                    if pids:
                        foreign.setdefault((worker, example), []).append(pids)
                v = summary_value(st, metric)
                if not isinstance(v, float) or v <= 0:
                    continue
                key = (example, bench["name"], st["name"])
                states[key] = (v, summary_value(st, "krex/level"))
    return runs


PIDS = re.compile(r"^(krex)-w(\d+)-pids\.txt$")


def load_pids(out_dir):
    """{pid: (worker, example, start, end)} of the krex run's example
    processes, from nvbench_gpu.sh's krex-wI-pids.txt ("PID EXAMPLE start|end
    SECONDS" lines); {} where there are none."""
    procs = {}
    for name in sorted(os.listdir(out_dir)):
        m = PIDS.match(name)
        if not m:
            continue
        with open(os.path.join(out_dir, name)) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 4 or parts[2] not in ("start", "end"):
                    continue
                pid, example, what, t = int(parts[0]), parts[1], parts[2], float(parts[3])
                p = procs.setdefault(pid, [int(m.group(2)), example, None, None])
                p[2 if what == "start" else 3] = t
    return {pid: tuple(p) for pid, p in procs.items()}


def report_foreign_pids(state):
    """The foreign_pids of a state's krex report (its krex/report summary), or []."""
    rep = summary_value(state, "krex/report")
    if not isinstance(rep, str):
        return []
    try:
        return json.loads(rep).get("foreign_pids") or []
    except ValueError:
        return []


def foreign_report(out_dir, foreign):
    """For each foreign pid of a krex state's region report (`foreign`, as
    load() fills it): was that process starting or ending while the state's
    own process ran? Returns {"starting": n, "ending": n, "both": n, "running
    throughout": n, "not an example process": n, "states": n}, or None
    without pid files."""
    procs = load_pids(out_dir)
    if not procs:
        return None
    own = {(w, e): (s, t) for pid, (w, e, s, t) in procs.items()}
    out = {"starting": 0, "ending": 0, "both": 0, "running throughout": 0,
           "not an example process": 0, "states": 0}
    for holder, states in sorted(foreign.items()):
        life = own.get(holder)
        for pids in states:
            out["states"] += 1
            for fp in pids:
                p = procs.get(fp)
                if p is None or life is None or None in p[2:] or None in life:
                    out["not an example process"] += 1
                    continue
                started = life[0] <= p[2] <= life[1]
                ended = life[0] <= p[3] <= life[1]
                key = ("both" if started and ended else "starting" if started else
                       "ending" if ended else "running throughout")
                out[key] += 1
    return out


def not_fully_protected(level):
    return (not isinstance(level, str) or not level.startswith("gate+drain")
            or any(w in level for w in ("-shared", "-split", "contended", "busy", "WARNING")))


def analyse(runs):
    solo = (runs.get("solo") or {}).get(0) or {}
    if not solo:
        raise SystemExit("nvbench_inflation: no solo-w0-*.json with measured states: run "
                         "'lab/scripts/nvbench_gpu.sh solo' first")
    per_bench = {}   # (example, bench) -> mode -> [inflation %]
    overall = {m: [] for m in MODES}
    missing = {m: 0 for m in MODES}
    levels = {"states": 0, "not_fully_protected": 0, "examples": []}
    for mode in MODES:
        for worker, states in sorted((runs.get(mode) or {}).items()):
            for key, base in solo.items():
                got = states.get(key)
                if got is None:
                    missing[mode] += 1
                    continue
                x = (got[0] / base[0] - 1.0) * 100.0
                per_bench.setdefault(key[:2], {m: [] for m in MODES})[mode].append(x)
                overall[mode].append(x)
                if mode == "krex":
                    levels["states"] += 1
                    if not_fully_protected(got[1]):
                        levels["not_fully_protected"] += 1
                        if len(levels["examples"]) < 5:
                            levels["examples"].append("%s %s: %s" % (key[1], key[2], got[1]))
    return per_bench, overall, missing, levels


def stats(xs):
    if not xs:
        return None
    return {"n": len(xs), "median": quantile(xs, 0.5), "p95": quantile(xs, 0.95), "max": max(xs)}


def cell(st):
    if st is None:
        return "–"
    return "%+.2f%% / %+.2f%% (%d)" % (st["median"], st["p95"], st["n"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--json", help="also write the numbers here")
    ap.add_argument("--metric", default="nv/cold/time/gpu/mean")
    args = ap.parse_args(argv)
    foreign = {}
    runs = load(args.out_dir, args.metric, foreign)
    per_bench, overall, missing, levels = analyse(runs)

    result = {"metric": args.metric, "workers": args.workers, "benchmarks": [], "overall": {},
              "missing": missing, "krex_levels": levels, "wall_s": {}}
    print("Inflation of %s against solo, in %%: median / p95 (samples)\n" % args.metric)
    print("| benchmark | solo again | unprotected x%d | krex x%d |" % (args.workers, args.workers))
    print("|---|---|---|---|")
    for (example, bench), by_mode in sorted(per_bench.items()):
        row = {m: stats(by_mode[m]) for m in MODES}
        result["benchmarks"].append({"example": example, "benchmark": bench, **row})
        print("| %s: %s | %s |" % (example, bench, " | ".join(cell(row[m]) for m in MODES)))
    row = {m: stats(overall[m]) for m in MODES}
    result["overall"] = row
    print("| **all states** | %s |" % " | ".join(cell(row[m]) for m in MODES))
    print("\nmax inflation: " + ", ".join("%s %+.2f%%" % (m, row[m]["max"]) for m in MODES if row[m]))

    for mode in ("solo", "solo-again", "unprotected", "krex"):
        p = os.path.join(args.out_dir, "wall-%s.txt" % mode)
        if os.path.exists(p):
            with open(p) as f:
                result["wall_s"][mode] = float(f.read().strip())
    w = result["wall_s"]
    if w:
        print("wall time: " + ", ".join("%s %.1f s" % (m, s) for m, s in w.items()))
    if "solo" in w and w.get("krex"):
        print("throughput, krex x%d vs one at a time: %.2fx; unprotected x%d: %.2fx" % (
            args.workers, args.workers * w["solo"] / w["krex"], args.workers,
            args.workers * w["solo"] / w["unprotected"] if w.get("unprotected") else float("nan")))
    print("krex states not fully protected: %d of %d" % (levels["not_fully_protected"],
                                                        levels["states"]))
    for e in levels["examples"]:
        print("  " + e)
    fr = foreign_report(args.out_dir, foreign)
    result["foreign"] = fr
    if fr:
        print("foreign processes of krex states (%d states), by what they were doing while the "
              "state's own process ran: %s" % (fr["states"], ", ".join(
                  "%s %d" % (k, v) for k, v in fr.items() if k != "states")))
    if any(missing.values()):
        print("states solo measured but a run did not (skipped, failed or timed out): "
              + ", ".join("%s %d" % (m, n) for m, n in missing.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
