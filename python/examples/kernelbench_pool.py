#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A KernelBench-style evaluation loop, from a process per candidate to a krex.Pool.

KernelBench-style harnesses evaluate every generated candidate in a fresh
process, so that one candidate cannot break the next:

    for c in candidates:                                     # before
        out = subprocess.run([sys.executable, "eval_one.py", c], capture_output=True)

Each of those processes creates a CUDA context and joins krex before any
work. With a pool, persistent workers pay for that once and keep it; the
loop becomes:

    with krex.Pool(workers=4, devices="all") as pool:       # after
        results = list(pool.map(evaluate, candidates))

where ``evaluate`` is the same function the per-process script ran, at the
top level of an importable module (workers are 'spawn'ed and import it). It
times inside a region of the worker's own tenant (krex.worker_tenant()). A
candidate that kills its process fails only its own future (krex.WorkerDied)
and the pool replaces the worker.

Here the "kernels" are small matrix multiplies in plain Python (so the
example runs on the host backend, without a GPU); a real harness compiles
its CUDA/Triton candidate where ``compile_candidate`` is and launches it in
the timed lambda. Run:

    python3 python/examples/kernelbench_pool.py --workers 2 --candidates 12
    python3 python/examples/kernelbench_pool.py --per-process      # the "before" shape

Each result is one JSON line ("RESULT {...}"); the last line is a summary.
"""

import argparse
import json
import os
import subprocess
import sys
import time

import krex

N = 24  # matrix size: a few milliseconds per multiply in plain Python

# The candidates a model "generated": source text defining kernel(a, b).
VARIANTS = {
    "ijk": """
def kernel(a, b):
    n = len(a)
    return [[sum(a[i][k] * b[k][j] for k in range(n)) for j in range(n)] for i in range(n)]
""",
    "ikj": """
def kernel(a, b):
    n = len(a)
    c = [[0] * n for _ in range(n)]
    for i in range(n):
        ci, ai = c[i], a[i]
        for k in range(n):
            aik, bk = ai[k], b[k]
            for j in range(n):
                ci[j] += aik * bk[j]
    return c
""",
    "zip": """
def kernel(a, b):
    bt = list(zip(*b))
    return [[sum(x * y for x, y in zip(row, col)) for col in bt] for row in a]
""",
    "wrong": """
def kernel(a, b):
    n = len(a)
    return [[sum(a[i][k] * b[k][j] for k in range(n - 1)) for j in range(n)] for i in range(n)]
""",
}


def make_inputs(seed):
    a = [[(i * 7 + j * 3 + seed) % 11 - 5 for j in range(N)] for i in range(N)]
    b = [[(i * 5 + j * 2 + seed) % 13 - 6 for j in range(N)] for i in range(N)]
    return a, b


def reference(a, b):
    return [[sum(a[i][k] * b[k][j] for k in range(N)) for j in range(N)] for i in range(N)]


def compile_candidate(source):
    namespace = {}
    exec(compile(source, "<candidate>", "exec"), namespace)  # noqa: S102 - the example's "compiler"
    return namespace["kernel"]


def evaluate(name, tenant=None):
    """One candidate: compile, check against the reference (both concurrent
    with other workers), then time it inside a krex region. Returns a dict."""
    t = tenant if tenant is not None else krex.worker_tenant()
    out = {"candidate": name, "pid": os.getpid(), "device": t.device, "slot": t.slot}
    try:
        kernel = compile_candidate(VARIANTS[name.split("#")[0]])
        a, b = make_inputs(len(name))
        out["correct"] = kernel(a, b) == reference(a, b)
    except Exception as e:  # noqa: BLE001 - a broken candidate is a result, as in KernelBench
        out.update(correct=False, error="%s: %s" % (type(e).__name__, e))
        return out
    if not out["correct"]:
        return out
    with krex.region(t) as r:
        m = krex.measure(r, lambda: kernel(a, b), warmup=2, samples=10)
    out.update(median_ms=m["median_ms"], level=r.report["level"])
    return out


def candidates(n):
    names = sorted(VARIANTS)
    return ["%s#%d" % (names[i % len(names)], i) for i in range(n)]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2, help="workers per device (default 2)")
    ap.add_argument("--devices", default=None,
                    help="'all', or comma-separated ordinals (default: device 0)")
    ap.add_argument("--candidates", type=int, default=12)
    ap.add_argument("--per-process", action="store_true",
                    help="the 'before' shape: one process (and tenant) per candidate")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # a --per-process child
    args = ap.parse_args(argv)

    if args.one is not None:  # a per-process child: join, evaluate one, leave
        with krex.Tenant(0) as t:
            print("RESULT " + json.dumps(evaluate(args.one, t)), flush=True)
        return 0

    todo = candidates(args.candidates)
    t0 = time.monotonic()
    if args.per_process:
        results = []
        for c in todo:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", c],
                               capture_output=True, text=True, check=True)
            line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][0]
            results.append(json.loads(line[len("RESULT "):]))
        shape = "process per candidate"
    else:
        devices = args.devices
        if devices not in (None, "all"):
            devices = [int(d) for d in devices.split(",")]
        with krex.Pool(workers=args.workers, devices=devices) as pool:
            results = list(pool.map(evaluate, todo))
        shape = "krex.Pool"
    wall = time.monotonic() - t0
    for r in results:
        print("RESULT " + json.dumps(r), flush=True)
    summary = {"shape": shape, "candidates": len(results), "wall_s": round(wall, 3),
               "correct": sum(bool(r.get("correct")) for r in results),
               "processes": len({r["pid"] for r in results})}
    print("SUMMARY " + json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
