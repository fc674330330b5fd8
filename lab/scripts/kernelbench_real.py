#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The real KernelBench on one GPU: its own timing functions
(kernelbench.timing, ScalingIntelligence/KernelBench) timing level-1
problems, solo, N workers at once unprotected, N at once under krex
(`python -m krex.run`).

Each worker is a long-lived process that evaluates every chosen problem in
turn (starting at a different one), as an agent's evaluation worker would:
it loads the problem's source (Model, get_inputs, get_init_inputs), builds
the model and inputs on the GPU, runs a correctness-style check (the model
against itself on fresh inputs, as KernelBench's eval checks a candidate
against the reference before timing it), then times the model with
kernelbench.timing.get_timing_function(--method), `--reps` times. The worker
knows nothing of krex: the krex phases run it as `python -m krex.run
kernelbench_real.py --worker ...`, which joins krex before the worker's first
line and wraps KernelBench's timing functions, so each timing call runs in a
region. The workers of a phase start together, right after importing
PyTorch: their CUDA start-up, inputs and checks overlap the others' timing.

Phases: solo (one worker, alone), solo-again (the noise floor), then for
each N in --workers one phase per --modes entry (default unprotected-N,
krex-N; also lock-N, serial-N, held-N, churn-N and krex-N@KREX_VAR=value: see
parse_mode). Where a serial phase ran (or came with --solo-from), every
phase is also compared with its median of each problem, a reference over
N processes.

Each worker writes its timestamped steps (imports, CUDA context, each
problem loaded, checked and timed) to --out/worker-logs/PHASE-wNN.log, and
every finished phase's raw results go to kernelbench_real.partial.json at
once, so a run cut short says where its time went.

Reported (kernelbench_real.md and .json in --out): per problem and overall,
the inflation of every timing call's median over the solo median of the same
problem (median, p95, max); the throughput of each phase against one worker
alone; the region levels under krex, the regions reported "-shared(N
foreign)" and who the foreign processes were: a worker of the same phase
before its first line or after its last timing call (exiting), a worker
while it was running (which early join should make impossible), or a process
that is not one of this run's workers.

    python3 lab/scripts/kernelbench_real.py --kernelbench .deps/KernelBench --workers 8,16

KernelBench: a checkout (github.com/ScalingIntelligence/KernelBench). Where
it is installed with its dependencies, `import kernelbench.timing` uses it;
otherwise (an offline GPU machine) the worker imports the checkout's
src/kernelbench/timing.py itself without running the package's __init__
(which imports KernelBench's LLM-client dependencies); timing.py needs only
PyTorch and NumPy (and Triton for the do_bench methods). Needs krex
installed with the CUDA backend (`pip install ./python`), or on PYTHONPATH.
"""

import argparse
import faulthandler
import fcntl
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.abspath(__file__)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
from quantiles import quantile  # noqa: E402  (scripts/quantiles.py)
from report_files import write_report  # noqa: E402  (scripts/report_files.py)
sys.path.insert(0, os.path.join(REPO, "testkit"))
from krex_leftovers import remove_leftovers  # noqa: E402  (shared with tests/ and bench/)

# Level-1 problems, 0.1-5 ms on an H200 by their sizes, whose inputs and
# outputs stay under ~2 GB (16 workers at once must fit in the GPU's memory):
# cross-entropy, 3D tensor matmul, large-K matmul, MinGPT GELU, conv2d,
# square matmul, irregular matmul, diagonal matmul, transposed-A matmul,
# batched matmul, LayerNorm.
DEFAULT_PROBLEMS = "95,10,6,88,50,1,8,12,16,3,40"
METHODS = ("cuda_event", "do_bench", "do_bench_impl", "host_time")
# A region's steps besides the lock wait and the body (docs/REPORT.md), in ns.
STEP_FIELDS = ("gate_ns", "drain_ns", "freeze_ns", "quiet_ns", "quiet_wait_ns", "pin_ns",
               "exit_ns")


# ------------------------------------------------------------------ worker
def import_timing(kernelbench):
    """kernelbench.timing: the installed package if it imports, else the
    checkout's src/kernelbench/timing.py without the package's __init__."""
    src = os.path.join(kernelbench, "src")
    if os.path.isdir(src):
        sys.path.insert(0, src)
    try:
        import kernelbench.timing as kt  # noqa: PLC0415
        return kt, "package"
    except Exception as e:  # noqa: BLE001 - its __init__'s dependencies, whatever they raise
        why = "%s: %s" % (type(e).__name__, e)
        for name in [m for m in sys.modules if m == "kernelbench" or m.startswith("kernelbench.")]:
            del sys.modules[name]
    import types  # noqa: PLC0415
    pkg_dir = os.path.join(src, "kernelbench")
    if not os.path.isfile(os.path.join(pkg_dir, "timing.py")):
        raise SystemExit("no %s/timing.py: --kernelbench must be a KernelBench checkout" % pkg_dir)
    pkg = types.ModuleType("kernelbench")
    pkg.__path__ = [pkg_dir]
    pkg.__file__ = os.path.join(pkg_dir, "__init__.py")
    sys.modules["kernelbench"] = pkg
    import kernelbench.timing as kt  # noqa: PLC0415  (krex's import hook wraps it here)
    return kt, "source (package __init__ not run: %s)" % why


# --placements: placement p >= 1 of a call's inputs sits behind a spacer of
# p * PLACEMENT_STEP bytes (9 of the driver's 2 MiB pages, no power-of-two stride).
PLACEMENT_STEP = 18 << 20


def over_placements(timing_fn, k):
    """--placements K: a KernelBench timing function (fn(kernel_fn, args,
    num_warmup, num_trials, ...) -> one time per trial) whose calls split
    num_trials into K near-equal parts, one call of timing_fn each (its own
    warm-up, and under krex.run its own region): part 0 on args as given,
    part p on copies of args' tensors made after PyTorch's cache is emptied,
    behind a spacer of p * 18 MiB, so the copies and the call's own outputs
    and L2-flush buffer land elsewhere. Returns the parts' times, in order.
    (Run H measured this inside krex, one region per call, as
    krex.over_placements at 1495c76; lab/results/python.md.)"""
    import torch  # noqa: PLC0415

    def placed(kernel_fn, args, num_warmup=3, num_trials=10, **kw):
        parts = max(1, min(k, num_trials))
        times = []
        for p in range(parts):
            n = num_trials // parts + (1 if p < num_trials % parts else 0)
            spacer, xs = None, args
            if p:
                torch.cuda.empty_cache()
                spacer = torch.empty(p * PLACEMENT_STEP, dtype=torch.uint8, device=kw.get("device"))
                xs = [x.clone() if isinstance(x, torch.Tensor) else x for x in args]
            times += timing_fn(kernel_fn, xs, num_warmup=num_warmup, num_trials=n, **kw)
            del spacer, xs
        return times
    return placed


def problem_file(kernelbench, pid):
    d = os.path.join(kernelbench, "KernelBench", "level1")
    for f in sorted(os.listdir(d)):
        if f.split("_", 1)[0] == str(pid) and f.endswith(".py"):
            return os.path.join(d, f)
    raise SystemExit("level-1 problem %s not found in %s" % (pid, d))


def load_problem(kernelbench, pid):
    """A level-1 problem's file name and namespace (Model, get_inputs,
    get_init_inputs), loaded as kernelbench.eval.load_original_model_and_inputs does."""
    path = problem_file(kernelbench, pid)
    ctx = {}
    with open(path) as f:
        exec(compile(f.read(), path, "exec"), ctx)
    return os.path.basename(path), ctx


def on_device(xs, torch, dev):
    """A problem's inputs (or init inputs) with every tensor moved to `dev`."""
    return [x.to(dev) if isinstance(x, torch.Tensor) else x for x in xs]


