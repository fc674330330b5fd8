#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The krex-patched cutlass_profiler on one GPU (docs/CUTLASS.md): solo runs, then
# N profilers at once unprotected (KREX_CUTLASS=0), then N at once under krex,
# all over the same problems and kernels; compared by lab/scripts/cutlass_compare.py
# (inflation over solo per problem and kernel, kernel ranking flips per problem).
# Build first with lab/scripts/cutlass.sh build (done here if the binary is missing).
#
#   lab/scripts/cutlass_compare.sh [N]      (default 8)
#
# Writes to $OUT (default .deps/cutlass-logs), four files, five with nvidia-smi:
#   compare.md    the tables           compare.json  the same numbers, and failures
#   compare.log   commands, GPU, wall times, krex joins / failures / lost leases per mode
#   runs.tar.gz   every run's CSV (<mode>-p<i>-r<j>.gemm.csv) and its stdout/stderr,
#                 phases.tsv (each phase's start and end, HH:MM:SS); for the modes
#                 with regions (solo-krex, krex) each run's region reports
#                 (<mode>-p<i>-r<j>.regions.jsonl: KREX_CUTLASS_REPORTS, docs/CUTLASS.md),
#                 which compare.md relates to each sample's inflation
#   dmon.log.gz   where nvidia-smi is (and KREX_CUTLASS_DMON is not 0): `nvidia-smi dmon -s pc -d 1 -o T` over the whole
#                 comparison (power, clocks); compare.md then ends with the SM clock and
#                 power per phase (lab/scripts/dmon_phases.py)
# Environment:
#   KREX_CUTLASS_REPS       sequential runs per concurrent process (3)
#   KREX_CUTLASS_SOLO_REPS  solo runs, modes solo and solo-krex (5)
#   KREX_CUTLASS_AFTER_REPS solo runs at the end, mode solo-after (3)
#   KREX_CUTLASS_DMON       1 (default): nvidia-smi dmon beside the comparison where
#                           nvidia-smi is; 0: not
#   KREX_CUTLASS_MIN_GAP    kernel pairs this far apart in solo count as resolvable
#                           (0.02; see lab/scripts/cutlass_compare.py --min-gap)
#   KREX_CUTLASS_PROBLEMS   the profiler's problem arguments
#                           ("--m=2048,8192 --n=4096,8192 --k=4096": 4 problems)
#   KREX_CUTLASS_ARGS       more profiler arguments (e.g. --profiling-duration=20)
#   KREX_CUTLASS_PLACEMENTS every kernel timed over K placements of its operands
#                           (--krex-placements=K; 1, the default: not passed)
#   KREX_CUTLASS_PLACEMENT_BUDGET  MiB for all K placements (--krex-placement-budget;
#                           0, the default: none); each phase's line in compare.log
#                           counts the placement loops and gives their median spread
#   KREX_CUTLASS_RUN_TIMEOUT  seconds one profiler run may take (180)
#   KREX_CUTLASS_PROFILER, KREX_CUTLASS_KERNEL_LIST, KREX_CUTLASS_WORK: the binary,
#     the kernel list (one name a line) and the scratch folder, if not the build's
# Modes: solo (KREX_CUTLASS=0, alone: the reference), solo-krex (krex on, alone:
# what the region itself costs), unprotected (N at once, KREX_CUTLASS=0), krex
# (N at once, regions on), solo-after (alone again, KREX_CUTLASS=0: whether the
# GPU itself drifted, e.g. its clocks as it warmed, over the comparison).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
n="${1:-8}"
out="${OUT:-.deps/cutlass-logs}"
work="${KREX_CUTLASS_WORK:-.deps/cutlass-runs}"
reps="${KREX_CUTLASS_REPS:-3}"
solo_reps="${KREX_CUTLASS_SOLO_REPS:-5}"
after_reps="${KREX_CUTLASS_AFTER_REPS:-3}"
problems="${KREX_CUTLASS_PROBLEMS:---m=2048,8192 --n=4096,8192 --k=4096}"
extra="${KREX_CUTLASS_ARGS:-}"
run_timeout="${KREX_CUTLASS_RUN_TIMEOUT:-180}"
placements="${KREX_CUTLASS_PLACEMENTS:-1}"
budget="${KREX_CUTLASS_PLACEMENT_BUDGET:-0}"
[[ "$placements" =~ ^[1-9][0-9]*$ ]] || { echo "cutlass_compare.sh: KREX_CUTLASS_PLACEMENTS is a whole number >= 1, not '$placements'" >&2; exit 2; }
[[ "$budget" =~ ^[0-9]+$ ]] || { echo "cutlass_compare.sh: KREX_CUTLASS_PLACEMENT_BUDGET is MiB (a whole number, 0: none), not '$budget'" >&2; exit 2; }
min_gap="${KREX_CUTLASS_MIN_GAP:-0.02}"
bin="${KREX_CUTLASS_PROFILER:-.deps/cutlass-build/tools/profiler/cutlass_profiler}"
list="${KREX_CUTLASS_KERNEL_LIST:-.deps/cutlass-build/tools/library/generated_kernels.txt}"
log="$out/compare.log"
mkdir -p "$out"
rm -rf "$work"
mkdir -p "$work"

