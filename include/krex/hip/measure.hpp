// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::measure for HIP streams: hipEvents around each sample, cold L2 (a
// flush buffer of twice the device's L2, hipDeviceAttributeL2CacheSize, is
// overwritten before each sample, outside its events), optional HIP-graph
// timing for short kernels. The HIP twin of <krex/cuda/measure.hpp>.

#include <krex/backend/hip.hpp>
#include <krex/error.hpp>
#include <krex/measure.hpp>

#include <hip/hip_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

namespace krex {
namespace detail::hip_measure {

/// Device memory freed at scope end (never throws from the destructor).
class device_buffer {
 public:
  explicit device_buffer(std::size_t bytes) : m_bytes(bytes) {
    if (bytes != 0) hip_check(hipMalloc(&m_p, bytes), "hipMalloc (L2 flush buffer)");
  }
  ~device_buffer() {
    if (m_p != nullptr) (void)hipFree(m_p);
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  void* get() const noexcept { return m_p; }
  std::size_t size() const noexcept { return m_bytes; }

 private:
  void* m_p = nullptr;
  std::size_t m_bytes;
};

/// HIP events created and destroyed as a set.
class event_set {
 public:
  explicit event_set(std::size_t n) : m_events(n, nullptr) {
    for (hipEvent_t& e : m_events) hip_check(hipEventCreate(&e), "hipEventCreate");
  }
  ~event_set() {
    for (hipEvent_t e : m_events)
      if (e != nullptr) (void)hipEventDestroy(e);
  }
  event_set(const event_set&) = delete;
  event_set& operator=(const event_set&) = delete;
  hipEvent_t operator[](std::size_t i) const noexcept { return m_events[i]; }

 private:
  std::vector<hipEvent_t> m_events;
};

/// Twice `l2_bytes` (at least 1 MiB), or `requested` if set.
inline std::size_t flush_size_for(std::size_t requested, int l2_bytes) noexcept {
  if (requested != 0) return requested;
  return std::max<std::size_t>(2 * static_cast<std::size_t>(std::max(l2_bytes, 0)), 1U << 20);
}

/// Twice the current device's L2 (at least 1 MiB), or `requested` if set.
inline std::size_t flush_size(std::size_t requested) {
  if (requested != 0) return requested;
  int dev = 0;
  int l2 = 0;
  hip_check(hipGetDevice(&dev), "hipGetDevice");
  hip_check(hipDeviceGetAttribute(&l2, hipDeviceAttributeL2CacheSize, dev),
            "hipDeviceGetAttribute (L2 cache size)");
  return flush_size_for(0, l2);
}

/// Owns a captured graph and its executable form.
class graph_exec {
 public:
  template <class F>
  graph_exec(hipStream_t s, F& fn, int calls) {
    hip_check(hipStreamBeginCapture(s, hipStreamCaptureModeThreadLocal), "hipStreamBeginCapture");
    try {
      for (int i = 0; i < calls; ++i) call_sample(fn, i);
    } catch (...) {
      hipGraph_t g = nullptr;
      (void)hipStreamEndCapture(s, &g);
      if (g != nullptr) (void)hipGraphDestroy(g);
      throw;
    }
    hip_check(hipStreamEndCapture(s, &m_graph), "hipStreamEndCapture");
    hip_check(hipGraphInstantiate(&m_exec, m_graph, nullptr, nullptr, 0), "hipGraphInstantiate");
  }
  ~graph_exec() {
    if (m_exec != nullptr) (void)hipGraphExecDestroy(m_exec);
    if (m_graph != nullptr) (void)hipGraphDestroy(m_graph);
  }
  graph_exec(const graph_exec&) = delete;
  graph_exec& operator=(const graph_exec&) = delete;
  void launch(hipStream_t s) const { hip_check(hipGraphLaunch(m_exec, s), "hipGraphLaunch"); }

