#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""KernelBench-style candidate evaluations sharing one GPU: solo, N at once
unprotected, N at once under krex (through `python -m krex.run`).

Each evaluation is a process (a worker) that builds a few PyTorch candidate
implementations of one op, checks each against a reference, then times each
with triton.testing.do_bench, round-robin over the candidates, `--reps` times,
as an agent's evaluation loop would. The worker knows nothing of krex: the
krex phase runs it as `python -m krex.run kernelbench_style.py --worker ...`,
which wraps do_bench so every call runs inside a region.

Phases (the workers of a phase start their timed loops together):
  solo         one worker per problem, one after another, alone on the GPU
  unprotected  N workers at once (worker i evaluates problem i mod 4)
  krex         the same N workers at once, under krex

Reported (markdown table + JSON in --out, default $OUT or ./kernelbench-out):
inflation of every do_bench result over the solo median of the same
candidate (median, p95, max), and ranking flips: for each worker, candidate
pairs ordered differently from the solo run (by the median over reps), and
workers whose fastest candidate differs from solo's. The solo run's own
split-half disagreement (odd vs even reps) is the noise floor.

    python3 bench/python/kernelbench_style.py                # on a GPU, krex installed
    python3 bench/python/kernelbench_style.py --fake         # no GPU: CPU stand-ins (logic check)

