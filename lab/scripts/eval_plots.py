#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Plot the krex evaluation (eval.json written by bench/eval/krex_eval) as PNGs.

Usage: python3 lab/scripts/eval_plots.py EVAL_JSON [OUT_DIR]

Writes throughput.png, inflation.png, tails.png, ranking.png and phases.png
into OUT_DIR (default: the directory of EVAL_JSON) and prints their paths.
tails.png needs the sample-level accuracy of newer runs ("accuracy" in each
configuration); for older JSON it says so in the plot.
"""
import json
import math
import os
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
except ImportError as e:
    pkg = "python3-numpy" if "numpy" in str(e) else "python3-matplotlib"
    sys.exit(f"eval_plots: {e.name or 'a module'} is missing (install {pkg})")

DPI = 120
MAIN_MODES = ("unprotected", "lock", "krex", "krex-mps")
COLORS = {"serial": "black", "unprotected": "tab:red", "lock": "tab:orange", "krex": "tab:blue",
          "krex-mps": "tab:purple", "krex-active": "tab:green", "krex-nopin": "tab:olive",
          "krex-nofreeze": "tab:cyan", "krex-all": "tab:brown", "krex-device": "navy"}
ABLATION_MARKERS = ("s", "^", "D", "v", "P", "X", "*", "h")
ISSUE11_P95 = {">0.1ms": 2.5, ">1ms": 1.0, ">10ms": 0.2}
BANDS = (">0.1ms", ">1ms", ">10ms", "<=0.1ms")
PHASES = ("t_context_ms", "t_compile_ms", "t_inputs_ms", "t_check_ms", "t_wait_ms", "t_critical_ms")


def num(x):
    """A JSON number as float; None, strings and non-finite values become NaN."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return math.nan
    return float(x) if math.isfinite(x) else math.nan


def color(mode):
    return COLORS.get(mode, "tab:gray")


def in_band(band, ref_ms):
    if band == "<=0.1ms":
        return ref_ms <= 0.1
    return ref_ms > float(band[1:-2])


def paper_target(cfg, band):
    stats = (cfg.get("inflation") or {}).get(band) or {}
    return num(stats.get("paper_p95_pct"))


def short_label(cfg):
    if cfg.get("role") in ("repeat", "reference"):
        return {"repeat": "native repeat", "reference": "reference"}[cfg["role"]]
    persistent = " persist." if cfg.get("shape") == "persistent" else ""
    return f"{cfg.get('mode', '?')} C={cfg.get('c', '?')}{persistent}"


