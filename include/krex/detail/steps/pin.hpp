// SPDX-License-Identifier: Apache-2.0
#pragma once

// Step 4, pin: a quiet CPU for the measuring thread.
//
// In a region the measuring thread is pinned to its device's reserved cores
// (pin_guard) and unpinned on exit. The slices of CPUs and their reserved
// cores are the join's (detail/cpu/slices.hpp); docs/PIN.md explains the
// rules.
//
// State: the pin guard (the thread's previous mask). Shared words: none but
// the device's phase. Report: pinned, pinned_cpus. Undo (pin_step's
// destructor): the phase moves to exiting while the lease is ours, and the
// thread gets its mask back.

#include <krex/detail/cpu/slices.hpp>
#include <krex/detail/slots/slots.hpp>
#include <krex/detail/steps/context.hpp>

#include <optional>
#include <vector>

namespace krex::detail {

/// Step 4 as an object: pins the calling thread to `reserved` (when m pins
/// and the device has reserved cores) and moves the phase to pinned.
class pin_step {
 public:
  pin_step(region_context& c, const std::vector<int>& reserved) : m_c(c) {
    if (!c.m.opts.pin() || reserved.empty()) return;
    m_guard.emplace(reserved);
    set_phase(*c.m.dev, phase_pinned);
  }
  pin_step(const pin_step&) = delete;
  pin_step& operator=(const pin_step&) = delete;

  /// The exit's first shared write, while the lease is ours; then the guard
  /// restores the thread's mask.
  ~pin_step() {
    if (m_c.exit == region_context::exit_kind::ours && m_c.ours())
      set_phase(*m_c.m.dev, phase_exiting);
  }

  /// Writes whether it pinned, and to which CPUs (sorted), into the report.
  void describe(region_report& r) const {
    r.pinned = m_guard.has_value();
    r.pinned_cpus = m_guard ? m_guard->pinned() : std::vector<int>{};
  }

 private:
  region_context& m_c;
  std::optional<pin_guard> m_guard;
};

}  // namespace krex::detail
