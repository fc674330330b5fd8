// SPDX-License-Identifier: Apache-2.0
#pragma once

// The gate, submitter side (the holder's side is the gate step,
// detail/steps/gate.hpp).
//
// Submitter: in_submit.fetch_add(1), then load the gate. If a sibling holds
// it, undo the increment and park on the gate word (bounded; on timeout the
// holder's liveness is re-checked). Holder: raise the gate with a new epoch,
// then wait until every sibling's in_submit is 0. With seq_cst on both sides
// (a Dekker pair: store gate / load in_submit against store in_submit / load
// gate) a submission either completes before the drain looks, or never
// reaches the device.

#include <krex/detail/slots/futex.hpp>
#include <krex/detail/slots/slots.hpp>

#include <atomic>
#include <cstdint>

namespace krex::detail {

inline bool gate_raised(std::uint32_t g) noexcept { return (g & 1U) != 0; }

/// Submissions of this thread that are open (nested guards pass at once: the
/// outer one already counts in in_submit, and parking it would deadlock the drain).
inline thread_local int submit_depth = 0;

/// If the gate `g` is held by a dead tenant (or one past its lease), has
/// m's recoverer (slots.hpp) recover the device: thaw its tenants, lower the
/// gate, move the lock on, reap the holder (one CAS decides who does it).
/// Returns true if this call recovered it; false also when m has no
/// recoverer (then the guardian does it).
inline bool recover_dead_gate_holder(member& m, std::uint32_t g) noexcept {
  if (m.node == nullptr || m.recover == nullptr || m.dev->gate.load() != g) return false;
  return m.recover(*m.node, m.device, recovery_of(m));
}

/// Opens a submission: returns once this tenant may put work on the device.
inline void submit_enter(member& m) noexcept {
  if (submit_depth++ > 0) return;
  tenant_slot& s = *m.slot;
  const std::uint64_t park_ns = to_ns(m.opts.gate_park());
  bool parked = false;
  for (;;) {
    s.in_submit.fetch_add(1);
    const std::uint32_t g = m.dev->gate.load();
    if (!gate_raised(g) || m.dev->holder.load() == m.index + 1) {
      if (s.dirty.load(std::memory_order_relaxed) == 0) s.dirty.store(1);
      // Counted in in_submit before leaving `parked`: a holder letting the
      // parked through (let_parked_through) never sees neither.
      if (parked) s.parked.fetch_sub(1);
      return;
    }
    if (s.in_submit.fetch_sub(1) == 1 && s.in_submit_waiters.load() != 0)
      futex_wake_all(s.in_submit);
    if (!parked) {
      s.parked.fetch_add(1);
      parked = true;
    }
    m.dev->gate_parks.fetch_add(1, std::memory_order_relaxed);
    // Park until the gate word changes; wake up every park_ns to check that
    // the holder is still alive (a dead holder must not gate us forever).
    while (m.dev->gate.load() == g) {
      futex_wait(m.dev->gate, g, now_ns() + park_ns, park_ns);
      if (m.dev->gate.load() == g) recover_dead_gate_holder(m, g);
    }
  }
}

/// Closes a submission opened by submit_enter.
inline void submit_exit(member& m) noexcept {
  if (--submit_depth > 0) return;
  tenant_slot& s = *m.slot;
  s.submits.fetch_add(1, std::memory_order_relaxed);
  if (s.in_submit.fetch_sub(1) == 1 && s.in_submit_waiters.load() != 0) futex_wake_all(s.in_submit);
}

/// Waits until slot `s`'s in_submit is 0 or `deadline_ns` passes. Returns true on 0.
inline bool wait_in_submit_zero(tenant_slot& s, std::uint64_t deadline_ns) noexcept {
  if (s.in_submit.load() == 0) return true;
  s.in_submit_waiters.fetch_add(1);
  bool ok = false;
  for (;;) {
    const std::uint32_t v = s.in_submit.load();
    if (v == 0) {
      ok = true;
      break;
    }
    if (now_ns() >= deadline_ns || !slot_alive(s)) break;
    futex_wait(s.in_submit, v, deadline_ns, 10'000'000);
  }
  s.in_submit_waiters.fetch_sub(1);
  return ok;
}

/// An open submission on this thread for the lifetime of the object: calls
/// nested in it (the holder's own probe, an agent's sync) pass a raised gate.
struct pass_gate {
  pass_gate() noexcept { ++submit_depth; }
  ~pass_gate() { --submit_depth; }
  pass_gate(const pass_gate&) = delete;
  pass_gate& operator=(const pass_gate&) = delete;
};

}  // namespace krex::detail
