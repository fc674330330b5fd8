# SPDX-License-Identifier: Apache-2.0
"""KernelBench's own timing module (src/kernelbench/timing.py of a KernelBench
checkout: $KERNELBENCH_DIR, or .deps/KernelBench in the krex checkout) under
krex.patch() and `python -m krex.run`.

- Without a GPU: which of its timing functions krex wraps (every
  time_execution_with_* that get_timing_function returns, the nsight one
  excepted), checked against the functions the source defines, so a method
  KernelBench adds fails here until krex decides about it; and one real
  timing function run inside a region (PyTorch replaced by a stand-in where
  it is not installed).
- On a CUDA GPU (PyTorch with CUDA, krex's CUDA backend): two workers under
  `python -m krex.run` time two level-1 problems with KernelBench's methods
  beside a process that holds a CUDA context outside krex: every timing call
  is a region, every region reports that process as foreign, and never one
  of the workers.

Each skips, saying why, without the KernelBench source (or the GPU).
"""

import json
import os
import selectors
import subprocess
import sys
import time
import unittest

import krex
from pyutil import Child, TempTree, cleanup, unique_name

HERE = os.path.dirname(os.path.abspath(__file__))
KB = os.path.abspath(os.environ.get("KERNELBENCH_DIR")
                     or os.path.join(HERE, "..", "..", ".deps", "KernelBench"))

# Imports kernelbench.timing from the checkout KB without running the
# package's __init__ (which imports KernelBench's LLM-client dependencies);
# krex's import hook wraps the module as it loads.
IMPORT_TIMING = """
import types
_kb = os.path.join(KB, "src", "kernelbench")
_pkg = types.ModuleType("kernelbench")
_pkg.__path__ = [_kb]
sys.modules["kernelbench"] = _pkg
"""

# A stand-in for PyTorch and NumPy, enough for timing.py's definitions and
# for time_execution_with_host_time (host clock, synchronize, L2 clear).
STUB_TORCH = """
try:
    import torch, numpy
except ImportError:
    torch = types.ModuleType("torch")
    class _device:
        def __init__(self, *a, **k):
            pass
    class _Buf:
        def fill_(self, v):
            return self
    class _On:
        def __init__(self, d):
            pass
        def __enter__(self):
            return self
        def __exit__(self, *a):
            return False
    torch.device, torch.dtype, torch.int64 = _device, type("dtype", (), {}), "int64"
    torch.empty = lambda *a, **k: _Buf()
    torch.cuda = types.ModuleType("torch.cuda")
    torch.cuda.current_device = lambda: 0
    torch.cuda.synchronize = lambda device=None: None
    torch.cuda.empty_cache = lambda: None
    torch.cuda.get_device_name = lambda d=None: "stand-in"
    torch.cuda.device = _On
    sys.modules["torch"], sys.modules["torch.cuda"] = torch, torch.cuda
    sys.modules["numpy"] = types.ModuleType("numpy")
"""

LIGHT_ENV = {"KREX_FREEZE": "none", "KREX_PIN": "0", "KREX_CONFINE": "0",
             "KREX_LOCK_WAIT_MS": "60000"}


def _need_source():
    if not os.path.isfile(os.path.join(KB, "src", "kernelbench", "timing.py")):
        raise unittest.SkipTest(
            "no KernelBench checkout at %s (src/kernelbench/timing.py): set KERNELBENCH_DIR to a "
            "clone of https://github.com/ScalingIntelligence/KernelBench" % KB)


def test_krex_wraps_kernelbench_timing_functions_from_its_source():
    _need_source()
    name = unique_name("pykbwrap")
    c = Child("KB = sys.argv[2]\n" + "import types\n" + STUB_TORCH + IMPORT_TIMING + """
krex.patch(segment=sys.argv[1])
import kernelbench.timing as kt
defined = sorted(n for n in dir(kt) if n.startswith("time_execution_with_"))
wrapped = sorted(n for n in defined if hasattr(getattr(kt, n), "__krex_original__"))
methods = {}
for m in ("cuda_event", "do_bench", "do_bench_impl", "host_time", "nsight_python_time"):
    try:
        f = kt.get_timing_function(m)
        methods[m] = [f.__name__, hasattr(f, "__krex_original__")]
    except ValueError:
        methods[m] = None
seen = []
def kernel():
    seen.append(krex.in_region())
times = kt.time_execution_with_host_time(kernel, [], num_warmup=1, num_trials=3,
                                         discard_first=1, verbose=False, device=0)
say("out", {"defined": defined, "wrapped": wrapped, "methods": methods, "seen": seen,
            "times": len(times), "level": krex.last_report()["level"]})
""", env=LIGHT_ENV, args=[name, KB])
    try:
        out = c.expect("out", timeout=60)
        targets = set(sys.modules["krex.patch"].TARGETS["kernelbench.timing"])
        # Every timing function of the source is krex's target, or the nsight one
        # (Nsight Compute profiling: not wrapped, see docs/PYTHON.md).
        unknown = set(out["defined"]) - targets - {"time_execution_with_nsight_python"}
        assert not unknown, ("KernelBench defines timing functions krex does not know: %s; "
                             "add them to krex.patch.TARGETS and docs/PYTHON.md" % sorted(unknown))
        assert out["wrapped"] == sorted(targets & set(out["defined"])), out
        for m in ("cuda_event", "do_bench", "do_bench_impl", "host_time"):
            assert out["methods"][m][1] is True, (m, out["methods"])
        if out["methods"]["nsight_python_time"] is not None:
            assert out["methods"]["nsight_python_time"][1] is False, out["methods"]
        # host_time: 1 warm-up + 1 discarded + 3 trials, all inside the region.
        assert out["seen"] == [True] * 5 and out["times"] == 3, out
        assert out["level"].startswith("gate+drain"), out["level"]
        assert c.wait() == 0
    finally:
        cleanup(name, [c])


