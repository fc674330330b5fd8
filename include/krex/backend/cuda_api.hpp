// SPDX-License-Identifier: Apache-2.0
#pragma once

// The CUDA runtime's primitives under the names the shared GPU code uses
// (backend/gpu_api.hpp lists them): detail::cuda_api. Host-compilable.
// Also the driver entry points krex reaches through the runtime's lookup
// (krex links cudart and CUPTI, not libcuda).

#include <krex/backend/gpu_api.hpp>
#include <krex/detail/device/nvml.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <string>
#include <utility>

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

/// Whether device `ordinal`'s primary context is active in this process: 1
/// yes, 0 no, -1 unknown (through the runtime's entry-point lookup). Creates nothing.
inline int primary_context_active(int ordinal) noexcept {
  using get_fn = CUresult (*)(CUdevice*, int);
  using state_fn = CUresult (*)(CUdevice, unsigned*, int*);
  void* get = driver_entry("cuDeviceGet", 2000);
  void* state = get != nullptr ? driver_entry("cuDevicePrimaryCtxGetState", 7000) : nullptr;
  if (state == nullptr) return -1;
  CUdevice dev = 0;
  unsigned flags = 0;
  int active = 0;
  if (reinterpret_cast<get_fn>(get)(&dev, ordinal) != CUDA_SUCCESS ||
      reinterpret_cast<state_fn>(state)(dev, &flags, &active) != CUDA_SUCCESS)
    return -1;
  return active != 0 ? 1 : 0;
}

/// The CUDA runtime as the shared GPU code sees it (backend/gpu_api.hpp).
struct cuda_api {
  KREX_DETAIL_GPU_RUNTIME(cuda)
  using props_t = cudaDeviceProp;
  static constexpr const char* no_device_hint =
      "check the driver and CUDA_VISIBLE_DEVICES (nvidia-smi)";
  static constexpr bool lower_case_bus_id = false;
  static constexpr const char* context_unnamed =
      "the CUDA context could not be named (driver older than 12.0)";
  static error_t get_props(props_t* p, int d) noexcept { return cudaGetDeviceProperties(p, d); }
  static error_t l2_bytes(int* b, int d) noexcept {
    return cudaDeviceGetAttribute(b, cudaDevAttrL2CacheSize, d);
  }
  static error_t instantiate(graph_exec_t* x, graph_t g) noexcept {
    return cudaGraphInstantiate(x, g, 0);
  }

  /// The current context's unique id (cuCtxGetId).
  static bool context_id(unsigned long long* id) noexcept { return current_context_id(id); }

  /// NVML's clocks-event reasons of device `d` (by its PCI address), or empty.
  static std::function<bool(unsigned long long&)> reasons_source(int d) {
    nvml* n = nvml::get();
    char id[32] = {};
    if (n == nullptr || cudaDeviceGetPCIBusId(id, sizeof id, d) != cudaSuccess) {
      cudaGetLastError();
      return {};
    }
    return [n, bus = std::string(id)](unsigned long long& r) { return n->reasons(bus, r); };
  }
};

}  // namespace krex::detail
