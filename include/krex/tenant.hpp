// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <krex/backend/default.hpp>
#include <krex/detail/segment.hpp>
#include <krex/detail/slots.hpp>
#include <krex/drain.hpp>
#include <krex/error.hpp>
#include <krex/freeze.hpp>
#include <krex/gate.hpp>
#include <krex/guardian.hpp>
#include <krex/options.hpp>
#include <krex/pin.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace krex {
namespace detail {
// Optional backend hooks, called when present: attach(member&) after the slot
// is claimed (automatic gating subscribes here), detach() before it is freed,
// gating_note() for the region report (e.g. "cupti", "explicit: profiler attached").
template <class B>
auto backend_attach(B& b, member& m, int) -> decltype(b.attach(m), void()) {
  b.attach(m);
}
template <class B>
void backend_attach(B&, member&, long) {}
template <class B>
auto backend_detach(B& b, int) noexcept -> decltype(b.detach(), void()) {
  b.detach();
}
template <class B>
void backend_detach(B&, long) noexcept {}
template <class B>
auto backend_gating_note(const B& b, int) -> decltype(std::string(b.gating_note())) {
  return std::string(b.gating_note());
}
template <class B>
std::string backend_gating_note(const B&, long) {
  return "explicit";
}
}  // namespace detail

/// One process's membership of the node for one device: a slot in the node
/// segment and an agent thread that drains this process's device work when a
/// sibling starts a region. Usable from any thread of its process; neither
/// copyable nor movable (guards and regions refer to it).
///
/// Joining throws krex::error: bad options or KREX_* values (step::options),
/// a device out of range, a segment that cannot be opened or has another
/// layout (step::segment), no free slot (step::join).
template <class Backend>
class basic_tenant {
 public:
  using backend_type = Backend;

  explicit basic_tenant(const options& o = options{})
      : basic_tenant(o.with_env(), resolved_tag{}) {}

  ~basic_tenant() { leave(); }
  basic_tenant(const basic_tenant&) = delete;
  basic_tenant& operator=(const basic_tenant&) = delete;

  /// Leaves the node: stops the agent, frees the slot. Idempotent. Guards
  /// taken after leave() pass ungated; regions and submit() throw.
  void leave() noexcept {
    if (!m_joined) return;
    m_joined = false;
    // Leave through the gate: while a sibling's region is between its drain
    // and its freeze, this tenant must not vanish (its leaf would be gone when
    // the holder writes it). A region raised after this point waits for our
    // in_submit, which drops to 0 only once the slot is free.
    detail::submit_enter(m_member);
    m_member.slot->state.store(detail::slot_leaving);
    m_stop.store(true);
    m_member.dev->agent_bell.fetch_add(1);
    detail::futex_wake_all(m_member.dev->agent_bell);
    if (m_agent.joinable()) m_agent.join();
    if (m_attached) detail::backend_detach(m_backend, 0);
    m_attached = false;
    if (m_freezer) m_freezer->leave(m_member.index);
    if (!m_previous_mask.empty()) {
      try {
        detail::confine_process(m_previous_mask);
      } catch (...) {
        // Leaving must not throw; the process keeps the confined mask.
      }
      m_previous_mask.clear();
    }
    detail::tenant_slot& s = *m_member.slot;
    s.ticket.store(detail::no_ticket);
    s.start_time.store(0);
    s.state.store(detail::slot_free);
    std::int32_t me = s.owner.load();
    s.owner.compare_exchange_strong(me, 0);
    --detail::submit_depth;
    s.in_submit.store(0);
    detail::futex_wake_all(s.in_submit);
    detail::futex_wake_all(m_member.dev->acks);
    // From here on, guards of this object work against a private, never-raised gate.
    m_member.node = nullptr;
    m_member.dev = &m_detached_dev;
    m_member.slot = &m_detached_slot;
  }

  bool joined() const noexcept { return m_joined; }

  /// Runs `fn` inside a submit_guard: parks while a sibling holds a region.
  template <class F>
  decltype(auto) submit(F&& fn) {
    if (!m_joined)
      throw error(step::gate, "submit() on a tenant that has left the node", 0,
                  "construct a new krex::tenant to submit again");
    basic_submit_guard<basic_tenant> g{*this};
    return std::forward<F>(fn)();
  }

