// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::measure: a timed loop done right inside a region. Warm-up, samples,
// and the statistics a harness reports (median, p5, p95, mean), with every
// sample kept. The region argument is the proof that the loop is protected:
// warm-up and (for CUDA) the L2 flush run inside it too. The first argument
// is a held region (`krex::basic_region<B>&`) or, to time a loop that nothing
// protects (a baseline), the tag `krex::unprotected`; anything else does not
// compile (ctest measure_needs_region: tests/measure_needs_region.cpp).
//
//     krex::region r{t};
//     krex::measure_result m = krex::measure(r, stream, [&] { kernel<<<g, b, 0, stream>>>(...); });
//     krex::measure_result u = krex::measure(krex::unprotected, stream, [&] { ... });
//
// This header has the host overload (steady_clock around each call) and, when
// krex is built with KREX_WITH_CUDA, pulls in the CUDA overload
// (krex/cuda/measure.hpp: device events, cold L2, optional CUDA-graph timing).

#include <krex/detail/clocks.hpp>
#include <krex/error.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

// The diagnostic of every krex::measure call whose first argument is neither.
#define KREX_DETAIL_MEASURE_NEEDS_REGION                                                    \
  "krex::measure needs a held krex::region (basic_region<B>&) or krex::unprotected as its " \
  "first argument"

