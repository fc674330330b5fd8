// SPDX-License-Identifier: Apache-2.0
#pragma once

// A tenant's membership of the node, as pieces that each undo themselves.
// The tenant (krex/impl/tenant_core.hpp) takes them in join order and holds them so
// that destroying them is its leave, in reverse:
//
//   slot_claim       claims the slot          frees it (and closes the leave's
//                                              passage through the gate)
//   isolation        the freeze leaf and the  leaves the leaf, gives the CPU
//                    CPU confinement           mask back
//   agent_membership the agent thread and     stops the agent, detaches the
//                    automatic gating          backend
//
// The leave begins with slot_claim::leave_through_gate (the tenant calls it
// before the pieces go): while a sibling's region is between its drain and
// its freeze, this tenant must not vanish, so it leaves inside a submission.

#include <krex/detail/cpu/slices.hpp>
#include <krex/detail/device/device_ops.hpp>
#include <krex/detail/freeze/freezer.hpp>
#include <krex/detail/layout.hpp>
#include <krex/detail/slots/futex.hpp>
#include <krex/detail/slots/slots.hpp>
#include <krex/detail/slots/submit.hpp>
#include <krex/error.hpp>

#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace krex::detail {

/// How long a joiner retries when every slot is taken but some only for a
/// moment (being claimed, reaped or left).
inline constexpr std::uint64_t claim_retry_ns = 2'000'000'000ULL;

/// claim_slot, waiting out a full table whose slots are partly taken only
/// for a moment (a joiner claiming, a tenant leaving, a reaper's
/// reservation): it tries again, sleeping (2 ms doubling to 50 ms), for
/// claim_retry_ns. A table of joined tenants fails at once. The error counts
/// the slots of each kind (issue 38: 300 joiners were told "256 tenants are
/// already joined" when 254 were).
KREX_DETAIL_COLD inline std::uint32_t claim_free_slot(node_state& n, std::uint32_t device) {
  const std::uint64_t give_up = now_ns() + claim_retry_ns;
  std::uint64_t nap = 2'000'000;
  for (;;) {
    const std::uint32_t i = claim_slot(n, device);
    if (i < max_tenants) return i;
    std::uint32_t joined = 0, joining = 0, leaving = 0, reserved = 0;
    for (const tenant_slot& t : n.tenants) {
      const std::int32_t pid = t.owner.load();
      const std::uint32_t st = t.state.load();
      if (pid < 0)
        ++reserved;
      else if (pid > 0)
        ++(st == slot_active ? joined : st == slot_leaving ? leaving : joining);
    }
    const std::uint32_t moment = joining + leaving + reserved;
    const std::uint64_t now = now_ns();
    if (moment != 0 && now < give_up) {
      const std::uint64_t ns = nap < give_up - now ? nap : give_up - now;
      timespec ts{0, static_cast<long>(ns)};
      ::nanosleep(&ts, nullptr);
      nap = nap * 2 > 50'000'000 ? 50'000'000 : nap * 2;
      continue;
    }
    throw error(step::join,
                cat({"no free tenant slot: all ", max_tenants,
                     " slots of this node's segment are taken: ", joined, " by joined tenants, ",
                     joining, " by tenants still joining, ", leaving, " by tenants leaving, ",
                     reserved, " reserved by reapers",
                     moment != 0 ? cat({" (still so after retrying for ",
                                        claim_retry_ns / 1'000'000, " ms)"})
                                 : std::string()}),
                0, "wait for some to leave, or run `krexctl status` to see who holds them");
  }
}

/// The tenant's slot: claimed at construction (m.index and m.slot point at
/// it), freed at destruction. A claimed slot is never left by itself: the
/// leave passes the gate first (leave_through_gate), and the destructor closes
/// that passage once the slot is free.
class slot_claim {
 public:
  explicit slot_claim(member& m) : m_m(m) {
    m.index = claim_free_slot(*m.node, m.device);
    m.slot = &m.node->tenants[m.index];
    m.slot->syncing.store(0);  // a reaped slot may keep a dead agent's flag
    m_pid = m.slot->owner.load();
    m_start_time = m.slot->start_time.load();
    m_pidns = m.slot->pidns.load();
  }
  slot_claim(const slot_claim&) = delete;
  slot_claim& operator=(const slot_claim&) = delete;

  /// The leave's first act: enter the gate (a region raised after this waits
  /// for our in_submit, which drops to 0 only once the slot is free), run
  /// `inside` (the backend's teardown, which must not overlap a sibling's
  /// region), and mark the slot leaving (holders skip it from here on).
  template <class Inside>
  void leave_through_gate(Inside&& inside) noexcept {
    if (!still_ours()) {  // reaped: the slot (and its gate count) is not ours to touch
      inside();
      return;
    }
    submit_enter(m_m);
    m_passed = true;
    inside();
    m_m.slot->state.store(slot_leaving);
  }

