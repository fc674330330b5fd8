// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::measure for CUDA streams: device events around each sample, cold L2
// (a flush buffer of twice the device's L2 is overwritten before each sample,
// outside its events), optional CUDA-graph timing for short kernels.

#include <krex/backend/cuda.hpp>
#include <krex/error.hpp>
#include <krex/measure.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

namespace krex {
namespace detail {

/// Device memory freed at scope end (never throws from the destructor).
class device_buffer {
 public:
  explicit device_buffer(std::size_t bytes) : m_bytes(bytes) {
    if (bytes != 0) cuda_check(cudaMalloc(&m_p, bytes), "cudaMalloc (L2 flush buffer)");
  }
  ~device_buffer() {
    if (m_p != nullptr) cudaFree(m_p);
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  void* get() const noexcept { return m_p; }
  std::size_t size() const noexcept { return m_bytes; }

 private:
  void* m_p = nullptr;
  std::size_t m_bytes;
};

/// CUDA events created and destroyed as a set.
class event_set {
 public:
  explicit event_set(std::size_t n) : m_events(n, nullptr) {
    for (cudaEvent_t& e : m_events) cuda_check(cudaEventCreate(&e), "cudaEventCreate");
  }
  ~event_set() {
    for (cudaEvent_t e : m_events)
      if (e != nullptr) cudaEventDestroy(e);
  }
  event_set(const event_set&) = delete;
  event_set& operator=(const event_set&) = delete;
  cudaEvent_t operator[](std::size_t i) const noexcept { return m_events[i]; }

 private:
  std::vector<cudaEvent_t> m_events;
};

/// Twice the current device's L2 (at least 1 MiB), or `requested` if set.
inline std::size_t flush_size(std::size_t requested) {
  if (requested != 0) return requested;
  int dev = 0;
  int l2 = 0;
  cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
  cuda_check(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev), "cudaDeviceGetAttribute");
  return std::max<std::size_t>(2 * static_cast<std::size_t>(l2), 1U << 20);
}

/// Owns a captured graph and its executable form.
class graph_exec {
 public:
  template <class F>
  graph_exec(cudaStream_t s, F& fn, int calls) {
    cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal),
               "cudaStreamBeginCapture");
    try {
      for (int i = 0; i < calls; ++i) call_sample(fn, i);
    } catch (...) {
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(s, &g);
      if (g != nullptr) cudaGraphDestroy(g);
      throw;
    }
    cuda_check(cudaStreamEndCapture(s, &m_graph), "cudaStreamEndCapture");
    cuda_check(cudaGraphInstantiate(&m_exec, m_graph, 0), "cudaGraphInstantiate");
  }
  ~graph_exec() {
    if (m_exec != nullptr) cudaGraphExecDestroy(m_exec);
    if (m_graph != nullptr) cudaGraphDestroy(m_graph);
  }
  graph_exec(const graph_exec&) = delete;
  graph_exec& operator=(const graph_exec&) = delete;
  void launch(cudaStream_t s) const { cuda_check(cudaGraphLaunch(m_exec, s), "cudaGraphLaunch"); }

 private:
  cudaGraph_t m_graph = nullptr;
  cudaGraphExec_t m_exec = nullptr;
};

}  // namespace detail

/// Times `fn` (which enqueues work on `stream`) inside the held region `held`:
/// warm-up, then o.samples samples, each between two events on `stream`; with
/// o.cold_l2 the L2 is flushed (a memset of twice its size) before each sample,
/// outside its events; with o.graph_batch = n each sample is one launch of a
/// graph of n calls, divided by n. `fn` may take the sample index (rotate
/// inputs). Synchronizes `stream`. Throws krex::error(step::backend).
template <class Region, class F>
measure_result measure(Region& /*held*/, cudaStream_t stream, F&& fn,
                       const measure_options& o = {}) {
  detail::check_measure_options(o);
  const auto n = static_cast<std::size_t>(o.samples);
  detail::device_buffer flush(o.cold_l2 ? detail::flush_size(o.flush_bytes) : 0);
  const auto flush_l2 = [&](int i) {
    if (flush.get() != nullptr)
      detail::cuda_check(cudaMemsetAsync(flush.get(), i & 0xff, flush.size(), stream),
                         "cudaMemsetAsync (L2 flush)");
  };
  std::unique_ptr<detail::graph_exec> graph;
  if (o.graph_batch > 0) graph = std::make_unique<detail::graph_exec>(stream, fn, o.graph_batch);
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
  detail::cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (warm-up)");
  while (clock::now() - w0 < o.warmup_time) {
    run(0);
    detail::cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (warm-up)");
  }

  detail::event_set ev(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    flush_l2(static_cast<int>(i));
    detail::cuda_check(cudaEventRecord(ev[2 * i], stream), "cudaEventRecord");
    run(static_cast<int>(i));
    detail::cuda_check(cudaEventRecord(ev[2 * i + 1], stream), "cudaEventRecord");
    if (o.sync_each)
      detail::cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (sample)");
  }
  detail::cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (samples)");
  measure_result r;
  r.method = graph ? "cuda-events+graph" : "cuda-events";
  if (flush.get() != nullptr) r.method += "+cold-l2";
  r.samples_ms.reserve(n);
  const double per = graph ? static_cast<double>(o.graph_batch) : 1.0;
  for (std::size_t i = 0; i < n; ++i) {
    float ms = 0;
    detail::cuda_check(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "cudaEventElapsedTime");
    r.samples_ms.push_back(static_cast<double>(ms) / per);
  }
  detail::summarize(r);
  return r;
}

}  // namespace krex
