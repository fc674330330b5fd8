# SPDX-License-Identifier: Apache-2.0
"""krex for cuda.bench (nvbench's Python API): one region around each State.exec.

    import cuda.bench as bench
    import krex.nvbench

    def copy(state):
        ...                                            # inputs: beside the other processes
        krex.nvbench.exec(state, lambda launch: kernel(launch.get_stream()))  # was state.exec(...)

    bench.register(copy)
    bench.run_all_benchmarks(sys.argv)

exec(state, fn, **kwargs) takes what ``State.exec`` takes (``batched=``,
``sync=``, ``timer=``) and calls it inside a region of the process-wide
tenant (``krex.process_tenant``, shared with krex.patch()) on the state's
device: nvbench's cold and batch measurements, their warm-ups and L2 flushes
run with the device and a quiet CPU to themselves. The state then gets two
columns: "krex" (the protection reached, with " | WARNING (n): ..." when the
region saw something that may have disturbed it) and "krex Wait (s)" (how
long the region took to begin: other processes' turns, then its steps);
nvbench's JSON has them as summaries tagged nv/python/krex and
nv/python/krex Wait (s).

For a script you do not change, ``krex.nvbench.patch()`` (before
run_all_benchmarks) makes ``cuda.bench.State.exec`` itself do this;
``unpatch()`` restores it. KREX_NVBENCH_REGIONS=0 turns krex off (column
"krex" reads "unprotected"): the control run. A call made inside a region
(an explicit ``krex.region``, a patched call) goes straight through.
"""

import importlib
import os
import threading

from . import _krex

__all__ = ["exec", "patch", "unpatch", "patched", "last_report"]

_lock = threading.RLock()
_state = {"original": None, "cls": None, "last_report": None, "regions": 0}


def _package():
    import krex
    return krex


def _regions_on():
    """KREX_NVBENCH_REGIONS: unset or "1" -> True, "0" -> False; else krex.Error."""
    v = os.environ.get("KREX_NVBENCH_REGIONS")
    if v is None or v == "1":
        return True
    if v == "0":
        return False
    raise _krex.Error("krex: options: invalid value '%s' for KREX_NVBENCH_REGIONS — set "
                      "KREX_NVBENCH_REGIONS=1 (regions, the default) or 0 (krex off: a "
                      "control run)" % v)


def _label(report):
    label = report["level"]
    warnings = report.get("warnings") or []
    if warnings:
        label += " | WARNING (%d): %s" % (len(warnings), warnings[0])
    return label


def _wait_s(report):
    ns = sum(report.get(k, 0) for k in ("lock_ns", "gate_ns", "drain_ns", "freeze_ns",
                                         "quiet_ns", "pin_ns"))
    return ns / 1e9


def _original_exec(state):
    with _lock:
        original = _state["original"]
    return original if original is not None else type(state).exec


def exec(state, fn, /, **kwargs):  # noqa: A001 (the name of what it wraps)
    """``state.exec(fn, **kwargs)`` inside a krex region on the state's device,
    then the columns "krex" and "krex Wait (s)" added to the state. Raises
    krex.Error when krex cannot protect the measurement (nvbench then
    reports the state as failed)."""
    original = _original_exec(state)
    pkg = _package()
    if not callable(fn):
        raise TypeError("krex.nvbench.exec(state, fn): fn must be callable (it receives "
                        "nvbench's Launch), not %r" % (fn,))
    on = _regions_on()
    if state.is_skipped() or pkg.in_region():
        return original(state, fn, **kwargs)
    if not on:
        result = original(state, fn, **kwargs)
        state.add_summary("krex", "unprotected")
        return result
    # A CPU-only state (no device): the process tenant's own default device.
    tenant = pkg.process_tenant(state.get_device())
    with pkg.region(tenant) as r:
        result = original(state, fn, **kwargs)
    report = r.report
    with _lock:
        _state["last_report"] = report
        _state["regions"] += 1
    state.add_summary("krex", _label(report))
    state.add_summary("krex Wait (s)", _wait_s(report))
    return result


def _wrapped_exec(self, fn, /, **kwargs):
    return exec(self, fn, **kwargs)



def patch(state_class=None):
    """Makes ``cuda.bench.State.exec`` run each call in a region (as exec()
    does). Loads cuda.bench's extension (it needs a CUDA driver). Idempotent."""
    with _lock:
        if _state["original"] is not None:
            return
        if state_class is None:
            # importlib: cuda-bench is optional (and mypy need not find it)
            state_class = importlib.import_module("cuda.bench").State
        original = state_class.exec
        if original is _wrapped_exec:  # already ours
            return
        _state["original"] = original
        _state["cls"] = state_class
        state_class.exec = _wrapped_exec


def unpatch():
    """Restores ``State.exec`` as patch() found it."""
    with _lock:
        if _state["original"] is None:
            return
        _state["cls"].exec = _state["original"]
        _state["original"] = None
        _state["cls"] = None


def patched():
    """Whether State.exec is patched."""
    with _lock:
        return _state["original"] is not None


def last_report():
    """The report (dict) of the last region exec() held, or None."""
    with _lock:
        return _state["last_report"]