def worker(args):
    t_started = time.monotonic()  # the worker's first line (under krex.run: joined already)
    print("started", json.dumps({"pid": os.getpid(), "t": t_started}), flush=True)
    logf = open(args.log, "a", buffering=1) if args.log else None  # noqa: SIM115
    # A stuck worker's stacks on SIGUSR1 (the driver sends it when a line is late).
    faulthandler.register(signal.SIGUSR1, file=logf or sys.stderr, all_threads=True)

    def log(what):
        """A timestamped step in --log: where a slow or stuck worker is."""
        if logf is not None:
            logf.write("%9.3f s  %s\n" % (time.monotonic() - t_started, what))
    import torch  # noqa: PLC0415
    kt, how = import_timing(args.kernelbench)
    krex = sys.modules.get("krex")  # present only under `python -m krex.run`
    fn = kt.get_timing_function(args.method)
    patched = hasattr(fn, "__krex_original__")
    log("imported torch and the timing module (%s), patched by krex: %s" % (how, patched))
    print("ready", flush=True)
    log("ready: waiting for go")
    if sys.stdin.readline().strip() != "go":
        return 1

    torch.cuda.set_device(0)
    dev = torch.device("cuda:0")
    t_cuda = time.monotonic()
    torch.zeros(1, device=dev)  # the CUDA context: from here the process holds one
    log("CUDA context")
    problems = args.problems.split(",")
    k = args.index % len(problems)
    problems = problems[k:] + problems[:k]
    out = {"pid": os.getpid(), "worker": args.index, "import": how, "patched": patched,
           "krex": krex is not None, "t_started": t_started, "t_cuda": t_cuda, "problems": {}}
    last = None
    lockf = open(args.lock, "a") if args.lock else None  # noqa: SIM115
    for pid in problems:
        t_loaded = time.monotonic()
        name, ctx = load_problem(args.kernelbench, pid)
        get_inputs = ctx["get_inputs"]
        log("problem %s: loaded %s" % (pid, name))
        rec = {"name": name, "calls": [], "t_loaded": t_loaded}
        with torch.no_grad():
            torch.manual_seed(42)
            model = ctx["Model"](*on_device(ctx["get_init_inputs"](), torch, dev)).to(dev)
            ok = True
            for trial in range(args.check_trials):  # KernelBench: fresh inputs per correctness trial
                torch.manual_seed(1000 + trial)
                xs = on_device(get_inputs(), torch, dev)
                a, b = model(*xs), model(*xs)
                ok = ok and bool(torch.allclose(a.float(), b.float(), atol=1e-2, rtol=1e-2))
                del xs, a, b
            rec["correct"] = ok
            log("problem %s: model built, %d check trial(s), correct: %s"
                % (pid, args.check_trials, ok))
            torch.manual_seed(42)
            inputs = on_device(get_inputs(), torch, dev)
            torch.cuda.synchronize()
            rec["t_ready"] = time.monotonic()  # loaded, built, checked, inputs on the device
            for _ in range(args.reps):
                t0 = time.monotonic()
                if lockf is not None:  # the lock mode: one timing call at a time, nothing else
                    fcntl.flock(lockf, fcntl.LOCK_EX)
                t_locked = time.monotonic()
                try:
                    timing = kt.get_timing_function(args.method)
                    if args.placements > 1:
                        timing = over_placements(timing, args.placements)
                    times = timing(
                        model, inputs, num_warmup=args.warmup, num_trials=args.trials,
                        discard_first=1, verbose=False, device=dev)
                finally:
                    if lockf is not None:
                        fcntl.flock(lockf, fcntl.LOCK_UN)
                t1 = time.monotonic()
                call = {"t0": t0, "t1": t1, "median_ms": statistics.median(times),
                        "mean_ms": statistics.fmean(times), "n": len(times),
                        "times_ms": [round(x, 5) for x in times]}  # each trial, in order
                if lockf is not None:
                    call["flock_ms"] = (t_locked - t0) * 1e3
                if krex is not None:
                    rep = krex.last_report()
                    if rep is None or rep is last:  # this call made no region of its own
                        call["level"] = "not in a region"
                    else:
                        call.update(level=rep["level"], foreign_pids=rep["foreign_pids"],
                                    lock_ms=rep["lock_ns"] / 1e6, body_ms=rep["body_ns"] / 1e6)
                        # The region's other steps, for the timeline (analyze: timeline()).
                        call.update({k[:-3] + "_ms": rep[k] / 1e6 for k in STEP_FIELDS
                                     if isinstance(rep.get(k), (int, float)) and rep[k] >= 0})
                        # The whole report (docs/REPORT.md): the card's clocks, power and
                        # throttle reasons at entry and exit (clock_stats), and what the
                        # tables do not show yet (the pinned CPUs, the quiet probes, notes).
                        call["report"] = dict(rep)
                    last = rep
                rec["calls"].append(call)
                log("problem %s: timing call in %.2f s, median %.3f ms%s"
                    % (pid, t1 - t0, call["median_ms"],
                       ", " + call["level"] if "level" in call else ""))
        del model, inputs
        torch.cuda.empty_cache()
        out["problems"][pid] = rec
    out["t_done"] = time.monotonic()
    log("done")
    print("result " + json.dumps(out), flush=True)
    if args.linger:
        sys.stdin.readline()  # until the driver says every worker is done
    return 0


def ballast(args):
    """The held mode's memory holder: allocates device memory in chunks of
    mixed sizes up to twice --ballast-gb, frees every other chunk back to
    the driver (PyTorch's empty_cache), so that what it keeps has holes
    between its pieces, as a worker's memory has after its problems came
    and went; then holds it, with no GPU work, until killed or told."""
    import random  # noqa: PLC0415
    import torch  # noqa: PLC0415
    torch.cuda.set_device(0)
    rng = random.Random(args.index)
    if args.churn:
        return churn(args, torch, rng)
    chunks, total = [], 0
    while total < 2 * args.ballast_gb * 2**30:
        mb = rng.choice((2, 8, 32, 96, 256, 512))
        chunks.append(torch.empty(mb << 20, dtype=torch.uint8, device="cuda"))
        chunks[-1].fill_(1)
        total += mb << 20
    keep = chunks[::2]
    del chunks
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    say_holding(keep)
    sys.stdin.readline()
    return 0


