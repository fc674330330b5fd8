// SPDX-License-Identifier: Apache-2.0
#pragma once

// The CUDA backend's probe for the quiet step (krex/quiet.hpp): a 64 MiB
// device-to-device copy (twice L2 is flushed first, outside its events),
// timed with events on a stream of its own. 64 MiB read + 64 MiB written
// exceed the L2 of every current GPU, so the copy runs at memory bandwidth,
// which is what the driver's background work after a large free takes
// (bench/gpu/quiet.cu: both the probe and a 54 us axpby run ~10% slow for
// ~2.5 ms per GB freed). About 40 us on an H200.
//
// The buffers, events and stream are made by krex::prepare_measure (outside
// any region), or else on the first probe of a context (inside that region:
// allocations, unlike frees, leave the device quiet, but a fresh process
// pays ~15 ms there, measured on the H200), and kept per process and
// context after that.

#include <krex/backend/cuda_api.hpp>
#include <krex/detail/clocks.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace krex::detail {

class cuda_quiet_probe {
 public:
  static constexpr std::size_t copy_bytes = std::size_t{64} << 20;

  /// One probe on device `ordinal` (the caller's context must exist).
  quiet_sample run(int ordinal) {
    std::lock_guard<std::mutex> l(m_mu);
    quiet_sample q;
    int prev = -1;
    if (cudaGetDevice(&prev) != cudaSuccess) return fail(q, "cudaGetDevice");
    if (prev != ordinal && cudaSetDevice(ordinal) != cudaSuccess) return fail(q, "cudaSetDevice");
    restore r{prev, ordinal};
    unsigned long long ctx = 0;
    if (!current_context_id(&ctx)) {
      q.why_not = "the CUDA context could not be named (driver older than 12.0)";
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
    if (cudaDeviceSynchronize() != cudaSuccess) return fail(q, "cudaDeviceSynchronize");
    if (cudaMemsetAsync(m_flush, 0, m_flush_bytes, m_stream) != cudaSuccess ||
        cudaEventRecord(m_e0, m_stream) != cudaSuccess ||
        cudaMemcpyAsync(m_dst, m_src, copy_bytes, cudaMemcpyDeviceToDevice, m_stream) != cudaSuccess ||
        cudaEventRecord(m_e1, m_stream) != cudaSuccess || cudaEventSynchronize(m_e1) != cudaSuccess)
      return fail(q, "the probe copy");
    float ms = 0;
    if (cudaEventElapsedTime(&ms, m_e0, m_e1) != cudaSuccess) return fail(q, "cudaEventElapsedTime");
    q.ok = true;
    q.ns = static_cast<std::uint64_t>(static_cast<double>(ms) * 1e6);
    return q;
  }

  /// Makes the probe's buffers, events and stream for device `ordinal` in
  /// the current context and runs it once, untimed (the runtime loads its
  /// copy kernels lazily): what the first region would otherwise do inside
  /// itself. Called by krex::prepare_measure, outside any region.
  void prepare(int ordinal) { (void)run(ordinal); }

  static cuda_quiet_probe& get() {
    static auto* p = new cuda_quiet_probe;  // never destroyed: used until exit
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
      if (prev >= 0 && prev != now) cudaSetDevice(prev);
    }
  };

  static quiet_sample& fail(quiet_sample& q, const char* what) {
    const cudaError_t e = cudaGetLastError();
    q.ok = false;
    q.why_not = std::string(what) + " failed (" + cudaGetErrorName(e) + ")";
    return q;
  }

  bool allocate(int ordinal, quiet_sample& q) {
    int l2 = 0;
    if (cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, ordinal) != cudaSuccess) {
      fail(q, "cudaDeviceGetAttribute");
      return false;
    }
    m_flush_bytes = l2_flush_bytes(l2);
    if (cudaMalloc(&m_src, copy_bytes) != cudaSuccess || cudaMalloc(&m_dst, copy_bytes) != cudaSuccess ||
        cudaMalloc(&m_flush, m_flush_bytes) != cudaSuccess ||
        cudaMemset(m_src, 0x5a, copy_bytes) != cudaSuccess ||
        cudaEventCreate(&m_e0) != cudaSuccess || cudaEventCreate(&m_e1) != cudaSuccess ||
        cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking) != cudaSuccess) {
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
  cudaEvent_t m_e0 = nullptr;
  cudaEvent_t m_e1 = nullptr;
  cudaStream_t m_stream = nullptr;
};

}  // namespace krex::detail
