#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# nvbench's own example benchmarks on a GPU, N processes at once: one at a
# time (solo, twice: the second is the noise floor), N at once unprotected,
# N at once under krex; then per-benchmark inflation against solo
# (lab/scripts/nvbench_inflation.py), and nvbench's own compare script on
# krex's JSON.
#
#   lab/scripts/nvbench_gpu.sh build         compile the examples (nvcc, sm_90, the CUDA backend)
#   lab/scripts/nvbench_gpu.sh solo          each example alone, twice (solo, solo-again)
#   lab/scripts/nvbench_gpu.sh unprotected   N workers at once, KREX_NVBENCH_REGIONS=0
#   lab/scripts/nvbench_gpu.sh krex          N workers at once, a region per state.exec
#   lab/scripts/nvbench_gpu.sh compare       the tables (also nvbench's compare script)
#   lab/scripts/nvbench_gpu.sh python        tests/python/test_nvbench.py with cuda.bench itself
#                                            (wheels in .deps/pywheels, krex's package in build/python)
#   lab/scripts/nvbench_gpu.sh all           all of the above, in order
#
# Needs nvcc, python3 and, carried or fetched, .deps/cuda-bench (the cuda-bench
# wheel unpacked: scripts/ci/cuda-bench.sh) and .deps/nvbench-examples (nvbench's
# examples/*.cu, from its repository at the commit the wheel was built from or
# later: lab/scripts/nvbench_examples.sh). Each example is compiled with every
# `state.exec(` made `krex::nvbench::exec(state, ` and <krex/nvbench.hpp>
# included first (the one change a user makes); that one binary serves all
# three ways: solo and unprotected runs set KREX_NVBENCH_REGIONS=0 (no tenant,
# no region).
#
# A worker runs every example once, in its own rotated order (worker i starts
# at example i), so that different benchmarks overlap. Each run writes
# nvbench's JSON. Results and logs: $NVB_OUT (default build-nvbench-gpu/out).
# Settings: NVB_WORKERS (8), NVB_EXAMPLES (the list below), NVB_ARGS
# (nvbench's options for every run; default "--devices 0 --min-time 0.05
# --timeout 1 --batch-target-time 0.05": short states, so that N workers
# under krex, whose measurements take turns, take about N times the solo
# wall time: `solo` prints that estimate; keep it under a command's limit, or
# run fewer examples),
# NVB_ARCH (90), NVB_JOBS (compilers at once; default the core count),
# NVB_WORK (build-nvbench-gpu: sources, binaries).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
step=${1:-all}
workers=${NVB_WORKERS:-8}
arch=${NVB_ARCH:-90}
examples=(${NVB_EXAMPLES:-throughput auto_throughput axes enums exec_tag_sync exec_tag_timer skip stream summaries})
read -r -a nvb_args <<<"${NVB_ARGS:---devices 0 --min-time 0.05 --timeout 1 --batch-target-time 0.05}"
work=${NVB_WORK:-build-nvbench-gpu}
out=${NVB_OUT:-$work/out}
src=.deps/nvbench-examples
major=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p' | head -1)
nvb=$root/.deps/cuda-bench/cuda/bench/cu$major/nvbench
mkdir -p "$work/bin" "$work/src" "$out"

die() { echo "nvbench_gpu.sh: $*" >&2; exit 1; }

