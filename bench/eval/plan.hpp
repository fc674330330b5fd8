// SPDX-License-Identifier: Apache-2.0
#pragma once

// Planning a run of the evaluation (bench/eval): how long the loop workload's
// timed loop is, and a rough duration of each configuration, printed before
// the run starts (krex_eval --plan prints it and exits). The figures are
// rough H200 numbers from lab/results/eval.md (runs A and B); they size the
// presets, they are never reported as results. Plain C++; tested in
// bench/eval/tests/test_eval.cpp.

#include "candidates.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

/// Placements (docs/EVAL.md): every command times its candidate over K
/// copies of its inputs, sample i on copy i % K (krex::measure's
/// measure_options::placements, the worker's krex::cuda::placement_buffers),
/// so that where one copy landed in device memory moves a command's samples
/// less. The default K (--placements), from the placement measurements of
/// docs/COMPARE.md ("Which K").
inline constexpr int default_placements = 8;
/// The default memory budget of one command's K copies, MiB
/// (--placement-budget-mb): 16 commands at once hold at most 64 GiB of
/// copies on one GPU.
inline constexpr long default_placement_budget_mb = 4096;

/// The bytes of one copy of a candidate's inputs: the buffers its timed
/// kernel reads and writes (gemm A, B, C; reduce x and the one-float sum;
/// axpby x, y, z; softmax x, y). The check's reference buffer is not copied.
inline std::int64_t input_bytes(const candidate& c) {
  constexpr std::int64_t f = 4;  // sizeof(float)
  switch (c.fam) {
    case family::gemm: return f * (c.m * c.k + c.k * c.n + c.m * c.n);
    case family::reduce: return f * (c.n + 1);
    case family::axpby: return f * 3 * c.n;
    case family::softmax: return f * 2 * c.m * c.n;
  }
  return 0;
}

/// A command's samples with K placements: rounded up to a multiple of K, so
/// that every copy is timed equally often, when that adds at most 5% to
/// them; otherwise left as they are, and the first samples % K copies are
/// timed once more than the others. A 10-sample gemm over 8 copies would
/// time 16 samples, 60% more of the region's time for a kernel that
/// placement hardly moves; it times 10.
inline int samples_for_placements(int samples, int k) {
  if (k <= 1) return samples;
  const int up = (samples + k - 1) / k * k;
  return (up - samples) * 20 <= samples ? up : samples;
}

/// The placements a command uses when `asked` are asked for: the largest K
/// <= asked whose K copies of `per_copy` bytes fit `budget_bytes` (0: no
/// budget), and no more than its `samples`; at least 1 (the inputs
/// themselves, which every command allocates whatever the budget). K does
/// not depend on anything else, so that a long-lived worker's kept copies
/// serve its next commands (placements_reusable).
inline int placements_within(int asked, std::int64_t per_copy, std::int64_t budget_bytes, int samples) {
  int k = std::max(1, asked);
  if (budget_bytes > 0 && per_copy > 0)
    k = static_cast<int>(std::min<std::int64_t>(k, std::max<std::int64_t>(1, budget_bytes / per_copy)));
  return std::max(1, std::min(k, std::max(1, samples)));
}

/// Whether the copies a long-lived worker kept from an earlier command serve
/// the next one (K > 1; bench/eval/worker.cu): as many copies (`k`) of as
/// many buffers, each kept buffer at least as large as asked (`sizes`, one
/// copy's), and all `kept_bytes` within `budget_bytes` (0: no budget).
/// Otherwise the worker frees them and allocates the command's own.
inline bool placements_reusable(int kept_k, const std::vector<std::size_t>& kept_sizes,
                                std::int64_t kept_bytes, int k,
                                const std::vector<std::size_t>& sizes, std::int64_t budget_bytes) {
  if (k <= 1 || kept_k != k || kept_sizes.size() != sizes.size() || kept_sizes.empty()) return false;
  if (budget_bytes > 0 && kept_bytes > budget_bytes) return false;
  for (std::size_t b = 0; b < sizes.size(); ++b)
    if (kept_sizes[b] < sizes[b]) return false;
  return true;
}

}  // namespace krex_eval
