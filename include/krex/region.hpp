// SPDX-License-Identifier: Apache-2.0
#pragma once

// The contract: a harness marks its timed loop, completely, as a region.
//
//     krex::tenant t{krex::options{}.device(0)};
//     { krex::region r{t};   // lock -> gate -> drain -> freeze -> quiet -> pin
//       ... warm-up + timed loop ...
//     }                      // unpin -> thaw -> lower gate -> release
//
// Every step taken is undone, in reverse, even when a later step throws.

#include <krex/detail/cpu_watch.hpp>
#include <krex/detail/proc.hpp>
#include <krex/drain.hpp>
#include <krex/error.hpp>
#include <krex/gate.hpp>
#include <krex/detail/guardian.hpp>
#include <krex/options.hpp>
#include <krex/quiet.hpp>
#include <krex/region_lock.hpp>
#include <krex/report.hpp>
#include <krex/tenant.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace krex {
namespace detail {
// Optional backend hooks of the quiet step and the device checks (a backend
// without them is not probed: the host backend, HIP for now).
template <class B>
auto backend_quiet_probe(B& b, int) -> decltype(b.quiet_probe()) {
  return b.quiet_probe();
}
template <class B>
quiet_sample backend_quiet_probe(B&, long) {
  return {};  // no probe, no reason: the level just lacks "+quiet"

}
template <class B>
auto backend_clocks(const B& b, int) -> decltype(b.clocks()) {
  return b.clocks();
}
template <class B>
device_clocks backend_clocks(const B&, long) {
  return clocks_hook != nullptr ? clocks_hook(-1) : device_clocks{};
}
template <class B>
auto backend_device_processes(const B& b, std::vector<int>& pids, int)
    -> decltype(b.device_processes(pids)) {
  return b.device_processes(pids);
}
template <class B>
bool backend_device_processes(const B&, std::vector<int>&, long) {
  return false;
}
}  // namespace detail

template <class Backend>
class basic_region {
 public:
  /// Enters a region on `t`'s device: waits for the FIFO region lock, raises
  /// the gate, waits for siblings' in-flight submissions, drains them,
  /// freezes their process trees and pins the calling (measuring) thread to
  /// the device's reserved cores. Throws krex::error (step::lock, drain,
  /// freeze, pin) with everything it had done undone.
  explicit basic_region(basic_tenant<Backend>& t) : m_tenant(&t), m_member(&t.detail_member()) {
    t.detail_check_owner(step::lock);
    if (!t.joined())
      throw error(step::lock, "region on a tenant that has left the node", 0,
                  "construct a new krex::tenant");
    try {
      enter();
    } catch (...) {
      unwind();
      throw;
    }
    m_watch.start(m_report.pinned_cpus);
    m_body_start = detail::now_ns();
  }

  /// Ends the region (noexcept); a lost lease is recorded in report().
  ~basic_region() {
    if (m_stage != stage::none) finish();
  }

  basic_region(const basic_region&) = delete;
  basic_region& operator=(const basic_region&) = delete;

  /// Ends the region now. Throws krex::error(step::release) if the lock had
  /// been taken away before the region ended (its lease expired, also while
  /// exiting): the body's timings were not protected to the end.
  void exit() {
    if (m_stage == stage::none) return;
    finish();
    if (m_report.lease_lost)
      throw error(step::release,
                  "the region's lease expired before it ended: the device was handed on, so the "
                  "body ran (partly) unprotected",
                  0, "discard this measurement; raise lease / KREX_LEASE_MS if the body is long");
  }

  /// What the region did (see region_report).
  const region_report& report() const noexcept { return m_report; }

 private:
  enum class stage { none, locked, gated, frozen, pinned };

