// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::compare on a GPU stream, written once over a vendor API `V`
// (backend/gpu_api.hpp), as gpu/measure.hpp is for krex::measure: every
// sample of every candidate between two events, in compare_order's
// interleaved order, each on its placement, with the L2 flushed before each
// (cold_l2), from measure's per-process scratch. cuda/compare.hpp
// instantiates it.

#include <krex/backend/gpu_api.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

// What cuda/compare.hpp names, declared before <krex/compare.hpp>: that header
// ends by including cuda/compare.hpp (KREX_WITH_CUDA builds), which then meets
// this name while this header is still on its way in (as gpu/measure.hpp).
namespace krex {
struct compare_options;
struct compare_result;
class candidate;
namespace detail::gpu {
template <class V, class R>
compare_result compare(typename V::stream_t stream, const std::vector<candidate>& cs,
                       const compare_options& o);
}  // namespace detail::gpu
}  // namespace krex

#include <krex/gpu/measure.hpp>
#include <krex/host/compare.hpp>

namespace krex::detail::gpu {

/// The loop of krex::compare on `stream`, region or not.
template <class V>
compare_result compare_loop(typename V::stream_t stream, const std::vector<candidate>& cs,
                            const compare_options& co) {
  using event_t = typename V::event_t;
  check_compare(cs, co);
  const measure_options& o = co.measure;
  const std::size_t m = cs.size();
  const auto n = static_cast<std::size_t>(o.samples);
  const std::size_t total = m * n;
  const std::size_t flush_bytes = o.cold_l2 ? flush_size<V>(o.flush_bytes) : 0;
  const scratch_use<V> scratch(flush_bytes, 2 * total);
  const event_t* ev = scratch.events();
  const auto flush_l2 = [&](std::size_t i) { scratch.flush_l2(i, stream); };
  // One runner per candidate: its body, or its graphs (one per placement).
  std::vector<std::unique_ptr<sample_runner<V, const candidate>>> run;
  for (const candidate& c : cs)
    run.push_back(std::make_unique<sample_runner<V, const candidate>>(stream, c, o, 2));

  using clock = std::chrono::steady_clock;
  const auto w0 = clock::now();
  for (int i = 0; i < compare_warmup_calls(o); ++i)
    for (std::size_t c = 0; c < m; ++c) {
      flush_l2(static_cast<std::size_t>(i));
      run[c]->run(i);
    }
  gpu_call<V>(V::stream_synchronize(stream), "StreamSynchronize (warm-up)");
  while (clock::now() - w0 < o.warmup_time) {
    for (std::size_t c = 0; c < m; ++c) run[c]->run(0);
    gpu_call<V>(V::stream_synchronize(stream), "StreamSynchronize (warm-up)");
  }

  std::vector<int> order = compare_order(static_cast<int>(m), o.samples, co.seed);
  std::string method = std::string(V::prefix) + (o.graph_batch > 0 ? "-events+graph" : "-events");
  if (scratch.flushes()) method += "+cold-l2";
  method += "+interleaved";
  const double per = o.graph_batch > 0 ? static_cast<double>(o.graph_batch) : 1.0;
  // Sample s (in time order) is sample s / m of candidate order[s].
  const auto enqueue = [&](std::size_t s) {
    flush_l2(s);
    gpu_call<V>(V::event_record(ev[2 * s], stream), "EventRecord");
    run[static_cast<std::size_t>(order[s])]->run(static_cast<int>(s / m));
    gpu_call<V>(V::event_record(ev[2 * s + 1], stream), "EventRecord");
  };
  std::vector<std::vector<double>> times(m, std::vector<double>(n));
  std::vector<std::vector<int>> throttled(m);
  const auto store = [&](std::size_t s, bool slow) {
    float ms = 0;
    gpu_call<V>(V::event_elapsed(&ms, ev[2 * s], ev[2 * s + 1]), "EventElapsedTime");
    const auto c = static_cast<std::size_t>(order[s]);
    times[c][s / m] = static_cast<double>(ms) / per;
    if (slow) throttled[c].push_back(static_cast<int>(s / m));
  };
  throttle_reader t = reader<V>();
  if (o.sync_each) {
    for (std::size_t s = 0; s < total; ++s) {
      const unsigned long long before = t.now();
      enqueue(s);
      gpu_call<V>(V::stream_synchronize(stream), "StreamSynchronize (sample)");
      store(s, (before | t.now()) != 0);
    }
  } else {
    const unsigned long long before = t.now();
    for (std::size_t s = 0; s < total; ++s) enqueue(s);
    gpu_call<V>(V::stream_synchronize(stream), "StreamSynchronize (samples)");
    const bool slow = (before | t.now()) != 0;
    for (std::size_t s = 0; s < total; ++s) store(s, slow);
  }
  return assemble_compare(cs, co, std::move(times), throttled, std::move(order), method, t);
}

/// krex::compare(held, stream, cs, o) for the vendor of `stream`: the loop if
/// `held` is a held region or krex::unprotected, else a compile error.
template <class V, class R>
compare_result compare(typename V::stream_t stream, const std::vector<candidate>& cs,
                       const compare_options& o) {
  static_assert(measure_first_arg<R> || measure_region_arg<R>, KREX_DETAIL_MEASURE_NEEDS_REGION);
  if constexpr (measure_first_arg<R>) {
    return compare_loop<V>(stream, cs, o);
  } else {
    return {};
  }
}

}  // namespace krex::detail::gpu
