// SPDX-License-Identifier: Apache-2.0
#pragma once

// The per-device FIFO region lock: a ticket lock in shared memory, so regions
// are granted in arrival order (no region starvation). A ticket whose owner
// died or gave up is skipped by whoever notices, and the holder's lease (pid,
// start time, deadline) tells siblings and the guardian who holds the device.

#include <krex/detail/futex.hpp>
#include <krex/detail/guardian_recover.hpp>
#include <krex/detail/slots.hpp>
#include <krex/error.hpp>

#include <cstdint>
#include <string>

namespace krex::detail {

/// Skips `now_serving` past tickets nobody live owns (their owner died, or
/// gave up waiting). Tickets are only ever taken with the owner's slot marked
/// `taking_ticket` first, so an unowned ticket below next_ticket is abandoned.
inline void skip_abandoned_tickets(member& m) noexcept {
  for (int guard = 0; guard < 4 * static_cast<int>(max_tenants); ++guard) {
    const std::uint32_t s = m.dev->now_serving.load();
    if (s == m.dev->next_ticket.load()) return;  // nobody waiting
    // The lease holder's ticket only moves on through recover_device, which
    // thaws the siblings first: skipping it here could let the next holder
    // freeze siblings that a late thaw then releases.
    if (m.dev->lease_slot.load() != 0 && m.dev->lease_ticket.load() == s) {
      if (m.node == nullptr) return;
      const recovery r = recover_device(*m.node, m.device, recovery_of(m));
      if (r == recovery::nothing || r == recovery::in_progress) return;
      continue;
    }
    bool owned = false;
    for (std::uint32_t i = 0; i < max_tenants && !owned; ++i) {
      tenant_slot& ts = m.slot_at(i);
      if (ts.owner.load() <= 0 || ts.device.load() != m.device) continue;
      const std::uint64_t tk = ts.ticket.load();
      if (tk != s && tk != taking_ticket) continue;
      if (reap_if_dead(*m.node, i, m.recovery)) continue;
      owned = true;
    }
    if (owned) return;
    std::uint32_t expected = s;
    if (m.dev->now_serving.compare_exchange_strong(expected, s + 1))
      futex_wake_all(m.dev->now_serving);
  }
}

/// Waits for this tenant's turn. Returns its ticket; throws krex::error(step::lock)
/// after opts.lock_wait() (the ticket is given up, the queue moves on).
inline std::uint32_t acquire_region_lock(member& m) {
  tenant_slot& s = *m.slot;
  if (s.ticket.load() != no_ticket)
    throw error(step::lock, "this tenant already holds or waits for a region on its device", 0,
                "regions of one tenant do not nest; end the first region before starting another");
  s.ticket.store(taking_ticket);
  const std::uint32_t t = m.dev->next_ticket.fetch_add(1);
  s.ticket.store(t);
  const std::uint64_t start = now_ns();
  const std::uint64_t deadline = start + to_ns(m.opts.lock_wait());
  const std::uint64_t park = to_ns(m.opts.gate_park());
  for (;;) {
    const std::uint32_t now = m.dev->now_serving.load();
    if (now == t) break;
    if (now_ns() >= deadline) {
      // Give the ticket up. If it was granted in the meantime, pass it on.
      s.ticket.store(no_ticket);
      skip_abandoned_tickets(m);
      const std::int32_t lp = m.dev->lease_pid.load();
      throw error(step::lock,
                  "timed out after " + std::to_string(m.opts.lock_wait().count()) +
                      " ms waiting for the region lock (" +
                      std::to_string(static_cast<std::uint32_t>(t - now)) +
                      " regions ahead; holder pid " + std::to_string(lp) + ")",
                  0, "raise lock_wait / KREX_LOCK_WAIT_MS, or check `krexctl status`");
    }
    futex_wait(m.dev->now_serving, now, deadline, park);
    if (m.dev->now_serving.load() == now) skip_abandoned_tickets(m);
  }
  const std::uint64_t acquired = now_ns();
  // The lease is published by its slot word, last: a recoverer that sees it
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
/// gate and moved the lock on, and the holder must touch none of them.
inline bool claim_exit(member& m) noexcept {
  std::uint32_t mine = m.index + 1;
  return m.dev->lease_slot.compare_exchange_strong(mine, mine | lease_exiting);
}

/// Releases the lock taken with ticket `t` (after claim_exit succeeded).
/// False if the lock had already been taken away.
inline bool release_region_lock(member& m, std::uint32_t t) noexcept {
  std::uint32_t mine = (m.index + 1) | lease_exiting;
  bool ours = m.dev->lease_slot.load() == mine;
  if (ours) {
    m.dev->lease_deadline_ns.store(0);
    m.dev->lease_acquired_ns.store(0);
    m.dev->lease_start_time.store(0);
    m.dev->lease_pid.store(0);
    ours = m.dev->lease_slot.compare_exchange_strong(mine, 0);
  }
  m.slot->ticket.store(no_ticket);
  std::uint32_t expected = t;
  ours = m.dev->now_serving.compare_exchange_strong(expected, t + 1) && ours;
  futex_wake_all(m.dev->now_serving);
  skip_abandoned_tickets(m);
  return ours;
}

}  // namespace krex::detail
