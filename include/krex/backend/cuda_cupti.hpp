// SPDX-License-Identifier: Apache-2.0
#pragma once

// Automatic gating for the CUDA backend: a CUPTI callback subscription that
// passes every runtime and driver API call that can leave work on the device
// (kernel launches of every flavour, graph launches, copies, memsets, event
// records, stream memory operations, host functions, prefetches) or change
// what the device holds (context creation and destruction, primary-context
// retain/release/reset, cudaSetDevice/cudaInitDevice, which create the
// primary context, allocations and frees of every kind, host registration,
// module and library loads and unloads, kernel lookups, which load lazily
// loaded code, graph instantiation and upload) through the tenant's
// submission gate. Launches made by libraries the harness does not control
// (cuBLAS, PyTorch) are gated too. Such device-management calls change the
// GPU's page tables and channels: run next to a timed loop they slow it (a
// TLB invalidation reaches every running kernel), so a sibling's region must
// not overlap them either.
//
// The enter callback runs submit_enter (it parks there while a sibling holds a
// region), the exit callback submit_exit. Both domains are enabled: a runtime
// call parks before the runtime enters the driver, and the driver call nested
// in it passes at once (submit_depth). Driver calls made without the runtime
// (cuBLAS, Triton, PyTorch's driver paths) are caught by the driver domain.
// CUDA 13's `<<<>>>` launches enter the runtime through __cudaLaunchKernel,
// whose parameters CUPTI does not describe; they are gated at the driver
// launch nested in it, where the stream is known (capture check below).
//
// A kernel launch into a stream that is being captured does not run, so while
// a sibling holds the gate such a launch passes ungated (checked only then:
// outside regions the check would cost a driver call per launch).
//
// CUPTI allows one subscriber per process. If another tool (a profiler) holds
// it, the tenant falls back to explicit gating and says so in gating_note().

#include <krex/detail/slots.hpp>
#include <krex/detail/submit.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>  // also the generated *_params structs of both API domains

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <thread>

namespace krex::detail {

/// The driver entry point `name`, of at least CUDA `version` (e.g. 12000),
/// through the runtime's lookup: krex links cudart and CUPTI, not libcuda.
/// nullptr, with the runtime's error cleared, if the driver lacks it.
inline void* driver_entry(const char* name, int version) noexcept {
  void* f = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &f, version, cudaEnableDefault, &q) == cudaSuccess &&
      q == cudaDriverEntryPointSuccess && f != nullptr)
    return f;
  cudaGetLastError();
  return nullptr;
}

/// The unique id of the calling thread's current context (cuCtxGetId, CUDA
/// 12.0+, through the runtime's entry-point lookup). False: no current
/// context, or the driver cannot name it.
inline bool current_context_id(unsigned long long* id) noexcept {
  using cur_fn = CUresult (*)(CUcontext*);
  using id_fn = CUresult (*)(CUcontext, unsigned long long*);
  static const std::pair<cur_fn, id_fn> fns = [] {
    void* a = driver_entry("cuCtxGetCurrent", 4000);
    void* b = a != nullptr ? driver_entry("cuCtxGetId", 12000) : nullptr;
    if (b == nullptr) return std::pair<cur_fn, id_fn>{nullptr, nullptr};
    return std::pair<cur_fn, id_fn>{reinterpret_cast<cur_fn>(a), reinterpret_cast<id_fn>(b)};
  }();
  CUcontext c = nullptr;
  return fns.first != nullptr && fns.first(&c) == CUDA_SUCCESS && c != nullptr &&
         fns.second(c, id) == CUDA_SUCCESS;
}

}  // namespace krex::detail

