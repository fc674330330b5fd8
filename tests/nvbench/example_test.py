#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The nvbench example (examples/nvbench/copy.cu) end to end on a GPU: its
states measured inside krex regions, krex's columns in nvbench's table and
JSON, and the control run (KREX_NVBENCH_REGIONS=0) saying `unprotected`.
Exits 77 (ctest: skipped), saying why, where no CUDA device can be used.

usage: example_test.py KREX_NVBENCH_COPY [NVBENCH_COMPARE_PY]
"""
import json
import os
import subprocess
import sys
import tempfile

NO_GPU = ("cudaErrorInsufficientDriver", "cudaErrorNoDevice", "cudaErrorStubLibrary",
          "libcuda.so", "CUDA driver version is insufficient")


def run(exe, json_path, **env):
    e = dict(os.environ, KREX_SEGMENT="ctest-nvbench-%d" % os.getpid(), **env)
    args = [exe, "--devices", "0", "--min-time", "0.02", "--timeout", "1",
            "--batch-target-time", "0.02", "--axis", "Elements=[20]", "--json", json_path]
    return subprocess.run(args, capture_output=True, text=True, timeout=300, env=e)


def levels(json_path):
    with open(json_path) as f:
        data = json.load(f)
    out = []
    for bench in data["benchmarks"]:
        for st in bench["states"]:
            if st.get("is_skipped"):
                continue
            tags = {s["tag"]: s for s in st["summaries"]}
            assert "nv/cold/time/gpu/mean" in tags, sorted(tags)
            value = [d["value"] for d in tags["krex/level"]["data"] if d["name"] == "value"]
            out.append((value[0], "krex/wait" in tags, "krex/report" in tags))
    return out


def main():
    exe = sys.argv[1]
    with tempfile.TemporaryDirectory() as d:
        on, off = os.path.join(d, "krex.json"), os.path.join(d, "off.json")
        r = run(exe, on)
        why = [line for line in (r.stdout + r.stderr).splitlines() if any(s in line for s in NO_GPU)]
        if r.returncode != 0 and why:
            print("skipped: no CUDA device here (%s)" % why[0].strip())
            return 77
        assert r.returncode == 0, r.stdout + r.stderr
        assert "| krex " in r.stdout and "krex Wait" in r.stdout, r.stdout
        got = levels(on)
        assert got, "no measured state"
        for level, wait, report in got:
            assert level.startswith("gate+drain"), got
            assert wait and report, got
        r = run(exe, off, KREX_NVBENCH_REGIONS="0")
        assert r.returncode == 0, r.stdout + r.stderr
        assert [g[0] for g in levels(off)] == ["unprotected"] * len(got), levels(off)
        # nvbench's own comparison script reads krex's JSON as any nvbench JSON.
        if len(sys.argv) > 2 and os.path.exists(sys.argv[2]):
            c = subprocess.run([sys.executable, sys.argv[2], "--no-color", off, on],
                               capture_output=True, text=True, timeout=120)
            if "tabulate" in c.stderr and c.returncode != 0:
                print("nvbench_compare.py not run: the Python module tabulate is missing")
            else:
                assert c.returncode == 0, c.stdout + c.stderr
                assert "copy" in c.stdout, c.stdout
        print("%d states, each in a region: %s" % (len(got), got[0][0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