  // The region sequences the steps; each step acts and returns what it did.
  // Every step a recoverer would own once the lease expired (this process
  // stopped or starved past it) is taken only while the lease is still ours,
  // checked immediately before.
  void enter() {
    detail::member& m = *m_member;
    m_report.scope = m.opts.scope();
    m_report.gating = m_tenant->gating_note();
    m_report.notes = m_tenant->protection_notes();
    const std::uint64_t t0 = detail::now_ns();
    m_tenant->detail_check_guardian();
    m_ticket = detail::acquire_region_lock(m);  // step 0: the FIFO lock
    m_stage = stage::locked;
    m_report.ticket = m_ticket;
    const std::uint64_t t1 = advance(detail::phase_locked, m_report.lock_ns, t0);
    const std::uint64_t deadline = t1 + detail::to_ns(m.opts.drain_deadline());

    check_lease("raising the gate");  // step 1: gate
    detail::gate_result g = detail::gate_enter(m);
    m_epoch = g.epoch;
    m_stage = stage::gated;
    detail::wait_quiet(m, g, deadline);
    record(g);
    const std::uint64_t t2 = advance(detail::phase_draining, m_report.gate_ns, t1);

    check_lease("draining the siblings");  // step 2: drain
    record(detail::drain_siblings(m, g.sibs, g.epoch, deadline, g.quiet));
    const std::uint64_t t3 = advance(detail::phase_freezing, m_report.drain_ns, t2);

    detail::freezer* fz = m_tenant->detail_freezer();  // step 3: freeze
    m_report.freeze = fz ? fz->method() : freeze_method::none;
    if (fz != nullptr && fz->method() != freeze_method::none)
      record(detail::freeze_siblings(
          m, *fz, candidates(g.sibs),
          [&](const detail::freezer::target& f) {
            return detail::sibling_gone(m, {f.slot, f.pid, f.start_time});
          },
          [&] { check_lease("freezing the siblings"); }));
    m_stage = stage::frozen;
    record_split(m_tenant->detail_other_segments());
    const std::uint64_t t4 = advance(detail::phase_frozen, m_report.freeze_ns, t3);

    check_lease("verifying the device is quiet");  // step 3b: quiet
    check_device(t4);
    const std::uint64_t t5 = detail::now_ns();
    m_report.quiet_ns = t5 - t4;

    if (m.opts.pin() && !m_tenant->reserved_cpus().empty()) {  // step 4: pin
      m_pin.emplace(m_tenant->reserved_cpus());
      detail::set_phase(*m.dev, detail::phase_pinned);
      m_report.pinned = true;
      m_report.pinned_cpus = m_pin->pinned();
    }
    m_stage = stage::pinned;
    advance(detail::phase_body, m_report.pin_ns, t5);
    m_report.clocks_entry = detail::backend_clocks(m_tenant->backend(), 0);
    if (const unsigned long long slow = m_report.clocks_entry.slowdown())
      m_report.warnings.push_back("clocks: " + slowdown_names(slow) +
                                  " active at region entry (SM " +
                                  std::to_string(m_report.clocks_entry.sm_mhz) + " MHz)");
  }

  // The device itself, after the siblings are frozen: processes outside the
  // segment holding a context on it, then the quiet step.
  void check_device(std::uint64_t since) {
    detail::member& m = *m_member;
    std::vector<int> pids;
    if (detail::backend_device_processes(m_tenant->backend(), pids, 0)) {
      m_report.foreign_checked = true;
      for (int pid : pids)
        if (!member_pid(pid)) m_report.foreign_pids.push_back(pid);
      if (!m_report.foreign_pids.empty()) {
        std::string l;
        detail::append_int_list(l, m_report.foreign_pids);
        m_report.warnings.push_back(
            "device: " + std::to_string(m_report.foreign_pids.size()) +
            " process(es) outside this krex segment hold a context on the device (pids " + l +
            "): krex neither gates nor freezes them; run them under krex (the same segment) "
            "or elsewhere");
      }
    }
    if (m.opts.quiet_deadline().count() == 0) {
      m_report.notes.push_back("quiet: off (quiet_deadline 0): the device was not probed");
      return;
    }
    // The wait ends at the quiet deadline, or half-way to the lease's.
    std::uint64_t deadline = since + detail::to_ns(m.opts.quiet_deadline());
    const std::uint64_t lease_end = m.dev->lease_deadline_ns.load();
    if (lease_end > since) deadline = std::min(deadline, since + (lease_end - since) / 2);
    // The probe is the holder's own device work inside its region: it must
    // never park at the gate, also where automatic gating routes this
    // process's calls to another tenant of it (two tenants in one process).
    // An open submission on this thread lets nested calls straight through.
    struct open_submission {
      open_submission() noexcept { ++detail::submit_depth; }
      ~open_submission() { --detail::submit_depth; }
    };
    const detail::quiet_result q = detail::wait_device_quiet(
        m,
        [&] {
          open_submission pass;
          return detail::backend_quiet_probe(m_tenant->backend(), 0);
        },
        deadline);
    m_report.quiet_checked = q.checked;
    m_report.quiet = q.quiet;
    m_report.quiet_wait_ns = q.waited_ns;
    m_report.quiet_bursts = q.bursts;
    m_report.quiet_first_ratio = q.first_ratio;
    m_report.quiet_last_ratio = q.last_ratio;
    const auto pct = [](double r) {
      char b[32];
      std::snprintf(b, sizeof b, "%.1f%%", (r - 1.0) * 100.0);
      return std::string(b);
    };
    if (!q.checked) {
      if (!q.why_not.empty()) m_report.notes.push_back("quiet: not probed: " + q.why_not);
    } else if (!q.quiet)
      m_report.warnings.push_back(
          "quiet: the device was still busy after " + std::to_string(q.waited_ns / 1'000'000) +
          " ms (probe " + pct(q.last_ratio) + " slower than idle): a process outside krex or a "
          "long driver operation shares it; raise quiet_deadline / KREX_QUIET_DEADLINE_MS");
    else if (q.waited_ns != 0)
      m_report.notes.push_back("quiet: waited " + std::to_string(q.waited_ns / 1000) +
                               " us for the device to become quiet (probe " + pct(q.first_ratio) +
                               " slower than idle at entry: the driver's work after a large "
                               "free, or a context teardown)");
  }

