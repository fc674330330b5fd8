# SPDX-License-Identifier: Apache-2.0
"""Runs a Python script or module with krex.patch() applied.

    python -m krex.run script.py [args...]
    python -m krex.run -m package.module [args...]

The script runs as __main__ with sys.argv = [script, args...], as `python
script.py args...` would run it. Tenant options come from KREX_* variables
(KREX_SEGMENT, KREX_DEVICE, KREX_FREEZE, ...); KREX_PATCH=0 runs the script
without krex (the unprotected control).

The process joins krex before the script's first line (patch(join=True)), so
all of its GPU work, before its first timing call too, is gated and drained
like any tenant's; KREX_PATCH_JOIN=0 joins at the first patched call instead.
A join that fails ends krex.run with status 2 and krex's message, before the
script runs.

The process tenant leaves at the process's exit with release_on_leave on:
the leave resets the device (cudaDeviceReset) inside the gate, so the CUDA
context's teardown does not run beside the other tenants' regions (an exiting
worker was the only foreign process their regions saw).
KREX_RELEASE_ON_LEAVE=0 turns it off (a script that calls krex.unpatch() and
then keeps using the GPU).
"""

import os
import runpy
import sys

from . import _krex
from .patch import patch

usage = "usage: python -m krex.run script.py [args...] | python -m krex.run -m module [args...]"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    if argv[0] == "-m" and len(argv) < 2:
        print(usage, file=sys.stderr)
        return 2
    if argv[0] != "-m" and not os.path.exists(argv[0]):
        print("krex.run: %s: no such file" % argv[0], file=sys.stderr)
        return 2
    try:
        patch(join=True, release_on_leave=True)
    except _krex.Error as e:
        hint = getattr(e, "hint", "")
        print("krex.run: %s%s" % (e, "" if not hint or hint in str(e) else "\n  hint: " + hint),
              file=sys.stderr)
        return 2
    if argv[0] == "-m":
        sys.argv = [argv[1]] + argv[2:]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    script = argv[0]
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
    return 0


def _entry():
    """The `krex-run` console script."""
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
