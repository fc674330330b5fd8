# SPDX-License-Identifier: Apache-2.0
"""krex.Tenant, krex.region, r.report, krex.measure and krex.Error, with real
processes on a real segment (the host backend in CI)."""

import os

import krex
from pyutil import Child, child_says, cleanup, unique_name

# Light tenants for tests that are not about freezing or pinning.
LIGHT = "dict(freeze='none', pin=False, confine=False, lock_wait_ms=30000)"

# A light tenant that holds a region until it reads a line, then says "released".
HOLDER = """
    t = krex.Tenant(segment=sys.argv[1], **%s)
    with krex.region(t):
        say("held")
        sys.stdin.readline()
    say("released")
""" % LIGHT


def _expect_error(fn, step, *fragments):
    try:
        fn()
    except krex.Error as e:
        msg = str(e)
        assert e.step == step, "step %r, expected %r: %s" % (e.step, step, msg)
        for f in fragments:
            assert f in msg, "%r not in %r" % (f, msg)
        assert isinstance(e, RuntimeError)
        return e
    raise AssertionError("no krex.Error raised")


def test_module_says_its_backend():
    assert krex.backend in ("host", "cuda"), krex.backend
    assert issubclass(krex.Error, RuntimeError)


def test_bad_options_raise_krex_error_with_message_step_and_hint():
    # All of these fail while the options are read, before anything joins.
    e = _expect_error(lambda: krex.Tenant(lease_ms=0), "options", "lease", "at least 1 ms")
    assert "at least 1 ms" in e.hint
    _expect_error(lambda: krex.Tenant(freeze="sometimes"), "options", "'sometimes'", "freeze",
                  "cgroup2")
    _expect_error(lambda: krex.Tenant(segment="no/slash"), "options", "segment")
    _expect_error(lambda: krex.Tenant(device=99), "options", "device", "0..15")
    _expect_error(lambda: krex.Tenant(reserved_cores=0), "options", "reserved_cores", "1..64")
    _expect_error(lambda: krex.Tenant(colour="red"), "options", "unknown option 'colour'",
                  "lease_ms")
    # Issue 38: a keyword named after the C++ setter or the variable gets a
    # "did you mean" (and a far one none).
    for given, meant in (("lease", "lease_ms"), ("gate_mode", "gating"),
                         ("freeze_scope", "scope"), ("KREX_LOCK_WAIT_MS", "lock_wait_ms"),
                         ("quiet_deadline", "quiet_deadline_ms"), ("lease_mss", "lease_ms")):
        e = _expect_error(lambda: krex.Tenant(**{given: 1}), "options",
                          "unknown option '%s'; did you mean '%s'?" % (given, meant))
        assert e.hint.startswith("write %s=...; accepted: " % meant), e.hint
    e = _expect_error(lambda: krex.Tenant(colour="red"), "options", "unknown option 'colour'")
    assert "did you mean" not in str(e), str(e)
    # The backend has fewer devices than asked for: named, with the range to use.
    _expect_error(lambda: krex.Tenant(device=15, host_devices=1), "options", "out of range")


def _env_error(env, prefix):
    """The krex.Error (message, step, hint) of a child's join under `env`."""
    return child_says("""
        try:
            krex.Tenant(segment=sys.argv[1])
            say("joined")
        except krex.Error as e:
            say("error", {"msg": str(e), "step": e.step, "hint": e.hint})
    """, prefix, tag="error", env=env)


def test_bad_environment_value_names_the_variable():
    got = _env_error({"KREX_FREEZE": "bogus"}, "pyenv")
    assert got["step"] == "options"
    assert "KREX_FREEZE" in got["msg"] and "'bogus'" in got["msg"], got
    assert "cgroup2" in got["hint"], got


def test_misnamed_environment_variable_names_the_real_one():
    # Issue 38: KREX_SCOPE (the keyword's name, not the variable's) was ignored.
    got = _env_error({"KREX_SCOPE": "all"}, "pyenvname")
    assert got["step"] == "options", got
    assert "KREX_SCOPE is not a krex variable" in got["msg"], got
    assert "did you mean KREX_FREEZE_SCOPE?" in got["msg"], got
    assert "rename KREX_SCOPE to KREX_FREEZE_SCOPE" in got["hint"], got


