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
// Placements (measure_options::placements = K > 1): the body takes a
// krex::placement and runs on inputs number p.index, which rotates per sample
// (sample i on placement i % K); the result records each sample's placement,
// the median of each placement and their spread (docs/COMPARE.md). K copies
// of the inputs: krex::placements<T> (host) or krex::cuda::placement_buffers.
//
//     o.placements = 8;
//     krex::measure(r, stream, [&](krex::placement p) { kernel<<<g, b>>>(x[p.index]); }, o);
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

/// What a body that takes it is told about the call: which of
/// measure_options::placements copies of its inputs to use (sample i uses
/// i % K), and the index of the call (warm-up calls count from 0, then the
/// samples count from 0 again). Not convertible from or to int: a body
/// `[&](int i)` still gets the sample index, as before placements existed.
struct placement {
  int index = 0;   ///< the placement to run on, 0 .. placements-1
  int sample = 0;  ///< the sample (or warm-up call) number
};

namespace detail {
/// measure_options' fields, once, as detail::option_table is krex::options':
/// each field, its krex.measure keyword (nullptr: none), its type, its least
/// value (check_measure_options), its default (the struct's, and krex.measure's
/// and krex.compare's in python/src/krex_python.cpp) and what it does;
/// docs/CUDA.md's table is generated from it (`krexctl options --write`).
// clang-format off
enum class measure_option_id {
  warmup, warmup_time, samples, cold_l2, flush_bytes, graph_batch, sync_each, retake_throttled,
  max_retakes, throttle_recovery, placements, warm_placements, placement_bytes
};
// clang-format on
struct measure_option_spec {
  measure_option_id id;
  const char* name;    ///< the field
  const char* python;  ///< krex.measure's keyword, or nullptr
  const char* type;    ///< "int", "bool", "bytes", "us", "ms"
  long long lo, def;
  const char* doc;
};
inline constexpr measure_option_spec measure_option_table[] = {
    {measure_option_id::warmup, "warmup", "warmup", "int", 0, 3,
     "warm-up calls (at least this many)"},
    {measure_option_id::warmup_time, "warmup_time", "warmup_ms", "us", 0, 0,
     "...and keep warming up until this much time passed (Python: milliseconds)"},
    {measure_option_id::samples, "samples", "samples", "int", 1, 50, "timed samples"},
    {measure_option_id::cold_l2, "cold_l2", "cold_l2", "bool", 0, 1,
     "CUDA/HIP: flush L2 before each sample (outside its events)"},
    {measure_option_id::flush_bytes, "flush_bytes", "flush_bytes", "bytes", 0, 0,
     "CUDA/HIP: flush buffer size; 0 = 2 x the device's L2"},
    {measure_option_id::graph_batch, "graph_batch", nullptr, "int", 0, 0,
     "CUDA/HIP: >0 times a graph of this many calls per sample (short kernels: no launch "
     "gaps); sample = graph / batch"},
    {measure_option_id::sync_each, "sync_each", nullptr, "bool", 0, 0,
     "CUDA/HIP: synchronize the stream after every sample (the do_bench style: the launch is "
     "not queued ahead, so a descheduled CPU shows in the sample)"},
    {measure_option_id::retake_throttled, "retake_throttled", nullptr, "bool", 0, 0,
     "retake the samples marked throttled, after `throttle_recovery`, at most `max_retakes` "
     "rounds (as nvbench does)"},
    {measure_option_id::max_retakes, "max_retakes", nullptr, "int", 0, 3,
     "the most rounds of retakes"},
    {measure_option_id::throttle_recovery, "throttle_recovery", nullptr, "ms", 0, 50,
     "the wait before a retake"},
    {measure_option_id::placements, "placements", "placements", "int", 1, 1,
     "K placements of the body's inputs: sample i runs on placement i % K (docs/COMPARE.md)"},
    {measure_option_id::warm_placements, "warm_placements", nullptr, "bool", 0, 1,
     "with K > 1, warm up on every placement (at least K warm-up calls); off: `warmup` calls "
     "only, for placements the harness already touched (filled, or kept from the last loop)"},
    {measure_option_id::placement_bytes, "placement_bytes", "placement_bytes", "bytes", 0, 0,
     "the memory the K placements cost, copied to the result (reported, never allocated)"},
};
static_assert(sizeof(measure_option_table) / sizeof(measure_option_table[0]) ==
                  static_cast<std::size_t>(measure_option_id::placement_bytes) + 1,
              "measure_option_table: a row per measure_option_id, in its order");
/// A field's default, as its type.
template <class T>
constexpr T measure_default(measure_option_id id) {
  return T(measure_option_table[static_cast<std::size_t>(id)].def);
}
}  // namespace detail

