#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The Python CI stage: builds krex's wheel the way a user's `pip install
# ./python` does (build isolation: pip fetches scikit-build-core and pybind11
# from the package index), installs it into a fresh virtual environment with
# pytest, and runs tests/python against the installed package (from outside
# the checkout, so nothing but the wheel can be imported), then mypy's
# stubtest: the .pyi stubs against the installed package.
#
#   scripts/ci/test-python.sh [pytest arguments...]
#
# Host backend (CI has no GPU; KREX_PY_CUDA=ON builds the CUDA one, whose
# tests need a GPU). Needs python3 with venv and its development headers, a
# C++17 compiler, CMake >= 3.21 (pip fetches one when the system's is
# older) and the package index (PIP_INDEX_URL etc. are honoured); on
# Debian/Ubuntu, as root, it installs what is missing with apt-get. About a
# minute on two cores, plus ~40 s for Ray and its test (below; PyTorch only with KREX_PY_TORCH=ON): the one translation unit compiles in ~30 s (ccache
# would not help: pip's isolated build environment, where pybind11's headers
# are, has a new random path every time). Exits non-zero when pytest or stubtest fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$PWD

need=()
if command -v dpkg >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  for p in python3 python3-venv python3-dev g++ cmake; do
    dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed' || need+=("$p")
  done
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "test-python.sh: installing ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${need[@]}"
  else
    echo "test-python.sh: missing packages: ${need[*]}" >&2
    echo "run: sudo apt-get install -y ${need[*]}" >&2
    exit 1
  fi
fi

python=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/krex-test-python.XXXXXX")
trap 'rm -rf "$work"' EXIT

"$python" -m venv "$work/venv"
py=$work/venv/bin/python

case "${KREX_PY_CUDA:-OFF}" in
  ON | on | 1 | true | yes) cuda=ON ;;
  *) cuda=OFF ;;
esac
echo "test-python.sh: building the wheel (KREX_WITH_CUDA=$cuda, build isolation)"
t0=$(date +%s)
if ! "$py" -m pip wheel --no-deps -q \
       -w "$work/dist" "$repo/python" \
       --config-settings=cmake.define.KREX_WITH_CUDA="$cuda" \
       --config-settings=build-dir="$work/build"; then  # fresh, as a user's pip install
  echo "test-python.sh: the wheel did not build; when the package index cannot be reached" \
       "(scikit-build-core and pybind11 come from it), set PIP_INDEX_URL to a mirror, or skip" \
       "this stage with KREX_CI_PYTHON=OFF (.ci/run)" >&2
  exit 1
fi
echo "test-python.sh: wheel built in $(($(date +%s) - t0)) s: $(cd "$work/dist" && ls)"

"$py" -m pip install -q "$work"/dist/krex-*.whl pytest "mypy>=1.8,<3"
# Ray for tests/python/test_ray.py (krex.ray on a local cluster): about 30 s
# to download and install on two cores (10 s from pip's cache), the test
# ~17 s. KREX_PY_RAY=OFF leaves it out; the test then skips and says why.
case "${KREX_PY_RAY:-ON}" in
  OFF | off | 0 | false | no) echo "test-python.sh: KREX_PY_RAY=OFF: the Ray test will skip" ;;
  *)
    t0=$(date +%s)
    if "$py" -m pip install -q ray; then
      echo "test-python.sh: ray installed in $(($(date +%s) - t0)) s"
    else
      echo "test-python.sh: could not install ray from the package index; the Ray test will skip" >&2
    fi
    ;;
esac
# PyTorch for tests/python/test_torch.py's runs against the real Inductor hook
# (krex.torch): off by default. PyPI's Linux torch is the CUDA build with its
# NVIDIA libraries, 5.3 GB installed, 100 s to install on two cores with the
# download and up to 4 min from pip's cache on a busy machine, more than the
# rest of this stage; the tests run against a stand-in of the hook without it
# and say what they skipped. KREX_PY_TORCH=ON installs it (any torch >= 2.13
# has the hook; KREX_PY_TORCH_SPEC picks one, default "torch").
case "${KREX_PY_TORCH:-OFF}" in
  ON | on | 1 | true | yes)
    t0=$(date +%s)
    if "$py" -m pip install -q "${KREX_PY_TORCH_SPEC:-torch}"; then
      echo "test-python.sh: $("$py" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null)" \
           "installed in $(($(date +%s) - t0)) s"
    else
      echo "test-python.sh: could not install PyTorch from the package index; the tests against" \
           "it will skip" >&2
    fi
    ;;
  *) echo "test-python.sh: KREX_PY_TORCH=OFF: krex.torch is tested against a stand-in of the hook (KREX_PY_TORCH=ON adds the real PyTorch)" ;;
esac
cd "$work"  # outside the checkout: only the installed package is importable
"$py" - "$work/venv" "$cuda" <<'EOF'
import os, sys
import krex
venv, cuda = sys.argv[1], sys.argv[2]
where = os.path.realpath(krex.__file__)
assert where.startswith(os.path.realpath(venv) + os.sep), "krex imported from %s" % where
want = "cuda" if cuda == "ON" else "host"
assert krex.backend == want, "backend %s, built with KREX_WITH_CUDA=%s" % (krex.backend, cuda)
print("test-python.sh: krex %s (%s backend) from %s" % (krex.__version__, krex.backend, where))
EOF
PYTHONDONTWRITEBYTECODE=1 "$py" -m pytest -p no:cacheprovider -q "$repo/tests/python" "$@"
# The stubs against the installed package: names, parameters, defaults.
"$py" -m mypy.stubtest krex --allowlist "$repo/tests/python/stubtest-allowlist.txt"