def test_region_report_and_measure_round_trip_with_a_sibling():
    name = unique_name("pyrt")
    # A sibling tenant that only sits on the device (and must be frozen while
    # the region is held, then thawed), reporting a heartbeat on request.
    sib = Child("""
        t = krex.Tenant(segment=sys.argv[1], lock_wait_ms=30000)
        say("joined", {"slot": t.slot})
        for line in sys.stdin:
            if line.strip() == "ping":
                say("pong")
            else:
                break
        t.leave()
        say("left")
    """, args=[name])
    holder = None
    try:
        sib.expect("joined")
        # Only now: a region raised earlier could freeze the sibling before it says so.
        holder = Child("""
            t = krex.Tenant(segment=sys.argv[1], lock_wait_ms=30000, scope="all")
            before = t.protection_notes
            with krex.region(t) as r:
                during = r.report
                m = krex.measure(r, lambda: sum(range(2000)), warmup=2, samples=7, timer="host")
                say("inside", {"active": r.active})
                sys.stdin.readline()          # the test pings the sibling now: it must be frozen
            say("report", {"during": during, "after": r.report, "measure": m,
                           "active": r.active, "freeze": t.freeze, "notes": before})
            t.leave()
        """, args=[name])
        inside = holder.expect("inside")
        assert inside["active"] is True
        sib.send("ping")
        frozen_pong = sib.readline(1.0)
        holder.send("go")
        rep = holder.expect("report")
        after, m = rep["after"], rep["measure"]

        assert after["level"].startswith("gate+drain"), after["level"]
        assert after["gated"] and after["drained"] and not after["lease_lost"]
        assert after["epoch"] % 2 == 1 and after["epoch"] == rep["during"]["epoch"]
        assert after["siblings_seen"] == 1 and after["siblings_drained"] == 1, after
        assert after["body_ns"] > 0 and rep["during"]["body_ns"] == 0
        assert after["notes"] == rep["notes"]
        for key in ("lock_ns", "gate_ns", "drain_ns", "freeze_ns", "pin_ns", "exit_ns",
                    "frozen_pids", "warnings", "undrained_pids", "gating", "scope",
                    "freeze_broken", "unverified_pids", "body_preemptions", "quiet_checked",
                    "quiet", "quiet_ns", "quiet_wait_ns", "quiet_bursts", "quiet_first_ratio",
                    "quiet_last_ratio", "clocks_entry", "clocks_exit", "foreign_pids",
                    "foreign_checked"):
            assert key in after, key
        # The host backend has no device probe and no NVML: nothing probed, no clocks.
        assert after["quiet_checked"] is False and after["clocks_entry"] is None, after
        assert rep["active"] is False
        if rep["freeze"] != "none":
            assert after["frozen_pids"] == [sib.pid], (after["frozen_pids"], sib.pid)
            assert "freeze(" in after["level"]
            assert frozen_pong is None, "the sibling answered while frozen"
        # Thawed at exit: the sibling answers now (the frozen ping first).
        if frozen_pong is None:
            sib.expect("pong", timeout=10)
        sib.send("ping")
        sib.expect("pong", timeout=10)

        assert m["method"] == "host" and len(m["samples_ms"]) == 7
        assert m["throttled"] == [] and m["retakes"] == 0 and m["clocks_checked"] is False
        assert m["min_ms"] <= m["p5_ms"] <= m["median_ms"] <= m["p95_ms"] <= m["max_ms"]
        assert all(s > 0 for s in m["samples_ms"])
        sib.send("bye")
        sib.expect("left")
        assert holder.wait() == 0 and sib.wait() == 0
    finally:
        cleanup(name, [c for c in (holder, sib) if c is not None])


def _beside_a_holder(prefix, waiter_code, check):
    """Runs `waiter_code` in a child W while a child H holds a region of the
    same segment (HOLDER); check(H, W) talks to both and releases H; then
    both must exit 0."""
    name = unique_name(prefix)
    holder = Child(HOLDER, args=[name])
    waiter = None
    try:
        holder.expect("held")
        waiter = Child(waiter_code, args=[name])
        check(holder, waiter)
        assert holder.wait() == 0 and waiter.wait() == 0
    finally:
        cleanup(name, [c for c in (holder, waiter) if c is not None])


def test_region_entry_releases_the_gil_while_it_waits():
    """Process H holds a region; in process W a thread waits to enter one. W's
    main thread must keep running Python meanwhile. Were the GIL held during
    the wait, W's main thread would stop until H released, and W's 'ticks'
    line would not come before the test releases H."""
    def check(holder, waiter):
        got = waiter.expect("ticks", timeout=15)
        assert got["entered"] is False, ("the waiter entered while another process held the region", got)
        assert got["ticks"] > 1000, got
        holder.send("release")
        holder.expect("released")
        done = waiter.expect("joined", timeout=30)
        assert done == {"entered": True, "alive": False}, done

    _beside_a_holder("pygil", """
        t = krex.Tenant(segment=sys.argv[1], **%s)
        about_to_enter = threading.Event()
        entered = threading.Event()
        def measure_thread():
            about_to_enter.set()
            with krex.region(t) as r:
                entered.set()
        th = threading.Thread(target=measure_thread)
        th.start()
        about_to_enter.wait(10)
        time.sleep(0.2)                      # the thread is inside region entry by now
        ticks, end = 0, time.monotonic() + 0.5
        while time.monotonic() < end:
            ticks += 1
        say("ticks", {"ticks": ticks, "entered": entered.is_set()})
        th.join(30)
        say("joined", {"entered": entered.is_set(), "alive": th.is_alive()})
        t.leave()
    """ % LIGHT, check)