if [ ! -x "$bin" ]; then
  lab/scripts/cutlass.sh build || { echo "cutlass_compare.sh: no profiler (build failed)" >&2; exit 1; }
fi
kernels=$(grep . "$list" | paste -sd, -)
[ -n "$kernels" ] || { echo "cutlass_compare.sh: no kernels in $list" >&2; exit 1; }

# Word splitting of $problems and $extra is intended: they are argument lists.
# shellcheck disable=SC2206
args=(--operation=Gemm $problems --kernels="$kernels" --providers=cutlass
      --verification-enabled=false $extra)
[ "$placements" = 1 ] || args+=(--krex-placements="$placements" --krex-placement-budget="$budget")
seg="cutlass-$$"  # a fresh krex segment for this comparison

{
  echo "\$ $bin ${args[*]} --output=<run>"
  echo "processes: $n, runs per process: $reps, solo runs: $solo_reps, krex segment: $seg"
  echo "placements: $placements (budget: $budget MiB, 0: none)"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
    --format=csv 2>&1 || true
  nproc
} >"$log"

# GPU power and clocks beside the whole comparison, where nvidia-smi is.
dmon_pid=""
case "${KREX_CUTLASS_DMON:-1}" in
  0 | 1) ;;
  *) echo "cutlass_compare.sh: KREX_CUTLASS_DMON is 0 or 1, not '${KREX_CUTLASS_DMON}'" >&2; exit 2 ;;
esac
if [ "${KREX_CUTLASS_DMON:-1}" = 1 ] && command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi dmon -s pc -d 1 -o T >"$out/dmon.log" 2>&1 &
  dmon_pid=$!
fi
stop_dmon() { [ -z "$dmon_pid" ] || { kill "$dmon_pid" 2>/dev/null; wait "$dmon_pid" 2>/dev/null; dmon_pid=""; }; }
trap stop_dmon EXIT

