// SPDX-License-Identifier: Apache-2.0
#pragma once

// The HIP backend (AMD GPUs; runtime API, host-compilable: no hipcc needed to
// include it, only the HIP headers and libamdhip64).
//
//   krex::basic_tenant<krex::backend::hip> t{krex::options{}.device(0)};
//
// (krex::tenant is this backend when krex is built with KREX_WITH_HIP.)
// Mirrors the CUDA backend: devices are identified node-wide by their UUID
// (by their PCI address where the runtime reports no UUID), so processes with
// different HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES agree on whose gate is
// whose; bind() only records the ordinal, and sync() -- called only when the
// tenant submitted since its last drain -- makes the device current on the
// agent thread and synchronizes it. Automatic gating goes through the HIP
// runtime's API callbacks where the runtime has them (see hip_callbacks.hpp).

#include <krex/backend/hip_callbacks.hpp>
#include <krex/detail/hash.hpp>
#include <krex/detail/slots.hpp>
#include <krex/detail/topology.hpp>
#include <krex/error.hpp>
#include <krex/options.hpp>

#include <hip/hip_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

namespace krex {
namespace detail {
/// Whether `e` says there is no usable device (as opposed to a failing one).
inline bool hip_no_device(hipError_t e) noexcept {
  return e == hipErrorNoDevice || e == hipErrorInsufficientDriver;
}

/// Throws krex::error(step::backend) naming the HIP error and `what` failed.
inline void hip_check(hipError_t e, const char* what) {
  if (e == hipSuccess) return;
  (void)hipGetLastError();  // clear a non-sticky error so later calls are not blamed
  throw error(step::backend,
              std::string(what) + " failed: " + hipGetErrorName(e) + ": " + hipGetErrorString(e),
              static_cast<int>(e),
              hip_no_device(e) ? "check the amdgpu driver, /dev/kfd access (the video/render "
                                 "groups) and HIP_VISIBLE_DEVICES (rocm-smi)"
                               : "");
}
}  // namespace detail

namespace backend {

/// HIP runtime backend: UUID (or PCI) device identity, lazy per-device sync,
/// gating through the HIP API callbacks where the runtime has them.
class hip {
 public:
  static constexpr const char* name = "hip";

  explicit hip(const options& o) : m_mode(o.gate_mode()) {}
  ~hip() { detach(); }
  hip(const hip&) = delete;
  hip& operator=(const hip&) = delete;

  /// Visible devices; 0 when there is no device or no driver (hipErrorNoDevice).
  int device_count() const {
    int n = 0;
    const hipError_t e = hipGetDeviceCount(&n);
    if (detail::hip_no_device(e)) {
      (void)hipGetLastError();
      return 0;
    }
    detail::hip_check(e, "hipGetDeviceCount");
    return n;
  }

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

  /// "AMD Instinct MI210 [0000:c1:00.0]".
  std::string device_name(int ordinal) const {
    return std::string(props(ordinal).name) + " [" + pci_bus_id(ordinal) + "]";
  }

  /// PCI address as "dddd:bb:dd.f" (lower case, as sysfs names it).
  std::string pci_bus_id(int ordinal) const {
    char id[32] = {};
    detail::hip_check(hipDeviceGetPCIBusId(id, sizeof id, ordinal), "hipDeviceGetPCIBusId");
    std::string s = id;
    for (char& c : s)
      if (c >= 'A' && c <= 'F') c = static_cast<char>(c - 'A' + 'a');
    return s;
  }

  /// CPUs local to the device (sysfs local_cpulist of its PCI function).
  std::vector<int> local_cpus(int ordinal) const {
    return detail::pci_local_cpus(pci_bus_id(ordinal));
  }

  /// Agent thread start: records the device, creates nothing.
  void bind(int ordinal) noexcept { m_ordinal = ordinal; }

  /// Waits for all work this process put on the device: hipSetDevice +
  /// hipDeviceSynchronize on the calling (agent) thread, which is why the
  /// agent calls it only after the process submitted.
  void sync() const {
    detail::hip_check(hipSetDevice(m_ordinal), "hipSetDevice (drain)");
    detail::hip_check(hipDeviceSynchronize(), "hipDeviceSynchronize (drain)");
  }

  /// Tenant hook: registers the HIP API callbacks for automatic gating unless
  /// gating is explicit (or the runtime has no callbacks krex can use).
  void attach(detail::member& m) {
    if (m_mode == gating::explicit_) {
      m_note = "explicit";
      return;
    }
    m_note = detail::hip_callbacks::attach(m);
    if (m_note == detail::hip_callbacks::note_automatic) m_member = &m;
  }

  /// Tenant hook: removes the callbacks (if this tenant registered them).
  void detach() noexcept {
    if (m_member != nullptr) detail::hip_callbacks::detach(*m_member);
    m_member = nullptr;
  }

  /// "hip-api-callbacks", "explicit", or "explicit: <why automatic gating is off>".
  std::string gating_note() const { return m_note; }

  /// Whether the HIP API callbacks gate this tenant's API calls.
  bool automatic() const noexcept { return m_member != nullptr; }

  /// Properties of `ordinal` (throws krex::error).
  static hipDeviceProp_t props(int ordinal) {
    hipDeviceProp_t p{};
    detail::hip_check(hipGetDeviceProperties(&p, ordinal), "hipGetDeviceProperties");
    return p;
  }

 private:
  gating m_mode;
  int m_ordinal = 0;
  detail::member* m_member = nullptr;
  std::string m_note = "explicit";
};

}  // namespace backend
}  // namespace krex
