// SPDX-License-Identifier: Apache-2.0
#pragma once

// The tenant's join and leave (krex::basic_tenant is its façade, krex/tenant.hpp):
// compiled once, over the backend as device_ops. Header-only builds
// include this from krex/tenant.hpp; under KREX_SEPARATE_COMPILATION only
// <krex/impl/src.hpp> does.

#include <krex/detail/config.hpp>
#include <krex/detail/core.hpp>
#include <krex/detail/cpu/slices.hpp>
#include <krex/detail/device/device_ops.hpp>
#include <krex/detail/device/device_registry.hpp>
#include <krex/detail/freeze/freezer.hpp>
#include <krex/detail/guardian/guardian.hpp>
#include <krex/detail/guardian/guardian_recover.hpp>
#include <krex/detail/segment/segment.hpp>
#include <krex/detail/segment/validate.hpp>
#include <krex/detail/slots/slots.hpp>
#include <krex/detail/steps/drain.hpp>
#include <krex/error.hpp>
#include <krex/impl/membership.hpp>
#include <krex/options.hpp>

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace krex {
namespace detail {

/// The tenants of this process, so that fork() can cut the child's copies
/// off the parent's membership before any code of the child runs. An
/// intrusive list (nothing is allocated at fork); pthread_atfork keeps it
/// consistent across a fork from another thread.
struct fork_link {
  fork_link* prev = nullptr;
  fork_link* next = nullptr;
  void* owner = nullptr;
  void (*on_child)(void* owner) noexcept = nullptr;  ///< runs in the child, right after fork
};

struct fork_registry {
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  fork_link head;

  static fork_registry& get() noexcept {
    static fork_registry r;
    static std::once_flag hooks;
    std::call_once(hooks, [] {
      ::pthread_atfork([] { ::pthread_mutex_lock(&get().mu); },
                       [] { ::pthread_mutex_unlock(&get().mu); },
                       [] {
                         fork_registry& g = get();
                         for (fork_link* l = g.head.next; l != nullptr;) {
                           fork_link* next = l->next;  // on_child may unlink nothing: keep going
                           l->on_child(l->owner);
                           l = next;
                         }
                         ::pthread_mutex_unlock(&g.mu);
                       });
    });
    return r;
  }
  void add(fork_link& l) noexcept {
    ::pthread_mutex_lock(&mu);
    l.prev = &head;
    l.next = head.next;
    if (head.next != nullptr) head.next->prev = &l;
    head.next = &l;
    ::pthread_mutex_unlock(&mu);
  }
  void remove(fork_link& l) noexcept {
    ::pthread_mutex_lock(&mu);
    if (l.prev != nullptr) l.prev->next = l.next;
    if (l.next != nullptr) l.next->prev = l.prev;
    l.prev = l.next = nullptr;
    ::pthread_mutex_unlock(&mu);
  }
};

/// The tenant (krex::basic_tenant is its façade): one process's membership
/// of the node for one device, joined by the constructor and left by leave()
/// or the destructor. Not copyable or movable (the agent thread and the fork
/// registry refer to it).
class tenant_core {
 public:
  /// Joins with `o` (KREX_* overrides already applied); `ops` outlives this.
  tenant_core(const options& o, device_ops& ops) : m_backend(ops) { join(o); }
  ~tenant_core() {
    leave();
    fork_registry::get().remove(m_fork_link);
  }
  tenant_core(const tenant_core&) = delete;
  tenant_core& operator=(const tenant_core&) = delete;

  /// krex::basic_tenant::leave().
  void leave() noexcept {
    if (!m_joined) return;
    if (m_owner_pid != ::getpid()) {
      // A child made without fork()'s atfork handlers (a raw clone).
      detach_in_child();
      return;
    }
    m_joined = false;
    if (m_device_entry) m_device_entry->remove();
    m_membership.reset();  // its pieces, each undone, in reverse (membership)
    // From here on, guards of this object work against a private, never-raised gate.
    m_member.node = nullptr;
    m_member.dev = &m_detached_dev;
    m_member.slot = &m_detached_slot;
  }

  bool joined() const noexcept { return m_joined; }
  /// The shared-state view of guards and regions (its address never changes).
  member& shared() noexcept { return m_member; }
  const member& shared() const noexcept { return m_member; }
  const std::string& segment_name() const noexcept { return m_segment->name(); }
  freeze_method freeze() const noexcept {
    return m_freezer ? m_freezer->method() : freeze_method::none;
  }
  std::string cgroup_root() const { return m_freezer ? m_freezer->root() : std::string(); }
  const join_timings& join_report() const noexcept { return m_join; }
  const std::vector<int>& reserved_cpus() const noexcept { return m_reserved; }
  const std::vector<std::string>& protection_notes() const noexcept { return m_notes; }

  /// Starts a guardian if the segment's last one died (region entry; a
  /// heartbeat check on the fast path).
  void check_guardian() noexcept {
    if (m_joined && m_member.node != nullptr && !guardian_recently_seen(*m_member.node))
      ensure_guardian(*m_member.node, m_recovery);
  }
  /// Throws krex::error(`s`) if this object is a forked child's copy of its
  /// parent's tenant.
  void check_owner(step s) const {
    if (!m_forked && (!m_joined || m_owner_pid == ::getpid())) return;
    throw error(
        s,
        cat({"this krex::tenant was joined by process ", m_owner_pid, "; process ", ::getpid(),
             " is a forked child and holds only a copy of it, which is not a member"}),
        0, "a forked child must construct its own krex::tenant (the parent's stays the parent's)");
  }
  /// The freezer regions use for siblings.
  freezer* sibling_freezer() noexcept { return m_freezer ? &*m_freezer : nullptr; }
  /// Other segments whose tenants use this tenant's device now (split segments).
  std::vector<other_segment> other_segments() const {
    return m_device_entry ? m_device_entry->others() : std::vector<other_segment>{};
  }
  /// What the last split check could not do (a flooded registry); "" if nothing.
  std::string split_note() const { return m_device_entry ? m_device_entry->note() : std::string(); }

 private:
  // The membership's pieces (impl/membership.hpp), in join order: the
  // leave is their destruction, in reverse, after the passage through the
  // gate that every leave starts with.
  struct membership {
    membership(device_ops& b, member& mem) : backend(b), m(mem) {}
    membership(const membership&) = delete;
    membership& operator=(const membership&) = delete;
    ~membership() {
      if (!slot) return;
      slot->leave_through_gate([&] {
        if (m.opts.release_on_leave()) backend.release();
      });
    }
    device_ops& backend;
    member& m;
    std::optional<detail::slot_claim> slot;
    std::optional<detail::isolation> isolation;
    std::optional<agent_membership<device_ops>> agent;
  };

  // The join, phase by phase (the constructor).
  KREX_DETAIL_COLD void join(const options& o) {
    join_clock clk;
    m_member.opts = o;
    const int count = m_backend.device_count();
    if (count == 0)
      throw error(step::options,
                  cat({"the ", m_backend.name(),
                       " backend sees no device here (no GPU, no driver, or the *_VISIBLE_DEVICES "
                       "variable hides them)"}),
                  0, "run where a device is visible, or build krex with the host backend");
    if (o.device() >= count)
      throw error(step::options,
                  cat({"device ", o.device(), " is out of range: the ", m_backend.name(),
                       " backend has ", count, " device(s)"}),
                  0, cat({"use a device in 0..", count - 1, " (KREX_DEVICE)"}));
    const std::uint64_t key = m_backend.device_key(o.device());
    const std::string dev_name = m_backend.device_name(o.device());
    clk.lap(m_join.driver_ns);
    m_segment = std::make_unique<segment>(o);
    node_state& n = m_segment->node();
    m_member.node = &n;
    m_member.device = device_index(n, key, dev_name);
    m_member.dev = &n.devices[m_member.device];
    if (std::uint32_t serving = 0, next = 0; !queue_consistent(*m_member.dev, serving, next))
      throw error(
          step::segment,
          cat({"segment ", m_segment->path(), ": ", queue_problem(m_member.device, serving, next)}),
          0, cat({"run `krexctl recover --segment ", o.segment(), "`, then join again"}));
    clk.lap(m_join.segment_ns);
    m_membership = std::make_unique<membership>(m_backend, m_member);
    membership& j = *m_membership;
    j.slot.emplace(m_member);
    m_owner_pid = ::getpid();
    m_joined = true;
    clk.lap(m_join.slot_ns);
    try {
      isolate(j.isolation.emplace(m_member.index), count, clk);
      // Found by device, whatever the segment: see detail/device/device_registry.hpp.
      m_device_entry.emplace(key, m_segment->file_stat(), m_segment->path(), &n);
      if (!m_device_entry->available())
        m_notes.push_back(cat({"split segments: not checked (", m_device_entry->why(),
                               "): another segment on this device would go unreported"}));
      char name[16];
      as_safe::agent_thread_name(m_member.index, name);
      j.agent.emplace(m_member, m_backend, name,
                      [this](const std::atomic<bool>& stop) { agent_loop(stop); });
      clk.lap(m_join.agent_ns);
      j.agent->attach();
      clk.lap(m_join.gating_ns);
      // Last, once confined off the reserved cores (the guardian inherits
      // this thread's CPU mask) and with the recovery config complete.
      ensure_guardian(n, m_recovery);
      clk.lap(m_join.guardian_ns);
      // From here on a fork() cuts the child's copy off (detach_in_child).
      m_fork_link.owner = this;
      m_fork_link.on_child = [](void* self) noexcept {
        static_cast<tenant_core*>(self)->detach_in_child();
      };
      fork_registry::get().add(m_fork_link);
    } catch (const error&) {
      leave();
      throw;
    } catch (const std::exception& e) {
      leave();
      throw error(step::join, cat({"cannot start the agent thread: ", e.what()}));
    }
    m_join.total_ns = now_ns() - clk.start;
  }

  // Times the join's phases into a join_timings.
  struct join_clock {
    join_clock() noexcept : start(now_ns()), last(start) {}
    void lap(std::uint64_t& into) noexcept {
      const std::uint64_t now = now_ns();
      into = now - last;
      last = now;
    }
    std::uint64_t start;
    std::uint64_t last;
  };

  // Steps 3 and 4, tenant side: join the freeze domain (own leaf cgroup) and
  // keep off every device's reserved cores.
  KREX_DETAIL_COLD void isolate(isolation& iso, int device_count, join_clock& clk) {
    const options& o = m_member.opts;
    m_freezer.emplace(freezer::open(o.freeze(), o.cgroup_root(), m_segment->name()));
    iso.hold(*m_freezer);
    check_freeze_domain(*m_member.node, m_member.index, m_freezer->method(), m_freezer->root());
    const identity_domain id =
        make_identity_domain(o.access(), m_segment->path().c_str(), &m_segment->file_stat());
    if (m_freezer->method() == freeze_method::signal)
      check_signal_namespace(*m_member.node, m_member.index, id.pidns);
    m_freezer->bind(id, m_member.node);
    prepare_recovery();
    m_recovery.identity = id;
    m_member.recovery = &m_recovery;
    // The gate's parked submitters and the lock's waiters recover a dead or
    // expired holder through this (the steps never call recovery directly).
    m_member.recover = recover_dead_holder;
    iso.enter();
    note_downgrades();
    clk.lap(m_join.freeze_ns);
    // A stale segment or cgroup tree of a crashed run: recover devices whose
    // holder is gone, reap dead tenants, remove leaves nobody owns.
    recover_node(*m_member.node, m_recovery);
    clk.lap(m_join.recover_ns);
    // The leaf sweep visits every slot's leaf path (max_tenants of them). A
    // live guardian sweeps the same leaves periodically, so a tenant joining
    // a healthy segment leaves it to the guardian.
    if (!guardian_recently_seen(*m_member.node)) {
      clean_stale_leaves(*m_member.node, m_recovery, m_member.index);
      m_join.swept = true;
    }
    clk.lap(m_join.sweep_ns);
    if (o.pin() || o.confine()) {
      std::vector<std::vector<int>> local;
      for (int d = 0; d < device_count; ++d) local.push_back(m_backend.local_cpus(d));
      const std::vector<slice> slices =
          split(topology::read(), device_count, o.reserved_cores(), local);
      if (o.pin()) m_reserved = slices[static_cast<std::size_t>(o.device())].reserved;
      if (o.confine()) iso.confine(unreserved(slices));
    }
    clk.lap(m_join.topology_ns);
  }

  // Says, once, every way this tenant's regions fall short of full protection.
  KREX_DETAIL_COLD void note_downgrades() {
    const options& o = m_member.opts;
    const freeze_method m = m_freezer->method();
    if (o.freeze() == freeze_method::none)
      m_notes.push_back(
          "freeze: off (freeze=none / KREX_FREEZE=none): siblings keep running "
          "during regions");
    else if (o.freeze() == freeze_method::automatic && m != freeze_method::cgroup_v2)
      m_notes.push_back(cat({"freeze: auto chose ", to_string(m), " because ",
                             m_freezer->notes().empty() ? "cgroup2 is not available"
                                                        : std::string_view(m_freezer->notes())}));
    if (m == freeze_method::signal)
      m_notes.push_back(
          "freeze: signal stops a sibling's process group only; children that left "
          "it keep running");
    if (!m_segment->moved_because().empty())
      m_notes.push_back(cat({"segment: ", m_segment->moved_because(),
                             ", so this user's segment is ", m_segment->path(),
                             " (every tenant of this user follows the same move; "
                             "remove the squatting file as root, or set KREX_SHM_DIR)"}));
    if (!o.pin())
      m_notes.push_back(
          "pin: off (pin=false / KREX_PIN=0): the measuring thread is "
          "not pinned to reserved cores");
    if (!o.confine())
      m_notes.push_back(
          "confine: off (KREX_CONFINE=0): this tenant's threads may run on other "
          "devices' reserved cores");
    // Gating is reported by region_report::gating (the backend decides it
    // after this, when it attaches).
  }

  // What a recoverer of this tenant thaws by: its own method and root, and
  // the cgroup it came from (where a guardian it starts moves itself).
  KREX_DETAIL_COLD void prepare_recovery() {
    const std::string& root = m_freezer->root();
    m_recovery = make_recovery_config(m_freezer->method(), root);
    recovery_config& c = m_recovery;
    c.own_dir = m_freezer->owns_root();
    if (c.method != freeze_method::cgroup_v2 && c.method != freeze_method::cgroup_v1) return;
    std::string home = cgroup::self_view::read().locate(c.method == freeze_method::cgroup_v2).own;
    // Never inside the root (a nested tenant's origin is a sibling's leaf):
    // then the root's parent.
    if (home.empty() || home == root || home.compare(0, root.size() + 1, root + "/") == 0)
      home = root.substr(0, root.rfind('/'));
    if (!home.empty()) as_safe::copy_text(c.home, sizeof c.home, home.c_str());
  }

  void agent_loop(const std::atomic<bool>& stop) noexcept {
    m_backend.bind(m_member.opts.device());
    member& m = m_member;
    while (!stop.load()) {
      // Read the bell before the gate: a raise after this read changes the
      // bell, so the wait below returns at once instead of missing it.
      const std::uint32_t bell = m.dev->agent_bell.load();
      m.slot->heartbeat_ns.store(now_ns(), std::memory_order_relaxed);
      if (m_device_entry) m_device_entry->beat(now_ns());  // the registry entry's heartbeat
      agent_drain(m, m_backend, m.dev->gate.load(), stop);
      // A guardian killed mid-region is replaced by any tenant still running
      // (the holder's own agent included) within about half a second.
      if (!guardian_recently_seen(*m.node)) ensure_guardian(*m.node, m_recovery);
      futex_wait(m.dev->agent_bell, bell, now_ns() + 100'000'000, 100'000'000);
    }
  }

  // In a forked child (see fork_registry): the copy lets go of everything
  // shared, without touching it. Runs right after fork, in the child's only
  // thread: plain stores, nothing that allocates or locks.
  void detach_in_child() noexcept {
    m_forked = true;
    m_joined = false;
    if (m_device_entry) m_device_entry->forget();  // the parent's entry
    // The parent's membership: its agent thread does not exist here, its
    // slot, leaf, mask and gating are the parent's. Never undone here.
    (void)m_membership.release();
    m_member.node = nullptr;
    m_member.dev = &m_detached_dev;
    m_member.slot = &m_detached_slot;
  }

  device_ops& m_backend;
  std::unique_ptr<segment> m_segment;
  member m_member;
  std::unique_ptr<membership> m_membership;  // engaged from the slot's claim to the leave
  fork_link m_fork_link;
  pid_t m_owner_pid = 0;  // the process that joined
  bool m_forked = false;  // this is a forked child's copy
  bool m_joined = false;
  std::optional<freezer> m_freezer;
  std::optional<device_entry> m_device_entry;  // in the device registry
  recovery_config m_recovery;
  std::vector<int> m_reserved;
  std::vector<std::string> m_notes;
  join_timings m_join;
  device_state m_detached_dev{};
  tenant_slot m_detached_slot{};
};

#if defined(KREX_SEPARATE_COMPILATION)
void link_krex_compiled_or_compile_krex_impl_src_hpp() noexcept {}
#endif  // defined(KREX_SEPARATE_COMPILATION)

// The façade's boundary (detail/core.hpp).
KREX_DECL tenant_core* join_node(const options& resolved, device_ops& ops) {
  return new tenant_core(resolved, ops);
}
KREX_DECL void core_deleter::operator()(tenant_core* t) const noexcept { delete t; }
KREX_DECL void leave_node(tenant_core& t) noexcept { t.leave(); }
KREX_DECL bool core_joined(const tenant_core& t) noexcept { return t.joined(); }
KREX_DECL member& core_member(tenant_core& t) noexcept { return t.shared(); }
KREX_DECL const options& core_options(const tenant_core& t) noexcept { return t.shared().opts; }
KREX_DECL std::uint32_t core_slot(const tenant_core& t) noexcept { return t.shared().index; }
KREX_DECL slot_counts core_slot_counts(const tenant_core& t) noexcept {
  const tenant_slot& s = *t.shared().slot;
  return {s.drains.load(), s.syncs.load(), s.submits.load()};
}
KREX_DECL void check_core_owner(const tenant_core& t, step s) { t.check_owner(s); }
KREX_DECL const std::string& core_segment_name(const tenant_core& t) noexcept {
  return t.segment_name();
}
KREX_DECL freeze_method core_freeze(const tenant_core& t) noexcept { return t.freeze(); }
KREX_DECL std::string core_cgroup_root(const tenant_core& t) { return t.cgroup_root(); }
KREX_DECL const join_timings& core_join_report(const tenant_core& t) noexcept {
  return t.join_report();
}
KREX_DECL const std::vector<int>& core_reserved_cpus(const tenant_core& t) noexcept {
  return t.reserved_cpus();
}
KREX_DECL const std::vector<std::string>& core_protection_notes(const tenant_core& t) noexcept {
  return t.protection_notes();
}
KREX_DECL bool process_holds_tenant() noexcept {
  fork_registry& r = fork_registry::get();
  ::pthread_mutex_lock(&r.mu);
  const bool any = r.head.next != nullptr;
  ::pthread_mutex_unlock(&r.mu);
  return any;
}

}  // namespace detail

KREX_DECL bool remove_segment(const options& o) noexcept {
  try {
    return ::unlink(detail::joined_segment_id(o).path().c_str()) == 0;
  } catch (...) {
    return false;
  }
}

}  // namespace krex
