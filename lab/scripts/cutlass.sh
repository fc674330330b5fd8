#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The CUTLASS profiler with krex regions around its timed loops (docs/CUTLASS.md):
# a pinned CUTLASS release, patches/cutlass/krex-region.patch, krex installed
# with the CUDA backend, and a narrow SM90 build of cutlass_profiler.
#
#   lab/scripts/cutlass.sh [stage...]    default: export build
#
#   export     write .deps/cutlass-<tag>.tar.gz: the files of the pinned release the
#              profiler build needs (~3 MB), from $CUTLASS_MIRROR (a local git
#              directory holding the tag) or else cloned from $CUTLASS_URL; the
#              tag's commit is checked. Skipped when the tarball exists. This is
#              the only stage that needs the network (or the mirror): carry the
#              tarball to a machine without either.
#   unpack     fresh .deps/cutlass-<tag>/ from the tarball, with the patch applied
#   krex       install krex (-DKREX_WITH_CUDA=ON, headers + CMake package) to .deps/krex-prefix
#   configure  configure CUTLASS in .deps/cutlass-build (SM90a, a few GEMM kernels, no tests)
#   build      unpack krex configure (each only if not done for this patch), then
#              build cutlass_profiler with all cores
#   object     unpack krex configure, then compile only the patched objects
#              (operation_profiler.cu, gemm_operation_profiler.cu, main.cpp: a compile
#              check on a machine without a GPU)
#
# Environment: CUTLASS_MIRROR (default /work/.mirror/NVIDIA+cutlass/repo when it
# exists), CUTLASS_URL (https://github.com/NVIDIA/cutlass.git), CUTLASS_KERNELS (the
# kernel filter, default below), KREX_CUTLASS_JOBS (build jobs, default nproc),
# OUT (two files: cutlass-build.log, every stage's output, and generated_kernels.txt,
# the kernels built; default .deps/cutlass-logs).
# The binary: .deps/cutlass-build/tools/profiler/cutlass_profiler.
set -euo pipefail
self=$(readlink -f "$0")
cd "$(dirname "$self")/../.."
root=$PWD

tag=v4.3.5
commit=4faf1a1568cf1e4ad8ff71846a13e16f2a6a6f6b  # v4.3.5^{commit}
patch_file="$root/patches/cutlass/krex-region.patch"
deps="$root/.deps"
tarball="$deps/cutlass-$tag.tar.gz"
src="$deps/cutlass-$tag"
bld="$deps/cutlass-build"
prefix="$deps/krex-prefix"
out="${OUT:-$deps/cutlass-logs}"
blog="$out/cutlass-build.log"
jobs="${KREX_CUTLASS_JOBS:-$(nproc)}"
# What the profiler build reads of the release: top-level CMake, headers, tools
# (library, profiler, util) and the kernel generator. No docs, examples, tests, media.
paths=(CMakeLists.txt CUDA.cmake bin2hex.cmake cmake cuBLAS.cmake cuDNN.cmake
       customConfigs.cmake LICENSE.txt include tools python/cutlass_library)
# Six SM90 f16 GEMMs (f16 A/B/C/D, f32 accumulate, TN, align8, TMA epilogue),
# picked from the generator's default SM90 set so that several are within a few
# percent of each other on large problems: 128x256 and 256x128 tiles with 1x2 and
# 2x1 clusters (warp-specialized cooperative), 128x128 and 64x256 (ping-pong).
# The filter takes comma-separated names (substrings; see generated_kernels.txt).
k=cutlass3x_sm90_tensorop_gemm_f16_f16_f32_f16_f16_
kernels="${CUTLASS_KERNELS:-${k}128x256x64_1x2x1_0_tnn_align8_warpspecialized_cooperative_epi_tma,${k}128x256x64_2x1x1_0_tnn_align8_warpspecialized_cooperative_epi_tma,${k}256x128x64_1x2x1_0_tnn_align8_warpspecialized_cooperative_epi_tma,${k}256x128x64_2x1x1_0_tnn_align8_warpspecialized_cooperative_epi_tma,${k}128x128x64_1x2x1_0_tnn_align8_warpspecialized_pingpong_epi_tma,${k}64x256x64_1x2x1_0_tnn_align8_warpspecialized_pingpong_epi_tma}"

mkdir -p "$deps" "$out"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(export build)
log() { echo "cutlass.sh: $*" | tee -a "$blog" >&2; }
# run TITLE CMD...: the command's output appended to the build log; its last lines on failure.
run() {
  local title="$1"
  shift
  echo "=== $title: $*" >>"$blog"
  "$@" >>"$blog" 2>&1 || { tail -60 "$blog" >&2; die "$title failed (see $blog)"; }
}
die() { log "$*"; exit 1; }
# The state of a stage: the tag, the patch, the kernel filter and this script.
stamp_of() { cat "$patch_file" "$self" <(echo "$tag $kernels") | sha256sum | cut -c1-16; }
stamp=$(stamp_of)
done_for() { [ -f "$1" ] && [ "$(cat "$1")" = "$stamp" ]; }