  // Whether `pid` owns a live slot of this device in the segment.
  bool member_pid(int pid) const noexcept {
    const detail::member& m = *m_member;
    for (std::uint32_t i = 0; i < detail::max_tenants; ++i) {
      const detail::tenant_slot& s = m.slot_at(i);
      if (s.owner.load() == pid && s.device.load() == m.device &&
          s.state.load() == detail::slot_active)
        return true;
    }
    return false;
  }

  // Closes a step: its duration since `since` into `ns`, the device's phase to `next`.
  std::uint64_t advance(std::uint32_t next, std::uint64_t& ns, std::uint64_t since) noexcept {
    detail::set_phase(*m_member->dev, next);
    const std::uint64_t now = detail::now_ns();
    ns = now - since;
    return now;
  }

  void record(const detail::gate_result& g) noexcept {
    m_report.epoch = g.epoch;
    m_report.took_over_gate = g.took_over;
    m_report.gated = true;
    m_report.siblings_seen = static_cast<std::uint32_t>(g.sibs.size());
  }

  void record(const detail::drain_result& d) {
    detail::member& m = *m_member;
    m_report.siblings_gone += d.gone;
    m_report.siblings_drained = d.drained;
    m_report.undrained_pids.assign(d.undrained.begin(), d.undrained.end());
    if (d.ok) {
      m_report.drained = true;
      return;
    }
    if (!d.contended) {
      std::string pids;
      for (int p : d.undrained) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
      throw error(step::drain,
                  std::to_string(d.undrained.size()) + " sibling(s) (pid " + pids +
                      ") did not drain within " + std::to_string(m.opts.drain_deadline().count()) +
                      " ms",
                  0,
                  "a sibling is stuck in a submission or a persistent kernel; raise "
                  "drain_deadline / KREX_DRAIN_DEADLINE_MS, or allow_contended(true) / "
                  "KREX_ALLOW_CONTENDED=1 to proceed with the region flagged contended");
    }
    m_report.contended = true;
  }

  // The drained siblings, each marked whether it touches the device (never
  // one that missed the drain: it may be inside a driver call, where
  // freezing can stall).
  std::vector<detail::freeze_candidate> candidates(const std::vector<detail::sibling>& sibs) const {
    std::vector<detail::freeze_candidate> c;
    for (const auto& sb : sibs)
      if (!sb.gone && sb.acked)
        c.push_back({{sb.slot, sb.pid, sb.start_time},
                     sb.submitting || m_member->slot_at(sb.slot).active.load() != 0});
    return c;
  }

