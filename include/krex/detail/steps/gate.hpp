// SPDX-License-Identifier: Apache-2.0
#pragma once

// Step 1, the gate, holder side (the submitters' side, submit_enter and
// submit_exit, is detail/slots/submit.hpp).
//
// Submitter: in_submit.fetch_add(1), then load the gate. If a sibling holds
// it, undo the increment and park on the gate word (bounded; on timeout the
// holder's liveness is re-checked). Holder: raise the gate with a new epoch,
// then wait until every sibling's in_submit is 0. With seq_cst on both sides
// (a Dekker pair: store gate / load in_submit against store in_submit / load
// gate) a submission either completes before the drain looks, or never
// reaches the device.
//
// State: the epoch, whether a dead holder's gate was taken over, the siblings
// seen. Shared words: the device's gate and holder. Report: the epoch, gated,
// took_over_gate, siblings_seen. Undo (gate_step's destructor): lower the
// gate, then let the submissions parked at it through (gate_exit); when a
// recoverer took the lease away, only a gate still at this region's epoch
// comes down.

#include <krex/detail/slots/sibling.hpp>
#include <krex/detail/slots/slots.hpp>
#include <krex/detail/slots/submit.hpp>
#include <krex/detail/steps/context.hpp>

#include <sys/types.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

namespace krex::detail {

/// Raises the gate for the region holder `m`. Returns the new (odd) epoch and
/// whether a raised gate of a dead previous holder was taken over.
inline std::pair<std::uint32_t, bool> raise_gate(member& m) noexcept {
  m.dev->holder.store(m.index + 1);
  std::uint32_t g = m.dev->gate.load();
  for (;;) {
    const std::uint32_t next = gate_raised(g) ? g + 2 : g + 1;
    if (m.dev->gate.compare_exchange_weak(g, next)) {
      // Agents are woken by the drain step, and only if some sibling needs its
      // agent (see steps/drain.hpp: proxy_acks).
      return {next, gate_raised(g)};
    }
  }
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

/// Holder side: the live siblings on the holder's device, into `out`
/// (cleared; it allocates only beyond its capacity).
inline void snapshot_siblings(member& m, std::vector<sibling>& out) {
  out.clear();
  for (std::uint32_t i = 0; i < max_tenants; ++i) {
    if (i == m.index) continue;
    tenant_slot& s = m.slot_at(i);
    const std::int32_t pid = s.owner.load();
    if (pid <= 0 || s.device.load() != m.device || s.state.load() == slot_leaving) continue;
    // Liveness is checked only for siblings that are slow to drain: reading
    // /proc for every sibling on every region would dominate the region's cost.
    sibling sb;
    sb.slot = i;
    sb.pid = pid;
    sb.start_time = s.start_time.load();
    out.push_back(sb);
  }
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

/// Step 1 as an object: checks the lease, raises the gate (raise_gate) and
/// moves the phase to gated, then snapshots the siblings and waits for their
/// in-flight submissions until `deadline_ns`. It can throw only before the
/// gate rises; from then on its destructor is the gate's undo.
class gate_step {
 public:
  gate_step(region_context& c, std::uint64_t deadline_ns) : m_c(c) {
    c.check_lease("raising the gate");
    m_siblings.reserve(max_tenants);  // the snapshot below must not allocate
    std::tie(m_epoch, m_took_over) = raise_gate(c.m);
    set_phase(*c.m.dev, phase_gated);
    snapshot_siblings(c.m, m_siblings);
    m_quiet = wait_submissions(c.m, m_siblings, deadline_ns);
  }
  gate_step(const gate_step&) = delete;
  gate_step& operator=(const gate_step&) = delete;

  ~gate_step() {
    // Lost: lowered by CAS, only a gate still at this epoch.
    m_c.release_shared(phase_exiting,
                       [this](bool ours) { return gate_exit(m_c.m, m_epoch, ours); });
  }

  std::uint32_t epoch() const noexcept { return m_epoch; }
  /// The siblings seen when the gate rose (the drain step marks them).
  std::vector<sibling>& siblings() noexcept { return m_siblings; }
  /// Whether their in-flight submissions all ended (or their owners went) in time.
  bool quiet() const noexcept { return m_quiet; }
  /// Writes the epoch, the takeover and the siblings seen into the report.
  void describe(region_report& r) const noexcept {
    r.epoch = m_epoch;
    r.took_over_gate = m_took_over;
    r.gated = true;
    r.siblings_seen = static_cast<std::uint32_t>(m_siblings.size());
  }

 private:
  region_context& m_c;
  std::uint32_t m_epoch = 0;
  bool m_took_over = false;
  bool m_quiet = false;
  std::vector<sibling> m_siblings;
};

}  // namespace krex::detail
