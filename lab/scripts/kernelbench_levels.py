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

--series SECONDS instead times one draw of each problem round-robin for
SECONDS, each call KernelBench's own trial loop (time_execution_with_cuda_event's
body, copied in kb_trials) with one more event, recorded before the L2
flush: per trial the flush's GPU time beside the timed one, and the host's
time from the start event's record to the end event's (the model's launch
path); per call the CPU steal time the whole machine reported (/proc/stat)
and a CPU probe (a fixed pure-Python loop, best of 3). The flush's span runs
from the event before it to the start event, so it holds the flush kernel
and any wait for a late host; a slow GPU lengthens it with the launch path
unchanged, a slow host lengthens the launch path. --burn N adds N busy
processes, one per other CPU (the measuring process pinned to its last
CPU), through the series' middle third: the table per segment (idle, burn,
after) says whether load on the other CPUs brings host-slow calls.

Writes DIR/kernelbench_levels.{json,md} (or DIR/kernelbench_series.{json,md}).
"""

import argparse
import os
import random
import statistics
import sys
import time

HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from kernelbench_real import import_timing, load_problem, on_device  # noqa: E402
from report_files import write_report  # noqa: E402

SPACER_STEP = 18 << 20  # as kernelbench_real.PLACEMENT_STEP: no power-of-two stride


def build_model(kernelbench, pid, torch, dev):
    """A problem's file name, namespace and model on `dev` (init inputs seeded as the driver's)."""
    name, ctx = load_problem(kernelbench, pid)
    torch.manual_seed(42)
    return name, ctx, ctx["Model"](*on_device(ctx["get_init_inputs"](), torch, dev)).to(dev)


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
        name, ctx, model = build_model(args.kernelbench, pid, torch, dev)
        for d in range(args.draws):
            spacer = torch.empty(rng.randrange(0, 64) * SPACER_STEP + 1, dtype=torch.uint8,
                                 device=dev)
            torch.manual_seed(42)
            inputs = on_device(ctx["get_inputs"](), torch, dev)
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


def steal_ticks():
    """The machine's CPU steal time so far (/proc/stat's first line, clock ticks); -1 if unread."""
    try:
        with open("/proc/stat") as f:
            v = f.readline().split()
        return int(v[8]) if v[0] == "cpu" and len(v) > 8 else -1
    except (OSError, ValueError):
        return -1


def kb_trials(torch, kt, model, inputs, trials, warmup, dev):
    """KernelBench's time_execution_with_cuda_event loop (discard_first=1),
    with an event recorded before clear_l2_cache: per trial (timed ms,
    flush ms, launch-path us)."""
    for _ in range(warmup):
        model(*inputs)
        torch.cuda.synchronize(device=dev)
    torch.cuda.empty_cache()
    out = []
    for trial in range(trials + 1):
        torch.cuda.synchronize(device=dev)
        e_flush = torch.cuda.Event(enable_timing=True)
        start_event = torch.cuda.Event(enable_timing=True)
        end_event = torch.cuda.Event(enable_timing=True)
        e_flush.record()
        kt.clear_l2_cache(device=dev)
        start_event.record()
        h0 = time.perf_counter()
        model(*inputs)
        end_event.record()
        h1 = time.perf_counter()
        torch.cuda.synchronize(device=dev)
        if trial >= 1:
            out.append((start_event.elapsed_time(end_event), e_flush.elapsed_time(start_event),
                        (h1 - h0) * 1e6))
    return out


def cpu_probe_us():
    """The host's speed now: the best of 3 timings of a fixed pure-Python
    integer loop (us); the same work each time, so a slower CPU reads longer."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        sum(range(20000))
        best = min(best, time.perf_counter() - t0)
    return best * 1e6


class Burners:
    """--burn N: N busy processes, one per CPU other than the measuring
    process's (which is pinned to the last CPU it may use), started and
    stopped on request."""

    def __init__(self, n):
        cpus = sorted(os.sched_getaffinity(0))
        self.own = cpus[-1]
        os.sched_setaffinity(0, {self.own})
        self.cpus = cpus[:-1][:n]
        self.procs = []

    def start(self):
        import subprocess  # noqa: PLC0415
        for c in self.cpus:
            self.procs.append(subprocess.Popen(
                [sys.executable, "-c", "import os; os.sched_setaffinity(0, {%d})\nwhile True: pass" % c]))

    def stop(self):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        self.procs = []


