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
