# SPDX-License-Identifier: Apache-2.0
"""Runs a Python script or module with krex.patch() applied.

    python -m krex.run script.py [args...]
    python -m krex.run -m package.module [args...]

The script runs as __main__ with sys.argv = [script, args...], as `python
script.py args...` would run it. Tenant options come from KREX_* variables
(KREX_SEGMENT, KREX_DEVICE, KREX_FREEZE, ...); KREX_PATCH=0 runs the script
without krex (the unprotected control).
"""

import os
import runpy
import sys

from .patch import patch

usage = "usage: python -m krex.run script.py [args...] | python -m krex.run -m module [args...]"


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage, file=sys.stderr if not argv else sys.stdout)
        return 2 if not argv else 0
    patch()
    if argv[0] == "-m":
        if len(argv) < 2:
            print(usage, file=sys.stderr)
            return 2
        sys.argv = [argv[1]] + argv[2:]
        sys.path.insert(0, os.getcwd())
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return 0
    script = argv[0]
    if not os.path.exists(script):
        print("krex.run: %s: no such file" % script, file=sys.stderr)
        return 2
    sys.argv = argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
    return 0


def _entry():
    """The `krex-run` console script."""
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