def say_holding(keep, **extra):
    """A memory holder's "holding" line: its pid, chunks and bytes kept."""
    print("holding " + json.dumps(dict({"pid": os.getpid(), "chunks": len(keep),
                                        "bytes": sum(t.numel() for t in keep)}, **extra)),
          flush=True)


def churn(args, torch, rng):
    """The churn mode's sibling (a krex tenant, under krex.run): allocates
    and frees device memory in rounds, never a kernel: chunks of 2-64 MB up
    to --ballast-gb, then a random half freed back to the driver
    (empty_cache), and again, 20 ms apart, until killed. Its allocations and
    frees are gated calls: they run between the worker's regions only."""
    import select  # noqa: PLC0415
    keep, said = [], False
    while True:
        total = sum(t.numel() for t in keep)
        while total < args.ballast_gb * 2**30:
            mb = rng.choice((2, 4, 8, 20, 32, 64))
            keep.append(torch.empty(mb << 20, dtype=torch.uint8, device="cuda"))
            total += mb << 20
        rng.shuffle(keep)
        del keep[len(keep) // 2:]
        torch.cuda.empty_cache()
        if not said:
            say_holding(keep, churn=True)
            said = True
        if select.select([sys.stdin], [], [], 0.02)[0] and not sys.stdin.readline():
            return 0


# The card's clocks, power, temperatures and throttle reasons, sampled by
# nvidia-smi through each phase (--smi-ms), and what each call's body saw.
SMI_FIELDS = ("timestamp", "clocks.sm", "clocks.mem", "power.draw", "temperature.gpu",
              "temperature.memory", "clocks_throttle_reasons.active")


class Smi:
    """nvidia-smi --query-gpu=SMI_FIELDS -lms MS into PATH for one phase;
    `anchor` maps its wall-clock timestamps to time.monotonic(), the
    workers' clock. No nvidia-smi: `self.p` is None and nothing is written."""

    def __init__(self, path, ms):
        self.path, self.p = path, None
        self.anchor = (time.time(), time.monotonic())
        self.f = open(path, "w")  # noqa: SIM115
        try:
            self.p = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=" + ",".join(SMI_FIELDS),
                 "--format=csv,noheader,nounits", "-lms", str(ms)],
                stdout=self.f, stderr=subprocess.DEVNULL)
        except OSError:  # no nvidia-smi
            self.f.close()
            os.unlink(path)

    def stop(self):
        if self.p is not None:
            self.p.terminate()
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
            self.f.close()


def parse_smi(text, anchor):
    """nvidia-smi's CSV lines -> samples {t (monotonic), sm, mem, power, temp,
    mem_temp, reasons}; a field it cannot read ("[N/A]", "N/A") is None; a
    line that is not a sample is skipped."""
    import datetime  # noqa: PLC0415
    wall0, mono0 = anchor
    out = []
    for line in text.splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) != len(SMI_FIELDS):
            continue
        try:
            wall = datetime.datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        except ValueError:
            continue

        def num(x, conv=float):
            try:
                return conv(x)
            except ValueError:
                return None
        out.append({"t": mono0 + (wall - wall0), "sm": num(f[1]), "mem": num(f[2]),
                    "power": num(f[3]), "temp": num(f[4]), "mem_temp": num(f[5]),
                    "reasons": num(f[6], lambda x: int(x, 16))})
    return out


def body_clocks(samples, t0, t1):
    """What the samples between t0 and t1 (a call) read: their count, the
    lowest SM clock, the mean power, the highest temperatures and the
    throttle reasons seen (OR of the bitmasks, the idle bit 0x1 left out)."""
    s = [x for x in samples if t0 <= x["t"] <= t1]
    if not s:
        return None

    v = {k: [x[k] for x in s if x[k] is not None]
         for k in ("sm", "power", "temp", "mem_temp", "reasons")}
    reasons = 0
    for r in v["reasons"]:
        reasons |= r & ~0x1
    return {"samples": len(s), "sm_min": min(v["sm"], default=None),
            "power_mean": statistics.fmean(v["power"]) if v["power"] else None,
            "temp_max": max(v["temp"], default=None),
            "mem_temp_max": max(v["mem_temp"], default=None), "reasons": reasons}


# -------------------------------------------------------------- the driver
class Proc:
    """A worker process and its output: stdout's lines are read by a thread
    into a queue, stderr's last 40 lines are kept for errors. (Waiting on the
    pipe with select() beside a buffered reader missed a line the reader had
    already taken in: on the H200, KernelBench's get_timing_function prints
    "[Profiling] Using timing method" unflushed, the worker's flushed "ready"
    went out in the same write, and the driver waited out the whole phase.)"""

    def __init__(self, cmd, env, log=None):
        self.log = log
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, bufsize=1, env=env)
        self.err = []
        self.out = queue.Queue()
        self.t_exit = None
        threading.Thread(target=self._drain_out, daemon=True).start()
        threading.Thread(target=self._drain_err, daemon=True).start()
        threading.Thread(target=self._reap, daemon=True).start()

    def _drain_out(self):
        for line in self.p.stdout:
            if not line.startswith("result "):  # the driver's timeline of each worker
                print("  %7.2f s  worker %d: %s" % (time.monotonic() - self.t0, self.p.pid,
                                                     line.strip()[:80]), flush=True)
            self.out.put(line)
        self.out.put("")  # end of output

    def _drain_err(self):
        for line in self.p.stderr:
            self.err.append(line)
            del self.err[:-40]

    def _reap(self):
        self.p.wait()
        self.t_exit = time.monotonic()

    def line(self, prefix, deadline):
        """The rest of the worker's next stdout line that starts with
        `prefix` (other lines are skipped), by `deadline` (monotonic)."""
        while True:
            try:
                s = self.out.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise RuntimeError("worker %d: no '%s' line in time; stderr:\n%s%s"
                                   % (self.p.pid, prefix, "".join(self.err),
                                      self.stacks())) from None
            if s == "":
                self.out.put("")  # stays at the end for a later call
                self.p.wait()
                raise RuntimeError("worker %d exited (status %s) before '%s'; stderr:\n%s"
                                   % (self.p.pid, self.p.returncode, prefix, "".join(self.err)))
            if s.startswith(prefix):
                return s[len(prefix):].strip()

    def stacks(self):
        """A late worker's stacks (SIGUSR1: faulthandler, into its log) and
        its log's tail, for the error."""
        if self.p.poll() is not None or not self.log:
            return ""
        try:
            os.kill(self.p.pid, signal.SIGUSR1)
            time.sleep(1.0)
            with open(self.log, encoding="utf-8", errors="replace") as f:
                return "\nits log (stacks at the end):\n" + "".join(f.readlines()[-60:])
        except OSError as e:
            return "\n(no stacks: %s)" % e

    def send(self, s):
        self.p.stdin.write(s + "\n")
        self.p.stdin.flush()

    def exited(self, result):
        """`result` (its parsed result line) with when it exited and its status."""
        result["t_exit"] = self.t_exit if self.t_exit is not None else time.monotonic()
        result["status"] = self.p.returncode
        return result

    def stop(self):
        """Kills it if it still runs, and reaps it."""
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()


