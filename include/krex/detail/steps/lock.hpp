// SPDX-License-Identifier: Apache-2.0
#pragma once

// Step 0, the lock: the per-device FIFO region lock, a ticket lock in shared
// memory, so regions are granted in arrival order (no region starvation). A
// served ticket whose owner died, gave up or did not take it within the
// hand-off deadline is skipped by whoever notices, and the holder's lease
// (pid, start time, deadline) tells siblings and the guardian who holds the
// device.
//
// State: the ticket. Shared words: the slot's ticket, the device's queue
// (next_ticket, now_serving), lease words and region counters. Report: the
// ticket. Undo (lock_step's destructor): release the lease and move the lock
// on, or, when a recoverer took the lease away, only give this slot's ticket
// up. The exit starts here too: the region's first act at exit is the lock's
// claim on it (begin_exit).

#include <krex/detail/segment/validate.hpp>
#include <krex/detail/slots/futex.hpp>
#include <krex/detail/slots/handoff.hpp>
#include <krex/detail/slots/slots.hpp>
#include <krex/detail/steps/context.hpp>
#include <krex/error.hpp>

#include <cstdint>
#include <cstring>
#include <string>

namespace krex::detail {

/// Skips `now_serving` past served tickets nobody takes: their owner died or
/// gave up, or (alive but stopped) did not take its turn within handoff_ns.
/// See advance_queue. Tickets are only ever taken with the owner's slot
/// marked `taking_ticket` first, so an unowned ticket below next_ticket is abandoned.
/// A served ticket whose holder died or outlived its lease moves on through
/// m's recoverer (slots.hpp; none: through the guardian).
inline void skip_abandoned_tickets(member& m) noexcept {
  if (m.node == nullptr) return;
  advance_queue(*m.node, m.device, recovery_of(m), m.recover);
}

/// Test seam: called inside release_region_lock after the lease is given up
/// and before the lock moves on. Never set in production.
inline void (*release_hook)() noexcept = nullptr;

/// Why slot `s`'s owner counts as alive without krex being able to see it,
/// for errors and notes ("" when it was seen alive or dead).
KREX_DETAIL_COLD inline std::string unverified_why(const tenant_slot& s) {
  const slot_life sl = probe_slot(s);
  const auto pid = s.owner.load();
  if (sl.foreign)
    return cat({"pid ", pid, " is in another pid namespace (", s.pidns.load(),
                "): judged by its heartbeat, ", sl.beat_age_ns / 1'000'000, " ms old"});
  if (sl.l.verdict != liveness::unknown) return "";
  return cat({"/proc/", pid, " cannot be read (", std::strerror(sl.l.err),
              sl.l.err == ENOENT ? ": /proc mounted with hidepid?" : "",
              "): treated as alive until its lease ends"});
}

/// "; <why>" when the current lease holder (pid `lp`) counts as alive only
/// because krex cannot see it (unverified_why): the wait lasts until its
/// lease ends, and the error says so. "" otherwise.
KREX_DETAIL_COLD inline std::string holder_unverified(member& m, std::int32_t lp) {
  const std::uint32_t h = m.dev->lease_slot.load() & lease_slot_mask;
  if (lp <= 0 || h == 0 || h > max_tenants || m.slot_at(h - 1).owner.load() != lp) return "";
  const std::string why = unverified_why(m.slot_at(h - 1));
  if (why.empty()) return "";
  const std::uint64_t deadline = m.dev->lease_deadline_ns.load();
  const std::uint64_t now = now_ns();
  return cat({"; it cannot be verified: ", why,
              deadline > now ? cat({", in ", (deadline - now) / 1'000'000, " ms"}) : std::string()});
}

/// Waits for this tenant's turn and takes the region: claims the served
/// ticket (see handoff.hpp) and publishes the lease. Returns its ticket. A
/// waiter whose turn passed while it did not run (stopped past the hand-off
/// deadline, so the queue skipped it) takes a new ticket at the end of the
/// queue, within the same lock_wait. Throws krex::error(step::lock) after
/// opts.lock_wait() (the ticket is given up, the queue moves on).
inline std::uint32_t acquire_region_lock(member& m) {
  tenant_slot& s = *m.slot;
  if (s.ticket.load() != no_ticket)
    throw error(step::lock, "this tenant already holds or waits for a region on its device", 0,
                "regions of one tenant do not nest; end the first region before starting another");
  const auto take_ticket = [&] {
    s.ticket.store(taking_ticket);
    const std::uint32_t t = m.dev->next_ticket.fetch_add(1);
    s.ticket.store(t);
    return t;
  };
  std::uint32_t t = take_ticket();
  const std::uint64_t start = now_ns();
  const std::uint64_t deadline = start + to_ns(m.opts.lock_wait());
  const std::uint64_t park = to_ns(m.opts.gate_park());
  for (;;) {
    const std::uint32_t now = m.dev->now_serving.load();
    if (now == t && claim_served(*m.dev, t)) break;
    if (now == t || ticket_after(now, t)) {
      std::uint32_t serving = 0, next = 0;
      if (!queue_consistent(*m.dev, serving, next)) {
        // A corrupt queue word: queueing again would chase now_serving up
        // to 2^31 tickets (a spin past any lock_wait). Give up at once.
        s.ticket.store(no_ticket);
        throw error(step::lock, queue_problem(m.device, serving, next), 0,
                    cat({"run `krexctl recover --segment ", m.opts.segment(),
                         "` to repair it, then retry the region"}));
      }
      // Our turn was skipped (we did not take it within the hand-off
      // deadline): queue again rather than fail a caller that merely ran late.
      if (now_ns() < deadline) {
        t = take_ticket();
        continue;
      }
    }
    if (now_ns() >= deadline) {
      // Give the ticket up. If it was granted in the meantime, pass it on.
      s.ticket.store(no_ticket);
      skip_abandoned_tickets(m);
      const std::int32_t lp = m.dev->lease_pid.load();
      throw error(step::lock,
                  cat({"timed out after ", m.opts.lock_wait().count(),
                       " ms waiting for the region lock (",
                       ticket_after(t, now)
                           ? cat({static_cast<std::uint32_t>(t - now), " regions ahead"})
                           : std::string("its turn passed while it did not run"),
                       "; holder pid ", lp, holder_unverified(m, lp), ")"}),
                  0, "raise lock_wait / KREX_LOCK_WAIT_MS, or check `krexctl status`");
    }
    futex_wait(m.dev->now_serving, now, deadline, park);
    if (m.dev->now_serving.load() == now) skip_abandoned_tickets(m);
  }
  const std::uint64_t acquired = now_ns();
  // Only the claimant of the served ticket writes the lease (nobody else can
  // claim it), published by its slot word last: a recoverer that sees it
  // finds pid, start time, deadline and ticket already in place.
  m.dev->lease_pid.store(m.slot->owner.load());
  m.dev->lease_start_time.store(m.slot->start_time.load());
  m.dev->lease_acquired_ns.store(acquired);
  m.dev->lease_deadline_ns.store(acquired + to_ns(m.opts.lease()));
  m.dev->lease_ticket.store(t);
  m.dev->lease_slot.store(m.index + 1);
  m.dev->lock_wait_ns.fetch_add(acquired - start, std::memory_order_relaxed);
  return t;
}

/// The region holder's claim on its own exit: moves lease_slot from its plain
/// value to `| lease_exiting` by CAS. False if a recoverer took the lease away
/// (expired, or forced by krexctl): then the recoverer has thawed, lowered the
/// gate and moved the lock on, and the holder must touch none of them. An
/// exiting holder's lease still expires: one stopped while exiting is recovered
/// like any other, and lease_held(m, lease_exiting) turns false.
inline bool claim_exit(member& m) noexcept {
  std::uint32_t mine = m.index + 1;
  return m.dev->lease_slot.compare_exchange_strong(mine, mine | lease_exiting);
}

/// Releases the lock taken with ticket `t` (after claim_exit succeeded): the
/// lease by one CAS, then the lock by one CAS from `t`. False if the lease had
/// been taken away meanwhile; then the lock is the recoverer's to move.
inline bool release_region_lock(member& m, std::uint32_t t) noexcept {
  std::uint32_t mine = (m.index + 1) | lease_exiting;
  const bool ours = m.dev->lease_slot.compare_exchange_strong(mine, 0);
  if (release_hook != nullptr) release_hook();
  // The lock moves on before this slot's ticket is cleared: a skipper that
  // looked in between would otherwise find the served ticket unowned, skip it
  // and move the lock past the next waiter too.
  const bool moved = ours && serve_next(*m.dev, t);
  m.slot->ticket.store(no_ticket);
  skip_abandoned_tickets(m);
  return ours && moved;
}

/// The lock's undo, for the ticket `t` this tenant took. `lease_ours`: its
/// claim_exit succeeded, so the lease and the lock are still its own:
/// release_region_lock. Otherwise a recoverer took the lease away and moved
/// the lock on (it expired, or krexctl recover --force): the lock is the
/// recoverer's, and only this slot's ticket is given up. Returns whether the
/// lease and the lock were still ours when they were released.
inline bool lock_exit(member& m, std::uint32_t t, bool lease_ours) noexcept {
  if (lease_ours) return release_region_lock(m, t);
  m.slot->ticket.store(no_ticket);
  return false;
}

/// Step 0 as an object: waits for the lock (acquire_region_lock) and moves
/// the device's phase to locked; its destructor is the lock's undo.
class lock_step {
 public:
  explicit lock_step(region_context& c) : m_c(c), m_ticket(acquire_region_lock(c.m)) {
    set_phase(*c.m.dev, phase_locked);
  }
  lock_step(const lock_step&) = delete;
  lock_step& operator=(const lock_step&) = delete;

  /// The exit's first act, before any step's undo: the claim on it
  /// (claim_exit), which decides how every step undoes itself
  /// (region_context::exit). A forked child's copy claims nothing.
  void begin_exit() noexcept {
    if (::getpid() != m_c.pid) {
      m_c.exit = region_context::exit_kind::forked;
      return;
    }
    m_c.exit =
        claim_exit(m_c.m) ? region_context::exit_kind::ours : region_context::exit_kind::lost;
    if (m_c.exit == region_context::exit_kind::lost) m_c.report.lease_lost = true;
  }

  ~lock_step() {
    m_c.release_shared(phase_idle,
                       [this](bool ours) { return lock_exit(m_c.m, m_ticket, ours); });
    member& m = m_c.m;
    if (!m_c.body_ended) return;  // a region that ran its body counts on the device
    m.dev->regions.fetch_add(1, std::memory_order_relaxed);
    m.dev->region_ns.fetch_add(m_c.report.body_ns, std::memory_order_relaxed);
  }

  /// Writes its ticket into the report.
  void describe(region_report& r) const noexcept { r.ticket = m_ticket; }

 private:
  region_context& m_c;
  std::uint32_t m_ticket;
};

}  // namespace krex::detail
