// SPDX-License-Identifier: Apache-2.0
#pragma once

// Step 2, drain. Each tenant runs one agent thread. When the gate's epoch
// changes to a raised one held by a sibling, the agent waits for its own
// in-flight submissions (in_submit == 0), synchronizes its process's device
// work only if it submitted anything since its last drain (a tenant that only
// computes on the CPU acks at once and never touches the backend), and stores
// the epoch in ack_epoch. The holder waits for every sibling's ack, with a
// deadline.
//
// State: what the drain found (drain_result). Shared words: the siblings'
// ack_epoch, active, the device's acks and agent bell, its drain counters.
// Report: drained or contended, the counts, a note for each sibling late or
// released. Undo: none (a drain leaves nothing to take back; the raised gate
// keeps the siblings off the device until the gate step's undo).

#include <krex/detail/proc.hpp>
#include <krex/detail/slots/futex.hpp>
#include <krex/detail/slots/sibling.hpp>
#include <krex/detail/slots/slots.hpp>
#include <krex/detail/slots/submit.hpp>
#include <krex/detail/steps/context.hpp>
#include <krex/error.hpp>

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace krex::detail {

/// Agent side: handles gate word `g` once. Returns true if it acked `g`.
template <class Backend>
bool agent_drain(member& m, Backend& backend, std::uint32_t g,
                 const std::atomic<bool>& stop) noexcept {
  tenant_slot& s = *m.slot;
  if (!gate_raised(g) || m.dev->holder.load() == m.index + 1 || s.ack_epoch.load() == g)
    return false;
  // Submissions already past the gate finish first; new ones park.
  while (!wait_in_submit_zero(s, now_ns() + 20'000'000)) {
    if (stop.load() || m.dev->gate.load() != g) return false;
  }
  // `syncing` covers the window in which `dirty` is already taken but the
  // work not yet synced, so the holder never proxy-acks this tenant then.
  s.syncing.store(1);
  const bool dirty = s.dirty.exchange(0) != 0;
  s.active.store(dirty ? 1 : 0);
  struct syncing_done {
    tenant_slot& s;
    ~syncing_done() { s.syncing.store(0); }
  } done{s};
  if (dirty) {
    // The sync's own calls (cudaSetDevice creates nothing here: the context
    // exists once the process submitted) must pass the raised gate that this
    // drain serves, as nested calls of an open submission do.
    pass_gate pass;
    try {
      backend.sync();
      s.syncs.fetch_add(1, std::memory_order_relaxed);
    } catch (...) {
      // No ack: the holder's drain deadline reports this sibling as undrained.
      s.dirty.store(1);
      return false;
    }
  }
  s.drains.fetch_add(1, std::memory_order_relaxed);
  s.ack_epoch.store(g);
  // Wake the holder only when the acks it waits for may be complete.
  const std::uint32_t acks = m.dev->acks.fetch_add(1) + 1;
  if (static_cast<std::int32_t>(acks - m.dev->ack_wake_at.load()) >= 0) futex_wake_all(m.dev->acks);
  return true;
}

/// Wakes every agent on the device to look at the gate.
inline void ring_agents(member& m) noexcept {
  m.dev->agent_bell.fetch_add(1);
  futex_wake_all(m.dev->agent_bell);
}

/// Holder side, after wait_submissions: acks on behalf of every sibling with
/// nothing to drain — no submission open (in_submit 0), none since its last
/// drain (dirty 0) and no sync in progress. With the gate raised such a
/// sibling cannot start one (the gate), so waking its agent would only cost a
/// context switch per idle sibling. Returns how many siblings still need their agent.
inline std::size_t proxy_acks(member& m, std::vector<sibling>& sibs, std::uint32_t epoch) noexcept {
  std::size_t need = 0;
  for (sibling& sb : sibs) {
    if (sb.gone || sb.acked) continue;
    tenant_slot& s = m.slot_at(sb.slot);
    // Order matters: `dirty` before `syncing` (the agent sets syncing, then takes dirty).
    // Only a fully joined sibling (slot_active: its leaf exists, its agent
    // runs): one still joining has no leaf to freeze yet, and must ack itself.
    if (s.in_submit.load() == 0 && s.dirty.load() == 0 && s.syncing.load() == 0 &&
        s.state.load() == slot_active && s.owner.load() == sb.pid) {
      sb.start_time = s.start_time.load();  // written before slot_active
      s.active.store(0);
      s.ack_epoch.store(epoch);
      sb.acked = true;
      sb.proxied = true;
      continue;
    }
    ++need;
  }
  return need;
}

/// Holder side, drain step: waits until every sibling acked `epoch`. Returns
/// false if the deadline passed first; `acked` tells who did.
inline bool wait_drained(member& m, std::vector<sibling>& sibs, std::uint32_t epoch,
                         std::uint64_t deadline_ns) {
  for (;;) {
    const std::uint32_t a = m.dev->acks.load();
    std::uint32_t pending = 0;
    for (sibling& sb : sibs) {
      if (sb.gone || sb.acked) continue;
      if (m.slot_at(sb.slot).ack_epoch.load() == epoch) {
        sb.acked = true;
        continue;
      }
      ++pending;
    }
    if (pending == 0) return true;
    // An ack between our count and this store changes `acks`, so the futex
    // wait below returns at once; a stale target only wakes us early.
    m.dev->ack_wake_at.store(a + pending);
    if (now_ns() >= deadline_ns) {
      for (sibling& sb : sibs)
        if (!sb.acked && !sb.gone && sibling_gone(m, sb)) sb.gone = true;
      for (const sibling& sb : sibs)
        if (!sb.acked && !sb.gone) return false;
      return true;
    }
    futex_wait(m.dev->acks, a, deadline_ns, 10'000'000);
    // Slow acks: check that the laggards are alive (a dead one never acks).
    for (sibling& sb : sibs)
      if (!sb.acked && !sb.gone && m.slot_at(sb.slot).ack_epoch.load() != epoch &&
          now_ns() + 1'000'000 < deadline_ns && m.dev->acks.load() == a && sibling_gone(m, sb))
        sb.gone = true;
  }
}

/// What the drain step did (the region records it in its report).
struct drain_result {
  bool ok = false;                      ///< every sibling acked (or is gone) in time
  std::uint32_t drained = 0;            ///< siblings that acked
  std::uint32_t gone = 0;               ///< siblings that left or died meanwhile
  std::vector<std::int32_t> undrained;  ///< pids that missed the deadline
  std::vector<std::string> why;         ///< per undrained pid: undrained_why() at the deadline
  /// Laggards whose process is, readably, no longer a tenant (it exec()ed or
  /// dropped the segment): their slots were released ("pid N: why").
  std::vector<std::string> released;
  /// Not ok, but options::allow_contended: the region goes on, flagged
  /// contended (counted in the device's `contended`). Not ok and not
  /// contended: the region must not start.
  bool contended = false;
};

/// What a laggard's slot shows (an open gated call, a sync under way, work
/// not yet synced) and its process state from /proc (S, D, T stopped, ...).
KREX_DETAIL_COLD inline std::string undrained_why(member& m, const sibling& sb) {
  tenant_slot& s = m.slot_at(sb.slot);
  const std::uint32_t open = s.in_submit.load();
  const proc_stat st = read_proc_stat(sb.pid);
  return cat({open > 0                ? cat({"inside a gated call (", open, " open)"})
               : s.syncing.load() != 0 ? "its agent is still synchronizing its device work"
               : s.dirty.load() != 0   ? "device work its agent has not synchronized"
                                       : "its agent has not answered",
               st.exists ? "; process state " : "; no such process",
               st.exists ? std::string_view(&st.state, 1) : std::string_view()});
}

/// Why a laggard's process is, by positive evidence, no longer the tenant of
/// its slot: its /proc entries are readable and show it no longer maps the
/// segment (it exec()ed, or unmapped it) or runs no agent thread for the
/// slot. nullptr when it may still be one (verified, unreadable, another
/// namespace or domain: those are never released here).
inline const char* no_longer_member(member& m, const sibling& sb) noexcept {
  const identity_domain& d = recovery_of(m).identity;
  // Only an active slot's tenant must run its agent (named before the slot
  // turns active); a joiner or a leaver may not.
  if (!d.valid() || sb.start_time == 0 || m.slot_at(sb.slot).state.load() != slot_active)
    return nullptr;
  const identity_verdict v = as_safe::verify_member(d, sb.pid, sb.start_time, sb.slot);
  return v == identity_not_mapped || v == identity_no_agent ? to_string(v) : nullptr;
}

/// Step 2, holder side: acks for every sibling with nothing to drain, wakes
/// the agents of the others and waits for their acks until `deadline_ns`.
/// `quiet`: whether the gate step saw every in-flight submission end. Counts
/// the drain (and a contended one) in the device's statistics.
inline drain_result drain_siblings(member& m, std::vector<sibling>& sibs, std::uint32_t epoch,
                                   std::uint64_t deadline_ns, bool quiet) {
  const std::uint64_t t0 = now_ns();
  if (proxy_acks(m, sibs, epoch) > 0) ring_agents(m);
  drain_result r;
  r.ok = wait_drained(m, sibs, epoch, deadline_ns) && quiet;
  for (auto& sb : sibs) {
    if (sb.gone)
      ++r.gone;
    else if (sb.acked)
      ++r.drained;
    else if (const char* not_member = no_longer_member(m, sb)) {
      // Its process runs but is no tenant any more: it cannot ack, and every
      // later region would wait for it. Its slot is released (as a dead
      // tenant's; its leaf, with the process in it, is evacuated by the next
      // claimant of the slot).
      if (reap_slot(*m.node, sb.slot, sb.pid, m.recovery))
        m.node->reaped.fetch_add(1, std::memory_order_relaxed);
      sb.gone = true;
      ++r.gone;
      r.released.push_back(cat({"pid ", sb.pid, ": ", not_member}));
    } else {
      r.undrained.push_back(sb.pid);
      r.why.push_back(undrained_why(m, sb));
    }
  }
  if (r.undrained.empty()) r.ok = true;  // the laggards of the gate step turned out gone
  if (!r.ok && m.opts.allow_contended()) {
    r.contended = true;
    m.dev->contended.fetch_add(1, std::memory_order_relaxed);
  }
  m.dev->drains.fetch_add(1, std::memory_order_relaxed);
  m.dev->drain_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  return r;
}

/// Step 2 as an object: moves the phase to draining, checks the lease and
/// drains the siblings the gate step saw (drain_siblings, marking them in
/// `sibs`). Throws krex::error(step::drain) when a sibling missed the
/// deadline and the region may not go on contended. No undo.
class drain_step {
 public:
  drain_step(region_context& c, std::vector<sibling>& sibs, std::uint32_t epoch, bool quiet,
             std::uint64_t deadline_ns) {
    member& m = c.m;
    set_phase(*m.dev, phase_draining);
    c.check_lease("draining the siblings");
    m_result = drain_siblings(m, sibs, epoch, deadline_ns, quiet);
    if (m_result.ok || m_result.contended) return;
    throw error(step::drain,
                cat({m_result.undrained.size(), " sibling(s) (", undrained_text(m_result),
                     ") did not drain within ", m.opts.drain_deadline().count(), " ms"}),
                0,
                "a sibling is stuck in a submission or a persistent kernel; raise "
                "drain_deadline / KREX_DRAIN_DEADLINE_MS, or allow_contended(true) / "
                "KREX_ALLOW_CONTENDED=1 to proceed with the region flagged contended");
  }

  /// Writes what the drain found into the report.
  void describe(region_report& r) const {
    const drain_result& d = m_result;
    r.siblings_gone += d.gone;
    r.siblings_drained = d.drained;
    r.undrained_pids.assign(d.undrained.begin(), d.undrained.end());
    if (d.ok)
      r.drained = true;
    else
      r.contended = true;
    if (!d.undrained.empty())
      r.notes.push_back(cat({"drain: did not drain in time (", undrained_text(d), ")"}));
    for (const std::string& why : d.released)
      r.notes.push_back(
          cat({"drain: released the slot of a sibling that is no tenant any more (", why, ")"}));
  }

  /// "pid 4280: inside a gated call (1 open); process state S, pid ...".
  static std::string undrained_text(const drain_result& r) {
    std::string t;
    for (std::size_t i = 0; i < r.undrained.size(); ++i)
      t += cat({i == 0 ? "pid " : ", pid ", r.undrained[i], ": ", r.why[i]});
    return t;
  }

 private:
  drain_result m_result;
};

}  // namespace krex::detail
