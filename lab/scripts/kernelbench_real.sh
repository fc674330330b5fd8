#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The real KernelBench under krex on a GPU machine, offline: installs krex from
# this checkout (scripts/install_python.sh: pip, or if pip refuses a CMake
# build of python/ put on PYTHONPATH), checks it is the CUDA build, runs
# the GPU test of KernelBench's timing module (tests/python/test_kernelbench.py),
# then lab/scripts/kernelbench_real.py with the arguments given.
#
#   lab/scripts/kernelbench_real.sh [kernelbench_real.py arguments...]
#   KERNELBENCH_DIR=/path/to/KernelBench lab/scripts/kernelbench_real.sh --workers 8
#
# KernelBench: a checkout at $KERNELBENCH_DIR (default .deps/KernelBench, which
# git ignores: copy it there, it is not fetched here). Writes to
# build-cuda/kernelbench-real/$KB_TAG (KB_TAG default "run"; a later run can
# reuse its solo phases: --solo-from build-cuda/kernelbench-real/run/kernelbench_real.json):
# install.log, env.txt, gpu_test.log, kernelbench_real.{md,json}, run.log,
# kernelbench_real.partial.json and worker-logs/ (each worker's steps); and
# copies them to $OUT when it is set. KREX_KB_TEST=0 skips the GPU test;
# KREX_KB_TEST_ONLY=substring runs only its tests of that name.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="build-cuda/kernelbench-real/${KB_TAG:-run}"
mkdir -p "$out"
copy_out() { if [ -n "${OUT:-}" ]; then cp -r "$out"/. "$OUT"/ 2>/dev/null || true; fi; }
trap copy_out EXIT
py="${PYTHON:-python3}"
kb="$(cd "${KERNELBENCH_DIR:-.deps/KernelBench}" 2>/dev/null && pwd)" || {
  echo "no KernelBench checkout at ${KERNELBENCH_DIR:-.deps/KernelBench}: set KERNELBENCH_DIR" >&2
  exit 2
}
export KERNELBENCH_DIR="$kb"
t0=$(date +%s)

. scripts/install_python.sh
krex_install_python "$py" "$out" || exit 1

# From elsewhere, so ./python (the source package, without the extension) does
# not shadow the installed one.
(cd /tmp && "$py" - <<'EOF'
import krex, torch
print("krex", krex.__version__, "backend", krex.backend, "from", krex.__file__)
print("torch", torch.__version__, "cuda", torch.version.cuda)
try:
    import triton
    print("triton", triton.__version__)
except ImportError:
    print("triton: not installed (KernelBench's do_bench methods need it)")
print("device", torch.cuda.get_device_name(0))
EOF
) 2>&1 | tee "$out/env.txt"
grep -q "backend cuda" "$out/env.txt" || { echo "krex is not the CUDA build (see env.txt, install.log)"; exit 1; }
echo "KernelBench $kb at commit $(cat "$kb/.krex-commit" 2>/dev/null || git -C "$kb" rev-parse HEAD 2>/dev/null || echo unknown)" \
  | tee -a "$out/env.txt"
nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv >>"$out/env.txt" 2>&1 || true

if [ "${KREX_KB_TEST:-1}" != 0 ]; then
  "$py" tests/python/run_tests.py ${KREX_KB_TEST_ONLY:+-k "$KREX_KB_TEST_ONLY"} \
    tests/python/test_kernelbench.py 2>&1 | tee "$out/gpu_test.log"
  echo "GPU test: exit ${PIPESTATUS[0]}"
fi

"$py" lab/scripts/kernelbench_real.py --kernelbench "$kb" --out "$out" "$@" 2>&1 | tee "$out/run.log"
rc=${PIPESTATUS[0]}
echo "total: $(($(date +%s) - t0)) s, exit $rc"
exit "$rc"
