// SPDX-License-Identifier: Apache-2.0
#pragma once

// Claiming, checking and reaping tenant slots, the `member` view a tenant's
// protocol code works through, and the `recoverer` the protocol steps call
// when a dead or expired holder is in their way.

#include <krex/detail/as_safe.hpp>
#include <krex/detail/layout.hpp>
#include <krex/detail/proc.hpp>
#include <krex/detail/slots/futex.hpp>
#include <krex/error.hpp>
#include <krex/options.hpp>

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <string>

namespace krex::detail {

/// How a protocol step gets a dead region holder (or one past its lease) out
/// of its way without calling crash recovery itself: a parked submitter
/// (detail/slots/submit.hpp) or a lock waiter (detail/steps/lock.hpp) that finds the device held by
/// a holder that cannot release it calls its member's recoverer. It recovers
/// device `device` if its lease holder is dead or past its lease, or (no
/// lease) its raised gate's holder is dead: thaw the device's tenants (by
/// `c`), lower the gate, reap the holder, move the lock on. Returns true if
/// this call recovered it; false if there was nothing to recover or another
/// recoverer is at work. Async-signal-safe.
///
/// The dependency is inverted: the tenant installs
/// detail::recover_dead_holder (guardian_recover.hpp) at join; the steps
/// never include crash recovery. Null: the steps only wait, and the guardian
/// recovers.
using recoverer = bool (*)(node_state& n, std::uint32_t device, const recovery_config& c) noexcept;

/// What the protocol code of one tenant needs: its node, device and slot.
struct member {
  node_state* node = nullptr;
  device_state* dev = nullptr;
  tenant_slot* slot = nullptr;
  std::uint32_t index = 0;   ///< slot index
  std::uint32_t device = 0;  ///< device index in the segment
  options opts;
  /// How this tenant thaws siblings when it recovers a dead holder (its own
  /// freeze method and root). Null: recover without thawing.
  const recovery_config* recovery = nullptr;
  /// Called by the gate and the lock on a dead or expired holder (see
  /// recoverer). Null: left to the guardian.
  recoverer recover = nullptr;

