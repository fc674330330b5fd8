#!/usr/bin/env bash
# The HIP CI stage (no AMD GPU needed): installs hipcc (Debian 12: ROCm 5.2),
# fetches and patches the pinned Composable Kernel (scripts/ck.sh), configures
# preset `hip` (hipcc, gfx90a), builds the HIP backend's test, the header
# self-tests (compiled by hipcc, host and device passes), the CK GEMM example
# and the patched ckProfiler GEMM profiler, and runs test_hip: the tests that
# need a device skip with hipErrorNoDevice. See docs/HIP.md.
# Exits with ctest's status. Extra arguments go to ctest.
set -euo pipefail
cd "$(dirname "$0")/.."

KREX_WITH_HIP=ON scripts/deps.sh
scripts/ck.sh
cmake --preset hip
# One CK instance compiles for ~1 min on two cores; -j stays at the core count.
cmake --build --preset hip -j"$(nproc)"
exec ctest --preset hip "$@"
