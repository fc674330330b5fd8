#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Draws docs/when_to_use.png, the README's "When to use krex, and when not"
picture: throughput against accuracy of serial, lock-only, unprotected and
krex sharing of one H200 at 16 commands at once, with a process per command
and with persistent workers. The numbers are read from the results notes,
nothing else: lab/results/eval.md's table "Beside the KREX paper"
(evaluation run B; the rows "throughput × serial" and "p95 inflation > 1 ms")
and lab/results/issue11.md's run 2 tables.

usage: when_to_use_plot.py [SOURCE_DIR] [OUT.png]      (needs matplotlib)
"""
import os
import re
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.join(ROOT, "docs", "when_to_use.png")


def paper_table(text):
    """{row name: [cells]} of the table under "## Beside the KREX paper"
    (lab/results/eval.md)."""
    at = text.index("## Beside the KREX paper")
    rows = {}
    header = None
    for line in text[at:].splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if header is None:
                header = cells
            elif not set(cells[0]) <= set("-: "):
                rows[cells[0]] = cells
        elif header is not None and rows:
            break
    return header, rows


def numbers(cell):
    """The numbers of a cell such as "**3.80×** / **5.64×**" or "381.56%"."""
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?", cell)]


def points(text):
    header, rows = paper_table(text)
    col = {name: i for i, name in enumerate(header)}
    thr, p95 = rows["throughput × serial"], rows["p95 inflation > 1 ms"]
    pts = []  # (label, × serial, p95 %, style)
    for name, label in (("native repeat", "serial (one at a time)"),
                        ("unprotected", "unprotected"),
                        ("lock-only", "lock around the timed loop"),
                        ("krex", "krex")):
        t, p = numbers(thr[col[name]]), numbers(p95[col[name]])
        pts.append((label + (", a process per command" if len(t) > 1 else ""), t[0], p[0], name))
        if len(t) > 1:
            pts.append((label + ", persistent workers", t[1], p[1], name + "-persistent"))
    return pts


def issue11_points(text):
    """Issue 11, run 2, C=16: throughput (× the native repeat's cmd/min) and
    the per-sample p95 inflation of > 1 ms kernels, from its two tables
    (lab/results/issue11.md, the whole note)."""
    sec = text[text.index("# Issue 11:"):]
    serial = float(re.search(r"over the native repeat \(([\d.]+) cmd/min\)", sec).group(1))
    thr = {}
    for shape, key in (("process per command", "process"), ("persistent workers", "persistent")):
        m = re.search(r"^\| %s \| 16 \| ([\d.]+) \([\d.]+\) \| ([\d.]+) \(" % shape, sec, re.M)
        thr["lock-only, " + key] = float(m.group(1)) / serial
        thr["krex, " + key] = float(m.group(2)) / serial
    acc = {}
    for row in ("lock-only, process", "krex, process", "lock-only, persistent",
                "krex, persistent", "native repeat (serial)"):
        m = re.search(r"^\| %s \| [^|]+\| ([^|]+)\|" % re.escape(row), sec, re.M)
        acc[row] = numbers(m.group(1))[1]  # "cmd / sample (n)": the sample p95
    names = {"native repeat (serial)": ("serial (one at a time)", "native repeat", 1.0)}
    pts = [(names["native repeat (serial)"][0], 1.0, acc["native repeat (serial)"],
            "native repeat")]
    for row in ("lock-only, process", "krex, process", "lock-only, persistent",
                "krex, persistent"):
        who, shape = row.split(", ")
        label = ("lock around the timed loop" if who == "lock-only" else "krex") + (
            ", a process per command" if shape == "process" else ", persistent workers")
        pts.append((label, thr[row], acc[row], who + ("-persistent" if shape == "persistent"
                                                      else "")))
    return pts


# Where each point's label goes (offset points, alignment), so none overlap.
PLACE = {"native repeat": ((8, -6), "left", "top"),
         "unprotected": ((10, 0), "left", "center"),
         "lock-only": ((10, 0), "left", "center"),
         "lock-only-persistent": ((0, 12), "center", "bottom"),
         "krex": ((-10, 10), "right", "bottom"),
         "krex-persistent": ((0, -12), "center", "top")}
COLORS = {"native repeat": "#555555", "unprotected": "#d62728", "lock-only": "#ff7f0e",
          "krex": "#2ca02c"}


def panel(ax, pts, title, ylabel, place=None):
    ax.axhspan(0.01, 1.0, color="#2ca02c", alpha=0.07, lw=0)
    ax.text(9.3, 0.012, "shaded: p95 within 1% of solo", fontsize=7.5, color="#2ca02c",
            va="bottom", ha="right")
    for label, t, p, style in pts:
        base = style.replace("-persistent", "")
        ax.scatter([t], [p], s=80, color=COLORS[base], zorder=3, edgecolor="black",
                   linewidth=0.5, marker="s" if style.endswith("-persistent") else "o")
        off, ha, va = dict(PLACE, **(place or {}))[style]
        ax.annotate("%s\n%.2f× serial, p95 +%.2f%%" % (label, t, p), (t, p),
                    textcoords="offset points", xytext=off, fontsize=7, ha=ha, va=va)
    ax.set_yscale("log")
    ax.set_ylim(0.01, 3000)
    ax.set_xlim(0, 9.5)
    ax.set_xlabel("throughput, × serial (higher is better)")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="major", alpha=0.3)


def note(name):
    """The text of lab/results/<name>."""
    with open(os.path.join(ROOT, "lab", "results", name), encoding="utf-8") as f:
        return f.read()


def main():
    a, b = points(note("eval.md")), issue11_points(note("issue11.md"))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (l, r) = plt.subplots(1, 2, figsize=(13, 5.2), dpi=100)
    panel(l, a, "Evaluation run B: each command's median sample\n(circles: a process per "
          "command; squares: persistent workers)", "p95 inflation of > 1 ms kernels, %")
    panel(r, b, "Issue 11, run 2: every timed sample\n(fine rank sets, @sync and @loop "
          "timings included)", "sample p95 inflation of > 1 ms kernels, %",
          {"lock-only-persistent": ((0, -12), "center", "top"),
           "krex": ((0, 12), "center", "bottom"),
           "native repeat": ((4, -10), "left", "top"),
           "krex-persistent": ((-10, -12), "center", "top")})
    fig.suptitle("One H200, 16 benchmarking commands at once (numbers: docs/RESULTS.md)",
                 fontsize=10.5)
    fig.tight_layout()
    fig.savefig(OUT)
    for name, pts in (("run B", a), ("issue 11", b)):
        print("%s: %s" % (name, "; ".join("%s %.2fx %.2f%%" % (x, t, p) for x, t, p, _ in pts)))
    print("wrote " + OUT)


if __name__ == "__main__":
    main()
