// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::measure on a GPU stream, written once over a vendor API `V`
// (backend/gpu_api.hpp): device events around each sample, cold L2 (a flush
// buffer of twice the device's L2 is overwritten before each sample, outside
// its events), optional graph timing for short kernels, throttle marking,
// and the per-process scratch that krex::prepare_measure fills outside any
// region. cuda/measure.hpp and hip/measure.hpp instantiate it.

#include <krex/backend/gpu_api.hpp>

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

// What cuda/measure.hpp names, declared before <krex/measure.hpp>: that
// header ends by including cuda/measure.hpp (KREX_WITH_CUDA builds), which
// then meets these names while this header is still on its way in.
namespace krex {
struct measure_options;
struct measure_result;
namespace detail::gpu {
template <class V>
class device_buffer;
template <class V>
class event_set;
template <class V>
class placement_buffers;
template <class V>
std::size_t flush_size(std::size_t requested);
template <class V>
void prepare_scratch(const measure_options& o);
template <class V, class R, class F>
measure_result measure(typename V::stream_t stream, F& fn, const measure_options& o);
}  // namespace detail::gpu
}  // namespace krex

#include <krex/host/measure.hpp>

namespace krex::detail::gpu {

/// Device memory freed at scope end (never throws from the destructor).
template <class V>
class device_buffer {
 public:
  explicit device_buffer(std::size_t bytes) : m_bytes(bytes) {
    if (bytes != 0) gpu_call<V>(V::malloc(&m_p, bytes), "Malloc (L2 flush buffer)");
  }
  ~device_buffer() {
    if (m_p != nullptr) (void)V::free(m_p);
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  void* get() const noexcept { return m_p; }
  std::size_t size() const noexcept { return m_bytes; }

 private:
  void* m_p = nullptr;
  std::size_t m_bytes;
};

/// Events created and destroyed as a set.
template <class V>
class event_set {
 public:
  using event_t = typename V::event_t;
  explicit event_set(std::size_t n) : m_events(n, nullptr) {
    for (event_t& e : m_events) gpu_call<V>(V::event_create(&e), "EventCreate");
  }
  ~event_set() {
    for (event_t e : m_events)
      if (e != nullptr) (void)V::event_destroy(e);
  }
  event_set(const event_set&) = delete;
  event_set& operator=(const event_set&) = delete;
  event_t operator[](std::size_t i) const noexcept { return m_events[i]; }
  const event_t* data() const noexcept { return m_events.data(); }

 private:
  std::vector<event_t> m_events;
};

/// Twice the current device's L2 (at least 1 MiB), or `requested` if set.
template <class V>
std::size_t flush_size(std::size_t requested) {
  if (requested != 0) return requested;
  int dev = 0;
  int l2 = 0;
  gpu_call<V>(V::get_device(&dev), "GetDevice");
  gpu_call<V>(V::l2_bytes(&l2, dev), "DeviceGetAttribute");
  return l2_flush_bytes(l2);
}

/// krex::measure's device scratch (the L2 flush buffer and the sample
/// events), kept per process and context and reused from call to call:
/// allocating inside a region (a malloc, event creation) costs the region
/// milliseconds and is itself device management. One measurement uses the
/// scratch at a time; a concurrent one (another thread) allocates its own.
template <class V>
class measure_scratch {
 public:
  using event_t = typename V::event_t;
  struct lease {
    measure_scratch* owner = nullptr;
    void* flush = nullptr;
    std::size_t flush_bytes = 0;
    const event_t* events = nullptr;
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
      if (!V::context_id(&id) || V::get_device(&dev) != V::success) {
        (void)V::clear_error();
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
        if (m_flush != nullptr) (void)V::free(m_flush);
        m_flush = nullptr;
        m_flush_bytes = 0;
        gpu_call<V>(V::malloc(&m_flush, flush_bytes), "Malloc (L2 flush buffer)");
        m_flush_bytes = flush_bytes;
      }
      while (m_events.size() < events) {
        event_t e = nullptr;
        gpu_call<V>(V::event_create(&e), "EventCreate");
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
  std::vector<event_t> m_events;
};

/// The reasons reader of krex::measure on the current device: the test seam
/// if set, else the vendor's (NVML for CUDA), else none.
template <class V>
throttle_reader reader() {
  int dev = -1;
  if (V::get_device(&dev) != V::success) {
    (void)V::clear_error();
    return {};
  }
  if (clocks_hook != nullptr) return hook_reader(dev);
  throttle_reader t;
  t.read = V::reasons_source(dev);
  return t;
}

/// Owns a captured graph and its executable form.
template <class V>
class graph_exec {
 public:
  /// A graph of `calls` calls of `fn`; a body that takes a krex::placement
  /// gets placement `p` of `k` in every call (one graph per placement).
  template <class F>
  graph_exec(typename V::stream_t s, F& fn, int calls, int p = 0, int k = 1) {
    gpu_call<V>(V::begin_capture(s), "StreamBeginCapture");
    try {
      for (int i = 0; i < calls; ++i) {
        if constexpr (takes_placement<F>)
          fn(placement{p, i});
        else
          call_sample(fn, i, k);
      }
    } catch (...) {
      typename V::graph_t g = nullptr;
      (void)V::end_capture(s, &g);
      if (g != nullptr) (void)V::graph_destroy(g);
      throw;
    }
    gpu_call<V>(V::end_capture(s, &m_graph), "StreamEndCapture");
    gpu_call<V>(V::instantiate(&m_exec, m_graph), "GraphInstantiate");
  }
  ~graph_exec() {
    if (m_exec != nullptr) (void)V::graph_exec_destroy(m_exec);
    if (m_graph != nullptr) (void)V::graph_destroy(m_graph);
  }
  graph_exec(const graph_exec&) = delete;
  graph_exec& operator=(const graph_exec&) = delete;
  void launch(typename V::stream_t s) const {
    gpu_call<V>(V::graph_launch(m_exec, s), "GraphLaunch");
  }

