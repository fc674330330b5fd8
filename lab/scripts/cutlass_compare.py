#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compares cutlass_profiler CSV outputs of concurrent runs with solo runs.

usage: cutlass_compare.py SOLO.csv[,SOLO.csv...] MODE=RUN.csv[,RUN.csv...] [MODE=...]
                          [--json OUT] [--lost MODE=N ...]

Each CSV is one cutlass_profiler run (--output=X writes X.gemm.csv). A result is
keyed by its problem (the CSV's m, n, k, batch_count and, where present, the
layouts A and B) and its kernel (the Operation column); only rows with
Provider CUTLASS and Status success are timings (Runtime, ms); other rows are
counted as failures.

Inflation: for every problem and kernel, each run's runtime over the median of
the solo runs, minus 1 (0.05 = 5% slower than solo); per mode the median, p95
and worst over all runs of all processes.

Ranking: per problem, the solo ranking is the kernels sorted by solo median.
Each run's own ranking (by its runtimes) is compared with it: a winner flip is a
run whose fastest kernel is not the solo's fastest; inversions count kernel pairs
in the other order (Kendall distance). The solo runs are compared with the solo
ranking too: that is the noise floor a concurrent mode is to be judged against.

Pairs apart: inversions of kernel pairs whose solo medians are at least
--min-gap apart (default 0.02: 2%), counted separately for pairs between the
gap and 5% apart ("close": hard enough that interference can flip them, far
enough that solo noise rarely does) and for pairs 5% or more apart. Pairs
closer than --min-gap are within the noise and only counted in the totals.

--lost MODE=N adds the number of results a mode's logs reported as not protected
to their end (krex lease lost) to the summary.