def series(args, torch, kt):
    """--series: one draw per problem, round-robin for args.series seconds
    (with --burn, burners run through its middle third)."""
    dev = torch.device("cuda:0")
    draws = []
    for pid in args.problems.split(","):
        name, ctx, model = build_model(args.kernelbench, pid, torch, dev)
        # The inputs follow the model on the generator seeded for it (no reseed: as first run).
        draws.append((pid, name, model, on_device(ctx["get_inputs"](), torch, dev)))
    burners = Burners(args.burn) if args.burn > 0 else None
    t_start = time.monotonic()
    t_end = t_start + args.series
    calls, k, burning = [], 0, "idle"
    hz = os.sysconf("SC_CLK_TCK")
    try:
        while time.monotonic() < t_end:
            if burners is not None:
                third = int(3 * (time.monotonic() - t_start) / args.series)
                if third == 1 and burning == "idle":
                    burners.start()
                    burning = "burn"
                elif third >= 2 and burning == "burn":
                    burners.stop()
                    burning = "after"
            calls.append(series_call(args, torch, kt, draws[k % len(draws)], dev, hz))
            calls[-1]["segment"] = burning if burners is not None else "idle"
            k += 1
    finally:
        if burners is not None:
            burners.stop()
    return calls


def series_call(args, torch, kt, draw, dev, hz):
    """One call of the series: KernelBench's trials on one draw, with the host's speed."""
    pid, name, model, inputs = draw
    probe = cpu_probe_us()
    st0, t0 = steal_ticks(), time.perf_counter()
    with torch.no_grad():
        tr = kb_trials(torch, kt, model, inputs, args.trials, args.warmup, dev)
    wall, st1 = time.perf_counter() - t0, steal_ticks()
    return {"pid": pid, "name": name, "t": t0, "wall_s": wall,
            "median_ms": statistics.median(x[0] for x in tr),
            "flush_ms": statistics.median(x[1] for x in tr),
            "launch_us": statistics.median(x[2] for x in tr),
            "probe_us": probe,
            "steal_ms": (st1 - st0) * 1e3 / hz if st0 >= 0 and st1 >= 0 else None}


def analyze_series(calls, slow_pct=1.0):
    """Per problem: calls at +slow_pct or more over its median (slow) against
    the others: their flush time, launch path and steal; and the slow calls'
    stretches (runs of consecutive calls of the series with a slow one)."""
    rows = []
    for pid in dict.fromkeys(c["pid"] for c in calls):
        cs = [c for c in calls if c["pid"] == pid]
        ref = statistics.median(c["median_ms"] for c in cs)
        for c in cs:
            c["pct"] = 100 * (c["median_ms"] / ref - 1)
        slow = [c for c in cs if c["pct"] >= slow_pct]
        other = [c for c in cs if c["pct"] < slow_pct]

        def med(v, key):
            xs = [c[key] for c in v if c[key] is not None]
            return statistics.median(xs) if xs else None
        rows.append({"pid": pid, "name": cs[0]["name"], "calls": len(cs), "median_ms": ref,
                     "slow": len(slow), "max_pct": max(c["pct"] for c in cs),
                     "flush_ms": (med(slow, "flush_ms"), med(other, "flush_ms")),
                     "launch_us": (med(slow, "launch_us"), med(other, "launch_us")),
                     "steal_ms": (med(slow, "steal_ms"), med(other, "steal_ms"))})
    order = sorted(calls, key=lambda c: c["t"])
    stretches, cur = [], []
    for c in order:
        if c["pct"] >= slow_pct:
            cur.append(c)
        elif cur:
            stretches.append(cur)
            cur = []
    if cur:
        stretches.append(cur)
    t0 = order[0]["t"] if order else 0
    spans = [{"from_s": s[0]["t"] - t0, "to_s": s[-1]["t"] + s[-1]["wall_s"] - t0, "calls": len(s),
              "problems": sorted({c["pid"] for c in s}, key=lambda x: (len(x), x))}
             for s in stretches]
    return rows, spans


HOST_SLOW = 1.8  # a call's launch path this many times its problem's median: the host is slow


def analyze_segments(calls, slow_pct=1.0):
    """Per segment of the series (idle; with --burn: idle, burn, after): its
    calls, those whose launch path is HOST_SLOW times their problem's median
    or more (host-slow), the slow calls (+slow_pct) among host-slow calls and
    among the others, and the CPU probe's median. Needs analyze_series first."""
    launch = {}
    for c in calls:
        launch.setdefault(c["pid"], []).append(c["launch_us"])
    ref = {p: statistics.median(v) for p, v in launch.items()}
    out = []
    for seg in dict.fromkeys(c.get("segment", "idle") for c in calls):
        cs = [c for c in calls if c.get("segment", "idle") == seg]
        hs = [c for c in cs if c["launch_us"] >= HOST_SLOW * ref[c["pid"]]]
        other = [c for c in cs if c["launch_us"] < HOST_SLOW * ref[c["pid"]]]
        probes = [c["probe_us"] for c in cs if c.get("probe_us") is not None]
        hs_probes = [c["probe_us"] for c in hs if c.get("probe_us") is not None]
        out.append({"segment": seg, "calls": len(cs), "host_slow": len(hs),
                    "slow_in_host_slow": sum(c["pct"] >= slow_pct for c in hs),
                    "slow_in_others": sum(c["pct"] >= slow_pct for c in other),
                    "probe_us": statistics.median(probes) if probes else None,
                    "probe_us_host_slow": statistics.median(hs_probes) if hs_probes else None})
    return out


