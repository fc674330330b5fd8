#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""krex.Pool on a fixed synthetic workload: the twin of bench/gpu/pool_bench.cu.

Each command: a CPU phase of --prep-ms (a busy spin standing in for
compiling, generating inputs and checking; concurrent with the other
workers), then a krex region around krex.measure of torch.cuda._sleep(C)
(one thread spinning C GPU clock cycles on clock64, the same kernel as the
C++ twin), --samples samples after 3 warm-ups, L2 flushed before each sample.
Needs a CUDA build of krex and PyTorch; lab/scripts/pool_compare.sh runs it beside
the C++ pool.

    python3 bench/python/pool_bench.py --workers 16 --commands 400 --json out.json
"""

import argparse
import json
import os
import sys
import time

import krex

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from quantiles import quantile  # noqa: E402  (scripts/quantiles.py: the scripts' one quantile)


def full_protection(level):
    """The same reading of the level string as the C++ twin."""
    return (level.startswith("gate+drain") and "+pin" in level and "(contended)" not in level
            and "(busy)" not in level and ",broken" not in level and "-shared" not in level
            and "-split" not in level)


def command(prep_ms, cycles, samples):
    import torch  # in the worker: its CUDA context is the worker's, kept between commands

    until = time.perf_counter() + prep_ms / 1000.0
    while time.perf_counter() < until:
        pass
    t = krex.worker_tenant()
    with krex.region(t) as r:
        m = krex.measure(r, lambda: torch.cuda._sleep(cycles), warmup=3, samples=samples)
    level = r.report["level"]
    return {"median_ms": m["median_ms"], "p95_ms": m["p95_ms"], "samples_ms": m["samples_ms"],
            "level": level, "full": full_protection(level)}


def warm():
    import torch  # noqa: F401 - import torch once per worker before the clock starts
    torch.zeros(1, device="cuda")  # the worker's context, as a C++ worker's first command makes it
    time.sleep(0.5)  # so each of the simultaneous warm calls lands on its own worker
    return krex.worker_tenant().slot


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--commands", type=int, default=400)
    ap.add_argument("--samples", type=int, default=50)
    ap.add_argument("--prep-ms", type=float, default=40.0)
    ap.add_argument("--kernel-cycles", type=int, default=100000)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.workers < 1 or args.commands < 1 or args.samples < 1 or args.prep_ms < 0:
        ap.error("--workers, --commands and --samples must be >= 1, --prep-ms >= 0")

    t_start = time.monotonic()
    with krex.Pool(workers=args.workers, devices=[args.device]) as pool:
        # Every worker imports torch once before the clock starts, as the C++
        # workers have their runtime loaded (each worker takes one warm call).
        warm_futs = [pool.submit(warm) for _ in range(args.workers)]
        for f in warm_futs:
            f.result()
        t0 = time.monotonic()
        futs = [pool.submit(command, args.prep_ms, args.kernel_cycles, args.samples)
                for _ in range(args.commands)]
        results, errors = [], []
        for f in futs:
            try:
                results.append(f.result())
            except Exception as e:  # noqa: BLE001 - counted and reported
                errors.append("%s: %s" % (type(e).__name__, e))
        wall = time.monotonic() - t0
    medians = [r["median_ms"] for r in results]
    samples = [s for r in results for s in r["samples_ms"]]
    ok = len(results)
    out = {
        "shape": "krex.Pool devices=[d]", "lang": "python", "workers": args.workers,
        "commands": args.commands, "failed": len(errors), "prep_ms": args.prep_ms,
        "kernel_cycles": args.kernel_cycles, "samples": args.samples, "wall_s": round(wall, 4),
        "start_s": round(t0 - t_start, 4), "cmd_per_min": round(ok / wall * 60.0, 2),
        "full_protection": sum(1 for r in results if r["full"]),
        "quiet_checked": sum(1 for r in results if "+quiet+" in r["level"]),
        "median_of_medians_ms": quantile(medians, 0.5), "p95_of_medians_ms": quantile(medians, 0.95),
        "max_median_ms": quantile(medians, 1.0), "sample_p50_ms": quantile(samples, 0.5),
        "sample_p95_ms": quantile(samples, 0.95), "n_samples": len(samples),
        "level_example": next((r["level"] for r in results if "+quiet" in r["level"]),
                              results[0]["level"] if results else ""),
    }
    print("%s: %d workers, %d commands (%d failed), prep %.1f ms, kernel %d cycles, %d samples"
          % (out["shape"], args.workers, args.commands, len(errors), args.prep_ms, args.kernel_cycles,
             args.samples))
    print("  wall %.2f s (+%.2f s start): %.1f commands/min; full protection %d/%d, quiet checked %d; "
          "level e.g. %s" % (wall, out["start_s"], out["cmd_per_min"], out["full_protection"], ok,
                             out["quiet_checked"], out["level_example"]))
    print("  command medians: median %.5f ms, p95 %.5f ms, max %.5f ms; samples p95 %.5f ms (%d)"
          % (out["median_of_medians_ms"], out["p95_of_medians_ms"], out["max_median_ms"],
             out["sample_p95_ms"], len(samples)))
    if errors:
        print("  first error: " + errors[0])
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f)
            f.write("\n")
    return 0 if not errors else 1


if __name__ == "__main__":
    sys.exit(main())
