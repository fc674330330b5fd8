#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks the patched cutlass_profiler's --krex-placements on a GPU (docs/CUTLASS.md),
# each check a profiler run whose output is asserted; exits 1 naming the first
# that fails. Build first with lab/scripts/cutlass.sh build (done here if the
# binary is missing).
#
#   lab/scripts/cutlass_placements.sh
#
# 1. K=8 on one large GEMM problem, regions on: every kernel timed (CSV status
#    success), one stderr placements line per kernel, each report line with
#    "placements": k 8, 32 segments, 8 medians, the bytes.
# 2. The same with --use-cuda-graphs=true (the captured loop).
# 3. KREX_CUTLASS=0 with reports: the placements line with "report": null.
# 4. A budget too small: every kernel refused (status not success), the reason on stderr.
# 5. --krex-placements=0 and a misspelt --krex-placement: exit 1 at start-up.
# 6. K=1 against K=8: the runtimes of both (printed, not asserted: the numbers).
# Writes $OUT/placements.log (every run's command and stderr) and $OUT/placements.md
# (the runtimes and spreads); default OUT .deps/cutlass-logs.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
out="${OUT:-.deps/cutlass-logs}"
bin="${KREX_CUTLASS_PROFILER:-.deps/cutlass-build/tools/profiler/cutlass_profiler}"
list="${KREX_CUTLASS_KERNEL_LIST:-.deps/cutlass-build/tools/library/generated_kernels.txt}"
if [ ! -x "$bin" ]; then
  lab/scripts/cutlass.sh build || { echo "cutlass_placements.sh: no profiler (build failed)" >&2; exit 1; }
fi
kernels=$(grep . "$list" | paste -sd, -)
nk=$(grep -c . "$list")
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log="$out/placements.log"
: >"$log"
seg="cutlass-placements-$$"
base=(--operation=Gemm --m=8192 --n=8192 --k=4096 --kernels="$kernels" --providers=cutlass
      --verification-enabled=false)
fail() { echo "cutlass_placements.sh: FAILED: $*" | tee -a "$log" >&2; exit 1; }
# prof NAME [VAR=VALUE...] -- ARGS...: one profiler run; its rc in $rc, stderr in $work/NAME.err
prof() {
  local name="$1"
  shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  echo "=== $name: ${envs[*]} $bin $*" >>"$log"
  env KREX_SEGMENT="$seg" "${envs[@]}" timeout 300 "$bin" "$@" --output="$work/$name" \
    >"$work/$name.out" 2>"$work/$name.err"
  rc=$?
  cat "$work/$name.err" >>"$log"
  echo "=== $name: exit $rc" >>"$log"
}
# csv_check NAME WANT: every row's Status is WANT ("success" or "not-success"); prints "kernel runtime" rows.
csv_check() {
  python3 - "$work/$1.gemm.csv" "$2" "$nk" <<'PY'
import csv, sys
path, want, nk = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = [r for r in csv.DictReader(open(path)) if r.get("Provider", "CUTLASS").upper() == "CUTLASS"]
if len(rows) != nk:
    sys.exit(f"{path}: {len(rows)} rows, expected {nk}")
for r in rows:
    ok = r["Status"] == "success"
    if ok != (want == "success"):
        sys.exit(f"{path}: {r['Operation']} status {r['Status']}, expected {want}")
    print(r["Operation"], r["Runtime"])
PY
}
# reports_check FILE K NULL: each line has placements.k == K, 4K samples, K medians, bytes > 0;
# NULL=1: "report" is null (regions off), 0: an object.
reports_check() {
  python3 - "$1" "$2" "$3" "$nk" <<'PY'
import json, sys
path, k, null, nk = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4])
lines = [json.loads(l) for l in open(path) if l.strip()]
if len(lines) < nk:
    sys.exit(f"{path}: {len(lines)} lines, expected at least {nk}")
for d in lines:
    p = d.get("placements")
    if p is None or p["k"] != k or len(p["samples_ms"]) != 4 * k or len(p["median_ms"]) != k \
            or p["placement"][:k + 1] != list(range(k)) + [0] or p["bytes"] <= 0:
        sys.exit(f"{path}: bad placements in {d.get('operation')}: {p}")
    if (d["report"] is None) != null:
        sys.exit(f"{path}: report {'not ' if null else ''}null in {d.get('operation')}")
    print(d["operation"], d["runtime_ms"], "spread %.4f" % p["spread"], "bytes", p["bytes"])
