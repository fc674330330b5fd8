// SPDX-License-Identifier: Apache-2.0
#pragma once

// Automatic gating written once for the runtimes' API callbacks (CUPTI,
// backend/cuda_cupti.hpp; the HIP callback table, backend/hip_callbacks.hpp):
// what a callback does when a gated call enters and leaves, and how a
// subscription ends. Each vendor file keeps only its own mechanism: which
// calls are gated, how their stream is read, how callbacks are registered.
//
// One subscription per process routes the calls of every thread to one
// tenant (the target). A call's enter callback passes the tenant's gate
// (submit_enter: it parks while a sibling holds a region); its exit callback
// closes the submission on the member it was opened on.

#include <krex/detail/slots/slots.hpp>
#include <krex/detail/slots/submit.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>

namespace krex::detail::gpu {

/// Per-process state of krex's one callback subscription.
struct gating_state {
  std::mutex mu;
  std::atomic<member*> target{nullptr};          ///< the tenant whose gate calls pass
  std::atomic<std::uint64_t> gated{0};           ///< calls that passed the gate
  std::atomic<std::uint64_t> capture_passes{0};  ///< captured launches let through a raised gate
  std::atomic<int> open{0};  ///< calls between their enter and exit callbacks (see end_gating)
};

/// A gated call's enter callback. Returns the member whose gate the call
/// passed (the exit callback hands it to call_done), or null: the call passes
/// ungated (no subscription, or a launch into a stream being captured, which
/// does not run: `captured()` is asked only while a sibling holds the gate,
/// since outside regions the check would cost a runtime call per launch, and
/// capturing code may hold locks the region needs).
template <class Captured>
member* call_enter(gating_state& st, Captured&& captured) noexcept {
  member* m = st.target.load(std::memory_order_acquire);
  if (m == nullptr) return nullptr;
  st.open.fetch_add(1);
  // Dekker pair with end_gating (store target, load open): either it waits
  // for this call, or this call sees the subscription ending and passes.
  if (st.target.load() != m) {
    st.open.fetch_sub(1);
    return nullptr;
  }
  if (gate_raised(m->dev->gate.load()) && m->dev->holder.load() != m->index + 1 &&
      submit_depth == 0 && captured()) {
    st.capture_passes.fetch_add(1, std::memory_order_relaxed);
    st.open.fetch_sub(1);
    return nullptr;
  }
  submit_enter(*m);
  return m;
}

/// A gated call's exit callback, for the member call_enter returned.
inline void call_done(gating_state& st, member& m) noexcept {
  submit_exit(m);
  st.gated.fetch_add(1, std::memory_order_relaxed);
  st.open.fetch_sub(1);
}

/// Ends the subscription made for `m` (no-op if it is not `m`'s): calls stop
/// reaching m's gate, the calls in flight (even one parked at the gate)
/// finish, bounded by 2 s, then `unsubscribe()` removes the callbacks. A
/// call whose exit callback never came would leave its thread's submit_depth
/// raised (later guards on that thread would pass ungated).
template <class Unsubscribe>
void end_gating(gating_state& st, member& m, Unsubscribe&& unsubscribe) noexcept {
  std::lock_guard<std::mutex> lock(st.mu);
  if (st.target.load() != &m) return;
  st.target.store(nullptr, std::memory_order_release);
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (st.open.load() != 0 && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  unsubscribe();
}

}  // namespace krex::detail::gpu
