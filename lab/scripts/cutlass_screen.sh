#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Screens problem shapes for the CUTLASS comparison (docs/CUTLASS.md): the built
# kernels run solo, KREX_CUTLASS=0, R times over a grid of problems; then
# lab/scripts/cutlass_compare.py ranks them (run 1 against the rest) so that one can
# pick problems whose kernels are 2-5% apart ("close" pairs): far enough apart that
# solo repeats agree on their order, close enough that interference can flip it.
# The comparison itself (lab/scripts/cutlass_compare.sh) then runs on the picked grid
# with fresh solo runs: the screen only chooses, it is not the reference.
#
#   lab/scripts/cutlass_screen.sh [R]     (default 2)
#
# Environment: KREX_CUTLASS_SCREEN_PROBLEMS (the profiler's problem arguments; default
# below), KREX_CUTLASS_PROFILER, KREX_CUTLASS_KERNEL_LIST, KREX_CUTLASS_PLACEMENTS,
# KREX_CUTLASS_PLACEMENT_BUDGET (as cutlass_compare.sh).
# Writes $OUT/screen.md, $OUT/screen.json (default OUT .deps/cutlass-logs).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
r="${1:-2}"
[[ "$r" =~ ^[1-9][0-9]*$ ]] || { echo "cutlass_screen.sh: R is a count of runs, not '$r'" >&2; exit 2; }
out="${OUT:-.deps/cutlass-logs}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
problems="${KREX_CUTLASS_SCREEN_PROBLEMS:---m=512,1024,2048,4096 --n=1024,3072,8192 --k=2048,4096}"
bin="${KREX_CUTLASS_PROFILER:-.deps/cutlass-build/tools/profiler/cutlass_profiler}"
list="${KREX_CUTLASS_KERNEL_LIST:-.deps/cutlass-build/tools/library/generated_kernels.txt}"
[ -x "$bin" ] || { echo "cutlass_screen.sh: no profiler at $bin: run lab/scripts/cutlass.sh build" >&2; exit 1; }
kernels=$(grep . "$list" | paste -sd, -)
[ -n "$kernels" ] || { echo "cutlass_screen.sh: no kernels in $list" >&2; exit 1; }
mkdir -p "$out"
# shellcheck disable=SC2206
args=(--operation=Gemm $problems --kernels="$kernels" --providers=cutlass --verification-enabled=false)
placements="${KREX_CUTLASS_PLACEMENTS:-1}"
budget="${KREX_CUTLASS_PLACEMENT_BUDGET:-0}"
[[ "$placements" =~ ^[1-9][0-9]*$ ]] || { echo "cutlass_screen.sh: KREX_CUTLASS_PLACEMENTS is a whole number >= 1, not '$placements'" >&2; exit 2; }
[[ "$budget" =~ ^[0-9]+$ ]] || { echo "cutlass_screen.sh: KREX_CUTLASS_PLACEMENT_BUDGET is MiB (a whole number, 0: none), not '$budget'" >&2; exit 2; }
[ "$placements" = 1 ] || args+=(--krex-placements="$placements" --krex-placement-budget="$budget")
for j in $(seq "$r"); do
  KREX_CUTLASS=0 "$bin" "${args[@]}" --output="$work/screen-r$j" >"$work/screen-r$j.log" 2>&1 \
    || { tail -20 "$work/screen-r$j.log" >&2; echo "cutlass_screen.sh: run $j failed" >&2; exit 1; }
done
rest=$(find "$work" -name 'screen-r*.gemm.csv' ! -name 'screen-r1.gemm.csv' | sort | paste -sd, -)
[ -n "$rest" ] || rest="$work/screen-r1.gemm.csv"
python3 lab/scripts/cutlass_compare.py "$work/screen-r1.gemm.csv" "repeat=$rest" --json "$out/screen.json" >"$out/screen.md"
python3 - "$out/screen.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = []
for p, e in r["problems"].items():
    st = e["ranking"]["repeat"]
    ms = min(k["solo_median_ms"] for k in e["kernels"].values())
    rows.append((st["close_pairs_compared"] // max(st["runs"], 1), p, e["gap_first_second"], ms,
                 st["close_inversions"], st["far_inversions"]))
rows.sort(key=lambda x: (-x[0], x[1]))
print("close pairs | problem | gap #1-#2 | fastest ms | repeat's close / far inversions")
for c, p, g, ms, ci, fi in rows:
    print(f"{c:11d} | {p} | {100 * g:+.1f}% | {ms:.4f} | {ci} / {fi}")
PY
