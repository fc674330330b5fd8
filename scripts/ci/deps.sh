#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what krex's build and tests need, via apt-get (Debian 12, Ubuntu 24.04).
# A no-op when everything is present; otherwise needs root (or prints the
# sudo command to run and exits 1).
#
# KREX_WITH_HIP=ON (or the argument --hip) adds the HIP toolchain: Debian 12's
# hipcc (ROCm 5.2: hipcc, clang 15, libamdhip64-dev, the device libraries) and
# git (lab/scripts/ck.sh fetches Composable Kernel): 26 packages, 66 MB to download,
# 353 MB installed on Debian 12 (clang 15 and LLVM 15 included); only
# for the `hip` preset (scripts/ci/test-hip.sh).
#
# KREX_WITH_SLURM=ON adds Debian's Slurm and munge (slurmctld, slurmd,
# slurm-client, munge) for the ctest `slurm` (tests/slurm_test.py, which
# starts its own daemons; docs/FLEET.md). Off by default: on a machine with
# systemd the packages start their own services. .ci/run turns it on.
set -euo pipefail

packages=(cmake g++ make libgtest-dev libgmock-dev libbenchmark-dev python3-dev pybind11-dev)
with_hip=${KREX_WITH_HIP:-OFF}
[ "${1:-}" = "--hip" ] && with_hip=ON
case "$with_hip" in
  ON | on | 1 | TRUE | true | YES | yes) packages+=(hipcc git ca-certificates) ;;
esac
case "${KREX_WITH_SLURM:-OFF}" in
  ON | on | 1 | TRUE | true | YES | yes) packages+=(slurmctld slurmd slurm-client munge) ;;
esac

if ! command -v dpkg >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1; then
  echo "deps.sh: this is not a Debian/Ubuntu system; install by hand: CMake >= 3.21," \
       "a C++17 compiler, GoogleTest, Google Benchmark" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed'; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
  echo "deps.sh: missing packages: ${missing[*]}" >&2
  echo "run: sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

# apt-get, waiting for the package manager's lock while another apt or dpkg
# (unattended-upgrades on a fresh machine, another session) holds it, up to
# KREX_APT_LOCK_WAIT seconds (default 600), instead of failing at once.
lock_wait=${KREX_APT_LOCK_WAIT:-600}
case "$lock_wait" in '' | *[!0-9]*)
  echo "deps.sh: KREX_APT_LOCK_WAIT must be a number of seconds, not '$lock_wait'" >&2
  exit 1 ;;
esac
apt_get() {
  local deadline=$((SECONDS + lock_wait)) err rc said=0
  err=$(mktemp)
  while :; do
    rc=0
    apt-get -o DPkg::Lock::Timeout="$lock_wait" "$@" 2>"$err" || rc=$?
    cat "$err" >&2
    if [ "$rc" -eq 0 ] || ! grep -qE "Could not get lock|Unable to lock|Unable to acquire the dpkg frontend lock" "$err"; then
      rm -f "$err"
      return "$rc"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "deps.sh: the package manager lock was still held after ${lock_wait} s (another apt" \
           "or dpkg is running: see the message above); wait for it, or raise KREX_APT_LOCK_WAIT" >&2
      rm -f "$err"
      return "$rc"
    fi
    [ "$said" = 1 ] || echo "deps.sh: another apt or dpkg holds the package manager lock;" \
                             "waiting for it (up to ${lock_wait} s, KREX_APT_LOCK_WAIT)" >&2
    said=1
    sleep "${KREX_APT_LOCK_POLL:-5}"  # seconds between tries
  done
}

echo "deps.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt_get update -q
apt_get install -y -q --no-install-recommends "${missing[@]}"
