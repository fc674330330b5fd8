#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""krex.torch on a GPU: N processes at once compile a small matmul with
torch.compile(mode="max-autotune"), each with krex registered as Inductor's
GPU benchmark lock (krex.torch.enable()), so every autotuning benchmark of
every process is a krex region.

    python3 lab/scripts/torch_inductor.py [--workers 4] [--phases krex,cudagraph]
                                         [--size 2048] [--out DIR]

Phases (each: N workers started together, each with its own empty Inductor
cache so that it autotunes for itself):
  krex       krex.torch on; Inductor's default benchmarking
  cudagraph  krex.torch on; TORCHINDUCTOR_AUTOTUNE_CUDAGRAPH_BENCHMARKING=1,
             so each benchmark captures and replays a CUDA graph inside its
             region (nested sections: benchmark_gpu inside the CUDA-graph helper)
  control    KREX_PATCH=0: krex.torch registers nothing (the same work unprotected)

Each worker registers a recording lock context before krex's, which krex.torch
runs inside its region: the times of every outermost section. Checked per
phase: every worker's compiled result matches torch.matmul; with krex on,
each worker's sections opened regions (Inductor's benchmarks went through
the hook), none raised a krex error, and no two workers' sections overlap in
time. Prints the PyTorch and Triton versions and whether this PyTorch has
Inductor's GPU benchmark lock hook (PyTorch 2.13 and newer); writes
torch_inductor.json to --out (default $OUT or .).

--fake: the plumbing without a GPU (a logic check of this script): the host
backend, torch.compile on the CPU, and the GPU benchmarks replaced by
sections entered through Inductor's own lock decorator.

Exit status: 0 every check passed; 1 a check failed; 3 this PyTorch has no
hook (the workers still ran, with krex.torch warning that it cannot register,
and their results were checked).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time


def worker(args):
    import contextlib

    import torch

    import krex
    import krex.torch

    sections = []          # (enter_ns, exit_ns) of outermost sections, CLOCK_MONOTONIC
    depth = threading.local()
    out = {"pid": os.getpid(), "phase": args.phase}
    hook = krex.torch.supported()
    if hook:
        from torch._inductor.runtime import benchmarking

        @contextlib.contextmanager
        def recording():  # registered first: krex.torch runs it inside its region
            d = getattr(depth, "n", 0)
            depth.n = d + 1
            t0 = time.monotonic_ns()
            try:
                yield
            finally:
                depth.n = d
                if d == 0:
                    sections.append((t0, time.monotonic_ns(), krex.in_region()))

        benchmarking.set_gpu_benchmark_lock_context(recording)
    out["enabled"] = krex.torch.enable(strict=False)

    torch.manual_seed(0)
    n = args.size
    dev, dtype = ("cpu", torch.float32) if args.fake else ("cuda", torch.float16)
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)

    def mm(x, y):
        return x @ y

    t0 = time.monotonic()
    f = torch.compile(mm, mode="default" if args.fake else "max-autotune")
    got = f(a, b)
    if args.fake and hook:  # stand-ins for Inductor's GPU benchmarks, through its decorator
        bench = benchmarking.gpu_benchmark_lock(benchmarking.gpu_benchmark_lock(
            lambda: [f(a, b) for _ in range(3)]))
        for _ in range(5):
            bench()
    if not args.fake:
        torch.cuda.synchronize()
    out["compile_s"] = time.monotonic() - t0
    want = torch.matmul(a, b)
    out["max_abs_err"] = float((got.float() - want.float()).abs().max())
    out["correct"] = bool(torch.allclose(got.float(), want.float(), atol=0.5, rtol=2e-2))
    out["status"] = krex.torch.status()
    rep = krex.torch.last_report()
    out["level"] = rep["level"] if rep else None
    out["foreign_pids"] = rep.get("foreign_pids") if rep else None
    out["device"] = None if args.fake else torch.cuda.get_device_name()
    out["sections"] = sections
    t = krex.process_tenant() if out["enabled"] else None
    out["gating"] = t.gating if t is not None else None
    print("RESULT " + json.dumps(out), flush=True)


def overlaps(runs):
    s = sorted((a, b, who) for who, ivs in enumerate(runs) for a, b, _ in ivs)
    found = 0
    for i, (a0, a1, wa) in enumerate(s):
        for b0, _, wb in s[i + 1:]:
            if b0 >= a1:
                break
            if wa != wb:
                found += 1
    return found


