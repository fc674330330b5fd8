#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Configure (preset "default": Release, build/), build, and run every test.
# Exits with ctest's status. Extra arguments go to ctest (e.g. -L unit, -R gate).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/deps.sh
cmake --preset default
cmake --build build -j"$(nproc)"
exec ctest --test-dir build --output-on-failure "$@"