  void record(detail::freeze_result&& f) {
    m_frozen = std::move(f.frozen);
    m_stage = stage::frozen;  // from here on, unwinding thaws them
    m_report.siblings_gone += f.gone;
    m_report.unverified_pids = std::move(f.unverified);
    m_found_stopped = std::move(f.found_stopped);
    for (const auto& t : m_found_stopped) {
      m_report.stopped_pids.push_back(t.pid);
      m_report.notes.push_back("freeze: sibling pid " + std::to_string(t.pid) +
                               " was already stopped by someone else: left stopped, krex will "
                               "not continue it");
    }
    for (const auto& t : m_frozen) m_report.frozen_pids.push_back(t.pid);
    m_report.frozen = true;
    if (f.idle > 0)
      m_report.notes.push_back("freeze: scope " + std::string(to_string(m_member->opts.scope())) +
                               " left " + std::to_string(f.idle) +
                               " sibling(s) with no device work unfrozen (KREX_FREEZE_SCOPE=all "
                               "freezes them too)");
  }

  // Tenants of another segment on this device (detail/device_registry.hpp)
  // run beside the body: nothing here drained or froze them.
  void record_split(std::vector<detail::other_segment>&& others) {
    for (detail::other_segment& o : others) {
      std::string pids;
      for (int p : o.pids) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
      m_report.warnings.push_back(
          "another krex segment uses this device: " + o.path + " (tenant pid " + pids +
          (o.other_pidns ? ", in another pid namespace: it may have ended" : "") +
          "): its tenants were not drained or frozen for this region, nor is this region "
          "visible to them; give every harness on a device the same KREX_SEGMENT, "
          "KREX_SEGMENT_ACCESS and KREX_SHM_DIR (and one user, or group mode)");
      m_report.other_segments.push_back(std::move(o.path));
    }
  }

  /// Throws krex::error(step::lock) if this region's lease was taken away
  /// while it was entering (`what`: the step it was about to take).
  void check_lease(const char* what) const {
    if (detail::lease_held(*m_member)) return;
    throw error(step::lock,
                std::string("the region's lease expired or was taken away before ") + what +
                    " (this process was stopped or starved for longer than its lease, or "
                    "`krexctl recover --force` ran): the device was handed on",
                0, "enter the region again; raise lease / KREX_LEASE_MS if entering is slow");
  }

  void unwind() noexcept {
    if (m_tenant->detail_forked()) {
      // A forked child's copy of the region: the region is the parent's.
      m_pin.reset();
      m_frozen.clear();
      m_found_stopped.clear();
      m_stage = stage::none;
      return;
    }
    detail::member& m = *m_member;
    if (m_stage != stage::none && !detail::claim_exit(m)) {
      // A recoverer took the lease away (it expired, or krexctl recover): it
      // has thawed the siblings, lowered the gate and moved the lock on, and
      // a new holder may already have frozen them again. Touch none of it;
      // only a gate this region raised and that is still at its epoch (the
      // recoverer had snapshotted it before it rose) comes down, by CAS.
      m_report.lease_lost = true;
      m_pin.reset();
      m_frozen.clear();
      if (m_stage != stage::locked) detail::gate_exit(m, m_epoch, false);
      detail::lock_exit(m, m_ticket, false);
      m_stage = stage::none;
      return;
    }
    // Exiting: the lease still runs, so a recoverer may take it from a holder
    // stopped on its way out. Each write below happens only while
    // lease_held(m, lease_exiting), checked right before it.
    const auto ours = [&] { return detail::lease_held(m, detail::lease_exiting); };
    if (m_stage == stage::pinned) {
      if (ours()) detail::set_phase(*m.dev, detail::phase_exiting);
      m_pin.reset();
      m_stage = stage::frozen;
    }
    if (m_stage == stage::frozen) {
      if (!m_frozen.empty()) {  // only a freezer can have frozen anything
        const detail::thaw_result t =
            detail::thaw_siblings(m, *m_tenant->detail_freezer(), m_frozen, ours);
        m_report.freeze_broken = m_report.freeze_broken || t.freeze_broken;
        m_report.thaw_failed = m_report.thaw_failed || t.thaw_failed;
        m_report.lease_lost = m_report.lease_lost || t.lease_lost;
      }
      // A sibling someone else had stopped and that runs again now ran
      // during (part of) the body, unfrozen.
      for (const detail::freezer::target& f : m_found_stopped) {
        const detail::proc_stat st = detail::read_proc_stat(f.pid);
        if (st.exists && st.start_time == f.start_time &&
            !detail::freeze_signal::is_halted(st.state))
          m_report.freeze_broken = true;
      }
      m_found_stopped.clear();
      m_stage = stage::gated;
    }
    if (m_stage == stage::gated) {
      if (ours()) detail::set_phase(*m.dev, detail::phase_exiting);
      if (!detail::gate_exit(m, m_epoch, true)) m_report.lease_lost = true;
      m_stage = stage::locked;
    }
    if (m_stage == stage::locked) {
      if (ours()) detail::set_phase(*m.dev, detail::phase_idle);
      if (!detail::lock_exit(m, m_ticket, true)) m_report.lease_lost = true;
      m_stage = stage::none;
    }
  }