def parse_mode(mode):
    """A phase's mode: "unprotected", "lock" (an flock around each timing call,
    no krex: what any one-at-a-time scheme costs), "serial" (the same N workers,
    same problem orders, each run alone one after another: solo in the shape
    of the N-worker phases, N processes' placements), "held" (serial, each
    worker beside N-1 processes that only hold device memory, --ballast-gb
    each, with holes: the memory a sibling keeps, without its work),
    "churn" (serial under krex, each worker beside N-1 krex tenants that only
    allocate and free device memory, --ballast-gb each, between its regions:
    the others' allocations without their kernels) or "krex", the last with
    optional KREX_* settings for its workers ("krex@KREX_HANDOFF_GRACE_MS=20",
    several joined by "@"). Returns (kind, {variable: value})."""
    kind, *sets = mode.split("@")
    if kind not in ("unprotected", "lock", "serial", "held", "churn", "krex"):
        raise ValueError("mode %r: unprotected, lock, serial, held, churn or "
                         "krex[@KREX_VAR=value...]" % mode)
    env = {}
    for kv in sets:
        k, eq, v = kv.partition("=")
        if kind != "krex" or not eq or not k.startswith("KREX_"):
            raise ValueError("mode %r: settings are krex@KREX_VAR=value" % mode)
        env[k] = v
    return kind, env


def run_phase(args, name, n, mode, segment):
    """One phase (run_workers), with nvidia-smi sampling the card through it
    when --smi-ms is set: its CSV in --out/smi-NAME.csv, and each call gets
    what was sampled during it (body_clocks)."""
    if not args.smi_ms:
        return run_workers(args, name, n, mode, segment)
    smi = Smi(os.path.join(args.out, "smi-%s.csv" % name), args.smi_ms)
    try:
        res, wall = run_workers(args, name, n, mode, segment)
    finally:
        smi.stop()
    if smi.p is None:
        print("%s: no nvidia-smi, no clock samples" % name, flush=True)
        return res, wall
    with open(smi.path) as f:
        samples = parse_smi(f.read(), smi.anchor)
    for r in res:
        for rec in r["problems"].values():
            for c in rec["calls"]:
                c["body_clocks"] = body_clocks(samples, c["t0"], c["t1"])
    return res, wall


def run_workers(args, name, n, mode, segment):
    kind, settings = parse_mode(mode)
    krex_on = kind in ("krex", "churn")
    cmd = [sys.executable] + (["-m", "krex.run"] if krex_on else []) + [
        HERE, "--worker", "--kernelbench", args.kernelbench, "--problems", args.problems,
        "--method", args.method, "--reps", str(args.reps), "--trials", str(args.trials),
        "--warmup", str(args.warmup), "--check-trials", str(args.check_trials)]
    if args.linger:
        cmd.append("--linger")
    if args.placements > 1:
        cmd += ["--placements", str(args.placements)]
    env = dict(os.environ, KREX_SEGMENT=segment)
    if not krex_on:
        env["KREX_PATCH"] = "0"
    elif args.release_on_leave:
        env["KREX_RELEASE_ON_LEAVE"] = "1"
    env.update(settings)
    if kind == "lock":
        cmd += ["--lock", os.path.join(args.out, "timing-%s.lock" % segment)]
    logs = os.path.join(args.out, "worker-logs")
    os.makedirs(logs, exist_ok=True)
    def start(i):
        log = os.path.join(logs, "%s-w%02d.log" % (name, i))
        return Proc(cmd + ["--index", str(i), "--log", log], env, log)
    deadline = time.monotonic() + args.timeout
    if kind == "serial":
        return run_serial(args, start, n, deadline)
    if kind in ("held", "churn"):
        holder = [sys.executable, HERE, "--ballast", "--ballast-gb", str(args.ballast_gb)]
        if kind == "churn":  # krex tenants whose allocations and frees are gated
            holder[1:1] = ["-m", "krex.run"]
            holder.append("--churn")
        ballast = [Proc(holder + ["--index", str(i)], env) for i in range(n - 1)]
        try:
            held = [json.loads(b.line("holding ", deadline)) for b in ballast]
            print("%s: %d processes hold %.1f GB of device memory" % (
                name, len(held), sum(h["bytes"] for h in held) / 2**30), flush=True)
            res, wall = run_serial(args, start, n, deadline)
            for r in res:
                r["ballast"] = held
            return res, wall
        finally:
            for b in ballast:  # end of input: they leave krex (churn) and exit
                b.p.stdin.close()
            for b in ballast:
                try:
                    b.p.wait(10)
                except subprocess.TimeoutExpired:
                    pass
                b.stop()
    procs = [start(i) for i in range(n)]
    try:
        for p in procs:
            p.line("ready", deadline)
        t0 = time.monotonic()
        for p in procs:
            p.send("go")
        results = [json.loads(p.line("result ", deadline)) for p in procs]
        wall = time.monotonic() - t0
        for p in procs:
            if args.linger:
                p.send("exit")
        for p in procs:
            p.p.wait(max(1.0, deadline - time.monotonic()))
        return [p.exited(r) for r, p in zip(results, procs)], wall
    finally:
        for p in procs:
            p.stop()


def run_serial(args, start, n, deadline):
    """The serial mode: worker 0 alone from start to exit, then worker 1, ...
    The wall is the sum of their times from "go" to the result."""
    results, wall = [], 0.0
    for i in range(n):
        p = start(i)
        try:
            p.line("ready", deadline)
            t0 = time.monotonic()
            p.send("go")
            r = json.loads(p.line("result ", deadline))
            wall += time.monotonic() - t0
            if args.linger:
                p.send("exit")
            p.p.wait(max(1.0, deadline - time.monotonic()))
            results.append(p.exited(r))
        finally:
            p.stop()
    return results, wall


def phase_name(mode, n):
    """krex-8, unprotected-16, krex-8@KREX_HANDOFF_GRACE_MS=20."""
    kind, _, sets = mode.partition("@")
    return "%s-%d%s" % (kind, n, "@" + sets if sets else "")


def remove_segment(name):
    """After every worker exited: the segment, its cgroup root and leaves
    (testkit/krex_leftovers.py)."""
    remove_leftovers(name)


