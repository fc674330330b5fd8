#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Capacity model: commands per GPU-hour and per day for serial, krex with a
process per command, and krex with a worker pool, from an eval run's JSON
(bench/eval, docs/EVAL.md). Standard library only.

    scripts/capacity.py EVAL.json[.gz]                 # inputs, and the check against the run
    scripts/capacity.py EVAL.json[.gz] --fleet 300000 --median-s 2.6 --critical 0.12
    scripts/capacity.py EVAL.json[.gz] --json          # everything as JSON

The model (docs/FLEET.md, "Capacity model"):

* A command is: process start (`pre`), context creation (`ctx`), off-region
  work (`work`: compile, inputs, check, prepare, the rest of the command), the
  timed loop (`crit`), process exit (`post`, context teardown included). The
  serial reference pass of the eval JSON gives each as a mean.
* Per GPU there is one exclusive resource: regions are serialized per
  device, and under krex a sibling's context creation and teardown are gated
  (they cannot overlap a region; the driver serializes them node-wide too).
  Everything else runs beside it, on the CPU cores.
  - serial: one command at a time; X = 1 / (pre + ctx + work + crit + post).
  - krex, a process per command, C slots: exclusive time per command
    E = crit + region + ctx + exit_share * post; the rest (pre + join +
    work + the other part of post) is think time Z.
  - krex pool (persistent workers, docs/POOL.md): E = crit + region_pool,
    Z = work + dispatch; context and join are paid once per worker.
  C slots contending for one exclusive resource is the closed "machine
  repairman" network; exact mean value analysis gives its throughput X(C)
  (below min(C / (Z + E), 1 / E), smooth at the knee). A CPU bound caps it:
  X <= (cores - reserved) / cpu_per_command, counting every non-timed phase
  as a busy core (conservative).
* `region` and `region_pool` are the region protocol's own costs, medians of
  the eval's krex configurations (drain + freeze + pin + quiet + exit: the
  gate and the lock are the waits the queue models, not costs). `join` is
  the tenant join's median.
* `exit_share` (how much of a process's exit is exclusive device time,
  context teardown under the gate) is the one fitted constant: 0.5, fitted
  on issue 11 run 2's krex C=16 and checked on the other runs
  (`--exit-share` changes it).

The model predicts steady state: it is checked against each configuration's
"busy" throughput (commands that ended while every slot was busy), which a
fleet that never drains sees. A finite run's wall throughput is also
predicted: the steady state plus the start-up a pool pays once (its C
workers' contexts, each exclusive device time under the gate: pre + C x ctx
+ join), checked against the run's wall throughput.
"""

import argparse
import gzip
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quantiles import quantile  # noqa: E402

EXIT_SHARE = 0.5        # fitted: issue11 run2, krex C=16 (docs/FLEET.md)
DISPATCH_S = 0.002      # a pool's per-command hand-over (pipe round trip, result line)
REGION_KEYS = ("drain_ms", "freeze_ms", "pin_ms", "quiet_ms", "region_exit_ms")


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def _mean(v):
    v = [x for x in v if x is not None and not math.isnan(x)]
    return sum(v) / len(v) if v else float("nan")


def _median(v):
    return quantile([x for x in v if x is not None], 0.5)


def reference(d):
    """The serial reference pass: the first serial configuration."""
    for c in d["configs"]:
        if c.get("role") == "reference" or (c["mode"] == "serial" and c["c"] == 1
                                           and c.get("shape", "process") == "process"):
            return c
    raise SystemExit("capacity.py: no serial reference configuration in the eval JSON")


def phases(d):
    """Mean phase times (seconds) of the serial reference pass, and the
    protocol costs (medians, seconds) of the run's krex configurations."""
    ref = reference(d)
    cmds = [c for c in ref["commands"] if c.get("result")]
    if not cmds:
        raise SystemExit("capacity.py: the reference pass has no command results")
    r = [c["result"] for c in cmds]
    ms = 1e-3
    crit = _mean([x["t_critical_ms"] for x in r]) * ms
    ctx = _mean([x["t_context_ms"] for x in r]) * ms
    cmd = _mean([x["t_cmd_ms"] for x in r]) * ms
    pre = _mean([c["worker_start_ms"] - c["start_ms"] for c in cmds if "worker_start_ms" in c]) * ms
    post = _mean([c["end_ms"] - c["worker_start_ms"] - c["result"]["t_cmd_ms"]
                  for c in cmds if "worker_start_ms" in c]) * ms
    if math.isnan(pre):  # older runs: no worker start stamp; split the process overhead evenly
        over = _mean([c["t_total_ms"] - c["result"]["t_cmd_ms"] for c in cmds]) * ms
        pre = post = over / 2
    p = {"pre": pre, "ctx": ctx, "work": cmd - ctx - crit, "crit": crit, "post": post,
         "commands": len(cmds)}

    def protocol(shape):
        rows = [x["result"] for c in d["configs"]
                if c["mode"].startswith("krex") and c.get("shape", "process") == shape
                and c["mode"] not in ("krex-mps", "krex-ctx", "krex-nofreeze", "krex-nopin")
                for x in c["commands"] if x.get("result")]
        region = _median([sum(x.get(k, 0.0) for k in REGION_KEYS) for x in rows]) if rows else float("nan")
        join = _median([x["t_join_ms"] for x in rows if "t_join_ms" in x]) if rows else float("nan")
        return region * ms, join * ms

    p["region"], p["join"] = protocol("process")
    p["region_pool"], p["join_pool"] = protocol("persistent")
    # Defaults where the run has no krex configuration of that shape: the
    # H200 figures of docs/RESULTS.md (region ~13 ms process shape, ~6 ms
    # pool, join ~80 ms).
    for k, v in (("region", 0.013), ("region_pool", 0.006), ("join", 0.08)):
        if math.isnan(p[k]):
            p[k] = v
    return p


