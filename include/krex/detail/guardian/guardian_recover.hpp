// SPDX-License-Identifier: Apache-2.0
#pragma once

// Recovering a device whose region holder died or outlived its lease, reaping
// dead tenants and clearing stale leaves. Run by the guardian, by krexctl, by
// a joining tenant (recover_node) and, through the recoverer a tenant
// installs in its member (recover_dead_holder, see slots.hpp), by a parked
// submitter or lock waiter that finds a dead holder in its way. The protocol
// steps never include this header. Everything here is async-signal-safe (see
// as_safe.hpp) and settles races with one CAS.
//
// Order matters: siblings are thawed before the gate is lowered, and the gate
// is lowered before the region lock moves on, so the next holder can never
// freeze a sibling that a late thaw of this recovery then lets run.

#include <krex/detail/as_safe.hpp>
#include <krex/detail/layout.hpp>
#include <krex/detail/slots/handoff.hpp>
#include <krex/detail/slots/slots.hpp>

#include <unistd.h>

#include <cstdint>

namespace krex::detail {

/// Test seam: called by recover_device once it holds the claim and took its
/// snapshot, before its first write. Tests stop a recoverer there. Never set
/// in production.
inline void (*recovery_hook)() noexcept = nullptr;

/// What recover_device did. `holder_alive`: recovered from a holder alive
/// within its lease (or a raised gate's live holder): by `force`, or by
/// taking over a forced recovery that stalled.
enum class recovery { nothing, holder_dead, lease_expired, in_progress, holder_alive };

/// A recoverer's claim word younger than this whose pid exists counts as
/// alive even before its start time is recorded (the claim is written first).
inline constexpr std::uint64_t recovery_claim_grace_ns = 1'000'000'000ULL;

/// A recovery takes milliseconds (a thaw per tenant of the device). A claim
/// older than this whose claimant is stopped (state T or t: a debugger, an
/// operator's SIGSTOP, a Ctrl-Z'd krexctl) is taken over: the device must
/// not stay gated and its siblings frozen for as long as someone forgets a
/// stopped process. A claimant that runs, however slowly, keeps its claim.
inline constexpr std::uint64_t recovery_claim_deadline_ns = 5'000'000'000ULL;

/// This process's recover_claim word: claim ms clock (32 bits) << 32 | pid.
inline std::uint64_t my_recover_claim(std::uint64_t now) noexcept {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(now / 1'000'000ULL)) << 32) |
         static_cast<std::uint32_t>(::getpid());
}

inline std::int32_t claim_pid(std::uint64_t c) noexcept {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(c));
}

/// How long ago claim word `c` was taken (ms clock, wraps after 49 days).
/// A claim taken after `now` was read counts as age 0, not as 49 days.
inline std::uint64_t claim_age_ns(std::uint64_t c, std::uint64_t now) noexcept {
  const auto d = static_cast<std::int32_t>(static_cast<std::uint32_t>(now / 1'000'000ULL) -
                                           static_cast<std::uint32_t>(c >> 32));
  return d > 0 ? static_cast<std::uint64_t>(d) * 1'000'000ULL : 0;
}

/// True when the recoverer that took claim word `c` still runs (pid + start
/// time). Only a dead claimant is taken over without `force`: a slow or
/// stopped one may still act, and its late steps must then find a claim that
/// moved (they check it).
inline bool claimant_alive(const device_state& dev, std::uint64_t c, std::uint64_t now) noexcept {
  const std::int32_t pid = claim_pid(c);
  if (pid <= 0) return false;
  if (as_safe::alive(pid, dev.recover_start_time.load())) return true;
  return claim_age_ns(c, now) < recovery_claim_grace_ns && as_safe::alive(pid, 0);
}

/// True when the claimant of claim word `c` (alive) is stopped and its claim
/// older than recovery_claim_deadline_ns: it is taken over. When it resumes,
/// its next step finds the claim moved and stops (still_recovering); the one
/// step it may already be inside of (a thaw of one slot, begun before it was
/// stopped) is a window the takeover cannot close.
inline bool claimant_stalled(const device_state& dev, std::uint64_t c, std::uint64_t now) noexcept {
  if (claim_age_ns(c, now) < recovery_claim_deadline_ns) return false;
  const proc_stat st = read_proc_stat(claim_pid(c));
  const std::uint64_t started = dev.recover_start_time.load();
  return st.exists && (st.state == 'T' || st.state == 't') &&
         (started == 0 || st.start_time == started);
}

/// True while the recovery claimed with `mine` is still this recoverer's:
/// checked immediately before each of its writes that a newer holder could
/// own (thawing a slot), so that a recoverer stalled and taken over stops.
inline bool still_recovering(const device_state& dev, std::uint64_t mine,
                             std::uint32_t lease) noexcept {
  return dev.recover_claim.load() == mine && dev.lease_slot.load() == lease;
}

