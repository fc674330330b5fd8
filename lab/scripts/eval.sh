#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The evaluation on a GPU machine, one command (docs/EVAL.md):
#
#   lab/scripts/eval.sh [smoke|quick|full|issue11|ranks] [krex_eval options...]
#
#   smoke    a few minutes: every shape and the main modes at C=4
#   quick    every mode (serial, unprotected, lock-only, krex at C in 2..16,
#            krex with MPS, the ablations, persistent workers), one pass
#            (docs/EVAL.md: its estimated duration)
#   full     3 repetitions of every command; krex and krex with MPS at every C
#            including 1; the freeze scopes; more persistent configurations
#   issue11  issue 11's comparisons in one call of about 8 minutes on an H200,
#            build included: lock-only and krex at C=8 and 16, both shapes,
#            krex-all, the fine rank sets, @sync and the ~12% loop workload
#
# krex_eval --config NAME --plan lists a preset's commands and its estimated
# duration without running anything.
#
# Builds krex_eval and krex_eval_worker (CUDA, NVRTC, cuBLAS) in build-eval,
# runs the driver, and draws PNG plots when python3 has matplotlib. Output
# goes to $OUT/eval-<config> (default: build-eval/eval-<config>): eval.json,
# summary.md, workers.log, *.png, build.log.
set -euo pipefail
cd "$(dirname "$0")/../.."
cfg="${1:-quick}"
shift || true
case "$cfg" in smoke | quick | full | issue11 | ranks) ;; *)
  echo "usage: lab/scripts/eval.sh [smoke|quick|full|issue11|ranks] [krex_eval options...]" >&2
  exit 2
  ;;
esac
out="${OUT:-build-eval}/eval-$cfg"
mkdir -p "$out"
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || {
  echo "lab/scripts/eval.sh: needs the CUDA toolkit (nvcc, NVRTC, cuBLAS, CUPTI)" >&2
  exit 1
}
export PATH="$PATH:/usr/local/cuda/bin"
gen=()
build_start=$SECONDS
command -v ninja >/dev/null && [ ! -f build-eval/CMakeCache.txt ] && gen=(-G Ninja)
{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv || true
  cmake -S . -B build-eval "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DKREX_WITH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES="${KREX_CUDA_ARCH:-native}" -DKREX_BUILD_TESTS=OFF \
    -DKREX_BUILD_EXAMPLES=OFF -DKREX_BUILD_BENCH=ON
  cmake --build build-eval -j"$(nproc)" --target krex_eval krex_eval_worker
} >"$out/build.log" 2>&1 || {
  tail -30 "$out/build.log"
  echo "lab/scripts/eval.sh: build failed (full log: $out/build.log)" >&2
  exit 1
}
echo "lab/scripts/eval.sh: built in $((SECONDS - build_start)) s" >&2
status=0
build-eval/bench/eval/krex_eval --config "$cfg" --out "$out" "$@" || status=$?
if python3 -c "import matplotlib" 2>/dev/null; then
  python3 lab/scripts/eval_plots.py "$out/eval.json" "$out" || status=1
else
  echo "no matplotlib here: draw the plots elsewhere with python3 lab/scripts/eval_plots.py $out/eval.json"
fi
exit "$status"
