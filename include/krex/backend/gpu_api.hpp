// SPDX-License-Identifier: Apache-2.0
#pragma once

// The per-vendor primitive layer the GPU code is written once over.
//
// krex's CUDA and HIP code is written once, as templates over a vendor API
// type `V`: the backend class (backend/gpu_backend.hpp), the callback gating
// (backend/gpu_gating.hpp), krex::measure (gpu/measure.hpp) and
// krex::launch (gpu/launch.hpp). The vendor APIs are detail::cuda_api
// (backend/cuda_api.hpp) and detail::hip_api (backend/hip_api.hpp), structs
// of static functions with the same names, each one runtime call.
//
// The two runtimes name most of those calls alike but for their prefix
// (cudaEventRecord, hipEventRecord) and take the same arguments, so that
// part of both structs is one table, KREX_DETAIL_GPU_RUNTIME(prefix) below;
// each vendor header adds what differs: props_t (the properties struct),
// no_device_hint (what to check when there is no device), lower_case_bus_id,
// l2_bytes(&b, d) (the L2 size attribute), instantiate(&x, g) (a graph),
// context_id(&id) (a name of the current context, false: none; when false,
// context_unnamed says why) and
// reasons_source(d) (a reader of the device's clocks-event reasons, empty
// where there is none).
//
// What only one vendor has stays in that vendor's files: CUPTI and NVML for
// CUDA (backend/cuda*.hpp), the ROCm 5 callback table for HIP
// (backend/hip_callbacks.hpp).

#include <krex/error.hpp>

#include <algorithm>
#include <cstddef>
#include <string>

