#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Puts nvbench's example benchmarks (examples/*.cu of its repository) into
# .deps/nvbench-examples/ (ignored by git), for lab/scripts/nvbench_gpu.sh: from
# a local clone, at the commit the cuda-bench wheel was built from (its
# nvbench/detail/git_revision.cuh names it), so that the examples match the
# wheel's headers.
#
#   lab/scripts/nvbench_examples.sh PATH-TO-NVBENCH-GIT-REPOSITORY
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=${1:?usage: lab/scripts/nvbench_examples.sh PATH-TO-NVBENCH-GIT-REPOSITORY}
rev=$(sed -n 's/#define NVBENCH_GIT_SHA1 "\([0-9a-f]*\)"/\1/p' \
        .deps/cuda-bench/cuda/bench/cu1[23]/nvbench/include/nvbench/detail/git_revision.cuh | head -1)
[ -n "$rev" ] || { echo "nvbench_examples.sh: run scripts/ci/cuda-bench.sh first" >&2; exit 1; }
rm -rf .deps/nvbench-examples
mkdir -p .deps/nvbench-examples
git --git-dir="$repo" archive "$rev" examples 2>/dev/null | tar -x -C .deps/nvbench-examples --strip-components=1 ||
  git -C "$repo" archive "$rev" examples | tar -x -C .deps/nvbench-examples --strip-components=1
echo "$rev" >.deps/nvbench-examples/REVISION
echo "nvbench_examples.sh: nvbench's examples at $rev in .deps/nvbench-examples"
