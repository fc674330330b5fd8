# SPDX-License-Identifier: Apache-2.0
"""krex.ray on a local Ray cluster (host backend, one declared GPU): actors
that share the GPU through fractional num_gpus join krex on it, and their
regions never overlap in time, while the same actors' unprotected work does;
with patch=True, patched timing calls in an actor use the actor's tenant.
Skips when Ray is not installed."""

import importlib
import os
import time
import unittest

import krex
from pyutil import cleanup, unique_name

try:
    import ray
except ImportError:  # the skip below says what to do
    ray = None

ACTORS = 4
PER_ACTOR = 4


def _need_ray():
    if ray is None:
        raise unittest.SkipTest("Ray is not installed: pip install ray (scripts/ci/test-python.sh "
                                "installs it unless KREX_PY_RAY=OFF; docs/FLEET.md)")
    if krex.backend != "host":
        raise unittest.SkipTest("the Ray test declares a GPU resource for the host backend; "
                                "this krex is the %s backend" % krex.backend)
    return importlib.import_module("krex.ray")


def _overlaps(intervals):
    """Pairs of (start, end, who) intervals from different actors that overlap."""
    s = sorted(intervals)
    return [(a, b) for a, b in zip(s, s[1:]) if b[0] < a[1] and a[2] != b[2]]


def _busy(ms):
    t = time.monotonic_ns()
    end = t + int(ms * 1e6)
    while time.monotonic_ns() < end:
        pass
    return t, time.monotonic_ns()


def test_regions_of_actors_on_one_ray_gpu_are_exclusive():
    kray = _need_ray()
    name = unique_name("pyray")

    # krex.ray.Worker plus an unprotected call, for the control below.
    busy = _busy

    class Probe(kray.Worker):
        def free(self, ms):
            a, b = busy(ms)
            return {"enter_ns": a, "exit_ns": b, "pid": os.getpid()}

        def patched(self):
            # A timing function patched in the actor (Worker(patch=True) called
            # krex.patch()): its region is the actor's tenant's, not a second one's.
            import sys
            import types
            mod = types.ModuleType("krex_test_timing")
            mod.bench = lambda: krex.in_region()
            sys.modules["krex_test_timing"] = mod
            krex.patch(also=[("krex_test_timing", "bench")])
            return {"inside": mod.bench(), "level": krex.last_report()["level"],
                    "same": krex.process_tenant() is self.tenant,
                    "joined_by_patch": len(sys.modules["krex.patch"]._state["tenants"])}

    # Ray's workers import this module (and pyutil) for the classes defined here,
    # and krex from where this process found it: an installed wheel, or the
    # build tree on PYTHONPATH (ctest python_tests), which the runtime_env's
    # PYTHONPATH would otherwise replace.
    here = os.path.dirname(os.path.abspath(__file__))
    path = [here, os.path.dirname(os.path.dirname(os.path.abspath(krex.__file__)))]
    path += [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False,
             configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(path)}})
    workers = []
    try:
        assert ray.cluster_resources().get("GPU") == 1.0
        Actor = ray.remote(num_gpus=1 / ACTORS, num_cpus=0)(Probe)
        # Freezing on (this machine's default method; scope all: the host backend's
        # siblings submit nothing, and scope device would freeze none), pinning off (2 cores).
        workers = [Actor.remote(segment=name, scope="all", pin=False, confine=False,
                                lock_wait_ms=60000, lease_ms=60000, patch=True)
                   for _ in range(ACTORS)]
        infos = ray.get([w.info.remote() for w in workers], timeout=120)
        pids = {i["pid"] for i in infos}
        assert len(pids) == ACTORS, infos
        assert {i["device"] for i in infos} == {0}, "Ray's GPU 0 is host device 0: %s" % infos
        assert len({i["slot"] for i in infos}) == ACTORS, infos
        assert all(i["joined"] and i["segment"].endswith(name) for i in infos), infos

        # The control: the same actors, 40 ms of work each, no region, called at
        # once: they overlap (else the exclusivity below would prove nothing).
        spans = []
        for _ in range(3):
            spans += ray.get([w.free.remote(40) for w in workers], timeout=60)
            if _overlaps([(s["enter_ns"], s["exit_ns"], s["pid"]) for s in spans]):
                break
        assert _overlaps([(s["enter_ns"], s["exit_ns"], s["pid"]) for s in spans]), \
            "unprotected calls never overlapped: this test could not see an overlap"

        # Candidates: setup outside the region (returns the timed function), then
        # 1 warm-up and 4 samples of 5 ms inside one; every actor at once.
        def make_candidate(ms):
            def candidate():
                return lambda: busy(ms)
            return candidate

        results = kray.evaluate(workers, [make_candidate(5) for _ in range(ACTORS * PER_ACTOR)],
                                warmup=1, samples=4, timer="host")
        assert len(results) == ACTORS * PER_ACTOR
        assert {r["pid"] for r in results} == pids, "every actor measured"
        for r in results:
            assert r["measure"]["median_ms"] >= 4.5, r["measure"]
            assert r["exit_ns"] > r["enter_ns"]
            assert r["report"]["level"], r["report"]
        bad = _overlaps([(r["enter_ns"], r["exit_ns"], r["pid"]) for r in results])
        assert not bad, "regions of different actors overlapped: %s" % bad[:3]
        # Where cgroups freeze (this machine as root), the holders froze the other actors.
        if infos[0]["freeze"] in ("cgroup2", "cgroup1"):
            frozen = {p for r in results for p in r["report"]["frozen_pids"]}
            assert frozen == pids, (frozen, pids)
            assert all(r["pid"] not in r["report"]["frozen_pids"] for r in results)
            assert all("freeze" in r["report"]["level"] for r in results), results[0]["report"]

        # call(): any function in a region, with its value.
        got = ray.get(workers[0].call.remote(lambda x: x + 1, 41), timeout=60)
        assert got["value"] == 42 and got["report"]["level"], got

        # patch=True: patched timing calls in the actor use the actor's tenant.
        got = ray.get(workers[1].patched.remote(), timeout=60)
        assert got["inside"] is True and got["level"].startswith("gate+drain"), got
        assert got["same"] is True and got["joined_by_patch"] == 0, got

        assert all(ray.get([w.leave.remote() for w in workers], timeout=60))
    finally:
        ray.shutdown()
        cleanup(name)


def test_krex_and_krex_ray_import_without_ray():
    # krex never imports Ray itself; krex.ray imports it only when used.
    import subprocess
    import sys
    code = ("import sys, krex, krex.ray\n"
            "assert 'ray' not in sys.modules, 'krex imported ray'\n"
            "assert callable(krex.ray.worker) and krex.ray.Worker\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
