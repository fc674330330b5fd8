// SPDX-License-Identifier: Apache-2.0
#pragma once

// The HIP backend (AMD GPUs; runtime API, host-compilable: no hipcc needed to
// include it, only the HIP headers and libamdhip64).
//
//   krex::basic_tenant<krex::backend::hip> t{krex::options{}.device(0)};
//
// (krex::tenant is this backend when krex is built with KREX_WITH_HIP.)
// What it shares with the CUDA backend is backend/gpu_backend.hpp over the
// HIP runtime's primitives (backend/hip_api.hpp). Here: devices are
// identified node-wide by their UUID (by their PCI address where the runtime
// reports no UUID), so processes with different HIP_VISIBLE_DEVICES /
// ROCR_VISIBLE_DEVICES agree on whose gate is whose; automatic gating goes
// through the HIP runtime's API callbacks where the runtime has them (see
// hip_callbacks.hpp).

#include <krex/backend/gpu_backend.hpp>
#include <krex/backend/hip_api.hpp>
#include <krex/backend/hip_callbacks.hpp>
#include <krex/detail/layout.hpp>

#include <hip/hip_runtime_api.h>

#include <cstdint>

namespace krex {
namespace detail {
/// Throws krex::error(step::backend) naming the HIP error and `what` failed.
inline void hip_check(hipError_t e, const char* what) { gpu_check<hip_api>(e, what); }
}  // namespace detail

namespace backend {

/// HIP runtime backend: UUID (or PCI) device identity, lazy per-device sync,
/// gating through the HIP API callbacks where the runtime has them.
class hip : public detail::gpu::backend_base<detail::hip_api, detail::hip_callbacks::hooks> {
 public:
  static constexpr const char* name = "hip";

  using backend_base::backend_base;

  /// FNV-1a of the device UUID (never 0): the same GPU has the same key in
  /// every process, whatever HIP_VISIBLE_DEVICES says. A runtime or device
  /// that reports no UUID (all zero bytes) is keyed by its PCI address, which
  /// is as unique on one node.
  std::uint64_t device_key(int ordinal) const {
    hipDevice_t dev = 0;
    detail::hip_check(hipDeviceGet(&dev, ordinal), "hipDeviceGet");
    hipUUID u{};
    const hipError_t e = hipDeviceGetUuid(&u, dev);
    bool zero = true;
    if (e == hipSuccess) {
      for (char c : u.bytes) zero = zero && c == 0;
    } else {
      (void)hipGetLastError();  // older runtimes: not supported; use the PCI address
    }
    if (!zero) return detail::fnv1a(u.bytes, sizeof u.bytes);
    return detail::fnv1a("pci:" + pci_bus_id(ordinal));
  }
};

}  // namespace backend
}  // namespace krex
