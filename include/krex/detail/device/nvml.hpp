// SPDX-License-Identifier: Apache-2.0
#pragma once

// NVML, read-only and optional: clocks, power, temperature and the
// clocks-event (throttle) reasons of a GPU, and the processes holding a
// context on it. libnvidia-ml is dlopen'd on first use, so krex has no link
// dependency on it and builds without its header; a node without it reads
// as "not available", never as an error. Nothing here changes a GPU setting.

#include <krex/detail/clocks.hpp>

#include <dlfcn.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace krex {
namespace detail {

class nvml {
 public:
  /// The process's NVML, loaded on first use (nullptr: not available).
  static nvml* get() noexcept {
    static nvml* n = [] {
      auto* x = new nvml;  // never destroyed: NVML stays initialized until exit
      if (!x->load()) {
        delete x;
        return static_cast<nvml*>(nullptr);
      }
      return x;
    }();
    return n;
  }

  /// The clock state of the GPU at PCI address `bus_id` ("0000:19:00.0").
  device_clocks clocks(const std::string& bus_id) const noexcept {
    device_clocks c;
    void* h = handle(bus_id);
    if (h == nullptr) return c;
    unsigned v = 0;
    c.valid = true;
    if (m_clock(h, 1 /*SM*/, &v) == 0) c.sm_mhz = v;
    if (m_clock(h, 2 /*MEM*/, &v) == 0) c.mem_mhz = v;
    if (m_power != nullptr && m_power(h, &v) == 0) c.power_mw = v;
    if (m_temp != nullptr && m_temp(h, 0 /*GPU*/, &v) == 0) c.temp_c = v;
    (void)reasons_of(h, c.reasons);
    return c;
  }

  /// The clocks-event reasons alone (cheaper than clocks()). False: unknown.
  bool reasons(const std::string& bus_id, unsigned long long& r) const noexcept {
    void* h = handle(bus_id);
    r = 0;
    return h != nullptr && reasons_of(h, r);
  }

  /// Pids of the processes holding a compute context on the GPU (MPS
  /// clients included where the driver lists them). False: unknown.
  bool processes(const std::string& bus_id, std::vector<int>& pids) const {
    pids.clear();
    void* h = handle(bus_id);
    if (h == nullptr || m_procs == nullptr) return false;
    for (proc_fn f : {m_procs, m_mps_procs}) {
      if (f == nullptr) continue;
      std::vector<process_info> info(64);
      unsigned n = static_cast<unsigned>(info.size());
      int rc = f(h, &n, info.data());
      if (rc == 7 /*INSUFFICIENT_SIZE*/) {
        info.resize(n + 16);
        n = static_cast<unsigned>(info.size());
        rc = f(h, &n, info.data());
      }
      if (rc != 0) {
        if (f == m_procs) return false;
        continue;
      }
      for (unsigned i = 0; i < n && i < info.size(); ++i) {
        const int pid = static_cast<int>(info[i].pid);
        bool seen = false;
        for (int p : pids) seen = seen || p == pid;
        if (!seen) pids.push_back(pid);
      }
    }
    return true;
  }

 private:
  // nvmlProcessInfo_t as the _v3 queries fill it (NVML 12).
  struct process_info {
    unsigned pid;
    unsigned long long used_memory;
    unsigned gpu_instance;
    unsigned compute_instance;
  };
  using init_fn = int (*)();
  using handle_fn = int (*)(const char*, void**);
  using clock_fn = int (*)(void*, int, unsigned*);
  using power_fn = int (*)(void*, unsigned*);
  using temp_fn = int (*)(void*, int, unsigned*);
  using reasons_fn = int (*)(void*, unsigned long long*);
  using proc_fn = int (*)(void*, unsigned*, process_info*);

  bool load() noexcept {
    void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return false;
    const auto sym = [lib](const char* n) { return ::dlsym(lib, n); };
    auto init = reinterpret_cast<init_fn>(sym("nvmlInit_v2"));
    m_handle = reinterpret_cast<handle_fn>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
    m_clock = reinterpret_cast<clock_fn>(sym("nvmlDeviceGetClockInfo"));
    m_power = reinterpret_cast<power_fn>(sym("nvmlDeviceGetPowerUsage"));
    m_temp = reinterpret_cast<temp_fn>(sym("nvmlDeviceGetTemperature"));
    m_reasons = reinterpret_cast<reasons_fn>(sym("nvmlDeviceGetCurrentClocksEventReasons"));
    if (m_reasons == nullptr)
      m_reasons = reinterpret_cast<reasons_fn>(sym("nvmlDeviceGetCurrentClocksThrottleReasons"));
    m_procs = reinterpret_cast<proc_fn>(sym("nvmlDeviceGetComputeRunningProcesses_v3"));
    m_mps_procs = reinterpret_cast<proc_fn>(sym("nvmlDeviceGetMPSComputeRunningProcesses_v3"));
    if (init == nullptr || m_handle == nullptr || m_clock == nullptr || init() != 0) {
      ::dlclose(lib);
      return false;
    }
    return true;
  }

  void* handle(const std::string& bus_id) const noexcept {
    std::lock_guard<std::mutex> l(m_mu);
    for (const auto& e : m_handles)
      if (e.first == bus_id) return e.second;
    void* h = nullptr;
    if (m_handle(bus_id.c_str(), &h) != 0) h = nullptr;
    try {
      m_handles.emplace_back(bus_id, h);
    } catch (...) {
    }
    return h;
  }

  // The reasons of handle `h` into `r` (0 and false where they cannot be read).
  bool reasons_of(void* h, unsigned long long& r) const noexcept {
    r = 0;
    if (m_reasons != nullptr && m_reasons(h, &r) == 0) return true;
    r = 0;
    return false;
  }

  handle_fn m_handle = nullptr;
  clock_fn m_clock = nullptr;
  power_fn m_power = nullptr;
  temp_fn m_temp = nullptr;
  reasons_fn m_reasons = nullptr;
  proc_fn m_procs = nullptr;
  proc_fn m_mps_procs = nullptr;
  mutable std::mutex m_mu;
  mutable std::vector<std::pair<std::string, void*>> m_handles;
};

}  // namespace detail
}  // namespace krex
