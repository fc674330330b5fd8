# SPDX-License-Identifier: Apache-2.0
# Sourced, not run: installs the Python binding from this checkout, offline.
#
#   . scripts/install_python.sh
#   krex_install_python "$py" "$out" || exit 1
#
# pip install --no-build-isolation ./python (scikit-build-core and pybind11
# already installed); if pip refuses, a plain CMake build of python/ into
# build-py, put on PYTHONPATH. The log goes to $out/install.log; on failure
# its tail is printed and the function returns 1. Run from the repository root.
krex_install_python() {
  local py="$1" out="$2" t0 ok=0
  t0=$(date +%s)
  if "$py" -m pip install --no-build-isolation -v ./python >"$out/install.log" 2>&1; then
    ok=1
  elif "$py" -m pip install --no-build-isolation --break-system-packages -v ./python \
      >>"$out/install.log" 2>&1; then
    ok=1
  else
    echo "pip install failed (tail of install.log below); building python/ with CMake instead"
    tail -15 "$out/install.log"
    if cmake -S python -B build-py -DCMAKE_BUILD_TYPE=Release \
         -DPython_EXECUTABLE="$(command -v "$py")" >>"$out/install.log" 2>&1 &&
       cmake --build build-py -j"$(nproc)" >>"$out/install.log" 2>&1; then
      export PYTHONPATH="$PWD/build-py${PYTHONPATH:+:$PYTHONPATH}"
      ok=1
    fi
  fi
  echo "install: $(($(date +%s) - t0)) s (ok=$ok)"
  [ "$ok" = 1 ] || { tail -30 "$out/install.log"; return 1; }
}