namespace krex::detail {

/// Bytes that flush an L2 of `l2_bytes`: twice it, at least 1 MiB
/// (krex::measure's cold-L2 flush, gpu/measure.hpp, and CUDA's quiet probe).
inline std::size_t l2_flush_bytes(int l2_bytes) noexcept {
  return std::max<std::size_t>(2 * static_cast<std::size_t>(std::max(l2_bytes, 0)),
                               std::size_t{1} << 20);
}

/// The primitives both runtimes have under the same name but their prefix
/// `P` (cuda, hip), as members of the vendor API struct. Messages name a call
/// as prefix + its name without it ("Malloc" -> "cudaMalloc": gpu_call).
// NOLINTBEGIN(cppcoreguidelines-macro-usage): one table for two prefixes
#define KREX_DETAIL_GPU_RUNTIME(P)                                                              \
  static constexpr const char* prefix = #P;                                                     \
  using error_t = P##Error_t;                                                                   \
  using stream_t = P##Stream_t;                                                                 \
  using event_t = P##Event_t;                                                                   \
  using graph_t = P##Graph_t;                                                                   \
  using graph_exec_t = P##GraphExec_t;                                                          \
  static constexpr error_t success = P##Success;                                                \
  /* errors: clear a non-sticky one, name it; no usable device (not a failing one) */           \
  static error_t clear_error() noexcept { return P##GetLastError(); }                           \
  static const char* error_name(error_t e) noexcept { return P##GetErrorName(e); }              \
  static const char* error_string(error_t e) noexcept { return P##GetErrorString(e); }          \
  static bool no_device(error_t e) noexcept {                                                   \
    return e == P##ErrorNoDevice || e == P##ErrorInsufficientDriver;                            \
  }                                                                                             \
  /* devices */                                                                                 \
  static error_t device_count(int* n) noexcept { return P##GetDeviceCount(n); }                 \
  static error_t get_device(int* d) noexcept { return P##GetDevice(d); }                        \
  static error_t set_device(int d) noexcept { return P##SetDevice(d); }                         \
  static error_t device_synchronize() noexcept { return P##DeviceSynchronize(); }               \
  static error_t pci_bus_id(char* id, int len, int d) noexcept {                                \
    return P##DeviceGetPCIBusId(id, len, d);                                                    \
  }                                                                                             \
  /* memory (copy_async: device to device) */                                                   \
  static error_t malloc(void** p, std::size_t n) noexcept { return P##Malloc(p, n); }           \
  static error_t free(void* p) noexcept { return P##Free(p); }                                  \
  static error_t memset(void* p, int v, std::size_t n) noexcept { return P##Memset(p, v, n); }  \
  static error_t memset_async(void* p, int v, std::size_t n, stream_t s) noexcept {             \
    return P##MemsetAsync(p, v, n, s);                                                          \
  }                                                                                             \
  static error_t copy_async(void* dst, const void* src, std::size_t n, stream_t s) noexcept {   \
    return P##MemcpyAsync(dst, src, n, P##MemcpyDeviceToDevice, s);                             \
  }                                                                                             \
  static error_t copy_from_host(void* dst, const void* src, std::size_t n) noexcept {           \
    return P##Memcpy(dst, src, n, P##MemcpyHostToDevice);                                       \
  }                                                                                             \
  /* streams (non-blocking) and events */                                                       \
  static error_t stream_create(stream_t* s) noexcept {                                          \
    return P##StreamCreateWithFlags(s, P##StreamNonBlocking);                                   \
  }                                                                                             \
  static error_t stream_synchronize(stream_t s) noexcept { return P##StreamSynchronize(s); }    \
  static error_t event_create(event_t* e) noexcept { return P##EventCreate(e); }                \
  static error_t event_destroy(event_t e) noexcept { return P##EventDestroy(e); }               \
  static error_t event_record(event_t e, stream_t s) noexcept { return P##EventRecord(e, s); }  \
  static error_t event_synchronize(event_t e) noexcept { return P##EventSynchronize(e); }       \
  static error_t event_elapsed(float* ms, event_t a, event_t b) noexcept {                      \
    return P##EventElapsedTime(ms, a, b);                                                       \
  }                                                                                             \
  /* graphs (capture in thread-local mode) and launches */                                      \
  static error_t begin_capture(stream_t s) noexcept {                                           \
    return P##StreamBeginCapture(s, P##StreamCaptureModeThreadLocal);                           \
  }                                                                                             \
  static error_t end_capture(stream_t s, graph_t* g) noexcept {                                 \
    return P##StreamEndCapture(s, g);                                                           \
  }                                                                                             \
  static error_t graph_launch(graph_exec_t x, stream_t s) noexcept {                            \
    return P##GraphLaunch(x, s);                                                                \
  }                                                                                             \
  static error_t graph_destroy(graph_t g) noexcept { return P##GraphDestroy(g); }               \
  static error_t graph_exec_destroy(graph_exec_t x) noexcept { return P##GraphExecDestroy(x); } \
  static error_t launch_kernel(const void* k, dim3 grid, dim3 block, void** args,               \
                               std::size_t smem, stream_t s) noexcept {                         \
    return P##LaunchKernel(k, grid, block, args, smem, s);                                      \
  }
// NOLINTEND(cppcoreguidelines-macro-usage)

/// Throws krex::error(step::backend) naming V's error `e` and `what` failed
/// (`what` names the call in full: "cudaMalloc (L2 flush buffer)").
template <class V>
void gpu_check(typename V::error_t e, const char* what) {
  if (e == V::success) return;
  (void)V::clear_error();  // clear a non-sticky error so later calls are not blamed
  throw error(step::backend,
              std::string(what) + " failed: " + V::error_name(e) + ": " + V::error_string(e),
              static_cast<int>(e), V::no_device(e) ? V::no_device_hint : "");
}

/// gpu_check for the call `call` of V, named without its prefix ("Malloc (L2
/// flush buffer)" is cudaMalloc or hipMalloc's).
template <class V>
void gpu_call(typename V::error_t e, const char* call) {
  if (e != V::success) gpu_check<V>(e, (std::string(V::prefix) + call).c_str());
}

}  // namespace krex::detail
