#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Issue 19's device sessions in one call each (lab/results/ranks.md): one
# H200, under 550 s, build included.
#
#   lab/scripts/issue19-next.sh [stage...]    stages: build eval placement shapes spaced churn flush report
#                                             (default: build eval placement report, run 5)
#   lab/scripts/issue19-next.sh build flush churn, then shapes report   the two calls after run 5 (ranks.md)
#   lab/scripts/issue19-next.sh build spaced report                      the call after runs 9-11 (ranks.md)
#
#   build      configure the CUDA preset (build-cuda; Ninja if present, no tests,
#              examples or Python) and build krex_eval, krex_eval_worker and
#              krex_gpu_placement
#   eval       the short axpby sets alone, so that no 7.5 GB or gemm command runs
#              in the workers: ranks.md's command
#                lab/scripts/eval.sh ranks --timeout-s 120 --filter axpby-16M,axpby-16M-wide \
#                  --sync axpby-16M,axpby-16M-wide --configs serial:1,krex:16:persistent,serial:1 \
#                  --min-per-worker 20 --native-copies 6
#              run as krex_eval directly (eval.sh would build a second tree in
#              build-eval); the worker records the clocks at region exit, the
#              memory clock, temperature, clocks-event reasons, quiet_last_ratio
#              and the buffers' and flush buffer's addresses (bench/eval/worker.cu)
#   placement  krex_gpu_placement at the sizes that moved most in run 1
#              (17615872, 17112064 floats; 16777216 as the control), the eval's
#              grid (16 blocks per SM) and timings (@sync, then batched): the
#              share of fast samples per allocation; then fresh processes
#              (2 allocations each) at 17615872 @sync. Each run only if the
#              time left allows it
#   shapes     instead of eval (not both): the short sets alone in both shapes at
#              C=16 and persistent at C=4, against 12 native copies, so that the
#              process shape and C=4 get enough 1-2% pairs (runs 5-8 found the
#              1-2% excess growing with the number of workers, in the process
#              shape too):
#                krex_eval --config ranks --filter axpby-16M,axpby-16M-wide \
#                  --sync axpby-16M,axpby-16M-wide --min-per-worker 20 --native-copies 12 \
#                  --configs serial:1,krex:16:persistent,krex:16,krex:4:persistent,serial:1
#              into the folder issue19-shapes
#   spaced     instead of eval and shapes (one of the three): the whole ranks list,
#              krex C=16 persistent against a native repeat whose commands put
#              their inputs behind a random 0-4 GB spacer (runs 9-11 found that
#              this alone gives fresh serial processes the 1-2% flips of the
#              persistent workers), the reference pass as always:
#                krex_eval --config ranks --configs serial:1,krex:16:persistent,serial:1 \
#                  --native-copies 6 --native-spacer-mb 4096
#              into the folder issue19-spaced
#   churn      krex_gpu_placement with siblings that hold and reallocate device
#              memory between allocations (--churn-procs 15, 2 GB each) against
#              none, at 16944128 floats (the candidate that kept a -0.8% offset in
#              every copy of run 5), batched and @sync: whether other long-lived
#              processes' memory widens the spread across allocations
#   flush      krex_gpu_placement's own batched timing (krex::measure's batched
#              loop written out) at 17615872 floats with each L2 flush: memset of
#              the sample's index (as krex::measure), memset of a fixed byte, two
#              memsets of half the buffer, a store kernel, a load kernel, none; and the own synchronized loop
#              with the memset: whether the flush's value, its engine or the dirty
#              lines it leaves set the two levels and the odd/even alternation
#              (flip_forensics.py T11)
#   report     lab/scripts/flip_forensics.py on the eval: every table into
#              forensics.md, and T1, T4, T6, T7, T8, T9, T10, T12, T13 printed last
#
# Output: $OUT (default build-cuda/issue19-out), at most 8 files:
#   issue19-next.log   everything this script printed
#   eval.json.gz       the eval's every command and sample (flip_forensics.py reads it)
#   summary.md         the eval's summary
#   eval.tgz           the eval's folder (eval.json, summary.md, workers.log), its console
#                      output (eval-console.log) and build.log
#   placement.tgz      every placement (and churn) run's log and JSON (every sample, the addresses)
#   placement.md       the placement (and churn) runs' printed tables
#   forensics.md       flip_forensics.py's tables
#   smi.txt            nvidia-smi before and after (clocks, power, temperature, reasons)
# Environment: ISSUE19_DEADLINE_S (530: no new step starts after it),
# ISSUE19_ALLOCS (40: allocations per placement run, as ranks.md's placement table), ISSUE19_EVAL_JSON (the
# report stage's input when the eval stage did not run).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out="${OUT:-build-cuda/issue19-out}"
mkdir -p "$out"
work=build-cuda/issue19
deadline="${ISSUE19_DEADLINE_S:-530}"
allocs="${ISSUE19_ALLOCS:-40}"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(build eval placement report)
has() { local s; for s in "${stages[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }
for s in "${stages[@]}"; do
  case "$s" in build | eval | placement | shapes | spaced | churn | flush | report) ;; *)
    echo "usage: lab/scripts/issue19-next.sh [build] [eval | shapes | spaced] [placement] [churn] [flush] [report]" >&2
    exit 2
    ;;
  esac