namespace krex {

template <class Backend>
class basic_region;

/// The first argument of krex::measure for a loop timed outside any region:
/// nothing gates, drains, freezes or pins for it (baselines, an evaluation's
/// unprotected mode, a loop under a lock of the caller's own).
struct unprotected_t {
  explicit constexpr unprotected_t() = default;
};
inline constexpr unprotected_t unprotected{};

/// How krex::measure runs its loop.
struct measure_options {
  int warmup = 3;                            ///< warm-up calls (at least this many)
  std::chrono::microseconds warmup_time{0};  ///< ...and keep warming up until this much time passed
  int samples = 50;                          ///< timed samples
  bool cold_l2 = true;          ///< CUDA/HIP: flush L2 before each sample (outside its events)
  std::size_t flush_bytes = 0;  ///< CUDA/HIP: flush buffer size; 0 = 2 x the device's L2
  int graph_batch = 0;          ///< CUDA/HIP: >0 times a graph of this many calls per sample
                                ///< (short kernels: no launch gaps); sample = graph / batch
  bool sync_each = false;       ///< CUDA/HIP: synchronize the stream after every sample (the
                                ///< do_bench style: the launch is not queued ahead, so a
                                ///< descheduled CPU shows in the sample)
  /// Retake the samples marked throttled (a power or thermal slowdown reason
  /// was active; see measure_result::throttled), after waiting
  /// throttle_recovery, at most max_retakes rounds (nvbench discards and
  /// re-runs throttled samples the same way). Samples still throttled after
  /// the last round stay marked. Batched CUDA/HIP loops retake the whole batch.
  bool retake_throttled = false;
  int max_retakes = 3;
  std::chrono::milliseconds throttle_recovery{50};
};

/// Every sample (milliseconds) and their statistics.
struct measure_result {
  std::vector<double> samples_ms;
  double median_ms = 0, p5_ms = 0, p95_ms = 0, mean_ms = 0, min_ms = 0, max_ms = 0;
  std::string method;  ///< "host", "cuda-events", "cuda-events+graph" (HIP: "hip-events...");
                       ///< "+cold-l2" when flushed
  /// Indices of samples taken while a power or thermal slowdown reason was
  /// active on the device (NVML's clocks-event reasons, read before and after
  /// each synchronized sample, or around a batched loop, whose samples are
  /// then all marked). Never changes the GPU's clocks or settings.
  std::vector<int> throttled;
  unsigned long long throttle_reasons = 0;  ///< every slowdown reason seen (device_clocks bits)
  int retakes = 0;              ///< samples retaken because they were throttled
  bool clocks_checked = false;  ///< the reasons could be read (NVML present, or injected)
};

namespace detail {
/// Quantile q in [0,1] of sorted `v`, linear interpolation between closest ranks.
inline double quantile_sorted(const std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

/// Fills the statistics of `r` from r.samples_ms.
inline void summarize(measure_result& r) {
  std::vector<double> s = r.samples_ms;
  if (s.empty()) return;
  std::sort(s.begin(), s.end());
  r.median_ms = quantile_sorted(s, 0.5);
  r.p5_ms = quantile_sorted(s, 0.05);
  r.p95_ms = quantile_sorted(s, 0.95);
  r.mean_ms = std::accumulate(s.begin(), s.end(), 0.0) / static_cast<double>(s.size());
  r.min_ms = s.front();
  r.max_ms = s.back();
}

inline void check_measure_options(const measure_options& o) {
  if (o.samples < 1 || o.warmup < 0 || o.graph_batch < 0)
    throw error(step::options,
                "measure_options: samples must be >= 1, warmup and graph_batch >= 0");
  if (o.max_retakes < 0 || o.throttle_recovery.count() < 0)
    throw error(step::options, "measure_options: max_retakes and throttle_recovery must be >= 0");
}

/// Calls fn(i) if it takes the sample index (rotating inputs), else fn().
template <class F>
void call_sample(F& fn, int i) {
  if constexpr (std::is_invocable_v<F&, int>)
    fn(i);
  else
    fn();
}

/// Reads the measured device's clocks-event reasons for krex::measure.
struct throttle_reader {
  std::function<bool(unsigned long long&)> read;  ///< empty: reasons not available
  bool checked = false;
  unsigned long long seen = 0;
  /// The slowdown reasons active now (0 when none, or unknown).
  unsigned long long now() {
    unsigned long long r = 0;
    if (!read || !read(r)) return 0;
    checked = true;
    r &= device_clocks::slowdown_mask;
    seen |= r;
    return r;
  }
};

/// A reader through the test seam only (the host backend has no GPU clocks).
inline throttle_reader hook_reader(int ordinal) {
  throttle_reader t;
  if (clocks_hook != nullptr)
    t.read = [ordinal](unsigned long long& r) {
      const device_clocks c = clocks_hook(ordinal);
      r = c.reasons;
      return c.valid;
    };
  return t;
}

/// Synchronous samples (each `take(i)` returns one sample in ms, finished):
/// each marked when a slowdown reason was active before or after it; marked
/// ones retaken when o.retake_throttled. Fills samples, marks and counts of `r`.
template <class Take>
void take_marked_samples(measure_result& r, const measure_options& o, throttle_reader& t,
                         Take&& take) {
  const auto n = static_cast<std::size_t>(o.samples);
  r.samples_ms.assign(n, 0.0);
  std::vector<char> marked(n, 0);
  const auto one = [&](std::size_t i) {
    const unsigned long long before = t.now();
    r.samples_ms[i] = take(static_cast<int>(i));
    marked[i] = (before | t.now()) != 0 ? 1 : 0;
  };
  for (std::size_t i = 0; i < n; ++i) one(i);
  for (int round = 0; o.retake_throttled && round < o.max_retakes; ++round) {
    if (std::find(marked.begin(), marked.end(), 1) == marked.end()) break;
    std::this_thread::sleep_for(o.throttle_recovery);
    for (std::size_t i = 0; i < n; ++i)
      if (marked[i] != 0) {
        one(i);
        ++r.retakes;
      }
  }
  r.throttled.clear();
  for (std::size_t i = 0; i < n; ++i)
    if (marked[i] != 0) r.throttled.push_back(static_cast<int>(i));
  r.throttle_reasons = t.seen;
  r.clocks_checked = t.checked;
}

/// False for every type: what the catch-all overloads of krex::measure
/// (host, cuda/, hip/) assert, with KREX_DETAIL_MEASURE_NEEDS_REGION.
template <class>
inline constexpr bool measure_region_arg = false;

/// The host loop: `fn` on the calling thread, steady_clock around each call.
template <class F>
measure_result measure_host(F& fn, const measure_options& o) {
  check_measure_options(o);
  using clock = std::chrono::steady_clock;
  const auto w0 = clock::now();
  for (int i = 0; i < o.warmup || clock::now() - w0 < o.warmup_time; ++i) call_sample(fn, i);
  measure_result r;
  r.method = "host";
  throttle_reader t = hook_reader(-1);
  take_marked_samples(r, o, t, [&](int i) {
    const auto t0 = clock::now();
    call_sample(fn, i);
    return std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  });
  summarize(r);
  return r;
}
}  // namespace detail

/// Host timing inside the held region `held`: `fn` runs on the calling
/// thread; each sample is the steady_clock time of one call. `fn` may take
/// the sample index (rotate inputs).
template <class B, class F>
measure_result measure(basic_region<B>& /*held*/, F&& fn, const measure_options& o = {}) {
  return detail::measure_host(fn, o);
}

/// Host timing outside any region (see krex::unprotected): the same loop.
template <class F>
measure_result measure(const unprotected_t& /*nothing held*/, F&& fn,
                       const measure_options& o = {}) {
  return detail::measure_host(fn, o);
}

/// Anything else as the first argument is a compile error, not a loop that
/// looks protected and is not.
template <class NotARegion, class F>
measure_result measure(NotARegion& /*not a region*/, F&& /*fn*/, const measure_options& = {}) {
  static_assert(detail::measure_region_arg<NotARegion>, KREX_DETAIL_MEASURE_NEEDS_REGION);
  return {};
}

}  // namespace krex

#if defined(KREX_WITH_CUDA) && KREX_WITH_CUDA
#include <krex/cuda/measure.hpp>
#endif  // KREX_WITH_CUDA