PY
}

# 1. K=8, regions on.
prof k8 KREX_CUTLASS=1 KREX_CUTLASS_REPORTS="$work/k8.jsonl" -- "${base[@]}" --krex-placements=8 --krex-placement-budget=16384
[ "$rc" -eq 0 ] || fail "k8: exit $rc"
grep -q "timing every kernel over 8 placements of its operands (at most 16384 MiB" "$work/k8.err" || fail "k8: no start-up line"
[ "$(grep -c '^krex: cutlass_profiler: placements: problem 1, .* K=8, spread ' "$work/k8.err")" -eq "$nk" ] \
  || fail "k8: not one placements line per kernel"
k8=$(csv_check k8 success) || fail "k8: $k8"
r8=$(reports_check "$work/k8.jsonl" 8 0) || fail "k8 reports: $r8"
# 2. K=8 with CUDA graphs.
prof k8g KREX_CUTLASS=1 -- "${base[@]}" --krex-placements=8 --use-cuda-graphs=true
[ "$rc" -eq 0 ] || fail "k8g: exit $rc"
[ "$(grep -c '^krex: cutlass_profiler: placements: problem 1, .* K=8, spread ' "$work/k8g.err")" -eq "$nk" ] \
  || fail "k8g: not one placements line per kernel"
k8g=$(csv_check k8g success) || fail "k8g: $k8g"
# 3. Regions off, reports on: the lines say "report": null.
prof k4off KREX_CUTLASS=0 KREX_CUTLASS_REPORTS="$work/k4off.jsonl" -- "${base[@]}" --krex-placements=4
[ "$rc" -eq 0 ] || fail "k4off: exit $rc"
r4=$(reports_check "$work/k4off.jsonl" 4 1) || fail "k4off reports: $r4"
# 4. A budget of 100 MiB: every kernel refused, saying why.
prof budget KREX_CUTLASS=1 -- "${base[@]}" --krex-placements=8 --krex-placement-budget=100
grep -q "kernel not profiled: .*over the budget of 104857600 bytes .* lower K to at most" "$work/budget.err" \
  || fail "budget: no refusal on stderr"
b=$(csv_check budget not-success) || fail "budget: $b"
# 5. Bad flags end the profiler at start-up.
prof zero KREX_CUTLASS=1 -- "${base[@]}" --krex-placements=0
if [ "$rc" -ne 1 ] || ! grep -q -- "--krex-placements=0 is not between 1 and 4096" "$work/zero.err"; then
  fail "zero: rc $rc, or no reason on stderr"
fi
prof typo KREX_CUTLASS=1 -- "${base[@]}" --krex-placement=8
if [ "$rc" -ne 1 ] || ! grep -q -- "unknown flag --krex-placement " "$work/typo.err"; then
  fail "typo: rc $rc, or no reason on stderr"
fi
# 6. K=1 for the record.
prof k1 KREX_CUTLASS=1 -- "${base[@]}"
[ "$rc" -eq 0 ] || fail "k1: exit $rc"
grep -q "placements" "$work/k1.err" && fail "k1: placements output without the flag"
k1=$(csv_check k1 success) || fail "k1: $k1"

{
  echo "# cutlass_profiler --krex-placements (m=8192 n=8192 k=4096, $nk kernels)"
  echo
  echo "K=1 runtimes (ms):"; echo '```'; echo "$k1"; echo '```'
  echo "K=8 runtimes (ms):"; echo '```'; echo "$k8"; echo '```'
  echo "K=8 report lines (runtime ms, spread, bytes):"; echo '```'; echo "$r8"; echo '```'
  echo "K=8 with CUDA graphs runtimes (ms):"; echo '```'; echo "$k8g"; echo '```'
  echo "stderr placements lines (K=8):"; echo '```'; grep '^krex: cutlass_profiler: placements:' "$work/k8.err"; echo '```'
} >"$out/placements.md"
cat "$out/placements.md"
echo "cutlass_placements.sh: all checks passed" | tee -a "$log"