done
evals=0
for s in eval shapes spaced; do has "$s" && evals=$((evals + 1)); done
if [ "$evals" -gt 1 ]; then
  echo "lab/scripts/issue19-next.sh: eval, shapes and spaced write the same files in \$OUT: run one per call" >&2
  exit 2
fi
exec > >(tee -a "$out/issue19-next.log") 2>&1
tee_pid=$!
left() { echo $((deadline - SECONDS)); }
say() { echo "[issue19 +${SECONDS}s] $*"; }
status=0
export PATH="$PATH:/usr/local/cuda/bin"
bin=build-cuda/bench
evname=issue19-short  # flip_forensics.py labels a run by its folder
has shapes && evname=issue19-shapes
has spaced && evname=issue19-spaced
evdir="$work/$evname"
mkdir -p "$work"

smi() {
  {
    echo "== $1 =="
    nvidia-smi --query-gpu=name,driver_version,pci.bus_id,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu,clocks_event_reasons.active --format=csv 2>&1 || true
    nvidia-smi -q -d CLOCK,PERFORMANCE,TEMPERATURE,POWER 2>&1 | head -120 || true
  } >>"$out/smi.txt"
}

if has build; then
  say "build (preset cuda)"
  gen=()
  command -v ninja >/dev/null && [ ! -f build-cuda/CMakeCache.txt ] && gen=(-G Ninja)
  {
    nvcc --version | tail -2
    cmake --preset cuda "${gen[@]}" -DKREX_BUILD_TESTS=OFF -DKREX_BUILD_EXAMPLES=OFF -DKREX_BUILD_PYTHON=OFF &&
      cmake --build build-cuda -j"$(nproc)" --target krex_eval krex_eval_worker krex_gpu_placement
  } >"$work/build.log" 2>&1 || {
    tail -30 "$work/build.log"
    say "build failed (build.log in eval.tgz)"
    status=1
  }
  tail -2 "$work/build.log"
fi
smi "before"

