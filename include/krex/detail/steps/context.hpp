// SPDX-License-Identifier: Apache-2.0
#pragma once

// What the steps of one region share (not a step itself): the member they act
// for, the lease every step checks before it acts, how the region's exit
// began, and the region's report, into which each step's undo writes what it
// found. The steps (lock, gate, drain, freeze, quiet, pin: one file each in
// this directory) never include one another; only the region
// (krex/impl/region_core.hpp) knows their order. It holds them so that
// destroying them is the undo, in reverse: the lock's claim on the exit comes
// first (lock_step::begin_exit sets `exit`), then each step's own exit reads
// it.

#include <krex/detail/slots/slots.hpp>
#include <krex/error.hpp>
#include <krex/report.hpp>

#include <unistd.h>

#include <cstdint>
#include <string>

namespace krex::detail {

/// True while `m` holds its device's lease in the state `flags` (0: entering
/// or in the body, lease_exiting: ending). Checked immediately before each
/// step of the holder that a recoverer would own once the lease expired.
inline bool lease_held(const member& m, std::uint32_t flags = 0) noexcept {
  return m.dev->lease_slot.load() == ((m.index + 1) | flags);
}

struct region_context {
  region_context(member& mem, region_report& r) noexcept : m(mem), report(r), pid(::getpid()) {}
  region_context(const region_context&) = delete;
  region_context& operator=(const region_context&) = delete;

  member& m;
  /// The region's report. Each step's undo writes what it found into it
  /// (lease_lost, thaw_failed, freeze_broken); it outlives the steps.
  region_report& report;
  pid_t pid;  ///< the process that entered (a forked child's copy touches nothing shared)

  /// How the exit began, decided once by the lock step's claim before any step's undo.
  enum class exit_kind {
    entering,  ///< not exiting (or the lock was never taken: nothing to undo)
    ours,      ///< the claim succeeded: each undo runs while the lease is still ours
    lost,      ///< a recoverer took the lease (expired, or krexctl recover): it thawed,
               ///< lowered the gate and moved the lock on; touch none of it
    forked,    ///< a forked child's copy of the region: the region is the parent's
  };
  exit_kind exit = exit_kind::entering;

  /// Whether the body ran and ended (the lock step's undo then counts the
  /// region, report.body_ns long, in the device's statistics).
  bool body_ended = false;

  /// Exiting, with the lease still ours right now: each shared write of an
  /// undo happens only while this holds, checked right before it.
  bool ours() const noexcept { return lease_held(m, lease_exiting); }

  /// The undo of a step holding a shared word (the lock's ticket, the gate's
  /// epoch). ours: `phase` while the lease is ours, then `release(true)`
  /// (false: the lease was lost). lost: `release(false)`, which touches only
  /// what is still this region's. A fork's copy touches nothing shared.
  template <class Release>
  void release_shared(std::uint32_t phase, Release&& release) noexcept {
    switch (exit) {
      case exit_kind::ours:
        if (ours()) set_phase(*m.dev, phase);
        if (!release(true)) report.lease_lost = true;
        break;
      case exit_kind::lost: release(false); break;
      default: break;
    }
  }

  /// Throws krex::error(step::lock) if this region's lease was taken away
  /// while it was entering (`what`: the step it was about to take).
  void check_lease(const char* what) const {
    if (lease_held(m)) return;
    throw error(step::lock,
                cat({"the region's lease expired or was taken away before ", what,
                     " (this process was stopped or starved for longer than its lease, or "
                     "`krexctl recover --force` ran): the device was handed on"}),
                0, "enter the region again; raise lease / KREX_LEASE_MS if entering is slow");
  }
};

}  // namespace krex::detail
