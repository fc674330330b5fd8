#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build krex with the CUDA backend and run everything on a GPU machine:
#
#   lab/scripts/gpu.sh [stage...]     stages: build test bench mps two   (default: all five)
#
#   build  configure (preset cuda, Ninja if present) and build every target
#   test   ctest, GPU tests included (label gpu: the GPU benchmarks' short runs)
#   bench  launch overhead, exclusivity (krex and the no-krex control),
#          region entry cost vs sibling count (0, 1, 4, 15; busy and idle), accuracy
#   mps    exclusivity with and without krex, and accuracy, under an MPS control daemon that
#          this script starts first (outside every tenant cgroup) and stops after
#   two    two GPUs: regions on GPU 0 and GPU 1 overlap in time, pinned cores disjoint
#
# Logs go to $OUT (default: build-cuda/gpu-logs): build.log, ctest.log,
# bench.log, mps.log, two.log. Environment: KREX_GPU_SIBLINGS (15), KREX_GPU_REGIONS (200),
# KREX_GPU_ACCURACY_SCALE (0.5: sample counts of the accuracy run).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build-cuda/gpu-logs}"
mkdir -p "$out"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(build test bench mps two)
sibs="${KREX_GPU_SIBLINGS:-15}"
regions="${KREX_GPU_REGIONS:-200}"
bin=build-cuda/bench
status=0
has() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
run() {  # run LOG CMD...: the command line, its output and exit status, into LOG
  local log="$1"
  shift
  echo "\$ $*" | tee -a "$log"
  "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  echo "[exit $rc]" | tee -a "$log"
  return "$rc"
}

if has build; then
  gen=()
  command -v ninja >/dev/null && [ ! -f build-cuda/CMakeCache.txt ] && gen=(-G Ninja)
  {
    nvidia-smi --query-gpu=name,driver_version,pci.bus_id,memory.total --format=csv || true
    nvcc --version | tail -2
    cmake --preset cuda "${gen[@]}" && cmake --build build-cuda -j"$(nproc)"
  } >"$out/build.log" 2>&1 || { echo "build failed (see build.log)"; tail -40 "$out/build.log"; status=1; }
  # A failing target elsewhere must not hide the GPU pieces: build them alone.
  cmake --build build-cuda -j"$(nproc)" --target test_cuda krex_gpu_exclusivity \
    krex_gpu_accuracy krex_gpu_launch_overhead krex_gpu_two_gpus >>"$out/build.log" 2>&1 || status=1
  tail -3 "$out/build.log"
fi

if has test; then
  run "$out/ctest.log" ctest --test-dir build-cuda --output-on-failure --timeout 300 || status=1
fi

if has bench; then
  log="$out/bench.log"
  t="timeout 240"
  run "$log" $t "$bin/krex_gpu_launch_overhead" --launches 20000 || status=1
  run "$log" $t env KREX_BENCH_MPS=off "$bin/krex_gpu_exclusivity" --mode none --siblings "$sibs" --regions "$regions"
  run "$log" $t env KREX_BENCH_MPS=off "$bin/krex_gpu_exclusivity" --mode krex --siblings "$sibs" --regions "$regions" || status=1
  for n in 0 1 4 15; do
    run "$log" $t env KREX_BENCH_MPS=off "$bin/krex_gpu_exclusivity" --mode krex --siblings "$n" --regions 60 || status=1
  done
  for n in 1 4 15; do
    run "$log" $t env KREX_BENCH_MPS=off "$bin/krex_gpu_exclusivity" --mode krex --siblings "$n" --regions 60 --siblings-work idle || status=1
  done
  run "$log" $t "$bin/krex_gpu_accuracy" --siblings "$sibs" --scale "${KREX_GPU_ACCURACY_SCALE:-0.5}" || status=1
fi

if has two; then  # needs 2 GPUs (exit 77, a skip, with fewer)
  run "$out/two.log" timeout 240 "$bin/krex_gpu_two_gpus" --regions 20 --body-ms 20 --siblings 2
  rc=$?
  [ "$rc" -eq 0 ] || [ "$rc" -eq 77 ] || status=1
fi

if has mps; then
  log="$out/mps.log"
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/krex-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/krex-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d >>"$log" 2>&1; then
    echo "MPS control daemon started (pid $(pgrep -x nvidia-cuda-mps || true))" | tee -a "$log"
    run "$log" timeout 240 env KREX_BENCH_MPS=on "$bin/krex_gpu_exclusivity" --mode none --siblings "$sibs" --regions "$regions"
    run "$log" timeout 240 env KREX_BENCH_MPS=on "$bin/krex_gpu_exclusivity" --mode krex --siblings "$sibs" --regions "$regions" || status=1
    run "$log" timeout 240 "$bin/krex_gpu_accuracy" --siblings "$sibs" --scale "${KREX_GPU_ACCURACY_SCALE:-0.5}" || status=1
    echo get_server_list | timeout 20 nvidia-cuda-mps-control 2>&1 | tee -a "$log"
    echo quit | timeout 20 nvidia-cuda-mps-control 2>&1 | tee -a "$log"
  else
    echo "could not start nvidia-cuda-mps-control -d: MPS runs skipped" | tee -a "$log"
  fi
fi
exit "$status"