def mva(c, e, z):
    """Throughput (1/s) of C customers cycling through one FIFO server of mean
    service e and a delay of mean z (exact mean value analysis)."""
    if c < 1:
        return 0.0
    q = 0.0
    x = 0.0
    for n in range(1, int(c) + 1):
        r = e * (1.0 + q)
        x = n / (z + r)
        q = x * r
    return x


def predict(p, mode, c, cores=16, reserved=1, exit_share=EXIT_SHARE):
    """Commands per second on one GPU, and the terms it came from."""
    start = p["pre"] + p["ctx"] + p["post"]
    if mode == "serial":
        t = start + p["work"] + p["crit"]
        return {"x": 1.0 / t, "e": t, "z": 0.0, "bound": "serial"}
    if mode == "process":
        e = p["crit"] + p["region"] + p["ctx"] + exit_share * p["post"]
        z = p["pre"] + p["join"] + p["work"] + (1 - exit_share) * p["post"]
        cpu = p["pre"] + p["join"] + p["work"] + p["post"]
    elif mode == "pool":
        e = p["crit"] + p["region_pool"]
        z = p["work"] + DISPATCH_S
        cpu = p["work"] + DISPATCH_S
    else:
        raise ValueError("mode must be serial, process or pool")
    x = mva(c, e, z)
    xcpu = (cores - reserved) / cpu if cpu > 0 else float("inf")
    bound = "device" if x >= 0.9 / e else "slots"
    if xcpu < x:
        x, bound = xcpu, "cpu"
    return {"x": x, "e": e, "z": z, "bound": bound, "cpu_per_cmd": cpu}


def startup_s(p, mode, c):
    """The exclusive device time a finite run spends before its steady state:
    a pool's C workers each create a context under the gate (exclusive, one
    at a time: C x ctx) after the first one's process start and join. A
    process per command pays its context in every command (already in the
    steady state); serial has none."""
    return p["pre"] + c * p["ctx"] + p["join"] if mode == "pool" else 0.0


def predict_wall(p, mode, c, n, cores=16, reserved=1, exit_share=EXIT_SHARE):
    """Commands per second over the wall time of a finite run of n commands:
    the steady state plus the start-up (startup_s)."""
    x = predict(p, mode, c, cores=cores, reserved=reserved, exit_share=exit_share)["x"]
    return n / (n / x + startup_s(p, mode, c)) if n > 0 and x > 0 else float("nan")


def mix_phases(p, median_s, critical):
    """The eval's fixed costs (start, context, exit, protocol) with the work
    and timed loop of a command mix: a command of `median_s` seconds (serial,
    process start to exit) whose timed loop is `critical` of it."""
    q = dict(p)
    q["crit"] = critical * median_s
    q["work"] = median_s - q["crit"] - p["pre"] - p["ctx"] - p["post"]
    if q["work"] < 0:
        raise SystemExit("capacity.py: a %.2f s command cannot hold the eval's start and exit costs "
                         "(%.2f s)" % (median_s, p["pre"] + p["ctx"] + p["post"]))
    return q


MODES = (("serial", "serial"), ("krex, a process per command", "process"), ("krex pool", "pool"))


def check(d, p, cores, exit_share):
    """Each measured configuration of the run against the model's prediction."""
    rows = []
    for c in d["configs"]:
        if c.get("skipped") or c.get("role") == "reference":
            continue
        shape = c.get("shape", "process")
        if c["mode"] == "serial" and shape == "process":
            mode = "serial"
        elif c["mode"] in ("krex", "krex-all", "krex-device"):
            mode = "pool" if shape == "persistent" else "process"
        else:
            continue  # lock-only, unprotected, MPS, ablations: not modelled
        pred = predict(p, mode, c["c"], cores=cores, exit_share=exit_share)["x"] * 60
        n = len(c["commands"])
        pred_wall = predict_wall(p, mode, c["c"], n, cores=cores, exit_share=exit_share) * 60
        busy = c.get("busy_cpm")
        measured = busy if busy is not None and not math.isnan(busy) else c["throughput_cpm"]
        rows.append({"label": c["label"], "mode": mode, "c": c["c"], "commands": n, "predicted_cpm": pred,
                     "measured_cpm": measured, "wall_cpm": c["throughput_cpm"],
                     "measured_is": "busy" if busy is not None else "wall",
                     "error_pct": 100.0 * (pred - measured) / measured,
                     "predicted_wall_cpm": pred_wall,
                     "wall_error_pct": 100.0 * (pred_wall - c["throughput_cpm"]) / c["throughput_cpm"]})
    return rows


