#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The nvbench CI stage (no GPU needed): fetches nvbench as the cuda-bench
# wheel with pip (scripts/ci/cuda-bench.sh, into .deps/), configures krex with
# KREX_WITH_NVBENCH=ON against the wheel's nvbench CMake package (build-nvbench/,
# host backend, sm_90), compiles and links the example examples/nvbench/copy.cu
# and tests/nvbench/test_nvbench.cu with nvcc, and runs the test: real nvbench
# CPU-only states measured inside krex regions (ctest -L nvbench). About 3
# minutes on two cores, most of it nvcc.
#
# nvbench's CMake package needs CMake >= 3.30.4; where the system's is older
# (Debian 12: 3.25), pip installs one into .deps/cmake-venv/. Skipped, with
# the reason, where nvcc is missing or pip cannot fetch the wheel or CMake
# (exit 0: the stage is additive; KREX_CI_NVBENCH=REQUIRED makes those fail).
# Exits with ctest's status.
set -euo pipefail
cd "$(dirname "$0")/../.."
required=0
[ "${KREX_CI_NVBENCH:-ON}" = REQUIRED ] && required=1
skip() {
  echo "test-nvbench.sh: SKIPPED: $*" >&2
  exit "$required"
}

command -v nvcc >/dev/null 2>&1 || skip "no nvcc on PATH (the CUDA toolkit compiles nvbench's headers)"
scripts/ci/deps.sh  # GoogleTest, CMake, g++

# nvbench-config.cmake's cmake_minimum_required.
cmake_min=3.30.4
cmake=$(command -v cmake)
version_ok() {  # $1 >= $2, as dotted versions
  [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" = "$2" ]
}
have=$(cmake --version | sed -n 's/^cmake version \([0-9.]*\).*/\1/p')
if ! version_ok "$have" "$cmake_min"; then
  cmake=$PWD/.deps/cmake-venv/bin/cmake
  if [ ! -x "$cmake" ] || ! version_ok "$("$cmake" --version | sed -n 's/^cmake version \([0-9.]*\).*/\1/p')" "$cmake_min"; then
    echo "test-nvbench.sh: CMake $have is older than nvbench's $cmake_min: installing one with pip" \
         "into .deps/cmake-venv"
    rm -rf .deps/cmake-venv
    python3 -m venv .deps/cmake-venv || skip "python3 -m venv failed (python3-venv)"
    .deps/cmake-venv/bin/pip install -q "cmake~=3.31.0" ||
      skip "pip could not install CMake >= $cmake_min (nvbench's CMake package needs it)"
  fi
fi

rc=0
nvbench_dir=$(scripts/ci/cuda-bench.sh) || rc=$?
[ "$rc" -eq 0 ] || skip "the cuda-bench wheel could not be fetched (scripts/ci/cuda-bench.sh exit $rc)"

t0=$(date +%s)
"$cmake" -S . -B build-nvbench -DCMAKE_BUILD_TYPE=Release -DKREX_WITH_NVBENCH=ON \
  -Dnvbench_DIR="$nvbench_dir" -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DKREX_BUILD_BENCH=OFF -DKREX_BUILD_PYTHON=OFF -DKREX_BUILD_EXAMPLES=OFF
"$cmake" --build build-nvbench -j"$(nproc)" --target krex_nvbench_all  # the example and the test
echo "test-nvbench.sh: configured and built in $(($(date +%s) - t0)) s"
ctest=$(dirname "$cmake")/ctest
exec "$ctest" --test-dir build-nvbench --output-on-failure -L nvbench "$@"
