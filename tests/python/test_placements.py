# SPDX-License-Identifier: Apache-2.0
"""krex.over_placements() and patch(placements=) / KREX_PLACEMENTS: a
KernelBench-style timing function's trials spread over placements of its
inputs, with a stand-in for PyTorch that records every allocation (the real
one is not installed in CI; tests/python/test_kernelbench.py runs the real
KernelBench on a GPU)."""

import textwrap

from pyutil import Child, TempTree, child_says, cleanup, unique_name

LIGHT_ENV = {"KREX_FREEZE": "none", "KREX_PIN": "0", "KREX_CONFINE": "0",
             "KREX_LOCK_WAIT_MS": "30000"}

# A stand-in PyTorch: tensors with an id, a device and clone(); every
# allocation and cache emptying goes to torch.events, in order.
FAKE_TORCH = """
import types
torch = types.ModuleType("torch")
torch.uint8 = "uint8"
torch.events = []
class _OOM(RuntimeError):
    pass
class Tensor:
    serial = 0
    fail_clone = False
    def __init__(self, nbytes, device="cuda:0"):
        Tensor.serial += 1
        self.id, self.nbytes, self.device = Tensor.serial, nbytes, device
        self.is_cuda = str(device).startswith("cuda")
    def clone(self):
        if Tensor.fail_clone:
            raise _OOM("CUDA out of memory. Tried to allocate 128.00 MiB")
        t = Tensor(self.nbytes, self.device)
        torch.events.append(["clone", self.id, t.id])
        return t
torch.Tensor = Tensor
def empty(n, dtype=None, device=None):
    torch.events.append(["empty", n, str(device)])
    return Tensor(n, device)
torch.empty = empty
torch.cuda = types.ModuleType("torch.cuda")
torch.cuda.OutOfMemoryError = _OOM
torch.cuda.empty_cache = lambda: torch.events.append(["empty_cache"])
sys.modules["torch"], sys.modules["torch.cuda"] = torch, torch.cuda
"""

# KernelBench's signature; each call says what it got and returns its trials
# numbered by call.
TIMING = """
calls = []
def time_execution_with_cuda_event(kernel_fn, args, num_warmup=3, num_trials=10,
                                   discard_first=1, verbose=True, device=None):
    calls.append({"ids": [getattr(a, "id", a) for a in args], "trials": num_trials,
                  "warmup": num_warmup, "in_region": krex.in_region(),
                  "events": len(torch.events)})
    return [float(len(calls))] * num_trials
"""


def test_over_placements_spreads_the_trials_over_copies_behind_growing_spacers():
    out = child_says(FAKE_TORCH + TIMING + textwrap.dedent("""
        kp = sys.modules["krex.patch"]
        x, w = torch.Tensor(1 << 20), torch.Tensor(4 << 20)
        placed = krex.over_placements(time_execution_with_cuda_event, 4)
        times = placed(None, [x, 7, w], num_warmup=2, num_trials=10, verbose=False)
        same = krex.over_placements(time_execution_with_cuda_event, 1)
        few = krex.over_placements(time_execution_with_cuda_event, 8)
        events = list(torch.events)
        calls.clear(); few(None, (x,), 3, 3)
        say("out", {"times": times, "step": kp.PLACEMENT_STEP, "events": events,
                    "ids": [x.id, w.id], "identity": same is time_execution_with_cuda_event,
                    "name": placed.__name__, "few": calls})
    """), "pyplace")
    calls_said = out["events"]
    # 10 trials over 4 placements: parts of 3, 3, 2 and 2, in call order.
    assert out["times"] == [1.0] * 3 + [2.0] * 3 + [3.0] * 2 + [4.0] * 2, out["times"]
    assert out["identity"] is True and out["name"] == "time_execution_with_cuda_event"
    x, w = out["ids"]
    # Placement p: the cache emptied, a spacer of p steps, then a copy of each
    # tensor (the int passes as it is); placement 0 allocates nothing.
    step = out["step"]
    assert step == 18 << 20
    per_part = [calls_said[i:i + 4] for i in range(0, 12, 4)]
    for p, ev in enumerate(per_part, start=1):
        assert ev[0] == ["empty_cache"], ev
        assert ev[1] == ["empty", p * step, "cuda:0"], ev
        assert ev[2][:2] == ["clone", x] and ev[3][:2] == ["clone", w], ev
    assert len(calls_said) == 12  # nothing after the last part's copies
    # Fewer trials than placements: one part per trial, each on its own copy.
    assert [c["trials"] for c in out["few"]] == [1, 1, 1], out["few"]
    assert out["few"][0]["ids"] == [x] and out["few"][1]["ids"] != [x], out["few"]