def test_region_wait_is_bounded_by_lock_wait():
    def check(holder, waiter):
        got = waiter.expect("error", timeout=15)
        assert got["step"] == "lock" and "timed out" in got["msg"], got
        assert str(holder.pid) in got["msg"], got
        assert got["s"] >= 0.25, got
        holder.send("release")

    _beside_a_holder("pywait", """
        t = krex.Tenant(segment=sys.argv[1], freeze="none", pin=False, confine=False,
                        lock_wait_ms=300)
        t0 = time.monotonic()
        try:
            with krex.region(t):
                say("entered")
        except krex.Error as e:
            say("error", {"step": e.step, "msg": str(e), "s": time.monotonic() - t0})
        t.leave()
    """, check)


def test_nested_region_and_misuse_are_errors():
    name = unique_name("pynest")
    c = Child("""
        t = krex.Tenant(segment=sys.argv[1], **%s)
        out = {}
        with krex.region(t) as r:
            try:
                with krex.region(t):
                    out["nested"] = "entered"
            except krex.Error as e:
                out["nested"] = [e.step, str(e)]
            out["in_region"] = krex.in_region()
            try:
                r.enter()
            except krex.Error as e:
                out["reenter"] = str(e)
        out["after"] = krex.in_region()
        try:
            krex.measure(r, lambda: None)
        except krex.Error as e:
            out["measure_after_exit"] = str(e)
        t.leave()
        try:
            krex.region(t).enter()
        except krex.Error as e:
            out["after_leave"] = str(e)
        say("out", out)
    """ % LIGHT, args=[name])
    try:
        out = c.expect("out")
        assert out["nested"][0] == "lock" and "already holds a region" in out["nested"][1], out
        assert out["in_region"] is True and out["after"] is False
        assert "entered region" in out["measure_after_exit"]
        assert "already entered" in out["reenter"], out
        assert "left the node" in out["after_leave"]
        assert c.wait() == 0
    finally:
        cleanup(name, [c])


def test_submit_runs_the_callable_through_the_gate():
    out = child_says("""
        t = krex.Tenant(segment=sys.argv[1], **%s)
        before = t.submits
        got = t.submit(lambda: 41 + 1)
        say("out", {"got": got, "submits": t.submits - before})
        t.leave()
    """ % LIGHT, "pysub")
    assert out == {"got": 42, "submits": 1}


def test_join_report_says_what_the_join_cost():
    # krex::join_timings in ms: each step of the join, and the whole of it.
    out = child_says("""
        t = krex.Tenant(segment=sys.argv[1], **%s)
        j = t.join_report
        t.leave()
        try:
            t.join_report
            after = None
        except krex.Error as e:
            after = e.step
        say("out", {"j": j, "after": after})
    """ % LIGHT, "pyjoin")
    j = out["j"]
    steps = ["driver_ms", "segment_ms", "slot_ms", "freeze_ms", "recover_ms", "sweep_ms",
             "topology_ms", "agent_ms", "gating_ms", "guardian_ms"]
    assert sorted(j) == sorted(steps + ["total_ms", "swept"]), sorted(j)
    assert isinstance(j["swept"], bool)
    assert all(isinstance(j[k], float) and j[k] >= 0 for k in steps), j
    assert j["total_ms"] > 0 and j["total_ms"] + 1e-3 >= sum(j[k] for k in steps), j
    assert out["after"] is not None, "join_report of a tenant that left did not raise"


if __name__ == "__main__":
    import run_tests
    raise SystemExit(run_tests.main([os.path.abspath(__file__)]))


def test_prepare_measure_is_exported_and_checks_its_arguments():
    # Outside any region; on the host backend it does nothing (CUDA: the
    # scratch, the probe and NVML, tested on the GPU by test_cuda's C++ twin).
    assert "prepare_measure" in krex.__all__
    if krex.backend == "host":
        assert krex.prepare_measure() is None
        assert krex.prepare_measure(cold_l2=False, flush_bytes=1 << 20) is None
    for bad in (dict(cold_l2="yes"), dict(flush_bytes=-1), dict(flush_bytes=1.5)):
        try:
            krex.prepare_measure(**bad)
        except TypeError:
            continue
        raise AssertionError("no TypeError for %r" % (bad,))
