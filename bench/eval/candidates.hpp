// SPDX-License-Identifier: Apache-2.0
#pragma once

// The candidate kernels of the evaluation (bench/eval): families of real
// kernels with variants, the way an optimizing agent's candidates look.
// Shared by the driver (which only deals in ids) and the CUDA worker (which
// compiles and times them). Durations span ~10 us to ~50 ms on an H200.
//
// Rank sets are groups of near-equal candidates whose true durations differ
// by 1-5% (the same kernel over 1.00x, 1.01x, 1.02x, 1.035x, 1.05x the work):
// the ranking-fidelity metric compares each mode's order of a set with the
// uncontended reference order.

#include <cstdint>
#include <string>
#include <vector>

namespace krex_eval {

enum class family { gemm, reduce, axpby, softmax };

inline const char* to_string(family f) {
  switch (f) {
    case family::gemm: return "gemm";
    case family::reduce: return "reduce";
    case family::axpby: return "axpby";
    case family::softmax: return "softmax";
  }
  return "?";
}

struct candidate {
  std::string id;       ///< unique, stable: what the driver sends the worker
  family fam;
  std::string variant;  ///< e.g. "t32m4", "bs256v4", "vec4", "warp"
  int p0 = 0, p1 = 0;   ///< variant parameters (gemm: tile, rows per thread; reduce: block, vec;
                        ///< axpby: vec; softmax: 0 warp per row / 1 block per row)
  std::int64_t m = 0, n = 0, k = 0;  ///< problem size (gemm: MxNxK; reduce/axpby: n; softmax: m rows x n cols)
  double est_ms = 0;    ///< rough H200 duration: only sets the sample count
  std::string set;      ///< rank set ("" if none)
  int set_pos = 0;      ///< position in the set by construction (more work = later)
};

/// Timed samples for a candidate: about 150 ms of timed work, 10..100 samples.
inline int samples_for(const candidate& c) {
  const double s = 150.0 / (c.est_ms > 0 ? c.est_ms : 1.0);
  return s < 10 ? 10 : s > 100 ? 100 : static_cast<int>(s);
}

namespace detail {
inline std::string num(std::int64_t v) { return std::to_string(v); }

inline candidate gemm(int tile, int tm, std::int64_t m, std::int64_t n, std::int64_t k, double est,
                      std::string set = {}, int pos = 0) {
  candidate c{"gemm-t" + num(tile) + "m" + num(tm) + "-" + num(m) + "x" + num(n) + "x" + num(k),
              family::gemm, "t" + num(tile) + "m" + num(tm), tile, tm, m, n, k, est,
              std::move(set), pos};
  return c;
}
inline candidate reduce(int block, int vec, std::int64_t n, double est, std::string set = {},
                        int pos = 0) {
  return {"reduce-bs" + num(block) + "v" + num(vec) + "-" + num(n), family::reduce,
          "bs" + num(block) + "v" + num(vec), block, vec, 0, n, 0, est, std::move(set), pos};
}
inline candidate axpby(int vec, std::int64_t n, double est, std::string set = {}, int pos = 0) {
  return {"axpby-vec" + num(vec) + "-" + num(n), family::axpby, "vec" + num(vec), vec, 0, 0, n, 0,
          est, std::move(set), pos};
}
inline candidate softmax(int block_per_row, std::int64_t rows, std::int64_t cols, double est,
                         std::string set = {}, int pos = 0) {
  const std::string v = block_per_row != 0 ? "block" : "warp";
  return {"softmax-" + v + "-" + num(rows) + "x" + num(cols), family::softmax, v, block_per_row, 0,
          rows, cols, 0, est, std::move(set), pos};
}
/// `base` scaled by f, rounded down to a multiple of `q`.
inline std::int64_t scaled(std::int64_t base, double f, std::int64_t q) {
  return static_cast<std::int64_t>(static_cast<double>(base) * f) / q * q;
}
}  // namespace detail

/// Every candidate, in a fixed order.
inline std::vector<candidate> all_candidates() {
  using namespace detail;
  std::vector<candidate> v;
  // Families: variants x sizes (durations from ~10 us to ~50 ms).
  for (int tile_tm : {161, 324, 328}) {  // (tile, rows per thread): 16x1, 32x4, 32x8
    const int t = tile_tm / 10, tm = tile_tm % 10;
    v.push_back(gemm(t, tm, 512, 512, 512, 0.08));
    v.push_back(gemm(t, tm, 2048, 2048, 2048, 5));
  }
  v.push_back(gemm(16, 1, 4096, 4096, 4096, 17));
  v.push_back(gemm(16, 1, 6144, 6144, 6144, 58));  // the long end: ~50-60 ms
  v.push_back(gemm(32, 8, 4096, 4096, 4096, 7));
  for (int bv : {2561, 2564, 5124}) {
    v.push_back(reduce(bv / 10, bv % 10, std::int64_t(2) << 20, 0.01));
    v.push_back(reduce(bv / 10, bv % 10, std::int64_t(256) << 20, 0.3));
  }
  for (int vec : {1, 4}) {
    v.push_back(axpby(vec, std::int64_t(4) << 20, 0.02));
    v.push_back(axpby(vec, std::int64_t(512) << 20, 1.8));
  }
  for (int bpr : {0, 1}) {
    v.push_back(softmax(bpr, 4096, 1024, 0.015));
    v.push_back(softmax(bpr, 65536, 8192, 1.5));
  }
  // Rank sets: the same kernel over 1.00x .. 1.05x the work.
  const double f[] = {1.0, 1.01, 1.02, 1.035, 1.05};
  for (int i = 0; i < 5; ++i) v.push_back(axpby(4, scaled(16 << 20, f[i], 1024), 0.05, "axpby-16M", i));
  for (int i = 0; i < 5; ++i)
    v.push_back(reduce(256, 4, scaled(std::int64_t(512) << 20, f[i], 4096), 0.6, "reduce-512M", i));
  for (int i = 0; i < 5; ++i)
    v.push_back(softmax(0, scaled(32768, f[i], 32), 4096, 0.3, "softmax-32Kx4K", i));
  // gemm: K in steps of one 32-wide tile (1.6%) from 2048.
  for (int i = 0; i < 4; ++i) v.push_back(gemm(32, 4, 2048, 2048, 2048 + 32 * i, 5, "gemm-2K", i));
  for (int i = 0; i < 4; ++i)
    v.push_back(gemm(32, 8, 4096, 4096, 4096 + 64 * i, 7, "gemm-4K", i));
  // ... and a set over 10 ms: the 16x16-tile gemm at 4096 (~17 ms on an H200).
  for (int i = 0; i < 4; ++i)
    v.push_back(gemm(16, 1, 4096, 4096, 4096 + 64 * i, 17, "gemm-4K-t16", i));
  // A set member identical to a family entry is that entry, given its set.
  std::vector<candidate> out;
  for (auto& c : v) {
    bool merged = false;
    for (auto& o : out)
      if (o.id == c.id) {
        o.set = c.set, o.set_pos = c.set_pos;
        merged = true;
      }
    if (!merged) out.push_back(std::move(c));
  }
  return out;
}

/// The candidate named `id`, or nullptr.
inline const candidate* find_candidate(const std::vector<candidate>& all, const std::string& id) {
  for (const auto& c : all)
    if (c.id == id) return &c;
  return nullptr;
}

}  // namespace krex_eval
