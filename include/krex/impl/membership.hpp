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

// The join's own slot work (here, not in slots/slots.hpp, which guards include).

/// Claims a free slot for this process on device `device`. The second pass
/// reaps dead slots and claims the first one it frees. Returns max_tenants
/// when every slot is taken (membership.hpp's claim_free_slot waits out
/// slots taken for a moment, and says who holds them).
KREX_DETAIL_COLD inline std::uint32_t claim_slot(node_state& n, std::uint32_t device) {
  const auto me = static_cast<std::int32_t>(::getpid());
  const std::uint64_t start = self_start_time();
  const std::uint64_t pidns = as_safe::pid_namespace();
  for (int pass = 0; pass < 2; ++pass) {
    for (std::uint32_t i = 0; i < max_tenants; ++i) {
      tenant_slot& s = n.tenants[i];
      std::int32_t expected = 0;
      if (s.owner.load() != 0) {
        if (pass == 0) continue;
        if (!reap_if_dead(n, i)) continue;  // a live tenant's
      }
      if (!s.owner.compare_exchange_strong(expected, me)) continue;
      s.domain_hash.store(0);  // the previous owner's, if any: not this tenant's
      s.state.store(slot_claiming);
      s.start_time.store(start);
      s.device.store(device);
      s.pidns.store(pidns);
      s.uid.store(static_cast<std::uint32_t>(::getuid()));
      s.gid.store(static_cast<std::uint32_t>(::getgid()));
      s.stop_target.store(0);
      s.stop_start_time.store(0);
      clear_holder_words(s);
      s.in_submit_waiters.store(0);
      s.submits.store(0);
      s.ack_epoch.store(0);
      s.active.store(0);
      s.drains.store(0);
      s.syncs.store(0);
      s.joined_ns.store(now_ns());
      s.heartbeat_ns.store(now_ns());
      // Stays slot_claiming until the tenant has joined its freeze domain
      // (the tenant core marks it slot_active): no holder proxy-acks it before.
      return i;
    }
  }
  return max_tenants;
}

/// Signal freezing reaches only processes of the holder's own pid namespace
/// (a pid is namespace-local): a tenant joining from another namespace than
/// the segment's live tenants is refused, clearly, instead of never being
/// frozen (or, worse, having some other process of this namespace named by
/// its pid). Reads only what slots recorded at join; signals are verified
/// on their own (identity.hpp).
KREX_DETAIL_COLD inline void check_signal_namespace(node_state& n, std::uint32_t self, std::uint64_t pidns) {
  if (pidns == 0) return;
  for (std::uint32_t i = 0; i < max_tenants; ++i) {
    if (i == self) continue;
    const tenant_slot& s = n.tenants[i];
    const std::uint64_t theirs = s.pidns.load();
    if (s.owner.load() <= 0 || theirs == 0 || theirs == pidns) continue;
    throw error(step::join,
                cat({"signal freezing cannot reach across pid namespaces: this process is in pid "
                     "namespace ",
                     pidns, ", the tenant in slot ", i, " (pid ", s.owner.load(),
                     " there) joined from pid namespace ", theirs}),
                0,
                "run every tenant of a segment in one pid namespace, use cgroup freezing "
                "(KREX_FREEZE=cgroup2 or cgroup1), or give each namespace its own KREX_SEGMENT");
  }
}

/// Finds (or claims) the segment's index for the device with node-wide identity `key`.
KREX_DETAIL_COLD inline std::uint32_t device_index(node_state& n, std::uint64_t key, const std::string& name) {
  for (std::uint32_t i = 0; i < max_devices; ++i) {
    std::uint64_t k = n.devices[i].key.load();
    if (k == key) return i;
    if (k == 0) {
      if (n.devices[i].key.compare_exchange_strong(k, key)) return i;
      if (k == key) return i;
    }
  }
  throw error(step::join,
              cat({"the node segment already tracks ", max_devices,
                   " devices and has no entry for ", name}),
              0, "remove stale segments with `krexctl clean`");
}

inline void store_text(std::atomic<std::uint64_t> (&out)[32], const std::string& s) noexcept {
  for (std::size_t w = 0; w < 32; ++w) {
    std::uint64_t v = 0;
    for (std::size_t b = 0; b < 8; ++b) {
      const std::size_t i = w * 8 + b;
      if (i < s.size() && i < 255) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(s[i])) << (8 * b);
    }
    out[w].store(v, std::memory_order_relaxed);
  }
}

/// Records (first tenant) or checks (every later one) the segment's freeze
/// method and cgroup root. Another recorded domain is replaced when no live
/// tenant joined under it (a new run of another configuration), also when
/// the new run's tenants join at once. Throws krex::error(step::join) while a
/// live tenant of another domain remains.
///
/// Each tenant publishes its domain in its slot before it looks at the
/// others' (seq_cst both): of two tenants of different domains joining at
/// once, at least one sees the other's, so they never both re-record.
KREX_DETAIL_COLD inline void check_freeze_domain(node_state& n, std::uint32_t self, freeze_method m,
                                const std::string& root) {
  const std::uint64_t h = freeze_domain_hash(m, root);
  const std::string mine = cat({to_string(m), ":", root.empty() ? std::string_view("-") : root});
  n.tenants[self].domain_hash.store(h);
  std::uint64_t seen = n.cgroup_root_hash.load();
  while (seen != h) {
    if (seen != 0) {
      // Another domain is recorded: it stays while a live tenant joined under it.
      for (std::uint32_t i = 0; i < max_tenants; ++i) {
        const std::uint64_t theirs = n.tenants[i].domain_hash.load();
        if (i == self || n.tenants[i].owner.load() == 0 || theirs == 0 || theirs == h) continue;
        if (reap_if_dead(n, i)) continue;
        n.tenants[self].domain_hash.store(0);
        throw error(step::join,
                    cat({"this tenant's freeze method and cgroup root (", mine,
                         ") differ from those of the tenants already on this node (",
                         load_text(n.cgroup_root_text), ")"}),
                    0,
                    "every tenant of a segment must use the same KREX_FREEZE and "
                    "KREX_CGROUP_ROOT (or a different KREX_SEGMENT)");
      }
    }
    if (n.cgroup_root_hash.compare_exchange_strong(seen, h)) {
      store_text(n.cgroup_root_text, mine);
      return;
    }
    // `seen` is what another joiner recorded meanwhile: look again.
  }
}

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
