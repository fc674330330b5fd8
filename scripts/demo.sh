#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Build and run the demo (examples/demo.cpp -> build/examples/krex_demo).
# Arguments go to krex_demo.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -f examples/demo.cpp ]; then
  echo "demo.sh: examples/demo.cpp does not exist (yet): nothing to run" >&2
  exit 1
fi
scripts/ci/deps.sh
cmake --preset default
cmake --build build -j"$(nproc)" --target krex_demo
exec build/examples/krex_demo "$@"
