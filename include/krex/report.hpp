// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <krex/options.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace krex {

/// What a region did to protect its body, so a harness can record how each
/// number was obtained. Filled as the region enters; the exit fields when it ends.
struct region_report {
  std::uint32_t epoch = 0;   ///< the gate epoch of this region (odd)
  std::uint32_t ticket = 0;  ///< its place in the device's FIFO
  std::uint32_t siblings_seen = 0;     ///< live siblings on the device when the gate rose
  std::uint32_t siblings_drained = 0;  ///< siblings that acked the drain
  std::uint32_t siblings_gone = 0;     ///< siblings that left or died while being drained
  std::vector<int> undrained_pids;     ///< siblings that missed the drain deadline (contended)
  std::vector<int> frozen_pids;        ///< siblings frozen for the body
  /// Signal freezing: siblings not signalled, because the process at their
  /// recorded pid is not verifiably the tenant that joined (a forged or stale
  /// slot, pid <= 1, another pid namespace or user; see docs/FAULTS.md).
  std::vector<int> unverified_pids;

  std::uint64_t lock_ns = 0;    ///< waiting for the region lock
  std::uint64_t gate_ns = 0;    ///< raising the gate, waiting for in-flight submissions
  std::uint64_t drain_ns = 0;   ///< waiting for siblings' drain acks
  std::uint64_t freeze_ns = 0;  ///< freezing siblings
  std::uint64_t pin_ns = 0;     ///< pinning the measuring thread
  std::uint64_t body_ns = 0;    ///< from entry complete to exit start
  std::uint64_t exit_ns = 0;    ///< unpin + thaw + lower gate + release

  bool gated = false;      ///< step 1 reached
  bool drained = false;    ///< step 2 completed for every sibling
  bool contended = false;  ///< a sibling missed the drain deadline and allow_contended let the region proceed
  bool frozen = false;     ///< step 3: siblings frozen (or there were none to freeze)
  bool pinned = false;     ///< step 4: measuring thread pinned to reserved cores
  bool took_over_gate = false;  ///< a dead holder's raised gate was taken over
  bool lease_lost = false;      ///< the lock was taken away before exit (lease expired)
  bool thaw_failed = false;     ///< a sibling could not be thawed at exit (see krexctl recover)
  bool freeze_broken = false;   ///< a frozen sibling ran again before the region ended (thawed by someone else)

  freeze_method freeze = freeze_method::none;  ///< method used ("none" if not frozen)
  freeze_scope scope = freeze_scope::all;
  std::vector<int> pinned_cpus;
  std::string gating = "explicit";  ///< how the holder's siblings' submissions are gated in this process

  /// Why a step is weaker than the strongest krex offers here, one line each:
  /// a fallback the tenant took at join ("freeze: auto chose signal: ..."), an
  /// option that turned a step off, siblings left unfrozen by the scope.
  std::vector<std::string> notes;
  /// What was seen during the body that may have disturbed it, one line each
  /// (non-krex work on the reserved CPUs, the body thread preempted). Empty
  /// when nothing was seen; see docs/PIN.md for what is and is not isolated.
  std::vector<std::string> warnings;
  /// Involuntary context switches of the measuring thread during the body
  /// (-1: not measured, e.g. the region ended on another thread).
  long body_preemptions = -1;
  /// Estimated CPU time other tasks spent on the pinned CPUs during the body,
  /// in /proc/stat tick resolution (-1: not measured, e.g. not pinned).
  long long reserved_foreign_ns = -1;

  /// The protection reached, e.g. "gate+drain+freeze(cgroup2)+pin", "gate+drain(contended)",
  /// "gate+drain+freeze(cgroup2,broken)" (a sibling ran again during the body), "none".
  std::string level() const {
    if (!gated) return "none";
    std::string s = "gate";
    if (drained) s += "+drain";
    else if (contended) s += "+drain(contended)";
    if (frozen && freeze != freeze_method::none)
      s += std::string("+freeze(") + to_string(freeze) + (freeze_broken ? ",broken)" : ")");
    if (pinned) s += "+pin";
    return s;
  }
};

}  // namespace krex
