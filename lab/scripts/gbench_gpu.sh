#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Google Benchmark integration on a GPU: krex_gbench_cuda alone, then N
# copies at once under krex, then N copies at once unprotected (KREX_GBENCH=0),
# compared with lab/scripts/gbench_compare.py. Needs a CUDA build (lab/scripts/gpu.sh build).
#
#   lab/scripts/gbench_gpu.sh [N]      (default 8)   logs and JSON in $OUT (default build-cuda/gbench-logs)
set -euo pipefail
cd "$(dirname "$0")/../.."
n="${1:-8}"
out="${OUT:-build-cuda/gbench-logs}"
bin=build-cuda/examples/krex_gbench_cuda
mkdir -p "$out"
[ -x "$bin" ] || cmake --build build-cuda -j"$(nproc)" --target krex_gbench_cuda
args=(--benchmark_format=json --benchmark_repetitions="${KREX_GBENCH_REPS:-5}"
      --benchmark_min_time="${KREX_GBENCH_MIN_TIME:-0.1}")
seg="gbench-$$"
t0=$(date +%s%N)
KREX_SEGMENT="$seg" "$bin" "${args[@]}" >"$out/solo.json" 2>"$out/solo.err"
t1=$(date +%s%N)
for i in $(seq "$n"); do KREX_SEGMENT="$seg" "$bin" "${args[@]}" >"$out/krex$i.json" 2>"$out/krex$i.err" & done
wait
t2=$(date +%s%N)
for i in $(seq "$n"); do KREX_GBENCH=0 "$bin" "${args[@]}" >"$out/none$i.json" 2>"$out/none$i.err" & done
wait
t3=$(date +%s%N)
echo "wall ms: solo $(( (t1 - t0) / 1000000 )), krex x$n $(( (t2 - t1) / 1000000 )), unprotected x$n $(( (t3 - t2) / 1000000 ))" | tee "$out/wall.txt"
join() { local IFS=,; echo "$*"; }
python3 lab/scripts/gbench_compare.py "$out/solo.json" \
  "krex=$(join "$out"/krex*.json)" "unprotected=$(join "$out"/none*.json)" \
  --json "$out/compare.json" | tee "$out/compare.md"
