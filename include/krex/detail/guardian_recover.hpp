// SPDX-License-Identifier: Apache-2.0
#pragma once

// Recovering a device whose region holder died or outlived its lease, reaping
// dead tenants and clearing stale leaves. Run by the guardian and by any
// tenant that finds a dead holder in its way; everything here is
// async-signal-safe (see guardian_sys.hpp) and settles races with one CAS.
//
// Order matters: siblings are thawed before the gate is lowered, and the gate
// is lowered before the region lock moves on, so the next holder can never
// freeze a sibling that a late thaw of this recovery then lets run.

#include <krex/detail/guardian_sys.hpp>
#include <krex/detail/layout.hpp>
#include <krex/detail/slots.hpp>

#include <unistd.h>

#include <cstdint>

namespace krex::detail {

/// Test seam: called with each phase a region holder enters (phase_* in
/// layout.hpp), after it is stored. Fault-injection tests use it to hold a
/// holder in a phase and kill it there. Never set in production.
inline void (*phase_hook)(std::uint32_t phase) noexcept = nullptr;

inline void set_phase(device_state& dev, std::uint32_t phase) noexcept {
  dev.phase.store(phase);
  if (phase_hook != nullptr) phase_hook(phase);
}

/// The recovery configuration of `m` (none: recover without thawing).
inline const recovery_config& recovery_of(const member& m) noexcept {
  static const recovery_config none{};
  return m.recovery != nullptr ? *m.recovery : none;
}

/// What recover_device did.
enum class recovery { nothing, holder_dead, lease_expired, in_progress };

/// A recoverer that marked lease_recovering and then died is taken over after this.
inline constexpr std::uint64_t recovery_takeover_ns = 1'000'000'000ULL;

/// Thaws every tenant of device `d` (slot bounded, device index checked),
/// clearing their `frozen` flags. Returns the number of thaw failures.
inline int thaw_device(node_state& n, std::uint32_t d, const recovery_config& c) noexcept {
  int failures = 0;
  for (std::uint32_t i = 0; i < max_tenants; ++i) {
    tenant_slot& s = n.tenants[i];
    if (s.device.load() != d) continue;
    const std::int32_t pid = s.owner.load();
    if (pid == 0 && s.frozen.load() == 0 && s.stop_target.load() == 0) continue;
    if (as_safe::thaw_slot(c, i, s) != 0) ++failures;
    s.frozen.store(0);
  }
  return failures;
}

/// Lowers a raised gate of device `dev` with a new epoch (CAS: a gate that
/// moved on meanwhile is left alone) and wakes parked submitters and agents.
inline void lower_gate_for_recovery(device_state& dev, std::uint32_t g) noexcept {
  while ((g & 1U) != 0 && !dev.gate.compare_exchange_weak(g, g + 1)) {
  }
  dev.holder.store(0);
  as_safe::futex_wake_all(dev.gate);
  dev.agent_bell.fetch_add(1);
  as_safe::futex_wake_all(dev.agent_bell);
}

/// Recovers device `d` if its lease holder is dead, or alive past its lease
/// deadline with its region fully entered (a holder still entering or
/// already exiting finishes by itself). `force`: recover a live holder too
/// (krexctl recover). Thaws the device's tenants by `c`, lowers the gate,
/// moves the region lock past the holder's ticket and reaps a dead holder.
inline recovery recover_device(node_state& n, std::uint32_t d, const recovery_config& c,
                               bool force = false) noexcept {
  if (d >= max_devices) return recovery::nothing;
  device_state& dev = n.devices[d];
  std::uint32_t ls = dev.lease_slot.load();
  const std::uint64_t now = as_safe::now_ns();
  if (ls == 0) {
    // A raised gate with no lease: left by a crashed run or a corrupt
    // segment. Lower it only when its recorded holder is not alive.
    const std::uint32_t g = dev.gate.load();
    if ((g & 1U) == 0) return recovery::nothing;
    const std::uint32_t h = dev.holder.load();
    if (!force && h != 0 && h <= max_tenants && slot_alive(n.tenants[h - 1]))
      return recovery::nothing;
    if (dev.lease_slot.load() != 0) return recovery::in_progress;
    thaw_device(n, d, c);
    lower_gate_for_recovery(dev, g);
    dev.recoveries.fetch_add(1, std::memory_order_relaxed);
    dev.last_recovery_ns.store(now, std::memory_order_relaxed);
    return recovery::holder_dead;
  }
  const std::uint32_t h = ls & lease_slot_mask;
  bool dead = false;
  bool expired = false;
  if ((ls & lease_recovering) != 0) {
    // Another recoverer is at work; take over only if it stalled (died).
    std::uint64_t claim = dev.recover_claim_ns.load();
    if (now - claim < recovery_takeover_ns ||
        !dev.recover_claim_ns.compare_exchange_strong(claim, now))
      return recovery::in_progress;
    dead = true;
  } else {
    const std::int32_t pid = dev.lease_pid.load();
    dead = !as_safe::alive(pid, dev.lease_start_time.load());
    const std::uint64_t deadline = dev.lease_deadline_ns.load();
    const std::uint32_t ph = dev.phase.load();
    expired = !dead && (ls & lease_exiting) == 0 && deadline != 0 && now > deadline &&
              (ph == phase_frozen || ph == phase_pinned || ph == phase_body);
    if (!dead && !expired && !force) return recovery::nothing;
    dev.recover_claim_ns.store(now);
    if (!dev.lease_slot.compare_exchange_strong(ls, h | lease_recovering))
      return recovery::in_progress;
  }
  // 1. Thaw (every tenant of the device: the holder may have died halfway
  //    through freezing, before it marked who it froze).
  thaw_device(n, d, c);
  // 2. Lower the gate with a new epoch.
  lower_gate_for_recovery(dev, dev.gate.load());
  // 3. Reap a dead holder (its in_submit discarded, its leaf removed).
  if (dead && h != 0 && h <= max_tenants) {
    tenant_slot& hs = n.tenants[h - 1];
    const std::int32_t hp = hs.owner.load();
    if (hp > 0 && !slot_alive(hs) && reap_slot(n, h - 1, hp, &c)) n.reaped.fetch_add(1);
  }
  // 4. Clear the lease, then move the region lock past the holder's ticket:
  //    the next holder publishes its own lease only once it is served.
  std::uint32_t t = dev.lease_ticket.load();
  dev.phase.store(phase_idle);
  dev.lease_deadline_ns.store(0);
  dev.lease_acquired_ns.store(0);
  dev.lease_start_time.store(0);
  dev.lease_pid.store(0);
  dev.recoveries.fetch_add(1, std::memory_order_relaxed);
  if (expired) dev.lease_expiries.fetch_add(1, std::memory_order_relaxed);
  dev.last_recovery_ns.store(as_safe::now_ns(), std::memory_order_relaxed);
  std::uint32_t mine = h | lease_recovering;
  dev.lease_slot.compare_exchange_strong(mine, 0);
  dev.now_serving.compare_exchange_strong(t, t + 1);
  as_safe::futex_wake_all(dev.now_serving);
  return expired ? recovery::lease_expired : recovery::holder_dead;
}

/// Reaps every tenant slot whose owner is dead (not a current lease holder:
/// recover_device handles those, thaw first). Returns how many it freed.
inline std::uint32_t reap_dead_tenants(node_state& n, const recovery_config& c) noexcept {
  std::uint32_t count = 0;
  for (std::uint32_t i = 0; i < max_tenants; ++i) {
    tenant_slot& s = n.tenants[i];
    const std::int32_t pid = s.owner.load();
    if (pid < 0) release_stale_reservation(n, i);
    if (pid <= 0 || slot_alive(s)) continue;
    bool leased = false;
    for (std::uint32_t d = 0; d < max_devices && !leased; ++d)
      leased = (n.devices[d].lease_slot.load() & lease_slot_mask) == i + 1;
    if (leased) continue;
    if (reap_slot(n, i, pid, &c)) {
      n.reaped.fetch_add(1);
      ++count;
    }
  }
  return count;
}

/// Removes leaves left by crashed runs: the leaf of every free slot (other
/// than `self`) is thawed and removed while the slot is reserved for the
/// cleaner (owner = -pid), so no joiner can be creating it at the same time.
/// A leaf with live processes stays (rmdir fails). Returns leaves removed.
inline std::uint32_t clean_stale_leaves(node_state& n, const recovery_config& c,
                                        std::uint32_t self) noexcept {
  if (c.method != freeze_method::cgroup_v2 && c.method != freeze_method::cgroup_v1) return 0;
  const std::int32_t me = -static_cast<std::int32_t>(::getpid());
  std::uint32_t count = 0;
  for (std::uint32_t i = 0; i < max_tenants; ++i) {
    if (i == self) continue;
    tenant_slot& s = n.tenants[i];
    // Not while a region runs on the slot's last device (see reap_slot).
    const std::uint32_t d = s.device.load();
    if (d < max_devices && n.devices[d].lease_slot.load() != 0) continue;
    std::int32_t expected = 0;
    if (!s.owner.compare_exchange_strong(expected, me)) continue;
    const as_safe::path_buf p = as_safe::leaf_path(c, i, "");
    if (p.ok() && ::access(p.c_str(), F_OK) == 0 && as_safe::remove_leaf(c, i) == 0) ++count;
    s.owner.store(0);
  }
  return count;
}

/// Recovers every device with a dead or expired holder and reaps dead
/// tenants: what a joining tenant and the guardian do to a stale segment.
inline void recover_node(node_state& n, const recovery_config& c) noexcept {
  for (std::uint32_t d = 0; d < max_devices; ++d)
    if (n.devices[d].key.load() != 0 || n.devices[d].lease_slot.load() != 0 ||
        (n.devices[d].gate.load() & 1U) != 0)
      recover_device(n, d, c);
  reap_dead_tenants(n, c);
}

}  // namespace krex::detail
