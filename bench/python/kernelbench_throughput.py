#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Throughput of KernelBench-style evaluations on one shared GPU, shape for
shape, and where each evaluation's time goes.

An evaluation (the one of kernelbench_style.py): build one problem's inputs
and its four PyTorch candidates, check each against the reference, then time
each with triton.testing.do_bench, round-robin, --reps times. A phase runs
--evals-per-worker x N evaluations through N slots (a stream: a slot starts
the next evaluation when its last one ends), problem i mod 4 for evaluation i.

Shapes:
  run   a process per evaluation, started as `python -m krex.run driver.py
        --worker ...` (KernelBench's process per candidate); its imports and
        CUDA context are part of the evaluation
  pool  N persistent workers, the evaluation a task; the workers import
        PyTorch and make their contexts before the clock starts

Modes, each in each shape:
  unprotected  no krex (run: KREX_PATCH=0; pool: a ProcessPoolExecutor)
  lock         an flock around each do_bench call, nothing else (the bound of
               any scheme that runs timed loops one at a time)
  krex         a region per do_bench call; run: do_bench patched by `python -m
               krex.run`; pool: krex.Pool(patch=True)
  krex-held    (not by default) one region around an evaluation's whole
               timing loop, which the patched do_bench calls run inside
  krex-late    (not by default; run shape only) krex with KREX_PATCH_JOIN=0:
               the process joins at its first do_bench, so its imports, inputs
               and checks run ungated (a krex without early join does so anyway)

Reported per phase (table, JSON): evaluations/min over the phase's wall
time, do_bench executions of the timed candidate per minute (do_bench is
time-boxed: contended, it runs fewer executions), the device lock's busy
share (regions from lock acquired to released, over the wall), accuracy as
kernelbench_style.py reports it (inflation of every do_bench result over
the solo median, discordant pairs), and per evaluation the medians of the
C++ eval's "where the time goes" categories: command, context (process
start, imports, CUDA context), join (a process's krex join), inputs, check, wait (region lock), gate,
drain, freeze, quiet, pin, critical (inside regions: the timed loops), exit,
wrapper (the patched call's own Python and report, the first call's join),
other.

    python3 bench/python/kernelbench_throughput.py                # GPU, krex installed
    python3 bench/python/kernelbench_throughput.py --fake         # no GPU: CPU stand-ins
"""

import argparse
import concurrent.futures as cf
import fcntl
import importlib.util
import json
import multiprocessing as mp
import os
import selectors
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
BENCH = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(BENCH, "..", "..", "scripts"))
from quantiles import quantile  # noqa: E402  (scripts/quantiles.py: the scripts' one quantile)
from report_files import write_report  # noqa: E402  (scripts/report_files.py)

_spec = importlib.util.spec_from_file_location("kernelbench_style",
                                               os.path.join(BENCH, "kernelbench_style.py"))
kbs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kbs)

MODES = ("unprotected", "lock", "krex", "krex-held", "krex-late")
PER_CALL = ("krex", "krex-late")  # a region per do_bench call
SHAPES = ("run", "pool")
# The report's entry steps, in the order a region takes them (region_core.hpp).
STEPS = ("lock", "gate", "drain", "freeze", "quiet", "pin")


# ------------------------------------------------------------ the evaluation
def _counted(fn, box):
    def call():
        box[0] += 1
        return fn()
    return call


def evaluate(problem, index, cfg):
    """One evaluation in this process; returns its record (JSON-able).

    cfg: mode, fake, fake_dir, reps, warmup_ms, rep_ms, lock_path, t_spawn
    (the monotonic time the parent started this process; None in a pool)."""
    t_start = time.monotonic()
    if cfg["fake"]:
        if cfg["fake_dir"] not in sys.path:
            sys.path.insert(0, cfg["fake_dir"])
        import triton.testing
        t_ready = time.monotonic()
        ref, cands, atol, rtol = kbs.fake_problem(problem)
        check = lambda got, want: abs(got - want) <= atol + rtol * abs(want)  # noqa: E731
        sync = lambda: None  # noqa: E731
    else:
        import torch
        import torch.nn.functional as F
        import triton.testing
        torch.cuda.set_device(0)
        torch.zeros(1, device="cuda")  # the CUDA context (a pool worker's exists already)
        torch.cuda.synchronize()
        t_ready = time.monotonic()
        ref, cands, atol, rtol = kbs.build_problem(problem, torch, F)
        sync = torch.cuda.synchronize

        def check(got, want):
            return torch.allclose(got.float(), want.float(), atol=atol, rtol=rtol)
    # Whether this process's krex tenant joined before its imports were done
    # (python -m krex.run's early join, a pool worker), or joins later (at
    # its first do_bench, or krex-held's process_tenant()).
    joined_early = cfg["mode"].startswith("krex") and _process_tenant_joined()
    sync()
    t_inputs = time.monotonic()
    want = ref()
    correct = {c: bool(check(fn(), want)) for c, fn in cands.items()}
    sync()
    t_checked = time.monotonic()

    krex = sys.modules.get("krex") if cfg["mode"].startswith("krex") else None
    lock_fd = os.open(cfg["lock_path"], os.O_RDWR | os.O_CREAT, 0o600) if cfg["mode"] == "lock" else -1

    def bench(fn):
        try:
            return float(triton.testing.do_bench(fn, warmup=cfg["warmup_ms"], rep=cfg["rep_ms"],
                                                 return_mode="median"))
        except TypeError:  # a Triton without return_mode: the mean
            return float(triton.testing.do_bench(fn, warmup=cfg["warmup_ms"], rep=cfg["rep_ms"]))

    names = [c for c in cands if correct[c]]
    counts = {c: [0] for c in names}
    timed = {c: _counted(cands[c], counts[c]) for c in names}
    samples = {c: [] for c in names}
    execs = {c: [] for c in names}
    regions = []  # krex: the region reports' times; lock: the flock's wait and hold

    def timing_loop():
        for _ in range(cfg["reps"]):
            for c in names:
                before = counts[c][0]
                if lock_fd >= 0:
                    t0 = time.monotonic()
                    fcntl.flock(lock_fd, fcntl.LOCK_EX)
                    t1 = time.monotonic()
                    try:
                        samples[c].append(bench(timed[c]))
                    finally:
                        t2 = time.monotonic()
                        fcntl.flock(lock_fd, fcntl.LOCK_UN)
                    regions.append({"lock_ms": (t1 - t0) * 1e3, "body_ms": (t2 - t1) * 1e3})
                else:
                    samples[c].append(bench(timed[c]))
                if cfg["mode"] in PER_CALL:
                    rep = krex.last_report()
                    if rep is None or rep is (regions[-1]["_rep"] if regions else None):
                        raise RuntimeError("mode krex, but do_bench ran in no region (not patched?)")
                    regions.append(region_times(rep))
                    regions[-1]["_rep"] = rep
                execs[c].append(counts[c][0] - before)

    t_timed = time.monotonic()
    if cfg["mode"] == "krex-held":
        # One region around the evaluation's whole timing loop (the harness's
        # choice; patched do_bench calls inside it run straight through).
        with krex.region(krex.process_tenant()) as r:
            timing_loop()
        regions.append(region_times(r.report))
    else:
        timing_loop()
    t_done = time.monotonic()
    join = None
    if krex is not None and cfg.get("t_spawn") is not None:  # a process per evaluation: its join
        t = krex.process_tenant()
        join = getattr(t, "join_report", None)  # a krex without Tenant.join_report: None
    if lock_fd >= 0:
        os.close(lock_fd)
    for g in regions:
        g.pop("_rep", None)
    return {
        "problem": problem, "worker": index, "pid": os.getpid(), "mode": cfg["mode"],
        "correct": correct, "samples_ms": samples, "execs": execs, "regions": regions,
        "levels": sorted({g["level"] for g in regions if "level" in g}),
        "lock_wait_ms_median": (statistics.median([g["lock_ms"] for g in regions])
                                if regions else None),
        "join": join, "joined_early": joined_early,
        "t_spawn": cfg.get("t_spawn"), "t_start": t_start, "t_ready": t_ready,
        "t_inputs": t_inputs, "t_checked": t_checked, "t_timed": t_timed, "t_done": t_done,
    }


def _process_tenant_joined():
    """Whether krex.patch's process tenant has joined, without joining it."""
    state = getattr(sys.modules.get("krex.patch"), "_state", {})
    tenants = list(state.get("tenants", {}).values()) + list(state.get("adopted", {}).values())
    return any(t.joined for t in tenants)


def region_times(rep):
    """A region report's times (ms), level and sibling counts."""
    g = {k + "_ms": rep[k + "_ns"] / 1e6 for k in STEPS + ("body", "exit")}
    g.update(quiet_wait_ms=rep["quiet_wait_ns"] / 1e6, level=rep["level"],
             siblings=rep["siblings_seen"], frozen=len(rep["frozen_pids"]))
    return g


def warm(cfg):
    """A pool worker's warm-up before the clock: imports, CUDA context."""
    if cfg["fake"]:
        if cfg["fake_dir"] not in sys.path:
            sys.path.insert(0, cfg["fake_dir"])
        import triton.testing  # noqa: F401
    else:
        import torch
        import triton.testing  # noqa: F401
        torch.cuda.set_device(0)
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        krex = sys.modules.get("krex")
        if cfg["mode"].startswith("krex") and krex is not None:
            # The measure scratch, quiet probe and NVML, outside any region, as
            # krex.run's join does once PyTorch has a context (docs/PYTHON.md).
            krex.prepare_measure()
    time.sleep(cfg.get("warm_sleep", 0.2))  # each of the simultaneous warm calls on its own worker
    return os.getpid()


def pool_evaluate(problem, index, cfg, t_submit):
    r = evaluate(problem, index, cfg)
    r["t_submit"] = t_submit
    return r


# ------------------------------------------------------------- the run shape
def worker_main(args):
    cfg = json.loads(args.cfg)
    r = evaluate(args.problem, args.index, cfg)
    print("result " + json.dumps(r), flush=True)
    return 0


def split_mode(label):
    """'krex@KREX_HANDOFF_GRACE_MS=0+KREX_FREEZE=none' -> ('krex', {variables})."""
    base, _, rest = label.partition("@")
    env = {}
    for item in filter(None, rest.split("+")):
        name, eq, value = item.partition("=")
        if not eq or not name.startswith("KREX_"):
            raise ValueError("%r: a variant is KREX_NAME=value[+KREX_NAME=value...]" % label)
        env[name] = value
    return base, env


def _spawn(args, cfg, mode, index, problem, segment):
    cmd = [sys.executable, "-m", "krex.run", HERE, "--worker", "--problem", problem,
           "--index", str(index)]
    mode, variant = split_mode(mode)
    env = dict(os.environ)
    env.update(variant)
    env["KREX_SEGMENT"] = segment
    if not mode.startswith("krex"):
        env["KREX_PATCH"] = "0"
    if mode == "krex-late":
        env["KREX_PATCH_JOIN"] = "0"
    c = dict(cfg, mode=mode, t_spawn=time.monotonic())
    p = subprocess.Popen(cmd + ["--cfg", json.dumps(c)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, text=True, bufsize=1, env=env)
    p.krex_buf = ""
    return p


def run_shape(args, cfg, mode, jobs, n, segment):
    """jobs: [(index, problem)], at most n processes at once. Returns (records,
    failures, wall seconds)."""
    pending = list(jobs)
    live, records, failures = {}, [], []
    sel = selectors.DefaultSelector()
    deadline = time.monotonic() + args.timeout
    t0 = time.monotonic()
    try:
        while pending or live:
            while pending and len(live) < n:
                i, p = pending.pop(0)
                proc = _spawn(args, cfg, mode, i, p, segment)
                live[proc.stdout] = (proc, i)
                sel.register(proc.stdout, selectors.EVENT_READ)
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("%s/run: evaluations still running after %g s"
                                   % (mode, args.timeout))
            for key, _ in sel.select(min(left, 1.0)):
                proc, i = live[key.fileobj]
                line = key.fileobj.readline()
                if line.startswith("result "):
                    records.append(json.loads(line[len("result "):]))
                elif line == "":
                    sel.unregister(key.fileobj)
                    del live[key.fileobj]
                    rc = proc.wait()
                    if not any(r["worker"] == i for r in records):
                        failures.append("evaluation %d (pid %d) exited %s without a result"
                                        % (i, proc.pid, rc))
        return records, failures, time.monotonic() - t0
    finally:
        for proc, _ in live.values():
            proc.kill()
            proc.wait()
        sel.close()


# ------------------------------------------------------------ the pool shape
def _warm_all(pool, n, cfg, timeout):
    """Warm calls until every worker has taken one (each sleeps a little, so
    simultaneous ones spread); returns the seconds it took."""
    t0 = time.monotonic()
    seen = set()
    for _ in range(20):
        futs = [pool.submit(warm, cfg) for _ in range(n)]
        seen |= {f.result(timeout=timeout) for f in futs}
        if len(seen) >= n:
            break
    if len(seen) < n:
        raise RuntimeError("only %d of %d pool workers took a warm call" % (len(seen), n))
    return time.monotonic() - t0


def pool_shape(args, cfg, mode, jobs, n, segment):
    mode, variant = split_mode(mode)
    saved = {k: os.environ.get(k) for k in variant}
    os.environ.update(variant)  # the workers' KREX_* overrides, inherited at spawn
    try:
        return _pool_shape(args, cfg, mode, jobs, n, segment)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _pool_shape(args, cfg, mode, jobs, n, segment):
    cfg = dict(cfg, mode=mode, t_spawn=None)
    t_make = time.monotonic()
    if mode.startswith("krex"):
        import krex
        pool = krex.Pool(workers=n, segment=segment, start_timeout=args.timeout, patch=True)
    else:
        pool = cf.ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"))
    try:
        t_started = time.monotonic()
        warm_s = _warm_all(pool, n, cfg, args.timeout)
        t0 = time.monotonic()
        futs = [pool.submit(pool_evaluate, p, i, cfg, time.monotonic()) for i, p in jobs]
        records, failures = [], []
        for f in futs:
            try:
                records.append(f.result(timeout=max(1.0, t0 + args.timeout - time.monotonic())))
            except Exception as e:  # noqa: BLE001 - counted and reported
                failures.append("%s: %s" % (type(e).__name__, e))
        wall = time.monotonic() - t0
    finally:
        pool.shutdown(wait=True)
    return records, failures, wall, {"start_s": t_started - t_make, "warm_s": warm_s}


# ---------------------------------------------------------------- the numbers
def breakdown(r):
    """One evaluation's time, by category (ms). The parts add up to command:
    context + join + inputs + check + (the timing loop: wait + gate .. pin +
    critical + exit + wrapper) + other. The join (a process per evaluation
    under krex) is taken out of context when the process joined before its
    imports were done, else out of wrapper (the first do_bench joined)."""
    regions = r["regions"]
    start = r["t_spawn"] if r.get("t_spawn") is not None else r["t_start"]
    b = {"command": (r["t_done"] - start) * 1e3,
         "context": (r["t_ready"] - start) * 1e3,
         "inputs": (r["t_inputs"] - r["t_ready"]) * 1e3,
         "check": (r["t_checked"] - r["t_inputs"]) * 1e3}
    timed_ms = (r["t_done"] - r["t_timed"]) * 1e3
    if regions:
        b["wait"] = sum(g["lock_ms"] for g in regions)
        if "gate_ms" in regions[0]:  # krex: the region report's steps
            for s in STEPS[1:]:
                b[s] = sum(g[s + "_ms"] for g in regions)
            b["exit"] = sum(g["exit_ms"] for g in regions)
        b["critical"] = sum(g["body_ms"] for g in regions)
    else:
        b["critical"] = timed_ms
    inside = sum(v for k, v in b.items() if k in ("wait", "critical", "exit") or k in STEPS[1:])
    b["wrapper"] = timed_ms - inside
    b["other"] = b["command"] - b["context"] - b["inputs"] - b["check"] - timed_ms
    if r.get("join"):  # the tenant's join, out of the part it happened in
        b["join"] = r["join"]["total_ms"]
        b["context" if r["joined_early"] else "wrapper"] -= b["join"]
    return b


CATEGORIES = ("command", "context", "join", "inputs", "check", "wait", "gate", "drain", "freeze", "quiet",
              "pin", "critical", "exit", "wrapper", "other")


def held_ms(r):
    """The device lock held by this evaluation (krex: the steps after the
    lock, the body, the exit; lock: the flock held); 0 unprotected."""
    return sum(sum(g[s + "_ms"] for s in STEPS[1:]) + g["body_ms"] + g["exit_ms"]
               if "gate_ms" in g else g["body_ms"] for g in r["regions"])


def summarize(records, wall, n, mode, shape):
    ok = len(records)
    per = [breakdown(r) for r in records]
    med = {k: quantile([b[k] for b in per if k in b], 0.5) if any(k in b for b in per) else None
           for k in CATEGORIES}
    tot = {k: sum(b.get(k, 0.0) for b in per) for k in CATEGORIES}
    execs = sum(x for r in records for v in r["execs"].values() for x in v)
    calls = sum(len(v) for r in records for v in r["execs"].values())
    held = sum(held_ms(r) for r in records)
    entry_exit = sum(tot[k] for k in ("gate", "drain", "freeze", "quiet", "pin", "exit"))
    return {
        "mode": mode, "shape": shape, "workers": n, "evaluations": ok, "wall_s": wall,
        "evals_per_min": ok / wall * 60 if wall > 0 else 0.0,
        "calls": calls, "execs": execs, "execs_per_min": execs / wall * 60 if wall > 0 else 0.0,
        "lock_busy": held / 1e3 / wall if wall > 0 else 0.0,
        "held_ms_per_eval": held / ok if ok else 0.0,
        "entry_exit_ms_per_eval": entry_exit / ok if ok else 0.0,
        "critical_us_per_exec": tot["critical"] * 1e3 / execs if execs else 0.0,
        "entry_exit_share_of_held": entry_exit / held if held > 0 else 0.0,
        "critical_share": (quantile([b["critical"] / b["command"] for b in per if b["command"] > 0],
                                    0.5) if per else None),
        "median_ms": med, "total_ms": tot,
        "levels": sorted({lv for r in records for lv in r["levels"]}),
        "steps": region_steps(records),
    }


def accuracy(solo, phases):
    """kernelbench_style's inflation and ranking over each phase's records."""
    ak = kbs.analyze(solo, {k: (v["records"], v["wall_s"]) for k, v in phases.items()})
    return {k: {f: m[f] for f in ("samples", "inflation_median", "inflation_p95", "inflation_max",
                                   "pairs", "discordant_pairs", "workers_with_flips",
                                   "workers_best_wrong")}
            for k, m in ak["modes"].items()}, ak["solo_split_half"], ak["solo_medians_ms"]


def gap_lines(out):
    """krex against unprotected, split at the lock: unprotected -> lock is what
    timing one loop at a time costs (any exclusive scheme); lock -> krex is
    krex's own (its steps, its gate on the others' work, its body)."""
    ph = out["phases"]
    lines = ["", "## The gap, split at the lock", "",
             "| N | shape | mode | x unprotected | = lock x unprotected | x mode / lock | held ms "
             "per eval (lock) | held ms per eval | entry+exit ms per eval | critical us per "
             "execution (lock) | critical us per execution | lock busy (lock) | lock busy |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in ph.values():
        if not s["mode"].startswith("krex"):
            continue
        pre = "%d-%s-" % (s["workers"], s["shape"])
        u, lk = ph.get(pre + "unprotected"), ph.get(pre + "lock")
        if not u or not lk or not u["evals_per_min"] or not lk["evals_per_min"]:
            continue
        lines.append("| %d | %s | %s | %.3f | %.3f | %.3f | %.1f | %.1f | %.2f | %.1f | %.1f | "
                     "%.1f%% | %.1f%% |"
                     % (s["workers"], s["shape"], s["mode"],
                        s["evals_per_min"] / u["evals_per_min"],
                        lk["evals_per_min"] / u["evals_per_min"],
                        s["evals_per_min"] / lk["evals_per_min"], lk["held_ms_per_eval"],
                        s["held_ms_per_eval"], s["entry_exit_ms_per_eval"],
                        lk["critical_us_per_exec"], s["critical_us_per_exec"],
                        100 * lk["lock_busy"], 100 * s["lock_busy"]))
    return lines if len(lines) > 4 else []


def region_steps(records):
    """Per region (not per evaluation): each step's median, p90 and max (ms),
    and how many regions froze, waited for quiet, or were shared."""
    regs = [g for r in records for g in r["regions"] if "gate_ms" in g]
    if not regs:
        return None
    out = {"regions": len(regs)}
    for k in STEPS + ("exit", "body"):
        v = [g[k + "_ms"] for g in regs]
        out[k] = {"median": quantile(v, 0.5), "p90": quantile(v, 0.9), "max": max(v)}
    out["siblings_median"] = quantile([g["siblings"] for g in regs], 0.5)
    out["frozen_median"] = quantile([g["frozen"] for g in regs], 0.5)
    out["quiet_waited"] = sum(1 for g in regs if g["quiet_wait_ms"] > 0)
    out["shared"] = sum(1 for g in regs if "-shared" in g["level"])
    return out


def step_lines(out):
    rows = [(k, s["steps"]) for k, s in out["phases"].items() if s.get("steps")]
    if not rows:
        return []
    lines = ["", "## Region steps (per region, ms: median / p90 / max)", "",
             "| phase | regions | " + " | ".join(STEPS + ("exit",)) +
             " | siblings | frozen | quiet waited | -shared |",
             "|---|---|" + "---|" * (len(STEPS) + 5)]
    for key, st in rows:
        lines.append("| %s | %d | " % (key, st["regions"]) + " | ".join(
            "%.3f / %.3f / %.3f" % (st[k]["median"], st[k]["p90"], st[k]["max"])
            for k in STEPS + ("exit",)) + " | %g | %g | %d | %d |"
            % (st["siblings_median"], st["frozen_median"], st["quiet_waited"], st["shared"]))
    return lines


def markdown(out, args):
    cfg = out["config"]
    lines = ["# KernelBench-style evaluations: throughput and where the time goes", "",
             "%d reps of do_bench(warmup=%d ms, rep=%d ms) per candidate, 4 candidates per "
             "evaluation, %d evaluations per worker; problems %s%s."
             % (cfg["reps"], cfg["warmup_ms"], cfg["rep_ms"], cfg["evals_per_worker"],
                cfg["problems"], " (--fake: CPU stand-ins)" if cfg["fake"] else ""), "",
             "## Throughput and accuracy", "",
             "| N | shape | mode | evals | wall s | evals/min | x unprotected | timed execs/min | "
             "x unprotected | lock busy | entry+exit of held | inflation median | p95 | max | "
             "discordant pairs |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for key, s in out["phases"].items():
        base = out["phases"].get("%d-%s-unprotected" % (s["workers"], s["shape"]))
        acc = out["accuracy"].get(key, {})
        rel = lambda f: ("%.3f" % (s[f] / base[f]) if base and base[f] else "-")  # noqa: E731
        lines.append(
            "| %d | %s | %s | %d | %.1f | %.1f | %s | %.0f | %s | %.1f%% | %.1f%% | %s | %s | %s | %s |"
            % (s["workers"], s["shape"], s["mode"], s["evaluations"], s["wall_s"],
               s["evals_per_min"], rel("evals_per_min"), s["execs_per_min"], rel("execs_per_min"),
               100 * s["lock_busy"], 100 * s["entry_exit_share_of_held"],
               *(("%+.1f%%" % (100 * acc[f])) if acc and acc.get("samples") else "-"
                 for f in ("inflation_median", "inflation_p95", "inflation_max")),
               ("%d / %d" % (acc["discordant_pairs"], acc["pairs"])) if acc else "-"))
    lines += ["", "## Where the time goes (medians per evaluation, ms)", "",
              "| N | shape | mode | " + " | ".join(CATEGORIES) + " | critical share |",
              "|---|---|---|" + "---|" * (len(CATEGORIES) + 1)]
    for s in out["phases"].values():
        m = s["median_ms"]
        lines.append("| %d | %s | %s | " % (s["workers"], s["shape"], s["mode"]) +
                     " | ".join("-" if m[k] is None else ("%.3f" % m[k] if k in STEPS + ("exit",)
                                                          else "%.1f" % m[k])
                                for k in CATEGORIES) +
                     " | %s |" % ("-" if s["critical_share"] is None
                                  else "%.0f%%" % (100 * s["critical_share"])))
    lines += gap_lines(out)
    lines += step_lines(out)
    f = out["solo_split_half"]
    lines += ["", "Solo noise floor (odd vs even reps): %d / %d pairs discordant."
              % (f["discordant"], f["pairs"])]
    for key, s in out["phases"].items():
        if s["levels"]:
            lines.append("%s: region levels: %s" % (key, ", ".join(s["levels"])))
        if out["failures"].get(key):
            lines.append("%s: %d failed: %s" % (key, len(out["failures"][key]),
                                                 out["failures"][key][0]))
        if "pool" in s:
            lines.append("%s: pool start %.1f s, warm %.1f s (outside the clock)"
                         % (key, s["pool"]["start_s"], s["pool"]["warm_s"]))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- main
def parse_list(ap, text, allowed, what, conv=str):
    items = [conv(x) for x in text.split(",") if x]
    bad = [str(x) for x in items if allowed is not None and x not in allowed]
    if bad or not items:
        ap.error("--%s: unknown %s (choose from %s)" % (what, ", ".join(bad) or "(none)",
                                                         ", ".join(map(str, allowed or ()))))
    return items


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="8,16", help="comma-separated N")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--modes", default="unprotected,lock,krex",
                    help="of: " + ", ".join(MODES) + "; a krex mode may add KREX_* variables: "
                    "krex@KREX_HANDOFF_GRACE_MS=0+KREX_FREEZE=none")
    ap.add_argument("--evals-per-worker", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2, help="do_bench calls per candidate")
    ap.add_argument("--warmup-ms", type=int, default=10)
    ap.add_argument("--rep-ms", type=int, default=50)
    ap.add_argument("--problems", default=",".join(kbs.DEFAULT_PROBLEMS))
    kbs.add_driver_args(ap, timeout=300)
    ap.add_argument("--cfg", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return worker_main(args)
    ns = parse_list(ap, args.workers, None, "workers", int)
    if any(n < 1 for n in ns) or args.evals_per_worker < 1 or args.reps < 1:
        ap.error("--workers, --evals-per-worker and --reps must be >= 1")
    shapes = parse_list(ap, args.shapes, SHAPES, "shapes")
    modes = [m for m in args.modes.split(",") if m]
    try:
        bases = [split_mode(m)[0] for m in modes]
    except ValueError as e:
        ap.error("--modes: %s" % e)
    parse_list(ap, ",".join(bases), MODES, "modes")
    if any("@" in m and not m.startswith("krex") for m in modes) or len(set(modes)) != len(modes):
        ap.error("--modes: variables go with krex modes only, each mode once")
    problems = parse_list(ap, args.problems, kbs.PROBLEMS, "problems")

    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="krex-kbtp-")
    fake_dir = os.path.join(tmp, "fake")
    if args.fake:
        kbs.write_fake_triton(fake_dir)
    cfg = {"fake": args.fake, "fake_dir": fake_dir, "reps": args.reps, "warmup_ms": args.warmup_ms,
           "rep_ms": args.rep_ms, "lock_path": os.path.join(tmp, "device.lock"),
           "warm_sleep": 0.05 if args.fake else 0.2}
    tag = "kbtp-%d" % os.getpid()
    t_start = time.monotonic()

    # The solo reference: each problem alone, a process each, unprotected.
    solo = []
    for i, p in enumerate(problems):
        recs, fails, _ = run_shape(args, cfg, "unprotected", [(i, p)], 1, tag + "-solo")
        if fails or not recs:
            raise SystemExit("solo %s failed: %s" % (p, fails))
        solo += recs
    print("solo done (%.0f s)" % (time.monotonic() - t_start), flush=True)

    phases, failures = {}, {}
    for n in ns:
        jobs = [(i, problems[i % len(problems)]) for i in range(n * args.evals_per_worker)]
        for shape in shapes:
            for mi, mode in enumerate(modes):
                if shape == "pool" and split_mode(mode)[0] == "krex-late":
                    continue  # pool workers join when they start
                key = "%d-%s-%s" % (n, shape, mode)
                seg = "%s-%d-%s-%d" % (tag, n, shape, mi)
                extra = None
                if shape == "run":
                    recs, fails, wall = run_shape(args, cfg, mode, jobs, n, seg)
                else:
                    recs, fails, wall, extra = pool_shape(args, cfg, mode, jobs, n, seg)
                kbs.remove_segment(seg)
                s = summarize(recs, wall, n, mode, shape)
                s["records"] = recs
                if extra:
                    s["pool"] = extra
                phases[key], failures[key] = s, fails
                print("%s: %d evaluations in %.1f s (%.1f/min)%s"
                      % (key, len(recs), wall, s["evals_per_min"],
                         ", %d failed" % len(fails) if fails else ""), flush=True)
    kbs.remove_segment(tag + "-solo")
    acc, floor, solo_med = accuracy(solo, phases)
    out = {"config": dict(vars(args), problems=problems, workers=ns, shapes=shapes, modes=modes),
           "phases": phases, "accuracy": acc, "solo_split_half": floor,
           "solo_medians_ms": solo_med, "solo": solo, "failures": failures,
           "total_s": time.monotonic() - t_start}
    for k in ("worker", "problem", "index", "cfg"):
        out["config"].pop(k, None)
    md = markdown(out, args)
    write_report(args.out, "kernelbench_throughput", out, md, out["total_s"])
    return 1 if any(failures.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
