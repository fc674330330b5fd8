// SPDX-License-Identifier: Apache-2.0
#pragma once

// Step 1: the submission gate.
//
// Submitter: in_submit.fetch_add(1), then load the gate. If a sibling holds
// it, undo the increment and park on the gate word (bounded; on timeout the
// holder's liveness is re-checked). Holder: raise the gate with a new epoch,
// then wait until every sibling's in_submit is 0. With seq_cst on both sides
// (a Dekker pair: store gate / load in_submit against store in_submit / load
// gate) a submission either completes before the drain looks, or never
// reaches the device.

#include <krex/detail/futex.hpp>
#include <krex/detail/slots.hpp>
#include <krex/detail/submit.hpp>
#include <krex/error.hpp>
#include <krex/submit_guard.hpp>

#include <sys/types.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

namespace krex {
namespace detail {

/// Raises the gate for the region holder `m`. Returns the new (odd) epoch and
/// whether a raised gate of a dead previous holder was taken over.
inline std::pair<std::uint32_t, bool> raise_gate(member& m) noexcept {
  m.dev->holder.store(m.index + 1);
  std::uint32_t g = m.dev->gate.load();
  for (;;) {
    const std::uint32_t next = gate_raised(g) ? g + 2 : g + 1;
    if (m.dev->gate.compare_exchange_weak(g, next)) {
      // Agents are woken by the drain step, and only if some sibling needs its
      // agent (see drain.hpp: proxy_acks).
      return {next, gate_raised(g)};
    }
  }
}

/// Wakes every agent on the device to look at the gate.
inline void ring_agents(member& m) noexcept {
  m.dev->agent_bell.fetch_add(1);
  futex_wake_all(m.dev->agent_bell);
}

/// After lowering the gate (with the region lock still held, so no other
/// holder can raise it): waits, at most `bound_ns`, until every submission
/// that was parked at the gate has passed it. Without this hand-off the next
/// holder, woken at the same moment, usually raises the gate first, and a
/// sibling's device-management call (a module load, an allocation) can stay
/// parked through region after region while regions queue back to back. A
/// passed submission is then waited for by the next holder's gate step.
/// `parked` is a count kept by the siblings' own submit_enter: a dead one's
/// is ignored (its slot is not live) and cleared when it is reaped; a wrong
/// one costs at most `bound_ns`.
/// Returns whether any sibling was parked; then the gate stays lowered for
/// m's handoff_grace more, so that their next calls pass too.
inline bool let_parked_through(member& m, std::uint64_t bound_ns = 10'000'000) noexcept {
  const std::uint64_t deadline = now_ns() + bound_ns;
  bool any = false;
  for (std::uint32_t i = 0; i < max_tenants; ++i) {
    if (i == m.index) continue;
    tenant_slot& s = m.slot_at(i);
    if (s.parked.load() == 0 || s.device.load() != m.device || s.owner.load() <= 0) continue;
    any = true;
    while (s.parked.load() != 0 && now_ns() < deadline) {
      const timespec pause{0, 20'000};
      ::nanosleep(&pause, nullptr);
    }
  }
  const std::uint64_t grace = to_ns(m.opts.handoff_grace());
  if (any && grace > 0) {
    const timespec pause{static_cast<time_t>(grace / 1'000'000'000ULL),
                         static_cast<long>(grace % 1'000'000'000ULL)};
    ::nanosleep(&pause, nullptr);
  }
  return any;
}

/// Lowers the gate raised with `epoch`. False if it was no longer ours (a
/// recoverer lowered it: our lease was taken away).
inline bool lower_gate(member& m, std::uint32_t epoch) noexcept {
  const bool ours = as_safe::lower_gate_at(*m.dev, epoch);
  if (ours) {
    std::uint32_t h = m.index + 1;
    m.dev->holder.compare_exchange_strong(h, 0);
  }
  return ours;
}

/// The gate step's undo. Lowers the gate raised with `epoch` (lower_gate).
/// `lease_ours`: the holder still holds its lease (claim_exit succeeded), so
/// the region lock is still its own and no other holder can raise the gate:
/// the submissions parked at the gate are then let through before the lock
/// moves on (let_parked_through). Otherwise (the lease was taken away) only a
/// gate still at this region's epoch comes down, by CAS, and nothing waits.
/// Returns whether the gate was still ours: false when a recoverer had
/// lowered it (the lease was taken away).
inline bool gate_exit(member& m, std::uint32_t epoch, bool lease_ours) noexcept {
  const bool ours = lower_gate(m, epoch);
  if (ours && lease_ours) let_parked_through(m);
  return ours;
}

/// A sibling as the region holder saw it when the gate rose.
struct sibling {
  std::uint32_t slot;
  std::int32_t pid;  ///< as its slot says: a claim, verified before any signal (freeze.hpp)
  std::uint64_t start_time = 0;  ///< as its slot says (0 while it is still claiming)
  bool acked = false;
  bool gone = false;  ///< left or died during the region's entry
  bool proxied = false;  ///< acked by the holder: it had nothing to drain
  bool submitting = false;  ///< inside a gated call when the gate rose (its call finished first)
};

/// Holder side: the live siblings on the holder's device.
inline std::vector<sibling> snapshot_siblings(member& m) {
  std::vector<sibling> out;
  for (std::uint32_t i = 0; i < max_tenants; ++i) {
    if (i == m.index) continue;
    tenant_slot& s = m.slot_at(i);
    const std::int32_t pid = s.owner.load();
    if (pid <= 0 || s.device.load() != m.device || s.state.load() == slot_leaving) continue;
    // Liveness is checked only for siblings that are slow to drain: reading
    // /proc for every sibling on every region would dominate the region's cost.
    out.push_back(sibling{i, pid, s.start_time.load()});
  }
  return out;
}

/// The slot's owner is no longer the one snapshotted (left, died, or the
/// slot was taken by another process), or it is dead.
inline bool sibling_gone(member& m, const sibling& sb) noexcept {
  tenant_slot& s = m.slot_at(sb.slot);
  if (s.owner.load() != sb.pid) return true;
  if (sb.start_time != 0 && s.start_time.load() != sb.start_time) return true;
  return reap_if_dead(*m.node, sb.slot, m.recovery);
}

/// Holder side, gate step: waits until every sibling's in_submit is 0.
/// Returns false if the deadline passed first (the laggards are left un-acked).
inline bool wait_submissions(member& m, std::vector<sibling>& sibs, std::uint64_t deadline_ns) {
  bool all = true;
  for (sibling& sb : sibs) {
    if (sb.gone) continue;
    if (m.slot_at(sb.slot).in_submit.load() != 0) sb.submitting = true;
    if (wait_in_submit_zero(m.slot_at(sb.slot), deadline_ns)) continue;
    if (sibling_gone(m, sb)) {
      sb.gone = true;
      continue;
    }
    all = false;
  }
  return all;
}

/// What the gate step did: the new epoch, whether it took over a dead
/// holder's raised gate, the siblings it saw, and whether their in-flight
/// submissions all ended (or their owners went) before the deadline.
struct gate_result {
  std::uint32_t epoch = 0;
  bool took_over = false;
  std::vector<sibling> sibs;
  bool quiet = false;
};

/// Step 1, holder side: raises the gate (raise_gate) and moves the device's
/// phase to gated. Cannot fail: the caller owns the raised gate from here
/// on (gate_exit lowers it), then waits with wait_quiet.
inline gate_result gate_enter(member& m) noexcept {
  gate_result g;
  std::tie(g.epoch, g.took_over) = raise_gate(m);
  set_phase(*m.dev, phase_gated);
  return g;
}

/// Step 1, holder side, after gate_enter: snapshots the siblings and waits
/// for their in-flight submissions until `deadline_ns`.
inline void wait_quiet(member& m, gate_result& g, std::uint64_t deadline_ns) {
  g.sibs = snapshot_siblings(m);
  g.quiet = wait_submissions(m, g.sibs, deadline_ns);
}

}  // namespace detail
}  // namespace krex