def _need_gpu():
    _need_source()
    try:
        import torch
    except ImportError:
        raise unittest.SkipTest("PyTorch is not installed (the GPU test runs KernelBench's "
                                "timing on CUDA)") from None
    if krex.backend != "cuda":
        raise unittest.SkipTest("this krex is the %s backend; the GPU test needs the CUDA one"
                                % krex.backend)
    if not torch.cuda.is_available():
        raise unittest.SkipTest("PyTorch sees no CUDA device")


WORKER = """
import json, os, statistics, sys, time, types
KB = sys.argv[1]
import torch
""" + IMPORT_TIMING + """
import kernelbench.timing as kt
import krex
methods = ["cuda_event", "do_bench_impl", "host_time"]
try:
    import triton  # noqa: F401
    methods += ["do_bench"]
except ImportError:
    pass
dev = torch.device("cuda:0")
torch.cuda.set_device(dev)
calls, last = [], None
for pid in sys.argv[2].split(","):
    d = os.path.join(KB, "KernelBench", "level1")
    path = os.path.join(d, [f for f in sorted(os.listdir(d)) if f.split("_", 1)[0] == pid][0])
    ctx = {}
    exec(compile(open(path).read(), path, "exec"), ctx)
    with torch.no_grad():
        model = ctx["Model"](*ctx["get_init_inputs"]()).to(dev)
        xs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in ctx["get_inputs"]()]
        ref = model(*xs)  # a correctness-style check before timing
        assert torch.allclose(ref, model(*xs))
        for m in methods:
            times = kt.get_timing_function(m)(model, xs, num_warmup=2, num_trials=10,
                                              discard_first=1, verbose=False, device=dev)
            rep = krex.last_report()
            calls.append({"problem": pid, "method": m, "new_region": rep is not None and rep is not last,
                          "level": rep["level"] if rep else None,
                          "foreign_pids": rep["foreign_pids"] if rep else None,
                          "foreign_checked": rep["foreign_checked"] if rep else None,
                          "median_ms": statistics.median(times)})
            last = rep
    del model, xs, ref
    torch.cuda.empty_cache()
print("RESULT " + json.dumps({"pid": os.getpid(), "calls": calls}), flush=True)
sys.stdin.readline()  # exit once the test has every result (no exit during another's region)
"""

FOREIGN = """
import sys, torch
x = torch.ones(1 << 20, device="cuda")  # a CUDA context outside krex
print("READY", flush=True)
sys.stdin.readline()
"""


def test_kernelbench_timing_under_krex_run_on_the_gpu():
    _need_gpu()
    name = unique_name("pykbgpu")
    with TempTree({"worker.py": WORKER, "foreign.py": FOREIGN}) as tree:
        env = dict(os.environ, KREX_SEGMENT=name, KREX_LOCK_WAIT_MS="120000")
        procs = []

        def start(args):
            p = subprocess.Popen([sys.executable, *args], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 bufsize=1, env=env)
            procs.append(p)
            return p

        def line(p, prefix, timeout=300):
            deadline = time.monotonic() + timeout
            sel = selectors.DefaultSelector()
            sel.register(p.stdout, selectors.EVENT_READ)
            try:
                while True:
                    left = deadline - time.monotonic()
                    assert left > 0 and sel.select(left), "process %d: no %r line in %d s" % (
                        p.pid, prefix, timeout)
                    s = p.stdout.readline()
                    assert s, "process %d ended: %s" % (p.pid, p.stderr.read())
                    if s.startswith(prefix):
                        return s[len(prefix):].strip()
            finally:
                sel.close()

        try:
            foreign = start([os.path.join(tree.path, "foreign.py")])
            line(foreign, "READY")
            workers = [start(["-m", "krex.run", os.path.join(tree.path, "worker.py"), KB, pids])
                       for pids in ("1,40", "40,1")]
            results = [json.loads(line(w, "RESULT ")) for w in workers]
            for w in workers:
                w.stdin.write("exit\n")
                w.stdin.flush()
            for w in workers:
                assert w.wait(120) == 0, w.stderr.read()
            worker_pids = {r["pid"] for r in results}
            for r in results:
                assert len(r["calls"]) >= 6, r
                for c in r["calls"]:
                    assert c["new_region"] and c["level"].startswith("gate+drain"), c
                    assert c["median_ms"] > 0, c
                    assert not worker_pids & set(c["foreign_pids"]), (
                        "a krex worker was reported foreign", c, worker_pids)
                    if c["foreign_checked"]:
                        assert foreign.pid in c["foreign_pids"], (foreign.pid, c)
                        assert "-shared(" in c["level"], c
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(10)
            cleanup(name)


if __name__ == "__main__":
    import run_tests
    raise SystemExit(run_tests.main([os.path.abspath(__file__)]))
