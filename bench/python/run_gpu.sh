#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python binding on a GPU machine, offline: install krex from this checkout
# (scripts/install_python.sh: pip, or if pip refuses a plain CMake build of
# python/ put on PYTHONPATH), check it, then run bench/python/kernelbench_style.py.
#
#   bash bench/python/run_gpu.sh [kernelbench_style.py arguments...]
#   bash bench/python/run_gpu.sh --throughput [kernelbench_throughput.py arguments...]
#
# Writes to $OUT (default build-cuda/python-logs): install.log, env.txt,
# kernelbench_style.{md,json} (or kernelbench_throughput.{md,json}), run.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build-cuda/python-logs}"
mkdir -p "$out"
py="${PYTHON:-python3}"
t0=$(date +%s)

. scripts/install_python.sh
krex_install_python "$py" "$out" || exit 1

# Run from elsewhere so ./python (the source package, without the extension)
# does not shadow the installed one.
(cd /tmp && "$py" - <<'EOF'
import krex, torch, triton
print("krex", krex.__version__, "backend", krex.backend, "from", krex.__file__)
print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__)
print("device", torch.cuda.get_device_name(0))
EOF
) 2>&1 | tee "$out/env.txt"
grep -q "backend cuda" "$out/env.txt" || { echo "krex is not the CUDA build (see env.txt, install.log)"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv >>"$out/env.txt" 2>&1 || true

driver=bench/python/kernelbench_style.py
if [ "${1:-}" = "--throughput" ]; then
  driver=bench/python/kernelbench_throughput.py
  shift
fi
"$py" "$driver" --out "$out" "$@" 2>&1 | tee "$out/run.log"
rc=${PIPESTATUS[0]}
echo "total: $(( $(date +%s) - t0 )) s, exit $rc"
exit "$rc"
