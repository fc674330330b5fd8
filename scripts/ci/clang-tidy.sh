#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# clang-tidy over every public header, through the generated one-header
# translation units of the header tests (<build>/krex_headers/**/*.cpp) and
# the build's compile_commands.json. Each run reports only on the header its
# translation unit includes, so every finding is printed once. Checks:
# .clang-tidy. Warnings are errors: exits non-zero if anything is reported.
#
# usage: scripts/ci/clang-tidy.sh [build-dir]     (default: build/)
#   CLANG_TIDY=/path/to/clang-tidy   to pick the binary
#   JOBS=n                           parallel runs (default: nproc)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(realpath -m "${1:-$root/build}")
tidy=${CLANG_TIDY:-$(command -v clang-tidy || command -v clang-tidy-14 || true)}
if [ -z "$tidy" ]; then
  echo "clang-tidy.sh: clang-tidy not found (Debian: apt-get install clang-tidy)" >&2
  exit 2
fi

if [ ! -f "$build/compile_commands.json" ] || [ ! -d "$build/krex_headers" ]; then
  cmake -S "$root" -B "$build" -DKREX_BUILD_TESTS=ON -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
fi

mapfile -t tus < <(find "$build/krex_headers" -name '*.hpp.cpp' | sort)
if [ ${#tus[@]} -eq 0 ]; then
  echo "clang-tidy.sh: no header translation units under $build/krex_headers" >&2
  exit 2
fi
echo "clang-tidy.sh: $("$tidy" --version | grep -m1 -o 'version [0-9.]*'), ${#tus[@]} headers"

export tidy build root
lint_one() {
  local tu=$1 header regex
  header=${tu#"$build/krex_headers/"}
  header=${header%.cpp}
  # Report on this header only: the headers it includes have their own runs.
  regex=$(printf '%s' "$root/include/$header" | sed 's/[][\.*^$+?(){}|]/\\&/g')
  # --config-file: the TUs live in the build dir, which may be outside the tree.
  # --extra-arg-before: g++ 12 defaults to C++17, so CMake writes no -std flag
  # for cxx_std_17, but clang 14 defaults to C++14. A -std in the command wins.
  "$tidy" -p "$build" --quiet --config-file="$root/.clang-tidy" --extra-arg-before=-std=c++17 --warnings-as-errors='*' --header-filter="^$regex\$" "$tu" \
    2> >(grep -v -E '^[0-9]+ warnings? (and [0-9]+ errors? )?generated\.$' >&2)
}
export -f lint_one

status=0
printf '%s\0' "${tus[@]}" |
  xargs -0 -n 1 -P "${JOBS:-$(nproc)}" bash -c 'lint_one "$0"' || status=$?
if [ "$status" -ne 0 ]; then
  echo "clang-tidy.sh: findings above (checks: $root/.clang-tidy)" >&2
  exit 1
fi
echo "clang-tidy.sh: clean"
