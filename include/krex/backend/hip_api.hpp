// SPDX-License-Identifier: Apache-2.0
#pragma once

// The HIP runtime's primitives under the names the shared GPU code uses
// (backend/gpu_api.hpp lists them): detail::hip_api. Host-compilable: only
// the HIP headers and libamdhip64, no hipcc.

#include <krex/backend/gpu_api.hpp>

#include <hip/hip_runtime_api.h>

#include <cstddef>
#include <functional>

namespace krex::detail {

/// The HIP runtime as the shared GPU code sees it (backend/gpu_api.hpp).
struct hip_api {
  KREX_DETAIL_GPU_RUNTIME(hip)
  using props_t = hipDeviceProp_t;
  static constexpr const char* no_device_hint =
      "check the amdgpu driver, /dev/kfd access (the video/render groups) and "
      "HIP_VISIBLE_DEVICES (rocm-smi)";
  static constexpr bool lower_case_bus_id = true;  // as sysfs names it
  static constexpr const char* context_unnamed = "the HIP runtime names no current context";
  static error_t get_props(props_t* p, int d) noexcept { return hipGetDeviceProperties(p, d); }
  static error_t l2_bytes(int* b, int d) noexcept {
    return hipDeviceGetAttribute(b, hipDeviceAttributeL2CacheSize, d);
  }
  static error_t instantiate(graph_exec_t* x, graph_t g) noexcept {
    return hipGraphInstantiate(x, g, nullptr, nullptr, 0);
  }

  /// The current context, by address (hipCtxGetCurrent). HIP keeps one
  /// context object per device for the process's life, so a hipDeviceReset
  /// does not change it: the measure scratch does not notice a reset
  /// (docs/HIP.md, krex::measure).
  static bool context_id(unsigned long long* id) noexcept {
    hipCtx_t c = nullptr;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    const error_t e = hipCtxGetCurrent(&c);  // deprecated in ROCm 5, still the way to ask
#pragma GCC diagnostic pop
    if (e != hipSuccess || c == nullptr) {
      (void)hipGetLastError();
      return false;
    }
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): an address as a name
    *id = reinterpret_cast<unsigned long long>(c);
    return true;
  }

  /// No clocks-event reasons on HIP (rocm-smi is not read): only the test seam.
  static std::function<bool(unsigned long long&)> reasons_source(int /*d*/) { return {}; }
};

}  // namespace krex::detail
