#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The agents' Python path's open H200 questions (lab/results/python.md, "the
# rest split, and a lock beside krex"; lab/results/nvbench.md), one device
# call per plan, each under the 600 s a call may run:
#
#   lab/scripts/agents-path-next.sh kb      the real KernelBench at 8 workers: krex, krex without
#                                           the pin (KREX_PIN=0) and a lock, against solo on the
#                                           same machine; the regions' reports (pinned CPUs,
#                                           clocks, quiet probes) kept per call. About 380 s.
#                                           Carry .deps/KernelBench.
#   lab/scripts/agents-path-next.sh kb2     the real KernelBench's 8 workers run one after another,
#                                           each alone (serial-8: solo in the shape of the 8-worker
#                                           phases, 8 processes with the same problem orders), then
#                                           krex-8: is krex-8's p95 the spread of 8 solo processes?
#                                           About 450 s. Carry .deps/KernelBench.
#   lab/scripts/agents-path-next.sh kb3     whether memory alone brings the slow placements: the
#                                           8 workers one after another, each beside 7 processes
#                                           that only hold device memory (held-8, 4 GB each with
#                                           holes), then krex-8; solo, solo-again and serial-8
#                                           taken from run F (lab/results/python.md). About 400 s.
#                                           Carry .deps/KernelBench.
#   lab/scripts/agents-path-next.sh kb4     each call's trials over 8 placements of its inputs
#                                           (--placements 8): solo, solo-again and krex-8 so. Run H
#                                           (lab/results/python.md) ran it at 1495c76, where the
#                                           spread was krex's (KREX_PLACEMENTS, one region per
#                                           call), with krex-8@KREX_PLACEMENTS=1 beside it; the
#                                           driver now spreads the trials itself (one region per
#                                           part). About 250 s. Carry .deps/KernelBench.
#   lab/scripts/agents-path-next.sh kb5     krex-8 beside krex-8 with every sibling frozen
#                                           (KREX_FREEZE_SCOPE=all: those only computing on the
#                                           host too), solo and solo-again fresh; each call's
#                                           trials kept. About 300 s. Carry .deps/KernelBench.
#   lab/scripts/agents-path-next.sh kb6     krex-8 beside krex-8 joining at the first timing call
#                                           (KREX_PATCH_JOIN=0, as when the issue was filed: the
#                                           workers' preparation ungated), solo fresh, no
#                                           solo-again. About 300 s. Carry .deps/KernelBench.
#   lab/scripts/agents-path-next.sh kb7     the card's clocks, power, temperatures and throttle
#                                           reasons sampled through every call (nvidia-smi every
#                                           50 ms, --smi-ms): solo, krex-8, then serial-8 (the
#                                           same workers one at a time). About 380 s.
#                                           Carry .deps/KernelBench.
#   lab/scripts/agents-path-next.sh kb8     churn-8: the 8 workers one after another under krex,
#                                           each beside 7 krex tenants that only allocate and
#                                           free device memory between its regions; krex-8
#                                           beside it; clocks sampled as in kb7. About 380 s.
#                                           Carry .deps/KernelBench.
#   lab/scripts/agents-path-next.sh kb9     one worker, 4 calls per problem: solo (no krex) against
#                                           krex-1, krex-1 without CUPTI's callbacks
#                                           (KREX_GATING=explicit), krex-1 unpinned (KREX_PIN=0)
#                                           and krex-1 with neither:
#                                           whether krex's own host work in the measuring process
#                                           brings the slow calls with no other worker at all
#                                           (lab/results/python.md, "what the slow calls are not").
#                                           About 420 s. Carry .deps/KernelBench.
#   lab/scripts/agents-path-next.sh levels  one process alone, no krex: whether KernelBench's
#                                           per-call medians sit at levels set by where the
#                                           buffers land (lab/scripts/kernelbench_levels.py:
#                                           10 draws of each problem's inputs behind random
#                                           spacers, 3 rounds), then again with 40 GB of device
#                                           memory cut into holes. About 150 s. Carry
#                                           .deps/KernelBench.
#   lab/scripts/agents-path-next.sh series  one process alone, no krex: one draw of each problem
#                                           timed round-robin for 150 s with the L2 flush's GPU
#                                           time, the launch path and CPU steal per call
#                                           (kernelbench_levels.py --series), nvidia-smi
#                                           sampled every 100 ms beside it. About 180 s.
#                                           Carry .deps/KernelBench.
#   lab/scripts/agents-path-next.sh burn    as series, 135 s, pinned to the last CPU, with 14 busy
#                                           processes on the other CPUs through its middle
#                                           45 s, and a CPU probe per call: whether load on
#                                           the host's other CPUs brings the host-slow
#                                           stretches. About 190 s. Carry .deps/KernelBench.
#   lab/scripts/agents-path-next.sh pool    krex.Pool's throughput at 8 workers (bench/python's
#                                           kernelbench_throughput.py, pool shape): unprotected,
#                                           lock, krex and krex without the 2 ms hand-off
#                                           (KREX_HANDOFF_GRACE_MS=0). About 250 s. No carry.
#   lab/scripts/agents-path-next.sh nvb     nvbench's examples (8 of 9, as in nvbench.md) with each
#                                           example process's pid, start and end logged, so the
#                                           remaining "-shared" states are told apart (starting,
#                                           ending, running throughout); beside its build, the
#                                           GPU suite (test_cuda), run before any measurement.
#                                           About 450 s. Carry .deps/cuda-bench,
#                                           .deps/nvbench-examples and .deps/pylibs.
#
# Output: $OUT/<plan>.tgz (every file) and $OUT/<plan>.log (the console).
# Each phase runs under a time limit; a phase cut short says so in the log
# and leaves what it finished.
set -uo pipefail
cd "$(dirname "$0")/../.."
plan=${1:?"usage: $0 kb|kb2|kb3|kb4|kb5|kb6|kb7|kb8|kb9|levels|series|burn|pool|nvb"}
out=${OUT:-/tmp/agents-path-next}
mkdir -p "$out"
log=$out/$plan.log
t0=$(date +%s)
elapsed() { echo $(($(date +%s) - t0)); }