 private:
  typename V::graph_t m_graph = nullptr;
  typename V::graph_exec_t m_exec = nullptr;
};

/// Runs sample (or warm-up call) i of a body: the body itself on placement
/// (i / per) % K, or with o.graph_batch = n a graph of n calls, one graph per
/// placement (each captured once, before any sample). krex::measure: per =
/// 1; krex::compare: 2 (both samples of a double round on one placement).
template <class V, class F>
class sample_runner {
 public:
  sample_runner(typename V::stream_t s, F& fn, const measure_options& o, int per = 1)
      : m_stream(s), m_fn(fn), m_k(o.placements), m_per(per < 1 ? 1 : per) {
    if (o.graph_batch > 0)
      for (int p = 0; p < m_k; ++p)
        m_graphs.push_back(std::make_unique<graph_exec<V>>(s, fn, o.graph_batch, p, m_k));
  }
  void run(int i) {
    const int p = (i / m_per) % m_k;
    if (!m_graphs.empty()) {
      m_graphs[static_cast<std::size_t>(p)]->launch(m_stream);
    } else {
      if constexpr (takes_placement<F>)
        m_fn(placement{p, i});
      else
        call_sample(m_fn, i, m_k);
    }
  }

 private:
  typename V::stream_t m_stream;
  F& m_fn;
  int m_k;
  int m_per;
  std::vector<std::unique_ptr<graph_exec<V>>> m_graphs;
};

/// K placements of a set of device buffers (krex::cuda::placement_buffers,
/// krex::hip::placement_buffers): K copies of each buffer, each copy its own
/// allocation on the current device (so each lands elsewhere in the device's
/// memory), freed at scope end. `budget_bytes` (0: none) bounds all K copies;
/// more throws krex::error(step::options) before anything is allocated.
/// Allocate outside the region: an allocation is device management.
///
///     krex::cuda::placement_buffers in(8, {n * sizeof(float), n * sizeof(float)}, 1ull << 30);
///     in.upload(0, x_host.data());  in.upload(1, y_host.data());  // every placement
///     in.configure(o);  // o.placements = 8, o.placement_bytes = in.bytes()
///     krex::measure(r, s, [&](krex::placement p) {
///       axpby<<<g, b, 0, s>>>(in.get<float>(p, 0), in.get<float>(p, 1), n); }, o);
template <class V>
class placement_buffers {
 public:
  placement_buffers(int k, std::vector<std::size_t> buffer_bytes, std::size_t budget_bytes = 0)
      : m_sizes(std::move(buffer_bytes)) {
    if (m_sizes.empty())
      throw error(step::options, "placement_buffers: no buffers given", 0,
                  "pass the size in bytes of each buffer of one placement");
    std::size_t per_copy = 0;
    for (std::size_t b : m_sizes) per_copy += b;
    m_bytes = placement_cost(k, per_copy, budget_bytes, "placement_buffers");
    m_k = k;
    m_ptrs.assign(static_cast<std::size_t>(k) * m_sizes.size(), nullptr);
    try {
      for (std::size_t i = 0; i < m_ptrs.size(); ++i) {
        const std::size_t bytes = m_sizes[i % m_sizes.size()];
        if (bytes == 0) continue;
        const typename V::error_t e = V::malloc(&m_ptrs[i], bytes);
        if (e != V::success) {
          (void)V::clear_error();
          throw error(step::backend,
                      std::string(V::prefix) + "Malloc failed for placement " +
                          std::to_string(i / m_sizes.size()) + " of " + std::to_string(k) + " (" +
                          std::to_string(m_bytes) + " bytes in all): " + V::error_name(e),
                      static_cast<int>(e),
                      "lower K or free device memory; a budget (budget_bytes) makes this fail "
                      "before anything is allocated");
        }
      }
    } catch (...) {
      release();
      throw;
    }
  }
  ~placement_buffers() { release(); }
  placement_buffers(const placement_buffers&) = delete;
  placement_buffers& operator=(const placement_buffers&) = delete;