build_one() {  # example: its rewritten source and binary, or its log on failure
  local e=$1 cuda_lib
  cuda_lib=$(dirname "$(command -v nvcc)")/../lib64
  { echo '#include <krex/nvbench.hpp>  // added by lab/scripts/nvbench_gpu.sh'
    sed 's/\bstate\.exec(/krex::nvbench::exec(state, /g' "$src/$e.cu"; } >"$work/src/$e.cu"
  if grep -q 'state\.exec(' "$work/src/$e.cu"; then
    echo "$e.cu: a state.exec( left after the rewrite" >"$work/bin/$e.log"
    return 1
  fi
  rm -f "$work/bin/$e"
  # nvbench's main (libnvbench_main.a) and library, the krex CUDA backend
  # (cudart, CUPTI). NVB_LINK: more link arguments (a machine without the
  # driver links against an NVML stand-in: -Xlinker -rpath-link=DIR).
  nvcc -std=c++17 -O3 -arch=sm_"$arch" -DKREX_WITH_CUDA=1 -Iinclude -I"$nvb/include" -I"$src" \
    -Xcompiler=-pthread -cudart shared \
    "$work/src/$e.cu" -o "$work/bin/$e" \
    "$nvb/lib/libnvbench_main.a" -L"$nvb/lib" -lnvbench -L"$cuda_lib" -lcupti \
    -Xlinker -rpath="$nvb/lib" -Xlinker -rpath="$cuda_lib" ${NVB_LINK:-} >"$work/bin/$e.log" 2>&1
}

build() {
  [ -d "$nvb/include/nvbench" ] || die "$nvb is missing: run scripts/ci/cuda-bench.sh (needs pip) or carry .deps/cuda-bench"
  [ -f "$src/throughput.cu" ] || die "$src/*.cu (nvbench's examples) is missing: carry .deps/nvbench-examples (lab/scripts/nvbench_examples.sh)"
  local jobs=${NVB_JOBS:-$(nproc)} e bad=0
  for e in "${examples[@]}"; do
    build_one "$e" &
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
  done
  wait
  for e in "${examples[@]}"; do
    [ -x "$work/bin/$e" ] && continue
    echo "nvbench_gpu.sh: $e did not build:" >&2
    tail -20 "$work/bin/$e.log" >&2
    bad=1
  done
  [ "$bad" = 0 ] || exit 1
  echo "nvbench_gpu.sh: built ${#examples[@]} examples into $work/bin"
}

