// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::basic_tenant: the façade of the join (krex/impl/tenant_core.hpp,
// compiled once over detail::device_ops; header-only unless
// KREX_SEPARATE_COMPILATION, see detail/core.hpp).

#include <krex/backend/default.hpp>
#include <krex/detail/config.hpp>
#include <krex/detail/core.hpp>
#include <krex/detail/device/device_ops.hpp>
#include <krex/error.hpp>
#include <krex/options.hpp>
#include <krex/submit_guard.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace krex {
namespace detail {
struct tenant_access;
}  // namespace detail

template <class>
class basic_region;

/// One process's membership of the node for one device: a slot in the node
/// segment and an agent thread that drains this process's device work when a
/// sibling starts a region. Usable from any thread of its process; neither
/// copyable nor movable (guards and regions refer to it).
///
/// Joining throws krex::error: bad options or KREX_* values (step::options),
/// a device out of range, a segment that cannot be opened or has another
/// layout (step::segment), no free slot (step::join).
template <class Backend>
class basic_tenant {
 public:
  using backend_type = Backend;

  explicit basic_tenant(const options& o = options{})
      : basic_tenant(o.with_env(), resolved_tag{}) {}

  basic_tenant(const basic_tenant&) = delete;
  basic_tenant& operator=(const basic_tenant&) = delete;

  /// Leaves the node: stops the agent, frees the slot. Idempotent. Guards
  /// taken after leave() pass ungated; regions and submit() throw.
  ///
  /// In a forked child, the copy of the parent's tenant touches nothing
  /// shared: leave() and the destructor do nothing, guards pass ungated on a
  /// private gate, and regions and submit() throw. The membership stays the
  /// parent's; a child that wants one constructs its own tenant.
  void leave() noexcept { detail::leave_node(*m_core); }

  /// True while this object is a member of the node (false after leave(),
  /// and in a forked child).
  bool joined() const noexcept { return detail::core_joined(*m_core); }

  /// Runs `fn` inside a submit_guard: parks while a sibling holds a region.
  /// Throws krex::error(step::gate) after leave() and in a forked child.
  template <class F>
  decltype(auto) submit(F&& fn) {
    detail::check_core_owner(*m_core, step::gate);
    if (!joined())
      throw error(step::gate, "submit() on a tenant that has left the node", 0,
                  "construct a new krex::tenant to submit again");
    basic_submit_guard<basic_tenant> g{*this};
    return std::forward<F>(fn)();
  }

  /// The device ordinal (as the backend numbers it) this tenant joined for.
  int device() const noexcept { return detail::core_options(*m_core).device(); }
  /// This tenant's slot in the node segment.
  std::uint32_t slot() const noexcept { return detail::core_slot(*m_core); }
  /// The options in force (code settings with KREX_* overrides applied).
  const options& opts() const noexcept { return detail::core_options(*m_core); }
  Backend& backend() noexcept { return m_backend; }
  /// Full name of the node segment (in /dev/shm).
  const std::string& segment_name() const noexcept { return detail::core_segment_name(*m_core); }
  /// Drains this tenant's agent performed, and how many of them touched the backend.
  std::uint64_t drains() const noexcept { return detail::core_slot_counts(*m_core).drains; }
  std::uint64_t syncs() const noexcept { return detail::core_slot_counts(*m_core).syncs; }
  /// Submissions that passed the gate.
  std::uint64_t submits() const noexcept { return detail::core_slot_counts(*m_core).submits; }

  /// The freeze method in use (never `automatic`) and the krex cgroup root ("" if none).
  freeze_method freeze() const noexcept { return detail::core_freeze(*m_core); }
  std::string cgroup_root() const { return detail::core_cgroup_root(*m_core); }
  /// How this tenant's submissions are gated: "explicit", or what the backend
  /// reports for automatic gating (e.g. "cupti", or why it fell back).
  std::string gating_note() const { return m_ops.gating_note(); }
  /// Where joining spent its time, phase by phase.
  const join_timings& join_report() const noexcept { return detail::core_join_report(*m_core); }
  /// This device's measuring cores (empty when pinning is off).
  const std::vector<int>& reserved_cpus() const noexcept {
    return detail::core_reserved_cpus(*m_core);
  }
  /// Why this tenant's regions protect less than krex can at best, one line
  /// each, decided at join: `auto` fell back to a weaker freeze method (and
  /// why), freezing, pinning or confinement turned off by an option. Every
  /// region copies them into region_report::notes.
  const std::vector<std::string>& protection_notes() const noexcept {
    return detail::core_protection_notes(*m_core);
  }

 private:
  // Not API: the protocol's own accessors, for regions and guards (friends)
  // and detail::tenant_access (tests that inspect the shared state).
  template <class>
  friend class basic_region;
  template <class>
  friend class basic_submit_guard;
  friend struct detail::tenant_access;

  /// The shared-state view of guards and regions.
  detail::member& detail_member() noexcept { return *m_member; }

  struct resolved_tag {};
  basic_tenant(const options& o, resolved_tag)
      : m_backend(o), m_ops(m_backend), m_core(detail::join_node(o, m_ops)),
        m_member(&detail::core_member(*m_core)) {
#if defined(KREX_SEPARATE_COMPILATION)
    // Names what is missing when the compiled part is not linked.
    detail::link_krex_compiled_or_compile_krex_impl_src_hpp();
#endif  // defined(KREX_SEPARATE_COMPILATION)
  }

  // Destroyed in reverse: the core leaves before the backend goes.
  Backend m_backend;
  detail::device_ops_for<Backend> m_ops;
  std::unique_ptr<detail::tenant_core, detail::core_deleter> m_core;
  detail::member* m_member;  // in *m_core
};

namespace detail {
/// Not API: the shared state of a tenant, for tests that look at its slot
/// and device words (`krex::detail::member_of(t).slot->...`).
struct tenant_access {
  template <class B>
  static member& of(basic_tenant<B>& t) noexcept {
    return t.detail_member();
  }
};
template <class B>
member& member_of(basic_tenant<B>& t) noexcept {
  return tenant_access::of(t);
}
}  // namespace detail

}  // namespace krex

#if !defined(KREX_SEPARATE_COMPILATION)
#include <krex/impl/tenant_core.hpp>
#endif  // !defined(KREX_SEPARATE_COMPILATION)
