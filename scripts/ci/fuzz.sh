#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libFuzzer targets with clang (build-fuzz/) and runs fuzz_segment
# for FUZZ_SECONDS (default 60). Skips cleanly (exit 0) where clang or
# libFuzzer is missing, so a CI job can call it unconditionally.
#   scripts/ci/fuzz.sh            # 60 s (whole segment files are ~70 kB: -max_len=80000)
#   FUZZ_SECONDS=600 scripts/ci/fuzz.sh -jobs=2   # extra args go to libFuzzer
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
cxx="${CXX_FUZZ:-$(command -v clang++ || command -v clang++-14 || true)}"
if [ -z "$cxx" ]; then
  echo "fuzz.sh: no clang++ here; skipping (apt-get install clang libclang-rt-14-dev)"
  exit 0
fi
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long){return 0;}' |
    "$cxx" -x c++ -fsanitize=fuzzer - -o /dev/null 2>/dev/null; then
  echo "fuzz.sh: $cxx has no libFuzzer runtime; skipping (apt-get install libclang-rt-14-dev)"
  exit 0
fi
build="$root/build-fuzz"
CXX="$cxx" cmake -S "$root" -B "$build" -DKREX_BUILD_FUZZ=ON -DKREX_BUILD_TESTS=OFF \
  -DKREX_BUILD_EXAMPLES=OFF -DKREX_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target fuzz_segment -j"$(nproc)"
# File-image inputs are written to a private directory, removed afterwards.
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
TMPDIR="$work" "$build/fuzz/fuzz_segment" -max_total_time="${FUZZ_SECONDS:-60}" \
  -max_len=80000 -rss_limit_mb=1024 "$@"