/// Thaws every tenant of device `d` (slot bounded, device index checked),
/// clearing their `frozen` flags. Returns the number of thaw failures.
/// `mine`/`lease` (0: unchecked): the recovery claim and lease word this
/// thaw belongs to, re-checked before each slot; once they moved the thaw
/// stops (the device was handed on: its new holder owns the siblings).
inline int thaw_device(node_state& n, std::uint32_t d, const recovery_config& c,
                       std::uint64_t mine = 0, std::uint32_t lease = 0) noexcept {
  int failures = 0;
  device_state& dev = n.devices[d < max_devices ? d : 0];
  for (std::uint32_t i = 0; i < max_tenants; ++i) {
    tenant_slot& s = n.tenants[i];
    if (s.device.load() != d) continue;
    const std::int32_t pid = s.owner.load();
    if (pid == 0 && s.frozen.load() == 0 && s.stop_target.load() == 0) continue;
    if (mine != 0 && !still_recovering(dev, mine, lease)) return failures;
    if (as_safe::thaw_slot(c, i, s) != 0) ++failures;
    s.frozen.store(0);
  }
  return failures;
}

/// Lowers gate `g` (as snapshotted at the claim) of device `dev`: one CAS, so
/// a gate that moved on meanwhile (a new holder raised it) is left alone, and
/// clears the gate holder `h` by CAS. Wakes parked submitters and agents.
inline void lower_gate_for_recovery(device_state& dev, std::uint32_t g, std::uint32_t h) noexcept {
  as_safe::lower_gate_at(dev, g);
  if (h != 0) dev.holder.compare_exchange_strong(h, 0);
  dev.agent_bell.fetch_add(1);
  as_safe::futex_wake_all(dev.agent_bell);
}

/// Takes device `dev`'s recovery claim (recover_claim: claim time | pid),
/// taking over a dead claimant's, a stopped one's past its deadline
/// (claimant_stalled), or, with `force`, a live one's. Returns the claim
/// word, 0 if another recoverer holds it.
inline std::uint64_t claim_recovery(device_state& dev, bool force) noexcept {
  const std::uint64_t now = as_safe::now_ns();
  std::uint64_t held = dev.recover_claim.load();
  if (held != 0 && !force && claimant_alive(dev, held, now) && !claimant_stalled(dev, held, now))
    return 0;
  const std::uint64_t mine = my_recover_claim(now);
  if (!dev.recover_claim.compare_exchange_strong(held, mine)) return 0;
  dev.recover_start_time.store(read_proc_stat(::getpid()).start_time);
  return mine;
}

/// True only on positive evidence that device `dev`'s lease holder (slot `h`,
/// 1-based) is gone: its pid is dead (probe_life), or, for a holder that
/// joined from another pid namespace (whose pid means nothing here), its slot
/// was left or its heartbeat went stale (probe_slot). A holder krex cannot
/// see is alive; its lease bounds it.
inline bool lease_holder_dead(node_state& n, const device_state& dev, std::uint32_t h) noexcept {
  const std::int32_t pid = dev.lease_pid.load();
  if (h != 0 && h <= max_tenants) {
    const tenant_slot& hs = n.tenants[h - 1];
    const std::uint64_t theirs = hs.pidns.load();
    if (theirs != 0 && theirs != as_safe::pid_namespace()) {
      if (hs.owner.load() != pid) return true;  // its slot was left (or reaped)
      return probe_slot(hs).l.verdict == liveness::dead;
    }
  }
  return !as_safe::alive(pid, dev.lease_start_time.load());
}

inline void release_recovery(device_state& dev, std::uint64_t mine) noexcept {
  dev.recover_claim.compare_exchange_strong(mine, 0);
}

