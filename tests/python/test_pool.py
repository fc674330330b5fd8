# SPDX-License-Identifier: Apache-2.0
"""krex.Pool on the host backend: the KernelBench-style example
(python/examples/kernelbench_pool.py) with every region at full protection,
persistent workers per device, submit_to, exceptions that propagate, a
killed worker replaced with its task failed, and the user errors.

The pool's workers are spawned processes (they join; the test process does
not), so the test process can own the pool itself."""

import json
import os
import signal
import subprocess
import sys
import time

import krex
from pyutil import cleanup, segment, unique_name

import pool_tasks

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "python", "examples", "kernelbench_pool.py")
LIGHT_ENV = {"KREX_FREEZE": "none", "KREX_PIN": "0", "KREX_CONFINE": "0",
             "KREX_LOCK_WAIT_MS": "30000"}


def light(name, **kw):
    opts = dict(segment=name, freeze="none", pin=False, confine=False, lock_wait_ms=30000)
    opts.update(kw)
    return opts


def wait_for(pred, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def run_example(name, *args, extra_env=None, light_env=True):
    env = dict(os.environ, KREX_SEGMENT=name, **(LIGHT_ENV if light_env else {}))
    env.update(extra_env or {})
    p = subprocess.run([sys.executable, EXAMPLE, *args], env=env, capture_output=True,
                       text=True, timeout=180)
    assert p.returncode == 0, (p.stdout, p.stderr)
    results = [json.loads(ln[len("RESULT "):]) for ln in p.stdout.splitlines()
               if ln.startswith("RESULT ")]
    summary = [json.loads(ln[len("SUMMARY "):]) for ln in p.stdout.splitlines()
               if ln.startswith("SUMMARY ")]
    assert len(summary) == 1, p.stdout
    return results, summary[0]


def _failure(f, kind):
    """The exception of type `kind` that future `f` raises; it must raise one."""
    try:
        f.result(timeout=30)
    except kind as e:
        return e
    raise AssertionError("no exception")


def test_kernelbench_example_runs_every_candidate_in_persistent_workers_at_full_protection():
    name = unique_name("pypool-ex")
    try:
        results, summary = run_example(name, "--workers", "2", "--candidates", "12")
        assert summary["shape"] == "krex.Pool" and summary["candidates"] == 12, summary
        assert len(results) == 12
        assert summary["processes"] <= 2, "two persistent workers ran every candidate"
        correct = [r for r in results if r["correct"]]
        assert len(correct) == 9 and all(r["candidate"].startswith("wrong") is False
                                         for r in correct), results
        for r in correct:
            # Full protection on the host backend with freeze/pin off: gate and drain.
            assert r["level"].startswith("gate+drain"), r
            assert r["median_ms"] > 0
        # Over two virtual devices, devices='all': both devices serve candidates.
        results, summary = run_example(name, "--workers", "1", "--devices", "all",
                                       "--candidates", "8",
                                       extra_env={"KREX_HOST_DEVICES": "2"})
        assert {r["device"] for r in results} == {0, 1}, results
        assert summary["processes"] == 2
        assert all(r["level"].startswith("gate+drain") for r in results if r["correct"])
        # krex's defaults (freeze auto, pin on): what this machine allows, in every region
        # (here: gate+drain+freeze(cgroup2)+pin).
        results, summary = run_example(name, "--workers", "2", "--candidates", "6",
                                       light_env=False)
        levels = {r["level"] for r in results if r["correct"]}
        assert len(levels) == 1 and levels.pop().startswith("gate+drain"), results
    finally:
        cleanup(name)


def test_workers_are_tenants_of_their_devices_and_persist():
    with segment("pypool-dev") as name, \
            krex.Pool(workers=2, devices=[1, 0], **light(name, host_devices=2)) as pool:
        assert pool.devices == [1, 0]
        ws = pool.workers()
        assert [w["device"] for w in ws] == [1, 1, 0, 0]
        pids = {w["pid"] for w in ws}
        assert len(pids) == 4 and all(w["alive"] for w in ws)
        for d in (0, 1):
            for _ in range(4):
                got = pool.submit_to(d, "pool_tasks:where").result(timeout=30)
                assert got["device"] == d and got["joined"], got
                assert got["pid"] in pids
        seen = list(pool.map(pool_tasks.where, range(0)))  # map with nothing: fine
        assert seen == []
        out = [pool.submit(pool_tasks.timed, 1000) for _ in range(8)]
        for f in out:
            level, ms = f.result(timeout=30)
            assert level.startswith("gate+drain") and ms > 0
            assert f.krex_info["device"] in (0, 1)
        s = pool.stats()
        assert s["submitted"] == 16 and s["ok"] == 16 and s["failures"] == 0, s
        assert s["workers"] == 4 and s["alive"] == 4
        assert [d["device"] for d in s["devices"]] == [1, 0]
        assert sum(d["commands"] for d in s["devices"]) == 16
        assert {w["pid"] for w in pool.workers()} == pids, "no worker was replaced"


def test_a_workers_tenant_is_its_process_tenant_for_patched_calls():
    # A task that patches and calls a timing function runs it in a region of
    # the worker's own tenant (joined before any task), never a second tenant
    # joined by the patched call, also with KREX_PATCH_JOIN=1 (patch() would
    # join at once) and with the pool's patch=True.
    name = unique_name("pypool-pt")
    saved = os.environ.get("KREX_PATCH_JOIN")
    os.environ["KREX_PATCH_JOIN"] = "1"  # the workers inherit it
    try:
        for patch in (False, True):
            with krex.Pool(workers=1, patch=patch, **light(name)) as pool:
                got = pool.submit(pool_tasks.patched_call).result(timeout=60)
                assert got["inside"] is True and got["level"].startswith("gate+drain"), got
                assert got["same"] is True and got["joined_by_patch"] == 0, (patch, got)
    finally:
        if saved is None:
            os.environ.pop("KREX_PATCH_JOIN", None)
        else:
            os.environ["KREX_PATCH_JOIN"] = saved
        cleanup(name)


def test_exceptions_propagate_and_the_worker_goes_on():
    with segment("pypool-exc") as name, krex.Pool(workers=1, **light(name)) as pool:
        pid = pool.workers()[0]["pid"]
        f = pool.submit("pool_tasks:fail", 7)
        e = _failure(f, pool_tasks.CandidateError)
        assert "candidate 7 is broken" in str(e)
        assert "Traceback" in str(e.__cause__), "the worker's traceback is the cause"
        try:
            list(pool.map("pool_tasks:fail", [1, 2]))
            raise AssertionError("map did not raise")
        except pool_tasks.CandidateError:
            pass
        f = pool.submit("pool_tasks:unpicklable")
        e = _failure(f, krex.PoolError)
        assert "cannot be pickled" in str(e) and e.step == "pool", e
        f = pool.submit("pool_tasks:no_such_function")
        e = _failure(f, AttributeError)
        assert "no_such_function" in str(e)
        assert pool.submit("pool_tasks:where").result(timeout=30)["pid"] == pid
        s = pool.stats()
        # map cancels what it did not reach: its second task failed or was cancelled.
        assert s["failures"] + s["cancelled"] == 5 and s["failures"] >= 4, s
        assert s["ok"] == 1, s


def test_a_killed_worker_is_replaced_and_its_task_fails_clearly():
    with segment("pypool-kill") as name, \
            krex.Pool(workers=1, devices=[0, 1], **light(name, host_devices=2)) as pool:
        f = pool.submit_to(1, "pool_tasks:sleep", 60)
        assert wait_for(lambda: pool.stats()["devices"][1]["busy"] == 1)
        victim = [w for w in pool.workers() if w["device"] == 1][0]
        assert victim["running"] == "pool_tasks:sleep"
        other = [w for w in pool.workers() if w["device"] == 0][0]["pid"]
        os.kill(victim["pid"], signal.SIGKILL)
        e = _failure(f, krex.WorkerDied)
        msg = str(e)
        assert "died while running 'pool_tasks:sleep'" in msg, msg
        assert "SIGKILL" in msg and "device 1" in msg and "replaced" in msg, msg
        assert isinstance(e, krex.Error)
        assert wait_for(lambda: pool.stats()["devices"][1]["alive"] == 1)
        again = pool.submit_to(1, "pool_tasks:where").result(timeout=30)
        assert again["device"] == 1 and again["pid"] != victim["pid"]
        s = pool.stats()
        assert s["devices"][1]["respawns"] == 1 and s["devices"][1]["failures"] == 1, s
        assert s["devices"][0]["respawns"] == 0
        assert [w for w in pool.workers() if w["device"] == 0][0]["pid"] == other
        # A task that ends its own worker fails the same way.
        f = pool.submit_to(0, "pool_tasks:exit_now", 3)
        e = _failure(f, krex.WorkerDied)
        assert "exit status 3" in str(e), e
    assert wait_for(lambda: _gone(again["pid"]) and _gone(other), 10)


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:  # a zombie of ours counts as gone
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return True


def test_timeout_kills_the_worker_and_fails_the_task():
    with segment("pypool-to") as name, krex.Pool(workers=1, timeout=0.5, **light(name)) as pool:
        pid = pool.workers()[0]["pid"]
        f = pool.submit("pool_tasks:sleep", 30)
        e = _failure(f, krex.WorkerDied)
        assert "timeout" in str(e), e
        assert pool.submit("pool_tasks:where").result(timeout=30)["pid"] != pid


def test_user_errors_are_clear():
    name = unique_name("pypool-err")
    try:
        for kwargs, text in (({"workers": 0}, "1..256"), ({"context": "fork"}, "spawn"),
                             ({"devices": []}, "non-empty"), ({"devices": [0, 0]}, "distinct")):
            try:
                krex.Pool(**kwargs, **light(name))
                raise AssertionError("accepted %r" % kwargs)
            except krex.PoolError as e:
                assert text in str(e), (kwargs, e)
        try:
            krex.Pool(devices=[0, 3], start_timeout=60, **light(name, host_devices=2))
            raise AssertionError("a device the backend lacks was accepted")
        except krex.PoolError as e:
            assert "could not start" in str(e) and "device 3" in str(e), e
        with krex.Pool(workers=1, **light(name)) as pool:
            for bad, text in ((lambda: pool.submit(lambda: 1), "top-level"),
                              (lambda: pool.submit("no-colon"), "module:function"),
                              (lambda: pool.submit_to(5, "pool_tasks:where"), "device 5")):
                try:
                    bad()
                    raise AssertionError(text)
                except (TypeError, krex.PoolError) as e:
                    assert text in str(e), e
        try:
            pool.submit("pool_tasks:where")
            raise AssertionError("submit after shutdown")
        except krex.PoolError as e:
            assert "after shutdown" in str(e)
    finally:
        cleanup(name)
