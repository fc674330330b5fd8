#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Ray actors sharing one GPU (num_gpus=1/A): unprotected against krex.ray.

The same candidates (float32 matmuls; a close set 1.5% apart for ranking)
run three ways on one local Ray cluster:

- solo: one actor holding the whole GPU (num_gpus=1), one candidate at a time:
  the reference, measured first and again last (the native repeat);
- unprotected: A actors at num_gpus=1/A, what Ray's fractional GPUs give today;
- krex: A krex.ray workers at num_gpus=1/A, the timed loop inside a region.

Each candidate does its setup outside the timed part, as a harness does: a
CPU phase of --prep-ms (a busy spin standing in for compiling), inputs on
the GPU and a correctness check against a float64 product. The timed part
is the same function in every mode: --samples samples after 3 warm-ups, one
pair of CUDA events per sample, L2 flushed before each (do_bench's method).
In krex mode it runs through krex.ray's Worker.call, so the region's report
and its node-wide enter/exit stamps come back; overlapping regions on the
GPU are counted (must be 0).

    python3 bench/python/ray_bench.py --actors 8 --reps 4 --json out.json

Needs Ray, PyTorch with a GPU and a CUDA build of krex. Prints a Markdown
table; the JSON has every sample. summarize() is tested on synthetic
results by tests/ray_bench_test.py.
"""

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from quantiles import quantile  # noqa: E402  (scripts/quantiles.py: the scripts' one quantile)

# name, matrix size, close set (ranked against the solo order) or None
CANDIDATES = [("mm-256", 256, None), ("mm-512", 512, None), ("mm-1024", 1024, None),
              ("mm-2048", 2048, "close"), ("mm-2080", 2080, "close"), ("mm-2112", 2112, "close"),
              ("mm-2144", 2144, "close"), ("mm-4096", 4096, None)]
BANDS = [("<= 0.1 ms", 0.0, 0.1), ("> 0.1 ms", 0.1, 1e9), ("> 1 ms", 1.0, 1e9)]


def time_fn(fn, warmup=3, samples=30):
    """do_bench's method: CUDA events around each sample, L2 flushed before it."""
    import torch
    flush = torch.empty(256 << 20, dtype=torch.int8, device="cuda")
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(samples)]
    for s, e in zip(starts, ends):
        flush.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


class BenchActor:
    """One actor: mode 'krex' joins krex on its Ray GPU (krex.ray.Worker)."""

    def __init__(self, mode, prep_ms):
        import torch
        self.mode, self.prep_ms = mode, prep_ms
        self.worker = None
        if mode == "krex":
            import krex.ray
            self.worker = krex.ray.Worker()  # joins before the context exists: context creation is gated
        torch.zeros(1, device="cuda")  # the actor's context, outside any timing

    def run(self, name, n, samples):
        import torch
        t0 = time.monotonic()
        until = time.perf_counter() + self.prep_ms / 1000.0
        while time.perf_counter() < until:  # compile stand-in
            pass
        a = torch.randn(n, n, device="cuda")
        b = torch.randn(n, n, device="cuda")
        ok = torch.allclose(a @ b, (a.double() @ b.double()).float(), rtol=1e-3, atol=1e-2)
        setup_s = time.monotonic() - t0
        fn = lambda: torch.mm(a, b)  # noqa: E731
        out = {"name": name, "n": n, "ok": bool(ok), "setup_s": setup_s, "pid": os.getpid()}
        if self.worker is not None:
            r = self.worker.call(time_fn, fn, 3, samples)
            out.update(samples_ms=r["value"], level=r["report"]["level"], enter_ns=r["enter_ns"],
                       exit_ns=r["exit_ns"])
        else:
            e0 = time.monotonic_ns()
            out.update(samples_ms=time_fn(fn, 3, samples), level="none", enter_ns=e0,
                       exit_ns=time.monotonic_ns())
        return out

    def leave(self):
        if self.worker is not None:
            self.worker.leave()
        return True


def run_mode(ray, mode, actors, jobs, prep_ms, samples):
    """Runs the jobs on `actors` actors (krex.ray workers in mode "krex", plain
    actors otherwise); returns (results, each labelled with `mode`, and the
    wall seconds)."""
    cls = ray.remote(num_gpus=1.0 / actors, num_cpus=0)(BenchActor)
    pool = [cls.remote("krex" if mode == "krex" else "plain", prep_ms) for _ in range(actors)]
    ray.get([p.__ray_ready__.remote() for p in pool])  # joined and with a context before the clock
    t0 = time.monotonic()
    refs = [pool[i % actors].run.remote(name, n, samples) for i, (name, n) in enumerate(jobs)]
    results = ray.get(refs)
    wall = time.monotonic() - t0
    ray.get([p.leave.remote() for p in pool])
    for p in pool:
        ray.kill(p)
    for r in results:
        r["mode"] = mode
    return results, wall


def median(xs):
    return quantile(sorted(xs), 0.5)