  void finish() noexcept {
    const std::uint64_t t0 = detail::now_ns();
    m_report.body_ns = t0 - m_body_start;
    try {
      m_report.clocks_exit = detail::backend_clocks(m_tenant->backend(), 0);
      if (const unsigned long long slow = m_report.clocks_exit.slowdown())
        m_report.warnings.push_back("clocks: " + slowdown_names(slow) +
                                    " active at region exit (SM " +
                                    std::to_string(m_report.clocks_exit.sm_mhz) + " MHz)");
    } catch (...) {
      // A failed reading leaves the exit clocks invalid.
    }
    try {
      record_cpu_activity(m_watch.stop());
    } catch (...) {
      // Only allocation can fail here; the report then lacks the warning.
    }
    unwind();
    m_report.exit_ns = detail::now_ns() - t0;
    detail::member& m = *m_member;
    m.dev->regions.fetch_add(1, std::memory_order_relaxed);
    m.dev->region_ns.fetch_add(m_report.body_ns, std::memory_order_relaxed);
  }

  // Turns what ran beside the body into report fields and warnings. A few
  // preemptions by kernel threads are normal; more than one per 100 ms of
  // body, or foreign time over 1% of the body (and over the /proc/stat
  // resolution), is worth a warning.
  void record_cpu_activity(const detail::cpu_activity& a) {
    if (!a.measured) return;
    m_report.body_preemptions = a.involuntary_switches;
    const double body_ms = static_cast<double>(m_report.body_ns) / 1e6;
    if (a.foreign_measured) {
      m_report.reserved_foreign_ns = static_cast<long long>(a.foreign_ns);
      const std::uint64_t floor_ns = 2 * a.tick_ns * std::max<std::size_t>(1, m_report.pinned_cpus.size());
      if (a.foreign_ns > floor_ns && a.foreign_ns * 100 > m_report.body_ns)
        m_report.warnings.push_back(
            "other tasks ran about " + std::to_string(a.foreign_ns / 1'000'000) +
            " ms on the reserved CPUs " + detail::format_cpulist(m_report.pinned_cpus) +
            " during the " + std::to_string(static_cast<long long>(body_ms)) +
            " ms body: a non-krex process or kernel work shares the measuring cores");
    }
    if (static_cast<double>(a.involuntary_switches) > 2.0 + body_ms / 100.0)
      m_report.warnings.push_back("the measuring thread was preempted " +
                                  std::to_string(a.involuntary_switches) + " times during the " +
                                  std::to_string(static_cast<long long>(body_ms)) + " ms body");
  }

  basic_tenant<Backend>* m_tenant;
  detail::member* m_member;
  stage m_stage = stage::none;
  std::uint32_t m_ticket = 0;
  std::uint32_t m_epoch = 0;
  std::uint64_t m_body_start = 0;
  region_report m_report;
  std::vector<detail::freezer::target> m_frozen;
  std::vector<detail::freezer::target> m_found_stopped;  // stopped by someone else, left so
  std::optional<detail::pin_guard> m_pin;
  detail::cpu_watch m_watch;
};

/// The build's default backend (host, or CUDA / HIP when built with them).
using tenant = basic_tenant<default_backend>;
using region = basic_region<default_backend>;
using submit_guard = basic_submit_guard<tenant>;

}  // namespace krex
