// SPDX-License-Identifier: Apache-2.0
#pragma once

// The candidate kernels of the evaluation (bench/eval): families of real
// kernels with variants, the way an optimizing agent's candidates look.
// Shared by the driver (which only deals in ids) and the CUDA worker (which
// compiles and times them). Durations span ~10 us to ~50 ms on an H200.
//
// Rank sets are groups of near-equal candidates: the same kernel over
// slightly more work each, so the true order is known by construction
// (set_pos). The coarse sets differ by 1-5% (1.00x, 1.01x, 1.02x, 1.035x,
// 1.05x the work); the fine sets ("-fine") by 0.1-0.5% between neighbours,
// where a flip is plausible even uncontended. The ranking-fidelity metric
// compares each mode's order of a set with the uncontended reference order
// and with the construction order.
//
// A command is a candidate id with an optional timing suffix (see timing):
// "@sync" synchronizes after every sample, "@loop<ms>" makes the timed loop
// about <ms> long. The worker parses it with parse_command().

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
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

/// Whether the candidate's source includes CUB (about 1-2 s of NVRTC work
/// per command instead of 60-100 ms).
inline bool uses_cub(family f) { return f == family::reduce || f == family::softmax; }

namespace detail {
inline bool ends_with_suffix(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace detail

/// Whether a rank set is a fine one (members 0.1-0.5% apart): its name ends in "-fine".
inline bool is_fine_set(const std::string& set) { return detail::ends_with_suffix(set, "-fine"); }

/// Whether a rank set is a wide one (neighbours more than 5% apart, the
/// study's > 5% gap class): its name ends in "-wide".
inline bool is_wide_set(const std::string& set) { return detail::ends_with_suffix(set, "-wide"); }

/// A rank set's kind as the ranking tables group it: "fine", "wide" or "coarse".
inline const char* set_kind(const std::string& set) {
  return is_fine_set(set) ? "fine" : is_wide_set(set) ? "wide" : "coarse";
}

/// Whether a candidate is in the default selection (no --filter): every
/// candidate outside the fine and wide rank sets, which run only when named.
inline bool in_default_selection(const candidate& c) { return !is_fine_set(c.set) && !is_wide_set(c.set); }

/// The work a candidate does, in the unit its time scales with (gemm:
/// M*N*K multiply-adds; reduce, axpby: elements; softmax: rows*cols): the
/// construction order of a rank set is the order of this.
inline double work_of(const candidate& c) {
  switch (c.fam) {
    case family::gemm: return static_cast<double>(c.m) * static_cast<double>(c.n) * static_cast<double>(c.k);
    case family::reduce:
    case family::axpby: return static_cast<double>(c.n);
    case family::softmax: return static_cast<double>(c.m) * static_cast<double>(c.n);
  }
  return 0;
}

/// How a command times its candidate.
///   batched   (default) krex::measure's loop: samples queued back to back
///   sync      sync_each: the stream is synchronized after every sample (the
///             do_bench style; a descheduled CPU shows in the sample)
///   loop      a timed loop of about loop_ms (warm-up time plus more
///             samples): the KREX study's critical fraction (median ~12% of
///             a command) instead of the default loop's 2-3%
/// sync and loop combine ("sync+loop").
struct timing {
  bool sync_each = false;
  int loop_ms = 0;  ///< > 0: the loop workload

  std::string name() const {
    if (sync_each && loop_ms > 0) return "sync+loop";
    if (sync_each) return "sync";
    if (loop_ms > 0) return "loop";
    return "batched";
  }
};

/// The command the driver sends for candidate `id` timed as `t`: id[@sync][@loop<ms>].
inline std::string command_id(const std::string& id, const timing& t) {
  std::string s = id;
  if (t.sync_each) s += "@sync";
  if (t.loop_ms > 0) s += "@loop" + std::to_string(t.loop_ms);
  return s;
}

/// Splits a command into its candidate id and timing; false (and *why) on
/// an unknown suffix or a loop length outside 1..600000 ms.
inline bool parse_command(const std::string& cmd, std::string* id, timing* t, std::string* why) {
  *t = timing{};
  const auto at = cmd.find('@');
  *id = cmd.substr(0, at);
  if (id->empty()) {
    *why = "empty candidate id in command '" + cmd + "'";
    return false;
  }
  std::size_t p = at;
  while (p != std::string::npos) {
    const auto next = cmd.find('@', p + 1);
    const std::string s = cmd.substr(p + 1, next == std::string::npos ? std::string::npos : next - p - 1);
    if (s == "sync" && !t->sync_each) {
      t->sync_each = true;
    } else if (s.compare(0, 4, "loop") == 0 && t->loop_ms == 0) {
      const std::string v = s.substr(4);
      char* end = nullptr;
      const long ms = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || ms < 1 || ms > 600000) {
        *why = "bad loop length '" + v + "' in command '" + cmd + "': @loop<ms>, 1..600000";
        return false;
      }
      t->loop_ms = static_cast<int>(ms);
    } else {
      *why = "unknown timing '@" + s + "' in command '" + cmd + "': @sync or @loop<ms>, each at most once";
      return false;
    }
    p = next;
  }
  return true;
}

/// What krex::measure is asked to do for one command.
struct measure_plan {
  int samples = 10;
  int warmup = 3;
  double warmup_ms = 0;  ///< keep warming up until this much time passed
  bool sync_each = false;
};

/// The rough per-sample cost beside the kernel (the cold-L2 flush and the
/// events), in ms on an H200: only used to size the loop workload.
inline constexpr double sample_overhead_ms = 0.04;

/// The measure plan of candidate `c` timed as `t`. The loop workload takes
/// about half its loop_ms in samples (10..2000, never fewer than the default
/// plan's) and warms up (by time) for the rest of loop_ms.
inline measure_plan plan_for(const candidate& c, const timing& t) {
  measure_plan p;
  p.sync_each = t.sync_each;
  p.samples = samples_for(c);
  if (t.loop_ms > 0) {
    const double per = (c.est_ms > 0 ? c.est_ms : 1.0) + sample_overhead_ms;
    const long want = std::clamp(std::lround(t.loop_ms / 2.0 / per), 10L, 2000L);
    p.samples = std::max(p.samples, static_cast<int>(want));
    p.warmup_ms = std::max(0.0, t.loop_ms - p.samples * per);
  }
  return p;
}

/// The rough length of a command's timed loop in ms (warm-up included), from est_ms.
inline double est_loop_ms(const candidate& c, const timing& t) {
  const measure_plan p = plan_for(c, t);
  const double per = c.est_ms + sample_overhead_ms;
  return std::max(p.warmup * per, p.warmup_ms) + p.samples * per;
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
  // Fine rank sets (appended: the ids above stay as they were): neighbours
  // 0.1, 0.2, 0.3 and 0.4% apart in work. No member equals a candidate above.
  const double g[] = {1.0, 1.001, 1.003, 1.006, 1.010};
  for (int i = 0; i < 5; ++i)  // CUB, ~0.4 ms: the > 0.1 ms band, CPU work while compiling
    v.push_back(reduce(256, 4, scaled(std::int64_t(384) << 20, g[i], 4096), 0.4, "reduce-384M-fine", i));
  for (int i = 0; i < 5; ++i)  // ~1.5 ms: the > 1 ms band
    v.push_back(axpby(4, scaled(std::int64_t(448) << 20, g[i], 1024), 1.5, "axpby-448M-fine", i));
  // gemm work grows in whole tiles: N = 4096 + 16 (i + 1), one more column
  // of 16-wide tiles each (+0.39%); ~17 ms: the > 10 ms band.
  for (int i = 0; i < 5; ++i)
    v.push_back(gemm(16, 1, 4096, 4096 + 16 * (i + 1), 4096, 17, "gemm-4K-t16-fine", i));
  // Wide sets (appended, named only by --filter or the ranks preset):
  // neighbours more than 5% apart (x1.10, 1.17, 1.25, 1.33 of the axpby-16M
  // work; gemm K from 2304 in 192-wide steps, +7-8%), for the study's > 5%
  // gap class. No member equals a candidate above.
  const double w[] = {1.10, 1.17, 1.25, 1.33};
  for (int i = 0; i < 4; ++i)
    v.push_back(axpby(4, scaled(16 << 20, w[i], 1024), 0.05 * w[i], "axpby-16M-wide", i));
  for (int i = 0; i < 4; ++i)
    v.push_back(gemm(32, 4, 2048, 2048, 2304 + 192 * i, 5.0 * (2304 + 192 * i) / 2048, "gemm-2K-wide", i));
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

/// Whether `c` is selected by one of `patterns`: its id contains the
/// pattern, or its set is the pattern.
inline bool matches(const candidate& c, const std::vector<std::string>& patterns) {
  for (const auto& f : patterns)
    if (c.id.find(f) != std::string::npos || c.set == f) return true;
  return false;
}

/// The candidate named `id`, or nullptr.
inline const candidate* find_candidate(const std::vector<candidate>& all, const std::string& id) {
  for (const auto& c : all)
    if (c.id == id) return &c;
  return nullptr;
}

}  // namespace krex_eval
