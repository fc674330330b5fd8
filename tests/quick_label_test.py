#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The `quick` label (what `scripts/test.sh --quick` runs) and the `lab`
label (the tests of the lab's scripts, lab/CMakeLists.txt) in this build:
the quick label holds no lab test, and every lab/tests/*_test.py is a ctest
test labelled lab, so the full run (and `.ci/run`) runs it. No document
states how many tests a label holds or how long they take: such a count
would go stale by hand, so this test fails if one reappears ("runs those N
tests"). Exits 1 naming every problem.

usage: quick_label_test.py SOURCE_DIR BUILD_DIR [CTEST]
"""
import glob
import os
import re
import subprocess
import sys


def tests_of(ctest, build, label):
    """The names of the tests of this build that carry `label`."""
    out = subprocess.run([ctest, "--test-dir", build, "-N", "-L", "^%s$" % label], check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    return set(re.findall(r"Test\s+#\d+: (\S+)", out))


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root, build = argv[1], argv[2]
    ctest = argv[3] if len(argv) == 4 else "ctest"
    problems = []
    quick, lab = tests_of(ctest, build, "quick"), tests_of(ctest, build, "lab")
    if not quick:
        problems.append("the quick label holds no test")
    for name in sorted(quick & lab):
        problems.append("%s is labelled both quick and lab: scripts/test.sh --quick must run no lab "
                        "test (tests/CMakeLists.txt, krex_quick_tests)" % name)
    scripts = sorted(glob.glob(os.path.join(root, "lab", "tests", "*_test.py")))
    if len(lab) < len(scripts):
        problems.append("lab/tests/ has %d test scripts but the lab label holds %d tests (%s): "
                        "register each in lab/CMakeLists.txt" % (len(scripts), len(lab), ", ".join(sorted(lab))))
    docs = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    for doc in docs:
        with open(doc, encoding="utf-8") as f:
            text = " ".join(f.read().split())
        for m in re.finditer(r"runs those (\d+) tests", text):
            problems.append("%s: '%s': a count of a label's tests, stale by hand; leave it out"
                            % (os.path.relpath(doc, root), m.group(0)))
    for p in problems:
        print("quick_label_test: " + p, file=sys.stderr)
    if not problems:
        print("quick_label_test: %d quick tests, %d lab tests, none in both" % (len(quick), len(lab)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