def run_phase(args, phase, segment):
    env = dict(os.environ)
    env["KREX_SEGMENT"] = segment
    env["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"   # each worker autotunes for itself
    env.pop("TORCHINDUCTOR_AUTOTUNE_IN_SUBPROC", None)
    if phase == "cudagraph":
        env["TORCHINDUCTOR_AUTOTUNE_CUDAGRAPH_BENCHMARKING"] = "1"
    if phase == "control":
        env["KREX_PATCH"] = "0"
    if args.fake:  # light on a small machine
        for k, v in (("KREX_FREEZE", "none"), ("KREX_PIN", "0"), ("KREX_CONFINE", "0")):
            env.setdefault(k, v)
    procs = []
    tmp = tempfile.mkdtemp(prefix="krex-inductor-")
    t0 = time.monotonic()
    for i in range(args.workers):
        e = dict(env, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "w%d" % i),
                 TRITON_CACHE_DIR=os.path.join(tmp, "triton%d" % i))
        procs.append(subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", "--phase", phase,
             "--size", str(args.size)] + (["--fake"] if args.fake else []),
            env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results, errors = [], []
    for i, p in enumerate(procs):
        try:
            so, se = p.communicate(timeout=max(1, args.timeout - (time.monotonic() - t0)))
        except subprocess.TimeoutExpired:
            p.kill()
            so, se = p.communicate()
            errors.append("worker %d: timed out after %d s" % (i, args.timeout))
        line = [x for x in so.splitlines() if x.startswith("RESULT ")]
        if p.returncode != 0 or not line:
            errors.append("worker %d: exit %s, stderr tail:\n%s" % (i, p.returncode, se[-3000:]))
            continue
        r = json.loads(line[-1][len("RESULT "):])
        r["warnings"] = [x for x in se.splitlines() if "krex" in x and "Warning" in x][:5]
        results.append(r)
    wall = time.monotonic() - t0
    shutil.rmtree(tmp, ignore_errors=True)
    return {"phase": phase, "workers": args.workers, "wall_s": wall, "results": results,
            "errors": errors}


def check(phase_out, hook):
    """The failed checks of a phase (strings)."""
    bad = list(phase_out["errors"])
    rs = phase_out["results"]
    for r in rs:
        if not r["correct"]:
            bad.append("pid %d: wrong result (max abs err %g)" % (r["pid"], r["max_abs_err"]))
    phase_out["overlaps"] = overlaps([r["sections"] for r in rs])
    if phase_out["phase"] != "control" and hook:
        for r in rs:
            st = r["status"]
            if not r["enabled"]:
                bad.append("pid %d: krex.torch not enabled" % r["pid"])
            if st["sections"] == 0:
                bad.append("pid %d: no section opened a region: Inductor's benchmarks did not "
                           "go through the hook" % r["pid"])
            if st["errors"]:
                bad.append("pid %d: %d sections raised krex errors, last: %s"
                           % (r["pid"], st["errors"], st["last_error"]))
            if any(not inr for _, _, inr in r["sections"]):
                bad.append("pid %d: a section ran outside a krex region" % r["pid"])
        n = phase_out["overlaps"]
        if n:
            bad.append("%d overlapping sections of different workers" % n)
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--phases", default="krex,cudagraph")
    ap.add_argument("--size", type=int, default=2048)
    ap.add_argument("--timeout", type=int, default=240, help="seconds per phase")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--fake", action="store_true",
                    help="no GPU: the host backend and CPU stand-ins (a logic check)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--phase", default="krex", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    import torch

    import krex
    import krex.torch
    st = krex.torch.status()
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    env = {"krex": krex.__version__, "krex_backend": krex.backend, "torch": torch.__version__,
           "torch_cuda": torch.version.cuda, "triton": triton_version,
           "fake": args.fake,
           "hook": st["hook"], "multi_kernel_lock": st["multi_kernel_lock"],
           "reason": st["reason"]}
    # The parent never touches CUDA: a context of a process that is not a
    # tenant would show in the workers' regions as foreign.
    print("env: " + json.dumps(env), flush=True)
    print("HOOK: %s" % ("present (krex.torch can register)" if st["hook"]
                        else "ABSENT: " + st["reason"]), flush=True)
    if krex.backend != "cuda" and not args.fake:
        print("krex is the %s backend here; install the CUDA build" % krex.backend)
        return 1
    segment = "inductor-%d" % os.getpid()
    phases, failed = [], []
    for phase in [p for p in args.phases.split(",") if p]:
        if phase not in ("krex", "cudagraph", "control"):
            print("unknown phase %r: krex, cudagraph or control" % phase)
            return 2
        out = run_phase(args, phase, "%s-%s" % (segment, phase))
        bad = check(out, st["hook"])
        out["failed"] = bad
        phases.append(out)
        rs = out["results"]
        print("%-9s %d workers, %.1f s wall; compile s: %s; sections: %s; nested: %s; "
              "levels: %s; overlaps: %s; %s"
              % (phase, args.workers, out["wall_s"],
                 [round(r["compile_s"], 1) for r in rs],
                 [r["status"]["sections"] for r in rs], [r["status"]["nested"] for r in rs],
                 sorted({str(r["level"]) for r in rs}), out.get("overlaps", "-"),
                 "ok" if not bad else "FAILED"), flush=True)
        if rs:
            print("  device: %s; foreign pids in the last regions: %s"
                  % (rs[0]["device"], sorted({p for r in rs for p in (r["foreign_pids"] or [])})))
        for w in sorted({w for r in rs for w in r["warnings"]}):
            print("  worker warning: " + w)
        for b in bad:
            print("  " + b)
        failed += bad
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "torch_inductor.json"), "w") as f:
        json.dump({"env": env, "phases": phases}, f, indent=1)
    if failed:
        return 1
    return 0 if st["hook"] else 3


if __name__ == "__main__":
    sys.exit(main())
