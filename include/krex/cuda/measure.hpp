// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::measure for CUDA streams: device events around each sample, cold L2
// (a flush buffer of twice the device's L2 is overwritten before each sample,
// outside its events), optional CUDA-graph timing for short kernels.

#include <krex/backend/cuda.hpp>
#include <krex/error.hpp>
#include <krex/measure.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
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
  const cudaEvent_t* data() const noexcept { return m_events.data(); }

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
  return l2_flush_bytes(l2);
}

/// krex::measure's device scratch (the L2 flush buffer and the sample
/// events), kept per process and CUDA context and reused from call to call:
/// allocating inside a region (cudaMalloc, event creation) costs the region
/// milliseconds and is itself device management. One measurement uses the
/// scratch at a time; a concurrent one (another thread) allocates its own.
class measure_scratch {
 public:
  struct lease {
    measure_scratch* owner = nullptr;
    void* flush = nullptr;
    std::size_t flush_bytes = 0;
    const cudaEvent_t* events = nullptr;
    lease() = default;
    lease(const lease&) = delete;
    lease& operator=(const lease&) = delete;
    ~lease() {
      if (owner != nullptr) owner->m_mu.unlock();
    }
  };

  static measure_scratch& get() {
    static measure_scratch* s = new measure_scratch;  // never destroyed: used until exit
    return *s;
  }

  /// Fills `l` with a flush buffer of `flush_bytes` and `events` events of the
  /// current context, allocating only what the cache lacks. Returns false
  /// (nothing taken) if another measurement holds the scratch or the context
  /// cannot be named; the caller then allocates its own.
  bool take(std::size_t flush_bytes, std::size_t events, lease& l) {
    if (!m_mu.try_lock()) return false;
    try {
      unsigned long long id = 0;
      int dev = -1;
      if (!current_context_id(&id) || cudaGetDevice(&dev) != cudaSuccess) {
        cudaGetLastError();
        m_mu.unlock();
        return false;
      }
      if (id != m_ctx || dev != m_device) {
        // Another context (this device's was reset, or another device): what
        // the cache holds belonged to a context that may be gone, so it is
        // dropped, never freed (freeing it in this context would be invalid).
        m_flush = nullptr;
        m_flush_bytes = 0;
        m_events.clear();
        m_ctx = id;
        m_device = dev;
      }
      if (m_flush_bytes < flush_bytes) {
        if (m_flush != nullptr) cudaFree(m_flush);
        m_flush = nullptr;
        m_flush_bytes = 0;
        cuda_check(cudaMalloc(&m_flush, flush_bytes), "cudaMalloc (L2 flush buffer)");
        m_flush_bytes = flush_bytes;
      }
      while (m_events.size() < events) {
        cudaEvent_t e = nullptr;
        cuda_check(cudaEventCreate(&e), "cudaEventCreate");
        m_events.push_back(e);
      }
    } catch (...) {
      m_mu.unlock();
      throw;
    }
    l.owner = this;
    l.flush = flush_bytes != 0 ? m_flush : nullptr;
    l.flush_bytes = flush_bytes;
    l.events = m_events.data();
    return true;
  }

 private:
  std::mutex m_mu;
  unsigned long long m_ctx = 0;
  int m_device = -1;
  void* m_flush = nullptr;
  std::size_t m_flush_bytes = 0;
  std::vector<cudaEvent_t> m_events;
};