if { has eval || has shapes || has spaced; } && [ -x "$bin/eval/krex_eval" ]; then
  sets=(--filter axpby-16M,axpby-16M-wide --sync axpby-16M,axpby-16M-wide)
  if has spaced; then
    say "spaced: the ranks list, krex C=16 persistent against a native repeat behind random spacers ($(left) s left)"
    configs=(--configs serial:1,krex:16:persistent,serial:1 --native-copies 6 --native-spacer-mb 4096)
    sets=()
  elif has shapes; then
    say "shapes: the short sets alone, both shapes, C=16 and C=4 ($(left) s left)"
    configs=(--configs serial:1,krex:16:persistent,krex:16,krex:4:persistent,serial:1 --native-copies 12)
  else
    say "eval: the short sets alone ($(left) s left)"
    configs=(--configs serial:1,krex:16:persistent,serial:1 --native-copies 6)
  fi
  rm -rf "$evdir"
  # eval: krex_eval --plan estimates ~164 s on the H200 (it took ~70 s); bounded so that the rest still runs.
  timeout --kill-after=10 "$(($(left) - 120 > 60 ? $(left) - 120 : 60))" \
    "$bin/eval/krex_eval" --config ranks --out "$evdir" --timeout-s 120 \
    "${sets[@]}" "${configs[@]}" --min-per-worker 20 \
    >"$work/eval-console.log" 2>&1
  rc=$?
  # Its progress counter (carriage returns) left out of the log.
  tr '\r' '\n' <"$work/eval-console.log" | grep -Ev ': [0-9]+/[0-9]+ *$' | tail -40
  [ "$rc" -eq 0 ] || {
    say "krex_eval exited with status $rc"
    status=1
  }
  [ -f "$evdir/eval.json" ] && gzip -c "$evdir/eval.json" >"$out/eval.json.gz"
  [ -f "$evdir/summary.md" ] && cp "$evdir/summary.md" "$out/summary.md"
  say "eval done"
fi

pdir="$work/placement"
if { has placement || has churn || has flush; } && [ -x "$bin/krex_gpu_placement" ]; then
  rm -rf "$pdir"
  mkdir -p "$pdir"
  : >"$out/placement.md"
fi
place() {  # place NAME SECONDS_NEEDED ARGS...: one run if the time left allows it
  local name="$1" need="$2"
  shift 2
  if [ "$(left)" -lt "$need" ]; then
    say "placement $name skipped: $(left) s left, needs ~$need"
    return 0
  fi
  say "placement $name: krex_gpu_placement $*"
  {
    echo "### $name: krex_gpu_placement $*"
    echo
    timeout --kill-after=5 "$need" "$bin/krex_gpu_placement" "$@" --json "$pdir/$name.json" 2>&1
    echo "[exit $?]"
    echo
  } | tee "$pdir/$name.log" >>"$out/placement.md"
}
# ~0.45 s per allocation (200 ms settles twice, 2 x 103 samples): ~19 s a run at 40.
per=$((allocs / 2 + 10))
common=(--allocs "$allocs" --samples 100 --grid-per-sm 16)
if has placement && [ -x "$bin/krex_gpu_placement" ]; then
  place sync-17615872 "$per" "${common[@]}" --floats 17615872 --timing sync
  place sync-17112064 "$per" "${common[@]}" --floats 17112064 --timing sync
  place batched-17615872 "$per" "${common[@]}" --floats 17615872 --timing batched
  place batched-17112064 "$per" "${common[@]}" --floats 17112064 --timing batched
  place sync-16777216 "$per" "${common[@]}" --floats 16777216 --timing sync
  for i in 1 2 3 4 5 6 7 8; do
    place "fresh$i-sync-17615872" 8 --allocs 2 --samples 100 --grid-per-sm 16 --floats 17615872 \
      --timing sync --seed "$i"
  done
fi
if has churn && [ -x "$bin/krex_gpu_placement" ]; then
  # 15 siblings reallocating up to 2 GB each before every allocation: a few
  # seconds more per run than without.
  for t in batched sync; do
    place "churn0-$t-16944128" "$((per + 10))" "${common[@]}" --floats 16944128 --timing "$t" --churn-procs 0
    place "churn15-$t-16944128" "$((per + 40))" "${common[@]}" --floats 16944128 --timing "$t" \
      --churn-procs 15 --churn-mb 2048
  done