  /// The device ordinal (as the backend numbers it) this tenant joined for.
  int device() const noexcept { return m_member.opts.device(); }
  /// This tenant's slot in the node segment.
  std::uint32_t slot() const noexcept { return m_member.index; }
  /// The options in force (code settings with KREX_* overrides applied).
  const options& opts() const noexcept { return m_member.opts; }
  Backend& backend() noexcept { return m_backend; }
  /// Full name of the node segment (in /dev/shm).
  const std::string& segment_name() const noexcept { return m_segment->name(); }
  /// Drains this tenant's agent performed, and how many of them touched the backend.
  std::uint64_t drains() const noexcept { return m_member.slot->drains.load(); }
  std::uint64_t syncs() const noexcept { return m_member.slot->syncs.load(); }
  /// Submissions that passed the gate.
  std::uint64_t submits() const noexcept { return m_member.slot->submits.load(); }

  /// The freeze method in use (never `automatic`) and the krex cgroup root ("" if none).
  freeze_method freeze() const noexcept {
    return m_freezer ? m_freezer->method() : freeze_method::none;
  }
  std::string cgroup_root() const { return m_freezer ? m_freezer->root() : std::string(); }
  /// How this tenant's submissions are gated: "explicit", or what the backend
  /// reports for automatic gating (e.g. "cupti", or why it fell back).
  std::string gating_note() const { return detail::backend_gating_note(m_backend, 0); }
  /// This device's measuring cores (empty when pinning is off).
  const std::vector<int>& reserved_cpus() const noexcept { return m_reserved; }
  /// Why this tenant's regions protect less than krex can at best, one line
  /// each, decided at join: `auto` fell back to a weaker freeze method (and
  /// why), freezing, pinning or confinement turned off by an option. Every
  /// region copies them into region_report::notes.
  const std::vector<std::string>& protection_notes() const noexcept { return m_notes; }

  /// Not part of the API: the shared-state view used by guards and regions.
  detail::member& detail_member() noexcept { return m_member; }
  /// Not part of the API: starts a guardian if the segment's last one died
  /// (region entry; a heartbeat check on the fast path).
  void detail_check_guardian() noexcept {
    if (m_joined && m_member.node != nullptr && !detail::guardian_recently_seen(*m_member.node))
      detail::ensure_guardian(*m_member.node, m_recovery);
  }
  /// Not part of the API: how this tenant (and the guardians it starts) thaws siblings.
  const detail::recovery_config& detail_recovery() const noexcept { return m_recovery; }
  /// Not part of the API: the freezer regions use for siblings.
  detail::freezer* detail_freezer() noexcept { return m_freezer ? &*m_freezer : nullptr; }

 private:
  struct resolved_tag {};

  basic_tenant(const options& o, resolved_tag) : m_backend(o) {
    m_member.opts = o;
    const int count = m_backend.device_count();
    if (o.device() >= count)
      throw error(step::options,
                  "device " + std::to_string(o.device()) + " is out of range: the " +
                      Backend::name + " backend has " + std::to_string(count) + " device(s)",
                  0, "use a device in 0.." + std::to_string(count - 1) + " (KREX_DEVICE)");
    m_segment = std::make_unique<detail::segment>(o);
    detail::node_state& n = m_segment->node();
    m_member.node = &n;
    m_member.device = detail::device_index(n, m_backend.device_key(o.device()),
                                           m_backend.device_name(o.device()));
    m_member.dev = &n.devices[m_member.device];
    m_member.index = detail::claim_slot(n, m_member.device);
    m_member.slot = &n.tenants[m_member.index];
    m_member.slot->syncing.store(0);  // a reaped slot may keep a dead agent's flag
    m_joined = true;
    try {
      isolate(count);
      m_member.slot->state.store(detail::slot_active);
      m_agent = std::thread([this] { agent_loop(); });
      detail::backend_attach(m_backend, m_member, 0);
      m_attached = true;
      // Last, once confined off the reserved cores (the guardian inherits
      // this thread's CPU mask) and with the recovery config complete.
      detail::ensure_guardian(n, m_recovery);
    } catch (const error&) {
      leave();
      throw;
    } catch (const std::exception& e) {
      leave();
      throw error(step::join, std::string("cannot start the agent thread: ") + e.what());
    }
  }