# ------------------------------------------------------------ the analysis
# A call "+2% or more" over its reference: the slow calls of the tables.
SLOW_PCT = 2.0


def inflation(call, ref_ms):
    """A timing call's median over a reference median, in percent."""
    return (call["median_ms"] / ref_ms - 1) * 100


def stats(v):
    return {"n": len(v), "median": quantile(v, 0.5), "p95": quantile(v, 0.95),
            "max": max(v) if v else float("nan")}


def clock_stats(clocks):
    """The SM clock (MHz) and power (W) at the regions' exits, and how many
    exits reported a throttle reason (NVML's clocks_event_reasons, not 0)."""
    if not clocks:
        return None
    sm = [float(c["sm_mhz"]) for c in clocks if "sm_mhz" in c]
    w = [c["power_mw"] / 1e3 for c in clocks if "power_mw" in c]
    return {"n": len(clocks), "sm_mhz": stats(sm) if sm else None,
            "sm_mhz_min": min(sm) if sm else None, "power_w": stats(w) if w else None,
            "throttled": sum(1 for c in clocks if c.get("reasons", 0) not in (0, None))}


def classify_foreign(pid, t, workers):
    """Who a foreign pid of a region entered at time t was, among this phase's workers."""
    w = workers.get(pid)
    if w is None:
        return "not a worker of this run"
    if t < w["t_started"]:
        return "a worker before its first line"
    if t > w["t_done"]:
        return "a worker after its last timing call (exiting)"
    return "a worker while running"


def analyze(phases, solo_name="solo", per_call=None):
    """phases: {name: {"results": [worker results], "wall": s, "workers": n}}.
    Inflation of every timing call over the solo median of its problem.
    per_call: calls of kernel_fn in one timing call (warm-up + discarded +
    trials), for host_time_stats; None leaves that table out."""
    solo = phases[solo_name]["results"]
    ref = problem_medians(solo)
    names = {pid: rec["name"] for r in solo for pid, rec in r["problems"].items()}
    calls_solo = sum(len(rec["calls"]) for r in solo for rec in r["problems"].values())
    solo_rate = calls_solo / phases[solo_name]["wall"]
    out = {"solo_ms": ref, "names": names, "phases": {}}
    for name, ph in phases.items():
        if name == solo_name:
            continue
        workers = {r["pid"]: r for r in ph["results"]}
        per, every, levels, shared, who = {}, [], {}, 0, {}
        incorrect = 0
        calls = 0
        for r in ph["results"]:
            for pid, rec in r["problems"].items():
                incorrect += 0 if rec.get("correct", True) else 1
                for c in rec["calls"]:
                    calls += 1
                    x = inflation(c, ref[pid])
                    per.setdefault(pid, []).append(x)
                    every.append(x)
                    if "level" in c:
                        levels[c["level"]] = levels.get(c["level"], 0) + 1
                        if "-shared" in c["level"]:
                            shared += 1
                        t_entry = c["t0"] + c.get("lock_ms", 0) / 1e3  # after the lock wait
                        for fp in c.get("foreign_pids", []):
                            k = classify_foreign(fp, t_entry, workers)
                            who[k] = who.get(k, 0) + 1
        rate = calls / ph["wall"]
        # Each problem's preparation in each worker: loaded, built, checked, inputs on the device.
        preps = [rec["t_ready"] - rec["t_loaded"] for r in ph["results"]
                 for rec in r["problems"].values() if "t_ready" in rec and "t_loaded" in rec]
        flocks = [c["flock_ms"] for r in ph["results"] for rec in r["problems"].values()
                  for c in rec["calls"] if "flock_ms" in c]
        # The card at each region's exit (NVML; absent where krex cannot read it).
        clocks = [c["report"]["clocks_exit"] for r in ph["results"]
                  for rec in r["problems"].values() for c in rec["calls"]
                  if isinstance(c.get("report", {}).get("clocks_exit"), dict)]
        out["phases"][name] = {
            "workers": ph["workers"], "wall_s": ph["wall"], "calls": calls,
            "throughput_x_solo": rate / solo_rate,
            "inflation_pct": stats(every),
            "per_problem_pct": {pid: stats(v) for pid, v in per.items()},
            "levels": levels, "shared_regions": shared, "foreign_seen": who,
            "incorrect_checks": incorrect,
            "patched": sorted({bool(r.get("patched")) for r in ph["results"]}),
            "import": sorted({r.get("import", "?").split(" (")[0] for r in ph["results"]}),
            "nonzero_exit": [r["pid"] for r in ph["results"] if r.get("status") not in (0, None)],
            "timeline": timeline(ph["results"]),
            "prep_s": dict(stats(preps), sum=sum(preps)) if preps else None,
            "flock_wait_s": sum(flocks) / 1e3 if flocks else None,
            "clocks_exit": clock_stats(clocks),
        }
    out["against_serial"] = against_serial(phases)
    out["body_clocks"] = body_clock_stats(phases, ref)
    if per_call:
        out["host_time"] = host_time_stats(phases, ref, per_call)
    return out


def host_time_stats(phases, ref, per_call):
    """Each call's host time per timed call of kernel_fn outside
    KernelBench's timed window: the call's wall (the region's body under
    krex, else its whole time less any flock wait) over `per_call` calls of
    kernel_fn (warm-up, discarded and timed trials), less its mean trial
    time, in us. Per phase, the calls that read +2% or more over the solo
    median (slow) against the others: the median over problems of each
    group's median, over the problems that have both, with the calls
    counted; and every call's median. A GPU slower by x% lengthens the
    timed trials, not this; a slower host lengthens both."""
    out = {}
    for name, ph in phases.items():
        per, every = {}, []
        for r in ph["results"]:
            for pid, rec in r["problems"].items():
                for c in rec["calls"]:
                    if pid not in ref or "mean_ms" not in c:
                        continue
                    wall = c.get("body_ms")
                    if wall is None:
                        wall = (c["t1"] - c["t0"]) * 1e3 - c.get("flock_ms", 0.0)
                    us = (wall / per_call - c["mean_ms"]) * 1e3
                    every.append(us)
                    slow = inflation(c, ref[pid]) >= SLOW_PCT
                    per.setdefault(pid, ([], []))[0 if slow else 1].append(us)
        both = {pid: g for pid, g in per.items() if g[0] and g[1]}
        out[name] = {
            "median_us": statistics.median(every) if every else None,
            "problems_with_slow": len(both),
            "slow_calls": sum(len(g[0]) for g in both.values()),
            "other_calls": sum(len(g[1]) for g in both.values()),
            "slow_us": statistics.median(statistics.median(g[0]) for g in both.values())
            if both else None,
            "other_us": statistics.median(statistics.median(g[1]) for g in both.values())
            if both else None}
    return out


