// SPDX-License-Identifier: Apache-2.0
#pragma once

// Planning a run of the evaluation (bench/eval): how long the loop workload's
// timed loop is, and a rough duration of each configuration, printed before
// the run starts (krex_eval --plan prints it and exits). The figures are
// rough H200 numbers from lab/results/eval.md (runs A and B); they size the
// presets, they are never reported as results. Plain C++; tested in
// tests/test_eval.cpp.

#include "candidates.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

namespace krex_eval {

/// A command's serial time outside its timed loop, ms: process start,
/// context and join, inputs and check (~0.9 s), plus NVRTC's CUB work
/// (~1.3 s) for the families that include it.
inline double est_setup_ms(const candidate& c) { return 900.0 + (uses_cub(c.fam) ? 1300.0 : 0.0); }

/// The loop workload's timed-loop length for `c` so that the loop is about
/// `pct` percent of the command (the KREX study: median ~12%):
/// loop = pct / (100 - pct) x setup.
inline int loop_ms_for(const candidate& c, double pct) {
  const double p = std::clamp(pct, 1.0, 90.0);
  return static_cast<int>(std::lround(p / (100.0 - p) * est_setup_ms(c)));
}

/// A command's rough serial time, seconds.
inline double est_command_s(const candidate& c, const timing& t) {
  return (est_setup_ms(c) + est_loop_ms(c, t)) / 1000.0;
}

/// A configuration's rough throughput over serial (a process per command,
/// one at a time) on an H200, from lab/results/eval.md runs A and B (wall
/// time, 43-84 commands): lock-only and unprotected ~0.95 C up to ~5x, krex
/// modes ~0.9 C up to ~4.2x; persistent workers reuse contexts (~2x for one
/// worker) up to ~8x (lock) and ~6x (krex). On the low side of what was
/// measured: the estimate errs long.
inline double est_speedup(const std::string& mode, int c, bool persistent) {
  const double cc = static_cast<double>(c);
  const bool krex_like = mode.compare(0, 4, "krex") == 0 && mode != "krex-mps";
  if (mode == "serial") return persistent ? 2.0 : 1.0;
  if (persistent) return std::min(1.8 * cc, krex_like ? 6.0 : 8.0);
  return std::min(krex_like ? 0.9 * cc : 0.95 * cc, krex_like ? 4.2 : 5.0);
}

/// A configuration's rough wall time, seconds: its commands' serial time
/// over the speedup. The speedups are wall-time ones of runs of 40-90
/// commands, so they include the ramp-up and drain of such a run.
inline double est_config_s(double serial_s, const std::string& mode, int c, bool persistent) {
  return serial_s / est_speedup(mode, c, persistent);
}

}  // namespace krex_eval
