# SPDX-License-Identifier: Apache-2.0
"""krex for Python: concurrent kernel benchmarking on shared GPU nodes.

    import krex
    t = krex.Tenant(device=0)                 # joins the node (KREX_* env overrides)
    with krex.region(t) as r:                 # lock -> gate -> drain -> freeze -> pin
        m = krex.measure(r, lambda: fn(x))    # warm-up + samples, inside the region
    print(r.report["level"], m["median_ms"])

Harnesses that time through triton.testing.do_bench or KernelBench's timing
functions need no change: ``krex.patch()`` (or ``python -m krex.run script.py``)
runs every such call inside a region of a process-wide tenant.

Persistent workers that keep their tenant (and CUDA context) across tasks:
``with krex.Pool(workers=4, devices="all") as pool: pool.map(fn, items)``.

See docs/PYTHON.md.
"""

import sys as _sys
import threading as _threading

from ._krex import Error, Region, Tenant, backend
from ._krex import compare as _compare
from ._krex import measure as _measure
from ._krex import prepare_measure

__all__ = ["Error", "Tenant", "backend", "region", "measure", "compare", "prepare_measure", "patch",
           "unpatch", "patched",
           "process_tenant", "last_report", "in_region", "Pool", "PoolError", "WorkerDied",
           "worker_tenant"]

__version__ = "0.1.0"

_local = _threading.local()


def in_region():
    """Whether the calling thread is inside a krex region (explicit or patched)."""
    return getattr(_local, "depth", 0) > 0


class region:
    """A region on ``tenant``'s device: ``with krex.region(t) as r:``.

    Entry waits (with the GIL released) for the device's FIFO region lock, then
    gates, drains and freezes the device's other tenants and pins this thread;
    exit undoes every step, also with the GIL released. ``r.report`` is a dict
    (level, epoch, siblings_*, *_ns, frozen_pids, notes, warnings, lease_lost,
    ...). Raises krex.Error. A normal exit raises krex.Error if the region's
    lease was lost (the body was not protected to its end); an exit by
    exception leaves the body's exception alone.
    """

    def __init__(self, tenant):
        self._r = Region(tenant)

    def __enter__(self):
        self.enter()
        return self

    def __exit__(self, exc_type, exc, tb):
        _local.depth = getattr(_local, "depth", 1) - 1
        self._r.__exit__(exc_type, exc, tb)
        return False

    def enter(self):
        self._r.enter()
        _local.depth = getattr(_local, "depth", 0) + 1

    def exit(self):
        _local.depth = getattr(_local, "depth", 1) - 1
        self._r.exit()

    @property
    def report(self):
        """What the region did (a dict; the exit fields once it has ended)."""
        return self._r.report

    @property
    def active(self):
        return self._r.active

    @property
    def tenant(self):
        return self._r.tenant


def _default_stream(stream, timer):
    if stream is None and backend == "cuda" and timer != "host":
        torch = _sys.modules.get("torch")
        if torch is not None and torch.cuda.is_initialized():
            stream = torch.cuda.current_stream()
    return stream


def measure(r, fn, warmup=3, samples=50, warmup_ms=0.0, timer="auto", stream=None,
            cold_l2=True, flush_bytes=0, placements=1, placement_bytes=0):
    """Times ``fn()`` inside the entered region ``r`` (krex::measure).

    Returns a dict: samples_ms (every sample), median_ms, p5_ms, p95_ms,
    mean_ms, min_ms, max_ms, method, and the placements' bookkeeping:
    placement (each sample's), placement_median_ms, placement_spread,
    placement_bytes.

    timer='host' (and every timer on the host backend): the host clock around
    each call. On a CUDA build, timer='auto' (or 'cuda') records CUDA events
    around each call on ``stream`` with the L2 flushed before each sample
    (outside the events), so ``fn`` must enqueue its work on that stream.
    ``stream`` is an int handle or an object with ``.cuda_stream`` (a
    torch.cuda.Stream); when None and PyTorch is imported and initialized,
    PyTorch's current stream; else the legacy default stream (0). krex never
    imports PyTorch itself.

    placements=K > 1: ``fn(p)`` is called with the placement index p
    (sample % K) and must run on copy p of its inputs (docs/COMPARE.md);
    placement_bytes (what the K copies cost) is reported back.
    """
    stream = _default_stream(stream, timer)
    if isinstance(r, region):
        r = r._r
    return _measure(r, fn, warmup=warmup, samples=samples, warmup_ms=warmup_ms, timer=timer,
                    stream=stream, cold_l2=cold_l2, flush_bytes=flush_bytes,
                    placements=placements, placement_bytes=placement_bytes)


def compare(r, fns, names=None, warmup=3, samples=200, warmup_ms=0.0, timer="auto", stream=None,
            cold_l2=True, flush_bytes=0, placements=1, placement_bytes=0, tolerance=0.005,
            confidence=0.99, seed=1):
    """Times two or more candidates inside the entered region ``r``,
    interleaved sample by sample (krex::compare: ABBA BAAB for two, a seeded
    shuffle per round for more, every candidate on the same placements), and
    compares each with the first.

    ``fns``: a list of callables, or a dict {name: callable}. Returns a dict:
    names; candidates (a krex.measure dict each); vs_first (per candidate:
    pairs, ratio = median of its paired ratios to the first, low/high (the
    interval), coverage, diff_ms, verdict: 'baseline', 'faster', 'slower',
    'same' (the interval within 1 +- tolerance) or 'unsure'); order (the
    candidate of each sample in time); method. The other keywords are
    krex.measure's. Use it to decide between close candidates (docs/COMPARE.md).
    """
    if isinstance(fns, dict):
        if names is not None:
            raise TypeError("krex.compare: give names either as the dict's keys or as names=, "
                            "not both")
        names = [str(k) for k in fns]
        fns = list(fns.values())
    stream = _default_stream(stream, timer)
    if isinstance(r, region):
        r = r._r
    return _compare(r, list(fns), names=names, warmup=warmup, samples=samples,
                    warmup_ms=warmup_ms, timer=timer, stream=stream, cold_l2=cold_l2,
                    flush_bytes=flush_bytes, placements=placements,
                    placement_bytes=placement_bytes, tolerance=tolerance, confidence=confidence,
                    seed=seed)


from .patch import last_report, patch, patched, process_tenant, unpatch  # noqa: E402
from .pool import Pool, PoolError, WorkerDied, worker_tenant  # noqa: E402
