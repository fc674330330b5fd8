#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Pools the JSON files of several krex_gpu_compare processes run at once
(one per worker) into one table and one JSON: right / wrong order of the
pair 1% apart, and how the identical pair was called.

usage: compare_pool.py OUT.json IN.json...
"""
import json
import sys


def pool(files):
    recs, heads = [], []
    for path in files:
        with open(path) as f:
            d = json.load(f)
        heads.append({k: v for k, v in d.items() if k != "records"})
        for r in d["records"]:
            r["file"] = path
            recs.append(r)
    n = len(recs)
    count = lambda pred: sum(1 for r in recs if pred(r))
    pair = {v: count(lambda r, v=v: r["pair"]["verdict"] == v)
            for v in ("faster", "slower", "same", "unsure")}
    ident = {v: count(lambda r, v=v: r["identical"]["verdict"] == v)
             for v in ("faster", "slower", "same", "unsure")}
    out = {
        "processes": len(files),
        "comparisons": n,
        "right": count(lambda r: r["right"]),
        "wrong": count(lambda r: r["wrong"]),
        "pair_verdicts": pair,
        "identical_verdicts": ident,
        "right_pct": 100.0 * count(lambda r: r["right"]) / n if n else 0.0,
        "wrong_pct": 100.0 * count(lambda r: r["wrong"]) / n if n else 0.0,
        "identical_same_or_unsure_pct":
            100.0 * (ident["same"] + ident["unsure"]) / n if n else 0.0,
        "heads": heads,
        "records": recs,
    }
    return out


def main(argv):
    if len(argv) < 3:
        sys.exit(__doc__)
    out = pool(argv[2:])
    with open(argv[1], "w") as f:
        json.dump(out, f)
    print(f"{out['processes']} processes, {out['comparisons']} comparisons")
    print("| pair 1% apart | right | wrong | faster | slower | same | unsure |")
    print("|---|---|---|---|---|---|---|")
    p = out["pair_verdicts"]
    print(f"| | {out['right_pct']:.1f}% | {out['wrong_pct']:.1f}% | {p['faster']} | {p['slower']} "
          f"| {p['same']} | {p['unsure']} |")
    i = out["identical_verdicts"]
    print(f"identical: same or unsure {out['identical_same_or_unsure_pct']:.1f}% "
          f"(faster {i['faster']}, slower {i['slower']}, same {i['same']}, unsure {i['unsure']})")


if __name__ == "__main__":
    main(sys.argv)
