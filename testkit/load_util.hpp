// SPDX-License-Identifier: Apache-2.0
#pragma once

// Timeouts that stretch with the machine's load: a test's bound on how long a
// step may take (a SIGKILLed child to be reaped, a join) is a bound for an
// idle machine; at a load average of 3x the CPUs, everything takes about 3x
// as long. The audit of issue 38 saw the kill soak report a hang at load
// 33-51 (its 5 s kill timeout): the machine, not krex.

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace krex_test {

/// How much slower than idle a machine at load average `load` with `cpus`
/// online CPUs runs a task: max(1, load / cpus), at most `cap`.
inline double load_factor(double load, long cpus, double cap = 10.0) {
  if (!(load > 0) || cpus <= 0) return 1.0;
  return std::min(cap, std::max(1.0, load / static_cast<double>(cpus)));
}

/// `base` stretched by this machine's load_factor now (the 1-minute load
/// average): at most 10x `base`, never less than it.
inline std::chrono::milliseconds load_scaled(std::chrono::milliseconds base) {
  double load = 0;
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  if (::getloadavg(&load, 1) != 1) return base;
  return std::chrono::milliseconds(
      static_cast<long long>(static_cast<double>(base.count()) * load_factor(load, cpus)));
}

}  // namespace krex_test