def body_clock_stats(phases, ref):
    """--smi-ms: per phase, the calls that read +2% or more over the solo
    median ("slow") against the others, by what nvidia-smi sampled during
    them (body_clocks): calls with samples, median and lowest SM clock
    minimum, calls with a throttle reason, mean power, highest GPU and
    memory temperature. Phases without samples are left out."""
    out = {}
    for name, ph in phases.items():
        groups = {"slow": [], "other": []}
        for r in ph["results"]:
            for pid, rec in r["problems"].items():
                for c in rec["calls"]:
                    b = c.get("body_clocks")
                    if b is None or pid not in ref:
                        continue
                    slow = inflation(c, ref[pid]) >= SLOW_PCT
                    groups["slow" if slow else "other"].append(b)
        if not groups["slow"] and not groups["other"]:
            continue
        out[name] = {}
        for g, bs in groups.items():
            sm = [b["sm_min"] for b in bs if b["sm_min"] is not None]
            pw = [b["power_mean"] for b in bs if b["power_mean"] is not None]
            tp = [b["temp_max"] for b in bs if b["temp_max"] is not None]
            mt = [b["mem_temp_max"] for b in bs if b["mem_temp_max"] is not None]
            out[name][g] = {"calls": len(bs),
                            "sm_min_median": statistics.median(sm) if sm else None,
                            "sm_min_min": min(sm) if sm else None,
                            "throttled": sum(1 for b in bs if b["reasons"]),
                            "reasons": sorted({"0x%x" % b["reasons"] for b in bs if b["reasons"]}),
                            "power_mean": statistics.fmean(pw) if pw else None,
                            "temp_max": max(tp) if tp else None,
                            "mem_temp_max": max(mt) if mt else None}
    return out


def problem_medians(results):
    """Each problem's median over every timing call of a phase's workers."""
    calls = {}
    for r in results:
        for pid, rec in r["problems"].items():
            calls.setdefault(pid, []).extend(c["median_ms"] for c in rec["calls"])
    return {pid: statistics.median(v) for pid, v in calls.items()}


def against_serial(phases):
    """Where a serial phase ran (the N workers one after another, each
    alone): every phase's calls against the serial phase's median of each
    problem, a reference taken over N processes (the solo median is one
    process's, and where that process's buffers landed moves some problems
    by several percent). Returns {"reference": phase, "phases": {name:
    {"median", "p95", "max", "n", "over_2pct"}}}, or None without a serial phase."""
    serial = [n for n in phases if n.startswith("serial-")]
    if not serial:
        return None
    ref_name = serial[0]
    ref = problem_medians(phases[ref_name]["results"])
    out = {}
    for name, ph in phases.items():
        v = [inflation(c, ref[pid]) for r in ph["results"]
             for pid, rec in r["problems"].items() if pid in ref for c in rec["calls"]]
        if v:
            out[name] = dict(stats(v), over_2pct=sum(1 for x in v if x >= SLOW_PCT))
    return {"reference": ref_name, "phases": out}


def timeline(results):
    """Where a krex phase's time went: its span (first worker start to last
    done); the time some region held the device (the union of each call's
    [t0 + lock wait, t1]) and of that the bodies; the time no region held it
    (before the first region, between regions, after the last); and per call
    the region's steps and the rest of the call (the wrapper, Python). The
    steps are there only where the worker recorded them (a run before they
    were recorded has lock and body alone: the steps and the rest are then
    one "entry, exit and wrapper" figure)."""
    calls = [c for r in results for rec in r["problems"].values() for c in rec["calls"]
             if "body_ms" in c]
    if not calls:
        return None
    start = min(r["t_started"] for r in results)
    end = max(r.get("t_done", r["t_started"]) for r in results)
    held = sorted((c["t0"] + c.get("lock_ms", 0) / 1e3, c["t1"]) for c in calls)
    union, gaps, cs, ce = 0.0, [], held[0][0], held[0][1]
    for a, b in held[1:]:
        if a > ce:
            union += ce - cs
            gaps.append(a - ce)
            cs, ce = a, b
        else:
            ce = max(ce, b)
    union += ce - cs
    steps = [k[:-3] + "_ms" for k in STEP_FIELDS]
    recorded = all("gate_ms" in c for c in calls)
    per = {"lock_ms": [c.get("lock_ms", 0.0) for c in calls],
           "body_ms": [c["body_ms"] for c in calls]}
    if recorded:
        for k in steps:
            per[k] = [c.get(k, 0.0) for c in calls]
    in_steps = [sum(c.get(k, 0.0) for k in steps if k != "quiet_wait_ms") if recorded else 0.0
                for c in calls]
    per["rest_ms"] = [(c["t1"] - c["t0"]) * 1e3 - c.get("lock_ms", 0.0) - c["body_ms"] - st
                      for c, st in zip(calls, in_steps)]
    return {
        "span_s": end - start, "held_s": union, "bodies_s": sum(per["body_ms"]) / 1e3,
        "before_first_s": held[0][0] - start, "between_s": sum(gaps), "handoffs": len(gaps),
        "gap_median_ms": statistics.median(gaps) * 1e3 if gaps else 0.0,
        "gap_max_ms": max(gaps) * 1e3 if gaps else 0.0,
        "after_last_s": max(0.0, end - ce), "steps_recorded": recorded, "calls": len(calls),
        "per_call": {k: {"sum_s": sum(v) / 1e3, "median_ms": statistics.median(v),
                         "p95_ms": quantile(sorted(v), 0.95)} for k, v in per.items()},
    }