def summarize(runs, reference="solo", close=None):
    """runs: {mode: {"results": [...], "wall_s": float}}. Inflation per band
    against the reference's per-candidate median (command = the median of a
    job's samples; sample = each sample), flips of the close set's pairs against
    the reference order (per job round), overlapping regions (krex), levels."""
    close = close if close is not None else [c[0] for c in CANDIDATES if c[2] == "close"]
    ref = {}
    for r in runs[reference]["results"]:
        ref.setdefault(r["name"], []).extend(r["samples_ms"])
    ref_med = {k: median(v) for k, v in ref.items()}
    ref_order = sorted((k for k in close if k in ref_med), key=lambda k: ref_med[k])
    rows = {}
    for mode, run in runs.items():
        res = run["results"]
        row = {"jobs": len(res), "wall_s": run["wall_s"],
               "jobs_per_min": 60.0 * len(res) / run["wall_s"] if run["wall_s"] > 0 else float("nan"),
               "failed_checks": sum(1 for r in res if not r["ok"]), "bands": {}}
        for band, lo, hi in BANDS:
            cmd, smp = [], []
            for r in res:
                m = ref_med.get(r["name"])
                if m is None:
                    continue  # not measured by the reference: no inflation
                if lo < m <= hi or (lo == 0.0 and m <= hi):
                    cmd.append(100.0 * (median(r["samples_ms"]) / m - 1))
                    smp.extend(100.0 * (s / m - 1) for s in r["samples_ms"])
            if cmd:
                cmd.sort(), smp.sort()
                row["bands"][band] = {"jobs": len(cmd), "cmd_p50": quantile(cmd, 0.5),
                                      "cmd_p95": quantile(cmd, 0.95), "cmd_max": cmd[-1],
                                      "sample_p95": quantile(smp, 0.95)}
        # Flips: the k-th run of each close candidate forms round k.
        seen, rounds = {}, {}
        for r in res:
            if r["name"] in close:
                k = seen.get(r["name"], 0)
                seen[r["name"]] = k + 1
                rounds.setdefault(k, {})[r["name"]] = median(r["samples_ms"])
        flips = pairs = 0
        for got in rounds.values():
            names = [x for x in ref_order if x in got]
            for i in range(len(names)):
                for j in range(i + 1, len(names)):
                    pairs += 1
                    flips += 1 if got[names[i]] > got[names[j]] else 0
        row["flips"], row["pairs"] = flips, pairs
        # Regions that overlap in time (krex: the GPU's regions must be exclusive).
        iv = sorted((r["enter_ns"], r["exit_ns"]) for r in res if r.get("level", "none") != "none")
        row["overlaps"] = sum(1 for a, b in zip(iv, iv[1:]) if b[0] < a[1])
        levels = {}
        for r in res:
            levels[r.get("level", "none")] = levels.get(r.get("level", "none"), 0) + 1
        row["levels"] = levels
        rows[mode] = row
    return {"reference": reference, "ref_median_ms": ref_med, "close_order": ref_order, "modes": rows}


def markdown(summary, actors):
    out = ["| mode | jobs | jobs/min | " + " | ".join("%s cmd p50 / p95 / max, sample p95 (%%)" % b[0] for b in BANDS)
           + " | close-set flips | overlapping regions |",
           "|---|---|---|" + "---|" * len(BANDS) + "---|---|"]
    for mode, row in summary["modes"].items():
        cells = []
        for band, _, _ in BANDS:
            b = row["bands"].get(band)
            cells.append("%.2f / %.2f / %.2f, %.2f (%d)" % (b["cmd_p50"], b["cmd_p95"], b["cmd_max"],
                                                          b["sample_p95"], b["jobs"]) if b else "-")
        label = mode if mode.startswith("solo") else "%s, %d actors" % (mode, actors)
        out.append("| %s | %d | %.1f | %s | %d/%d | %s |" % (label, row["jobs"], row["jobs_per_min"],
                                                            " | ".join(cells), row["flips"], row["pairs"],
                                                            row["overlaps"] if mode == "krex" else "-"))
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--actors", type=int, default=8)
    ap.add_argument("--reps", type=int, default=4, help="each candidate's jobs per mode")
    ap.add_argument("--samples", type=int, default=30)
    ap.add_argument("--prep-ms", type=float, default=100.0)
    ap.add_argument("--json", help="write every sample and the summary here")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    import ray
    import krex
    if krex.backend != "cuda":
        raise SystemExit("ray_bench.py: needs the CUDA build of krex (this one is %r)" % krex.backend)
    jobs = [(name, n) for name, n, _ in CANDIDATES for _ in range(a.reps)]
    random.Random(a.seed).shuffle(jobs)
    ray.init(num_gpus=1, include_dashboard=False, log_to_driver=True)
    runs = {}
    for mode, actors in (("solo", 1), ("unprotected", a.actors), ("krex", a.actors), ("solo-again", 1)):
        res, wall = run_mode(ray, mode, actors, jobs, a.prep_ms, a.samples)
        runs[mode] = {"results": res, "wall_s": wall}
        print("ray_bench: %s done: %d jobs in %.1f s" % (mode, len(res), wall), flush=True)
    ray.shutdown()
    summary = summarize(runs)
    print(markdown(summary, a.actors))
    for mode, row in summary["modes"].items():
        print("%s levels: %s" % (mode, row["levels"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "summary": summary, "runs": runs}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
