// SPDX-License-Identifier: Apache-2.0
#pragma once

// The region (krex::basic_region is its façade, krex/region.hpp): its steps
// in order, and the report. Compiled once, over the backend as
// device_ops. Header-only builds include this from krex/region.hpp;
// under KREX_SEPARATE_COMPILATION only <krex/impl/src.hpp> does.
//
// Every step taken is undone, in reverse, even when a later step throws: each
// step is an object (include/krex/detail/steps/, one file each, with its state
// and its undo), and the region is the ordered set of them.

#include <krex/detail/config.hpp>
#include <krex/detail/core.hpp>
#include <krex/detail/cpu/cpu_watch.hpp>
#include <krex/detail/device/device_ops.hpp>
#include <krex/detail/steps/context.hpp>
#include <krex/detail/steps/drain.hpp>
#include <krex/detail/steps/freeze.hpp>
#include <krex/detail/steps/gate.hpp>
#include <krex/detail/steps/lock.hpp>
#include <krex/detail/steps/pin.hpp>
#include <krex/detail/steps/quiet.hpp>
#include <krex/error.hpp>
#include <krex/impl/tenant_core.hpp>
#include <krex/options.hpp>
#include <krex/report.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace krex {
namespace detail {

/// A region (krex::basic_region is its façade). Not copyable or movable.
class region_core {
 public:
  /// Enters a region on `t`'s device (krex::basic_region's constructor).
  region_core(tenant_core& t, device_ops& ops) : m_tenant(&t), m_ops(ops), m_context(t.shared()) {
    t.check_owner(step::lock);
    if (!t.joined())
      throw error(step::lock, "region on a tenant that has left the node", 0,
                  "construct a new krex::tenant");
    m_report.scope = m_context.m.opts.scope();
    m_report.gating = m_ops.gating_note();
    m_report.notes = m_tenant->protection_notes();
    enter();  // a throw destroys m_steps: the steps taken are undone
    m_watch.start(m_report.pinned_cpus);
    m_body_start = now_ns();
  }

  /// Ends the region (noexcept); a lost lease is recorded in report().
  ~region_core() {
    if (m_steps) finish();
  }

  region_core(const region_core&) = delete;
  region_core& operator=(const region_core&) = delete;