def test_over_placements_refuses_bad_counts_and_functions_and_says_when_a_copy_does_not_fit():
    out = child_says(FAKE_TORCH + TIMING + textwrap.dedent("""
        res = {}
        for bad in (0, 65, "x", True, 2.5):
            try:
                krex.over_placements(time_execution_with_cuda_event, bad)
                res[repr(bad)] = "accepted"
            except krex.Error as e:
                res[repr(bad)] = [e.step, str(e), e.hint]
        try:
            krex.over_placements(lambda fn, xs: [1.0], 2)
            res["fn"] = "accepted"
        except krex.Error as e:
            res["fn"] = [e.step, str(e)]
        torch.Tensor.fail_clone = True
        try:
            krex.over_placements(time_execution_with_cuda_event, 3)(None, [torch.Tensor(8)])
            res["oom"] = "no error"
        except krex.Error as e:
            res["oom"] = [e.step, str(e), e.hint, len(calls)]
        say("out", res)
    """), "pyplacebad")
    for bad in ("0", "65", "'x'", "True", "2.5"):
        step, msg, hint = out[bad]
        assert step == "options" and "placements" in msg and "1 to 64" in hint, (bad, out[bad])
    assert out["fn"][0] == "options" and "num_trials" in out["fn"][1], out["fn"]
    step, msg, hint, calls_before = out["oom"]
    assert step == "options" and "placement 1" in msg and "out of memory" in msg, msg
    assert "KREX_PLACEMENTS" in hint and "18 MiB more" in hint, hint
    assert calls_before == 1  # placement 0 ran; placement 1's copy failed


FAKE_KERNELBENCH = {
    "kernelbench/__init__.py": "",
    "kernelbench/timing.py": """
        import sys
        import krex
        torch = sys.modules["torch"]
        calls = []
        def _record(args, num_trials, name):
            calls.append({"name": name, "ids": [getattr(a, "id", a) for a in args],
                          "trials": num_trials, "in_region": krex.in_region(),
                          "epoch": None})
        def time_execution_with_cuda_event(kernel_fn, args, num_warmup=3, num_trials=10,
                                           discard_first=1, verbose=True, device=None):
            _record(args, num_trials, "cuda_event")
            return [1.0] * num_trials
        def time_execution_with_do_bench_interface(kernel_fn, args, num_warmup=3, num_trials=10,
                                                   discard_first=1, verbose=True, device=None):
            _record(args, num_trials, "do_bench")
            return [2.0] * num_trials
    """,
}


def _patched_run(env, code_patch="krex.patch(segment=sys.argv[1], placements=3)"):
    name = unique_name("pyplacepatch")
    with TempTree(FAKE_KERNELBENCH) as tree:
        c = Child(FAKE_TORCH + textwrap.dedent("""
            sys.path.insert(0, sys.argv[2])
            try:
                %s
            except krex.Error as e:
                say("out", {"error": str(e), "step": e.step, "hint": e.hint})
                sys.exit(0)
            import kernelbench.timing as kt
            x = torch.Tensor(1 << 20)
            t = kt.time_execution_with_cuda_event(None, [x], num_trials=6)
            first = krex.last_report()["epoch"]
            d = kt.time_execution_with_do_bench_interface(None, [x], num_trials=6)
            second = krex.last_report()["epoch"]
            krex.unpatch()
            after = kt.time_execution_with_cuda_event(None, [x], num_trials=6)
            say("out", {"calls": kt.calls, "t": t, "d": d, "after": after, "x": x.id,
                        "epochs": [first, second]})
        """) % code_patch, env=dict(LIGHT_ENV, **env), args=[name, tree.path])
        try:
            out = c.expect("out")
            assert c.wait() == 0
            return out
        finally:
            cleanup(name, [c])


def test_patch_placements_spreads_kernelbench_cuda_event_inside_one_region():
    out = _patched_run({})
    ev = [c for c in out["calls"] if c["name"] == "cuda_event"]
    # Under the patch: 3 parts of 2 trials, all inside the call's one region;
    # part 0 on the caller's tensor, the others on copies.
    assert [c["trials"] for c in ev[:3]] == [2, 2, 2], ev
    assert all(c["in_region"] for c in ev[:3]), ev
    assert ev[0]["ids"] == [out["x"]] and out["x"] not in ev[1]["ids"] + ev[2]["ids"], ev
    assert out["t"] == [1.0] * 6
    # do_bench chooses its own trials: not spread, still in a region of its own.
    db = [c for c in out["calls"] if c["name"] == "do_bench"]
    assert len(db) == 1 and db[0]["trials"] == 6 and db[0]["in_region"], db
    assert out["epochs"][1] > out["epochs"][0]
    # After unpatch(): KernelBench's own function, one placement, no region.
    assert ev[3:] == [{"name": "cuda_event", "ids": [out["x"]], "trials": 6,
                       "in_region": False, "epoch": None}], ev[3:]


def test_krex_placements_overrides_patch_and_a_bad_value_stops_patch():
    out = _patched_run({"KREX_PLACEMENTS": "2"})
    ev = [c for c in out["calls"] if c["name"] == "cuda_event" and c["in_region"]]
    assert [c["trials"] for c in ev] == [3, 3], ev
    one = _patched_run({"KREX_PLACEMENTS": "1"})
    ev = [c for c in one["calls"] if c["name"] == "cuda_event" and c["in_region"]]
    assert [c["trials"] for c in ev] == [6], ev
    bad = _patched_run({"KREX_PLACEMENTS": "many"})
    assert bad["step"] == "options" and "KREX_PLACEMENTS" in bad["error"], bad
    assert "1 to 64" in bad["hint"], bad
    bad = _patched_run({}, "krex.patch(segment=sys.argv[1], placements=-1)")
    assert bad["step"] == "options" and "'-1' for placements" in bad["error"], bad


def test_placements_default_to_one_placement_per_call():
    out = _patched_run({}, "krex.patch(segment=sys.argv[1])")
    ev = [c for c in out["calls"] if c["name"] == "cuda_event" and c["in_region"]]
    assert [c["trials"] for c in ev] == [6] and ev[0]["ids"] == [out["x"]], ev