 private:
  hipGraph_t m_graph = nullptr;
  hipGraphExec_t m_exec = nullptr;
};

}  // namespace detail::hip_measure

namespace detail {
/// The HIP loop of krex::measure (below), region or not.
template <class F>
measure_result measure_hip(hipStream_t stream, F& fn, const measure_options& o) {
  namespace hm = detail::hip_measure;
  detail::check_measure_options(o);
  const auto n = static_cast<std::size_t>(o.samples);
  hm::device_buffer flush(o.cold_l2 ? hm::flush_size(o.flush_bytes) : 0);
  const auto flush_l2 = [&](int i) {
    if (flush.get() != nullptr)
      detail::hip_check(hipMemsetAsync(flush.get(), i & 0xff, flush.size(), stream),
                        "hipMemsetAsync (L2 flush)");
  };
  std::unique_ptr<hm::graph_exec> graph;
  if (o.graph_batch > 0) graph = std::make_unique<hm::graph_exec>(stream, fn, o.graph_batch);
  const auto run = [&](int i) {
    if (graph)
      graph->launch(stream);
    else
      detail::call_sample(fn, i);
  };

  using clock = std::chrono::steady_clock;
  const auto w0 = clock::now();
  for (int i = 0; i < o.warmup; ++i) {
    flush_l2(i);
    run(i);
  }
  detail::hip_check(hipStreamSynchronize(stream), "hipStreamSynchronize (warm-up)");
  while (clock::now() - w0 < o.warmup_time) {
    run(0);
    detail::hip_check(hipStreamSynchronize(stream), "hipStreamSynchronize (warm-up)");
  }

  hm::event_set ev(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    flush_l2(static_cast<int>(i));
    detail::hip_check(hipEventRecord(ev[2 * i], stream), "hipEventRecord");
    run(static_cast<int>(i));
    detail::hip_check(hipEventRecord(ev[2 * i + 1], stream), "hipEventRecord");
    if (o.sync_each)
      detail::hip_check(hipStreamSynchronize(stream), "hipStreamSynchronize (sample)");
  }
  detail::hip_check(hipStreamSynchronize(stream), "hipStreamSynchronize (samples)");
  measure_result r;
  r.method = graph ? "hip-events+graph" : "hip-events";
  if (flush.get() != nullptr) r.method += "+cold-l2";
  r.samples_ms.reserve(n);
  const double per = graph ? static_cast<double>(o.graph_batch) : 1.0;
  for (std::size_t i = 0; i < n; ++i) {
    float ms = 0;
    detail::hip_check(hipEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "hipEventElapsedTime");
    r.samples_ms.push_back(static_cast<double>(ms) / per);
  }
  detail::summarize(r);
  return r;
}
}  // namespace detail

/// Times `fn` (which enqueues work on `stream`) inside the held region `held`:
/// warm-up, then o.samples samples, each between two hipEvents on `stream`;
/// with o.cold_l2 the L2 is flushed (a memset of twice its size) before each
/// sample, outside its events; with o.graph_batch = n each sample is one
/// launch of a HIP graph of n calls, divided by n. `fn` may take the sample
/// index (rotate inputs). Synchronizes `stream`. Throws krex::error(step::backend).
template <class B, class F>
measure_result measure(basic_region<B>& /*held*/, hipStream_t stream, F&& fn,
                       const measure_options& o = {}) {
  return detail::measure_hip(stream, fn, o);
}

/// The same loop outside any region (see krex::unprotected): a baseline.
template <class F>
measure_result measure(const unprotected_t& /*nothing held*/, hipStream_t stream, F&& fn,
                       const measure_options& o = {}) {
  return detail::measure_hip(stream, fn, o);
}

/// Anything else as the first argument does not compile (krex/measure.hpp).
template <class NotARegion, class F>
measure_result measure(NotARegion& /*not a region*/, hipStream_t /*stream*/, F&& /*fn*/,
                       const measure_options& = {}) {
  static_assert(detail::measure_region_arg<NotARegion>, KREX_DETAIL_MEASURE_NEEDS_REGION);
  return {};
}

}  // namespace krex
