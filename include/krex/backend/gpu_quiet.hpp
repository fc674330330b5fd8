// SPDX-License-Identifier: Apache-2.0
#pragma once

// The quiet step's probe (krex/detail/steps/quiet.hpp), written once over a vendor API
// `V` (backend/gpu_api.hpp): a 64 MiB device-to-device copy (twice L2 is
// flushed first, outside its events), timed with events on a stream of its
// own. 64 MiB read + 64 MiB written exceed the L2 of every current GPU, so
// the copy runs at memory bandwidth, which is what the driver's background
// work after a large free takes (bench/gpu/quiet.cu: both the probe and a
// 54 us axpby run ~10% slow for ~2.5 ms per GB freed). About 40 us on an
// H200. The CUDA backend runs it (backend/cuda.hpp: quiet_probe()); the HIP
// backend does not yet (docs/HIP.md).
//
// The buffers, events and stream are made by krex::prepare_measure (outside
// any region), or else on the first probe of a context (inside that region:
// allocations, unlike frees, leave the device quiet, but a fresh process
// pays ~15 ms there, measured on the H200), and kept per process and
// context after that.

#include <krex/backend/gpu_api.hpp>
#include <krex/detail/clocks.hpp>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace krex::detail::gpu {

template <class V>
class quiet_probe {
 public:
  static constexpr std::size_t copy_bytes = std::size_t{64} << 20;

  /// One probe on device `ordinal` (the caller's context must exist).
  quiet_sample run(int ordinal) {
    std::lock_guard<std::mutex> l(m_mu);
    quiet_sample q;
    int prev = -1;
    if (V::get_device(&prev) != V::success) return fail(q, api("GetDevice"));
    if (prev != ordinal && V::set_device(ordinal) != V::success) return fail(q, api("SetDevice"));
    restore r{prev, ordinal};
    unsigned long long ctx = 0;
    if (!V::context_id(&ctx)) {
      q.why_not = V::context_unnamed;
      return q;
    }
    if (ctx != m_ctx || ordinal != m_ordinal) {
      // Another context (the old one was reset, or another device): what was
      // cached belonged to a context that may be gone, so it is dropped.
      drop();
      m_ctx = ctx;
      m_ordinal = ordinal;
    }
    if (m_src == nullptr && !allocate(ordinal, q)) return q;
    // The holder's own queued work finishes first: it is not the device's noise.
    if (V::device_synchronize() != V::success) return fail(q, api("DeviceSynchronize"));
    if (V::memset_async(m_flush, 0, m_flush_bytes, m_stream) != V::success ||
        V::event_record(m_e0, m_stream) != V::success ||
        V::copy_async(m_dst, m_src, copy_bytes, m_stream) != V::success ||
        V::event_record(m_e1, m_stream) != V::success || V::event_synchronize(m_e1) != V::success)
      return fail(q, "the probe copy");
    float ms = 0;
    if (V::event_elapsed(&ms, m_e0, m_e1) != V::success) return fail(q, api("EventElapsedTime"));
    q.ok = true;
    q.ns = static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6);
    return q;
  }

  /// Makes the probe's buffers, events and stream for device `ordinal` in
  /// the current context and runs it once, untimed (the runtime loads its
  /// copy kernels lazily): what the first region would otherwise do inside
  /// itself. Called by krex::prepare_measure, outside any region.
  void prepare(int ordinal) { (void)run(ordinal); }

  static quiet_probe& get() {
    static auto* p = new quiet_probe;  // never destroyed: used until exit
    return *p;
  }

 private:
  // Forgets the cached resources without freeing them: their context may be gone.
  void drop() noexcept {
    m_src = m_dst = m_flush = nullptr;
    m_e0 = m_e1 = nullptr;
    m_stream = nullptr;
    m_flush_bytes = 0;
  }
  struct restore {
    int prev, now;
    ~restore() {
      if (prev >= 0 && prev != now) (void)V::set_device(prev);
    }
  };

  static std::string api(const char* call) { return std::string(V::prefix) + call; }

  static quiet_sample& fail(quiet_sample& q, const std::string& what) {
    const typename V::error_t e = V::clear_error();
    q.ok = false;
    q.why_not = what + " failed (" + V::error_name(e) + ")";
    return q;
  }

  bool allocate(int ordinal, quiet_sample& q) {
    int l2 = 0;
    if (V::l2_bytes(&l2, ordinal) != V::success) {
      fail(q, api("DeviceGetAttribute"));
      return false;
    }
    m_flush_bytes = l2_flush_bytes(l2);
    if (V::malloc(&m_src, copy_bytes) != V::success ||
        V::malloc(&m_dst, copy_bytes) != V::success ||
        V::malloc(&m_flush, m_flush_bytes) != V::success ||
        V::memset(m_src, 0x5a, copy_bytes) != V::success || V::event_create(&m_e0) != V::success ||
        V::event_create(&m_e1) != V::success || V::stream_create(&m_stream) != V::success) {
      fail(q, "allocating the probe's buffers");
      q.why_not += ": not probed";
      drop();  // what was made stays with the context until it ends
      return false;
    }
    return true;
  }

  std::mutex m_mu;
  unsigned long long m_ctx = 0;
  int m_ordinal = -1;
  void* m_src = nullptr;
  void* m_dst = nullptr;
  void* m_flush = nullptr;
  std::size_t m_flush_bytes = 0;
  typename V::event_t m_e0 = nullptr;
  typename V::event_t m_e1 = nullptr;
  typename V::stream_t m_stream = nullptr;
};

}  // namespace krex::detail::gpu
