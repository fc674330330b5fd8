#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Offline forensics of rank flips in a `krex_eval` run (issue 19): what sets
the flipped pairs, and the commands behind them, apart from the rest. Reads
only the recorded eval.json(.gz); no GPU. Standard library only.

usage: flip_forensics.py [--only T4,T7,...] EVAL.json[.gz] [EVAL.json[.gz] ...]

Each file is labelled by its folder's name (run1-krex/eval.json.gz: run1-krex).
Output (Markdown tables, deterministic: the permutation tests use a fixed seed;
--only prints the named tables alone, in this order):

  T1  flips by gap class, recomputed the way bench/eval does (trials of set,
      timing and copy against the reference pass), checked against the JSON.
  T2a flips and pairs by set and gap class.
  T2  the flipped pairs: their set, and which member moved. A member's
      deviation is its command median against the native repeat's median of
      the same command id (the "baseline": the median of the native copies'
      medians, steadier than the one reference pass); the member that moved
      is the one farther from its baseline: the pair's larger-work member
      fast, or its smaller-work member slow.
  T3  command deviations (% from the baseline), by set group: the short
      axpby sets (axpby-16M, axpby-16M-wide; ~55-70 us) and the rest (>= 1 ms).
  T4  samples of the axpby-16M set: each sample's deviation from the
      command's baseline; how the samples of one command split between the
      two levels (share of samples more than 1.5% fast), and how long a fast
      stretch lasts (mean run of consecutive fast samples); where the two
      levels lie (median deviation of the fast samples and of the others).
  T5  persistent configurations, the short axpby commands: "deviant" ones
      (|deviation| > 1%, fast or slow) against one condition at a time, with
      a two-sided Fisher exact p (deviant or not x condition or not).
  T6  who carries the deviation: the share of the short commands' deviation
      variance between candidate ids and between workers (eta squared), with
      a permutation p (2000 shuffles, seed 19); also against the reference.
  T7  the axpby-16M candidates one by one: each copy's deviation, sorted,
      and how many worker processes ran the copies.

