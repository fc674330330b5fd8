# SPDX-License-Identifier: Apache-2.0
"""krex on Ray: actors that join krex on the GPU Ray assigned them.

Ray's fractional GPUs (``num_gpus=1/8``) put several actors on one GPU with
nothing between their timed loops. A ``krex.ray`` worker joins krex once, on
the GPU Ray gave it, keeps its tenant (and CUDA context) for its lifetime,
and times each candidate inside a region: the regions of every actor on that
GPU, whatever job they belong to, are exclusive, and their siblings are
gated, drained and (by default) frozen while one measures.

    import ray, krex.ray
    ray.init()
    Worker = krex.ray.worker(num_gpus=1 / 8)          # a Ray actor class
    workers = [Worker.remote() for _ in range(8)]
    results = krex.ray.evaluate(workers, candidates)  # setup outside, timing inside a region

A candidate is a callable that does its setup (compile, inputs, check)
outside the region and returns the function to time: ``fn = candidate()``.
``Worker.run(candidate)`` returns a dict: ``measure`` (krex.measure's dict),
``report`` (the region's report), ``enter_ns`` / ``exit_ns``
(CLOCK_MONOTONIC, node-wide, when the region was entered and left), ``device``,
``pid`` and ``setup_s``. ``Worker.call(fn)`` runs any callable inside a region
(a harness that times itself, e.g. ``triton.testing.do_bench``).

Device: ``ray.get_gpu_ids()``'s first GPU. On the CUDA backend Ray sets
CUDA_VISIBLE_DEVICES to the assigned GPUs, so that GPU is the process's
ordinal 0 (krex identifies GPUs node-wide by UUID: actors with different
CUDA_VISIBLE_DEVICES meet at the same gate). On the host backend the GPU id
is the host virtual device's index (``KREX_HOST_DEVICES`` or
``host_devices=``), so ``ray.init(num_gpus=N)`` on a machine without GPUs
works for tests. An actor with no GPU (a custom resource instead) uses
``device=`` or 0.

Ray is imported only when a function of this module is called: ``import
krex`` (and ``import krex.ray``) works without it. docs/FLEET.md has the
recipes (Ray, Slurm, Kubernetes).
"""

import os
import sys
import time

import krex

__all__ = ["assigned_device", "Worker", "worker", "evaluate"]


def _ray():
    try:
        import ray  # noqa: PLC0415 (lazy: krex works without Ray)
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("krex.ray needs Ray: pip install 'ray' (krex itself works without it)") from e
    return ray


def assigned_device(default=0):
    """The krex device index of the first GPU Ray assigned the calling actor
    or task; ``default`` when Ray assigned none (custom resources, CPU-only)."""
    ids = _ray().get_gpu_ids()
    if not ids:
        return default
    if krex.backend == "cuda":
        # Ray sets CUDA_VISIBLE_DEVICES to the assigned GPUs: the first is ordinal 0,
        # unless the user overrode the variable; then find it in the list.
        visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        first = str(ids[0])
        return visible.index(first) if first in visible else 0
    try:
        return int(ids[0])  # host backend: the GPU id names the host virtual device
    except (TypeError, ValueError):
        raise ValueError("krex.ray: Ray's GPU id %r is not a number; pass device= explicitly"
                         % (ids[0],)) from None


class Worker:
    """Joins krex on the GPU Ray assigned this actor and keeps the tenant.

    ``Worker(device=None, patch=False, **tenant_options)``: ``device`` None
    means ``assigned_device()``; the options are krex.Tenant's (``segment``,
    ``freeze``, ``pin``, ...; ``KREX_*`` variables still apply). The actor
    joins in its constructor, before any of its methods runs, and its tenant
    is the process tenant (``krex.process_tenant()``); ``patch=True`` calls
    ``krex.patch()`` in the actor, so patched timing functions
    (``triton.testing.do_bench``, KernelBench's) called by its methods run in
    regions of that tenant. Make it an actor with
    ``krex.ray.worker(num_gpus=...)`` or ``ray.remote(...)(Worker)``.
    """

    def __init__(self, device=None, patch=False, **tenant_options):
        if device is None:
            device = assigned_device()
        self.tenant = krex.Tenant(device=device, **tenant_options)
        # The actor's tenant is the process tenant: krex.process_tenant() and
        # patched timing calls use it instead of joining a second one.
        sys.modules["krex.patch"]._adopt(self.tenant)
        if patch:
            krex.patch(device=self.tenant.device, **tenant_options)

    def info(self):
        """Where this actor measures: pid, device, slot, segment, freeze method."""
        t = self.tenant
        return {"pid": os.getpid(), "device": t.device, "slot": t.slot,
                "segment": t.segment_name, "freeze": t.freeze, "joined": t.joined}

    def run(self, candidate, warmup=3, samples=50, timer="auto", **measure_options):
        """Sets the candidate up outside the region (``fn = candidate()``), then
        times ``fn`` with krex.measure inside one."""
        t0 = time.monotonic()
        fn = candidate()
        setup_s = time.monotonic() - t0
        with krex.region(self.tenant) as r:
            enter_ns = time.monotonic_ns()
            m = krex.measure(r, fn, warmup=warmup, samples=samples, timer=timer, **measure_options)
            exit_ns = time.monotonic_ns()
        return {"measure": m, "report": dict(r.report), "enter_ns": enter_ns, "exit_ns": exit_ns,
                "device": self.tenant.device, "pid": os.getpid(), "setup_s": setup_s}

    def call(self, fn, *args, **kwargs):
        """Runs ``fn(*args, **kwargs)`` inside a region; returns its result, the
        region's report and the enter/exit stamps."""
        with krex.region(self.tenant) as r:
            enter_ns = time.monotonic_ns()
            value = fn(*args, **kwargs)
            exit_ns = time.monotonic_ns()
        return {"value": value, "report": dict(r.report), "enter_ns": enter_ns, "exit_ns": exit_ns,
                "device": self.tenant.device, "pid": os.getpid()}

    def leave(self):
        """Leaves krex now (the actor can then be killed without a stale slot)."""
        self.tenant.leave()
        return True


def worker(**ray_options):
    """``Worker`` as a Ray actor class with these ``ray.remote`` options, e.g.
    ``krex.ray.worker(num_gpus=1 / 8)``."""
    return _ray().remote(**ray_options)(Worker)


def evaluate(workers, candidates, **run_options):
    """Runs every candidate on the actors (round robin, each actor one at a
    time in order) and returns the results in the candidates' order."""
    if not workers:
        raise ValueError("krex.ray.evaluate: no workers")
    ray = _ray()
    refs = [workers[i % len(workers)].run.remote(c, **run_options) for i, c in enumerate(candidates)]
    return ray.get(refs)
