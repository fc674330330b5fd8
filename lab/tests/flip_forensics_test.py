#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""lab/scripts/flip_forensics.py's pooled table (T10), sample-index table
(T11), its classes against the deviation (T12) and the flip probability
over k commands (T13) and its flips against construction by median and p10 (T14) on two synthetic eval.json files whose flips are counted by hand: one
rank set of three members (1.5%, 1.5% and 3.0% apart by the reference), a
native repeat of two copies and a krex configuration of one per run, one of
whose commands has alternating fast samples. Checks the pooled counts, the
difference in points and the one-sided Fisher p, fisher_greater against
values worked out by hand, and T11's, T12's and T13's rows. Exits 1 on a mismatch. No GPU.

usage: flip_forensics_test.py
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "lab", "scripts", "flip_forensics.py")
REF = {"a": 1.000, "b": 1.015, "c": 1.030}  # a-b 1.5%, b-c 1.48%: 1-2%; a-c 3.0%: 2-5%


POS = {"a": 0, "b": 1, "c": 2}  # the construction order: a has the least work


def command(cid, rep, ms, t, samples=None):
    return {"id": cid, "ok": True, "rep": rep,
            "result": {"set_pos": POS[cid], "median_ms": ms, "samples_ms": samples or [ms] * 3, "mono_start_ns": t * 10**6, "t_cmd_ms": 1.0,
                       "mono_critical_ns": t * 10**6 + 100, "t_critical_ms": 0.5, "pid": 100 + rep,
                       "set": "axpby-16M", "timing": "batched"}}


def config(label, role, reps, samples=None):
    cmds, t = [], 0
    for rep, times in enumerate(reps):
        for cid, ms in times.items():
            cmds.append(command(cid, rep, ms, t, (samples or {}).get(cid)))
            t += 2
    return {"label": label, "role": role, "skipped": False, "commands": cmds, "ranking": {}}


def write(folder, native, krex, krex_samples=None, native_label="native repeat (serial)"):
    os.makedirs(folder)
    d = {"meta": {"run_start_mono_ns": 0}, "reference": REF,
         "configs": [config("reference (serial)", "reference", [REF]),
                     config("krex C=16 persistent", "krex", [krex], krex_samples),
                     config(native_label, "repeat", native)]}
    with open(os.path.join(folder, "eval.json"), "w") as f:
        json.dump(d, f)
    return os.path.join(folder, "eval.json")


