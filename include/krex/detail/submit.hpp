// SPDX-License-Identifier: Apache-2.0
#pragma once

// The submitters' side of the submission gate (step 1, gate.hpp): what a
// tenant's gated call runs (submit_enter / submit_exit) and its RAII form,
// basic_submit_guard. Backends' automatic gating (CUPTI, the HIP API
// callbacks) and the launch wrappers need only this, not the holder's side.
//
// Submitter: in_submit.fetch_add(1), then load the gate. If a sibling holds
// it, undo the increment and park on the gate word (bounded; on timeout the
// holder's liveness is re-checked). See gate.hpp for the holder's half of the
// Dekker pair.

#include <krex/detail/futex.hpp>
#include <krex/detail/slots.hpp>

#include <atomic>
#include <cstdint>

namespace krex {
namespace detail {

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
  if (s.in_submit.fetch_sub(1) == 1 && s.in_submit_waiters.load() != 0)
    futex_wake_all(s.in_submit);
}

}  // namespace detail

/// RAII submission gate (step 1): while a guard lives, the tenant may put work
/// on its device; if a sibling holds a region, the constructor parks until it
/// ends. Nested guards on one thread pass at once. Costs two atomic RMWs and a
/// load when no region is held.
///
///     { krex::submit_guard g{t}; launch(...); }
template <class Tenant>
class basic_submit_guard {
 public:
  explicit basic_submit_guard(Tenant& t) noexcept : m_member(&t.detail_member()) {
    detail::submit_enter(*m_member);
  }
  ~basic_submit_guard() { detail::submit_exit(*m_member); }
  basic_submit_guard(const basic_submit_guard&) = delete;
  basic_submit_guard& operator=(const basic_submit_guard&) = delete;

 private:
  detail::member* m_member;
};

}  // namespace krex
