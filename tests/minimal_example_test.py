#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Runs examples/minimal.cpp (krex_minimal) and checks what it prints: the
region report as text, then as one JSON line that parses and says the region
was gated, with the same level as the text. With krexctl given, the segment
(KREX_SEGMENT) is removed afterwards, once its guardian has gone.

usage: minimal_example_test.py <path of krex_minimal> [<path of krexctl>]
"""
import json
import os
import subprocess
import sys
import time


def clean(krexctl: str) -> bool:
    """krexctl clean --segment $KREX_SEGMENT, retried while the guardian lingers."""
    deadline = time.monotonic() + 10
    while True:
        out = subprocess.run([krexctl, "clean", "--segment", os.environ["KREX_SEGMENT"]],
                             capture_output=True, text=True, timeout=30).stdout
        if "in use" not in out:
            return True
        if time.monotonic() > deadline:
            print("minimal_example_test: segment still in use after 10 s:\n" + out, file=sys.stderr)
            return False
        time.sleep(0.2)


def main() -> int:
    krexctl = sys.argv[2] if len(sys.argv) > 2 else ""
    try:
        rc = check(sys.argv[1])
    finally:
        cleaned = not krexctl or clean(krexctl)
    return rc if cleaned else 1


def check(example: str) -> int:
    run = subprocess.run([example], capture_output=True, text=True, timeout=100)
    sys.stdout.write(run.stdout)
    sys.stderr.write(run.stderr)
    if run.returncode != 0:
        print(f"krex_minimal exited {run.returncode}", file=sys.stderr)
        return 1
    lines = run.stdout.strip().splitlines()
    report = json.loads(lines[-1])
    text_level = next(l for l in lines if l.startswith("krex region: ")).split(": ", 1)[1]
    problems = []
    if not report["gated"]:
        problems.append("the region was not gated")
    if report["level"] != text_level:
        problems.append(f"JSON level {report['level']!r} != text level {text_level!r}")
    if report["body_ns"] <= 0:
        problems.append("no body time")
    for p in problems:
        print("minimal_example_test: " + p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
