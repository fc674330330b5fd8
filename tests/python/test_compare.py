# SPDX-License-Identifier: Apache-2.0
"""krex.compare and krex.measure's placements (issue 35), host timer, in a
real region: candidates are busy loops of different lengths."""

from pyutil import Child, cleanup, unique_name

LIGHT = "dict(freeze='none', pin=False, confine=False, lock_wait_ms=30000)"


def test_compare_and_placements_in_a_region():
    name = unique_name("pycmp")
    c = Child("""
        def spin(us):
            def f(*p):
                end = time.perf_counter() + us * 1e-6
                while time.perf_counter() < end:
                    pass
            return f
        t = krex.Tenant(segment=sys.argv[1], **%s)
        out = {}
        seen = []
        with krex.region(t) as r:
            out["cmp"] = krex.compare(r, {"a": spin(400), "b": spin(800), "a2": spin(400)},
                                      samples=20, warmup=1, timer="host", tolerance=0.1)
            def body(p):
                seen.append(p)
                spin(300)()
            out["m"] = krex.measure(r, body, samples=6, warmup=1, timer="host", placements=3,
                                    placement_bytes=99)
            for bad in (dict(fns=[spin(10)]), dict(fns=[spin(10), spin(10)], samples=4)):
                try:
                    krex.compare(r, timer="host", **bad)
                except krex.Error as e:
                    out.setdefault("errors", []).append([e.step, str(e)])
            try:
                krex.measure(r, body, samples=2, timer="host", placements=3)
            except krex.Error as e:
                out.setdefault("errors", []).append([e.step, str(e)])
        out["seen"] = seen
        t.leave()
        say("out", out)
    """ % LIGHT, args=[name])
    try:
        out = c.expect("out", timeout=60)
        cmp = out["cmp"]
        assert cmp["names"] == ["a", "b", "a2"], cmp["names"]
        assert cmp["method"] == "host"
        assert len(cmp["order"]) == 60 and sorted(cmp["order"][:3]) == [0, 1, 2]
        verdicts = [v["verdict"] for v in cmp["vs_first"]]
        assert verdicts[0] == "baseline" and verdicts[1] == "slower", cmp["vs_first"]
        assert verdicts[2] in ("same", "unsure"), cmp["vs_first"]
        assert 1.5 < cmp["vs_first"][1]["ratio"] < 2.5, cmp["vs_first"][1]
        assert len(cmp["candidates"]) == 3 and len(cmp["candidates"][0]["samples_ms"]) == 20
        m = out["m"]
        # Warm-up visits every placement (max(1, K) = 3 calls), then samples rotate.
        assert out["seen"] == [0, 1, 2, 0, 1, 2, 0, 1, 2], out["seen"]
        assert m["placement"] == [0, 1, 2, 0, 1, 2], m
        assert len(m["placement_median_ms"]) == 3 and m["placement_bytes"] == 99
        errs = out["errors"]
        assert errs[0][0] == "options" and "needs at least 2" in errs[0][1], errs
        assert "needs at least 8" in errs[1][1], errs
        assert "more than samples" in errs[2][1], errs
        assert c.wait() == 0
    finally:
        cleanup(name, [c])


def test_compare_takes_the_library_default_samples():
    import inspect

    import krex
    params = inspect.signature(krex.compare).parameters
    assert params["samples"].default == krex._krex.compare_default_samples == 200
    assert params["confidence"].default == krex._krex.compare_default_confidence == 0.99