  /// Ends the region now. Throws krex::error(step::release) if the lock had
  /// been taken away before the region ended (its lease expired, also while
  /// exiting): the body's timings were not protected to the end.
  void exit() {
    if (!m_steps) return;
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
  // The steps, in order. Destroying them is the undo, in reverse: the exit
  // starts with the lock's claim on it (lock_step::begin_exit), then each
  // step's destructor undoes that step (each knows what to do when the lease
  // was lost, and in a forked child's copy).
  struct steps {
    std::optional<lock_step> lock;
    std::optional<gate_step> gate;
    std::optional<drain_step> drain;
    std::optional<freeze_step> freeze;
    std::optional<quiet_step<device_ops>> quiet;
    std::optional<pin_step> pin;
    steps() = default;
    steps(const steps&) = delete;
    steps& operator=(const steps&) = delete;
    ~steps() {
      if (lock) lock->begin_exit();
    }
  };

  // The region is its steps, taken in order, each recorded in the report as
  // it completes and timed into its field. Every step that a recoverer would
  // own once the lease expired checks the lease right before it acts.
  void enter() {
    region_context& c = m_context;
    steps& s = m_steps.emplace();
    m_lap = now_ns();
    m_tenant->check_guardian();  // timed with the lock: a dead guardian is replaced first
    take(m_report.lock_ns, s.lock, c);
    const std::uint64_t deadline = now_ns() + to_ns(c.m.opts.drain_deadline());
    take(m_report.gate_ns, s.gate, c, deadline);
    gate_step& g = *s.gate;
    take(m_report.drain_ns, s.drain, c, g.siblings(), g.epoch(), g.quiet(), deadline);
    take(m_report.freeze_ns, s.freeze, c, m_tenant->sibling_freezer(), g.siblings());
    take(m_report.quiet_ns, s.quiet, c, m_ops);
    take(m_report.pin_ns, s.pin, c, m_tenant->reserved_cpus());
    set_phase(*c.m.dev, phase_body);
    record_clocks(m_report.clocks_entry, "entry");
  }

  // Takes one step (constructs it in `step`), records it in the report, and
  // times it into `ns`: from the end of the previous step to its own end.
  template <class Step, class... Args>
  void take(std::uint64_t& ns, std::optional<Step>& step, Args&&... args) {
    record(step.emplace(std::forward<Args>(args)...));
    const std::uint64_t now = now_ns();
    ns = now - m_lap;
    m_lap = now;
  }

  void record(const lock_step& l) noexcept { m_report.ticket = l.ticket(); }

  void record(gate_step& g) noexcept {
    m_report.epoch = g.epoch();
    m_report.took_over_gate = g.took_over();
    m_report.gated = true;
    m_report.siblings_seen = static_cast<std::uint32_t>(g.siblings().size());
  }

  void record(const drain_step& step) {
    const drain_result& d = step.result();
    m_report.siblings_gone += d.gone;
    m_report.siblings_drained = d.drained;
    m_report.undrained_pids.assign(d.undrained.begin(), d.undrained.end());
    if (d.ok)
      m_report.drained = true;
    else
      m_report.contended = true;
    if (!d.undrained.empty())
      m_report.notes.push_back("drain: did not drain in time (" + drain_step::undrained_text(d) +
                               ")");
    for (const std::string& r : d.released)
      m_report.notes.push_back("drain: released the slot of a sibling that is no tenant any "
                               "more (" + r + ")");
  }

  void record(const freeze_step& step) {
    const freezer* fz = m_tenant->sibling_freezer();
    m_report.freeze = fz ? fz->method() : freeze_method::none;
    if (step.ran()) {
      const freeze_result& f = step.result();
      m_report.siblings_gone += f.gone;
      m_report.unverified_pids = f.unverified;
      for (std::size_t i = 0; i < f.leafless.size(); ++i) {
        const sibling& l = f.leafless[i];
        m_report.unverified_pids.push_back(l.pid);
        m_report.warnings.push_back(
            "freeze: sibling slot " + std::to_string(l.slot) + " (pid " + std::to_string(l.pid) +
            ") has no leaf under the krex cgroup root, so its process is no tenant of this "
            "freeze domain (a slot written into the segment by hand?): it ran unfrozen beside "
            "this region" +
            (f.reaped[i] ? "; its slot was freed"
                         : "; its slot is kept while its heartbeat is fresh (`krexctl status`)"));
      }
      for (const auto& t : f.found_stopped) {
        m_report.stopped_pids.push_back(t.pid);
        m_report.notes.push_back("freeze: sibling pid " + std::to_string(t.pid) +
                                 " was already stopped by someone else: left stopped, krex will "
                                 "not continue it");
      }
      for (const auto& t : f.frozen) m_report.frozen_pids.push_back(t.pid);
      m_report.frozen = true;
      if (f.idle > 0)
        m_report.notes.push_back("freeze: scope " +
                                 std::string(to_string(m_context.m.opts.scope())) + " left " +
                                 std::to_string(f.idle) +
                                 " sibling(s) with no device work unfrozen (KREX_FREEZE_SCOPE=all "
                                 "freezes them too)");
    }
    record_split(m_tenant->other_segments(), "uses this device");
    if (std::string note = m_tenant->split_note(); !note.empty())
      m_report.notes.push_back(std::move(note));
  }

  // Tenants of another segment on this device (detail/device/device_registry.hpp)
  // run beside the body: nothing here drained or froze them.
  void record_split(std::vector<other_segment>&& others, const char* what) {
    for (other_segment& o : others) {
      std::string pids;
      for (int p : o.pids) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
      m_report.warnings.push_back(
          "another krex segment " + std::string(what) + ": " + o.path + " (tenant pid " + pids +
          (o.other_pidns ? ", in another pid namespace or not checkable here: its entry was "
                           "refreshed within the last 10 s"
                         : "") +
          "): its tenants were not drained or frozen for this region, nor is this region "
          "visible to them; give every harness on a device the same KREX_SEGMENT, "
          "KREX_SEGMENT_ACCESS and KREX_SHM_DIR (and one user, or group mode)");
      m_report.other_segments.push_back(std::move(o.path));
    }
  }

  // The device itself, after the siblings are frozen: processes outside the
  // segment holding a context on it, then the quiet step.
  void record(const quiet_step<device_ops>& step) {
    if (step.foreign_checked()) {
      m_report.foreign_checked = true;
      m_report.foreign_pids = step.foreign_pids();
      if (!m_report.foreign_pids.empty()) {
        std::string l;
        append_int_list(l, m_report.foreign_pids);
        m_report.warnings.push_back(
            "device: " + std::to_string(m_report.foreign_pids.size()) +
            " process(es) outside this krex segment hold a context on the device (pids " + l +
            "): krex neither gates nor freezes them; run them under krex (the same segment) "
            "or elsewhere");
      }
    }
    if (!step.probed()) {
      m_report.notes.push_back("quiet: off (quiet_deadline 0): the device was not probed");
      return;
    }
    const quiet_result& q = step.result();
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
          " ms (probe " + pct(q.last_ratio) +
          " slower than idle): a process outside krex or a "
          "long driver operation shares it; raise quiet_deadline / KREX_QUIET_DEADLINE_MS");
    else if (q.waited_ns != 0)
      m_report.notes.push_back("quiet: waited " + std::to_string(q.waited_ns / 1000) +
                               " us for the device to become quiet (probe " + pct(q.first_ratio) +
                               " slower than idle at entry: the driver's work after a large "
                               "free, or a context teardown)");
  }