namespace krex::detail::cupti {

/// Per-process state of krex's one CUPTI subscription.
struct state {
  std::mutex mu;
  CUpti_SubscriberHandle subscriber = nullptr;
  std::atomic<member*> target{nullptr};          ///< the tenant whose gate calls pass
  std::atomic<std::uint64_t> gated{0};           ///< calls that passed the gate
  std::atomic<std::uint64_t> gated_runtime{0};   ///< ...of which entered it in the runtime domain
  std::atomic<std::uint64_t> gated_driver{0};    ///< ...in the driver domain (not nested)
  std::atomic<std::uint64_t> capture_passes{0};  ///< captured launches let through a raised gate
  std::atomic<int> open{0};  ///< calls between their enter and exit callbacks (see detach)
};

inline state& the_state() {
  static state s;
  return s;
}

/// Whether an API of `domain` named `name` can leave work on the device or
/// change what the device holds (see the top of this file). Names match by
/// prefix: "cuMemAlloc" also covers cuMemAllocAsync, cuMemAllocHost, ...
/// Whether `name` creates or destroys a context (what options::gate_contexts
/// leaves ungated when false).
inline bool context_api(const char* name) noexcept {
  static const char* const names[] = {
      "cuCtxCreate",      "cuCtxDestroy",    "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease",
      "cuDevicePrimaryCtxReset", "cuGreenCtxCreate", "cuGreenCtxDestroy", "cudaSetDevice",
      "cudaInitDevice",   "cudaDeviceReset"};
  for (const char* n : names)
    if (std::strncmp(name, n, std::strlen(n)) == 0) return true;
  return false;
}

inline bool gated_api(CUpti_CallbackDomain domain, const char* name,
                      bool contexts = true) noexcept {
  if (name == nullptr) return false;
  if (!contexts && context_api(name)) return false;
  static const char* const driver[] = {
      // work on the device
      "cuLaunch", "cuGraphLaunch", "cuMemcpy", "cuMemset", "cuEventRecord", "cuStreamWriteValue",
      "cuStreamWaitValue", "cuStreamBatchMemOp", "cuMemPrefetch", "cuGraphicsMap",
      "cuSignalExternal", "cuWaitExternal",
      // device management: contexts, memory, code
      "cuCtxCreate", "cuCtxDestroy", "cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxRelease",
      "cuDevicePrimaryCtxReset", "cuGreenCtxCreate", "cuGreenCtxDestroy", "cuMemAlloc",
      "cuMemFree", "cuMemHostAlloc", "cuMemHostRegister", "cuMemHostUnregister", "cuMemCreate",
      "cuMemRelease", "cuMemMap", "cuMemUnmap", "cuModuleLoad", "cuModuleUnload",
      "cuModuleGetFunction", "cuLibraryLoad", "cuLibraryUnload", "cuLibraryGetKernel",
      "cuKernelGetFunction", "cuGraphInstantiate", "cuGraphUpload"};
  static const char* const runtime[] = {
      "cudaLaunch", "cudaGraphLaunch", "cudaMemcpy", "cudaMemset", "cudaEventRecord",
      "cudaMemPrefetch", "cudaSignalExternal", "cudaWaitExternal",
      // device management
      "cudaSetDevice", "cudaInitDevice", "cudaDeviceReset", "cudaMalloc", "cudaFree",
      "cudaHostAlloc", "cudaHostRegister", "cudaHostUnregister", "cudaLibraryLoad",
      "cudaLibraryUnload", "cudaGraphInstantiate", "cudaGraphUpload"};
  const auto match = [name](const char* const* first, const char* const* last) {
    for (; first != last; ++first)
      if (std::strncmp(name, *first, std::strlen(*first)) == 0) return true;
    return false;
  };
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) return match(std::begin(driver), std::end(driver));
  // cudaMemcpyToSymbol etc. also match "cudaMemcpy"; cudaLaunchHostFunc matches "cudaLaunch".
  return match(std::begin(runtime), std::end(runtime));
}

/// The stream a kernel launch goes to, if `cbid` is a launch whose parameters we read.
inline bool launch_stream(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* params,
                          CUstream* out) noexcept {
  if (params == nullptr) return false;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    switch (cbid) {
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
        *out = static_cast<const cuLaunchKernel_params*>(params)->hStream;
        return true;
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
        const CUlaunchConfig* c = static_cast<const cuLaunchKernelEx_params*>(params)->config;
        if (c == nullptr) return false;
        *out = c->hStream;
        return true;
      }
      default: return false;
    }
  }
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    switch (cbid) {
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
        *out = static_cast<const cudaLaunchKernel_v7000_params*>(params)->stream;
        return true;
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060:
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060: {
        const cudaLaunchConfig_t* c =
            static_cast<const cudaLaunchKernelExC_v11060_params*>(params)->config;
        if (c == nullptr) return false;
        *out = c->stream;
        return true;
      }
      default: return false;
    }
  }
  return false;
}

// cuStreamIsCapturing, looked up through the runtime at attach time so that
// krex links only cudart and CUPTI (not libcuda).
using is_capturing_fn = CUresult (*)(CUstream, CUstreamCaptureStatus*);
inline std::atomic<is_capturing_fn>& is_capturing_ptr() {
  static std::atomic<is_capturing_fn> p{nullptr};
  return p;
}

inline bool capturing(CUstream s) noexcept {
  const is_capturing_fn f = is_capturing_ptr().load(std::memory_order_relaxed);
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  return f != nullptr && f(s, &st) == CUDA_SUCCESS && st == CU_STREAM_CAPTURE_STATUS_ACTIVE;
}