/// How krex::measure runs its loop. Each field's default, range and meaning
/// are detail::measure_option_table's.
struct measure_options {
  using id = detail::measure_option_id;
  int warmup = detail::measure_default<int>(id::warmup);  ///< warm-up calls (at least this many)
  /// ...and keep warming up until this much time passed
  std::chrono::microseconds warmup_time =
      detail::measure_default<std::chrono::microseconds>(id::warmup_time);
  int samples = detail::measure_default<int>(id::samples);  ///< timed samples
  /// CUDA/HIP: flush L2 before each sample (outside its events)
  bool cold_l2 = detail::measure_default<bool>(id::cold_l2);
  /// CUDA/HIP: flush buffer size; 0 = 2 x the device's L2
  std::size_t flush_bytes = detail::measure_default<std::size_t>(id::flush_bytes);
  /// CUDA/HIP: >0 times a graph of this many calls per sample (short kernels:
  /// no launch gaps); sample = graph / batch
  int graph_batch = detail::measure_default<int>(id::graph_batch);
  /// CUDA/HIP: synchronize the stream after every sample (the do_bench style:
  /// the launch is not queued ahead, so a descheduled CPU shows in the sample)
  bool sync_each = detail::measure_default<bool>(id::sync_each);
  /// Retake the samples marked throttled (a power or thermal slowdown reason
  /// was active; see measure_result::throttled), after waiting
  /// throttle_recovery, at most max_retakes rounds (nvbench discards and
  /// re-runs throttled samples the same way). Samples still throttled after
  /// the last round stay marked. Batched CUDA/HIP loops retake the whole batch.
  bool retake_throttled = detail::measure_default<bool>(id::retake_throttled);
  int max_retakes = detail::measure_default<int>(id::max_retakes);
  std::chrono::milliseconds throttle_recovery =
      detail::measure_default<std::chrono::milliseconds>(id::throttle_recovery);
  /// K placements of the body's inputs: sample i runs on placement i % K (the
  /// body must take a krex::placement when K > 1), warm-up covers every
  /// placement (at least K calls), and the result has each sample's placement
  /// and the spread between placements. 1 (the default): one placement, the
  /// loop exactly as without this option. Raise it when deciding between
  /// close candidates in a long-lived process (docs/COMPARE.md).
  int placements = detail::measure_default<int>(id::placements);
  /// With placements > 1, warm up on every placement: at least K warm-up
  /// calls, placements 0..K-1. Off: `warmup` calls only (still rotating), for
  /// placements the harness has already touched on the device (it filled
  /// them, or kept them from the loop before), where K calls of a long body
  /// would only lengthen the region.
  bool warm_placements = detail::measure_default<bool>(id::warm_placements);
  /// The memory the K placements cost, in bytes, copied to the result
  /// (krex::placements<T>::bytes(), placement_buffers::bytes(); their
  /// configure(o) sets this and `placements`). Reported, never allocated.
  std::size_t placement_bytes = detail::measure_default<std::size_t>(id::placement_bytes);
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
  int retakes = 0;                          ///< samples retaken because they were throttled
  bool clocks_checked = false;  ///< the reasons could be read (NVML present, or injected)
  /// The placement of each sample (0 .. K-1), parallel to samples_ms.
  std::vector<int> placement;
  /// The median of each placement's samples (K entries).
  std::vector<double> placement_median_ms;
  /// How much placement moved this body: (max - min) / median of
  /// placement_median_ms; 0 with one placement.
  double placement_spread = 0;
  /// The memory the placements cost (measure_options::placement_bytes).
  std::size_t placement_bytes = 0;
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
  const auto lo = [](measure_option_id i) {
    return measure_option_table[static_cast<std::size_t>(i)].lo;
  };
  using id = measure_option_id;
  if (o.samples < lo(id::samples) || o.warmup < lo(id::warmup) ||
      o.graph_batch < lo(id::graph_batch))
    throw error(step::options,
                "measure_options: samples must be >= 1, warmup and graph_batch >= 0");
  if (o.max_retakes < lo(id::max_retakes) ||
      o.throttle_recovery.count() < lo(id::throttle_recovery))
    throw error(step::options, "measure_options: max_retakes and throttle_recovery must be >= 0");
  if (o.placements < lo(id::placements))
    throw error(step::options,
                "measure_options: placements = " + std::to_string(o.placements) + " is not >= 1", 0,
                "use 1 (one copy of the inputs, the default) or the number of copies K");
  if (o.placements > o.samples)
    throw error(step::options,
                "measure_options: placements = " + std::to_string(o.placements) +
                    " is more than samples = " + std::to_string(o.samples) +
                    ": some placements would never be timed",
                0, "raise samples to a multiple of placements (e.g. samples = 4 x placements)");
}

