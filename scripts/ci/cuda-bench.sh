#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Fetches nvbench as NVIDIA ships it on PyPI: the cuda-bench wheel (nvbench's
# C++ headers, libnvbench.so and its CMake package for CUDA 12 and 13, and
# the cuda.bench Python package), with pip, into .deps/cuda-bench/ (ignored by
# git), unpacked. Prints the CMake package directory for this CUDA major:
#
#   cmake --preset default -DKREX_WITH_NVBENCH=ON -Dnvbench_DIR="$(scripts/ci/cuda-bench.sh)"
#
# A no-op when .deps/cuda-bench/ already holds the version below (the GPU
# machine of the lab gets the folder carried, and has no package index).
# KREX_CUDA_BENCH_VERSION picks another version; KREX_CUDA_MAJOR (12, 13)
# the package directory (default: nvcc's major). Exits 2, with a message,
# when pip cannot fetch the wheel.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=${KREX_CUDA_BENCH_VERSION:-0.3.0}
dest=.deps/cuda-bench
major=${KREX_CUDA_MAJOR:-}
if [ -z "$major" ]; then
  if command -v nvcc >/dev/null 2>&1; then
    major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p' | head -1)
  fi
  major=${major:-13}
fi
case "$major" in 12 | 13) ;; *)
  echo "cuda-bench.sh: the cuda-bench wheel has nvbench for CUDA 12 and 13, not $major;" \
       "set KREX_CUDA_MAJOR=12 or 13" >&2
  exit 1 ;;
esac

if [ "$(cat "$dest/VERSION" 2>/dev/null)" != "$version" ]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/krex-cuda-bench.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  pip=(python3 -m pip)
  if ! python3 -m pip --version >/dev/null 2>&1; then
    python3 -m venv "$work/venv" >&2
    pip=("$work/venv/bin/python" -m pip)
  fi
  # Any Python's wheel has the same C++ part; this Python's is the one pip picks.
  if ! "${pip[@]}" download -q --no-deps -d "$work/dl" "cuda-bench==$version" >&2; then
    echo "cuda-bench.sh: pip could not download cuda-bench==$version from the package index" \
         "(set PIP_INDEX_URL to a mirror, or copy an unpacked wheel to $dest with a VERSION" \
         "file)" >&2
    exit 2
  fi
  rm -rf "$dest"
  mkdir -p "$dest"
  python3 -m zipfile -e "$work"/dl/cuda_bench-*.whl "$dest"
  echo "$version" >"$dest/VERSION"
fi
dir=$PWD/$dest/cuda/bench/cu$major/nvbench/lib/cmake/nvbench
if [ ! -f "$dir/nvbench-config.cmake" ]; then
  echo "cuda-bench.sh: $dir/nvbench-config.cmake is missing: remove $dest and run again" >&2
  exit 1
fi
echo "$dir"