def markdown(a, cfg):
    f = "%+.2f%%"
    lines = ["# The real KernelBench: %s, %d trials per call%s, %d calls per problem and worker"
             % (cfg["method"], cfg["trials"],
                " over %d placements" % cfg["placements"] if cfg.get("placements", 1) > 1 else "",
                cfg["reps"]), "",
             "| phase | workers | wall | throughput (x one worker) | inflation median | p95 | max "
             "| regions | -shared | foreign processes seen |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, p in a["phases"].items():
        s = p["inflation_pct"]
        regions = sum(p["levels"].values())
        who = ", ".join("%s: %d" % kv for kv in sorted(p["foreign_seen"].items())) or "-"
        lines.append("| %s | %d | %.1f s | %.2fx | %s | %s | %s | %s | %s | %s |" % (
            name, p["workers"], p["wall_s"], p["throughput_x_solo"], f % s["median"],
            f % s["p95"], f % s["max"], regions if regions else "-",
            p["shared_regions"] if regions else "-", who))
    ag = a.get("against_serial")
    if ag:
        lines += ["", "Against %s's median of each problem (a reference over its %d processes, "
                  "each alone), every phase's calls:" % (ag["reference"], a["phases"][
                      ag["reference"]]["workers"]), "",
                  "| phase | calls | median | p95 | max | calls +2% or more |", "|---|---|---|---|---|---|"]
        for name, s in ag["phases"].items():
            lines.append("| %s | %d | %s | %s | %s | %d (%.0f%%) |" % (
                name, s["n"], f % s["median"], f % s["p95"], f % s["max"], s["over_2pct"],
                100.0 * s["over_2pct"] / s["n"]))
    lines += ["", "Per problem (inflation over the solo median: median / p95 / max):", ""]
    phases = list(a["phases"])
    lines.append("| problem | solo ms | " + " | ".join(phases) + " |")
    lines.append("|---|---|" + "---|" * len(phases))
    for pid in sorted(a["solo_ms"], key=lambda p: a["solo_ms"][p]):
        cells = []
        for name in phases:
            s = a["phases"][name]["per_problem_pct"].get(pid)
            cells.append("%s / %s / %s" % (f % s["median"], f % s["p95"], f % s["max"])
                         if s else "-")
        lines.append("| %s | %.3f | %s |" % (a["names"][pid], a["solo_ms"][pid], " | ".join(cells)))
    lines.append("")
    for name, p in a["phases"].items():
        if p["levels"]:
            lines.append("%s levels: %s" % (name, ", ".join(
                "%s x%d" % kv for kv in sorted(p["levels"].items(), key=lambda kv: -kv[1]))))
        notes = []
        if p["incorrect_checks"]:
            notes.append("%d failed checks" % p["incorrect_checks"])
        if p["nonzero_exit"]:
            notes.append("workers exited non-zero: %s" % p["nonzero_exit"])
        if notes:
            lines.append("%s: %s" % (name, "; ".join(notes)))
    prep = {n: p for n, p in a["phases"].items() if p.get("prep_s")}
    if prep:
        lines += ["", "Each problem's preparation in each worker (loaded, model built, checked, "
                  "inputs on the device; seconds), and the lock mode's wait for its flock:", "",
                  "| phase | preparations | median | p95 | max | sum | flock wait sum |",
                  "|---|---|---|---|---|---|---|"]
        for n, p in prep.items():
            s = p["prep_s"]
            lines.append("| %s | %d | %.2f | %.2f | %.2f | %.1f | %s |" % (
                n, s["n"], s["median"], s["p95"], s["max"], s["sum"],
                "%.1f" % p["flock_wait_s"] if p.get("flock_wait_s") is not None else "-"))
    ht = a.get("host_time") or {}
    if ht:
        lines += ["", "Host time per call of the timed function outside KernelBench's timed "
                  "window (us: the call's wall, the region's body under krex, over its warm-up, "
                  "discarded and timed calls, less the mean trial); calls +2% or more over the "
                  "solo median (slow) against the others, each the median over the problems "
                  "that have both:", "",
                  "| phase | every call | problems | slow calls | others | slow | others |",
                  "|---|---|---|---|---|---|---|"]
        for n, v in ht.items():
            lines.append("| %s | %s | %d | %d | %d | %s | %s |" % (
                n, "-" if v["median_us"] is None else "%.0f" % v["median_us"],
                v["problems_with_slow"], v["slow_calls"], v["other_calls"],
                "-" if v["slow_us"] is None else "%.0f" % v["slow_us"],
                "-" if v["other_us"] is None else "%.0f" % v["other_us"]))
    bc = a.get("body_clocks") or {}
    if bc:
        lines += ["", "What nvidia-smi sampled during the calls (--smi-ms), calls +2% or more "
                  "over the solo median (slow) against the others: SM clock minimum in a call "
                  "(median / lowest, MHz), calls with a throttle reason (the reasons, idle "
                  "left out), mean power (W), highest GPU / memory temperature (C):", "",
                  "| phase | calls | SM clock min | throttled | power | temperature |",
                  "|---|---|---|---|---|---|"]

        def fmt(x, f="%.0f"):
            return "-" if x is None else f % x
        for n, g in bc.items():
            for k in ("slow", "other"):
                v = g[k]
                if not v["calls"]:
                    continue
                lines.append("| %s, %s | %d | %s / %s | %d%s | %s | %s / %s |" % (
                    n, k, v["calls"], fmt(v["sm_min_median"]), fmt(v["sm_min_min"]),
                    v["throttled"], " (%s)" % ", ".join(v["reasons"]) if v["reasons"] else "",
                    fmt(v["power_mean"]), fmt(v["temp_max"]), fmt(v["mem_temp_max"])))
    clk = {n: p["clocks_exit"] for n, p in a["phases"].items() if p.get("clocks_exit")}
    if clk:
        lines += ["", "The card at the regions' exits (NVML): SM clock median / min (MHz), "
                  "power median / max (W), exits with a throttle reason:", "",
                  "| phase | regions | SM clock | power | throttled |", "|---|---|---|---|---|"]
        for n, c in clk.items():
            sm = ("%.0f / %.0f" % (c["sm_mhz"]["median"], c["sm_mhz_min"])) if c["sm_mhz"] else "-"
            pw = ("%.0f / %.0f" % (c["power_w"]["median"], c["power_w"]["max"])) if c["power_w"] else "-"
            lines.append("| %s | %d | %s | %s | %d |" % (n, c["n"], sm, pw, c["throttled"]))
    tl = {n: p["timeline"] for n, p in a["phases"].items() if p.get("timeline")}
    if tl:
        lines += ["", "Where the krex phases' time went (seconds; a region holds the device "
                  "from the end of its lock wait to the end of its call):", "",
                  "| phase | span | regions held | of it bodies | before the first region "
                  "| between regions (gaps, median / max gap ms) | after the last |",
                  "|---|---|---|---|---|---|---|"]
        for n, t in tl.items():
            lines.append("| %s | %.1f | %.1f | %.1f | %.1f | %.1f (%d, %.1f / %.0f) | %.1f |" % (
                n, t["span_s"], t["held_s"], t["bodies_s"], t["before_first_s"], t["between_s"],
                t["handoffs"], t["gap_median_ms"], t["gap_max_ms"], t["after_last_s"]))
        lines += ["", "Per call (ms, median / p95, and the phase's sum in s); \"rest\": the "
                  "call less its lock wait, steps and body (the wrapper, Python; with no steps "
                  "recorded, the steps too):", ""]
        keys = sorted({k for t in tl.values() for k in t["per_call"]},
                      key=lambda k: (k != "lock_ms", k == "rest_ms", k))
        lines.append("| phase | " + " | ".join(k[:-3] for k in keys) + " |")
        lines.append("|---|" + "---|" * len(keys))
        for n, t in tl.items():
            cells = []
            for k in keys:
                v = t["per_call"].get(k)
                cells.append("%.1f / %.1f (%.1f)" % (v["median_ms"], v["p95_ms"], v["sum_s"])
                             if v else "-")
            lines.append("| %s | %s |" % (n, " | ".join(cells)))
    lines.append("")
    lines.append("KernelBench imported as: %s; timing function wrapped by krex in the krex "
                 "phases: %s" % (", ".join(sorted({i for p in a["phases"].values()
                                                   for i in p["import"]})),
                                 ", ".join("%s=%s" % (n, p["patched"])
                                           for n, p in a["phases"].items()
                                           if n.startswith(("krex", "churn")))))
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernelbench", default=os.environ.get("KERNELBENCH_DIR",
                                                            os.path.join(REPO, ".deps", "KernelBench")),
                    help="a KernelBench checkout (default $KERNELBENCH_DIR or .deps/KernelBench)")
    ap.add_argument("--workers", default="8,16", help="comma-separated N of the concurrent phases")
    ap.add_argument("--problems", default=DEFAULT_PROBLEMS, help="level-1 problem ids")
    ap.add_argument("--method", default="cuda_event", choices=METHODS,
                    help="kernelbench.timing.get_timing_function's method")
    ap.add_argument("--reps", type=int, default=2, help="timing calls per problem and worker")
    ap.add_argument("--trials", type=int, default=100, help="num_trials of each timing call")
    ap.add_argument("--warmup", type=int, default=3, help="num_warmup of each timing call")
    ap.add_argument("--check-trials", type=int, default=2, help="correctness trials per problem")
    ap.add_argument("--placements", type=int, default=1,
                    help="spread each call's trials over K placements of its inputs "
                         "(K calls of the timing function, on copies behind growing spacers; "
                         "under krex K regions); 1: KernelBench's call as it is")
    ap.add_argument("--modes", default="unprotected,krex",
                    help="of: unprotected, lock (an flock around each timing call), serial "
                         "(the N workers one after another, each alone), held (serial, beside "
                         "N-1 processes holding --ballast-gb of device memory each), churn "
                         "(serial under krex, beside N-1 krex tenants that only allocate and "
                         "free), krex, "
                         "krex@KREX_VAR=value[@...] (krex with settings)")
    ap.add_argument("--no-solo-again", action="store_true", help="skip the noise-floor repeat")
    ap.add_argument("--solo-from", help="reuse the solo phases of an earlier run's "
                                        "kernelbench_real.json (same problems and method), "
                                        "and its serial-N phases where --modes names serial")
    ap.add_argument("--ballast-gb", type=float, default=4.0,
                    help="held and churn modes: device memory each holder keeps (GB)")
    ap.add_argument("--smi-ms", type=int, default=0,
                    help="sample the card's clocks, power, temperatures and throttle reasons "
                         "with nvidia-smi every MS ms through each phase (0: not)")
    ap.add_argument("--churn", action="store_true", help=argparse.SUPPRESS)  # churn's sibling
    ap.add_argument("--release-on-leave", action="store_true",
                    help="krex phases: KREX_RELEASE_ON_LEAVE=1 (a leaving worker resets its "
                         "device inside the gate)")
    ap.add_argument("--linger", action="store_true",
                    help="workers exit only once every worker of the phase is done")
    ap.add_argument("--out", default=os.environ.get("OUT", "kernelbench-real-out"))
    ap.add_argument("--timeout", type=float, default=900, help="seconds per phase")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ballast", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--log", help=argparse.SUPPRESS)  # a worker's timestamped steps
    ap.add_argument("--lock", help=argparse.SUPPRESS)  # the lock mode's file
    args = ap.parse_args()
    args.kernelbench = os.path.abspath(args.kernelbench)
    if args.worker:
        return worker(args)
    if args.ballast:
        return ballast(args)
    if args.ballast_gb <= 0:
        ap.error("--ballast-gb: more than 0")
    if not 1 <= args.placements <= 64:
        ap.error("--placements: 1 to 64")
    if args.smi_ms < 0 or 0 < args.smi_ms < 10:
        ap.error("--smi-ms: 0 (off) or 10 and more")
    if not os.path.isdir(os.path.join(args.kernelbench, "KernelBench", "level1")):
        ap.error("--kernelbench %s: not a KernelBench checkout (no KernelBench/level1)"
                 % args.kernelbench)
    for pid in args.problems.split(","):
        problem_file(args.kernelbench, pid)
    counts = [int(x) for x in args.workers.split(",") if x]
    modes = [m for m in args.modes.split(",") if m]
    if not counts:
        ap.error("--workers: one or more counts")
    for m in modes:
        try:
            parse_mode(m)
        except ValueError as e:
            ap.error("--modes: %s" % e)
    os.makedirs(args.out, exist_ok=True)
    segment = "kbreal-%d" % os.getpid()
    t_start = time.monotonic()
    plan = [("solo", 1, "unprotected")] + (
        [] if args.no_solo_again else [("solo-again", 1, "unprotected")])
    plan += [(phase_name(m, n), n, m) for n in counts for m in modes]
    phases = {}
    if args.solo_from:
        with open(args.solo_from) as f:
            old = json.load(f)
        oc = old["analysis"]["config"]
        if (oc["problems"], oc["method"], oc["trials"], oc.get("placements", 1)) != (
                args.problems, args.method, args.trials, args.placements):
            ap.error("--solo-from %s: its problems, method, trials or placements differ from "
                     "this run's" % args.solo_from)
        walls = old["analysis"].get("walls", {})
        if "solo" not in old["raw"] or "solo" not in walls:
            ap.error("--solo-from %s: no solo phase with its wall time in it" % args.solo_from)
        reused = [(name, n) for name, n, mode in plan if name in old["raw"] and (
            name in ("solo", "solo-again") or parse_mode(mode)[0] == "serial")]
        for name, n in reused:
            phases[name] = {"results": old["raw"][name], "wall": walls.get(name, float("nan")),
                            "workers": n}
            print("%s: taken from %s" % (name, args.solo_from), flush=True)
        plan = [p for p in plan if p[0] not in phases]
    try:
        for name, n, mode in plan:
            print("%s: %d worker(s) started at %.0f s" % (name, n, time.monotonic() - t_start),
                  flush=True)
            res, wall = run_phase(args, name, n, mode, segment)
            phases[name] = {"results": res, "wall": wall, "workers": n}
            print("%s done (%.0f s)" % (name, wall), flush=True)
            # What a run cut short still leaves: every finished phase's raw results.
            with open(os.path.join(args.out, "kernelbench_real.partial.json"), "w") as f:
                json.dump({"walls": {k: v["wall"] for k, v in phases.items()},
                           "raw": {k: v["results"] for k, v in phases.items()}}, f)
    finally:
        remove_segment(segment)
    per_call = args.trials + args.warmup + 1  # KernelBench's cuda_event: discard_first=1
    a = analyze(phases, per_call=per_call if args.placements == 1 else None)
    a["walls"] = {k: v["wall"] for k, v in phases.items()}
    a["config"] = {k: v for k, v in vars(args).items() if k not in ("worker", "index")}
    a["total_s"] = time.monotonic() - t_start
    md = markdown(a, a["config"])
    raw = {k: v["results"] for k, v in phases.items()}
    write_report(args.out, "kernelbench_real", {"analysis": a, "raw": raw}, md, a["total_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
