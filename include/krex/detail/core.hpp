// SPDX-License-Identifier: Apache-2.0
#pragma once

// The boundary between the façade (krex/tenant.hpp, krex/region.hpp: class
// templates over a backend) and the join and the region themselves
// (krex/impl/tenant_core.hpp, krex/impl/region_core.hpp: compiled once, over
// detail::device_ops). This header declares; header-only builds define the
// functions `inline` when the façade includes krex/impl/, and under
// KREX_SEPARATE_COMPILATION one translation unit compiles them
// (<krex/impl/src.hpp>, or the CMake target krex::compiled).

#include <krex/detail/config.hpp>
#include <krex/error.hpp>
#include <krex/options.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace krex {

struct region_report;

/// Where a tenant's join spent its time (nanoseconds, steady clock), phase by
/// phase, in the order they run. `driver` is the backend's first calls (CUDA:
/// driver initialization and the device's identity; no context is created).
struct join_timings {
  std::uint64_t driver_ns = 0;    ///< device count, key and name (backend)
  std::uint64_t segment_ns = 0;   ///< open or create the node segment, find the device
  std::uint64_t slot_ns = 0;      ///< claim a tenant slot
  std::uint64_t freeze_ns = 0;    ///< open the freeze method, enter the leaf cgroup
  std::uint64_t recover_ns = 0;   ///< recover a stale segment (dead holders, dead tenants)
  std::uint64_t sweep_ns = 0;     ///< remove leaves of crashed runs (skipped while a guardian runs)
  std::uint64_t topology_ns = 0;  ///< split the CPUs, confine this process off reserved cores
  std::uint64_t agent_ns = 0;     ///< start the agent thread
  std::uint64_t gating_ns = 0;    ///< attach automatic gating (CUDA: CUPTI subscription)
  std::uint64_t guardian_ns = 0;  ///< check (or start) the segment's guardian
  std::uint64_t total_ns = 0;     ///< the whole constructor
  bool swept = false;             ///< whether the stale-leaf sweep ran
};

/// Removes the node segment file that `o` names (its segment name, access
/// mode and KREX_SHM_DIR; other KREX_* variables are not applied: pass
/// `o.with_env()` for the segment a tenant constructed from `o` joins).
/// Processes attached keep their mapping and run on; the next tenant creates
/// a fresh segment. For launchers and tests between runs, once their tenants
/// are gone: `krexctl clean` is the careful way, which removes only segments
/// without a live member. Returns true if a file was removed.
KREX_DECL bool remove_segment(const options& o) noexcept;

namespace detail {

#if defined(KREX_SEPARATE_COMPILATION)
/// Defined by krex's compiled part only: a program built with
/// KREX_SEPARATE_COMPILATION that lacks it fails to link naming this.
void link_krex_compiled_or_compile_krex_impl_src_hpp() noexcept;
#endif  // defined(KREX_SEPARATE_COMPILATION)

struct member;
class device_ops;  // krex/detail/device/device_ops.hpp: the façade's side holds it
class tenant_core;
class region_core;

/// Deletes a core (for std::unique_ptr, where the core's type is incomplete).
struct core_deleter {
  KREX_DECL void operator()(tenant_core* t) const noexcept;  ///< leaves first
  KREX_DECL void operator()(region_core* r) const noexcept;  ///< ends the region first
};

// The tenant: krex/impl/tenant_core.hpp.
KREX_DECL tenant_core* join_node(const options& resolved, device_ops& ops);
KREX_DECL void leave_node(tenant_core& t) noexcept;
KREX_DECL bool core_joined(const tenant_core& t) noexcept;
KREX_DECL member& core_member(tenant_core& t) noexcept;
/// The options it joined with (KREX_* applied), and its tenant slot.
KREX_DECL const options& core_options(const tenant_core& t) noexcept;
KREX_DECL std::uint32_t core_slot(const tenant_core& t) noexcept;
/// Its slot's counters, read now: drains acked, synchronizations, gated calls.
struct slot_counts {
  std::uint64_t drains = 0;
  std::uint64_t syncs = 0;
  std::uint64_t submits = 0;
};
KREX_DECL slot_counts core_slot_counts(const tenant_core& t) noexcept;
KREX_DECL void check_core_owner(const tenant_core& t, step s);
KREX_DECL const std::string& core_segment_name(const tenant_core& t) noexcept;
KREX_DECL freeze_method core_freeze(const tenant_core& t) noexcept;
KREX_DECL std::string core_cgroup_root(const tenant_core& t);
KREX_DECL const join_timings& core_join_report(const tenant_core& t) noexcept;
KREX_DECL const std::vector<int>& core_reserved_cpus(const tenant_core& t) noexcept;
KREX_DECL const std::vector<std::string>& core_protection_notes(const tenant_core& t) noexcept;
/// Whether this process holds a joined tenant (one not yet destroyed).
KREX_DECL bool process_holds_tenant() noexcept;

// The region: krex/impl/region_core.hpp.
KREX_DECL region_core* enter_region(tenant_core& t, device_ops& ops);
KREX_DECL void exit_region(region_core& r);
KREX_DECL const region_report& region_report_of(const region_core& r) noexcept;

}  // namespace detail
}  // namespace krex
