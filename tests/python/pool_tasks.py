# SPDX-License-Identifier: Apache-2.0
"""Tasks for tests/python/test_pool.py: krex.Pool workers import this module
by name ("pool_tasks:where"), so it must stay importable on its own."""

import os
import time

import krex


class CandidateError(Exception):
    """A task's own exception type: must reach the harness as itself."""


def where():
    t = krex.worker_tenant()
    return {"device": t.device, "pid": os.getpid(), "slot": t.slot, "joined": t.joined}


def fail(x):
    raise CandidateError("candidate %s is broken" % x)


def sleep(seconds):
    time.sleep(seconds)
    return seconds


def exit_now(code):
    os._exit(code)


def unpicklable():
    return lambda: None


def timed(n):
    t = krex.worker_tenant()
    with krex.region(t) as r:
        m = krex.measure(r, lambda: sum(range(n)), warmup=1, samples=3)
    return r.report["level"], m["median_ms"]


def patched_call():
    """A task that patches a timing function itself (krex.patch(also=...)) and
    calls it: which tenant its region used, and how many the process has."""
    import sys
    import types
    mod = types.ModuleType("krex_test_timing")
    mod.bench = lambda: krex.in_region()
    sys.modules["krex_test_timing"] = mod
    krex.patch(also=[("krex_test_timing", "bench")])
    inside = mod.bench()
    return {"inside": inside, "level": krex.last_report()["level"],
            "same": krex.process_tenant() is krex.worker_tenant(),
            "joined_by_patch": len(sys.modules["krex.patch"]._state["tenants"])}