/// True if the body `F` takes a krex::placement (and not an int).
template <class F>
inline constexpr bool takes_placement =
    !std::is_invocable_v<F&, int> && std::is_invocable_v<F&, placement>;

/// With K > 1 placements the body must take a krex::placement: a body that
/// does not cannot be running on the placement the result records.
template <class F>
void check_body(const measure_options& o) {
  if (o.placements > 1 && !takes_placement<F>)
    throw error(step::options,
                "measure_options: placements = " + std::to_string(o.placements) +
                    " but the body does not take a krex::placement, so it cannot run on the "
                    "placement each sample records",
                0,
                "write the body as [&](krex::placement p) { ... inputs[p.index] ... }, or "
                "leave placements at 1");
}

/// The warm-up calls of a loop over `o`: o.warmup, and every placement once
/// unless o.warm_placements is off.
inline int warmup_calls(const measure_options& o) {
  return o.placements > 1 && o.warm_placements ? std::max(o.warmup, o.placements) : o.warmup;
}

/// Calls fn(i) if it takes the sample index (rotating inputs), fn(placement)
/// if it takes a krex::placement (placement i % k of k), else fn().
template <class F>
void call_sample(F& fn, int i, int k = 1) {
  if constexpr (std::is_invocable_v<F&, int>)
    fn(i);
  else if constexpr (std::is_invocable_v<F&, placement>)
    fn(placement{i % (k < 1 ? 1 : k), i});
  else
    fn();
}