Region reports: where a run X.gemm.csv has X.regions.jsonl beside it (the
patched profiler's KREX_CUTLASS_REPORTS, docs/CUTLASS.md: one line per region,
with the region's krex::region_report), each of the run's samples is joined to
its region's line by (run, problem index, kernel): the CSV's Problem and
Operation columns. A last section then relates, per mode with such files, each
sample's inflation to the SM clock and power of its own region at entry and
exit: inflation per group (SM clock at the highest seen or below it, power at
exit above or at most the mode's median, a power or thermal slowdown reason at
entry or exit), the Spearman correlation of inflation with the exit SM clock
and power. Without any such file the section says so.
"""
import csv
import json
import math
import os
import re
import statistics
import sys
from collections import defaultdict
from itertools import combinations

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from quantiles import quantile  # noqa: E402  (scripts/quantiles.py: the scripts' one quantile)
from krex_compare import _ranks as average_ranks  # noqa: E402  (scripts/krex_compare.py: ties averaged)

KEY_COLUMNS = ("m", "n", "k", "batch_count", "A", "B")


def read_run(path, samples=None):
    """{(problem, kernel): [runtime_ms, ...]} and the number of failed rows of one CSV;
    `samples`, if given, receives (problem index, problem, kernel, runtime_ms) of each timed row."""
    times = defaultdict(list)
    failed = []
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or "Runtime" not in reader.fieldnames or "Operation" not in reader.fieldnames:
            raise SystemExit(f"{path}: not a cutlass_profiler CSV (no Operation/Runtime columns)")
        cols = [c for c in KEY_COLUMNS if c in reader.fieldnames]
        for row in reader:
            if row.get("Provider", "CUTLASS") != "CUTLASS":
                continue
            problem = " ".join(f"{c}={row[c]}" for c in cols)
            kernel = row["Operation"]
            if row.get("Status", "success") != "success":
                failed.append((problem, kernel, row.get("Status")))
                continue
            try:
                t = float(row["Runtime"])
            except (TypeError, ValueError):
                failed.append((problem, kernel, "runtime " + repr(row["Runtime"])))
                continue
            if not math.isfinite(t) or t <= 0:
                failed.append((problem, kernel, "runtime " + row["Runtime"]))
                continue
            times[(problem, kernel)].append(t)
            if samples is not None:
                samples.append((row.get("Problem"), problem, kernel, t))
    return times, failed


def ranking(times_by_kernel):
    """Kernels fastest first; ties broken by name so that the order is total."""
    return [k for k, _ in sorted(times_by_kernel.items(), key=lambda kv: (kv[1], kv[0]))]


def inversions(order, ref):
    pos = {k: i for i, k in enumerate(order)}
    common = [k for k in ref if k in pos]
    return sum(1 for a, b in combinations(common, 2) if pos[a] > pos[b]), len(common)


def run_rankings(run, problem, kernels):
    """The run's ranking of `kernels` on `problem` (median of its samples), or None if it lacks one."""
    med = {}
    for k in kernels:
        v = run.get((problem, k))
        if not v:
            return None
        med[k] = statistics.median(v)
    return ranking(med)


CLOSE = 0.05  # pairs from --min-gap up to this far apart are "close"


def pair_band(med, a, b, min_gap):
    """'close', 'far' or None (within the noise) for kernels a, b by their solo medians."""
    lo, hi = sorted((med[a], med[b]))
    gap = hi / lo - 1
    if gap < min_gap:
        return None
    return "close" if gap < CLOSE else "far"


def rank_stats(runs, problem, ref_order, med=None, min_gap=0.02):
    flips = inv = pairs_total = missing = 0
    band_pairs = {"close": 0, "far": 0}
    band_inv = {"close": 0, "far": 0}
    # The solo ranking's pairs outside the noise, by band (a is faster than b in solo).
    banded = [] if med is None else [(a, b, band) for a, b in combinations(ref_order, 2)
                                     for band in [pair_band(med, a, b, min_gap)] if band is not None]
    any_flip = 0
    n = 0
    for run in runs:
        order = run_rankings(run, problem, ref_order)
        if order is None:
            missing += 1
            continue
        n += 1
        i, c = inversions(order, ref_order)
        inv += i
        pairs_total += c * (c - 1) // 2
        flips += order[0] != ref_order[0]
        any_flip += i > 0
        pos = {k: j for j, k in enumerate(order)}
        for a, b, band in banded:
            band_pairs[band] += 1
            band_inv[band] += pos[a] > pos[b]
    return {"runs": n, "runs_missing_a_kernel": missing, "winner_flips": flips,
            "runs_with_any_inversion": any_flip, "inversions": inv, "pairs_compared": pairs_total,
            "close_inversions": band_inv["close"], "close_pairs_compared": band_pairs["close"],
            "far_inversions": band_inv["far"], "far_pairs_compared": band_pairs["far"]}


def finite(x):
    """x with NaN and infinities as None (JSON has neither)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    return x


def short_names(problems, kernels):
    """Display names: problems as MxNxK (plus the key parts that differ between
    problems), kernels without their common prefix (returned too)."""
    parts = {p: dict(t.split("=", 1) for t in p.split()) for p in problems}
    varying = [c for c in KEY_COLUMNS if c not in ("m", "n", "k")
               and len({d.get(c) for d in parts.values()}) > 1]
    prob = {}
    for p, d in parts.items():
        name = "x".join(d.get(c, "?") for c in ("m", "n", "k"))
        prob[p] = " ".join([name] + [f"{c}={d[c]}" for c in varying if c in d])
    prefix = os.path.commonprefix(sorted(kernels)) if len(kernels) > 1 else ""
    prefix = prefix[:prefix.rfind("_") + 1]
    return prob, {k: k[len(prefix):] for k in kernels}, prefix


def fmt_pct(x):
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.1f}%"


# NVML clocks-event reasons that slow a kernel down (include/krex/detail/clocks.hpp,
# device_clocks::slowdown_mask): 0x4 software power cap, 0x8 hardware slowdown,
# 0x20 software thermal, 0x40 hardware thermal, 0x80 power brake. 0x1 (idle),
# 0x2 (application clocks), 0x10 (sync boost), 0x100 (display clock) are not.
SLOWDOWN_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
NO_REGIONS = "no region reports (KREX_CUTLASS_REPORTS not set in this run)"


def regions_path(csv_path):
    """X.regions.jsonl for the profiler's X.<operation>.csv."""
    return re.sub(r"(\.[A-Za-z0-9_]+)?\.csv$", "", csv_path) + ".regions.jsonl"


def read_regions(path):
    """{(problem index, kernel): [line, ...]} of one run's region reports, and the
    number of lines that are not JSON objects (e.g. cut off by a killed profiler)."""
    lines, bad = defaultdict(list), 0
    with open(path) as f:
        for text in f:
            if not text.strip():
                continue
            try:
                d = json.loads(text)
                key = (str(d["problem_index"]), d["operation"])
                d["report"]["level"]  # noqa: B018  (a line without a report is unreadable)
            except (ValueError, KeyError, TypeError):
                bad += 1
                continue
            lines[key].append(d)
    return lines, bad


def spearman(x, y):
    """Spearman's rank correlation (ties get their average rank); None for fewer
    than 3 pairs or a constant side."""
    if len(x) < 3:
        return None
    (rx, _), (ry, _) = average_ranks(x), average_ranks(y)
    mx, my = statistics.fmean(rx), statistics.fmean(ry)
    sxy = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    return None if sxx == 0 or syy == 0 else sxy / math.sqrt(sxx * syy)


def join_regions(paths, samples_of, ref):
    """The samples of one mode's runs joined to their region lines: (the joined
    samples [{inflation, entry, exit}], counts). A sample's line is the run's line
    with its problem index and kernel; of several (a kernel timed more than once),
    the one whose runtime is closest to the sample's."""
    joined = []
    c = {"runs": len(paths), "runs_with_reports": 0, "region_lines": 0, "unreadable_lines": 0, "samples": 0,
         "joined": 0, "lines_without_sample": 0, "runtime_mismatches": 0}
    for path in paths:
        samples = [s for s in samples_of[path] if (s[1], s[2]) in ref]
        c["samples"] += len(samples)
        rpath = regions_path(path)
        if not os.path.exists(rpath):
            continue
        c["runs_with_reports"] += 1
        lines, bad = read_regions(rpath)
        c["unreadable_lines"] += bad
        c["region_lines"] += sum(len(v) for v in lines.values())
        used = 0
        for index, problem, kernel, t in samples:
            cand = lines.get((str(index), kernel))
            if not cand:
                continue
            best = min(cand, key=lambda d: abs(d["runtime_ms"] - t) if d["runtime_ms"] is not None else math.inf)
            cand.remove(best)
            used += 1
            # The CSV has 6 significant digits: a runtime further off is another loop's.
            if best["runtime_ms"] is None or abs(best["runtime_ms"] / t - 1) > 1e-5:
                c["runtime_mismatches"] += 1
            rep_ = best["report"]
            joined.append({"inflation": t / ref[(problem, kernel)] - 1,
                           "entry": rep_.get("clocks_entry"), "exit": rep_.get("clocks_exit")})
        c["joined"] += used
        c["lines_without_sample"] += sum(len(v) for v in lines.values())
    return joined, c


def region_section(modes_paths, samples_of, ref):
    """compare.md's region section (lines) and its JSON."""
    title = "\n### Inflation against each region's own SM clock and power (region reports)\n"
    per_mode = {}
    for mode, paths in modes_paths.items():
        if any(os.path.exists(regions_path(p)) for p in paths):
            per_mode[mode] = join_regions(paths, samples_of, ref)
    if not per_mode:
        return [title, NO_REGIONS], {"note": NO_REGIONS}
    sm_max = max((s[k]["sm_mhz"] for joined, _ in per_mode.values() for s in joined for k in ("entry", "exit")
                  if s[k]), default=None)
    lines = [title,
             "Each timed sample joined to its region's report (KREX_CUTLASS_REPORTS) by run, problem index and "
             f"kernel. SM max: the highest SM clock at entry or exit of any region here ({sm_max or 'n/a'} MHz). "
             "Power median: the mode's, of the power at exit. Slowdown: an NVML clocks-event reason for power or "
             "thermal (0x4 power cap, 0x8 hw slowdown, 0x20/0x40 sw/hw thermal, 0x80 power brake). "
             "Spearman: rank correlation of inflation with the exit SM clock / exit power.\n",
             "| mode | runs with reports | region lines | samples | joined | runtime mismatches | lines without a "
             "sample | exit SM MHz median / min | exit power W median / max | slowdown at entry / exit | "
             "Spearman inflation~exit SM | Spearman inflation~exit power |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []
    groups_md = ["", "| mode | group | samples | median inflation | p95 inflation |", "|---|---|---|---|---|"]
    out = {"sm_max_mhz": sm_max, "modes": {}}

    def fmt_r(r):
        return "n/a" if r is None else f"{r:+.2f}"

    def mm(a, b, d=0):
        return "-" if a is None else f"{a:.{d}f} / {b:.{d}f}"

    for mode, (joined, c) in per_mode.items():
        both = [s for s in joined if s["entry"] and s["exit"]]
        infl = [s["inflation"] for s in both]
        sm_exit = [s["exit"]["sm_mhz"] for s in both]
        pw_exit = [s["exit"]["power_mw"] / 1000 for s in both]
        pw_med = statistics.median(pw_exit) if pw_exit else None
        def slow(s, k):
            return (int(s[k]["reasons"]) & SLOWDOWN_MASK) != 0
        pw = "n/a" if pw_med is None else f"{pw_med:g}"
        groups = [  # (JSON key, compare.md label, predicate)
            ("exit_sm_at_max", f"exit SM clock at max ({sm_max} MHz)", lambda s: s["exit"]["sm_mhz"] == sm_max),
            ("exit_sm_below_max", "exit SM clock below max", lambda s: s["exit"]["sm_mhz"] < sm_max),
            ("entry_sm_at_max", f"entry SM clock at max ({sm_max} MHz)", lambda s: s["entry"]["sm_mhz"] == sm_max),
            ("entry_sm_below_max", "entry SM clock below max", lambda s: s["entry"]["sm_mhz"] < sm_max),
            ("exit_power_above_median", f"exit power > median ({pw} W)",
             lambda s: s["exit"]["power_mw"] / 1000 > pw_med),
            ("exit_power_at_most_median", "exit power <= median", lambda s: s["exit"]["power_mw"] / 1000 <= pw_med),
            ("slowdown_at_entry", "a slowdown reason at entry", lambda s: slow(s, "entry")),
            ("no_slowdown_at_entry", "no slowdown reason at entry", lambda s: not slow(s, "entry")),
            ("slowdown_at_exit", "a slowdown reason at exit", lambda s: slow(s, "exit")),
            ("no_slowdown_at_exit", "no slowdown reason at exit", lambda s: not slow(s, "exit")),
        ]
        m = dict(c, with_clocks=len(both),
                 exit_sm_mhz_median=statistics.median(sm_exit) if sm_exit else None,
                 exit_sm_mhz_min=min(sm_exit, default=None),
                 exit_power_w_median=pw_med, exit_power_w_max=max(pw_exit, default=None),
                 slowdown_at_entry=sum(1 for s in both if slow(s, "entry")),
                 slowdown_at_exit=sum(1 for s in both if slow(s, "exit")),
                 spearman_inflation_exit_sm=spearman(infl, sm_exit),
                 spearman_inflation_exit_power=spearman(infl, pw_exit), groups={})
        for key, label, pred in groups:
            g = [s["inflation"] for s in both if pred(s)]
            m["groups"][key] = {"label": label, "samples": len(g), "median_inflation": quantile(g, 0.5),
                                "p95_inflation": quantile(g, 0.95)}
            groups_md.append(f"| {mode} | {label} | {len(g)} | {fmt_pct(quantile(g, 0.5))} | "
                             f"{fmt_pct(quantile(g, 0.95))} |")
        out["modes"][mode] = m
        lines.append(f"| {mode} | {c['runs_with_reports']} / {c['runs']} | {c['region_lines']} | {c['samples']} | "
                     f"{c['joined']} | {c['runtime_mismatches']} | {c['lines_without_sample']} | "
                     f"{mm(m['exit_sm_mhz_median'], m['exit_sm_mhz_min'])} | "
                     f"{mm(pw_med, m['exit_power_w_max'], 1)} | {m['slowdown_at_entry']} / {m['slowdown_at_exit']} | "
                     f"{fmt_r(m['spearman_inflation_exit_sm'])} | {fmt_r(m['spearman_inflation_exit_power'])} |")
        if c["unreadable_lines"]:
            notes.append(f"{mode}: {c['unreadable_lines']} region report line(s) unreadable, left out.")
    if notes:
        lines += [""] + notes
    return lines + groups_md, out


def main(argv):
    out_json = None
    min_gap = 0.02
    lost = {}
    args = []
    i = 1
    while i < len(argv):
        a = argv[i]
        if a in ("--json", "--lost", "--min-gap"):
            if i + 1 >= len(argv):
                print(f"{a} needs a value", file=sys.stderr)
                return 2
            if a == "--json":
                out_json = argv[i + 1]
            elif a == "--min-gap":
                try:
                    min_gap = float(argv[i + 1])
                except ValueError:
                    min_gap = -1.0
                if not 0 < min_gap < CLOSE:
                    print(f"--min-gap wants a fraction between 0 and {CLOSE} (0.02 = 2%), "
                          f"not {argv[i + 1]!r}", file=sys.stderr)
                    return 2
            else:
                mode, _, n = argv[i + 1].partition("=")
                lost[mode] = int(n)
            i += 2
            continue
        args.append(a)
        i += 1
    if len(args) < 2 or "=" in args[0]:
        print(__doc__, file=sys.stderr)
        return 2

    solo_paths = [p for p in args[0].split(",") if p]
    solo_runs = [read_run(p) for p in solo_paths]
    modes = {}
    modes_paths = {}  # for the region reports: each mode's CSV paths and their samples
    samples_of = {}
    for spec in args[1:]:
        mode, sep, files = spec.partition("=")
        if not sep or not mode:
            print(f"not MODE=FILES: {spec}", file=sys.stderr)
            return 2
        modes_paths[mode] = [p for p in files.split(",") if p]
        modes[mode] = []
        for p in modes_paths[mode]:
            samples_of[p] = []
            modes[mode].append(read_run(p, samples_of[p]))

    solo_samples = defaultdict(list)
    for times, _ in solo_runs:
        for key, v in times.items():
            solo_samples[key].extend(v)
    if not solo_samples:
        print("the solo runs hold no successful result", file=sys.stderr)
        return 1
    ref = {key: statistics.median(v) for key, v in solo_samples.items()}
    problems = sorted({p for p, _ in ref}, key=lambda p: [int(t.split("=")[1]) if t.split("=")[1].isdigit() else t
                                                        for t in p.split()])
    kernels_of = {p: sorted(k for q, k in ref if q == p) for p in problems}

    result = {"solo_runs": len(solo_runs), "min_gap": min_gap, "close_below": CLOSE,
              "problems": {}, "modes": {}}
    pname, kname, prefix = short_names(problems, sorted({k for _, k in ref}))
    lines = []
    if prefix:
        lines.append(f"Kernels: {prefix}<name below>. Inflation: runtime / solo median - 1.\n")
    lines.append("### Runtime inflation over solo (per problem and kernel)\n")
    lines.append("| problem | kernel | solo median ms | solo spread | mode | samples | median | p95 | worst |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for p in problems:
        result["problems"][p] = {"kernels": {}}
        for k in kernels_of[p]:
            s = solo_samples[(p, k)]
            spread = max(s) / min(s) - 1
            entry = {"solo_median_ms": ref[(p, k)], "solo_samples": len(s), "solo_spread": spread, "modes": {}}
            for mode, runs in modes.items():
                samples = [t for times, _ in runs for t in times.get((p, k), [])]
                if not samples:
                    continue
                infl = [t / ref[(p, k)] - 1 for t in samples]
                r = {"samples": len(samples), "median_inflation": quantile(infl, 0.5),
                     "p95_inflation": quantile(infl, 0.95), "worst_inflation": max(infl)}
                entry["modes"][mode] = r
                lines.append(f"| {pname[p]} | {kname[k]} | {ref[(p, k)]:.4f} | {fmt_pct(spread)} | {mode} | {r['samples']} | "
                             f"{fmt_pct(r['median_inflation'])} | {fmt_pct(r['p95_inflation'])} | "
                             f"{fmt_pct(r['worst_inflation'])} |")
            result["problems"][p]["kernels"][k] = entry

    lines.append("\n### Kernel ranking vs solo (per problem)\n")
    lines.append("| problem | solo winner | gap to #2 | mode | runs | winner flips | runs with an inversion | "
                 f"inversions / pairs | close ({100 * min_gap:g}-{100 * CLOSE:g}%) inversions | "
                 f"far (>={100 * CLOSE:g}%) inversions |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    solo_only = [times for times, _ in solo_runs]
    for p in problems:
        med = {k: ref[(p, k)] for k in kernels_of[p]}
        order = ranking(med)
        gap = med[order[1]] / med[order[0]] - 1 if len(order) > 1 else None
        result["problems"][p]["solo_ranking"] = order
        result["problems"][p]["gap_first_second"] = gap
        result["problems"][p]["ranking"] = {}
        for mode, runs in [("solo", solo_only)] + [(m, [t for t, _ in r]) for m, r in modes.items()]:
            st = rank_stats(runs, p, order, med, min_gap)
            result["problems"][p]["ranking"][mode] = st
            lines.append(f"| {pname[p]} | {kname[order[0]]} | {fmt_pct(gap)} | {mode} | {st['runs']} | {st['winner_flips']} | "
                         f"{st['runs_with_any_inversion']} | {st['inversions']} / {st['pairs_compared']} | "
                         f"{st['close_inversions']} / {st['close_pairs_compared']} | "
                         f"{st['far_inversions']} / {st['far_pairs_compared']} |")

    lines.append("\n### Summary per mode\n")
    lines.append("| mode | runs | samples | median inflation | p95 inflation | worst | winner flips | inversions / pairs | "
                 f"close ({100 * min_gap:g}-{100 * CLOSE:g}%) inversions | far inversions | failed results | lost leases |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for mode, runs in [("solo", solo_runs)] + list(modes.items()):
        infl = []
        for times, _ in runs:
            for key, v in times.items():
                if key in ref:
                    infl.extend(t / ref[key] - 1 for t in v)
        flips = sum(result["problems"][p]["ranking"][mode]["winner_flips"] for p in problems)
        inv = sum(result["problems"][p]["ranking"][mode]["inversions"] for p in problems)
        pairs = sum(result["problems"][p]["ranking"][mode]["pairs_compared"] for p in problems)
        band = {f: sum(result["problems"][p]["ranking"][mode][f] for p in problems)
                for f in ("close_inversions", "close_pairs_compared", "far_inversions", "far_pairs_compared")}
        failed = sum(len(f) for _, f in runs)
        m = {"runs": len(runs), "samples": len(infl), "median_inflation": quantile(infl, 0.5),
             "p95_inflation": quantile(infl, 0.95), "worst_inflation": max(infl) if infl else float("nan"),
             "winner_flips": flips, "inversions": inv, "pairs_compared": pairs, **band,
             "failed_results": failed,
             "failures": [list(x) for _, f in runs for x in f][:50]}
        if mode in lost:
            m["lost_leases"] = lost[mode]
        result["modes"][mode] = m
        lines.append(f"| {mode} | {len(runs)} | {len(infl)} | {fmt_pct(m['median_inflation'])} | "
                     f"{fmt_pct(m['p95_inflation'])} | {fmt_pct(m['worst_inflation'])} | {flips} | {inv} / {pairs} | "
                     f"{band['close_inversions']} / {band['close_pairs_compared']} | "
                     f"{band['far_inversions']} / {band['far_pairs_compared']} | {failed} | "
                     f"{lost.get(mode, 'n/a')} |")

    region_lines, result["regions"] = region_section(modes_paths, samples_of, ref)
    lines += region_lines
    print("\n".join(lines))
    if out_json:
        with open(out_json, "w") as f:
            json.dump(finite(result), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
