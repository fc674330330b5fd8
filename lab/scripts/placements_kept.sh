#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One device call for the placements' throughput (lab/results/ranks.md):
# builds the eval and the Google Benchmark GPU tests, runs those tests, then
# the `ranks` preset and the issue11 preset's krex C=16 persistent
# configuration (with its reference and native repeat), both with the workers
# keeping their placement copies between commands (bench/eval/worker.cu).
# Every phase is bounded; a phase that would not fit the remaining call is
# skipped with a line saying so. Logs under $OUT, the evals' output in
# $OUT/evals.tgz. KREX_PK_PLAN=ab instead times the two presets' krex C=16
# persistent configuration with one placement and with eight, back to back
# on one machine (the throughput comparison; one native copy each);
# KREX_PK_PLAN=final the ranks preset with one placement (one native copy),
# then the whole ranks preset with eight.
#
#   [KREX_PK_PLAN=full|ab|final] lab/scripts/placements_kept.sh [budget_s]   (default 570)
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
case "${KREX_PK_PLAN:-full}" in
  full)  # the accuracy run: the whole ranks preset, then issue11's krex C=16 persistent
    phase ranks 250 build-cuda/bench/eval/krex_eval --config ranks --timeout-s 120 --out "$out/eval-ranks"
    phase issue11 150 build-cuda/bench/eval/krex_eval --config issue11 --timeout-s 120 \
      --configs serial:1,krex:16:persistent,serial:1 --out "$out/eval-issue11"
    ;;
  ab)  # throughput, one placement against eight on one machine (one native copy each)
    for k in 1 8; do
      phase "ranks-k$k" 110 build-cuda/bench/eval/krex_eval --config ranks --timeout-s 120 \
        --native-copies 1 --placements "$k" --out "$out/eval-ranks-k$k"
    done
    for k in 8 1; do
      phase "issue11-k$k" 170 build-cuda/bench/eval/krex_eval --config issue11 --timeout-s 120 \
        --configs serial:1,krex:16:persistent,serial:1 --placements "$k" --out "$out/eval-issue11-k$k"
    done
    ;;
  final)  # one placement (one native copy: throughput), then the whole ranks preset with eight
    phase ranks-k1 100 build-cuda/bench/eval/krex_eval --config ranks --timeout-s 120 \
      --native-copies 1 --placements 1 --out "$out/eval-ranks-k1"
    phase ranks 250 build-cuda/bench/eval/krex_eval --config ranks --timeout-s 120 --out "$out/eval-ranks"
    ;;
esac
for d in "$out"/eval-*; do
  [ -f "$d/eval.json" ] && gzip -f "$d/eval.json"
done
# One archive: the device tool returns a bounded number of files.
tar -C "$out" -czf "$out/evals.tgz" $(cd "$out" && ls -d eval-* ./*.log 2>/dev/null) &&
  rm -rf "$out"/eval-* "$out"/*.log
cat "$out/phases.txt"
