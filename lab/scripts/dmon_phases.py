#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""GPU power and clocks per phase of a run, from `nvidia-smi dmon -s pc -o T`.

usage: dmon_phases.py DMON.log PHASES.tsv [--limit WATTS] [--json OUT]

DMON.log: what `nvidia-smi dmon -s pc -d 1 -o T` printed (a time column
HH:MM:SS, then gpu, pwr, gtemp, mtemp, mclk, pclk; header lines start with #).
PHASES.tsv: one line per phase, "NAME<TAB>START<TAB>END" with START and END
as HH:MM:SS of the same clock (date +%T). A phase that crosses midnight is
handled; one longer than a day is not.

Prints a Markdown table: per phase its seconds, the dmon samples inside it,
the SM clock (pclk, MHz) mean / min / max, the mean and max power (W) and the
samples at or above 95% of the board's power limit (--limit, e.g. from
`nvidia-smi --query-gpu=power.limit`; without it, of the highest power in the
whole log): a GPU near its power limit lowers its clocks.
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from report_files import write_json  # noqa: E402  (scripts/report_files.py)


def secs(hms):
    h, m, s = (int(x) for x in hms.split(":"))
    if not (0 <= h < 24 and 0 <= m < 60 and 0 <= s < 61):
        raise ValueError(hms)
    return h * 3600 + m * 60 + s


def read_dmon(path):
    """[(seconds, power W, sm clock MHz)] from a dmon log; the columns are found from its header."""
    cols = None
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "#Time":
                cols = [c.lower() for c in parts[1:]]
                continue
            if parts[0].startswith("#") or cols is None:
                continue
            try:
                t = secs(parts[0])
                vals = dict(zip(cols, parts[1:]))
                rows.append((t, float(vals["pwr"]), float(vals["pclk"])))
            except (KeyError, ValueError):
                continue  # a torn line at the end, or "-" for a value dmon could not read
    if cols is None:
        raise SystemExit(f"{path}: no '#Time' header: run dmon with -o T (and -s pc)")
    return rows


def read_phases(path):
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            parts = line.rstrip("\n").split("\t")
            if len(parts) != 3:
                raise SystemExit(f"{path}:{n}: want NAME<TAB>START<TAB>END, got {line.strip()!r}")
            try:
                out.append((parts[0], secs(parts[1]), secs(parts[2])))
            except ValueError:
                raise SystemExit(f"{path}:{n}: times are HH:MM:SS, got {parts[1]!r} {parts[2]!r}")
    return out


def inside(t, start, end):
    if end >= start:
        return start <= t <= end
    return t >= start or t <= end  # across midnight


def summarize(rows, phases, limit=None):
    peak = limit if limit else max((p for _, p, _ in rows), default=0.0)
    result = {"peak_power_w": peak, "peak_is": "limit" if limit else "highest seen", "phases": []}
    for name, start, end in phases:
        mine = [(p, c) for t, p, c in rows if inside(t, start, end)]
        dur = (end - start) % 86400
        e = {"phase": name, "seconds": dur, "samples": len(mine)}
        if mine:
            pw = [p for p, _ in mine]
            clk = [c for _, c in mine]
            e.update(clock_mean=statistics.fmean(clk), clock_min=min(clk), clock_max=max(clk),
                     power_mean=statistics.fmean(pw), power_max=max(pw),
                     near_peak=sum(1 for p in pw if p >= 0.95 * peak))
        result["phases"].append(e)
    return result


def table(result):
    lines = ["| phase | seconds | dmon samples | SM clock mean (min-max) MHz | power mean / max W | "
             f"samples >= 95% of the {result['peak_is']} ({result['peak_power_w']:.0f} W) |",
             "|---|---|---|---|---|---|"]
    for e in result["phases"]:
        if e["samples"] == 0:
            lines.append(f"| {e['phase']} | {e['seconds']} | 0 | n/a | n/a | n/a |")
            continue
        lines.append(f"| {e['phase']} | {e['seconds']} | {e['samples']} | {e['clock_mean']:.0f} "
                     f"({e['clock_min']:.0f}-{e['clock_max']:.0f}) | {e['power_mean']:.0f} / {e['power_max']:.0f} | "
                     f"{e['near_peak']} |")
    return "\n".join(lines)


def main(argv):
    args = [a for a in argv[1:]]
    opt = {}
    for name in ("--json", "--limit"):
        if name in args:
            i = args.index(name)
            if i + 1 >= len(args):
                print(f"{name} needs a value", file=sys.stderr)
                return 2
            opt[name] = args[i + 1]
            del args[i:i + 2]
    out_json = opt.get("--json")
    limit = None
    if "--limit" in opt:
        try:
            limit = float(opt["--limit"])
        except ValueError:
            limit = 0.0
        if not limit > 0:
            print(f"--limit wants the power limit in watts, not {opt['--limit']!r}", file=sys.stderr)
            return 2
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    result = summarize(read_dmon(args[0]), read_phases(args[1]), limit)
    print(table(result))
    write_json(out_json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