  tenant_slot& slot_at(std::uint32_t i) const noexcept { return node->tenants[i]; }
};

/// The recovery configuration of `m` (none: recover without thawing).
inline const recovery_config& recovery_of(const member& m) noexcept {
  static const recovery_config none{};
  return m.recovery != nullptr ? *m.recovery : none;
}

/// Test seam: called with each phase a region holder enters (phase_* in
/// layout.hpp), after it is stored. Fault-injection tests use it to hold a
/// holder in a phase and kill it there. Never set in production.
inline void (*phase_hook)(std::uint32_t phase) noexcept = nullptr;

/// Records the phase a region holder entered (what recoverers and krexctl read).
inline void set_phase(device_state& dev, std::uint32_t phase) noexcept {
  dev.phase.store(phase);
  if (phase_hook != nullptr) phase_hook(phase);
}

/// A tenant of another pid namespace (its pid means nothing here) counts as
/// alive while its agent thread's heartbeat (every 100 ms) is younger than
/// this, or while it is frozen (a frozen agent cannot beat; recovery thaws
/// it and clears the mark).
inline constexpr std::uint64_t foreign_heartbeat_stale_ns = 30'000'000'000ULL;

/// How slot `s`'s owner is judged: by its pid where it joined from this
/// process's pid namespace, by its heartbeat otherwise (`foreign`).
struct slot_life {
  life l;
  bool foreign = false;        ///< judged by heartbeat: another pid namespace
  std::uint64_t beat_age_ns = 0;  ///< foreign: age of its last heartbeat
};

/// Judges the owner of slot `s` (see probe_life and foreign_heartbeat_stale_ns).
/// Async-signal-safe.
inline slot_life probe_slot(const tenant_slot& s) noexcept {
  slot_life out;
  const std::int32_t pid = s.owner.load();
  if (pid <= 0) {
    out.l = {liveness::dead, 0};
    return out;
  }
  const std::uint64_t theirs = s.pidns.load();
  if (theirs != 0 && theirs != as_safe::pid_namespace()) {
    out.foreign = true;
    const std::uint64_t beat = s.heartbeat_ns.load();
    const std::uint64_t now = now_ns();
    out.beat_age_ns = now > beat ? now - beat : 0;
    const bool fresh = out.beat_age_ns < foreign_heartbeat_stale_ns || s.frozen.load() != 0;
    out.l = {fresh ? liveness::alive : liveness::dead, 0};
    return out;
  }
  out.l = probe_life(pid, s.start_time.load());
  return out;
}

/// A slot that belongs to a live process, or one krex cannot prove dead
/// (probe_slot). Claiming slots (start time not yet written) count as alive
/// while their pid exists.
inline bool slot_alive(const tenant_slot& s) noexcept {
  return probe_slot(s).l.verdict != liveness::dead;
}


/// Clears the protocol words a slot's holder leaves behind, for a reaper
/// (reap_slot) or the next claimer (claim_slot), which owns the slot by its
/// CAS on the owner and has set a state no other process acts on.
inline void clear_holder_words(tenant_slot& s) noexcept {
  s.in_submit.store(0);
  s.parked.store(0);
  s.dirty.store(0);
  s.ticket.store(no_ticket);
  s.frozen.store(0);
}

/// Frees the slot of a dead owner: its in_submit is discarded, its ticket
/// dropped, and (given the reaper's recovery config) its leaf cgroup thawed
/// and removed while the slot is still reserved. Only one reaper wins (CAS on
/// the owner). Returns true if this call reaped it. Async-signal-safe.
KREX_DETAIL_COLD inline bool reap_slot(node_state& n, std::uint32_t i, std::int32_t dead_pid,
                      const recovery_config* c = nullptr) noexcept {
  if (i >= max_tenants || dead_pid <= 0) return false;
  tenant_slot& s = n.tenants[i];
  // Reserved by the reaper (owner = -reaper pid): a reaper that dies here
  // leaves a reservation release_stale_reservation() undoes.
  const std::int32_t me = -static_cast<std::int32_t>(::getpid());
  std::int32_t expected = dead_pid;
  if (!s.owner.compare_exchange_strong(expected, me)) return false;
  s.state.store(slot_reaping);
  clear_holder_words(s);
  s.start_time.store(0);
  // A stop recorded for the dead owner cannot be continued any more (the
  // pid is not verifiable); its stopped group is continued by the kernel
  // once the leader's death orphans it.
  s.stop_target.store(0);
  s.domain_hash.store(0);
  // The leaf goes unless a region is in progress on the slot's device: its
  // holder may be about to freeze it (then the guardian's sweep removes it).
  const std::uint32_t d = s.device.load();
  if (c != nullptr && d < max_devices && n.devices[d].lease_slot.load() == 0)
    as_safe::remove_leaf(*c, i);
  s.state.store(slot_free);
  s.owner.store(0);
  // Anyone waiting for this slot's in_submit or ack re-checks.
  as_safe::futex_wake_all(s.in_submit);
  if (d < max_devices) as_safe::futex_wake_all(n.devices[d].acks);
  return true;
}

/// A slot reserved (owner < 0) by a reaper or sweeper that died meanwhile is
/// freed. Returns true if it did that.
inline bool release_stale_reservation(node_state& n, std::uint32_t i) noexcept {
  if (i >= max_tenants) return false;
  tenant_slot& s = n.tenants[i];
  std::int32_t r = s.owner.load();
  if (r >= 0 || r == INT32_MIN || as_safe::alive(-static_cast<std::int64_t>(r), 0)) return false;
  return s.owner.compare_exchange_strong(r, 0);
}

/// Reaps slot i if its owner is dead (see reap_slot). Returns true if the
/// slot is (now) not a live tenant.
inline bool reap_if_dead(node_state& n, std::uint32_t i,
                         const recovery_config* c = nullptr) noexcept {
  if (i >= max_tenants) return true;
  tenant_slot& s = n.tenants[i];
  const std::int32_t pid = s.owner.load();
  if (pid == 0) return true;
  if (pid < 0) {  // being reaped (or its reaper died: free it)
    release_stale_reservation(n, i);
    return true;
  }
  if (slot_alive(s)) return false;
  if (reap_slot(n, i, pid, c)) n.reaped.fetch_add(1, std::memory_order_relaxed);
  return true;
}

/// FNV-1a of the freeze method and the cgroup root: what every tenant of a
/// segment must agree on (the holder freezes siblings by its own root).
inline std::uint64_t freeze_domain_hash(freeze_method m, const std::string& root) {
  return fnv1a(cat({to_string(m), ":", root}));
}

/// What a recoverer that freezes by method `m` under the krex cgroup root
/// `root` thaws by: the one way a tenant and krexctl build it. The rest
/// (`home`, `identity`) is the caller's. Throws krex::error(step::freeze)
/// for a root longer than the config holds.
KREX_DETAIL_COLD inline recovery_config make_recovery_config(freeze_method m, const std::string& root) {
  recovery_config c;
  c.method = m;
  c.domain_hash = freeze_domain_hash(m, root);
  if (!as_safe::copy_text(c.root, sizeof c.root, root.c_str()))
    throw error(step::freeze, cat({"the krex cgroup root path is too long: ", root}), ENAMETOOLONG,
                "choose a shorter KREX_CGROUP_ROOT");
  return c;
}

inline std::string load_text(const std::atomic<std::uint64_t> (&in)[32]) {
  std::string s;
  for (const auto& word : in) {
    const std::uint64_t v = word.load(std::memory_order_relaxed);
    for (std::size_t b = 0; b < 8; ++b) {
      const char c = static_cast<char>((v >> (8 * b)) & 0xff);
      if (c == '\0') return s;
      s += (c >= 32 && c < 127) ? c : '?';  // display only
    }
  }
  return s;
}

}  // namespace krex::detail
