#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Compares two benchmark runs, benchmark by benchmark, with a significance
test on the samples (like google/benchmark's tools/compare.py).

usage: krex_compare.py A.json B.json [--a-group G] [--b-group G]
                       [--filter REGEX] [--alpha 0.05] [--json OUT]

For every benchmark in both files it prints the samples on each side, the
medians, the change of B's median against A's, and the two-sided
Mann-Whitney U test's p-value on the samples: "slower" or "faster" when
p < alpha, "same" (no significant change) otherwise. With fewer than 5
samples a side no change can be significant; such rows say "too few".

Inputs (the format is recognised from the JSON):
  Google Benchmark --benchmark_out (or --benchmark_format=json): one sample
      per repetition (run_type "iteration", error rows left out), keyed by
      run name; krex's label warnings are counted and shown.
  krex_eval's eval.json (bench/eval, docs/EVAL.md): every timed sample of
      every command, keyed "<configuration label>/<command id>".
  bench/python/kernelbench_style.py's kernelbench_style.json: every sample,
      keyed "<mode>/<problem>/<candidate>" (mode solo, unprotected, krex).
  krex_demo --json: every sample, keyed by mode.
The part before the first "/" is the key's group (configuration or mode; a
key without "/", a demo mode, is a group whose one benchmark is named "-");
--a-group / --b-group compare one group of A with one of B by the rest of
the key (e.g. an eval's krex:16 against its lock:16, from one file or two).
Times are milliseconds. Exit status: 0 compared, 2 an input cannot be read
or has nothing in common with the other, 64 usage. Standard library only.
"""
import argparse
import json
import math
import re
import sys
from collections import OrderedDict, defaultdict

from quantiles import quantile  # scripts/quantiles.py, beside this script

MIN_SAMPLES = 5  # two-sided exact p-values cannot go below 0.05 with fewer


class InputError(Exception):
    pass


# ------------------------------------------------------------------ readers
def _gbench(data):
    out = defaultdict(list)
    warned = defaultdict(int)
    for b in data.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        name = re.sub(r"/manual_time$", "", b.get("run_name", b["name"]))
        unit = b.get("time_unit", "ns")
        if unit not in ("ns", "us", "ms", "s"):
            raise InputError("unknown time_unit %r in benchmark %s" % (unit, name))
        out[name].append(b["real_time"] * {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[unit])
        if "WARNING" in b.get("label", "") or b.get("krex_warnings", 0) > 0:
            warned[name] += 1
    return out, warned


def _eval(data):
    out = defaultdict(list)
    for cfg in data.get("configs", []):
        for c in cfg.get("commands", []):
            res = c.get("result") or {}
            if c.get("ok") and res.get("samples_ms"):
                out["%s/%s" % (cfg["label"], c["id"])].extend(res["samples_ms"])
    return out, {}


def _python(data):
    out = defaultdict(list)
    for mode, rows in data.get("raw", {}).items():
        for r in rows:
            for cand, samples in (r.get("samples_ms") or {}).items():
                out["%s/%s/%s" % (mode, r.get("problem", "?"), cand)].extend(samples)
    return out, {}


def _demo(data):
    out = OrderedDict()
    for m in data.get("modes", []):
        out[m["mode"]] = list(m.get("samples_ms", []))
    return out, {}


def load(path):
    """{benchmark: [samples, ms]}, {benchmark: runs with krex warnings}, format name."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError("cannot read %s: %s" % (path, e))
    if not isinstance(data, dict):
        raise InputError("%s: not a JSON object" % path)
    if "benchmarks" in data:
        kind, (s, w) = "gbench", _gbench(data)
    elif "configs" in data and "meta" in data:
        kind, (s, w) = "eval", _eval(data)
    elif "raw" in data and "modes" in data:
        kind, (s, w) = "python", _python(data)
    elif "modes" in data and "solo_median_ms" in data:
        kind, (s, w) = "demo", _demo(data)
    else:
        raise InputError("%s: not Google Benchmark, krex_eval, kernelbench_style or krex_demo "
                         "JSON (see krex_compare.py --help)" % path)
    return {k: v for k, v in s.items() if v}, dict(w), kind


# --------------------------------------------------------- Mann-Whitney U
def _ranks(values):
    """Average ranks (1-based) of `values`, and the tie-group sizes."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    ties = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2.0 + 1
        ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


def _exact_cdf(u, n1, n2):
    """P(U <= u) under H0 without ties: counts of rank-sum arrangements."""
    # f[i][j][s]: arrangements of i x's and j y's with U = s (recurrence on the largest element).
    f = [[None] * (n2 + 1) for _ in range(n1 + 1)]
    for i in range(n1 + 1):
        for j in range(n2 + 1):
            if i == 0 or j == 0:
                f[i][j] = [1]
                continue
            a, b = f[i - 1][j], f[i][j - 1]  # largest is an x (adds j to U) or a y
            c = [0] * (i * j + 1)
            for s, n in enumerate(a):
                c[s + j] += n
            for s, n in enumerate(b):
                c[s] += n
            f[i][j] = c
    counts = f[n1][n2]
    return sum(counts[: int(math.floor(u)) + 1]) / float(sum(counts))


def mann_whitney_u(x, y):
    """Two-sided Mann-Whitney U test: (U of x, p-value). Exact without ties
    and with both samples under 50 (as SciPy's method "auto"); otherwise the
    normal approximation with tie and continuity corrections."""
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        return float("nan"), float("nan")
    ranks, ties = _ranks(list(x) + list(y))
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2.0
    u_small = min(u1, n1 * n2 - u1)
    if all(t == 1 for t in ties) and n1 < 50 and n2 < 50:
        return u1, min(1.0, 2.0 * _exact_cdf(u_small, n1, n2))
    n = n1 + n2
    var = n1 * n2 / 12.0 * ((n + 1) - sum(t ** 3 - t for t in ties) / float(n * (n - 1)))
    if var <= 0:
        return u1, 1.0  # every sample equal
    z = (abs(u1 - n1 * n2 / 2.0) - 0.5) / math.sqrt(var)
    return u1, min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0)))


# ------------------------------------------------------------------ compare
def _split(key):
    """(group, rest); a key without "/" (the demo's modes) is all group, rest "-"."""
    group, _, rest = key.partition("/")
    return group, rest or "-"


def pairs(a, b, a_group=None, b_group=None):
    """[(name, a_key, b_key)] of the benchmarks both sides have."""
    if a_group is None and b_group is None:
        return [(k, k, k) for k in a if k in b]

    def select(d, g):
        if g is None:
            return {k: k for k in d}
        return {_split(k)[1]: k for k in d if _split(k)[0] == g}

    sa, sb = select(a, a_group), select(b, b_group)
    return [(n, sa[n], sb[n]) for n in sa if n in sb]


def compare(a, b, alpha=0.05, a_group=None, b_group=None, pattern=None, a_warned=None,
            b_warned=None):
    rows = []
    for name, ka, kb in pairs(a, b, a_group, b_group):
        if pattern and not re.search(pattern, name):
            continue
        x, y = a[ka], b[kb]
        ma, mb = quantile(x, 0.5), quantile(y, 0.5)
        u, p = mann_whitney_u(x, y)
        if min(len(x), len(y)) < MIN_SAMPLES:
            verdict = "too few"
        elif p < alpha:
            verdict = "slower" if mb > ma else "faster"
        else:
            verdict = "same"
        rows.append(OrderedDict([
            ("benchmark", name), ("n_a", len(x)), ("n_b", len(y)), ("median_a_ms", ma),
            ("median_b_ms", mb), ("p95_a_ms", quantile(x, 0.95)), ("p95_b_ms", quantile(y, 0.95)),
            ("change", (mb - ma) / ma if ma else float("nan")), ("u", u), ("p", p),
            ("verdict", verdict), ("warned_a", (a_warned or {}).get(ka, 0)),
            ("warned_b", (b_warned or {}).get(kb, 0))]))
    return rows


def table(rows, alpha):
    w = max([len("benchmark")] + [len(r["benchmark"]) for r in rows])
    out = ["%-*s %5s %5s %12s %12s %9s %9s  %s" % (w, "benchmark", "n A", "n B", "median A ms",
                                                 "median B ms", "change", "p", "verdict")]
    for r in rows:
        note = ""
        if r["warned_a"] or r["warned_b"]:
            note = "  (krex warnings: %d A, %d B)" % (r["warned_a"], r["warned_b"])
        out.append("%-*s %5d %5d %12.6g %12.6g %+8.2f%% %9.4f  %s%s" % (
            w, r["benchmark"], r["n_a"], r["n_b"], r["median_a_ms"], r["median_b_ms"],
            100 * r["change"], r["p"], r["verdict"], note))
    sig = sum(r["verdict"] in ("slower", "faster") for r in rows)
    out.append("%d benchmarks compared; %d changed significantly (two-sided Mann-Whitney U, "
               "alpha %g); fewer than %d samples a side: \"too few\"" % (len(rows), sig, alpha,
                                                                        MIN_SAMPLES))
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="krex_compare.py", description=__doc__.split("\n\n")[0],
        epilog="Formats: Google Benchmark JSON, krex_eval eval.json, kernelbench_style.json, "
               "krex_demo --json.")
    ap.add_argument("a", metavar="A.json")
    ap.add_argument("b", metavar="B.json")
    ap.add_argument("--a-group", help="compare only A's benchmarks in this group")
    ap.add_argument("--b-group", help="compare only B's benchmarks in this group")
    ap.add_argument("--filter", help="only benchmarks whose name matches this regex")
    ap.add_argument("--alpha", type=float, default=0.05, help="significance level (default 0.05)")
    ap.add_argument("--json", metavar="OUT", help="also write the rows as JSON to OUT")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 64 if e.code else 0
    if not 0 < args.alpha < 1:
        print("krex_compare.py: --alpha must be in (0, 1)", file=sys.stderr)
        return 64
    try:
        a, wa, ka = load(args.a)
        b, wb, kb = load(args.b)
    except InputError as e:
        print("krex_compare.py: %s" % e, file=sys.stderr)
        return 2
    rows = compare(a, b, args.alpha, args.a_group, args.b_group, args.filter, wa, wb)
    if not rows:
        if args.a_group or args.b_group:
            hint = "; groups in A: %s; in B: %s" % (
                ", ".join(sorted({_split(k)[0] for k in a})),
                ", ".join(sorted({_split(k)[0] for k in b})))
        else:
            hint = "; --a-group/--b-group compare groups by the rest of the name"
        print("krex_compare.py: %s (%s, %d benchmarks) and %s (%s, %d benchmarks) have no "
              "benchmark in common%s" % (args.a, ka, len(a), args.b, kb, len(b), hint),
              file=sys.stderr)
        return 2
    print("A: %s (%s)\nB: %s (%s)\n" % (args.a, ka, args.b, kb))
    print(table(rows, args.alpha))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"a": args.a, "b": args.b, "alpha": args.alpha, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