inline void CUPTIAPI on_api(void* /*userdata*/, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                            const void* data) {
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (info->correlationData == nullptr) return;
  if (info->callbackSite == CUPTI_API_ENTER) {
    *info->correlationData = 0;
    member* m = the_state().target.load(std::memory_order_acquire);
    if (m == nullptr) return;
    state& st = the_state();
    st.open.fetch_add(1);
    // Dekker pair with detach (store target, load open): either detach waits
    // for this call, or this call sees the subscription ending and passes.
    if (st.target.load() != m) {
      st.open.fetch_sub(1);
      return;
    }
    // Only when a sibling holds the gate: a captured launch does not run, so
    // it need not wait (and capturing code may hold locks the region needs).
    if (gate_raised(m->dev->gate.load()) && m->dev->holder.load() != m->index + 1 &&
        submit_depth == 0) {
      CUstream s = nullptr;
      if (launch_stream(domain, cbid, info->functionParams, &s) && capturing(s)) {
        st.capture_passes.fetch_add(1, std::memory_order_relaxed);
        st.open.fetch_sub(1);
        return;
      }
    }
    const bool outer = submit_depth == 0;
    submit_enter(*m);
    if (outer)
      (domain == CUPTI_CB_DOMAIN_RUNTIME_API ? st.gated_runtime : st.gated_driver)
          .fetch_add(1, std::memory_order_relaxed);
    // The exit callback closes the submission on the member it was opened on.
    *info->correlationData = reinterpret_cast<std::uint64_t>(m);
  } else if (*info->correlationData != 0) {
    // The pointer stored by the enter callback above, back from CUPTI's slot.
    submit_exit(
        *reinterpret_cast<member*>(*info->correlationData));  // NOLINT(performance-no-int-to-ptr)
    the_state().gated.fetch_add(1, std::memory_order_relaxed);
    the_state().open.fetch_sub(1);
  }
}

inline std::string result_name(CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) != CUPTI_SUCCESS || s == nullptr) return std::to_string(r);
  return s;
}

/// Routes gated API calls of this process to `m`'s gate. Returns "cupti" on
/// success, otherwise "explicit: <why>" (the caller stays explicitly gated).
inline std::string attach(member& m, bool contexts = true) {
  state& st = the_state();
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.target.load() != nullptr)
    return "explicit: CUPTI gating already serves another krex tenant of this process";
  if (is_capturing_ptr().load() == nullptr) {
    // Without it, no capture check: captured launches are gated like the rest.
    if (void* f = driver_entry("cuStreamIsCapturing", 10000))
      is_capturing_ptr().store(reinterpret_cast<is_capturing_fn>(f));
  }
  CUpti_SubscriberHandle sub = nullptr;
  const CUptiResult r = cuptiSubscribe(&sub, &on_api, nullptr);
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
    return "explicit: CUPTI has another subscriber (a profiler)";
  if (r != CUPTI_SUCCESS) return "explicit: CUPTI unavailable (" + result_name(r) + ")";
  const auto enable = [&](CUpti_CallbackDomain d, int size) {
    for (int id = 1; id < size; ++id) {
      const char* name = nullptr;
      if (cuptiGetCallbackName(d, static_cast<std::uint32_t>(id), &name) != CUPTI_SUCCESS) continue;
      if (gated_api(d, name, contexts)) {
        const CUptiResult e = cuptiEnableCallback(1, sub, d, static_cast<CUpti_CallbackId>(id));
        if (e != CUPTI_SUCCESS) return e;
      }
    }
    return CUPTI_SUCCESS;
  };
  CUptiResult e = enable(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE);
  if (e == CUPTI_SUCCESS) e = enable(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE);
  if (e != CUPTI_SUCCESS) {
    cuptiUnsubscribe(sub);
    return "explicit: CUPTI callbacks could not be enabled (" + result_name(e) + ")";
  }
  st.subscriber = sub;
  st.target.store(&m, std::memory_order_release);
  return "cupti";
}

/// Ends the subscription made for `m` (no-op if it is not `m`'s).
inline void detach(member& m) noexcept {
  state& st = the_state();
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.target.load() != &m) return;
  st.target.store(nullptr, std::memory_order_release);
  // A call whose exit callback never comes would leave its thread's
  // submit_depth raised (later guards on that thread would pass ungated), so
  // let calls in flight (even one parked at the gate) finish first, bounded.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (st.open.load() != 0 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  cuptiUnsubscribe(st.subscriber);
  st.subscriber = nullptr;
}

}  // namespace krex::detail::cupti