def main():
    spec = importlib.util.spec_from_file_location("flip_forensics", SCRIPT)
    ff = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ff)
    bad = []
    # [[3, 1], [1, 3]]: P(X >= 3) = (C(4,3) C(4,1) + C(4,4) C(4,0)) / C(8,4) = 17/70
    for table, want in (((3, 1, 1, 3), 17 / 70), ((2, 2, 1, 7), 52 / 220), ((1, 1, 0, 4), 2 / 6),
                        ((0, 5, 0, 5), 1.0)):
        got = ff.fisher_greater(*table)
        if abs(got - want) > 1e-12:
            bad.append(f"fisher_greater{table} = {got}, expected {want}")
    # T13's helpers: the medians of every 3-subset of (1, 2, 3, 10) are 2, 2, 3, 3; x from (1, 2)
    # lies below y from (2, 3) in 3 of 4 pairings and ties in 1: 3.5 / 4.
    if ff.subset_medians([10, 1, 3, 2], 3) != [2, 2, 3, 3]:
        bad.append(f"subset_medians([10, 1, 3, 2], 3) = {ff.subset_medians([10, 1, 3, 2], 3)}, expected [2, 2, 3, 3]")
    if ff.p_before([1, 2], [2, 3]) != 0.875:
        bad.append(f"p_before([1, 2], [2, 3]) = {ff.p_before([1, 2], [2, 3])}, expected 0.875")
    # T14's p10: krex::measure's interpolation, 0.3 of the way from the first sample to the second.
    p10 = dict(ff.T14_STATS)["p10"]({"samples_ms": [1.015, 0.96425, 1.015, 1.015]})
    if abs(p10 - (0.96425 + 0.3 * 0.05075)) > 1e-12:
        bad.append(f"T14's p10 of (1.015, 0.96425, 1.015, 1.015) = {p10}, expected 0.979475")
    with tempfile.TemporaryDirectory() as tmp:
        # Run 1: native copy 2 swaps b and c (1 flip, 1-2%); krex swaps a and b (1 flip, 1-2%).
        # Its "a" samples alternate: even indices +1.6% over a's native baseline (1.0), odd ones
        # -3.5% (fast, below -1.5%): T11 counts one command alternating with odd samples fast.
        r1 = write(os.path.join(tmp, "run-one"), [dict(REF), {"a": 1.0, "b": 1.031, "c": 1.029}],
                   {"a": 1.016, "b": 1.014, "c": 1.030}, {"a": [1.016, 1.016 * 0.95] * 3})
        # Run 2: native in order twice; krex puts c first (flips a-c, 2-5%, and b-c, 1-2%).
        # Its "b" has one fast sample of two at odd indices, none at even ones (alternation by
        # 50 points, between T11's 20-point threshold and a whole command).
        r2 = write(os.path.join(tmp, "run-two"), [dict(REF), dict(REF)], {"a": 1.0, "b": 1.015, "c": 0.99},
                   {"b": [1.015, 1.015 * 0.95, 1.015, 1.015]})
        out = subprocess.run([sys.executable, SCRIPT, "--only", "T10,T11,T12,T13,T14", r1, r2], check=True,
                             stdout=subprocess.PIPE, universal_newlines=True).stdout
        # Run 3: a native repeat behind spacers (krex_eval --native-spacer-mb labels it apart),
        # its copy 2 swapping b and c; krex in order. T10 finds it by its role and keeps its label.
        r3 = write(os.path.join(tmp, "run-three"), [dict(REF), {"a": 1.0, "b": 1.031, "c": 1.029}], dict(REF),
                   native_label="native repeat (serial, spaced)")
        out3 = subprocess.run([sys.executable, SCRIPT, "--only", "T10", r3], check=True,
                              stdout=subprocess.PIPE, universal_newlines=True).stdout
        # Run 4: every krex command failed (its workers could not start): the configuration is
        # left out with a note, and the tables still print (T4 with no fast sample at all).
        r4 = write(os.path.join(tmp, "run-four"), [dict(REF), dict(REF)], dict(REF))
        with open(r4) as f:
            d4 = json.load(f)
        for cmd in d4["configs"][1]["commands"]:
            cmd["ok"] = False
        with open(r4, "w") as f:
            json.dump(d4, f)
        p4 = subprocess.run([sys.executable, SCRIPT, "--only", "T4,T10,T11,T12,T13", r4], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True)
        if p4.returncode != 0 or "run-four: krex C=16 persistent: no passed command, left out" not in p4.stderr:
            bad.append(f"run four (no passed krex command): exit {p4.returncode}, stderr:\n{p4.stderr}")
        elif "| run-four | native repeat | batched | 6 |" not in p4.stdout or "| 0.0 | - / +0.00 |" not in p4.stdout:
            bad.append("run four: T4 lacks the native repeat's row with no fast sample:\n" + p4.stdout)
    want_rows = [
        "| krex C=16 pers. | 2 | 0/0 | 2/4 (50.0) vs 1/8 (12.5): +37.5 pts, p 0.236 "
        "| 1/2 (50.0) vs 0/4 (0.0): +50.0 pts, p 0.333 | 0/0 |",
        "| native repeat | 2 | 0/0 | 1/8 (12.5) | 0/4 (0.0) | 0/0 |",
        # T11, run one: a's 6 samples alternate (3 of its 3 odd ones fast); b and c have 3 samples
        # each (indices 0, 2 even, 1 odd), none fast: even 0/7, odd 3/5, all 3/12.
        "| run-one | krex C=16 pers. | batched | 3 | 0.0 / 60.0 | 1 | 0 | 2 | 25.0 |",
        # Run two: c (0.99 against its baseline 1.030, -3.9%) is fast in all 3 samples, b in one
        # odd one of 4, a in none: even 2/6, odd 2/4, all 4/10; b alternates (odd), c does not.
        "| run-two | krex C=16 pers. | batched | 3 | 33.3 / 50.0 | 1 | 0 | 2 | 40.0 |",
        # T12, run one: a (odd) at 1.016 against its baseline 1.0 (median of the native copies'
        # 1.0 and 1.0): +1.60%, deviant, 3 of 6 samples fast. b and c (none): b 1.014 against
        # median(1.015, 1.031) = 1.023: -0.880%; c 1.030 against median(1.030, 1.029) = 1.0295:
        # +0.049%; median of the two -0.416, population sd 0.464; no fast sample.
        "| run-one | krex C=16 pers. | odd | 1 | +1.60 | 0.00 | 1 | 50.0 |",
        "| run-one | krex C=16 pers. | none | 2 | -0.42 | 0.46 | 0 | 0.0 |",
        # Its native copies (none): 0, 0, -0.782, +0.782, +0.049, -0.049: median 0, sd 0.452.
        "| run-one | native repeat | none | 6 | +0.00 | 0.45 | 0 | 0.0 |",
        # T13, run one, k = 1: krex (one command each) a 1.016 above b 1.014 (a flip of a-b, 1-2%),
        # b-c and a-c in order: 1-2% (1 + 0) / 2, 2-5% 0; too few commands for k = 3.
        "| run-one | krex C=16 pers. | 1 | - | 50.0 (2) | 0.0 (1) | - |",
        "| run-one | krex C=16 pers. | 3 | - | - | - | - |",
        # Its native repeat: b (1.015, 1.031) before c (1.030, 1.029) in 2 of 4 pairings: b-c 0.5,
        # a-b 0: 1-2% 25.0; a-c 0.
        "| run-one | native repeat | 1 | - | 25.0 (2) | 0.0 (1) | - |",
        # T14 against the construction order (a, b, c), both runs. krex by the median: run one
        # a 1.016 > b 1.014 (1-2%), run two b 1.015 > c 0.99 (1-2%) and a 1.0 > c (2-5%): 2/4,
        # 1/2. By p10: run one a's samples (0.9652 x3, 1.016 x3) give 0.9652 < b: no flip; run
        # two b's (0.96425, 1.015 x3) give 0.96425 + 0.3 x 0.05075 = 0.9795 < a 1.0 (1-2%) and
        # < c, and a > c (2-5%): 1/4, 1/2. The native repeat (3 equal samples a command):
        # run one's second copy b 1.031 > c 1.029, 1/8 and 0/4 by either.
        "| krex C=16 pers. | 2 | batched | median | 0/0 | 2/4 (50.0) | 1/2 (50.0) | 0/0 |",
        "| krex C=16 pers. | 2 | batched | p10 | 0/0 | 1/4 (25.0) | 1/2 (50.0) | 0/0 |",
        "| native repeat | 2 | batched | median | 0/0 | 1/8 (12.5) | 0/4 (0.0) | 0/0 |",
        "| native repeat | 2 | batched | p10 | 0/0 | 1/8 (12.5) | 0/4 (0.0) | 0/0 |",
    ]
    for row in want_rows:
        if row not in out.splitlines():
            bad.append("the output lacks the row\n  " + row)
    # Run 3 alone: krex 0/2 (1-2%) and 0/1 (2-5%) against the spaced repeat's 1/4 and 0/2.
    for row in ("| krex C=16 pers. | 1 | 0/0 | 0/2 (0.0) vs 1/4 (25.0): -25.0 pts, p 1.000 "
                "| 0/1 (0.0) vs 0/2 (0.0): +0.0 pts, p 1.000 | 0/0 |",
                "| native repeat, spaced | 1 | 0/0 | 1/4 (25.0) | 0/2 (0.0) | 0/0 |"):
        if row not in out3.splitlines():
            bad.append("run three's T10 lacks the row\n  " + row)
    out += "\n--- run three ---\n" + out3
    if bad:
        print("flip_forensics_test: FAIL\n" + "\n".join(bad) + "\n--- output ---\n" + out, file=sys.stderr)
        return 1
    print("flip_forensics_test: T10 pooled counts, differences and Fisher p, T11, T12, T13 and T14, as worked out by hand")
    return 0


if __name__ == "__main__":
    sys.exit(main())