def fleet(p, per_day, gpus_per_node, c, cores, exit_share, utilization):
    out = []
    for name, mode in MODES:
        r = predict(p, mode, 1 if mode == "serial" else c, cores=cores, exit_share=exit_share)
        day = r["x"] * 86400
        gpus = per_day / (day * utilization)
        out.append({"mode": name, "per_gpu_hour": r["x"] * 3600, "per_gpu_day": day,
                    "bound": r["bound"], "gpus": gpus, "gpus_whole": math.ceil(gpus - 1e-9),
                    "nodes": math.ceil(math.ceil(gpus - 1e-9) / gpus_per_node),
                    "slots_to_saturate": math.ceil((r["e"] + r["z"]) / r["e"]) if mode != "serial" else 1})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("eval_json")
    ap.add_argument("--concurrency", "-c", type=int, default=16, help="slots per GPU (default 16)")
    ap.add_argument("--cores", type=int, default=16, help="CPU cores per GPU (default 16)")
    ap.add_argument("--exit-share", type=float, default=EXIT_SHARE)
    ap.add_argument("--fleet", type=float, metavar="COMMANDS_PER_DAY")
    ap.add_argument("--median-s", type=float, help="the mix's command time, serial, seconds")
    ap.add_argument("--critical", type=float, help="the mix's timed-loop fraction (0..1)")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--utilization", type=float, default=0.8,
                    help="planned share of the predicted capacity (default 0.8: headroom for peaks)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if (a.median_s is None) != (a.critical is None):
        ap.error("--median-s and --critical go together")
    if a.critical is not None and not 0 < a.critical < 1:
        ap.error("--critical is a fraction between 0 and 1")
    if not 0 < a.utilization <= 1:
        ap.error("--utilization is a fraction in (0, 1]")
    if a.concurrency < 1 or a.cores < 2:
        ap.error("--concurrency >= 1 and --cores >= 2")

    d = load(a.eval_json)
    p = phases(d)
    rows = check(d, p, a.cores, a.exit_share)
    q = mix_phases(p, a.median_s, a.critical) if a.median_s is not None else p
    per_gpu = {mode: predict(q, mode, 1 if mode == "serial" else a.concurrency, cores=a.cores,
                             exit_share=a.exit_share) for _, mode in MODES}
    fl = fleet(q, a.fleet, a.gpus_per_node, a.concurrency, a.cores, a.exit_share,
               a.utilization) if a.fleet else None
    if a.json:
        json.dump({"phases_s": p, "mix_phases_s": q, "check": rows,
                   "per_gpu": {k: dict(v, per_hour=v["x"] * 3600, per_day=v["x"] * 86400)
                               for k, v in per_gpu.items()},
                   "fleet": fl}, sys.stdout, indent=1)
        print()
        return 0
    print("inputs (s): " + ", ".join("%s %.3f" % (k, p[k]) for k in
                                     ("pre", "ctx", "work", "crit", "post", "region", "join", "region_pool")))
    if rows:
        print("\n| configuration | commands | predicted cmd/min | measured (busy) | error | predicted wall | measured wall | wall error |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print("| %s | %d | %.1f | %.1f (%s) | %+.1f%% | %.1f | %.1f | %+.1f%% |" % (
                r["label"], r["commands"], r["predicted_cpm"], r["measured_cpm"], r["measured_is"],
                r["error_pct"], r["predicted_wall_cpm"], r["wall_cpm"], r["wall_error_pct"]))
    if a.median_s is not None:
        print("\nmix: %.2f s per command, timed loop %.0f%% (%.3f s), work %.3f s" % (
            a.median_s, 100 * a.critical, q["crit"], q["work"]))
    print("\n| mode | per GPU-hour | per GPU-day | bound |")
    print("|---|---|---|---|")
    for name, mode in MODES:
        r = per_gpu[mode]
        print("| %s | %.0f | %.0f | %s |" % (name, r["x"] * 3600, r["x"] * 86400, r["bound"]))
    if fl:
        print("\n%.0f commands/day at %.0f%% of capacity, %d GPUs per node, C=%d per GPU:" % (
            a.fleet, 100 * a.utilization, a.gpus_per_node, a.concurrency))
        print("| mode | GPUs (exact) | GPUs | nodes | slots per GPU to saturate |")
        print("|---|---|---|---|---|")
        for f in fl:
            print("| %s | %.2f | %d | %d | %d |" % (f["mode"], f["gpus"], f["gpus_whole"], f["nodes"],
                                                  f["slots_to_saturate"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