fi
if has flush && [ -x "$bin/krex_gpu_placement" ]; then
  f=(--floats 17615872)
  place flush-memset-index "$per" "${common[@]}" "${f[@]}" --timing own-batched --flush memset
  place flush-memset-5a "$per" "${common[@]}" "${f[@]}" --timing own-batched --flush memset --flush-byte 90
  place flush-memset2 "$per" "${common[@]}" "${f[@]}" --timing own-batched --flush memset2
  place flush-write "$per" "${common[@]}" "${f[@]}" --timing own-batched --flush write
  place flush-read "$per" "${common[@]}" "${f[@]}" --timing own-batched --flush read
  place flush-none "$per" "${common[@]}" "${f[@]}" --timing own-batched --flush none
  place flush-memset-sync "$per" "${common[@]}" "${f[@]}" --timing own --flush memset
fi
[ -d "$pdir" ] && tar -czf "$out/placement.tgz" -C "$work" placement
smi "after"

# One line per placement run: the share of fast samples against the run's own
# center (the median of its allocations' first medians) and against a center
# common to every run of that size, timing, flush and number of siblings (the
# fresh processes' own center is only the median of two medians).
placement_table() {
  python3 - "$1" <<'PY'
import glob, json, os, statistics, sys
runs = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        runs.append((os.path.basename(f)[:-5], json.load(open(f))))
    except (OSError, ValueError) as e:
        print(f"{f}: {e}")
def key(d):  # the runs that share a center: size, timing, flush and siblings
    return d["floats"], d["timing"], d.get("flush"), d.get("flush_byte"), d.get("churn_procs")
common = {}
for _, d in runs:
    common.setdefault(key(d), []).extend(t["first_ms"] for t in d["trials"])
print("| run | floats | timing | allocs | median ms | fast % (own center) | fast % (common center) "
      "| allocations by 1st-timing fast share <10 / 10-30 / 30-50 / >=50% | 1st vs 2nd share r |")
print("|---|---|---|---|---|---|---|---|---|")
for name, d in runs:
    center = statistics.median(common[key(d)])
    below = center * (1 - d["fast_pct"] / 100)
    s_all = [s for t in d["trials"] for s in t["first_samples_ms"] + t["second_samples_ms"]]
    own = 100 * statistics.fmean([t["first_fast_share"] + t["second_fast_share"] for t in d["trials"]]) / 2
    com = 100 * sum(s < below for s in s_all) / len(s_all)
    sh = [t["first_fast_share"] for t in d["trials"]]
    bins = [sum(a <= x < b for x in sh) for a, b in ((0, .1), (.1, .3), (.3, .5), (.5, 1.01))]
    s2 = [t["second_fast_share"] for t in d["trials"]]
    try:
        r = f"{statistics.correlation(sh, s2):.2f}"
    except (statistics.StatisticsError, AttributeError, ZeroDivisionError):
        r = "-"
    print(f"| {name} | {d['floats']} | {d['timing']} | {d['allocs']} | {d['median_ms']:.5f} | {own:.1f} | {com:.1f} "
          f"| {' / '.join(map(str, bins))} | {r} |")
print()
PY
}

if has report; then
  ej="${ISSUE19_EVAL_JSON:-$evdir/eval.json}"
  if [ -f "$ej" ]; then
    python3 lab/scripts/flip_forensics.py "$ej" >"$out/forensics.md" || status=1
    [ -d "$work/placement" ] && placement_table "$work/placement"
    python3 lab/scripts/flip_forensics.py --only T1,T4,T6,T7,T8,T9,T10,T12,T13 "$ej" || status=1
  else
    say "report: no eval.json at $ej"
    status=1
  fi
fi

if [ -d "$evdir" ] || [ -f "$work/build.log" ]; then
  files=()
  [ -d "$evdir" ] && files+=("$evname")
  [ -f "$work/build.log" ] && files+=(build.log)
  [ -f "$work/eval-console.log" ] && files+=(eval-console.log)
  tar -czf "$out/eval.tgz" -C "$work" "${files[@]}"
fi
say "done, status $status; files in $out: $(ls "$out" | tr '\n' ' ')"
exec >&- 2>&-
wait "$tee_pid" 2>/dev/null
exit "$status"