  int count() const noexcept { return m_k; }
  std::size_t buffers() const noexcept { return m_sizes.size(); }
  /// The memory of all K copies, in bytes.
  std::size_t bytes() const noexcept { return m_bytes; }
  /// Buffer `b` (in the order given) of placement `p`.
  void* data(int p, std::size_t b) const {
    if (p < 0 || p >= m_k || b >= m_sizes.size())
      throw error(step::options,
                  "placement_buffers: placement " + std::to_string(p) + ", buffer " +
                      std::to_string(b) + " out of range (" + std::to_string(m_k) +
                      " placements of " + std::to_string(m_sizes.size()) + " buffers)",
                  0, "index with the krex::placement the body is given");
    return m_ptrs[static_cast<std::size_t>(p) * m_sizes.size() + b];
  }
  template <class T>
  T* get(placement p, std::size_t b) const {
    return static_cast<T*>(data(p.index, b));
  }
  template <class T>
  T* get(int p, std::size_t b) const {
    return static_cast<T*>(data(p, b));
  }
  /// Copies buffer `b`'s size from host memory `src` into buffer `b` of every
  /// placement (synchronous).
  void upload(std::size_t b, const void* src) const {
    for (int p = 0; p < m_k; ++p)
      gpu_call<V>(V::copy_from_host(data(p, b), src, m_sizes[b]), "Memcpy (placement upload)");
  }
  /// Sets o.placements to K and o.placement_bytes to bytes().
  measure_options& configure(measure_options& o) const {
    o.placements = m_k;
    o.placement_bytes = m_bytes;
    return o;
  }

 private:
  void release() noexcept {
    for (void*& q : m_ptrs)
      if (q != nullptr) {
        (void)V::free(q);
        q = nullptr;
      }
  }
  std::vector<std::size_t> m_sizes;
  std::vector<void*> m_ptrs;
  std::size_t m_bytes = 0;
  int m_k = 0;
};

/// krex::prepare_measure's part for measure: the scratch for `o` on the
/// current device, allocated now (see measure_scratch).
template <class V>
void prepare_scratch(const measure_options& o) {
  check_measure_options(o);
  typename measure_scratch<V>::lease l;
  measure_scratch<V>::get().take(o.cold_l2 ? flush_size<V>(o.flush_bytes) : 0,
                                 2 * static_cast<std::size_t>(o.samples), l);
}

/// The scratch of one measurement (krex::measure or krex::compare): the
/// process's cached flush buffer and events (nothing allocated after the
/// first call, or after prepare_measure), else, while another measurement
/// holds them, a private set.
template <class V>
class scratch_use {
 public:
  scratch_use(std::size_t flush_bytes, std::size_t events) : m_flush_bytes(flush_bytes) {
    if (measure_scratch<V>::get().take(flush_bytes, events, m_cached)) {
      m_flush = m_cached.flush;
      m_events = m_cached.events;
    } else {
      m_own_flush = std::make_unique<device_buffer<V>>(flush_bytes);
      m_own_events = std::make_unique<event_set<V>>(events);
      m_flush = m_own_flush->get();
      m_events = m_own_events->data();
    }
  }
  const typename V::event_t* events() const noexcept { return m_events; }
  /// Overwrites the L2 (cold_l2) before sample `i`; nothing without a flush buffer.
  void flush_l2(std::size_t i, typename V::stream_t stream) const {
    if (m_flush != nullptr)
      gpu_call<V>(V::memset_async(m_flush, static_cast<int>(i & 0xffU), m_flush_bytes, stream),
                  "MemsetAsync (L2 flush)");
  }
  bool flushes() const noexcept { return m_flush != nullptr; }

