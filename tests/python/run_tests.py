# SPDX-License-Identifier: Apache-2.0
"""Runs the Python binding's tests without pytest (pytest collects the same
files): every test_* function of every tests/python/test_*.py, in order.

    python3 tests/python/run_tests.py [-k substring] [test_file.py...]

krex must be importable (PYTHONPATH=<build>/python for a CMake build, or an
installed wheel). Exit status 0 when every test passed.
"""

import glob
import importlib.util
import os
import sys
import time
import traceback
import unittest

here = os.path.dirname(os.path.abspath(__file__))


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    pattern = ""
    if "-k" in argv:
        i = argv.index("-k")
        pattern = argv[i + 1]
        del argv[i:i + 2]
    files = argv or sorted(glob.glob(os.path.join(here, "test_*.py")))
    sys.path.insert(0, here)
    import krex
    print("krex %s (%s backend) from %s" % (krex.__version__, krex.backend,
                                            os.path.dirname(krex.__file__)))
    failed, passed = [], 0
    for path in files:
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for fn_name in sorted(n for n in dir(module) if n.startswith("test_")):
            fn = getattr(module, fn_name)
            if not callable(fn) or pattern not in fn_name:
                continue
            t0 = time.monotonic()
            try:
                fn()
            except unittest.SkipTest as e:  # as pytest does: a skip, with its reason
                print("skip %s.%s: %s" % (name, fn_name, e))
                continue
            except Exception:  # noqa: BLE001 - report every failure and go on
                failed.append("%s.%s" % (name, fn_name))
                print("FAIL %s.%s (%.1f s)" % (name, fn_name, time.monotonic() - t0))
                traceback.print_exc()
            else:
                passed += 1
                print("ok   %s.%s (%.1f s)" % (name, fn_name, time.monotonic() - t0))
            sys.stdout.flush()
    print("%d passed, %d failed" % (passed, len(failed)))
    for f in failed:
        print("  failed: " + f)
    return 1 if failed or passed == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
