// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <krex/options.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace krex::backend {

/// Device work is host work: a submission runs on the calling thread inside
/// the gate, so when it returns nothing of it is in flight and `sync()` has
/// nothing to wait for. The whole protocol (gate, drain, freeze, pin) runs
/// unchanged, which is how it is tested on machines without a GPU, and
/// CPU-bound "kernels" show the same inflation under co-tenants and the same cure.
///
/// A backend provides: `name`, a constructor from options, `device_count()`,
/// `device_key(ordinal)` (a node-wide identity, so processes that number
/// devices differently agree on whose gate is whose), `device_name(ordinal)`,
/// `local_cpus(ordinal)` (CPUs near the device; empty = no preference),
/// `bind(ordinal)` (called once on the agent thread) and `sync()` (waits for
/// all device work this process submitted; called by the agent only when the
/// tenant submitted something since its last drain; throws krex::error).
class host {
 public:
  static constexpr const char* name = "host";

  explicit host(const options& o) : m_count(o.host_devices()) {}

  int device_count() const noexcept { return m_count; }
  std::uint64_t device_key(int ordinal) const noexcept {
    return 0x686f737400000000ULL | static_cast<std::uint64_t>(ordinal + 1);  // "host" | n
  }
  std::string device_name(int ordinal) const { return detail::cat({"host:", ordinal}); }
  std::vector<int> local_cpus(int /*ordinal*/) const { return {}; }
  void bind(int /*ordinal*/) noexcept {}
  void sync() noexcept {}

 private:
  int m_count;
};

}  // namespace krex::backend
