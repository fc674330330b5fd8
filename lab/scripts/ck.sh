#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Puts the pinned Composable Kernel (CK) source under .deps/composable_kernel
# and applies krex's patch (patches/ck-krex-regions.patch) to it. CK is never
# committed to krex: only the pin below and the patch are.
#
#   lab/scripts/ck.sh              # fetch from GitHub (git, network)
#   KREX_CK_GIT=/path/to/ck.git lab/scripts/ck.sh   # any git repository holding the commit
#   lab/scripts/ck.sh --print-dir  # just print where CK is (or would be)
#
# Idempotent: a tree already at the pin with the patch applied is left alone.
#
# The pin: CK has no rocm-5.2 tag or branch (its release tags start at
# rocm-5.7.0), so krex pins the develop commit of ROCm 5.2's release window
# (2022-06-30, "Improve external interface for GEMM ..." #311), which builds
# with ROCm 5.2's hipcc (clang 15) and has the ckProfiler GEMM profilers the
# patch instruments.
set -euo pipefail
cd "$(dirname "$0")/../.."

ck_commit=0dcb3496cf3e274386272e0a4430282f9ddf1169
ck_git=${KREX_CK_GIT:-https://github.com/ROCm/composable_kernel.git}
dest=${KREX_CK_DIR:-$PWD/.deps/composable_kernel}
patch=$PWD/patches/ck-krex-regions.patch

if [ "${1:-}" = "--print-dir" ]; then
  echo "$dest"
  exit 0
fi

stamp="$dest/.krex-ck-stamp"
want="$ck_commit $(sha256sum "$patch" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "ck.sh: $dest is at $ck_commit with the patch applied"
  exit 0
fi

command -v git >/dev/null || { echo "ck.sh: needs git" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest"
# CK gets its own repository (so git apply patches it, not an enclosing one,
# and `git -C "$dest" diff` shows krex's patch).
git init -q "$dest"
# A shallow fetch of exactly the pinned commit (GitHub serves fetches by id).
if ! git -C "$dest" fetch -q --depth 1 "$ck_git" "$ck_commit"; then
  echo "ck.sh: could not fetch $ck_commit from $ck_git (set KREX_CK_GIT to a clone that has it)" >&2
  exit 1
fi
git -C "$dest" -c advice.detachedHead=false checkout -q FETCH_HEAD
git -C "$dest" apply --whitespace=nowarn "$patch"
echo "$want" >"$stamp"
echo "ck.sh: CK $ck_commit (patched) in $dest"
