#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The pools compared on one GPU, same synthetic workload (issue 24):
#   C++ krex::pool devices({0})   (bench/gpu/pool_bench.cu)
#   C++ krex::pool before devices() existed (the same source, -DKREX_BENCH_OLD_POOL,
#       against that commit's headers in $OLD_INCLUDE, e.g.
#       `git archive 58ee6b2^ include | tar -x -C build-oldpool`)
#   Python krex.Pool devices=[0]  (bench/python/pool_bench.py; needs the CUDA
#       build of the krex module importable and PyTorch)
# each with --workers 1 (the solo reference) and --workers $W, the multi-worker
# runs alternating new/old/python $ROUNDS times.
#
#   OLD_INCLUDE=build-oldpool/include bash lab/scripts/pool_compare.sh
#
# Environment: POOL_BENCH, POOL_BENCH_OLD (prebuilt binaries), ARCH (native: nvcc -arch), W (16), M (400 commands), PREP_MS (100), CYCLES (100000: ~50 us
# at 1980 MHz), ROUNDS (2), OUT (build-cuda/pool-compare). Writes $OUT/*.json,
# $OUT/pool_compare.md and $OUT/run.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build-cuda/pool-compare}"
mkdir -p "$out"
W="${W:-16}" M="${M:-400}" PREP_MS="${PREP_MS:-100}" CYCLES="${CYCLES:-100000}" ROUNDS="${ROUNDS:-2}"
py="${PYTHON:-python3}"
cuda_inc=(-I"$PWD/include")
bin="$out/bin"
mkdir -p "$bin"
nv=(nvcc -std=c++17 -O2 -arch="${ARCH:-native}" -DKREX_WITH_CUDA=1 -lcupti -ldl -lrt)
# POOL_BENCH / POOL_BENCH_OLD: binaries built already (e.g. the cuda preset's
# build-cuda/bench/krex_gpu_pool_bench); otherwise nvcc builds them here.
if [ -n "${POOL_BENCH:-}" ]; then cp "$POOL_BENCH" "$bin/pool_bench"; else
  "${nv[@]}" "${cuda_inc[@]}" bench/gpu/pool_bench.cu -o "$bin/pool_bench" &
fi
if [ -n "${POOL_BENCH_OLD:-}" ]; then cp "$POOL_BENCH_OLD" "$bin/pool_bench_old"; elif [ -n "${OLD_INCLUDE:-}" ]; then
  "${nv[@]}" -DKREX_BENCH_OLD_POOL -I"$OLD_INCLUDE" bench/gpu/pool_bench.cu -o "$bin/pool_bench_old" &
fi
wait
[ -x "$bin/pool_bench" ] || { echo "pool_bench did not build"; exit 1; }
common=(--commands "$M" --prep-ms "$PREP_MS" --kernel-cycles "$CYCLES")
run() {  # run NAME CMD...
  local name="$1"
  shift
  echo "\$ $*" >>"$out/run.log"
  "$@" --json "$out/$name.json" 2>&1 | tee -a "$out/run.log"
}
solo=(--commands $((M / 4)) --prep-ms "$PREP_MS" --kernel-cycles "$CYCLES")
run cpp-w1 "$bin/pool_bench" --workers 1 "${solo[@]}"
have_py=0
(cd /tmp && "$py" -c "import krex, torch; assert krex.backend == 'cuda', krex.backend") >>"$out/run.log" 2>&1 && have_py=1
[ "$have_py" = 1 ] && run py-w1 "$py" bench/python/pool_bench.py --workers 1 "${solo[@]}"
for r in $(seq 1 "$ROUNDS"); do
  run "cpp-w$W-r$r" "$bin/pool_bench" --workers "$W" "${common[@]}"
  [ -x "$bin/pool_bench_old" ] && run "old-w$W-r$r" "$bin/pool_bench_old" --workers "$W" "${common[@]}"
  [ "$have_py" = 1 ] && run "py-w$W-r$r" "$py" bench/python/pool_bench.py --workers "$W" "${common[@]}"
done
[ "$have_py" = 1 ] || echo "python: no CUDA krex module with torch (see run.log); Python pool not run"
W="$W" "$py" - "$out" <<'PY' | tee "$out/pool_compare.md"
import glob, json, os, sys
out = sys.argv[1]
rows = {}
for p in sorted(glob.glob(os.path.join(out, "*.json"))):
    name = os.path.basename(p)[:-5]
    rows[name] = json.load(open(p))
ref = {"c++": rows.get("cpp-w1"), "python": rows.get("py-w1")}
print("| run | workers | commands | failed | cmd/min | full protection | quiet checked | median of medians ms | p95 of medians ms | cmd p95 vs solo % | sample p95 ms | sample p95 vs solo % |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for name, r in rows.items():
    s = ref.get(r["lang"])
    rel = lambda a, b: "%+.2f" % ((a / b - 1) * 100) if b else "–"
    print("| %s | %d | %d | %d | %.1f | %d/%d | %s | %.5f | %.5f | %s | %.5f | %s |" % (
        name, r["workers"], r["commands"], r["failed"], r["cmd_per_min"], r["full_protection"],
        r["commands"] - r["failed"], r.get("quiet_checked", "–"), r["median_of_medians_ms"], r["p95_of_medians_ms"],
        rel(r["p95_of_medians_ms"], s["median_of_medians_ms"]) if s else "–", r["sample_p95_ms"],
        rel(r["sample_p95_ms"], s["sample_p95_ms"]) if s else "–"))
def mean(prefix):
    v = [r["cmd_per_min"] for n, r in rows.items() if n.startswith(prefix)]
    return sum(v) / len(v) if v else float("nan")
w = os.environ.get("W", "16")
new, old, pyw = mean("cpp-w%s-" % w), mean("old-w%s-" % w), mean("py-w%s-" % w)
print()
parts = ["C++ devices({0}) %.1f" % new]
if old == old:  # the old pool ran (OLD_INCLUDE or POOL_BENCH_OLD)
    parts.append("C++ old pool %.1f (new/old %.3f)" % (old, new / old))
if pyw == pyw:  # the Python pool ran
    parts.append("Python krex.Pool %.1f (python/C++ %.3f)" % (pyw, pyw / new if new else float("nan")))
print("mean cmd/min over rounds: " + ", ".join(parts))
PY
