// SPDX-License-Identifier: Apache-2.0
#pragma once

// The CUDA backend (runtime API; host-compilable: no .cu needed to include it).
//
//   krex::basic_tenant<krex::backend::cuda> t{krex::options{}.device(0)};
//
// (krex::tenant is this backend when krex is built with KREX_WITH_CUDA.)
// Devices are identified node-wide by their UUID, so processes with different
// CUDA_VISIBLE_DEVICES agree on whose gate is whose. The agent never creates a
// CUDA context the process did not have: bind() only records the ordinal, and
// sync() -- called only when the tenant submitted since its last drain --
// makes the device current on the agent thread and synchronizes it.
// Automatic gating subscribes CUPTI in attach() (see cuda_cupti.hpp).

#include <krex/backend/cuda_cupti.hpp>
#include <krex/backend/cuda_quiet.hpp>
#include <krex/detail/nvml.hpp>
#include <krex/detail/hash.hpp>
#include <krex/detail/slots.hpp>
#include <krex/detail/topology.hpp>
#include <krex/error.hpp>
#include <krex/options.hpp>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

namespace krex {
namespace detail {
/// Throws krex::error(step::backend) naming the CUDA error and `what` failed.
inline void cuda_check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so later calls are not blamed
  throw error(step::backend,
              std::string(what) + " failed: " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e),
              static_cast<int>(e),
              e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver
                  ? "check the driver and CUDA_VISIBLE_DEVICES (nvidia-smi)"
                  : "");
}
/// Whether device `ordinal`'s primary context is active in this process: 1
/// yes, 0 no, -1 unknown (through the runtime's entry-point lookup: krex
/// links only cudart and CUPTI, not libcuda). Creates nothing.
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
}  // namespace detail

namespace backend {

/// CUDA runtime backend: UUID device identity, lazy per-device sync, CUPTI gating.
class cuda {
 public:
  static constexpr const char* name = "cuda";

  explicit cuda(const options& o)
      : m_mode(o.gate_mode()), m_ordinal(o.device()), m_contexts(o.gate_contexts()) {}
  ~cuda() { detach(); }
  cuda(const cuda&) = delete;
  cuda& operator=(const cuda&) = delete;

  /// Visible devices; 0 when there is no device or no driver.
  int device_count() const {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver) {
      cudaGetLastError();
      return 0;
    }
    detail::cuda_check(e, "cudaGetDeviceCount");
    return n;
  }

  /// FNV-1a of the device UUID (never 0): the same GPU has the same key in
  /// every process, whatever CUDA_VISIBLE_DEVICES says.
  std::uint64_t device_key(int ordinal) const {
    const cudaDeviceProp p = props(ordinal);
    return detail::fnv1a(p.uuid.bytes, sizeof p.uuid.bytes);
  }

  /// "NVIDIA H200 [0000:19:00.0]".
  std::string device_name(int ordinal) const {
    return std::string(props(ordinal).name) + " [" + pci_bus_id(ordinal) + "]";
  }

  /// PCI address as "dddd:bb:dd.f".
  std::string pci_bus_id(int ordinal) const {
    char id[32] = {};
    detail::cuda_check(cudaDeviceGetPCIBusId(id, sizeof id, ordinal), "cudaDeviceGetPCIBusId");
    return id;
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
    detail::cuda_check(cudaSetDevice(m_ordinal), "cudaSetDevice (drain)");
    detail::cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (drain)");
  }

  /// Tenant hook (options::release_on_leave, called inside the gate when the
  /// tenant leaves): resets the device if this process has its primary
  /// context, so the context's teardown (memory, page tables, channels) runs
  /// now, gated, instead of at process exit after the tenant has left. A
  /// process with no context is left without one (cudaSetDevice would create it).
  void release() noexcept {
    if (detail::primary_context_active(m_ordinal) != 1) return;
    // (The current device stays this one: setting another back could create its context.)
    if (cudaSetDevice(m_ordinal) == cudaSuccess) cudaDeviceReset();
    cudaGetLastError();
  }

  /// Tenant hook: subscribes CUPTI for automatic gating unless gating is explicit.
  void attach(detail::member& m) {
    if (m_mode == gating::explicit_) {
      m_note = "explicit";
      return;
    }
    m_note = detail::cupti::attach(m, m_contexts);
    if (m_note == "cupti" && !m_contexts) {
      m_member = &m;
      m_note = "cupti (contexts ungated: KREX_GATE_CONTEXTS=0)";
      return;
    }
    if (m_note == "cupti") m_member = &m;
  }

  /// Tenant hook: ends the CUPTI subscription (if this tenant made it).
  void detach() noexcept {
    if (m_member != nullptr) detail::cupti::detach(*m_member);
    m_member = nullptr;
  }

  /// "cupti", "explicit", or "explicit: <why automatic gating is off>".
  std::string gating_note() const { return m_note; }

  /// The quiet step's probe (quiet.hpp, cuda_quiet.hpp) on this tenant's
  /// device. Not run (why_not says so) while this process has no context
  /// there: probing would create one.
  detail::quiet_sample quiet_probe() {
    if (detail::primary_context_active(m_ordinal) != 1) {
      detail::quiet_sample q;
      q.why_not = "this process has no CUDA context on the device yet (nothing submitted)";
      return q;
    }
    return detail::cuda_quiet_probe::get().run(m_ordinal);
  }

  /// The device's clock state (NVML; invalid where NVML is absent).
  device_clocks clocks() const {
    if (detail::clocks_hook != nullptr) return detail::clocks_hook(m_ordinal);
    detail::nvml* n = detail::nvml::get();
    if (n == nullptr) return {};
    return n->clocks(bus_id());
  }

  /// Pids of every process with a compute context on the device (NVML).
  /// False: not known (no NVML, or the query failed).
  bool device_processes(std::vector<int>& pids) const {
    detail::nvml* n = detail::nvml::get();
    return n != nullptr && n->processes(bus_id(), pids);
  }

  /// Whether CUPTI gates this tenant's API calls.
  bool automatic() const noexcept { return m_member != nullptr; }

  /// Properties of `ordinal` (throws krex::error).
  static cudaDeviceProp props(int ordinal) {
    cudaDeviceProp p{};
    detail::cuda_check(cudaGetDeviceProperties(&p, ordinal), "cudaGetDeviceProperties");
    return p;
  }

 private:
  // The PCI address of the tenant's device, looked up once.
  const std::string& bus_id() const {
    if (m_bus_id.empty()) m_bus_id = pci_bus_id(m_ordinal);
    return m_bus_id;
  }

  gating m_mode;
  int m_ordinal = 0;
  mutable std::string m_bus_id;
  bool m_contexts = true;
  detail::member* m_member = nullptr;
  std::string m_note = "explicit";
};

}  // namespace backend
}  // namespace krex