def save(fig, meta, path):
    """Adds the footer (GPU, date, preset), writes the PNG and returns its path."""
    fig.text(0.5, 0.008, f"GPU: {meta.get('gpu') or '?'}   |   {meta.get('date') or '?'}   |   "
             f"preset: {meta.get('preset') or '?'}", ha="center", va="bottom", fontsize=8, color="dimgray")
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_throughput(meta, configs, path):
    fig, ax = plt.subplots(figsize=(9, 6))
    process = [c for c in configs if c.get("shape") != "persistent" and not c.get("role")]
    repeat = [c for c in configs if c.get("role") == "repeat"]
    if repeat and math.isfinite(num(repeat[0].get("speedup_vs_serial"))):
        ax.plot([1], [num(repeat[0]["speedup_vs_serial"])], "o", color="black", ms=9,
                label="serial (native repeat)", zorder=5)
    # Toy upper bound: the krex configs' bound_speedup (any config's if krex is absent).
    bound = {}
    for c in sorted(process, key=lambda c: c.get("mode") != "krex"):
        x, y = num(c.get("c")), num(c.get("bound_speedup"))
        if math.isfinite(x) and math.isfinite(y):
            bound.setdefault(x, y)
    if bound:
        xs = sorted(bound)
        ax.plot(xs, [bound[x] for x in xs], "--", color="gray", label="toy upper bound")
    modes = list(dict.fromkeys(c.get("mode") for c in process))
    ablation = 0
    for mode in modes:
        pts = sorted((num(c.get("c")), num(c.get("speedup_vs_serial"))) for c in process if c.get("mode") == mode)
        pts = [p for p in pts if math.isfinite(p[0]) and math.isfinite(p[1])]
        if not pts:
            continue
        if mode in MAIN_MODES:
            ax.plot(*zip(*pts), "-o", color=color(mode), label=mode, lw=2)
        else:  # ablations: single C=16 points, nudged apart on the log2 axis
            shift = 2 ** (0.06 * (ablation + 1))
            ax.plot([p[0] * shift for p in pts], [p[1] for p in pts], ABLATION_MARKERS[ablation % len(ABLATION_MARKERS)],
                    color=color(mode), ms=8, linestyle="none", label=mode)
            ablation += 1
    for c in configs:
        x, y = num(c.get("c")), num(c.get("speedup_vs_serial"))
        if c.get("shape") == "persistent" and math.isfinite(x) and math.isfinite(y):
            ax.plot([x], [y], "o", ms=11, mfc="none", mew=2, color=color(c.get("mode")),
                    label=f"{c.get('mode')} persistent")
    ax.plot([16], [3.4], "*", ms=18, color="gold", mec="black", label="KREX paper target (3.4x at C=16)", zorder=6)
    ax.axhline(1.0, ls=":", color="black", lw=1)
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8, 16], ["1", "2", "4", "8", "16"])
    ax.set(xlim=(0.8, 22), ylim=(0, None))
    ax.set(xlabel="concurrency C (commands in flight)", ylabel="throughput speedup vs serial (x)",
           title="Throughput vs concurrency")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8, ncol=2)
    skipped = [str(c.get("label")) for c in meta.get("_skipped", [])]
    if skipped:
        ax.text(0.99, 0.01, "skipped: " + ", ".join(skipped), transform=ax.transAxes,
                ha="right", va="bottom", fontsize=7, color="dimgray")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return save(fig, meta, path)


