// SPDX-License-Identifier: Apache-2.0
#pragma once

// A sibling: another tenant of the region holder's device, as its slot said
// when the gate rose. One type for every step that handles siblings: the gate
// snapshots them, the drain marks who acked, the freeze step and the freezer
// (detail/freeze/freezer.hpp, its signal stop records) freeze, watch and thaw them.

#include <krex/detail/slots/slots.hpp>

#include <sys/types.h>

#include <cstdint>

namespace krex::detail {

struct sibling {
  std::uint32_t slot = 0;
  pid_t pid = 0;  ///< as its slot says: a claim, verified before any signal (freezer.hpp)
  std::uint64_t start_time = 0;  ///< as its slot says (0 while it is still claiming)
  // What the region's steps learned about it (the freezer ignores these):
  bool acked = false;       ///< acked the drain (itself, or by proxy)
  bool gone = false;        ///< left or died during the region's entry
  bool proxied = false;     ///< acked by the holder: it had nothing to drain
  bool submitting = false;  ///< inside a gated call when the gate rose (its call finished first)

  /// The same slot and the same claimed pid.
  bool same(const sibling& o) const noexcept { return slot == o.slot && pid == o.pid; }
};

/// The slot's owner is no longer the one snapshotted (left, died, or the
/// slot was taken by another process), or it is dead.
inline bool sibling_gone(member& m, const sibling& sb) noexcept {
  tenant_slot& s = m.slot_at(sb.slot);
  if (s.owner.load() != sb.pid) return true;
  if (sb.start_time != 0 && s.start_time.load() != sb.start_time) return true;
  return reap_if_dead(*m.node, sb.slot, m.recovery);
}

}  // namespace krex::detail