Needs PyTorch and Triton on a GPU; krex installed (pip install ./python) or
on PYTHONPATH.
"""

import argparse
import json
import os
import selectors
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "..", "..", "scripts"))
from quantiles import quantile  # noqa: E402  (scripts/quantiles.py: the scripts' one quantile)
from report_files import write_report  # noqa: E402  (scripts/report_files.py)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "..", "..", "testkit"))
from krex_leftovers import remove_leftovers  # noqa: E402  (shared with tests/python)

# ----------------------------------------------------------------- problems
# Four ops, four candidates each, most within a few percent of each other;
# "sgemm" (fp32 without TF32, ~2.7 ms per call on an H200) is the long-kernel
# problem: kernels longer than the GPU's time slice are the ones that
# concurrent contexts slow down (--problems selects; default the first four).
PROBLEMS = ["matmul", "linear_gelu", "add_relu", "rmsnorm", "sgemm"]
DEFAULT_PROBLEMS = PROBLEMS[:4]


def build_problem(name, torch, F):
    """Returns (reference, {candidate name: fn}, atol, rtol) for problem `name`."""
    dev, h = "cuda", torch.float16
    g = torch.Generator(device=dev).manual_seed(1234)

    def rnd(*shape):
        return torch.randn(*shape, device=dev, dtype=h, generator=g)

    if name == "matmul":
        n = 4096
        a, b = rnd(n, n) / 64, rnd(n, n) / 64
        bt = b.t().contiguous()
        out = torch.empty(n, n, device=dev, dtype=h)
        half = n // 2
        ref = lambda: a @ b  # noqa: E731
        cands = {
            "a@b": lambda: a @ b,
            "a@bt.T": lambda: a @ bt.t(),
            "mm(out=)": lambda: torch.mm(a, b, out=out),
            "split-N": lambda: torch.cat([a @ b[:, :half], a @ b[:, half:]], 1),
        }
        return ref, cands, 1e-2, 1e-2
    if name == "sgemm":
        torch.backends.cuda.matmul.allow_tf32 = False
        n, f = 4096, torch.float32
        a = torch.randn(n, n, device=dev, dtype=f, generator=g) / 64
        b = torch.randn(n, n, device=dev, dtype=f, generator=g) / 64
        bt = b.t().contiguous()
        out = torch.empty(n, n, device=dev, dtype=f)
        ref = lambda: a @ b  # noqa: E731
        cands = {
            "a@b": lambda: a @ b,
            "a@bt.T": lambda: a @ bt.t(),
            "mm(out=)": lambda: torch.mm(a, b, out=out),
            "(b.T@a.T).T": lambda: (bt @ a.t()).t(),
        }
        return ref, cands, 1e-3, 1e-3
    if name == "linear_gelu":
        m, k, n = 8192, 4096, 4096
        x, w, bias = rnd(m, k) / 64, rnd(n, k) / 64, rnd(n)
        ref = lambda: F.gelu(F.linear(x, w, bias))  # noqa: E731
        cands = {
            "linear+gelu": lambda: F.gelu(F.linear(x, w, bias)),
            "addmm+gelu": lambda: F.gelu(torch.addmm(bias, x, w.t())),
            "mm+add+gelu": lambda: F.gelu(x @ w.t() + bias),
            "linear+gelu(tanh)": lambda: F.gelu(F.linear(x, w, bias), approximate="tanh"),
        }
        return ref, cands, 2e-2, 2e-2
    if name == "add_relu":
        n = 64 * 1024 * 1024
        a, b = rnd(n), rnd(n)
        out = torch.empty(n, device=dev, dtype=h)

        def add_out_relu_():
            torch.add(a, b, out=out)
            return out.relu_()

        ref = lambda: torch.relu(a + b)  # noqa: E731
        cands = {
            "relu(a+b)": lambda: torch.relu(a + b),
            "add(out=)+relu_": add_out_relu_,
            "(a+b).clamp_min": lambda: (a + b).clamp_min(0),
            "where(a+b>0)": lambda: torch.where(a + b > 0, a + b, 0),
        }
        return ref, cands, 1e-3, 1e-3
    if name == "rmsnorm":
        m, n, eps = 16384, 4096, 1e-6
        x, w = rnd(m, n), rnd(n)

        def manual():
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

        def manual_fp32():
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(h) * w

        ref = manual_fp32
        cands = {"fp16": manual, "fp32-accum": manual_fp32,
                 "norm/sqrt(n)": lambda: x / (x.norm(dim=-1, keepdim=True) / n ** 0.5 + eps) * w}
        if hasattr(F, "rms_norm"):
            cands["F.rms_norm"] = lambda: F.rms_norm(x, (n,), w, eps)
        return ref, cands, 5e-2, 5e-2
    raise ValueError(name)


# ------------------------------------------------------------------- worker
def worker(args):
    """One candidate evaluation: correctness, then do_bench round-robin. Prints
    'ready', waits for 'go' on stdin, prints one JSON result line."""
    if args.fake:
        sys.path.insert(0, args.fake_dir)
        import triton.testing  # the CPU stand-in (see write_fake_triton)
        problem_fns = fake_problem(args.problem)
        ref, cands, atol, rtol = problem_fns
        check = lambda got, want: abs(got - want) <= atol + rtol * abs(want)  # noqa: E731
    else:
        import torch
        import torch.nn.functional as F
        import triton.testing
        torch.cuda.set_device(0)
        ref, cands, atol, rtol = build_problem(args.problem, torch, F)

        def check(got, want):
            return torch.allclose(got.float(), want.float(), atol=atol, rtol=rtol)

    want = ref()
    correct = {}
    for c, fn in cands.items():
        correct[c] = bool(check(fn(), want))
    if not args.fake:
        torch.cuda.synchronize()
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1

    def bench(fn):
        try:
            return float(triton.testing.do_bench(fn, warmup=args.warmup_ms, rep=args.rep_ms,
                                                 return_mode="median"))
        except TypeError:  # a Triton without return_mode: the mean
            return float(triton.testing.do_bench(fn, warmup=args.warmup_ms, rep=args.rep_ms))

    krex = sys.modules.get("krex")  # present only under `python -m krex.run`
    samples = {c: [] for c in cands if correct[c]}
    levels, waits = set(), []
    t0 = time.time()
    for _ in range(args.reps):
        for c in samples:
            samples[c].append(bench(cands[c]))
            if krex is not None and krex.last_report() is not None:
                rep = krex.last_report()
                levels.add(rep["level"])
                waits.append(rep["lock_ns"] / 1e6)
    print("result " + json.dumps({
        "problem": args.problem, "worker": args.index, "pid": os.getpid(),
        "correct": correct, "samples_ms": samples, "timed_s": time.time() - t0,
        "krex": krex is not None, "levels": sorted(levels),
        "lock_wait_ms_median": statistics.median(waits) if waits else None,
    }), flush=True)
    return 0


# -------------------------------------------------------- the --fake stand-ins
FAKE_TESTING = '''
import time
def do_bench(fn, warmup=25, rep=100, grad_to_none=None, quantiles=None, return_mode="mean"):
    end = time.perf_counter() + warmup / 1e3
    while time.perf_counter() < end:
        fn()
    times, end = [], time.perf_counter() + rep / 1e3
    while time.perf_counter() < end or len(times) < 3:
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return times[len(times) // 2] if return_mode == "median" else sum(times) / len(times)
'''


def write_fake_triton(path):
    os.makedirs(os.path.join(path, "triton"), exist_ok=True)
    with open(os.path.join(path, "triton", "__init__.py"), "w") as f:
        f.write("")
    with open(os.path.join(path, "triton", "testing.py"), "w") as f:
        f.write(FAKE_TESTING)


def fake_problem(name):
    """CPU-bound stand-ins, candidates about 3% apart (checks the plumbing only)."""
    scale = 1 + PROBLEMS.index(name)

    def loop(n):
        def fn():
            s = 0
            for i in range(n):
                s += i
            return float(n)
        return fn

    base = 20000 * scale
    cands = {"c%d" % k: loop(int(base * (1 + 0.03 * k))) for k in range(4)}
    return (lambda: float(base)), cands, 1e9, 0.0


# ------------------------------------------------------------- orchestration
def spawn(args, index, problem, krex_on, segment):
    cmd = [sys.executable]
    if krex_on:
        cmd += ["-m", "krex.run"]
    cmd += [HERE, "--worker", "--problem", problem, "--index", str(index),
            "--reps", str(args.reps), "--warmup-ms", str(args.warmup_ms),
            "--rep-ms", str(args.rep_ms)]
    if args.fake:
        cmd += ["--fake", "--fake-dir", args.fake_dir]
    env = dict(os.environ)
    env["KREX_SEGMENT"] = segment
    if not krex_on:
        env["KREX_PATCH"] = "0"
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            bufsize=1, env=env)


def read_line(proc, prefix, deadline):
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise RuntimeError("worker %d: no '%s' line in time" % (proc.pid, prefix))
            line = proc.stdout.readline()
            if line == "":
                raise RuntimeError("worker %d exited (status %s) before '%s'"
                                   % (proc.pid, proc.wait(), prefix))
            if line.startswith(prefix):
                return line[len(prefix):].strip()
    finally:
        sel.close()


def run_phase(args, jobs, krex_on, segment):
    """Starts `jobs` [(index, problem)] at once; returns their results and wall seconds."""
    procs = [spawn(args, i, p, krex_on, segment) for i, p in jobs]
    deadline = time.monotonic() + args.timeout
    try:
        for p in procs:
            read_line(p, "ready", deadline)
        t0 = time.monotonic()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [json.loads(read_line(p, "result ", deadline)) for p in procs]
        wall = time.monotonic() - t0
        for p in procs:
            p.wait(max(1.0, deadline - time.monotonic()))
        return results, wall
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def order(medians):
    return sorted(medians, key=lambda c: medians[c])


def discordant(a, b):
    """Pairs ordered differently by rankings a and b (lists of the same names)."""
    pa = {c: i for i, c in enumerate(a)}
    pb = {c: i for i, c in enumerate(b)}
    names = [c for c in a if c in pb]
    return sum(1 for i, x in enumerate(names) for y in names[i + 1:]
               if (pa[x] - pa[y]) * (pb[x] - pb[y]) < 0)


def analyze(solo, phases):
    ref = {}  # problem -> candidate -> solo median
    floor = {"pairs": 0, "discordant": 0}
    for r in solo:
        med = {c: statistics.median(s) for c, s in r["samples_ms"].items()}
        ref[r["problem"]] = med
        odd = {c: statistics.median(s[0::2]) for c, s in r["samples_ms"].items()}
        even = {c: statistics.median(s[1::2]) for c, s in r["samples_ms"].items() if s[1::2]}
        if len(even) == len(odd):
            floor["discordant"] += discordant(order(odd), order(even))
            floor["pairs"] += len(odd) * (len(odd) - 1) // 2
    out = {"solo_medians_ms": ref, "solo_split_half": floor, "modes": {}}
    for mode, (results, wall) in phases.items():
        infl, pairs, disc, top_wrong, flipped = [], 0, 0, 0, 0
        per_worker = []
        for r in results:
            base = ref[r["problem"]]
            med = {}
            for c, s in r["samples_ms"].items():
                if c not in base:
                    continue
                infl += [x / base[c] - 1 for x in s]
                med[c] = statistics.median(s)
            got, want = order(med), order({c: base[c] for c in med})
            d = discordant(got, want)
            n = len(med)
            pairs += n * (n - 1) // 2
            disc += d
            flipped += d > 0
            top_wrong += bool(got) and got[0] != want[0]
            per_worker.append({"worker": r["worker"], "problem": r["problem"],
                               "discordant": d, "best": got[0] if got else None,
                               "solo_best": want[0] if want else None,
                               "levels": r["levels"],
                               "lock_wait_ms_median": r["lock_wait_ms_median"]})
        out["modes"][mode] = {
            "wall_s": wall, "samples": len(infl),
            "inflation_median": quantile(infl, 0.5), "inflation_p95": quantile(infl, 0.95),
            "inflation_max": max(infl) if infl else float("nan"),
            "pairs": pairs, "discordant_pairs": disc, "workers_with_flips": flipped,
            "workers_best_wrong": top_wrong, "workers": len(results), "per_worker": per_worker,
            "levels": sorted({lv for r in results for lv in r["levels"]}),
        }
    return out


def markdown(a, args):
    lines = ["# KernelBench-style evaluations: solo vs %d at once" % args.workers, "",
             "do_bench(warmup=%d ms, rep=%d ms, median), %d reps per candidate; "
             "inflation = do_bench result / solo median of the same candidate - 1."
             % (args.warmup_ms, args.rep_ms, args.reps), "",
             "| mode | wall s | samples | inflation median | p95 | max | discordant pairs | "
             "workers with a flip | workers whose best differs |",
             "|---|---|---|---|---|---|---|---|---|"]
    for mode, m in a["modes"].items():
        lines.append("| %s | %.1f | %d | %+.1f%% | %+.1f%% | %+.1f%% | %d / %d | %d / %d | %d / %d |"
                     % (mode, m["wall_s"], m["samples"], 100 * m["inflation_median"],
                        100 * m["inflation_p95"], 100 * m["inflation_max"],
                        m["discordant_pairs"], m["pairs"], m["workers_with_flips"],
                        m["workers"], m["workers_best_wrong"], m["workers"]))
    f = a["solo_split_half"]
    lines += ["", "Noise floor (solo, odd vs even reps): %d / %d pairs discordant."
              % (f["discordant"], f["pairs"]), "", "Solo medians (ms) and distance from the "
              "problem's best:", ""]
    for p, med in a["solo_medians_ms"].items():
        best = min(med.values())
        lines.append("- %s: " % p + ", ".join("%s %.4f (%+.1f%%)" % (c, v, 100 * (v / best - 1))
                                               for c, v in sorted(med.items(), key=lambda x: x[1])))
    for mode, m in a["modes"].items():
        if m["levels"]:
            lines.append("")
            lines.append("%s: region levels seen: %s" % (mode, ", ".join(m["levels"])))
    return "\n".join(lines) + "\n"


def remove_segment(name):
    """Once every worker has exited: the krex segment in /dev/shm and its
    cgroup root and leaves (testkit/krex_leftovers.py)."""
    remove_leftovers(name)


def add_driver_args(ap, timeout):
    """The arguments every KernelBench-style driver takes (kernelbench_throughput.py
    too): where to write, the phase timeout, the CPU stand-ins, and the worker's
    own (hidden)."""
    ap.add_argument("--out", default=os.environ.get("OUT", "kernelbench-out"))
    ap.add_argument("--timeout", type=float, default=timeout, help="seconds per phase")
    ap.add_argument("--fake", action="store_true", help="CPU stand-ins, no GPU (logic check)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--problem", help=argparse.SUPPRESS)
    ap.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5, help="do_bench calls per candidate")
    ap.add_argument("--warmup-ms", type=int, default=25)
    ap.add_argument("--rep-ms", type=int, default=100)
    ap.add_argument("--modes", default="unprotected,krex")
    ap.add_argument("--problems", default=",".join(DEFAULT_PROBLEMS),
                    help="comma-separated, of: " + ", ".join(PROBLEMS))
    add_driver_args(ap, timeout=400)
    ap.add_argument("--fake-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    os.makedirs(args.out, exist_ok=True)
    if args.fake:
        args.fake_dir = tempfile.mkdtemp(prefix="krex-fake-triton-")
        write_fake_triton(args.fake_dir)
    segment = "kbstyle-%d" % os.getpid()
    problems = [p for p in args.problems.split(",") if p]
    bad = [p for p in problems if p not in PROBLEMS]
    if bad or not problems:
        ap.error("--problems: unknown %s (choose from %s)" % (", ".join(bad) or "(none)",
                                                              ", ".join(PROBLEMS)))
    t_start = time.monotonic()
    solo = []
    for i, p in enumerate(problems):
        res, _ = run_phase(args, [(i, p)], False, segment)
        solo += res
    print("solo done (%.0f s)" % (time.monotonic() - t_start), flush=True)
    phases = {}
    jobs = [(i, problems[i % len(problems)]) for i in range(args.workers)]
    for mode in args.modes.split(","):
        res, wall = run_phase(args, jobs, mode == "krex", segment)
        phases[mode] = (res, wall)
        print("%s done (%.0f s)" % (mode, wall), flush=True)
    remove_segment(segment)
    a = analyze(solo, phases)
    a["config"] = {k: v for k, v in vars(args).items() if k not in ("worker", "problem", "index")}
    a["raw"] = {"solo": solo, **{m: r for m, (r, _) in phases.items()}}
    a["total_s"] = time.monotonic() - t_start
    md = markdown(a, args)
    write_report(args.out, "kernelbench_style", a, md, a["total_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