/// Recovers device `d` if its lease holder is dead or alive past its lease
/// deadline, in any phase (an entering holder finishes within its drain and
/// freeze deadlines, which options keep below the lease; an exiting one
/// within microseconds). `force`: recover a live holder too, and take over a
/// live recoverer (krexctl recover --force).
///
/// The recoverer first takes the device's recovery claim (pid + start time,
/// taken over from a dead claimant, a stopped one past its deadline, or any
/// one when forced), then the lease
/// (lease_slot CAS to `| lease_recovering`). It snapshots the gate epoch, the
/// gate holder and the ticket at the claim; every later step is one CAS from
/// those values, and the claim is re-checked before each slot it thaws. A
/// recoverer that stalled and was taken over therefore fails harmlessly when
/// it resumes: it never thaws, lowers or releases what the next holder owns.
/// Order: thaw, lower the gate, reap a dead holder, release the lease, move
/// the lock, so the next holder can never freeze a sibling this thaw then lets run.
KREX_DETAIL_COLD inline recovery recover_device(node_state& n, std::uint32_t d, const recovery_config& c,
                               bool force = false) noexcept {
  if (d >= max_devices) return recovery::nothing;
  device_state& dev = n.devices[d];
  std::uint32_t ls = dev.lease_slot.load();
  const std::uint64_t now = as_safe::now_ns();
  if (ls == 0) {
    // A raised gate with no lease: left by a crashed run, a corrupt segment,
    // or a holder that lost its lease. Lowered only when its recorded holder
    // is not alive.
    const std::uint32_t g = dev.gate.load();
    if ((g & 1U) == 0) return recovery::nothing;
    const std::uint32_t h = dev.holder.load();
    const bool live = h != 0 && h <= max_tenants && slot_alive(n.tenants[h - 1]);
    if (!force && live) return recovery::nothing;
    const std::uint64_t mine = claim_recovery(dev, force);
    if (mine == 0) return recovery::in_progress;
    if (dev.lease_slot.load() != 0 || dev.gate.load() != g) {
      release_recovery(dev, mine);
      return recovery::in_progress;
    }
    thaw_device(n, d, c, mine, 0);
    if (still_recovering(dev, mine, 0)) lower_gate_for_recovery(dev, g, h);
    dev.recoveries.fetch_add(1, std::memory_order_relaxed);
    release_recovery(dev, mine);
    return live ? recovery::holder_alive : recovery::holder_dead;
  }
  const std::uint32_t h = ls & lease_slot_mask;
  const auto judge = [&](bool& dead, bool& expired) {
    dead = lease_holder_dead(n, dev, h);
    const std::uint64_t deadline = dev.lease_deadline_ns.load();
    expired = !dead && deadline != 0 && now > deadline;
  };
  bool dead = false;
  bool expired = false;
  std::uint64_t mine = 0;
  if ((ls & lease_recovering) != 0) {
    // Another recoverer is at work: taken over only if it died, or is stopped
    // past its deadline (or forced).
    mine = claim_recovery(dev, force);
    if (mine == 0 || dev.lease_slot.load() != ls) {
      if (mine != 0) release_recovery(dev, mine);
      return recovery::in_progress;
    }
    judge(dead, expired);
  } else {
    judge(dead, expired);
    if (!dead && !expired && !force) return recovery::nothing;
    mine = claim_recovery(dev, force);
    if (mine == 0) return recovery::in_progress;
    const std::uint32_t plain = ls;
    if (!dev.lease_slot.compare_exchange_strong(ls, h | lease_recovering)) {
      release_recovery(dev, mine);
      return ls == 0 || (ls & lease_recovering) != 0 || ls != plain ? recovery::in_progress
                                                                   : recovery::nothing;
    }
  }
  const std::uint32_t lease = h | lease_recovering;
  // Snapshot at the claim: the gate the holder raised (or not yet), its
  // holder word and the ticket the lock moves past.
  const std::uint32_t g = dev.gate.load();
  const std::uint32_t gh = dev.holder.load();
  const std::uint32_t t = dev.lease_ticket.load();
  if (recovery_hook != nullptr) recovery_hook();
  // 1. Thaw (every tenant of the device: the holder may have died halfway
  //    through freezing, before it marked who it froze).
  thaw_device(n, d, c, mine, lease);
  if (!still_recovering(dev, mine, lease)) return recovery::in_progress;
  // 2. Lower the gate with a new epoch (CAS from the snapshot).
  lower_gate_for_recovery(dev, g, gh == h ? gh : 0);
  // 3. Reap a dead holder (its in_submit discarded, its leaf removed).
  if (dead && h != 0 && h <= max_tenants) {
    tenant_slot& hs = n.tenants[h - 1];
    const std::int32_t hp = hs.owner.load();
    if (hp > 0 && !slot_alive(hs) && reap_slot(n, h - 1, hp, &c)) n.reaped.fetch_add(1);
  }
  // 4. Release the lease, then move the region lock past the holder's
  //    ticket: the next holder publishes its own lease only once it is served.
  if (!still_recovering(dev, mine, lease)) return recovery::in_progress;
  dev.phase.store(phase_idle);
  dev.recoveries.fetch_add(1, std::memory_order_relaxed);
  if (expired) dev.lease_expiries.fetch_add(1, std::memory_order_relaxed);
  std::uint32_t expected = lease;
  if (dev.lease_slot.compare_exchange_strong(expected, 0)) serve_next(dev, t);
  release_recovery(dev, mine);
  return expired ? recovery::lease_expired : dead ? recovery::holder_dead : recovery::holder_alive;
}

/// recover_device as a detail::recoverer (slots.hpp): what a tenant installs
/// in its member, so that its parked submitters and lock waiters get a dead
/// or expired holder out of their way, and what the guardian and krexctl
/// hand to advance_queue. True if this call recovered device `d`.
KREX_DETAIL_COLD inline bool recover_dead_holder(node_state& n, std::uint32_t d, const recovery_config& c) noexcept {
  const recovery r = recover_device(n, d, c);
  return r == recovery::holder_dead || r == recovery::lease_expired ||
         r == recovery::holder_alive;
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
KREX_DETAIL_COLD inline std::uint32_t clean_stale_leaves(node_state& n, const recovery_config& c,
                                        std::uint32_t self) noexcept {
  if (!freeze_table_of(c.method).cgroup()) return 0;
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
KREX_DETAIL_COLD inline void recover_node(node_state& n, const recovery_config& c) noexcept {
  for (std::uint32_t d = 0; d < max_devices; ++d)
    if (n.devices[d].key.load() != 0 || n.devices[d].lease_slot.load() != 0 ||
        (n.devices[d].gate.load() & 1U) != 0)
      recover_device(n, d, c);
  reap_dead_tenants(n, c);
}

}  // namespace krex::detail
