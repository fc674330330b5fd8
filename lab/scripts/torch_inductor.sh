#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# krex.torch on a GPU machine, offline: installs krex from this checkout into
# the Python that has PyTorch and Triton (pip install --no-build-isolation
# ./python: scikit-build-core and pybind11 must be installed; if pip refuses,
# a CMake build of python/ on PYTHONPATH), then runs
# lab/scripts/torch_inductor.py: N processes at once torch.compile a matmul
# with mode="max-autotune" and krex as Inductor's GPU benchmark lock.
#
#   lab/scripts/torch_inductor.sh [torch_inductor.py arguments: --workers 4 --phases krex,cudagraph,control]
#
# Writes to $OUT (default build-cuda/torch-inductor): install.log, run.log,
# torch_inductor.json. Exit status: torch_inductor.py's (3: this PyTorch has
# no Inductor GPU benchmark lock hook).
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-build-cuda/torch-inductor}"
mkdir -p "$out" && out=$(cd "$out" && pwd)
py="${PYTHON:-python3}"
t0=$(date +%s)
if "$py" -m pip install --no-build-isolation ./python >"$out/install.log" 2>&1 ||
   "$py" -m pip install --no-build-isolation --break-system-packages ./python >>"$out/install.log" 2>&1; then
  echo "krex installed with pip in $(($(date +%s) - t0)) s"
else
  echo "pip install failed (install.log); building python/ with CMake instead"
  if cmake -S python -B build-py -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v "$py")" \
       >>"$out/install.log" 2>&1 && cmake --build build-py -j"$(nproc)" >>"$out/install.log" 2>&1; then
    export PYTHONPATH="$PWD/build-py${PYTHONPATH:+:$PYTHONPATH}"
  else
    tail -30 "$out/install.log"
    exit 1
  fi
fi
script=$PWD/lab/scripts/torch_inductor.py
# From elsewhere: ./python (the sources, without the extension) must not shadow the installed krex.
cd /tmp && "$py" "$script" --out "$out" "$@" 2>&1 | tee "$out/run.log"
rc=${PIPESTATUS[0]}
echo "total: $(($(date +%s) - t0)) s, exit $rc"
exit "$rc"
