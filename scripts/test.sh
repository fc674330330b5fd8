#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configure (preset "default": Release, build/), build, and run the tests.
#
#   scripts/test.sh           every target, every test (ctest): the full run
#   scripts/test.sh --quick   only the targets of the tests labelled "quick"
#                             (krex_quick_tests) and those tests (ctest -L quick)
#
# --quick is chosen to take under 3 minutes on 2 cores and never runs the lab
# label (lab/CMakeLists.txt); the full run does. Exits with ctest's
# status. Other arguments go to ctest (e.g. -L unit, -R gate, -j2).
set -euo pipefail
cd "$(dirname "$0")/.."

quick=0
args=()
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    *) args+=("$a") ;;
  esac
done

start=$(date +%s)
scripts/ci/deps.sh
cmake --preset default
if [ "$quick" = 1 ]; then
  cmake --build build -j"$(nproc)" --target krex_quick_tests
  rc=0
  ctest --test-dir build --output-on-failure -L quick ${args[@]+"${args[@]}"} || rc=$?
  took=$(($(date +%s) - start))
  echo "test.sh --quick: ${took} s, build included"
  if [ "$took" -gt 180 ]; then
    echo "test.sh --quick: over its 3-minute budget on this machine ($(nproc) CPUs, load" \
         "$(cut -d' ' -f1 /proc/loadavg)): a busy machine, or the quick label" \
         "(tests/CMakeLists.txt) has grown" >&2
  fi
  exit "$rc"
fi
cmake --build build -j"$(nproc)"
exec ctest --test-dir build --output-on-failure ${args[@]+"${args[@]}"}
