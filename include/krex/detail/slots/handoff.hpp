// SPDX-License-Identifier: Apache-2.0
#pragma once

// The hand-off of a served region-lock ticket. When now_serving moves to a
// ticket, its waiter must take the region (claim the ticket, then publish its
// lease) within handoff_ns. A waiter that is alive but does not take its turn
// (SIGSTOPped, frozen, starved) would otherwise block the queue forever, and
// nobody could tell it from a waiter about to wake. device_state::served_mark
// records which ticket is served, since when, and whether its waiter claimed
// it or a skipper skipped it; the waiter's claim and a skipper's skip are CASes
// from the same value, so exactly one of them wins. advance_queue moves the
// queue past tickets nobody takes; the served ticket of a holder with a lease
// moves on only through the caller's recoverer (slots.hpp), so lock waiters
// and the guardian share it without this header calling crash recovery.
// Async-signal-safe.

#include <krex/detail/as_safe.hpp>
#include <krex/detail/layout.hpp>
#include <krex/detail/slots/slots.hpp>

#include <cstdint>

namespace krex::detail {

/// How long a served ticket waits for its owner to take the region before
/// anyone may skip it (the owner, when it runs again, queues anew). A live
/// waiter takes its turn microseconds after the futex wake-up; this bounds
/// a stopped one.
inline constexpr std::uint64_t handoff_ns = 2'000'000'000ULL;

/// served_mark bits below the ticket.
inline constexpr std::uint64_t served_claimed = 1ULL << 31;  ///< its waiter took the region
inline constexpr std::uint64_t served_skipped = 1ULL << 30;  ///< skipped: the lock moves past it
inline constexpr std::uint64_t served_stamped = 1ULL << 29;  ///< the time below is set
inline constexpr std::uint64_t served_ms_mask = (1ULL << 29) - 1;

inline std::uint32_t mark_ticket(std::uint64_t m) noexcept {
  return static_cast<std::uint32_t>(m >> 32);
}

inline std::uint64_t make_mark(std::uint32_t ticket, std::uint64_t flags,
                               std::uint64_t now) noexcept {
  return (static_cast<std::uint64_t>(ticket) << 32) | flags | served_stamped |
         ((now / 1'000'000ULL) & served_ms_mask);
}

/// How long ago mark `m` was stamped (its ms clock wraps after ~6 days: a
/// wrapped stamp only looks younger, delaying a skip by one hand-off). A
/// stamp taken after `now` was read counts as age 0.
inline std::uint64_t mark_age_ns(std::uint64_t m, std::uint64_t now) noexcept {
  const std::uint64_t d = ((now / 1'000'000ULL) - (m & served_ms_mask)) & served_ms_mask;
  return d < served_ms_mask / 2 ? d * 1'000'000ULL : 0;
}

/// True when ticket `a` comes after ticket `b` (tickets wrap).
inline bool ticket_after(std::uint32_t a, std::uint32_t b) noexcept {
  return static_cast<std::int32_t>(a - b) > 0;
}

/// The mark of ticket `s` (now served), stamped now if nobody did yet.
/// `m` is updated to the current mark; false if the mark moved past `s`.
inline bool stamp_served(device_state& dev, std::uint32_t s, std::uint64_t& m) noexcept {
  m = dev.served_mark.load();
  for (;;) {
    const std::uint32_t mt = mark_ticket(m);
    if (mt == s && (m & served_stamped) != 0) return true;
    if (ticket_after(mt, s)) return false;
    const std::uint64_t next = make_mark(s, 0, as_safe::now_ns());
    if (dev.served_mark.compare_exchange_strong(m, next)) {
      m = next;
      return true;
    }
  }
}

/// Moves the lock from ticket `t` to t + 1 (one CAS: a lock that moved on
/// meanwhile is left alone), stamps the new ticket's hand-off and wakes the
/// waiters. Returns true if this call moved it.
inline bool serve_next(device_state& dev, std::uint32_t t) noexcept {
  std::uint32_t expected = t;
  const bool moved = dev.now_serving.compare_exchange_strong(expected, t + 1);
  // Stamped only when t + 1 has a waiter: a ticket taken later, into an
  // empty queue, starts its hand-off when someone first looks at it (its
  // taker, at once), not when the queue emptied.
  if (moved && dev.next_ticket.load() != t + 1) {
    std::uint64_t m = 0;
    stamp_served(dev, t + 1, m);
  }
  as_safe::futex_wake_all(dev.now_serving);
  return moved;
}

/// Waiter side: claims served ticket `t`. False if it was skipped (its
/// hand-off deadline passed while this waiter did not run) or the lock has
/// moved past it: the caller must queue again.
inline bool claim_served(device_state& dev, std::uint32_t t) noexcept {
  std::uint64_t m = 0;
  if (!stamp_served(dev, t, m)) return false;
  for (;;) {
    if (mark_ticket(m) != t || (m & (served_claimed | served_skipped)) != 0) return false;
    if (dev.served_mark.compare_exchange_strong(m, make_mark(t, served_claimed, as_safe::now_ns())))
      return dev.now_serving.load() == t;
  }
}

/// Skipper side: skips served ticket `s` whose mark is `m` (one CAS from the
/// mark it judged; a waiter that claimed meanwhile wins), then moves the lock.
inline bool skip_served(device_state& dev, std::uint32_t s, std::uint64_t m) noexcept {
  if (mark_ticket(m) != s || (m & served_skipped) != 0) return false;
  if (!dev.served_mark.compare_exchange_strong(m, m | served_skipped)) return false;
  return serve_next(dev, s);
}

/// Moves device `d`'s lock queue past served tickets nobody takes: tickets
/// whose owner died or gave up (at once), and tickets whose live owner has not
/// claimed them within handoff_ns (stopped, frozen; `force`: at once). A
/// served ticket with a lease is the holder's: it moves on only through
/// `recover` (a dead or expired holder: recover_dead_holder, which thaws
/// first; null: the queue waits for the holder or the guardian). `c`: how a
/// dead waiter's leaf is removed. Returns the number of tickets skipped.
/// Async-signal-safe.
inline std::uint32_t advance_queue(node_state& n, std::uint32_t d, const recovery_config& c,
                                   recoverer recover, bool force = false) noexcept {
  if (d >= max_devices) return 0;
  device_state& dev = n.devices[d];
  std::uint32_t skipped = 0;
  for (int guard = 0; guard < 4 * static_cast<int>(max_tenants); ++guard) {
    const std::uint32_t s = dev.now_serving.load();
    const std::uint32_t next = dev.next_ticket.load();
    if (s == next) return skipped;  // nobody waiting
    // A corrupt queue (now_serving ahead): skipping would only move it
    // further ahead. `krexctl recover` mends it (krex_tools/status.hpp).
    if (ticket_after(s, next)) return skipped;
    const std::uint32_t ls = dev.lease_slot.load();
    if (ls != 0 && dev.lease_ticket.load() == s) {
      if (recover == nullptr || !recover(n, d, c)) return skipped;
      continue;
    }
    if (ls != 0) return skipped;  // a lease is being published or released
    std::uint64_t m = 0;
    if (!stamp_served(dev, s, m)) continue;
    if ((m & served_skipped) != 0) {  // a skipper stopped half-way: finish its move
      serve_next(dev, s);
      continue;
    }
    bool owned = false;
    for (std::uint32_t i = 0; i < max_tenants && !owned; ++i) {
      tenant_slot& ts = n.tenants[i];
      if (ts.owner.load() <= 0 || ts.device.load() != d) continue;
      const std::uint64_t tk = ts.ticket.load();
      if (tk != s && tk != taking_ticket) continue;
      if (reap_if_dead(n, i, &c)) continue;
      owned = true;
    }
    const bool stale =
        (m & served_claimed) == 0 && (force || mark_age_ns(m, as_safe::now_ns()) >= handoff_ns);
    if (owned && !stale) return skipped;
    if (!skip_served(dev, s, m)) continue;
    ++skipped;
    if (owned) dev.handoff_skips.fetch_add(1, std::memory_order_relaxed);
  }
  return skipped;
}

}  // namespace krex::detail
