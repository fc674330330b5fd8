#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call for the placements' throughput (lab/results/ranks.md):
# builds the eval and the Google Benchmark GPU tests, runs those tests, then
# the `ranks` preset and the issue11 preset's krex C=16 persistent
# configuration (with its reference and native repeat), both with the workers
# keeping their placement copies between commands (bench/eval/worker.cu).
# Every phase is bounded; a phase that would not fit the remaining call is
# skipped with a line saying so. Logs and eval output under $OUT.
#
#   lab/scripts/placements_kept.sh [budget_s]   (default 570)
set -uo pipefail
cd "$(dirname "$0")/../.."
budget="${1:-570}"
out="${OUT:-build-cuda/placements-kept}"
mkdir -p "$out"
left() { echo $((budget - SECONDS)); }
phase() {  # phase NAME NEEDED_S CMD...: runs CMD under `timeout` if NEEDED_S fit
  local name="$1" need="$2"
  shift 2
  if [ "$(left)" -lt "$need" ]; then
    echo "== $name: skipped, $(left) s left of $budget, needs ~$need" | tee -a "$out/phases.txt"
    return 0
  fi
  local t0=$SECONDS rc=0
  timeout "$(($(left) - 5))" "$@" >"$out/$name.log" 2>&1 || rc=$?
  echo "== $name: rc $rc in $((SECONDS - t0)) s" | tee -a "$out/phases.txt"
  tail -5 "$out/$name.log"
}
export PATH="$PATH:/usr/local/cuda/bin"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.used --format=csv >"$out/gpu.txt" 2>&1
phase build 200 bash -c 'cmake --preset cuda -DKREX_BUILD_EXAMPLES=OFF -DKREX_BUILD_PYTHON=OFF &&
  cmake --build build-cuda -j"$(nproc)" --target krex_eval krex_eval_worker test_gbench_cuda test_gbench_placements'
phase gbench_tests 30 bash -c 'build-cuda/tests/test_gbench_cuda && build-cuda/tests/test_gbench_placements'
phase ranks 250 build-cuda/bench/eval/krex_eval --config ranks --timeout-s 120 --out "$out/eval-ranks"
phase issue11 150 build-cuda/bench/eval/krex_eval --config issue11 --timeout-s 120 \
  --configs serial:1,krex:16:persistent,serial:1 --out "$out/eval-issue11"
for d in eval-ranks eval-issue11; do
  [ -f "$out/$d/eval.json" ] && gzip -f "$out/$d/eval.json"
done
cat "$out/phases.txt"
