// SPDX-License-Identifier: Apache-2.0
#pragma once

// Reading a node segment from outside the protocol, for krexctl: a plain
// snapshot of a node state (validate() in validate.hpp says whether it is
// usable), and that snapshot as text or JSON. Tools only: it lives under
// tools/, is never installed, and the library never includes it
// (tests/layers_test.py and the consumer_install test check both). Nothing here
// trusts the segment: values are copied, checked and sanitized before use,
// and no path is ever taken from it.

#include <krex/detail/guardian/guardian_recover.hpp>
#include <krex/detail/guardian/guardian_sys.hpp>
#include <krex/detail/json.hpp>
#include <krex/detail/layout.hpp>
#include <krex/detail/segment/validate.hpp>
#include <krex/detail/slots/handoff.hpp>
#include <krex/detail/slots/slots.hpp>

#include <signal.h>

#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace krex::detail {

/// Mends device `dev`'s corrupt region-lock queue (now_serving ahead of
/// next_ticket, krex/detail/segment/validate.hpp): next_ticket moves up to now_serving, so the
/// queue is empty and consistent; waiters holding older tickets see their
/// turn passed and queue anew. Returns true if it was corrupt (and `serving`,
/// `next` its words then). Async-signal-safe.
inline bool repair_queue(device_state& dev, std::uint32_t& serving, std::uint32_t& next) noexcept {
  bool was = false;
  for (int guard = 0; guard < 64; ++guard) {
    const std::uint32_t s = dev.now_serving.load();
    std::uint32_t n = dev.next_ticket.load();
    if (!ticket_after(s, n)) return was;
    if (!was) {
      serving = s;
      next = n;
      was = true;
    }
    dev.next_ticket.compare_exchange_strong(n, s);
  }
  return was;
}

/// One device as krexctl shows it.
struct device_view {
  std::uint32_t index = 0;
  std::uint64_t key = 0;
  std::uint32_t gate = 0;
  bool raised = false;
  std::uint32_t holder_slot = 0;  ///< slot + 1, 0 = none
  std::uint32_t phase = 0;
  std::uint32_t lease_slot = 0;  ///< raw (slot + 1 | flags)
  std::int32_t lease_pid = 0;
  bool lease_holder_alive = false;
  bool lease_holder_verified = true;  ///< false: alive as far as can be told (see pid_check)
  bool lease_holder_stopped = false;
  double region_age_ms = 0;  ///< since the lease was taken (0: none)
  double lease_left_ms = 0;  ///< negative: expired
  std::uint32_t now_serving = 0, next_ticket = 0;
  std::uint64_t regions = 0;
  std::uint64_t region_ns = 0;
  std::uint64_t lock_wait_ns = 0;
  std::uint64_t gate_parks = 0;
  std::uint64_t drains = 0;
  std::uint64_t drain_ns = 0;
  std::uint64_t freezes = 0;
  std::uint64_t freeze_ns = 0;
  std::uint64_t contended = 0;
  std::uint64_t recoveries = 0;
  std::uint64_t lease_expiries = 0;
  std::uint64_t handoff_skips = 0;
  std::uint64_t quiet_ref_ns = 0;  ///< the device's idle probe figure (0: none yet)
  std::uint64_t quiet_checks = 0, quiet_waits = 0, quiet_wait_ns = 0, quiet_busy = 0;
  std::uint32_t tenants = 0;
  /// The served ticket's hand-off (queue not empty, no lease): how long ago
  /// it was served (-1: not stamped yet) and whether its waiter claimed it.
  double served_age_ms = -1;
  bool served_claimed = false;
  /// A recovery in progress (lease_recovering, or a claim without a lease).
  std::int32_t recoverer_pid = 0;
  bool recoverer_alive = false;
  double recovery_age_ms = 0;
};

/// One tenant slot in use.
struct tenant_view {
  std::uint32_t slot = 0;
  std::int32_t pid = 0;
  bool alive = false;
  bool verified = true;  ///< false: its liveness could not be checked (see pid_check)
  bool stopped = false;  ///< SIGSTOPped (state T)
  std::uint32_t state = 0;
  std::uint32_t device = 0;
  std::uint32_t in_submit = 0;
  bool frozen = false;
  bool waiting = false;  ///< holds a region-lock ticket
  double joined_s = 0;
  double heartbeat_age_ms = 0;
  std::uint64_t submits = 0;
  std::uint64_t drains = 0;
};