  /// True while the slot is still this claim's: a tenant that was reaped
  /// (wrongly judged dead, or stopped past a foreign tenant's heartbeat) and
  /// whose slot another tenant claimed since must not free that tenant.
  bool still_ours() const noexcept {
    const tenant_slot& s = *m_m.slot;
    return s.owner.load() == m_pid && s.start_time.load() == m_start_time &&
           s.pidns.load() == m_pidns;
  }

  ~slot_claim() {
    tenant_slot& s = *m_m.slot;
    if (!still_ours()) {  // reaped meanwhile: the slot is someone else's (or free)
      if (!m_passed) return;
      --submit_depth;  // and our own pass through its gate given back (never below 0:
      // a reap that came after our pass zeroed the count already)
      std::uint32_t v = s.in_submit.load();
      while (v > 0 && !s.in_submit.compare_exchange_weak(v, v - 1)) {
      }
      futex_wake_all(s.in_submit);
      return;
    }
    s.ticket.store(no_ticket);
    s.start_time.store(0);
    s.domain_hash.store(0);
    s.state.store(slot_free);
    std::int32_t me = m_pid;
    s.owner.compare_exchange_strong(me, 0);
    if (!m_passed) return;
    --submit_depth;
    s.in_submit.store(0);
    futex_wake_all(s.in_submit);
    futex_wake_all(m_m.dev->acks);
  }

 private:
  member& m_m;
  bool m_passed = false;
  std::int32_t m_pid = 0;            ///< the owner word this claim wrote
  std::uint64_t m_start_time = 0;    ///< with the start time and pid namespace it recorded
  std::uint64_t m_pidns = 0;
};

/// Steps 3 and 4, tenant side: the freeze leaf of this tenant's slot, and
/// the confinement off every device's reserved cores. The destructor leaves
/// the leaf of the freezer it holds (from the moment the freezer is open:
/// leave also cleans up what a failed enter, or a crashed run, left) and
/// gives the process its CPU mask back.
class isolation {
 public:
  explicit isolation(std::uint32_t slot) noexcept : m_slot(slot) {}
  isolation(const isolation&) = delete;
  isolation& operator=(const isolation&) = delete;

  /// The freezer whose leaf of this slot is left at destruction.
  void hold(freezer& f) noexcept { m_freezer = &f; }
  /// Enters the held freezer's leaf (freezer::enter).
  void enter() { m_freezer->enter(m_slot); }
  /// Confines every thread of this process to `cpus` (confine_process).
  void confine(const std::vector<int>& cpus) { m_previous_mask = confine_process(cpus); }

  ~isolation() {
    if (m_freezer != nullptr) m_freezer->leave(m_slot);
    if (m_previous_mask.empty()) return;
    try {
      confine_process(m_previous_mask);
    } catch (...) {
      // Leaving must not throw; the process keeps the confined mask.
    }
  }

 private:
  std::uint32_t m_slot;
  freezer* m_freezer = nullptr;
  std::vector<int> m_previous_mask;
};

/// The agent thread (it runs `loop(stop)`, draining this process's device
/// work when a sibling's region asks) and, once attached, the backend's
/// automatic gating. The slot turns active when the agent runs. The
/// destructor stops the agent, then detaches the backend.
template <class Backend>
class agent_membership {
 public:
  /// Starts the agent; `name` is its thread name (this process's proof of
  /// membership of its slot, detail/identity.hpp), set before the slot turns
  /// active, so before any holder may look.
  template <class Loop>
  agent_membership(member& m, Backend& b, const char* name, Loop&& loop) : m_m(m), m_backend(b) {
    m_thread = std::make_unique<std::thread>(
        [this, l = std::forward<Loop>(loop)]() mutable { l(m_stop); });
    ::pthread_setname_np(m_thread->native_handle(), name);
    m.slot->state.store(slot_active);
  }
  agent_membership(const agent_membership&) = delete;
  agent_membership& operator=(const agent_membership&) = delete;

  /// Attaches the backend's automatic gating (its optional `attach(member&)`).
  void attach() {
    backend_attach(m_backend, m_m, 0);
    m_attached = true;
  }

  ~agent_membership() {
    m_stop.store(true);
    m_m.dev->agent_bell.fetch_add(1);
    futex_wake_all(m_m.dev->agent_bell);
    if (m_thread->joinable()) m_thread->join();
    if (m_attached) backend_detach(m_backend, 0);
  }

 private:
  member& m_m;
  Backend& m_backend;
  std::atomic<bool> m_stop{false};
  bool m_attached = false;
  std::unique_ptr<std::thread> m_thread;
};

}  // namespace krex::detail