# One worker: every example once, from example number $2 on, into $out/$1-w$2-<example>.json;
# each example process's pid, start and end (seconds since the epoch) into
# $out/$1-w$2-pids.txt, so that a region's foreign pids can be told apart as
# processes starting or ending (nvbench_inflation.py).
worker() {
  local mode=$1 w=$2 n=${#examples[@]} k e pid rc
  for ((k = 0; k < n; k++)); do
    e=${examples[$(((w + k) % n))]}
    "$work/bin/$e" "${nvb_args[@]}" --json "$out/$mode-w$w-$e.json" >"$out/$mode-w$w-$e.md" 2>&1 &
    pid=$!
    echo "$pid $e start $(date +%s.%N)" >>"$out/$mode-w$w-pids.txt"
    rc=0
    wait "$pid" || rc=$?
    echo "$pid $e end $(date +%s.%N)" >>"$out/$mode-w$w-pids.txt"
    [ "$rc" = 0 ] || echo "nvbench_gpu.sh: $mode worker $w: $e exited $rc (see $out/$mode-w$w-$e.md)" >&2
  done
}

timed() {  # mode, then the command: wall seconds to $out/wall-<mode>.txt
  local mode=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  "$@"
  t1=$(date +%s.%N)
  python3 -c "print('%.1f' % ($t1 - $t0))" >"$out/wall-$mode.txt"
  echo "nvbench_gpu.sh: $mode: $(cat "$out/wall-$mode.txt") s"
}

solo() {
  for e in "${examples[@]}"; do [ -x "$work/bin/$e" ] || die "run '$0 build' first"; done
  KREX_NVBENCH_REGIONS=0 timed solo worker solo 0
  KREX_NVBENCH_REGIONS=0 timed solo-again worker solo-again 0
  echo "nvbench_gpu.sh: krex x$workers will take about $workers x $(cat "$out/wall-solo.txt") s" \
       "(its measurements take turns)"
}

concurrent() {  # mode, then the environment for the workers
  local mode=$1 i
  shift
  run_all() {
    local pids=()
    for ((i = 0; i < workers; i++)); do
      (for kv in "$@"; do export "${kv?}"; done; worker "$mode" "$i") &
      pids+=($!)
    done
    wait "${pids[@]}"
  }
  timed "$mode" run_all "$@"
}

compare() {
  python3 lab/scripts/nvbench_inflation.py "$out" --workers "$workers" --json "$out/inflation.json" |
    tee "$out/inflation.md"
  # nvbench's own comparison script (the wheel's) reads krex's JSON as any
  # nvbench JSON: solo against krex, every example. It needs the Python module
  # tabulate: installed, or in .deps/pylibs (pip install --target .deps/pylibs tabulate).
  local cmp=.deps/cuda-bench/cuda/bench/scripts/nvbench_compare.py e rc=0
  if PYTHONPATH=.deps/pylibs python3 -c "import tabulate" 2>/dev/null; then
    # Its exit status counts the states it calls different (beyond their noise),
    # so reading is judged by its summary, which it prints only after reading both.
    for e in "${examples[@]}"; do
      PYTHONPATH=.deps/pylibs python3 "$cmp" --no-color --ignore-devices "$out/solo-w0-$e.json" \
        "$out/krex-w0-$e.json" >"$out/nvbench_compare-$e.txt" 2>&1 || true
      grep -q "Total Matches" "$out/nvbench_compare-$e.txt" || rc=1
    done
    if [ "$rc" = 0 ]; then
      echo "nvbench_gpu.sh: nvbench_compare.py read every krex JSON: $out/nvbench_compare-*.txt"
    else
      echo "nvbench_gpu.sh: nvbench_compare.py could not read a krex JSON: see $out/nvbench_compare-*.txt" >&2
    fi
  else
    echo "nvbench_gpu.sh: nvbench_compare.py not run: no Python module tabulate (.deps/pylibs)"
  fi
}

# krex.nvbench with the real cuda.bench: its wheels (cuda-bench, cuda-bindings,
# cuda-pathfinder; `pip download -d .deps/pywheels cuda-bench==0.3.0
# "cuda-bindings>=13,<14"` where there is a package index) into a venv, and
# krex's Python package from build/python (the default preset; the host
# backend is enough: the test's benchmark is CPU-only, its regions krex's).
python_test() {
  [ -d build/python/krex ] || die "build/python/krex is missing: cmake --preset default && cmake --build build --target krex_python"
  ls .deps/pywheels/cuda_bench-*.whl >/dev/null 2>&1 || die ".deps/pywheels has no cuda-bench wheel"
  local venv=$work/pyvenv
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q --no-index --no-deps .deps/pywheels/*.whl ||
    die "the wheels in .deps/pywheels do not install on this Python ($(python3 --version))"
  PYTHONPATH=$root/build/python PYTHONDONTWRITEBYTECODE=1 KREX_DEVICE_REGISTRY=$root/$work/registry \
    "$venv/bin/python" tests/python/run_tests.py tests/python/test_nvbench.py 2>&1 | tee "$out/python.txt"
  grep -q "^ok   test_nvbench.test_real_cuda_bench" "$out/python.txt" ||
    die "the cuda.bench test did not run (skipped or failed): see $out/python.txt"
}

seg="nvbench-gpu-$$"
case "$step" in
  build) build ;;
  solo) solo ;;
  unprotected) concurrent unprotected KREX_NVBENCH_REGIONS=0 ;;
  krex) concurrent krex KREX_NVBENCH_REGIONS=1 KREX_SEGMENT="$seg" ;;
  compare) compare ;;
  python) python_test ;;
  all)
    build
    solo
    concurrent unprotected KREX_NVBENCH_REGIONS=0
    concurrent krex KREX_NVBENCH_REGIONS=1 KREX_SEGMENT="$seg"
    compare
    ;;
  *) die "unknown step '$step' (build, solo, unprotected, krex, compare, python, all)" ;;
esac