/// A snapshot of a node segment.
struct node_view {
  std::string segment;
  std::string freeze_domain;  ///< as recorded by the first tenant (display only)
  std::int32_t guardian_pid = 0;
  bool guardian_alive = false;
  /// "running", "stopped" (SIGSTOPped: it recovers nothing), "dead",
  /// "unverified" (its /proc entry cannot be read), "none".
  std::string guardian_state = "none";
  std::uint32_t guardian_starts = 0;
  std::uint64_t reaped = 0;
  std::vector<device_view> devices;   ///< devices in use (key set, or holding state)
  std::vector<tenant_view> tenants;   ///< slots in use (owner != 0)
  std::vector<std::string> problems;  ///< validate() and liveness findings
  /// What could not be checked (a pid in another pid namespace, a /proc
  /// entry that cannot be read): never called healthy, never called dead.
  std::vector<std::string> unverified;
};

/// What krexctl can tell about a recorded process.
struct pid_check {
  bool alive = false;    ///< not dead on positive evidence
  bool verified = true;  ///< false: alive only because it cannot be checked
  bool stopped = false;  ///< state T or t (SIGSTOP, a tracer)
  const char* why = "";  ///< why not verified
};

/// Checks `pid` with /proc start time `start` (0: not recorded), recorded in
/// pid namespace `pidns` (0: not recorded). Dead only on positive evidence:
/// the pid's start time differs, or kill(pid, 0) says ESRCH. A pid of
/// another pid namespace, or one whose /proc entry cannot be read, is
/// unverified, never dead.
inline pid_check check_pid(std::int64_t pid, std::uint64_t start, std::uint64_t pidns) noexcept {
  pid_check c;
  const std::uint64_t own = as_safe::pid_namespace();
  if (pidns != 0 && own != 0 && pidns != own) {
    c.alive = true;
    c.verified = false;
    c.why = "recorded in another pid namespace: its pid names nothing here";
    return c;
  }
  if (pid <= 0 || pid > INT_MAX) return c;
  const proc_stat st = read_proc_stat(pid);
  if (st.exists) {
    if (start != 0 && st.start_time != 0 && st.start_time != start) return c;  // reused
    if (st.state == 'Z' || st.state == 'X') {
      c.alive = as_safe::alive(pid, start);  // a zombie leader: the liveness core judges
      return c;
    }
    c.alive = true;
    c.stopped = st.state == 'T' || st.state == 't';
    return c;
  }
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return c;
  c.alive = true;
  c.verified = false;
  c.why = "its /proc entry cannot be read (hidepid, or no file descriptor left)";
  return c;
}

inline const char* phase_name(std::uint32_t p) noexcept {
  static const char* const names[] = {"idle",   "locked", "gated", "draining", "freezing",
                                      "frozen", "pinned", "body",  "exiting"};
  return p <= phase_exiting ? names[p] : "?";
}

inline const char* slot_state_name(std::uint32_t s) noexcept {
  static const char* const names[] = {"free", "claiming", "active", "reaping", "leaving"};
  return s <= slot_leaving ? names[s] : "?";
}