# limited SECONDS COMMAND...: COMMAND under coreutils' timeout, which runs it
# in a process group of its own and ends the whole group when it runs past
# SECONDS (KILL 5 s after TERM: a frozen process does not take TERM).
limited() {
  local s=$1 rc=0
  shift
  timeout --kill-after=5 "$s" "$@" >>"$log" 2>&1 || rc=$?
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "agents-path-next: CUT after $s s: $*" >>"$log"; fi
  echo "agents-path-next: exit $rc at $(elapsed) s: $*" >>"$log"
  return "$rc"
}

# kb_run SECONDS TAG kernelbench_real.py ARGS...: the real-KernelBench driver
# (lab/scripts/kernelbench_real.sh, its GPU test skipped) into
# build-cuda/kernelbench-real/TAG, under `limited`, then that folder as
# $out/$plan.tgz.
kb_run() {
  local s=$1 tag=$2
  shift 2
  limited "$s" env OUT= KB_TAG="$tag" KREX_KB_TEST=0 bash lab/scripts/kernelbench_real.sh "$@"
  tar czf "$out/$plan.tgz" -C build-cuda/kernelbench-real "$tag" 2>>"$log"
}

case "$plan" in
  kb)
    kb_run 520 next \
      --workers 8 --timeout 150 --modes krex,krex@KREX_PIN=0,lock
    ;;
  kb2)
    kb_run 540 kb2 \
      --workers 8 --timeout 380 --modes serial,krex
    ;;
  kb3)
    kb_run 540 kb3 \
      --workers 8 --timeout 380 --modes serial,held,krex \
      --solo-from lab/results/h200-python/kernelbench-real-w8-serial/kernelbench_real.json
    ;;
  kb4)
    kb_run 560 kb4 \
      --workers 8 --timeout 200 --placements 8 --modes krex
    ;;
  kb5)
    kb_run 540 kb5 \
      --workers 8 --timeout 200 --modes krex,krex@KREX_FREEZE_SCOPE=all
    ;;
  kb6)
    kb_run 540 kb6 \
      --workers 8 --timeout 200 --no-solo-again --modes krex,krex@KREX_PATCH_JOIN=0
    ;;
  kb7)
    kb_run 560 kb7 \
      --workers 8 --timeout 300 --no-solo-again --smi-ms 50 --modes krex,serial
    ;;
  kb8)
    kb_run 560 kb8 \
      --workers 8 --timeout 300 --no-solo-again --smi-ms 50 --modes churn,krex
    ;;
  kb9)
    kb_run 560 kb9 \
      --workers 1 --reps 4 --timeout 150 --no-solo-again \
      --modes krex,krex@KREX_GATING=explicit,krex@KREX_PIN=0,krex@KREX_GATING=explicit@KREX_PIN=0
    ;;
  levels)
    limited 300 "${PYTHON:-python3}" lab/scripts/kernelbench_levels.py --kernelbench .deps/KernelBench \
      --problems 10,6,1,16,50,88,95,12 --draws 10 --rounds 3 --trials 30 --fragment 40 \
      --out "$out/levels"
    tar czf "$out/levels.tgz" -C "$out" levels 2>>"$log"
    ;;
  series)
    mkdir -p "$out/series"
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,temperature.memory,clocks_throttle_reasons.active,utilization.gpu,utilization.memory \
      --format=csv,nounits -lms 100 >"$out/series/smi.csv" 2>>"$log" &
    smi=$!
    limited 240 "${PYTHON:-python3}" lab/scripts/kernelbench_levels.py --kernelbench .deps/KernelBench \
      --problems 16,1,6,10,50,12,88 --series 150 --trials 30 --out "$out/series"
    kill "$smi" 2>/dev/null
    wait "$smi" 2>/dev/null
    tar czf "$out/series.tgz" -C "$out" series 2>>"$log"
    ;;
  burn)
    limited 200 "${PYTHON:-python3}" lab/scripts/kernelbench_levels.py --kernelbench .deps/KernelBench \
      --problems 16,1,6,10,50,12,88 --series 135 --burn 14 --trials 30 --out "$out/burn"
    tar czf "$out/burn.tgz" -C "$out" burn 2>>"$log"
    ;;
  pool)
    limited 400 env OUT="$out/pool" bash bench/python/run_gpu.sh --throughput --shapes pool \
      --workers 8 --modes unprotected,lock,krex,krex@KREX_HANDOFF_GRACE_MS=0
    tar czf "$out/pool.tgz" -C "$out" pool 2>>"$log"
    ;;
  nvb)
    export NVB_EXAMPLES="throughput auto_throughput enums exec_tag_sync exec_tag_timer skip stream summaries"
    export NVB_OUT=build-nvbench-gpu/out
    # The GPU suite builds beside nvbench's examples and runs before any measurement.
    (cmake --preset cuda -DKREX_BUILD_PYTHON=OFF -DKREX_BUILD_EXAMPLES=OFF >"$out/suite-build.log" 2>&1 &&
      cmake --build build-cuda -j8 --target test_cuda >>"$out/suite-build.log" 2>&1) &
    suite=$!
    limited 120 bash lab/scripts/nvbench_gpu.sh build
    if wait "$suite"; then
      limited 150 build-cuda/tests/test_cuda --gtest_brief=1
    else
      echo "agents-path-next: test_cuda did not build (suite-build.log)" >>"$log"
    fi
    limited 60 bash lab/scripts/nvbench_gpu.sh solo
    limited 80 bash lab/scripts/nvbench_gpu.sh unprotected
    limited $((560 - $(elapsed))) bash lab/scripts/nvbench_gpu.sh krex
    limited 30 bash lab/scripts/nvbench_gpu.sh compare
    tar czf "$out/nvb.tgz" build-nvbench-gpu/out 2>>"$log"
    ;;
  *)
    echo "agents-path-next: unknown plan '$plan' (kb, kb2, kb3, kb4, kb5, kb6, kb7, kb8, kb9, levels, series, burn, pool, nvb)" >&2
    exit 2
    ;;
esac
echo "agents-path-next: $plan done at $(elapsed) s" >>"$log"
tail -60 "$log"