def markdown_series(rows, spans, cfg, slow_pct=1.0, segments=None):
    def pair(p, f):
        return " / ".join("-" if x is None else f % x for x in p)
    lines = ["# KernelBench's slow calls over time: the GPU's or the host's", "",
             "One process alone on the GPU, no krex; `%s`." % cfg["command"], "",
             "Per problem: calls +%g%% or more over its median (slow); medians per call of the "
             "L2 flush's GPU time, the model's launch path (start event's record to the end "
             "event's, host) and the machine's CPU steal during the call, slow / others." % slow_pct,
             "",
             "| problem | calls | median ms | slow | max | flush ms | launch path us | steal ms |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append("| %s | %d | %.4f | %d | %+.2f%% | %s | %s | %s |" % (
            r["name"][:-3], r["calls"], r["median_ms"], r["slow"], r["max_pct"],
            pair(r["flush_ms"], "%.4f"), pair(r["launch_us"], "%.0f"), pair(r["steal_ms"], "%.1f")))
    if segments:
        lines += ["", "Per segment: calls whose launch path is %gx its problem's median or more "
                  "(host-slow), slow calls among them and among the others, and the CPU probe "
                  "(a fixed Python loop, us: median over the segment / over its host-slow calls):"
                  % HOST_SLOW, "",
                  "| segment | calls | host-slow | slow among host-slow | slow among others | "
                  "CPU probe us |", "|---|---|---|---|---|---|"]
        for g in segments:
            lines.append("| %s | %d | %d | %d | %d | %s / %s |" % (
                g["segment"], g["calls"], g["host_slow"], g["slow_in_host_slow"],
                g["slow_in_others"], "-" if g["probe_us"] is None else "%.0f" % g["probe_us"],
                "-" if g["probe_us_host_slow"] is None else "%.0f" % g["probe_us_host_slow"]))
    lines += ["", "Stretches of consecutive slow calls (seconds into the series): %d" % len(spans), ""]
    for s in spans:
        if s["calls"] > 1:
            lines.append("- %.1f-%.1f s: %d calls, problems %s" % (
                s["from_s"], s["to_s"], s["calls"], ", ".join(s["problems"])))
    return "\n".join(lines) + "\n"


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
    ap.add_argument("--series", type=float, default=0.0,
                    help="seconds of round-robin calls on one draw per problem (see above)")
    ap.add_argument("--burn", type=int, default=0,
                    help="with --series: N busy processes on the other CPUs through its middle third")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    for k in ("draws", "rounds", "trials"):
        if getattr(args, k) < 1:
            ap.error("--%s must be at least 1" % k)
    if args.fragment < 0:
        ap.error("--fragment must be 0 or more")
    if args.series < 0:
        ap.error("--series must be 0 or more")
    if args.burn < 0 or (args.burn and not args.series):
        ap.error("--burn must be 0 or more, and only with --series")
    t_start = time.monotonic()
    import torch  # noqa: PLC0415
    kt, how = import_timing(args.kernelbench)
    torch.cuda.set_device(0)
    torch.zeros(1, device="cuda")
    cfg = {"command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
           "timing_import": how, "torch": torch.__version__,
           "device": torch.cuda.get_device_name(0)}
    os.makedirs(args.out, exist_ok=True)
    if args.series > 0:
        calls = series(args, torch, kt)
        rows, spans = analyze_series(calls)
        segments = analyze_segments(calls)
        write_report(args.out, "kernelbench_series",
                     {"config": cfg, "analysis": rows, "segments": segments, "stretches": spans,
                      "calls": calls},
                     markdown_series(rows, spans, cfg, segments=segments),
                     time.monotonic() - t_start)
        return 0
    rng = random.Random(args.seed)
    calls = one_condition(args, torch, kt, rng, "fresh")
    if args.fragment > 0:
        keep = fragment(torch, args.fragment, rng)
        calls += one_condition(args, torch, kt, rng, "fragmented %g GB" % args.fragment)
        del keep
    rows = analyze(calls)
    write_report(args.out, "kernelbench_levels", {"config": cfg, "analysis": rows, "calls": calls},
                 markdown(rows, cfg), time.monotonic() - t_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