  void record(const pin_step& p) {
    m_report.pinned = p.pinned();
    m_report.pinned_cpus = p.cpus();
  }

  // The device's clocks at entry or exit, with a warning if something slows it.
  void record_clocks(device_clocks& into, const char* when) {
    into = m_ops.clocks();
    if (const unsigned long long slow = into.slowdown())
      m_report.warnings.push_back("clocks: " + slowdown_names(slow) + " active at region " + when +
                                  " (SM " + std::to_string(into.sm_mhz) + " MHz)");
  }

  void finish() noexcept {
    const std::uint64_t t0 = now_ns();
    m_report.body_ns = t0 - m_body_start;
    try {
      record_clocks(m_report.clocks_exit, "exit");
    } catch (...) {
      // A failed reading leaves the exit clocks invalid.
    }
    try {
      const cpu_activity a = m_watch.stop();
      // Another segment's tenants that came during the body: named, so that
      // their load on the reserved CPUs is not blamed on a non-krex process.
      std::vector<other_segment> late = m_tenant->other_segments();
      const auto& known = m_report.other_segments;
      const auto seen = [&](const other_segment& o) {
        return std::find(known.begin(), known.end(), o.path) != known.end();
      };
      late.erase(std::remove_if(late.begin(), late.end(), seen), late.end());
      record_split(std::move(late), "came to this device during the body");
      record_cpu_activity(a);
    } catch (...) {
      // Only allocation can fail here; the report then lacks the warnings.
    }
    m_context.body_ns = m_report.body_ns;
    m_context.body_ended = true;
    m_steps.reset();  // the undo, step by step in reverse
    m_report.lease_lost = m_report.lease_lost || m_context.lease_lost;
    m_report.thaw_failed = m_report.thaw_failed || m_context.thaw_failed;
    m_report.freeze_broken = m_report.freeze_broken || m_context.freeze_broken;
    m_report.exit_ns = now_ns() - t0;
  }

  // Turns what ran beside the body into report fields and warnings. A few
  // preemptions by kernel threads are normal; more than one per 100 ms of
  // body, or foreign time over 1% of the body (and over the /proc/stat
  // resolution), is worth a warning.
  void record_cpu_activity(const cpu_activity& a) {
    if (!a.measured) return;
    m_report.body_preemptions = a.involuntary_switches;
    const double body_ms = static_cast<double>(m_report.body_ns) / 1e6;
    if (a.foreign_measured) {
      m_report.reserved_foreign_ns = static_cast<long long>(a.foreign_ns);
      const std::uint64_t floor_ns =
          2 * a.tick_ns * std::max<std::size_t>(1, m_report.pinned_cpus.size());
      if (a.foreign_ns > floor_ns && a.foreign_ns * 100 > m_report.body_ns)
        m_report.warnings.push_back(
            "other tasks ran about " + std::to_string(a.foreign_ns / 1'000'000) +
            " ms on the reserved CPUs " + format_cpulist(m_report.pinned_cpus) + " during the " +
            std::to_string(static_cast<long long>(body_ms)) + " ms body: " +
            (m_report.other_segments.empty()
                 ? std::string("a non-krex process or kernel work")
                 : "another krex segment's tenants (" + m_report.other_segments.front() +
                       ", see its warning), a non-krex process or kernel work") +
            " shares the measuring cores");
    }
    if (static_cast<double>(a.involuntary_switches) > 2.0 + body_ms / 100.0)
      m_report.warnings.push_back("the measuring thread was preempted " +
                                  std::to_string(a.involuntary_switches) + " times during the " +
                                  std::to_string(static_cast<long long>(body_ms)) + " ms body");
  }

  tenant_core* m_tenant;
  device_ops& m_ops;
  std::uint64_t m_body_start = 0;
  std::uint64_t m_lap = 0;  // the end of the last step taken (enter)
  region_report m_report;
  region_context m_context;  // outlives m_steps: their undo writes into it
  cpu_watch m_watch;
  std::optional<steps> m_steps;  // engaged while the region holds (or is entering)
};

KREX_DECL region_core* enter_region(tenant_core& t, device_ops& ops) {
  return new region_core(t, ops);
}
KREX_DECL void core_deleter::operator()(region_core* r) const noexcept { delete r; }
KREX_DECL void exit_region(region_core& r) { r.exit(); }
KREX_DECL const region_report& region_report_of(const region_core& r) noexcept {
  return r.report();
}

}  // namespace detail
}  // namespace krex
