#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# krex::compare spread over N krex workers at once on one GPU (each a
# krex_gpu_compare process with its own seed), pooled by compare_pool.py.
#
#   lab/scripts/compare_pool.sh BIN OUTDIR N PER_PROCESS [extra krex_gpu_compare args...]
set -uo pipefail
bin="$1"; out="$2"; n="$3"; per="$4"; shift 4
mkdir -p "$out/parts"
pids=()
for i in $(seq 1 "$n"); do
  "$bin" --comparisons "$per" --seed "$((1000 + i))" --json "$out/parts/w$i.json" "$@" \
    >"$out/parts/w$i.log" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
python3 "$(dirname "$0")/compare_pool.py" "$out/pool.json" "$out"/parts/w*.json
exit "$rc"
