// SPDX-License-Identifier: Apache-2.0
#pragma once

// The region (krex::basic_region is its façade, krex/region.hpp): its steps
// in order, their timing, its end (finish) and the checks of the region as a
// whole (the device's clocks, other segments on the device, what ran beside
// the body). Compiled once, over the backend as device_ops. Header-only
// builds include this from krex/region.hpp; under KREX_SEPARATE_COMPILATION
// only <krex/impl/src.hpp> does.
//
// Every step taken is undone, in reverse, even when a later step throws: each
// step is an object (include/krex/detail/steps/, one file each, with its
// state, its undo and its lines of the report, describe()), and the region is
// the ordered set of them.

#include <krex/detail/config.hpp>
#include <krex/detail/core.hpp>
#include <krex/detail/cpu/cpu_watch.hpp>
#include <krex/detail/device/device_ops.hpp>
#include <krex/detail/device/device_registry.hpp>
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

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

namespace krex {
namespace detail {

/// A region (krex::basic_region is its façade). Not copyable or movable.
class region_core {
 public:
  /// Enters a region on `t`'s device (krex::basic_region's constructor).
  region_core(tenant_core& t, device_ops& ops)
      : m_tenant(&t), m_ops(ops), m_context(t.shared(), m_report) {
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

  // The region is its steps, taken in order, each describing itself into the
  // report as it completes and timed into its field. Every step that a
  // recoverer would own once the lease expired checks the lease right before
  // it acts.
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

  // Takes one step (constructs it in `step`), has it describe itself into the
  // report, and times it into `ns`: from the end of the previous step to its
  // own end.
  template <class Step, class... Args>
  void take(std::uint64_t& ns, std::optional<Step>& step, Args&&... args) {
    describe(step.emplace(std::forward<Args>(args)...));
    const std::uint64_t now = now_ns();
    ns = now - m_lap;
    m_lap = now;
  }

  template <class Step>
  void describe(const Step& step) {
    step.describe(m_report);
  }

  // The freeze, then what it could not freeze: the tenants of other segments
  // on this device (detail/device/device_registry.hpp).
  void describe(const freeze_step& step) {
    step.describe(m_report);
    describe_other_segments(m_tenant->other_segments(), "uses this device", m_report);
    if (std::string note = m_tenant->split_note(); !note.empty())
      m_report.notes.push_back(std::move(note));
  }

  // The device's clocks at entry or exit, with a warning if something slows it.
  void record_clocks(device_clocks& into, const char* when) {
    into = m_ops.clocks();
    if (const unsigned long long slow = into.slowdown())
      m_report.warnings.push_back(cat({"clocks: ", slowdown_names(slow), " active at region ", when,
                                       " (SM ", into.sm_mhz, " MHz)"}));
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
      describe_other_segments(m_tenant->other_segments(), "came to this device during the body",
                              m_report);
      a.describe(m_report);
    } catch (...) {
      // Only allocation can fail here; the report then lacks the warnings.
    }
    m_context.body_ended = true;
    m_steps.reset();  // the undo, step by step in reverse: it writes what it found in m_report
    m_report.exit_ns = now_ns() - t0;
  }

  tenant_core* m_tenant;
  device_ops& m_ops;
  std::uint64_t m_body_start = 0;
  std::uint64_t m_lap = 0;  // the end of the last step taken (enter)
  region_report m_report;
  region_context m_context;  // outlives m_steps: their undo writes into it (and m_report)
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