/// The reasons reader of krex::measure on the current device: the test seam
/// if set, else NVML (by the device's PCI address), else none.
inline throttle_reader cuda_reader() {
  int dev = -1;
  if (cudaGetDevice(&dev) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  if (clocks_hook != nullptr) return hook_reader(dev);
  throttle_reader t;
  nvml* n = nvml::get();
  char id[32] = {};
  if (n == nullptr || cudaDeviceGetPCIBusId(id, sizeof id, dev) != cudaSuccess) {
    cudaGetLastError();
    return t;
  }
  t.read = [n, bus = std::string(id)](unsigned long long& r) { return n->reasons(bus, r); };
  return t;
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

/// Allocates krex::measure's device scratch for the current device (its L2
/// flush buffer and events for `o`) and the quiet step's probe buffers now,
/// outside any region, so that neither the region's entry nor its measure
/// allocates anything. Optional: without it the first
/// measure of the process allocates (inside its region) and later ones reuse.
/// Throws krex::error(step::backend).
inline void prepare_measure(const measure_options& o = {}) {
  detail::check_measure_options(o);
  detail::measure_scratch::lease l;
  detail::measure_scratch::get().take(o.cold_l2 ? detail::flush_size(o.flush_bytes) : 0,
                                      2 * static_cast<std::size_t>(o.samples), l);
  int dev = 0;
  detail::cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
  detail::cuda_quiet_probe::get().prepare(dev);  // the region's quiet probe, too
}

namespace detail {
/// The CUDA loop of krex::measure (below), region or not.
template <class F>
measure_result measure_cuda(cudaStream_t stream, F& fn, const measure_options& o) {
  detail::check_measure_options(o);
  const auto n = static_cast<std::size_t>(o.samples);
  const std::size_t flush_bytes = o.cold_l2 ? detail::flush_size(o.flush_bytes) : 0;
  // The process's cached scratch (nothing allocated here after the first
  // call, or after prepare_measure), else a private one.
  detail::measure_scratch::lease cached;
  std::unique_ptr<detail::device_buffer> own_flush;
  std::unique_ptr<detail::event_set> own_events;
  void* flush = nullptr;
  const cudaEvent_t* ev = nullptr;
  if (detail::measure_scratch::get().take(flush_bytes, 2 * n, cached)) {
    flush = cached.flush;
    ev = cached.events;
  } else {
    own_flush = std::make_unique<detail::device_buffer>(flush_bytes);
    own_events = std::make_unique<detail::event_set>(2 * n);
    flush = own_flush->get();
    ev = own_events->data();
  }
  const auto flush_l2 = [&](int i) {
    if (flush != nullptr)
      detail::cuda_check(cudaMemsetAsync(flush, i & 0xff, flush_bytes, stream),
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

  measure_result r;
  r.method = graph ? "cuda-events+graph" : "cuda-events";
  if (flush != nullptr) r.method += "+cold-l2";
  const double per = graph ? static_cast<double>(o.graph_batch) : 1.0;
  const auto elapsed = [&](std::size_t i) {
    float ms = 0;
    detail::cuda_check(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "cudaEventElapsedTime");
    return static_cast<double>(ms) / per;
  };
  const auto enqueue = [&](std::size_t i) {
    flush_l2(static_cast<int>(i));
    detail::cuda_check(cudaEventRecord(ev[2 * i], stream), "cudaEventRecord");
    run(static_cast<int>(i));
    detail::cuda_check(cudaEventRecord(ev[2 * i + 1], stream), "cudaEventRecord");
  };
  detail::throttle_reader t = detail::cuda_reader();
  if (o.sync_each) {
    // Each sample is finished before the next: reasons read around each one.
    detail::take_marked_samples(r, o, t, [&](int i) {
      const auto k = static_cast<std::size_t>(i);
      enqueue(k);
      detail::cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (sample)");
      return elapsed(k);
    });
  } else {
    // Queued ahead: the reasons are read around the whole batch, and a
    // slowdown at either end marks (and, with retake_throttled, retakes) it all.
    for (int round = 0;; ++round) {
      const unsigned long long before = t.now();
      for (std::size_t i = 0; i < n; ++i) enqueue(i);
      detail::cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (samples)");
      const bool slow = (before | t.now()) != 0;
      r.samples_ms.clear();
      for (std::size_t i = 0; i < n; ++i) r.samples_ms.push_back(elapsed(i));
      r.throttled.clear();
      if (slow)
        for (std::size_t i = 0; i < n; ++i) r.throttled.push_back(static_cast<int>(i));
      if (!slow || !o.retake_throttled || round >= o.max_retakes) break;
      r.retakes += static_cast<int>(n);
      std::this_thread::sleep_for(o.throttle_recovery);
    }
    r.throttle_reasons = t.seen;
    r.clocks_checked = t.checked;
  }
  detail::summarize(r);
  return r;
}
}  // namespace detail

/// Times `fn` (which enqueues work on `stream`) inside the held region `held`:
/// warm-up, then o.samples samples, each between two events on `stream`; with
/// o.cold_l2 the L2 is flushed (a memset of twice its size) before each sample,
/// outside its events; with o.graph_batch = n each sample is one launch of a
/// graph of n calls, divided by n. `fn` may take the sample index (rotate
/// inputs). Synchronizes `stream`. The flush buffer and the events come from
/// a per-process cache (see prepare_measure), so only the first measure of a
/// context allocates. Throws krex::error(step::backend).
template <class B, class F>
measure_result measure(basic_region<B>& /*held*/, cudaStream_t stream, F&& fn,
                       const measure_options& o = {}) {
  return detail::measure_cuda(stream, fn, o);
}

/// The same loop outside any region (see krex::unprotected): a baseline.
template <class F>
measure_result measure(const unprotected_t& /*nothing held*/, cudaStream_t stream, F&& fn,
                       const measure_options& o = {}) {
  return detail::measure_cuda(stream, fn, o);
}

/// Anything else as the first argument does not compile (krex/measure.hpp).
template <class NotARegion, class F>
measure_result measure(NotARegion& /*not a region*/, cudaStream_t /*stream*/, F&& /*fn*/,
                       const measure_options& = {}) {
  static_assert(detail::measure_region_arg<NotARegion>, KREX_DETAIL_MEASURE_NEEDS_REGION);
  return {};
}

}  // namespace krex