do_export() {
  if [ -f "$tarball" ]; then log "have $tarball"; return; fi
  local mirror="${CUTLASS_MIRROR:-/work/.mirror/NVIDIA+cutlass/repo}" tmp=""
  if ! git -C "$mirror" rev-parse -q --verify "$tag^{commit}" >/dev/null 2>&1; then
    tmp=$(mktemp -d)
    log "no mirror with $tag at $mirror: cloning ${CUTLASS_URL:-https://github.com/NVIDIA/cutlass.git}"
    git clone -q --bare --depth 1 --branch "$tag" "${CUTLASS_URL:-https://github.com/NVIDIA/cutlass.git}" "$tmp/cutlass.git"
    mirror="$tmp/cutlass.git"
  fi
  local got
  got=$(git -C "$mirror" rev-parse "$tag^{commit}")
  [ "$got" = "$commit" ] || die "$tag is $got in $mirror, expected $commit: a moved tag; check the release"
  git -C "$mirror" archive --format=tar.gz -o "$tarball.tmp" "$commit" "${paths[@]}"
  mv "$tarball.tmp" "$tarball"
  [ -z "$tmp" ] || rm -rf "$tmp"
  log "wrote $tarball ($(du -h "$tarball" | cut -f1))"
}

do_unpack() {
  [ -f "$tarball" ] || die "no $tarball: run 'lab/scripts/cutlass.sh export' where the mirror or the network is (and carry it)"
  rm -rf "$src" "$bld"  # a new source tree invalidates the build
  mkdir -p "$src"
  tar -xzf "$tarball" -C "$src"
  if command -v patch >/dev/null; then
    patch -d "$src" -p1 --forward --quiet <"$patch_file" || die "$patch_file does not apply to $tag"
  else
    # The ceiling keeps git from taking the krex checkout around .deps for the tree.
    GIT_CEILING_DIRECTORIES="$deps" git -C "$src" apply "$patch_file" || die "$patch_file does not apply to $tag"
  fi
  echo "$stamp" >"$src/.krex-stamp"
  log "unpacked $tag into $src, patch applied"
}

do_krex() {
  local kb="$deps/krex-build"
  run "configuring krex" cmake -S "$root" -B "$kb" -DCMAKE_BUILD_TYPE=Release -DKREX_WITH_CUDA=ON \
    -DKREX_BUILD_TESTS=OFF -DKREX_BUILD_EXAMPLES=OFF -DKREX_BUILD_BENCH=OFF \
    -DKREX_INSTALL=ON -DCMAKE_INSTALL_PREFIX="$prefix"
  rm -rf "$prefix"
  run "installing krex" cmake --install "$kb"
  echo "$stamp" >"$prefix/.krex-stamp"
  log "krex installed to $prefix"
}

do_configure() {
  local gen=()
  command -v ninja >/dev/null && [ ! -f "$bld/CMakeCache.txt" ] && gen=(-G Ninja)
  run "configuring CUTLASS" cmake -S "$src" -B "$bld" "${gen[@]}" \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$prefix" \
    -DCUTLASS_NVCC_ARCHS=90a \
    -DCUTLASS_LIBRARY_OPERATIONS=gemm \
    -DCUTLASS_LIBRARY_KERNELS="$kernels" \
    -DCUTLASS_ENABLE_TESTS=OFF -DCUTLASS_ENABLE_GTEST_UNIT_TESTS=OFF \
    -DCUTLASS_ENABLE_EXAMPLES=OFF -DCUTLASS_ENABLE_PROFILER=ON -DCUTLASS_ENABLE_TOOLS=ON \
    -DCUTLASS_ENABLE_CUBLAS=OFF -DCUTLASS_ENABLE_CUDNN=OFF \
    -DCUTLASS_BUILD_STATIC_LIBS=OFF -DCUTLASS_BUILD_SHARED_LIBS=ON
  local list="$bld/tools/library/generated_kernels.txt"
  cp "$list" "$out/generated_kernels.txt"
  local n
  n=$(grep -c . "$list" || true)
  [ "$n" -gt 0 ] || die "the kernel filter matched no kernel: $kernels"
  echo "$stamp" >"$bld/.krex-stamp"
  log "configured $bld: $n kernel(s), listed in $out/generated_kernels.txt"
}

prepare() {
  done_for "$src/.krex-stamp" || do_unpack
  done_for "$prefix/.krex-stamp" || do_krex
  done_for "$bld/.krex-stamp" || do_configure
}

for s in "${stages[@]}"; do
  case "$s" in
    export) do_export ;;
    unpack) do_unpack ;;
    krex) do_krex ;;
    configure) do_configure ;;
    build)
      prepare
      t0=$(date +%s)
      run "building cutlass_profiler" cmake --build "$bld" -j"$jobs" --target cutlass_profiler
      log "built $bld/tools/profiler/cutlass_profiler in $(( $(date +%s) - t0 )) s with -j$jobs"
      ;;
    object)
      prepare
      for f in operation_profiler.cu gemm_operation_profiler.cu main.cpp; do
        obj=tools/profiler/CMakeFiles/cutlass_profiler.dir/src/$f.o
        if grep -q '^CMAKE_GENERATOR:INTERNAL=Ninja' "$bld/CMakeCache.txt"; then
          run "compiling the patched $f" cmake --build "$bld" -j"$jobs" --target "$obj"
        else  # Makefiles: the object's target lives in the directory's Makefile
          run "compiling the patched $f" make -C "$bld/tools/profiler" "src/$f.o"
        fi
        log "compiled $bld/$obj"
      done
      ;;
    *) die "unknown stage '$s' (export unpack krex configure build object)" ;;
  esac
done