# one MODE I J [VAR=VALUE...]: profiler run J of process I of MODE. With regions
# (KREX_CUTLASS=1) each region's report goes to <run>.regions.jsonl beside the CSV.
one() {
  local mode="$1" i="$2" j="$3"
  shift 3
  local base="$work/$mode-p$i-r$j" reports="" a
  for a in "$@"; do [ "$a" = KREX_CUTLASS=1 ] && reports="$base.regions.jsonl"; done
  env "$@" KREX_SEGMENT="$seg" KREX_CUTLASS_REPORTS="$reports" \
    timeout "$run_timeout" "$bin" "${args[@]}" --output="$base" >"$base.log" 2>&1
  local rc=$?
  [ "$rc" -eq 0 ] || echo "$mode p$i r$j: exit $rc" >>"$log"
}
# phase MODE PROCESSES RUNS VAR=VALUE...: PROCESSES at once, each RUNS runs in a row.
phase() {
  local mode="$1" procs="$2" runs="$3"
  shift 3
  local t0 t1 i s0
  s0=$(date +%T)
  t0=$(date +%s%N)
  local pids=()
  for i in $(seq "$procs"); do
    ( for j in $(seq "$runs"); do one "$mode" "$i" "$j" "$@"; done ) &
    pids+=($!)
  done
  wait "${pids[@]}"  # these processes, not dmon
  t1=$(date +%s%N)
  printf '%s\t%s\t%s\n' "$mode" "$s0" "$(date +%T)" >>"$work/phases.tsv"
  local csvs joins nonregion lost
  csvs=$(find "$work" -maxdepth 1 -name "$mode-p*-r*.gemm.csv" | wc -l)
  joins=$(cat "$work/$mode"-p*.log 2>/dev/null | grep -c "^krex: cutlass_profiler on CUDA device")
  nonregion=$(cat "$work/$mode"-p*.log 2>/dev/null | grep -c "krex: cutlass_profiler: no region")
  lost=$(cat "$work/$mode"-p*.log 2>/dev/null | grep -c "krex: cutlass_profiler: lease lost")
  local placed=""
  if [ "$placements" != 1 ]; then
    # Each placement loop's spread ("... spread 1.23% ..."), their count and median;
    # kernels the profiler refused to time over placements.
    placed=$(cat "$work/$mode"-p*.log 2>/dev/null | grep "^krex: cutlass_profiler: placements:" \
      | sed -n 's/.* spread \([0-9.]*\)%.*/\1/p' | sort -g \
      | awk '{v[NR] = $1} END {m = NR == 0 ? "-" : sprintf("%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2);
             printf "; placement loops %d (K=%s), median spread %s%%", NR, K, m}' K="$placements")
    placed="$placed; refused for placements $(cat "$work/$mode"-p*.log 2>/dev/null | grep -c -- "--krex-placements=.*kernel not profiled")"
  fi
  echo "$mode: $procs x $runs runs in $(( (t1 - t0) / 1000000 )) ms; CSVs $csvs; krex joins $joins;" \
       "kernels without a region $nonregion; lost leases $lost$placed" | tee -a "$log"
  echo "$lost" >"$work/$mode.lost"
}

phase solo 1 "$solo_reps" KREX_CUTLASS=0
phase solo-krex 1 "$solo_reps" KREX_CUTLASS=1
phase unprotected "$n" "$reps" KREX_CUTLASS=0
phase krex "$n" "$reps" KREX_CUTLASS=1
phase solo-after 1 "$after_reps" KREX_CUTLASS=0

files() { find "$work" -maxdepth 1 -name "$1-p*-r*.gemm.csv" | sort | paste -sd, -; }
lost_args=()
for m in solo-krex unprotected krex solo-after; do lost_args+=(--lost "$m=$(cat "$work/$m.lost")"); done
status=0
python3 lab/scripts/cutlass_compare.py "$(files solo)" \
  "solo-krex=$(files solo-krex)" "unprotected=$(files unprotected)" "krex=$(files krex)" \
  "solo-after=$(files solo-after)" \
  "${lost_args[@]}" --min-gap "$min_gap" --json "$out/compare.json" >"$out/compare.md" 2>>"$log" || status=1
stop_dmon
if [ -s "$out/dmon.log" ]; then
  limit=$(nvidia-smi --query-gpu=power.limit --format=csv,noheader,nounits 2>/dev/null | head -1 | tr -d ' ')
  limit_args=()
  [[ "$limit" =~ ^[0-9]+(\.[0-9]+)?$ ]] && limit_args=(--limit "$limit")
  { echo; echo "### GPU power and SM clock per phase (nvidia-smi dmon)"; echo
    python3 lab/scripts/dmon_phases.py "$out/dmon.log" "$work/phases.tsv" "${limit_args[@]}"; } >>"$out/compare.md" 2>>"$log" || status=1
  gzip -f "$out/dmon.log"
fi
cat "$out/compare.md"
tar -czf "$out/runs.tar.gz" -C "$work" . || status=1
exit "$status"