Only for runs whose worker recorded them (bench/eval/worker.cu after issue
19's forensics; nothing is printed for older runs):

  T8  the device state of the short axpby commands' regions (krex mode): the
      clocks at region entry and exit (SM, memory), power, temperature, the
      NVML clocks-event reasons, the quiet step's last probe ratio; then, as
      T5, deviant commands against one condition at a time on these fields.
  T9  placement: where the axpby-16M commands' buffers lay (x_addr, y_addr,
      z_addr, flush_addr): x modulo 2 MiB and 64 KiB, whether y and z follow
      x packed (the previous buffer's size rounded up to 2 MiB), the flush
      buffer before or after x, and whether the worker had used the same x
      address before; then each feature against the commands' share of fast
      samples (T4's definition): eta squared and permutation p.
  T10 every run given pooled by configuration label: flips by gap class,
      each configuration against the native repeats of the runs it appears
      in (pooled), the difference in points and a one-sided Fisher exact p.
  T11 the axpby-16M fast samples by their index in the command: the share at
      even and at odd indices, and how many commands alternate (one parity
      carries the fast samples: odd or even) or do not.
  T12 the axpby-16M batched commands by T11's class (odd, even, none): their
      deviation (median, sd), how many are deviant (T5), their fast share.
  T13 what timing a candidate over several allocations buys: for every pair
      of candidates in a rank set and timing, the probability that their
      order differs from the reference pass's when each one's time is the
      median of k of its commands (k = 1, 3, 5; each command its own
      allocation), exact over every k-subset of the commands (beyond 50,000
      subsets, 50,000 drawn with seed 19), averaged over the pairs of each
      gap class.
  T14 which statistic ranks: every run given pooled by configuration label,
      flips against the construction order (more work is slower: the known
      order) by the reference's gap class, per timing, each command's time
      its median or its samples' 10th percentile (krex_eval's rank_low_q,
      interpolated as krex::measure's quantiles).
"""
import bisect
import gzip
import itertools
import json
import math
import os
import random
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from quantiles import quantile  # noqa: E402  (scripts/quantiles.py: the scripts' one quantile)

GAP_NAMES = ["0-1%", "1-2%", "2-5%", ">5%"]
SHORT_SETS = ("axpby-16M", "axpby-16M-wide")
BIG_SET = "axpby-448M-fine"  # four 448M-float buffers: ~7.5 GB allocated and freed per command
FAST_SAMPLE_PCT = -1.5       # a sample this far below its baseline is "fast" (T4)
DEVIANT_PCT = 1.0            # a command median this far from its baseline is "deviant" (T5)


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def label_of(path):
    return os.path.basename(os.path.dirname(os.path.abspath(path))) or path


def set_kind(s):
    return "fine" if s.endswith("-fine") else "wide" if s.endswith("-wide") else "coarse"


def gap_class(a, b):
    g = abs(a - b) / min(a, b) * 100.0
    return 0 if g < 1 else 1 if g < 2 else 2 if g < 5 else 3


def hypergeom(r1, r2, c1):
    """The probability of a first-row count x in a 2x2 table with row sums r1,
    r2 and first-column sum c1 (the Fisher tests' null distribution)."""
    total = math.comb(r1 + r2, c1)
    return lambda x: math.comb(r1, x) * math.comb(r2, c1 - x) / total


def fisher_two_sided(a, b, c, d):
    """Two-sided Fisher exact p of the 2x2 table [[a, b], [c, d]]: the sum of
    the probabilities of every table with the same margins that is no more
    likely than the observed one."""
    r1, r2, c1 = a + b, c + d, a + c
    prob = hypergeom(r1, r2, c1)
    p_obs = prob(a)
    lo, hi = max(0, c1 - r2), min(r1, c1)
    return min(1.0, sum(prob(x) for x in range(lo, hi + 1) if prob(x) <= p_obs * (1 + 1e-9)))


def fisher_greater(a, b, c, d):
    """One-sided Fisher exact p of the 2x2 table [[a, b], [c, d]]: the
    probability, with the same margins, of a first-row count of a or more
    (the first row flipping more often than the second)."""
    r1, r2, c1 = a + b, c + d, a + c
    prob = hypergeom(r1, r2, c1)
    return min(1.0, sum(prob(x) for x in range(a, min(r1, c1) + 1)))


def eta_squared(values, groups):
    mean = statistics.fmean(values)
    total = sum((v - mean) ** 2 for v in values)
    by = defaultdict(list)
    for v, g in zip(values, groups):
        by[g].append(v)
    between = sum(len(v) * (statistics.fmean(v) - mean) ** 2 for v in by.values())
    return between / total if total > 0 else float("nan")


def permutation_p(values, groups, shuffles=2000, seed=19):
    obs = eta_squared(values, groups)
    rng = random.Random(seed)
    v = list(values)
    hits = 0
    for _ in range(shuffles):
        rng.shuffle(v)
        if eta_squared(v, groups) >= obs - 1e-12:
            hits += 1
    return obs, (hits + 1) / (shuffles + 1)


def median_pct(values):
    """A median deviation for a table cell; "-" when there is none."""
    return f"{statistics.median(values):+.2f}" if values else "-"


def fmt_p(p):
    return "p < 0.001" if p < 0.001 else f"p {p:.3f}"


def pct(x, n):
    return f"{x}/{n} ({100.0 * x / n:.1f})" if n else "0/0"


class Run:
    """One eval.json: its configurations, the baseline per command id, and per
    command its deviation, worker, timeline and predecessors."""

    def __init__(self, path):
        self.label = label_of(path)
        self.d = load(path)
        self.ref = self.d["reference"]
        t0 = self.d["meta"]["run_start_mono_ns"]
        self.configs = [c for c in self.d["configs"] if c["role"] != "reference" and not c["skipped"]]
        # A configuration without one passed command (its workers failed) has nothing to tell.
        for c in self.configs:
            if not any(x["ok"] for x in c["commands"]):
                print(f"flip_forensics.py: {self.label}: {c['label']}: no passed command, left out", file=sys.stderr)
        self.configs = [c for c in self.configs if any(x["ok"] for x in c["commands"])]
        native = [c for c in self.configs if c["role"] == "repeat"]
        by_id = defaultdict(list)
        for cmd in native[0]["commands"] if native else []:
            if cmd["ok"]:
                by_id[cmd["id"]].append(cmd["result"]["median_ms"])
        self.base = {k: statistics.median(v) for k, v in by_id.items()}
        for c in self.configs:
            c["short"] = (c["label"].replace(" (serial)", "").replace(" (serial, spaced)", ", spaced")
                          .replace(" persistent", " pers."))
            cmds = [x for x in c["commands"] if x["ok"]]
            for x in cmds:
                r = x["result"]
                b = self.base.get(x["id"], self.ref.get(x["id"]))
                x["b"] = b
                x["dev"] = (r["median_ms"] / b - 1) * 100
                x["sdev"] = [(s / b - 1) * 100 for s in r["samples_ms"]]
                x["t_start"] = (r["mono_start_ns"] - t0) / 1e6
                x["t_end"] = x["t_start"] + r["t_cmd_ms"]
                x["t_crit"] = (r["mono_critical_ns"] - t0) / 1e6
                x["t_crit_end"] = x["t_crit"] + r["t_critical_ms"]
            by_pid = defaultdict(list)
            for x in cmds:
                by_pid[x["result"]["pid"]].append(x)
            for lst in by_pid.values():
                lst.sort(key=lambda x: x["t_start"])
                for i, x in enumerate(lst):
                    x["age"] = i
                    x["prev_w"] = lst[i - 1] if i else None
            regions = sorted(cmds, key=lambda x: x["t_crit"])
            for i, x in enumerate(regions):
                x["prev_d"] = regions[i - 1] if i else None
            c["ok_cmds"] = cmds
            c["t_first"] = min(x["t_crit"] for x in cmds)
            c["t_last"] = max(x["t_crit"] for x in cmds)

    def trials(self, c):
        t = defaultdict(list)
        for x in c["ok_cmds"]:
            r = x["result"]
            if r.get("set") and x["id"] in self.ref:
                t[(set_kind(r["set"]) + ", " + r["timing"], r["set"], x["rep"])].append(x)
        return t

    def pairs(self, c):
        """Every rank pair of the configuration: (gap class, flipped, small, big, set, timing)."""
        out = []
        for (grp, s, _rep), m in sorted(self.trials(c).items(), key=lambda kv: kv[0]):
            for i in range(len(m)):
                for j in range(i + 1, len(m)):
                    a, b = m[i], m[j]
                    if self.ref[a["id"]] > self.ref[b["id"]]:
                        a, b = b, a
                    ra, rb = self.ref[a["id"]], self.ref[b["id"]]
                    flipped = (ra - rb) * (a["result"]["median_ms"] - b["result"]["median_ms"]) < 0
                    out.append((gap_class(ra, rb), flipped, a, b, s, grp.split(", ")[1]))
        return out

    def gap_counts(self, c):
        """Pairs and flips of the configuration per gap class: ([pairs x4], [flips x4])."""
        n, f = [0] * 4, [0] * 4
        for g, flipped, *_ in self.pairs(c):
            n[g] += 1
            f[g] += flipped
        return n, f


def table(title, columns, note=None, keys=("run", "configuration")):
    """A table's title, its note (a paragraph) and its header: `keys`, then `columns`."""
    print(f"## {title}\n")
    if note:
        print(note + "\n")
    heads = list(keys) + list(columns)
    print("| " + " | ".join(heads) + " |")
    print("|" + "---|" * len(heads))


def each_config(runs):
    """(run, configuration) of every configuration of every run."""
    return [(R, c) for R in runs for c in R.configs]


def axpby16_by_timing(runs):
    """(run, configuration, timing, its axpby-16M commands) wherever there are any."""
    return [(R, c, tim, cmds) for R, c in each_config(runs) for tim in ("batched", "sync")
            for cmds in [axpby16_cmds(c, tim)] if cmds]


def t1(runs):
    table("T1: flips by gap class (recomputed; trials of set x timing x copy, against the "
          "reference pass)",
          ["0-1%", "1-2%", "2-5%", ">5%", "same as the JSON's by_gap"])
    for R, c in each_config(runs):
        n, f = R.gap_counts(c)
        js_n, js_f = defaultdict(int), defaultdict(int)
        for t in c["ranking"].values():
            for k, v in t["by_gap"].items():
                js_n[k] += v["pairs"]
                js_f[k] += v["flips"]
        same = all(js_n[GAP_NAMES[g]] == n[g] and js_f[GAP_NAMES[g]] == f[g] for g in range(4))
        print(f"| {R.label} | {c['short']} | " + " | ".join(pct(f[g], n[g]) for g in range(4))
              + f" | {'yes' if same else 'NO'} |")
    print()


def t10(runs):
    """Every run's pairs pooled by configuration label (each pair against its
    own run's reference pass), each configuration against the native repeats
    of the same runs, pooled."""
    table("T10: flips by gap class pooled over the runs given, by configuration", GAP_NAMES,
          "Each pair is judged against its own run's reference pass; each configuration is "
          "compared with the native repeats of the runs it appears in, pooled; the difference in "
          "points and a one-sided Fisher exact p (the configuration flips more often).",
          ("configuration", "runs"))
    pooled = {}  # label -> [runs, n[4], f[4], native n[4], native f[4]]
    natives = set()  # the native repeats' labels: "native repeat", "native repeat, spaced"
    for R in runs:
        counts = {}
        nat = None
        for c in R.configs:
            counts[c["short"]] = R.gap_counts(c)
            if c["role"] == "repeat":
                natives.add(c["short"])
                nat = counts[c["short"]]
        for label, (n, f) in counts.items():
            e = pooled.setdefault(label, [[], [0] * 4, [0] * 4, [0] * 4, [0] * 4])
            e[0].append(R.label)
            for g in range(4):
                e[1][g] += n[g]
                e[2][g] += f[g]
                if nat and label not in natives:
                    e[3][g] += nat[0][g]
                    e[4][g] += nat[1][g]
    order = sorted(pooled, key=lambda k: (k in natives, k))
    for label in order:
        runs_, n, f, nn, nf = pooled[label]
        cells = []
        for g in range(4):
            cell = pct(f[g], n[g])
            if label not in natives and n[g] and nn[g]:
                diff = 100.0 * (f[g] / n[g] - nf[g] / nn[g])
                p = fisher_greater(f[g], n[g] - f[g], nf[g], nn[g] - nf[g])
                cell += f" vs {pct(nf[g], nn[g])}: {diff:+.1f} pts, {fmt_p(p)}"
            cells.append(cell)
        print(f"| {label} | {len(runs_)} | " + " | ".join(cells) + " |")
    print()


def axpby16_cmds(c, tim):
    """The configuration's passed commands of the axpby-16M set in timing `tim`."""
    return [x for x in c["ok_cmds"] if x["result"].get("set") == "axpby-16M" and x["result"]["timing"] == tim]


def fast_share(x):
    """A command's share of fast samples (T4's definition)."""
    return sum(v < FAST_SAMPLE_PCT for v in x["sdev"]) / len(x["sdev"])


def parity_fast(x):
    """A command's fast samples (T4's definition) by index parity: (fast at
    even indices, even indices, fast at odd indices, odd indices)."""
    s = x["sdev"]
    return (sum(v < FAST_SAMPLE_PCT for v in s[0::2]), len(s[0::2]),
            sum(v < FAST_SAMPLE_PCT for v in s[1::2]), len(s[1::2]))


def phase(fe, ne, fo, no):
    """T11's class from parity_fast's counts: "odd" or "even" when that
    parity's share of fast samples is 20 points or more above the other's,
    else "none"."""
    d = (fo / no if no else 0) - (fe / ne if ne else 0)
    return "odd" if d >= 0.2 else "even" if d <= -0.2 else "none"


def alternation(x):
    """T11's class of one command (phase of its parity_fast)."""
    return phase(*parity_fast(x))


def t11(runs):
    """The fast samples of the axpby-16M commands by the sample's place in the
    command: even or odd index, and per command whether one parity carries
    them (the share of fast samples at odd indices minus that at even ones,
    20 points or more either way) or neither."""
    print("## T11: axpby-16M fast samples (T4's definition) by sample index: even / odd, and alternation per command\n")
    print("A command alternates when its share of fast samples at odd indices and at even ones differ by 20 points "
          "or more; the phase is which parity is fast.\n")
    print("| run | configuration | timing | commands | fast % at even / odd index | odd fast | even fast "
          "| no alternation | fast % of all |")
    print("|---|---|---|---|---|---|---|---|---|")
    for R, c, tim, cmds in axpby16_by_timing(runs):
        fe = ne = fo = no = 0
        kinds = defaultdict(int)
        for x in cmds:
            counts = parity_fast(x)
            fe, ne, fo, no = (t + v for t, v in zip((fe, ne, fo, no), counts))
            kinds[phase(*counts)] += 1
        odd, even, none = kinds["odd"], kinds["even"], kinds["none"]
        print(f"| {R.label} | {c['short']} | {tim} | {len(cmds)} | {100 * fe / max(ne, 1):.1f} / "
              f"{100 * fo / max(no, 1):.1f} | {odd} | {even} | {none} | "
              f"{100 * (fe + fo) / max(ne + no, 1):.1f} |")
    print()


def t12(runs):
    """T11's classes against the commands' deviation: whether the commands
    that lost the alternation are the deviant ones."""
    table("T12: axpby-16M batched commands by T11's class: deviation from the baseline and deviant "
          "commands",
          ["class", "commands", "median deviation %", "sd %", "deviant", "fast share %"],
          f"Deviant: |deviation| > {DEVIANT_PCT:g}% (T5). Fast share: the command's share of fast "
          "samples (T4's definition), averaged.")
    for R in runs:
        for c in R.configs:
            by = defaultdict(list)
            for x in axpby16_cmds(c, "batched"):
                by[alternation(x)].append(x)
            for kind in ("odd", "even", "none"):
                xs = by.get(kind)
                if not xs:
                    continue
                dev = [x["dev"] for x in xs]
                fast = [100 * fast_share(x) for x in xs]
                print(f"| {R.label} | {c['short']} | {kind} | {len(xs)} | {statistics.median(dev):+.2f} "
                      f"| {statistics.pstdev(dev):.2f} | {sum(abs(v) > DEVIANT_PCT for v in dev)} "
                      f"| {statistics.fmean(fast):.1f} |")
    print()


T13_MAX_SUBSETS = 50_000


def subset_medians(values, k):
    """The medians of every k-element subset of `values` (by position), sorted;
    beyond T13_MAX_SUBSETS subsets, that many drawn at random (seed 19)."""
    if math.comb(len(values), k) <= T13_MAX_SUBSETS:
        return sorted(statistics.median(c) for c in itertools.combinations(values, k))
    rng = random.Random(19)
    return sorted(statistics.median(rng.sample(values, k)) for _ in range(T13_MAX_SUBSETS))


def p_before(a, b):
    """P(x < y) for x drawn from the sorted list `a` and y from the sorted list
    `b`, ties counted half."""
    less = ties = 0
    for x in a:
        lo = bisect.bisect_left(b, x)
        hi = bisect.bisect_right(b, x)
        less += len(b) - hi  # y > x
        ties += hi - lo
    return (less + 0.5 * ties) / (len(a) * len(b))


T13_K = (1, 3, 5)


def t13(runs):
    """Flip probability by gap class when each candidate is timed over k allocations."""
    print("## T13: flip probability by gap class when each candidate's time is the median of k of its commands\n")
    print("Every pair of candidates of a rank set and timing (a distinct pair, not a set trial), against the "
          "reference pass's order; each member's time the median of k of its commands (each command its own "
          "allocation), exact over every k-subset (beyond 50,000, that many drawn with seed 19), ties half; the mean over the pairs of a class, percent "
          "(pairs). A k larger than a candidate's commands leaves its pairs out.\n")
    print("| run | configuration | k | " + " | ".join(GAP_NAMES) + " |")
    print("|---|---|---|" + "---|" * 4)
    for R in runs:
        for c in R.configs:
            groups = defaultdict(lambda: defaultdict(list))  # (set, timing) -> id -> medians
            for x in c["ok_cmds"]:
                r = x["result"]
                if r.get("set") and x["id"] in R.ref:
                    groups[(r["set"], r["timing"])][x["id"]].append(r["median_ms"])
            for k in T13_K:
                tot, n = [0.0] * 4, [0] * 4
                for ids in groups.values():
                    meds = {i: subset_medians(v, k) for i, v in ids.items() if len(v) >= k}
                    for a, b in itertools.combinations(sorted(meds), 2):
                        if R.ref[a] == R.ref[b]:
                            continue
                        lo, hi = (a, b) if R.ref[a] < R.ref[b] else (b, a)
                        g = gap_class(R.ref[a], R.ref[b])
                        tot[g] += 1.0 - p_before(meds[lo], meds[hi])
                        n[g] += 1
                cells = [f"{100 * tot[g] / n[g]:.1f} ({n[g]})" if n[g] else "-" for g in range(4)]
                print(f"| {R.label} | {c['short']} | {k} | " + " | ".join(cells) + " |")
    print()


T14_STATS = (("median", lambda r: r["median_ms"]), ("p10", lambda r: quantile(r["samples_ms"], 0.10)))


def t14(runs):
    """Flips against the construction order by gap class, ranked by the median or by p10."""
    table("T14: which statistic ranks: flips against the construction order, by the median or by "
          "p10",
          GAP_NAMES,
          "Every set trial's pairs (as T1), the order known by construction (the member with more "
          "work is slower), classed by the reference's gap; each command's time its median or its "
          "samples' 10th percentile; every run given pooled by configuration label.",
          ("configuration", "runs", "timing", "statistic"))
    pooled = {}  # (label, timing, statistic) -> [runs, n[4], f[4]]
    for R in runs:
        for c in R.configs:
            for (grp, _s, _rep), m in R.trials(c).items():
                timing = grp.split(", ")[1]
                for name, stat in T14_STATS:
                    e = pooled.setdefault((c["short"], timing, name), [set(), [0] * 4, [0] * 4])
                    e[0].add(R.label)
                    for a, b in itertools.combinations(m, 2):
                        if a["result"]["set_pos"] > b["result"]["set_pos"]:
                            a, b = b, a
                        g = gap_class(R.ref[a["id"]], R.ref[b["id"]])
                        e[1][g] += 1
                        e[2][g] += stat(a["result"]) > stat(b["result"])
    for key in sorted(pooled, key=lambda k: (k[0].startswith("native"), k[0], k[1], k[2])):
        runs_, n, f = pooled[key]
        print(f"| {key[0]} | {len(runs_)} | {key[1]} | {key[2]} | " + " | ".join(pct(f[g], n[g]) for g in range(4))
              + " |")
    print()


def set_group(s):
    return "gemm sets" if s.startswith("gemm") else s


def t2a(runs):
    print("## T2a: flips / pairs by set and gap class\n")
    groups = ["axpby-16M", "axpby-16M-wide", BIG_SET, "gemm sets"]
    print("| run | configuration | gap | " + " | ".join(groups) + " |")
    print("|---|---|---|" + "---|" * len(groups))
    for R in runs:
        for c in R.configs:
            n, f = defaultdict(int), defaultdict(int)
            for g, flipped, _a, _b, s, _tim in R.pairs(c):
                n[(g, set_group(s))] += 1
                f[(g, set_group(s))] += flipped
            for g in range(4):
                print(f"| {R.label} | {c['short']} | {GAP_NAMES[g]} | "
                      + " | ".join(f"{f[(g, k)]}/{n[(g, k)]}" if n[(g, k)] else "-" for k in groups) + " |")
    print()


def t2(runs):
    print("## T2: the flipped pairs: their set, and which member moved (deviation from the native baseline)\n")
    print("| run | configuration | gap | flips | axpby-16M | axpby-16M-wide | axpby-448M-fine | gemm sets "
          "| larger member fast | smaller member slow | mover's deviation % (sorted) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for R in runs:
        for c in R.configs:
            by = defaultdict(list)
            for g, flipped, a, b, s, _tim in R.pairs(c):
                if flipped:
                    by[g].append((a, b, s))
            for g in range(4):
                fl = by[g]
                if not fl:
                    continue
                sets = defaultdict(int)
                fast = slow = 0
                movers = []
                for a, b, s in fl:
                    sets[set_group(s)] += 1
                    if abs(b["dev"]) >= abs(a["dev"]):
                        fast += 1
                        movers.append(b["dev"])
                    else:
                        slow += 1
                        movers.append(a["dev"])
                print(f"| {R.label} | {c['short']} | {GAP_NAMES[g]} | {len(fl)} | {sets['axpby-16M']} | "
                      f"{sets['axpby-16M-wide']} | {sets[BIG_SET]} | {sets['gemm sets']} | {fast} | {slow} | "
                      + " ".join(f"{m:+.2f}" for m in sorted(movers)) + " |")
    print()


DEV_BINS = [(-1e9, -2), (-2, -1), (-1, -0.5), (-0.5, 0.5), (0.5, 1), (1, 2), (2, 7), (7, 11), (11, 1e9)]
DEV_NAMES = ["<-2", "-2..-1", "-1..-0.5", "+-0.5", "0.5..1", "1..2", "2..7", "7..11", ">11"]


def hist(values, bins):
    h = [0] * len(bins)
    for v in values:
        for i, (lo, hi) in enumerate(bins):
            if lo <= v < hi:
                h[i] += 1
                break
    return h


def t3(runs):
    print("## T3: command medians, deviation from the native baseline (% ; commands per bin)\n")
    print("| run | configuration | sets | commands | " + " | ".join(DEV_NAMES) + " |")
    print("|---|---|---|---|" + "---|" * len(DEV_NAMES))
    for R in runs:
        for c in R.configs:
            for name, pick in (("short axpby", lambda s: s in SHORT_SETS), (">= 1 ms", lambda s: s not in SHORT_SETS)):
                v = [x["dev"] for x in c["ok_cmds"] if pick(x["result"]["set"])]
                print(f"| {R.label} | {c['short']} | {name} | {len(v)} | " + " | ".join(str(h) for h in hist(v, DEV_BINS)) + " |")
    print()


FRAC_BINS = [(0, 0.1), (0.1, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 0.9), (0.9, 1.01)]
FRAC_NAMES = ["<10%", "10-30%", "30-50%", "50-70%", "70-90%", ">=90%"]


def fast_shares(c, tim):
    return [fast_share(x) for x in axpby16_cmds(c, tim)]


def t4(runs):
    print("## T4: axpby-16M samples: the fast level (a sample more than 1.5% below its command's baseline)\n")
    print("Commands by their share of fast samples (above 50%, the median is on the fast level), the share "
          "of all samples that are fast, and the mean length of a run of consecutive fast samples.\n")
    print("| run | configuration | timing | commands | " + " | ".join(FRAC_NAMES)
          + " | off the native range (< 10% or > 50%), Fisher p vs the native repeat"
          + " | fast samples % | median dev % of fast / other samples | mean fast run | deviant commands: first 10 samples vs the rest, median dev % |")
    print("|---|---|---|---|" + "---|" * len(FRAC_NAMES) + "---|---|---|---|---|")
    for R, c, tim, cmds in axpby16_by_timing(runs):
        fr, runs_len, nfast, nall = [], [], 0, 0
        fast_s, other_s = [], []
        first, rest = [], []
        for x in cmds:
            lv = [s < FAST_SAMPLE_PCT for s in x["sdev"]]
            fast_s += [s for s in x["sdev"] if s < FAST_SAMPLE_PCT]
            other_s += [s for s in x["sdev"] if s >= FAST_SAMPLE_PCT]
            fr.append(sum(lv) / len(lv))
            nfast += sum(lv)
            nall += len(lv)
            run = 0
            for f in lv + [False]:
                if f:
                    run += 1
                elif run:
                    runs_len.append(run)
                    run = 0
            if abs(x["dev"]) > DEVIANT_PCT and len(x["sdev"]) > 10:
                first.append(statistics.median(x["sdev"][:10]))
                rest.append(statistics.median(x["sdev"][10:]))
        fl = (f"{statistics.median(first):+.2f} vs {statistics.median(rest):+.2f} ({len(first)})"
              if first else "-")
        mr = f"{statistics.fmean(runs_len):.1f}" if runs_len else "-"
        off = sum(1 for f in fr if f < 0.1 or f > 0.5)
        nat = [n for n in R.configs if n["role"] == "repeat"]
        if c["role"] != "repeat" and nat:
            nf = fast_shares(nat[0], tim)
            n_off = sum(1 for f in nf if f < 0.1 or f > 0.5)
            p_off = fisher_two_sided(off, len(fr) - off, n_off, len(nf) - n_off)
            offs = f"{off}/{len(fr)} ({fmt_p(p_off)})"
        else:
            offs = f"{off}/{len(fr)}"
        print(f"| {R.label} | {c['short']} | {tim} | {len(cmds)} | "
              + " | ".join(str(h) for h in hist(fr, FRAC_BINS))
              + f" | {offs} | {100.0 * nfast / nall:.1f}"
              + f" | {median_pct(fast_s)} / {median_pct(other_s)}"
              + f" | {mr} | {fl} |")
    print()


def conditions(c):
    """(name, predicate on a command) for T5; the cut points are fixed, or the
    configuration's median where the text says so."""
    cmds = [x for x in c["ok_cmds"] if x["result"]["set"] in SHORT_SETS]
    med = lambda key: statistics.median(x["result"][key] for x in cmds)  # noqa: E731
    gap = lambda x: x["t_crit"] - x["prev_d"]["t_crit_end"] if x["prev_d"] else float("inf")  # noqa: E731
    mid = (c["t_first"] + c["t_last"]) / 2

    def big_free_within(x, ms):
        other = [y for y in c["ok_cmds"] if y["result"]["set"] == BIG_SET and y["result"]["pid"] != x["result"]["pid"]
                 and x["t_crit"] - ms <= y["t_end"] <= x["t_crit"]]
        return bool(other)

    out = [
        ("timing sync (vs batched)", lambda x: x["result"]["timing"] == "sync"),
        ("set axpby-16M (vs -wide)", lambda x: x["result"]["set"] == "axpby-16M"),
        ("same worker's previous command axpby-448M-fine (7.5 GB freed)",
         lambda x: x["prev_w"] is not None and x["prev_w"]["result"]["set"] == BIG_SET),
        ("same worker's previous command gemm-4K",
         lambda x: x["prev_w"] is not None and x["prev_w"]["result"]["set"] == "gemm-4K"),
        ("same worker's previous command a short axpby",
         lambda x: x["prev_w"] is not None and x["prev_w"]["result"]["set"] in SHORT_SETS),
        ("previous region on the device axpby-448M-fine",
         lambda x: x["prev_d"] is not None and x["prev_d"]["result"]["set"] == BIG_SET),
        ("previous region on the device a gemm",
         lambda x: x["prev_d"] is not None and x["prev_d"]["result"]["set"].startswith("gemm")),
        ("another worker's axpby-448M-fine command ended <= 1 s before the region",
         lambda x: big_free_within(x, 1000.0)),
        ("another worker's axpby-448M-fine command ended <= 0.2 s before the region",
         lambda x: big_free_within(x, 200.0)),
        ("device idle since the previous region > median", lambda x: gap(x) > statistics.median(gap(y) for y in cmds)),
    ]
    if "quiet_wait_ms" in cmds[0]["result"]:
        out += [
            ("quiet step waited (quiet_wait_ms > 0)", lambda x: x["result"]["quiet_wait_ms"] > 0),
            ("quiet probe first ratio > median", lambda x: x["result"]["quiet_ratio"] > med("quiet_ratio")),
            ("power at entry > median", lambda x: x["result"]["power_w"] > med("power_w")),
            ("power at entry < 400 W", lambda x: x["result"]["power_w"] < 400),
            ("SM clock at entry below its maximum", lambda x: x["result"]["sm_mhz"] < max(y["result"]["sm_mhz"] for y in cmds)),
            ("throttled samples > 0", lambda x: x["result"]["throttled_samples"] > 0),
            ("siblings frozen > median", lambda x: x["result"]["frozen"] > med("frozen")),
            ("drain > 1 ms", lambda x: x["result"]["drain_ms"] > 1),
            ("gate > median", lambda x: x["result"]["gate_ms"] > med("gate_ms")),
            ("lock wait > median", lambda x: x["result"]["lock_ms"] > med("lock_ms")),
        ]
    out += [
        ("worker's first 3 commands", lambda x: x["age"] < 3),
        ("worker's command 10 or later", lambda x: x["age"] >= 10),
        ("first half of the configuration (by region start)", lambda x: x["t_crit"] < mid),
    ]
    return out


def fisher_rows(label, c, cmds, conds):
    """T5's rows for `conds` ((name, predicate), predicates may return None:
    the command is then left out); returns (tests, tests with p < 0.05)."""
    tests = low = 0
    for name, pred in conds:
        cell = {True: [0, 0, 0], False: [0, 0, 0]}  # fast, slow, n
        for x in cmds:
            k = pred(x)
            if k is None:
                continue
            k = bool(k)
            cell[k][2] += 1
            if x["dev"] < -DEVIANT_PCT:
                cell[k][0] += 1
            elif x["dev"] > DEVIANT_PCT:
                cell[k][1] += 1
        w, wo = cell[True], cell[False]
        a, b = w[0] + w[1], w[2] - w[0] - w[1]
        cc, d = wo[0] + wo[1], wo[2] - wo[0] - wo[1]
        p = fisher_two_sided(a, b, cc, d) if w[2] and wo[2] else float("nan")
        fmt = lambda v: f"{v[0] + v[1]} ({v[0]}, {v[1]}) / {v[2]}"  # noqa: E731
        print(f"| {label} | {c['short']} | {name} | {fmt(w)} | {fmt(wo)} | {p:.3f} |")
        if not math.isnan(p):
            tests += 1
            low += p < 0.05
    return tests, low


def persistent_fisher_tests(runs, conds_for, note):
    """T5's and T8's tests: for each persistent configuration's short axpby
    commands, fisher_rows on the conditions conds_for(c, cmds) gives (None:
    the configuration is left out), under one header, then the count of
    tests and of p < 0.05, `note` added to its parenthesis."""
    print("| run | configuration | condition | with: deviant (fast, slow) / n | without: deviant (fast, slow) / n | Fisher p (two-sided) |")
    print("|---|---|---|---|---|---|")
    tests = low = 0
    for R in runs:
        for c in R.configs:
            if c["shape"] != "persistent":
                continue
            cmds = [x for x in c["ok_cmds"] if x["result"]["set"] in SHORT_SETS]
            conds = conds_for(c, cmds)
            if conds is None:
                continue
            t, lo = fisher_rows(R.label, c, cmds, conds)
            tests += t
            low += lo
    print(f"\n{tests} tests with both sides non-empty, {low} of them with p < 0.05 (no correction for "
          f"multiple tests{note}).\n")


def t5(runs):
    print(f"## T5: persistent configurations, short axpby commands: deviant (|dev| > {DEVIANT_PCT:g}%) against one condition at a time\n")
    persistent_fisher_tests(runs, lambda c, cmds: conditions(c),
                            "; about 5% of them would be below 0.05 by chance alone")


def t6(runs):
    print("## T6: who carries the deviation of the short axpby commands: eta squared (share of variance) and permutation p\n")
    print("Deviation from the native baseline (for the native repeat itself centred on each id by construction, "
          "so not shown) and from the reference pass (one measurement per id: its own error is shared by every copy).\n")
    print("| run | configuration | commands | sd of deviation % | by candidate id | by worker | by candidate id, against the reference |")
    print("|---|---|---|---|---|---|---|")
    for R in runs:
        for c in R.configs:
            cmds = [x for x in c["ok_cmds"] if x["result"]["set"] in SHORT_SETS]
            v = [x["dev"] for x in cmds]
            ids = [x["id"] for x in cmds]
            e_id, p_id = permutation_p(v, ids)
            v_ref = [(x["result"]["median_ms"] / R.ref[x["id"]] - 1) * 100 for x in cmds]
            e_r, p_r = permutation_p(v_ref, ids)
            native = c["role"] == "repeat"
            by_id = "- (its own baseline)" if native else f"{e_id:.2f} ({fmt_p(p_id)})"
            pids = [x["result"]["pid"] for x in cmds]
            if len(set(pids)) == 1:
                wk = "- (one worker)"
            elif len(set(pids)) < len(pids):
                e_w, p_w = permutation_p(v, pids)
                wk = f"{e_w:.2f} ({fmt_p(p_w)}, {len(set(pids))} workers)"
            else:
                wk = "- (a process per command)"
            print(f"| {R.label} | {c['short']} | {len(v)} | {statistics.pstdev(v):.2f} | {by_id} | {wk} | {e_r:.2f} ({fmt_p(p_r)}) |")
    print()


def t7(runs):
    table("T7: the axpby-16M candidates: each copy's deviation from the native baseline (%), "
          "sorted",
          ["command", "copies", "worker processes", "deviations"])
    for R, c in each_config(runs):
        by, pids = defaultdict(list), defaultdict(set)
        for x in c["ok_cmds"]:
            if x["result"]["set"] == "axpby-16M":
                by[x["id"]].append(x["dev"])
                pids[x["id"]].add(x["result"]["pid"])
        for k in sorted(by):
            print(f"| {R.label} | {c['short']} | {k} | {len(by[k])} | {len(pids[k])} | "
                  + " ".join(f"{v:+.2f}" for v in sorted(by[k])) + " |")
    print()


SLOWDOWN_MASK = 0x4 | 0x8 | 0x20 | 0x40 | 0x80  # power cap, hw slowdown, sw/hw thermal, power brake


def has_field(runs, key):
    return any(key in x["result"] for R in runs for c in R.configs for x in c["ok_cmds"])


def spread(vals, lo="min", digits=0):
    """median / min (or max) of the values present, '-' if none."""
    v = [x for x in vals if x is not None]
    if not v:
        return "-"
    ext = min(v) if lo == "min" else max(v)
    return f"{statistics.median(v):.{digits}f} / {ext:.{digits}f}"


def state_conditions(cmds):
    """(name, predicate) for T8 on the fields the worker records since issue
    19's forensics; a predicate returns None where its field is missing."""
    def get(x, k):
        return x["result"].get(k)

    def med(k):
        v = [get(x, k) for x in cmds if get(x, k) is not None]
        return statistics.median(v) if v else None

    def top(k):
        v = [get(x, k) for x in cmds if get(x, k) is not None]
        return max(v) if v else None

    def cmp(k, ref, op):
        return lambda x: None if get(x, k) is None or ref is None else op(get(x, k), ref)

    lt = lambda a, b: a < b  # noqa: E731
    gt = lambda a, b: a > b  # noqa: E731

    def reasons(k, mask):
        return lambda x: None if get(x, k) is None else (int(get(x, k)) & mask) != 0

    def changed(k):
        return lambda x: None if get(x, k) is None or get(x, "exit_" + k) is None else get(x, k) != get(x, "exit_" + k)

    return [
        ("SM clock at exit below its maximum", cmp("exit_sm_mhz", top("exit_sm_mhz"), lt)),
        ("SM clock changed from entry to exit", changed("sm_mhz")),
        ("memory clock at entry below its maximum", cmp("mem_mhz", top("mem_mhz"), lt)),
        ("memory clock at exit below its maximum", cmp("exit_mem_mhz", top("exit_mem_mhz"), lt)),
        ("temperature at entry > median", cmp("temp_c", med("temp_c"), gt)),
        ("temperature at exit > median", cmp("exit_temp_c", med("exit_temp_c"), gt)),
        ("power at exit > median", cmp("exit_power_w", med("exit_power_w"), gt)),
        ("a slowdown reason at entry (power, thermal)", reasons("clock_reasons", SLOWDOWN_MASK)),
        ("a slowdown reason at exit (power, thermal)", reasons("exit_clock_reasons", SLOWDOWN_MASK)),
        ("any clocks-event reason but idle at exit", reasons("exit_clock_reasons", ~0x1)),
        ("quiet probe last ratio > median", cmp("quiet_last_ratio", med("quiet_last_ratio"), gt)),
    ]


def t8(runs):
    if not has_field(runs, "exit_sm_mhz") and not has_field(runs, "quiet_last_ratio"):
        return
    print("## T8: device state of the short axpby commands' regions (krex mode: the region report, NVML)\n")
    print("Clocks at region entry and at exit (median / min), power at exit and temperature (median / max), "
          "the commands with a power or thermal slowdown reason at entry or exit, every clocks-event reason "
          "bit seen (OR), and the quiet step's last probe ratio (median / max).\n")
    print("| run | configuration | commands | SM MHz entry | SM MHz exit | mem MHz entry | mem MHz exit | "
          "power W exit | temp C entry | temp C exit | slowdown at entry / exit | reasons seen | quiet last ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for R in runs:
        for c in R.configs:
            cmds = [x for x in c["ok_cmds"] if x["result"]["set"] in SHORT_SETS]
            if not any("exit_sm_mhz" in x["result"] or "quiet_last_ratio" in x["result"] for x in cmds):
                continue
            g = lambda k: [x["result"].get(k) for x in cmds]  # noqa: E731
            slow = lambda k: sum(1 for v in g(k) if v is not None and int(v) & SLOWDOWN_MASK)  # noqa: E731
            seen = 0
            for k in ("clock_reasons", "exit_clock_reasons"):
                for v in g(k):
                    seen |= int(v) if v is not None else 0
            ratios = [v for v in g("quiet_last_ratio") if v]
            print(f"| {R.label} | {c['short']} | {len(cmds)} | {spread(g('sm_mhz'))} | {spread(g('exit_sm_mhz'))} | "
                  f"{spread(g('mem_mhz'))} | {spread(g('exit_mem_mhz'))} | {spread(g('exit_power_w'), 'max')} | "
                  f"{spread(g('temp_c'), 'max')} | {spread(g('exit_temp_c'), 'max')} | "
                  f"{slow('clock_reasons')} / {slow('exit_clock_reasons')} | {seen:#x} | "
                  f"{spread(ratios, 'max', 3) if ratios else '-'} |")
    print()
    print(f"Deviant (|dev| > {DEVIANT_PCT:g}%) short axpby commands of the persistent configurations against one "
          "condition at a time (commands without the field left out):\n")
    persistent_fisher_tests(
        runs, lambda c, cmds: state_conditions(cmds)
        if any("exit_sm_mhz" in x["result"] or "quiet_last_ratio" in x["result"] for x in cmds) else None, "")


MIB2 = 2 << 20


def placement_features(c):
    """(name, function of a command giving its group, or None) for T9."""
    seen = defaultdict(set)  # pid -> x addresses used by earlier commands
    reused = {}
    for x in sorted(c["ok_cmds"], key=lambda x: x["t_start"]):
        r = x["result"]
        if "x_addr" not in r:
            continue
        reused[id(x)] = r["x_addr"] in seen[r["pid"]]
        seen[r["pid"]].add(r["x_addr"])

    def size_up(x):
        b = int(x["result"]["candidate"].rsplit("-", 1)[1]) * 4
        return (b + MIB2 - 1) // MIB2 * MIB2

    def packed(a, b):
        return lambda x: (None if a not in x["result"] or b not in x["result"]
                          else "packed" if x["result"][b] - x["result"][a] == size_up(x) else "not packed")

    def flush_side(x):
        r = x["result"]
        if "flush_addr" not in r or "x_addr" not in r:
            return None
        return "flush below x" if r["flush_addr"] < r["x_addr"] else "flush above x"

    return [
        ("x mod 2 MiB (KiB)", lambda x: None if "x_addr" not in x["result"] else (x["result"]["x_addr"] % MIB2) // 1024),
        ("x mod 64 KiB (KiB)", lambda x: None if "x_addr" not in x["result"] else (x["result"]["x_addr"] % 65536) // 1024),
        ("x's 2 MiB page mod 8 (address bits 21-23)",
         lambda x: None if "x_addr" not in x["result"] else (x["result"]["x_addr"] >> 21) % 8),
        ("y after x", packed("x_addr", "y_addr")),
        ("z after y", packed("y_addr", "z_addr")),
        ("flush buffer against x", flush_side),
        ("x address used before by the same worker",
         lambda x: None if id(x) not in reused else "yes" if reused[id(x)] else "no"),
    ]


def t9(runs):
    if not has_field(runs, "x_addr"):
        return
    table("T9: placement of the axpby-16M buffers against the share of fast samples "
          "(T4's definition)",
          ["timing", "commands", "distinct x", "feature",
           "groups: value (commands, median fast share %)", "eta squared"],
          "Per configuration and timing, the commands that recorded addresses: distinct x "
          "addresses, and per feature its groups (commands, median share of fast samples) with eta "
          "squared of the share by group and a permutation p (2000 shuffles, seed 19); one group: "
          "nothing to test.")
    for R in runs:
        for c in R.configs:
            feats = placement_features(c)
            for tim in ("batched", "sync"):
                cmds = [x for x in axpby16_cmds(c, tim) if "x_addr" in x["result"]]
                if not cmds:
                    continue
                share = {id(x): 100.0 * fast_share(x) for x in cmds}
                distinct = len({x["result"]["x_addr"] for x in cmds})
                for name, f in feats:
                    pts = [(f(x), share[id(x)]) for x in cmds if f(x) is not None]
                    if not pts:
                        continue
                    by = defaultdict(list)
                    for g, v in pts:
                        by[g].append(v)
                    groups = "; ".join(f"{g} ({len(v)}, {statistics.median(v):.0f})" for g, v in sorted(by.items(), key=lambda kv: str(kv[0])))
                    if len(by) > 1 and len(by) < len(pts):
                        e, p = permutation_p([v for _, v in pts], [str(g) for g, _ in pts])
                        eta = f"{e:.2f} ({fmt_p(p)})"
                    else:
                        eta = "-"
                    print(f"| {R.label} | {c['short']} | {tim} | {len(cmds)} | {distinct} | {name} | {groups} | {eta} |")
    print()


def main(argv):
    if len(argv) >= 2 and argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 64
    args = argv[1:]
    only = None
    if args and args[0] == "--only":
        if len(args) < 2:
            print(__doc__, file=sys.stderr)
            return 64
        only = {t.strip().upper() for t in args[1].split(",")}
        args = args[2:]
    tables = (t1, t2a, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14)
    if only is not None and not only <= {f.__name__.upper() for f in tables}:
        print(f"flip_forensics.py: --only names tables T1, T2A, T2, T3 ... T14 (got {', '.join(sorted(only))})",
              file=sys.stderr)
        return 64
    if not args:
        print(__doc__, file=sys.stderr)
        return 64
    runs = [Run(p) for p in args]
    for f in tables:
        if only is None or f.__name__.upper() in only:
            f(runs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