def plot_inflation(meta, configs, path):
    chosen = [c for c in configs if c.get("role") == "repeat"]
    chosen += [c for c in configs if not c.get("role") and c.get("shape") != "persistent" and num(c.get("c")) == 16]
    chosen += [c for c in configs if c.get("shape") == "persistent" and num(c.get("c")) == 16]
    fig, axes = plt.subplots(2, 2, figsize=(13, 9), sharey=True)
    rng = np.random.default_rng(0)
    labels = [short_label(c) for c in chosen]
    for ax, band in zip(axes.flat, BANDS):
        data = []
        for c in chosen:
            vals = [num(k.get("inflation_pct")) for k in c.get("commands") or []
                    if math.isfinite(num(k.get("reference_ms"))) and in_band(band, num(k.get("reference_ms")))]
            data.append([v for v in vals if math.isfinite(v)])
        pos = [i + 1 for i, d in enumerate(data) if d]
        if pos:
            bp = ax.boxplot([data[i - 1] for i in pos], positions=pos, whis=(5, 95), showfliers=False,
                            widths=0.6, patch_artist=True, medianprops={"color": "black"})
            for box, i in zip(bp["boxes"], pos):
                box.set_facecolor(color(chosen[i - 1].get("mode")))
                box.set_alpha(0.35)
        for i, d in enumerate(data):
            ax.scatter(i + 1 + rng.uniform(-0.18, 0.18, len(d)), d, s=8, color=color(chosen[i].get("mode")),
                       alpha=0.7, zorder=3)
            if not d:
                ax.text(i + 1, 0, "n/a", ha="center", fontsize=7, color="dimgray")
        target = next((t for t in (paper_target(c, band) for c in configs) if math.isfinite(t)), math.nan)
        if math.isfinite(target):
            ax.axhline(target, ls="--", color="red", lw=1.2)
            ax.text(0.995, target, f"paper p95 target {target:g}%", color="red", fontsize=8, ha="right",
                    va="bottom", transform=ax.get_yaxis_transform(), zorder=4,
                    bbox={"facecolor": "white", "alpha": 0.7, "lw": 0, "pad": 1})
        ax.axhline(0, color="gray", lw=0.8)
        ax.set_yscale("symlog", linthresh=1)
        n = max((len(d) for d in data), default=0)
        ax.set_title(f"reference {band}  (up to {n} commands per box)", fontsize=10)
        ax.set_xticks(range(1, len(chosen) + 1), labels, rotation=35, ha="right", fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    lo, hi = axes[0, 0].get_ylim()  # shared: plain-number ticks on the symlog axis
    ticks = [t for t in (-1000, -100, -10, -5, -2, -1, 0, 1, 2, 5, 10, 100, 1000) if lo <= t <= hi]
    axes[0, 0].set_yticks(ticks, [f"{t:g}" for t in ticks])
    for ax in axes[:, 0]:
        ax.set_ylabel("timing inflation vs reference (%, symlog)")
    fig.suptitle("Per-command timing inflation by duration band (whiskers: 5th-95th percentile)")
    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    return save(fig, meta, path)


def plot_tails(meta, configs, path):
    """p95 inflation per band: each command's median vs every sample (and the sample p99),
    against issue 11's targets."""
    cfgs = [c for c in configs if c.get("role") != "reference"]
    fig, axes = plt.subplots(1, 3, figsize=(15, 6), sharey=True)
    have = any(isinstance(c.get("accuracy"), dict) for c in cfgs)
    x = np.arange(len(cfgs))
    for ax, band in zip(axes, (">0.1ms", ">1ms", ">10ms")):
        cmd, smp, p99, ns = [], [], [], []
        for c in cfgs:
            a = ((c.get("accuracy") or {}).get("all") or {}).get(band) or {}
            cmd.append(num((a.get("commands") or {}).get("p95_pct")))
            smp.append(num((a.get("samples") or {}).get("p95_pct")))
            p99.append(num((a.get("samples") or {}).get("p99_pct")))
            ns.append((a.get("samples") or {}).get("n") or 0)
        ax.bar(x - 0.2, [v if math.isfinite(v) else 0 for v in cmd], 0.4, color="lightgray", edgecolor="black",
               lw=0.5, label="command medians, p95")
        ax.bar(x + 0.2, [v if math.isfinite(v) else 0 for v in smp], 0.4,
               color=[color(c.get("mode")) for c in cfgs], edgecolor="black", lw=0.5, label="every sample, p95")
        ax.plot(x + 0.2, [v if math.isfinite(v) else np.nan for v in p99], "k_", ms=10, mew=2, label="every sample, p99")
        target = ISSUE11_P95[band]
        ax.axhline(target, ls="--", color="red", lw=1.2, label="issue 11 target (p95)")
        ax.text(0.995, target, f"target p95 <= {target:g}%", color="red", fontsize=8, ha="right", va="bottom",
                transform=ax.get_yaxis_transform(), bbox={"facecolor": "white", "alpha": 0.7, "lw": 0, "pad": 1})
        ax.set_yscale("symlog", linthresh=1)
        ax.set_title(f"reference {band}  (samples per bar: up to {max(ns, default=0)})", fontsize=10)
        ax.set_xticks(x, [short_label(c) for c in cfgs], rotation=40, ha="right", fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
        if not have:
            ax.text(0.5, 0.5, "no sample-level data in this JSON", transform=ax.transAxes, ha="center",
                    color="dimgray")
    axes[0].set_ylabel("inflation vs reference (%, symlog)")
    axes[0].legend(loc="upper left", fontsize=8)
    fig.suptitle("Tails: p95 of command medians vs p95/p99 of every timed sample")
    fig.tight_layout(rect=(0, 0.03, 1, 0.96))
    return save(fig, meta, path)


def bar_panel(ax, cfgs, values, ylabel):
    for i, (c, v) in enumerate(zip(cfgs, values)):
        if math.isfinite(v):
            ax.bar(i, v, color=color(c.get("mode")), edgecolor="black", lw=0.5,
                   hatch="//" if c.get("shape") == "persistent" else None)
        else:
            ax.text(i, 0, "n/a", ha="center", va="bottom", fontsize=7, color="dimgray")
    ax.set_ylabel(ylabel)
    ax.set_xticks(np.arange(len(cfgs)))
    ax.grid(True, axis="y", alpha=0.3)


def plot_ranking(meta, configs, path):
    cfgs = [c for c in configs if c.get("role") != "reference"]
    flips = [num(c.get("flip_rate")) * 100 for c in cfgs]
    taus = [num(c.get("kendall_tau")) for c in cfgs]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(12, 8.5), sharex=True)
    bar_panel(ax1, cfgs, flips, "pairwise flip rate (%)")
    bar_panel(ax2, cfgs, taus, "Kendall tau")
    rep = next((c for c in cfgs if c.get("role") == "repeat"), None)
    rep_flip = num(rep.get("flip_rate")) * 100 if rep else math.nan
    rep_tau = num(rep.get("kendall_tau")) if rep else math.nan
    if math.isfinite(rep_flip):
        ax1.axhline(rep_flip, color="black", lw=1.2, label=f"native repeat ({rep_flip:.1f}%)")
        ax1.axhspan(rep_flip, rep_flip + 3, color="green", alpha=0.15, label="target: within +3 points")
        ax1.legend(loc="upper right", fontsize=8)
    if math.isfinite(rep_tau):
        ax2.axhline(rep_tau, color="black", lw=1.2, label=f"native repeat ({rep_tau:.3f}); target: at least this")
        ax2.legend(loc="upper right", fontsize=8)
    top = max([f for f in flips + [rep_flip + 3] if math.isfinite(f)], default=10)
    ax1.set_ylim(0, top * 1.3)
    ax2.set_ylim(min([0.0] + [t for t in taus if math.isfinite(t)]) - 0.05, 1.25)
    ax2.set_xticklabels([short_label(c) for c in cfgs], rotation=40, ha="right", fontsize=8)
    ax1.set_title("Ranking agreement with the reference (hatched: persistent workers)")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    return save(fig, meta, path)


def plot_phases(meta, configs, path):
    cfgs = [c for c in configs if c.get("commands")]
    med = np.zeros((len(cfgs), len(PHASES)))
    for i, c in enumerate(cfgs):
        for j, ph in enumerate(PHASES):
            vals = [num((k.get("result") or {}).get(ph)) for k in c["commands"]]
            vals = [v for v in vals if math.isfinite(v)]
            med[i, j] = float(np.median(vals)) if vals else 0.0
    fig, ax = plt.subplots(figsize=(11, 0.38 * len(cfgs) + 2))
    y = np.arange(len(cfgs))
    left = np.zeros(len(cfgs))
    for j, ph in enumerate(PHASES):
        ax.barh(y, med[:, j], left=left, color=plt.cm.tab10(j), label=ph[2:-3], edgecolor="white", lw=0.5)
        left += med[:, j]
    ax.set_yticks(y, [short_label(c) for c in cfgs], fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="median time per command (ms)", title="Where the time goes: median per-command phases")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_xlim(0, max(float(left.max(initial=0)), 1e-3) * 1.3)  # room for the legend on the right
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return save(fig, meta, path)


def main(argv):
    if len(argv) not in (2, 3):
        sys.exit("usage: eval_plots.py EVAL_JSON [OUT_DIR]")
    src = argv[1]
    try:
        with open(src, encoding="utf-8") as f:
            doc = json.load(f)
        if not isinstance(doc, dict) or not isinstance(doc.get("configs"), list):
            raise ValueError("not an evaluation JSON (no 'configs' list)")
    except (OSError, ValueError) as e:
        sys.exit(f"eval_plots: cannot read {src}: {e}")
    out = argv[2] if len(argv) == 3 else os.path.dirname(os.path.abspath(src))
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        sys.exit(f"eval_plots: cannot create {out}: {e}")
    meta = dict(doc.get("meta") or {})
    configs = [c for c in doc["configs"] if isinstance(c, dict)]
    meta["_skipped"] = [c for c in configs if c.get("skipped")]  # named in the throughput plot
    live = [c for c in configs if not c.get("skipped")]
    for name, plot in (("throughput", plot_throughput), ("inflation", plot_inflation), ("tails", plot_tails),
                       ("ranking", plot_ranking), ("phases", plot_phases)):
        print(plot(meta, live, os.path.join(out, name + ".png")))


if __name__ == "__main__":
    main(sys.argv)