  // Steps 3 and 4, tenant side: join the freeze domain (own leaf cgroup) and
  // keep off every device's reserved cores.
  void isolate(int device_count) {
    const options& o = m_member.opts;
    m_freezer.emplace(
        detail::freezer::open(o.freeze(), o.cgroup_root(), m_segment->name()));
    detail::check_freeze_domain(*m_member.node, m_member.index, m_freezer->method(),
                                m_freezer->root());
    prepare_recovery();
    m_member.recovery = &m_recovery;
    m_freezer->enter(m_member.index);
    note_downgrades();
    // A stale segment or cgroup tree of a crashed run: recover devices whose
    // holder is gone, reap dead tenants, remove leaves nobody owns.
    detail::recover_node(*m_member.node, m_recovery);
    detail::clean_stale_leaves(*m_member.node, m_recovery, m_member.index);
    if (!o.pin() && !o.confine()) return;
    std::vector<std::vector<int>> local;
    for (int d = 0; d < device_count; ++d) local.push_back(m_backend.local_cpus(d));
    const std::vector<detail::slice> slices =
        detail::split(detail::topology::read(), device_count, o.reserved_cores(), local);
    if (o.pin()) m_reserved = slices[static_cast<std::size_t>(o.device())].reserved;
    if (o.confine()) m_previous_mask = detail::confine_process(detail::unreserved(slices));
  }

  // Says, once, every way this tenant's regions fall short of full protection.
  void note_downgrades() {
    const options& o = m_member.opts;
    const freeze_method m = m_freezer->method();
    if (o.freeze() == freeze_method::none)
      m_notes.push_back("freeze: off (freeze=none / KREX_FREEZE=none): siblings keep running "
                        "during regions");
    else if (o.freeze() == freeze_method::automatic && m != freeze_method::cgroup_v2)
      m_notes.push_back(std::string("freeze: auto chose ") + to_string(m) + " because " +
                        (m_freezer->notes().empty() ? std::string("cgroup2 is not available")
                                                    : m_freezer->notes()));
    if (m == freeze_method::signal)
      m_notes.push_back("freeze: signal stops a sibling's process group only; children that left "
                        "it keep running");
    if (!o.pin()) m_notes.push_back("pin: off (pin=false / KREX_PIN=0): the measuring thread is "
                                    "not pinned to reserved cores");
    if (!o.confine())
      m_notes.push_back("confine: off (KREX_CONFINE=0): this tenant's threads may run on other "
                        "devices' reserved cores");
    // Gating is reported by region_report::gating (the backend decides it
    // after this, when it attaches).
  }

  // What a recoverer of this tenant thaws by: its own method and root, and
  // the cgroup it came from (where a guardian it starts moves itself).
  void prepare_recovery() {
    detail::recovery_config& c = m_recovery;
    c.method = m_freezer->method();
    c.domain_hash = detail::freeze_domain_hash(m_freezer->method(), m_freezer->root());
    const std::string& root = m_freezer->root();
    if (!detail::as_safe::copy_text(c.root, sizeof c.root, root.c_str()))
      throw error(step::freeze, "the krex cgroup root path is too long: " + root, ENAMETOOLONG,
                  "choose a shorter KREX_CGROUP_ROOT");
    if (c.method != freeze_method::cgroup_v2 && c.method != freeze_method::cgroup_v1) return;
    std::string home =
        detail::cgroup::self_view::read().locate(c.method == freeze_method::cgroup_v2).own;
    // Never inside the root (a nested tenant's origin is a sibling's leaf):
    // then the root's parent.
    if (home.empty() || home == root || home.compare(0, root.size() + 1, root + "/") == 0)
      home = root.substr(0, root.rfind('/'));
    if (!home.empty())
      detail::as_safe::copy_text(c.home, sizeof c.home, home.c_str());
  }

  void agent_loop() noexcept {
    m_backend.bind(m_member.opts.device());
    detail::member& m = m_member;
    while (!m_stop.load()) {
      // Read the bell before the gate: a raise after this read changes the
      // bell, so the wait below returns at once instead of missing it.
      const std::uint32_t bell = m.dev->agent_bell.load();
      m.slot->heartbeat_ns.store(detail::now_ns(), std::memory_order_relaxed);
      detail::agent_drain(m, m_backend, m.dev->gate.load(), m_stop);
      // A guardian killed mid-region is replaced by any tenant still running
      // (the holder's own agent included) within about half a second.
      if (!detail::guardian_recently_seen(*m.node)) detail::ensure_guardian(*m.node, m_recovery);
      detail::futex_wait(m.dev->agent_bell, bell, detail::now_ns() + 100'000'000, 100'000'000);
    }
  }

  Backend m_backend;
  std::unique_ptr<detail::segment> m_segment;
  detail::member m_member;
  std::thread m_agent;
  std::atomic<bool> m_stop{false};
  bool m_joined = false;
  bool m_attached = false;
  std::optional<detail::freezer> m_freezer;
  detail::recovery_config m_recovery;
  std::vector<int> m_reserved;
  std::vector<int> m_previous_mask;
  std::vector<std::string> m_notes;
  detail::device_state m_detached_dev{};
  detail::tenant_slot m_detached_slot{};
};

}  // namespace krex
