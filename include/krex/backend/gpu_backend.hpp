// SPDX-License-Identifier: Apache-2.0
#pragma once

// What the CUDA and HIP backends share, written once over a vendor API `V`
// (backend/gpu_api.hpp) and a gating policy `Gating` (the vendor's callback
// subscription: detail::cupti::hooks, detail::hip_callbacks::hooks).
// backend/cuda.hpp and backend/hip.hpp derive from it and add what only
// they have (device identity; for CUDA the context release, the quiet probe
// and NVML's clocks and processes). backend/host.hpp lists what a backend
// provides.
//
// bind() only records the ordinal, and sync() -- called only when the
// tenant submitted since its last drain -- makes the device current on the
// agent thread and synchronizes it: the agent never creates a context the
// process did not have.

#include <krex/backend/gpu_api.hpp>
#include <krex/detail/cpu/topology.hpp>
#include <krex/detail/slots/slots.hpp>
#include <krex/options.hpp>

#include <string>
#include <vector>

namespace krex::detail::gpu {

template <class V, class Gating>
class backend_base {
 public:
  explicit backend_base(const options& o)
      : m_mode(o.gate_mode()), m_ordinal(o.device()), m_contexts(o.gate_contexts()) {}
  ~backend_base() { detach(); }
  backend_base(const backend_base&) = delete;
  backend_base& operator=(const backend_base&) = delete;

  /// Visible devices; 0 when there is no device or no driver.
  int device_count() const {
    int n = 0;
    const typename V::error_t e = V::device_count(&n);
    if (V::no_device(e)) {
      (void)V::clear_error();
      return 0;
    }
    gpu_call<V>(e, "GetDeviceCount");
    return n;
  }

  /// "NVIDIA H200 [0000:19:00.0]", "AMD Instinct MI210 [0000:c1:00.0]".
  std::string device_name(int ordinal) const {
    return std::string(props(ordinal).name) + " [" + pci_bus_id(ordinal) + "]";
  }

  /// PCI address as "dddd:bb:dd.f" (as the runtime writes it; HIP's in
  /// lower case, as sysfs names it).
  std::string pci_bus_id(int ordinal) const {
    char id[32] = {};
    gpu_call<V>(V::pci_bus_id(id, sizeof id, ordinal), "DeviceGetPCIBusId");
    std::string s = id;
    if constexpr (V::lower_case_bus_id)
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

  /// Waits for all work this process put on the device. Makes the device
  /// current on the calling (agent) thread first, which is why the agent
  /// calls it only after the process submitted (the context exists then).
  void sync() const {
    gpu_call<V>(V::set_device(m_ordinal), "SetDevice (drain)");
    gpu_call<V>(V::device_synchronize(), "DeviceSynchronize (drain)");
  }

  /// Tenant hook: subscribes the vendor's API callbacks for automatic gating
  /// unless gating is explicit.
  void attach(member& m) {
    if (m_mode == gating::explicit_) {
      m_note = "explicit";
      return;
    }
    m_note = Gating::attach(m, m_contexts);
    if (m_note.rfind(Gating::note_automatic, 0) == 0) m_member = &m;
  }

  /// Tenant hook: ends the subscription (if this tenant made it).
  void detach() noexcept {
    if (m_member != nullptr) Gating::detach(*m_member);
    m_member = nullptr;
  }

  /// Gating::note_automatic ("cupti", "hip-api-callbacks"), "explicit", or
  /// "explicit: <why automatic gating is off>".
  std::string gating_note() const { return m_note; }

  /// Whether the API callbacks gate this tenant's calls.
  bool automatic() const noexcept { return m_member != nullptr; }

  /// Properties of `ordinal` (throws krex::error).
  static typename V::props_t props(int ordinal) {
    typename V::props_t p{};
    gpu_call<V>(V::get_props(&p, ordinal), "GetDeviceProperties");
    return p;
  }

 protected:
  int ordinal() const noexcept { return m_ordinal; }

 private:
  gating m_mode;
  int m_ordinal = 0;
  bool m_contexts = true;
  member* m_member = nullptr;
  std::string m_note = "explicit";
};

}  // namespace krex::detail::gpu
