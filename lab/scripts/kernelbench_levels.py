#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Whether KernelBench's per-call medians sit at levels set by where a
call's buffers land in device memory, or by when the call runs: one process,
alone on the GPU, no krex.

For each problem, --draws draws: a draw is a fresh set of the problem's
inputs (KernelBench's get_inputs, seeded alike, moved to the device as
kernelbench.eval does) behind a spacer of random size that stays allocated,
so each draw's inputs, and the outputs and L2-flush buffer of its calls,
land at other addresses. Every draw is timed with KernelBench's own
cuda_event timing (kernelbench.timing.time_execution_with_cuda_event,
--trials trials), in --rounds rounds: round r times every draw of every
problem once, in order, before round r+1 starts. A median that follows the
draw across rounds is set by placement; one that moves between rounds with
the draw held is set by time.

--fragment GB then repeats the whole thing after the device memory is cut
into holes: chunks of 12-64 MB up to GB allocated, a random half freed back
to the driver (PyTorch's empty_cache) and the rest held, as the memory of a
GPU shared by workers that come and go looks to a new allocation.

Also per call, the time outside KernelBench's timed window per trial (the
call's wall time over its trials plus warm-up, less the mean timed trial):
the L2-flush fill and the host's work, which the real-KernelBench driver's
host-time table reads (lab/scripts/kernelbench_real.py).

    python3 lab/scripts/kernelbench_levels.py --kernelbench .deps/KernelBench \
        --problems 10,6,1,16,50,12 --draws 10 --rounds 3 --fragment 40 --out DIR

Writes DIR/kernelbench_levels.{json,md}.
"""

import argparse
import json
import os
import random
import statistics
import sys
import time

HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from kernelbench_real import import_timing, problem_file  # noqa: E402
from report_files import write_report  # noqa: E402

SPACER_STEP = 18 << 20  # as kernelbench_real.PLACEMENT_STEP: no power-of-two stride


def load_problem(kernelbench, pid):
    path = problem_file(kernelbench, pid)
    ctx = {}
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), ctx)  # as kernelbench.eval loads a reference
    return os.path.basename(path), ctx


def fragment(torch, gb, rng):
    """Cuts device memory into holes: returns the chunks kept."""
    chunks, total = [], 0
    while total < gb * 2**30:
        mb = rng.choice((12, 20, 32, 48, 64))
        chunks.append(torch.empty(mb << 20, dtype=torch.uint8, device="cuda"))
        total += mb << 20
    rng.shuffle(chunks)
    keep = chunks[: len(chunks) // 2]
    del chunks
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return keep


def one_condition(args, torch, kt, rng, condition):
    """Every draw of every problem, --rounds times. Returns the calls."""
    dev = torch.device("cuda:0")
    draws = []
    for pid in args.problems.split(","):
        name, ctx = load_problem(args.kernelbench, pid)
        torch.manual_seed(42)
        model = ctx["Model"](*[x.to(dev) if isinstance(x, torch.Tensor) else x
                              for x in ctx["get_init_inputs"]()]).to(dev)
        for d in range(args.draws):
            spacer = torch.empty(rng.randrange(0, 64) * SPACER_STEP + 1, dtype=torch.uint8,
                                 device=dev)
            torch.manual_seed(42)
            inputs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in ctx["get_inputs"]()]
            addr = [x.data_ptr() for x in inputs if isinstance(x, torch.Tensor)]
            draws.append({"pid": pid, "name": name, "draw": d, "model": model, "inputs": inputs,
                          "spacer": spacer, "spacer_bytes": spacer.numel(), "addr": addr})
    torch.cuda.synchronize()
    calls = []
    per_call = args.trials + args.warmup + 1
    for r in range(args.rounds):
        for dr in draws:
            t0 = time.perf_counter()
            with torch.no_grad():
                times = kt.time_execution_with_cuda_event(
                    dr["model"], dr["inputs"], num_warmup=args.warmup, num_trials=args.trials,
                    discard_first=1, verbose=False, device=dev)
            wall = time.perf_counter() - t0
            calls.append({"condition": condition, "round": r, "pid": dr["pid"], "name": dr["name"],
                          "draw": dr["draw"], "spacer_bytes": dr["spacer_bytes"],
                          "addr": dr["addr"], "t": t0, "median_ms": statistics.median(times),
                          "outside_us": (wall / per_call - statistics.fmean(times) / 1e3) * 1e6,
                          "times_ms": [round(x, 5) for x in times]})
    del draws
    torch.cuda.empty_cache()
    return calls


def analyze(calls):
    """Per condition and problem: the spread of the medians across draws
    (placement) and across rounds with the draw held (time)."""
    out = []
    keys = sorted({(c["condition"], c["pid"]) for c in calls},
                  key=lambda k: (k[0] != "fresh", int(k[1]) if k[1].isdigit() else k[1]))
    for cond, pid in keys:
        cs = [c for c in calls if c["condition"] == cond and c["pid"] == pid]
        ref = statistics.median(c["median_ms"] for c in cs)
        by_draw = {}
        for c in cs:
            by_draw.setdefault(c["draw"], []).append(c["median_ms"])
        draw_meds = [statistics.median(v) for v in by_draw.values()]
        within = [100 * (max(v) - min(v)) / ref for v in by_draw.values() if len(v) > 1]
        out.append({
            "condition": cond, "pid": pid, "name": cs[0]["name"], "calls": len(cs),
            "draws": len(by_draw), "median_ms": ref,
            "draw_levels_pct": sorted(round(100 * (m / ref - 1), 2) for m in draw_meds),
            "across_draws_pct": 100 * (max(draw_meds) - min(draw_meds)) / ref,
            "within_draw_max_pct": max(within) if within else None,
            "within_draw_median_pct": statistics.median(within) if within else None,
            "outside_us_median": statistics.median(c["outside_us"] for c in cs),
        })
    return out


def markdown(rows, cfg):
    lines = ["# KernelBench's medians: placement or time", "",
             "One process alone on the GPU, no krex; `%s`." % cfg["command"], "",
             "Per problem and condition: each draw's median over its rounds, as % off the "
             "problem's median over all its calls (the draw's levels); the spread of those "
             "across draws (placement); the largest and the median spread of one draw's "
             "calls across rounds (time); the median time outside the timed window per trial.",
             "",
             "| condition | problem | calls | draws | median ms | draw levels (%) | across draws | "
             "within a draw (max / median) | outside (us) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        within = ("%.2f%% / %.2f%%" % (r["within_draw_max_pct"], r["within_draw_median_pct"])
                  if r["within_draw_max_pct"] is not None else "-")
        lines.append("| %s | %s | %d | %d | %.4f | %s | %.2f%% | %s | %.0f |" % (
            r["condition"], r["name"][:-3], r["calls"], r["draws"], r["median_ms"],
            " ".join("%+.1f" % x for x in r["draw_levels_pct"]), r["across_draws_pct"], within,
            r["outside_us_median"]))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernelbench", required=True, help="a KernelBench checkout")
    ap.add_argument("--problems", default="10,6,1,16,50,12")
    ap.add_argument("--draws", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--fragment", type=float, default=0.0,
                    help="GB cut into holes before a second pass (0: no second pass)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    for k in ("draws", "rounds", "trials"):
        if getattr(args, k) < 1:
            ap.error("--%s must be at least 1" % k)
    if args.fragment < 0:
        ap.error("--fragment must be 0 or more")
    t_start = time.monotonic()
    import torch  # noqa: PLC0415
    kt, how = import_timing(args.kernelbench)
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    rng = random.Random(args.seed)
    calls = one_condition(args, torch, kt, rng, "fresh")
    if args.fragment > 0:
        keep = fragment(torch, args.fragment, rng)
        calls += one_condition(args, torch, kt, rng, "fragmented %g GB" % args.fragment)
        del keep
    cfg = {"command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
           "timing_import": how, "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0)}
    rows = analyze(calls)
    os.makedirs(args.out, exist_ok=True)
    write_report(args.out, "kernelbench_levels", {"config": cfg, "analysis": rows, "calls": calls},
                 markdown(rows, cfg), time.monotonic() - t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
