#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The README's account of `scripts/test.sh --quick` names as many tests as
the `quick` label holds in this build (tests/CMakeLists.txt,
krex_quick_tests), so a label that grows or shrinks cannot leave the
README's count and timing describing another set (issue 21: "the README
says how long each takes"). Exits 1 on a mismatch.

usage: quick_label_test.py SOURCE_DIR BUILD_DIR [CTEST]
"""
import os
import re
import subprocess
import sys


def main(argv):
    if len(argv) not in (3, 4):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    root, build = argv[1], argv[2]
    ctest = argv[3] if len(argv) == 4 else "ctest"
    out = subprocess.run([ctest, "--test-dir", build, "-N", "-L", "quick"], check=True,
                         stdout=subprocess.PIPE, universal_newlines=True).stdout
    m = re.search(r"Total Tests: (\d+)", out)
    if not m:
        print("quick_label_test: no 'Total Tests' in ctest -N output:\n" + out, file=sys.stderr)
        return 1
    labelled = int(m.group(1))
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        readme = " ".join(f.read().split())
    said = re.findall(r"runs those (\d+) tests", readme)
    if said != [str(labelled)]:
        print("quick_label_test: README.md says `--quick` runs %s tests; the quick label holds %d "
              "here: re-measure and update README.md (\"Quick start\")"
              % (" and ".join(said) or "no number of", labelled), file=sys.stderr)
        return 1
    print("quick_label_test: %d tests, as README.md says" % labelled)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
