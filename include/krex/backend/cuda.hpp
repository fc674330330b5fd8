// SPDX-License-Identifier: Apache-2.0
#pragma once

// The CUDA backend (runtime API; host-compilable: no .cu needed to include it).
//
//   krex::basic_tenant<krex::backend::cuda> t{krex::options{}.device(0)};
//
// (krex::tenant is this backend when krex is built with KREX_WITH_CUDA.)
// What it shares with the HIP backend is backend/gpu_backend.hpp over the
// CUDA runtime's primitives (backend/cuda_api.hpp). Here: devices are
// identified node-wide by their UUID, so processes with different
// CUDA_VISIBLE_DEVICES agree on whose gate is whose; automatic gating
// subscribes CUPTI in attach() (see cuda_cupti.hpp); and what only CUDA has:
// the context release on leave, the quiet probe (gpu_quiet.hpp) and NVML's
// clocks and device processes.

#include <krex/backend/cuda_api.hpp>
#include <krex/backend/cuda_cupti.hpp>
#include <krex/backend/gpu_backend.hpp>
#include <krex/backend/gpu_quiet.hpp>
#include <krex/detail/clocks.hpp>
#include <krex/detail/device/nvml.hpp>
#include <krex/detail/layout.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

namespace krex {
namespace detail {
/// Throws krex::error(step::backend) naming the CUDA error and `what` failed.
inline void cuda_check(cudaError_t e, const char* what) { gpu_check<cuda_api>(e, what); }
}  // namespace detail

namespace backend {

/// CUDA runtime backend: UUID device identity, lazy per-device sync, CUPTI gating.
class cuda : public detail::gpu::backend_base<detail::cuda_api, detail::cupti::hooks> {
 public:
  static constexpr const char* name = "cuda";

  using backend_base::backend_base;

  /// FNV-1a of the device UUID (never 0): the same GPU has the same key in
  /// every process, whatever CUDA_VISIBLE_DEVICES says.
  std::uint64_t device_key(int ordinal) const {
    const cudaDeviceProp p = props(ordinal);
    return detail::fnv1a(p.uuid.bytes, sizeof p.uuid.bytes);
  }

  /// Tenant hook (options::release_on_leave, called inside the gate when the
  /// tenant leaves): resets the device if this process has its primary
  /// context, so the context's teardown (memory, page tables, channels) runs
  /// now, gated, instead of at process exit after the tenant has left. A
  /// process with no context is left without one (cudaSetDevice would create it).
  void release() noexcept {
    if (detail::primary_context_active(ordinal()) != 1) return;
    // (The current device stays this one: setting another back could create its context.)
    if (cudaSetDevice(ordinal()) == cudaSuccess) cudaDeviceReset();
    cudaGetLastError();
  }

  /// The quiet step's probe (detail/steps/quiet.hpp, gpu_quiet.hpp) on this tenant's
  /// device. Not run (why_not says so) while this process has no context
  /// there: probing would create one.
  detail::quiet_sample quiet_probe() {
    if (detail::primary_context_active(ordinal()) != 1) {
      detail::quiet_sample q;
      q.why_not = "this process has no CUDA context on the device yet (nothing submitted)";
      return q;
    }
    return detail::gpu::quiet_probe<detail::cuda_api>::get().run(ordinal());
  }

  /// The device's clock state (NVML; invalid where NVML is absent).
  device_clocks clocks() const {
    if (detail::clocks_hook != nullptr) return detail::clocks_hook(ordinal());
    detail::nvml* n = detail::nvml::get();
    if (n == nullptr) return {};
    return n->clocks(bus_id());
  }

  /// Loads NVML now (dlopen + nvmlInit, ~17 ms on the H200), which clocks()
  /// and device_processes() read at a region's entry: krex::prepare_measure
  /// calls it, so that the first region does not load it with the device held.
  static void preload_nvml() { (void)detail::nvml::get(); }
  /// Pids of every process with a compute context on the device (NVML).
  /// False: not known (no NVML, or the query failed).
  bool device_processes(std::vector<int>& pids) const {
    detail::nvml* n = detail::nvml::get();
    return n != nullptr && n->processes(bus_id(), pids);
  }

 private:
  // The PCI address of the tenant's device, looked up once.
  const std::string& bus_id() const {
    if (m_bus_id.empty()) m_bus_id = pci_bus_id(ordinal());
    return m_bus_id;
  }

  mutable std::string m_bus_id;
};

}  // namespace backend
}  // namespace krex