/// Fills the placement bookkeeping of `r` from its samples: sample i ran on
/// placement (i / per) % k (krex::measure: per = 1; krex::compare: 2); the
/// median of each placement and their spread.
inline void summarize_placements(measure_result& r, int k, std::size_t bytes, int per = 1) {
  if (k < 1) k = 1;
  if (per < 1) per = 1;
  const std::size_t n = r.samples_ms.size();
  r.placement.assign(n, 0);
  std::vector<std::vector<double>> by(static_cast<std::size_t>(k));
  for (std::size_t i = 0; i < n; ++i) {
    const int p =
        static_cast<int>((i / static_cast<std::size_t>(per)) % static_cast<std::size_t>(k));
    r.placement[i] = p;
    by[static_cast<std::size_t>(p)].push_back(r.samples_ms[i]);
  }
  r.placement_median_ms.clear();
  for (std::vector<double>& v : by) {
    std::sort(v.begin(), v.end());
    r.placement_median_ms.push_back(quantile_sorted(v, 0.5));
  }
  std::vector<double> m = r.placement_median_ms;
  std::sort(m.begin(), m.end());
  const double mid = quantile_sorted(m, 0.5);
  r.placement_spread = m.empty() || mid <= 0 ? 0 : (m.back() - m.front()) / mid;
  r.placement_bytes = bytes;
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
  check_body<F>(o);
  const int k = o.placements;
  using clock = std::chrono::steady_clock;
  const auto w0 = clock::now();
  for (int i = 0; i < warmup_calls(o) || clock::now() - w0 < o.warmup_time; ++i)
    call_sample(fn, i, k);
  measure_result r;
  r.method = "host";
  throttle_reader t = hook_reader(-1);
  take_marked_samples(r, o, t, [&](int i) {
    const auto t0 = clock::now();
    call_sample(fn, i, k);
    return std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  });
  summarize(r);
  summarize_placements(r, k, o.placement_bytes);
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

namespace detail {
/// The budget check of the placement helpers: K copies of `per_copy` bytes
/// must fit in `budget` (0: no budget). Returns K x per_copy.
inline std::size_t placement_cost(int k, std::size_t per_copy, std::size_t budget,
                                  const char* who) {
  if (k < 1)
    throw error(step::options,
                std::string(who) + ": " + std::to_string(k) + " placements is not >= 1", 0,
                "ask for K >= 1 copies (1 = the inputs once)");
  const auto uk = static_cast<std::size_t>(k);
  if (per_copy != 0 && uk > static_cast<std::size_t>(-1) / per_copy)
    throw error(step::options, std::string(who) + ": K x the buffer set's size overflows", 0,
                "lower K or the buffer sizes");
  const std::size_t total = uk * per_copy;
  if (budget != 0 && total > budget)
    throw error(step::options,
                std::string(who) + ": " + std::to_string(k) + " placements of " +
                    std::to_string(per_copy) + " bytes need " + std::to_string(total) +
                    " bytes, over the budget of " + std::to_string(budget) + " bytes",
                0,
                "lower K to at most " + std::to_string(per_copy == 0 ? 0 : budget / per_copy) +
                    ", or raise the budget");
  return total;
}
}  // namespace detail

/// K placements of a set of host buffers: K copies of each of the vectors
/// given (each copy its own allocation), for a host body timed with
/// measure_options::placements = K. `budget_bytes` (0: none) bounds the
/// memory of all K copies; more throws krex::error(step::options).
///
///     krex::placements<float> in(8, {x, y});   // 8 copies of x and of y
///     in.configure(o);                          // o.placements = 8, o.placement_bytes
///     krex::measure(r, [&](krex::placement p) { axpby(in.data(p, 0), in.data(p, 1)); }, o);
template <class T>
class placements {
 public:
  placements(int k, const std::vector<std::vector<T>>& set, std::size_t budget_bytes = 0) {
    std::size_t per_copy = 0;
    for (const std::vector<T>& b : set) per_copy += b.size() * sizeof(T);
    m_bytes = detail::placement_cost(k, per_copy, budget_bytes, "krex::placements");
    m_copies.assign(static_cast<std::size_t>(k), set);
  }
  int count() const noexcept { return static_cast<int>(m_copies.size()); }
  /// The memory of all K copies, in bytes.
  std::size_t bytes() const noexcept { return m_bytes; }
  /// Buffer `b` (in the order given) of placement `p`.
  std::vector<T>& buffer(int p, std::size_t b) {
    return m_copies.at(static_cast<std::size_t>(p)).at(b);
  }
  T* data(int p, std::size_t b) { return buffer(p, b).data(); }
  T* data(placement p, std::size_t b) { return data(p.index, b); }
  /// Sets o.placements to K and o.placement_bytes to bytes().
  measure_options& configure(measure_options& o) const {
    o.placements = count();
    o.placement_bytes = m_bytes;
    return o;
  }

 private:
  std::vector<std::vector<std::vector<T>>> m_copies;
  std::size_t m_bytes = 0;
};

}  // namespace krex