/// Copies what krexctl shows out of `n` (the segment file at `segment_path`),
/// and notes what is wrong: the validate() findings, dead lease holders,
/// raised gates without a live holder, dead tenants still holding slots, a
/// missing guardian.
inline node_view read_status(const node_state& n, const std::string& segment_path) {
  node_view v;
  v.segment = segment_path;
  v.problems = validate(n);
  for (std::string& p : queue_problems(n)) v.problems.push_back(std::move(p));
  v.freeze_domain = load_text(n.cgroup_root_text);
  v.guardian_pid = n.guardian_pid.load();
  if (v.guardian_pid > 0) {
    const pid_check g = check_pid(v.guardian_pid, n.guardian_start_time.load(), 0);
    v.guardian_alive = g.alive;
    v.guardian_state = !g.alive      ? "dead"
                       : !g.verified ? "unverified"
                       : g.stopped   ? "stopped"
                                     : "running";
    if (!g.verified)
      v.unverified.push_back("guardian pid " + std::to_string(v.guardian_pid) + ": " + g.why);
    if (g.stopped)
      v.problems.push_back("the guardian (pid " + std::to_string(v.guardian_pid) +
                           ") is stopped: it recovers nothing until continued (a running "
                           "tenant replaces it within a second; `kill -CONT " +
                           std::to_string(v.guardian_pid) + "` or `krexctl recover`)");
  }
  v.guardian_starts = n.guardian_starts.load();
  v.reaped = n.reaped.load();
  const std::uint64_t now = as_safe::now_ns();
  bool any_live = false;
  for (std::uint32_t i = 0; i < max_tenants; ++i) {
    const tenant_slot& s = n.tenants[i];
    const std::int32_t pid = s.owner.load();
    if (pid == 0) continue;
    if (pid < 0) {
      // Reserved for a moment by a reaper or sweeper; a problem only if it died.
      if (pid != INT32_MIN && !as_safe::alive(-static_cast<std::int64_t>(pid), 0))
        v.problems.push_back("tenant slot " + std::to_string(i) + " is reserved by dead pid " +
                             std::to_string(-static_cast<std::int64_t>(pid)));
      continue;
    }
    tenant_view t;
    t.slot = i;
    t.pid = pid;
    const pid_check pc = check_pid(pid, s.start_time.load(), s.pidns.load());
    t.alive = pc.alive;
    t.verified = pc.verified;
    t.stopped = pc.stopped;
    if (!pc.verified)
      v.unverified.push_back("tenant slot " + std::to_string(i) + " pid " + std::to_string(pid) +
                             ": " + pc.why);
    t.state = s.state.load();
    t.device = s.device.load();
    t.in_submit = s.in_submit.load();
    t.frozen = s.frozen.load() != 0;
    const std::uint64_t tk = s.ticket.load();
    t.waiting = tk != no_ticket && tk != taking_ticket;
    const std::uint64_t j = s.joined_ns.load();
    const std::uint64_t hb = s.heartbeat_ns.load();
    t.joined_s = j != 0 && j <= now ? static_cast<double>(now - j) / 1e9 : 0;
    t.heartbeat_age_ms = hb != 0 && hb <= now ? static_cast<double>(now - hb) / 1e6 : 0;
    t.submits = s.submits.load();
    t.drains = s.drains.load();
    any_live = any_live || t.alive;
    if (pid > 0 && !t.alive)
      v.problems.push_back("tenant slot " + std::to_string(i) + " belongs to dead pid " +
                           std::to_string(pid) + " (not reaped yet)");
    v.tenants.push_back(t);
  }
  for (std::uint32_t d = 0; d < max_devices; ++d) {
    const device_state& dev = n.devices[d];
    const std::uint32_t ls = dev.lease_slot.load();
    const std::uint32_t g = dev.gate.load();
    if (dev.key.load() == 0 && ls == 0 && (g & 1U) == 0) continue;
    device_view x;
    x.index = d;
    x.key = dev.key.load();
    x.gate = g;
    x.raised = (g & 1U) != 0;
    x.holder_slot = dev.holder.load();
    x.phase = dev.phase.load();
    x.lease_slot = ls;
    x.lease_pid = dev.lease_pid.load();
    if (ls != 0) {
      // The holder's pid namespace is its slot's (when the slot is still its).
      const std::uint32_t hs = (ls & lease_slot_mask) - 1;
      const std::uint64_t hns = hs < max_tenants && n.tenants[hs].owner.load() == x.lease_pid
                                    ? n.tenants[hs].pidns.load()
                                    : 0;
      const pid_check hc = check_pid(x.lease_pid, dev.lease_start_time.load(), hns);
      x.lease_holder_alive = hc.alive;
      x.lease_holder_verified = hc.verified;
      x.lease_holder_stopped = hc.stopped;
      if (!hc.verified)
        v.unverified.push_back("device " + std::to_string(d) + " region holder pid " +
                               std::to_string(x.lease_pid) + ": " + hc.why +
                               " (its lease bounds it)");
    }
    const std::uint64_t acq = dev.lease_acquired_ns.load();
    const std::uint64_t dl = dev.lease_deadline_ns.load();
    if (ls != 0 && acq != 0 && acq <= now) x.region_age_ms = static_cast<double>(now - acq) / 1e6;
    if (ls != 0 && dl != 0)
      x.lease_left_ms = (static_cast<double>(dl) - static_cast<double>(now)) / 1e6;
    x.now_serving = dev.now_serving.load();
    x.next_ticket = dev.next_ticket.load();
    x.regions = dev.regions.load();
    x.region_ns = dev.region_ns.load();
    x.lock_wait_ns = dev.lock_wait_ns.load();
    x.gate_parks = dev.gate_parks.load();
    x.drains = dev.drains.load();
    x.drain_ns = dev.drain_ns.load();
    x.freezes = dev.freezes.load();
    x.freeze_ns = dev.freeze_ns.load();
    x.contended = dev.contended.load();
    x.recoveries = dev.recoveries.load();
    x.lease_expiries = dev.lease_expiries.load();
    x.handoff_skips = dev.handoff_skips.load();
    x.quiet_ref_ns = dev.quiet_ref_ns.load();
    x.quiet_checks = dev.quiet_checks.load();
    x.quiet_waits = dev.quiet_waits.load();
    x.quiet_wait_ns = dev.quiet_wait_ns.load();
    x.quiet_busy = dev.quiet_busy.load();
    const std::uint64_t claim = dev.recover_claim.load();
    if (claim != 0) {
      x.recoverer_pid = claim_pid(claim);
      x.recoverer_alive = claimant_alive(dev, claim, now);
      x.recovery_age_ms = static_cast<double>(claim_age_ns(claim, now)) / 1e6;
    }
    const std::uint64_t mark = dev.served_mark.load();
    const bool queued = x.now_serving != x.next_ticket;
    if (queued && ls == 0 && mark_ticket(mark) == x.now_serving &&
        (mark & served_stamped) != 0) {
      x.served_age_ms = static_cast<double>(mark_age_ns(mark, now)) / 1e6;
      x.served_claimed = (mark & served_claimed) != 0;
    }
    for (const tenant_view& t : v.tenants)
      if (t.device == d) ++x.tenants;
    const std::string at = "device " + std::to_string(d) + ": ";
    const auto ms = [](double d_ms) { return std::to_string(static_cast<long long>(d_ms)); };
    if (ls != 0 && !x.lease_holder_alive)
      v.problems.push_back(at + "region holder pid " + std::to_string(x.lease_pid) +
                           " is dead (its siblings may be frozen, the gate raised)");
    else if (ls != 0 && dl != 0 && x.lease_left_ms < 0)
      v.problems.push_back(at + "the region lease of pid " + std::to_string(x.lease_pid) +
                           ((ls & lease_exiting) != 0 ? " (exiting)" : "") + " expired " +
                           ms(-x.lease_left_ms) +
                           " ms ago (stopped or starved?); the guardian or `krexctl recover` "
                           "takes the device back");
    // A recovery claim older than the grace is stalled: its recoverer died
    // (the next recoverer takes over), is stopped (taken over once the claim
    // is recovery_claim_deadline_ns old) or runs slowly (only --force).
    if (claim != 0 && x.recovery_age_ms * 1e6 >= static_cast<double>(recovery_claim_grace_ns))
      v.problems.push_back(
          at + "a recovery by pid " + std::to_string(x.recoverer_pid) + " has been in progress " +
          ms(x.recovery_age_ms) + " ms" +
          (x.recoverer_alive
               ? " (the recoverer is alive but stalled: if it is stopped, the next recoverer "
                 "takes it over " +
                     std::to_string(recovery_claim_deadline_ns / 1'000'000) +
                     " ms after its claim; `krexctl recover --force` takes it over at once)"
               : std::string(" (the recoverer is dead: the next recoverer takes over)")));
    // A live waiter takes its served ticket within microseconds; one that has
    // not for a quarter of the hand-off deadline is stopped or starved.
    if (x.served_age_ms >= 0 && !x.served_claimed &&
        x.served_age_ms * 1e6 >= static_cast<double>(handoff_ns / 4))
      v.problems.push_back(
          at + "ticket " + std::to_string(x.now_serving) + " was served " + ms(x.served_age_ms) +
          " ms ago and its waiter has not taken the region (stopped?): " +
          (x.served_age_ms * 1e6 >= static_cast<double>(handoff_ns)
               ? "past its hand-off deadline, the next waiter, the guardian or `krexctl "
                 "recover` skips it"
               : "it is skipped at the hand-off deadline (" +
                     std::to_string(handoff_ns / 1'000'000) + " ms), or at once by `krexctl "
                     "recover --force`"));
    if (ls == 0 && x.raised) v.problems.push_back(at + "gate raised with no region holder");
    v.devices.push_back(x);
  }
  for (const tenant_view& t : v.tenants)
    if (t.frozen && t.device < max_devices && n.devices[t.device].lease_slot.load() == 0)
      v.problems.push_back("tenant slot " + std::to_string(t.slot) +
                           " is marked frozen but no region holds its device");
  if (any_live && !v.guardian_alive)
    v.problems.emplace_back("no guardian is running (the next tenant action starts one)");
  return v;
}

}  // namespace krex::detail
