// SPDX-License-Identifier: Apache-2.0
#pragma once

// What the join and the region ask of a backend, as one interface: the
// tenant and the region are compiled once (krex/impl/, also into a library
// under KREX_SEPARATE_COMPILATION) and reach the device only through this.
// krex::basic_tenant<B> holds a device_ops_for<B> over its backend.
//
// Required of a backend (krex/backend/host.hpp lists them): name,
// device_count, device_key, device_name, local_cpus, bind, sync. Optional,
// called when present (a backend without them gets the fallback named):
//   release()                  inside the leave's passage through the gate
//                              (options::release_on_leave); nothing
//   attach(member&), detach()  automatic gating, once the agent runs and
//                              before the slot is freed; nothing
//   gating_note()              for the region report; "explicit"
//   quiet_probe()              the quiet step's probe; not probed
//   device_processes(pids)     processes holding a context on the device;
//                              not checked
//   clocks()                   clock state at region entry and exit; the
//                              test seam clocks_hook, else invalid

#include <krex/detail/clocks.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace krex::detail {

struct member;

template <class B>
auto backend_release(B& b, int) noexcept -> decltype(b.release(), void()) {
  b.release();
}
template <class B>
void backend_release(B&, long) noexcept {}
template <class B>
auto backend_attach(B& b, member& m, int) -> decltype(b.attach(m), void()) {
  b.attach(m);
}
template <class B>
void backend_attach(B&, member&, long) {}
template <class B>
auto backend_detach(B& b, int) noexcept -> decltype(b.detach(), void()) {
  b.detach();
}
template <class B>
void backend_detach(B&, long) noexcept {}
template <class B>
auto backend_gating_note(const B& b, int) -> decltype(std::string(b.gating_note())) {
  return std::string(b.gating_note());
}
template <class B>
std::string backend_gating_note(const B&, long) {
  return "explicit";
}
template <class B>
auto backend_quiet_probe(B& b, int) -> decltype(b.quiet_probe()) {
  return b.quiet_probe();
}
template <class B>
quiet_sample backend_quiet_probe(B&, long) {
  return {};  // no probe, no reason: the level just lacks "+quiet"
}
template <class B>
auto backend_device_processes(const B& b, std::vector<int>& pids, int)
    -> decltype(b.device_processes(pids)) {
  return b.device_processes(pids);
}
template <class B>
bool backend_device_processes(const B&, std::vector<int>&, long) {
  return false;
}
template <class B>
auto backend_clocks(const B& b, int) -> decltype(b.clocks()) {
  return b.clocks();
}
template <class B>
device_clocks backend_clocks(const B&, long) {
  return clocks_hook != nullptr ? clocks_hook(-1) : device_clocks{};
}

/// A backend as the join and the region see it (see the top of this file).
class device_ops {
 public:
  virtual const char* name() const noexcept = 0;
  virtual int device_count() = 0;
  virtual std::uint64_t device_key(int ordinal) = 0;
  virtual std::string device_name(int ordinal) = 0;
  virtual std::vector<int> local_cpus(int ordinal) = 0;
  virtual void bind(int ordinal) = 0;
  virtual void sync() = 0;
  virtual void release() noexcept = 0;
  virtual void attach(member& m) = 0;
  virtual void detach() noexcept = 0;
  virtual std::string gating_note() const = 0;
  virtual quiet_sample quiet_probe() = 0;
  virtual bool device_processes(std::vector<int>& pids) const = 0;
  virtual device_clocks clocks() const = 0;

 protected:
  device_ops() = default;
  device_ops(const device_ops&) = default;
  device_ops& operator=(const device_ops&) = default;
  ~device_ops() = default;
};

/// device_ops over a backend object `B` (not owned), its optional hooks
/// resolved here, at compile time, where B is known.
template <class B>
class device_ops_for final : public device_ops {
 public:
  explicit device_ops_for(B& b) noexcept : m_b(b) {}
  const char* name() const noexcept override { return B::name; }
  int device_count() override { return m_b.device_count(); }
  std::uint64_t device_key(int ordinal) override { return m_b.device_key(ordinal); }
  std::string device_name(int ordinal) override { return m_b.device_name(ordinal); }
  std::vector<int> local_cpus(int ordinal) override { return m_b.local_cpus(ordinal); }
  void bind(int ordinal) override { m_b.bind(ordinal); }
  void sync() override { m_b.sync(); }
  void release() noexcept override { backend_release(m_b, 0); }
  void attach(member& m) override { backend_attach(m_b, m, 0); }
  void detach() noexcept override { backend_detach(m_b, 0); }
  std::string gating_note() const override { return backend_gating_note(m_b, 0); }
  quiet_sample quiet_probe() override { return backend_quiet_probe(m_b, 0); }
  bool device_processes(std::vector<int>& pids) const override {
    return backend_device_processes(m_b, pids, 0);
  }
  device_clocks clocks() const override { return backend_clocks(m_b, 0); }

 private:
  B& m_b;
};

}  // namespace krex::detail