 private:
  std::size_t m_flush_bytes;
  typename measure_scratch<V>::lease m_cached;
  std::unique_ptr<device_buffer<V>> m_own_flush;
  std::unique_ptr<event_set<V>> m_own_events;
  void* m_flush = nullptr;
  const typename V::event_t* m_events = nullptr;
};

/// The loop of krex::measure on `stream`, region or not.
template <class V, class F>
measure_result measure_loop(typename V::stream_t stream, F& fn, const measure_options& o) {
  using event_t = typename V::event_t;
  check_measure_options(o);
  check_body<F>(o);
  const auto n = static_cast<std::size_t>(o.samples);
  const std::size_t flush_bytes = o.cold_l2 ? flush_size<V>(o.flush_bytes) : 0;
  const scratch_use<V> scratch(flush_bytes, 2 * n);
  const event_t* ev = scratch.events();
  const auto flush_l2 = [&](int i) { scratch.flush_l2(static_cast<std::size_t>(i), stream); };
  const int places = o.placements;
  sample_runner<V, F> runner(stream, fn, o);
  const auto run = [&](int i) { runner.run(i); };
  const bool graph = o.graph_batch > 0;

  using clock = std::chrono::steady_clock;
  const auto w0 = clock::now();
  for (int i = 0; i < warmup_calls(o); ++i) {
    flush_l2(i);
    run(i);
  }
  gpu_call<V>(V::stream_synchronize(stream), "StreamSynchronize (warm-up)");
  while (clock::now() - w0 < o.warmup_time) {
    run(0);
    gpu_call<V>(V::stream_synchronize(stream), "StreamSynchronize (warm-up)");
  }

  measure_result r;
  r.method = std::string(V::prefix) + (graph ? "-events+graph" : "-events");
  if (scratch.flushes()) r.method += "+cold-l2";
  const double per = graph ? static_cast<double>(o.graph_batch) : 1.0;
  const auto elapsed = [&](std::size_t i) {
    float ms = 0;
    gpu_call<V>(V::event_elapsed(&ms, ev[2 * i], ev[2 * i + 1]), "EventElapsedTime");
    return static_cast<double>(ms) / per;
  };
  const auto enqueue = [&](std::size_t i) {
    flush_l2(static_cast<int>(i));
    gpu_call<V>(V::event_record(ev[2 * i], stream), "EventRecord");
    run(static_cast<int>(i));
    gpu_call<V>(V::event_record(ev[2 * i + 1], stream), "EventRecord");
  };
  throttle_reader t = reader<V>();
  if (o.sync_each) {
    // Each sample is finished before the next: reasons read around each one.
    take_marked_samples(r, o, t, [&](int i) {
      const auto k = static_cast<std::size_t>(i);
      enqueue(k);
      gpu_call<V>(V::stream_synchronize(stream), "StreamSynchronize (sample)");
      return elapsed(k);
    });
  } else {
    // Queued ahead: the reasons are read around the whole batch, and a
    // slowdown at either end marks (and, with retake_throttled, retakes) it all.
    for (int round = 0;; ++round) {
      const unsigned long long before = t.now();
      for (std::size_t i = 0; i < n; ++i) enqueue(i);
      gpu_call<V>(V::stream_synchronize(stream), "StreamSynchronize (samples)");
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
  summarize(r);
  summarize_placements(r, places, o.placement_bytes);
  return r;
}

/// What krex::measure's first argument may be: a held region (an lvalue
/// basic_region<B>) or krex::unprotected.
template <class T>
struct held_region : std::false_type {};
template <class B>
struct held_region<basic_region<B>> : std::true_type {};
template <class R>
inline constexpr bool measure_first_arg =
    (std::is_lvalue_reference_v<R> && held_region<std::remove_reference_t<R>>::value) ||
    std::is_same_v<std::remove_cv_t<std::remove_reference_t<R>>, unprotected_t>;

/// krex::measure(held, stream, fn, o) for the vendor of `stream`: the loop if
/// `held` is a held region or krex::unprotected, else a compile error with
/// krex::measure's own diagnostic.
template <class V, class R, class F>
measure_result measure(typename V::stream_t stream, F& fn, const measure_options& o) {
  static_assert(measure_first_arg<R> || measure_region_arg<R>, KREX_DETAIL_MEASURE_NEEDS_REGION);
  if constexpr (measure_first_arg<R>) {
    return measure_loop<V>(stream, fn, o);
  } else {
    return {};
  }
}

}  // namespace krex::detail::gpu
