// SPDX-License-Identifier: Apache-2.0
#pragma once

// The guardian: a small process the library forks on demand (no daemon for
// the user to run). A dead region holder would leave its siblings frozen
// forever, and nobody inside a frozen cgroup can help; the guardian lives
// outside every tenant cgroup and watches the holders:
//
//   - on a holder's death (pidfd, else /proc polling with start time) or
//     lease expiry, in any phase, it thaws the device's tenants, lowers the
//     gate with a new epoch and moves the region lock on
//     (detail::recover_device), and takes over a recovery whose recoverer died;
//   - it skips served tickets whose waiter does not take them within the
//     hand-off deadline (detail::advance_queue);
//   - it reaps dead tenants (slot freed, in_submit discarded, leaf removed);
//   - it leaves when no live tenant is left, removing the leaves of free
//     slots and the segment's own cgroup directory (what a SIGKILLed last
//     tenant, which never ran its leave(), leaves behind).
//
// A tenant starts one at join when none is alive, and again at region entry
// if the last one died. The child is double-forked (setsid: killing the
// tenant or its group does not kill it) and does only async-signal-safe work
// after fork: raw system calls on the already mapped segment and on paths
// built from the forking tenant's own freeze configuration.

#include <krex/detail/device/device_registry.hpp>
#include <krex/detail/guardian/guardian_recover.hpp>
#include <krex/detail/guardian/guardian_sys.hpp>
#include <krex/detail/layout.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace krex::detail {

/// How often the guardian looks at leases (pidfds wake it at once on a death).
inline constexpr std::uint64_t guardian_poll_ns = 20'000'000ULL;
/// How often it scans every slot for dead tenants.
inline constexpr std::uint64_t guardian_reap_ns = 200'000'000ULL;
/// How often it removes leaves of free slots (a reaper's rmdir fails while
/// the dead tenant's last threads are still exiting).
inline constexpr std::uint64_t guardian_sweep_ns = 500'000'000ULL;
/// How often it removes its segment's dead tenants' device registry entries
/// (detail/device/device_registry.hpp; again when it leaves).
inline constexpr std::uint64_t guardian_registry_ns = 5'000'000'000ULL;
/// How long a leafless slot's heartbeat must be still before the guardian
/// frees it (reap_leafless_slots; the freeze step's leafless_reap_ns).
inline constexpr std::uint64_t guardian_leafless_ns = 2'000'000'000ULL;
/// How long it stays with no live tenant before it leaves.
inline constexpr std::uint64_t guardian_linger_ns = 300'000'000ULL;
/// A guardian whose heartbeat is older than this is replaced.
inline constexpr std::uint64_t guardian_stale_ns = 1'000'000'000ULL;
/// A tenant that claimed guardian_pid and did not finish starting one within
/// this is taken over.
inline constexpr std::uint64_t guardian_claim_ns = 2'000'000'000ULL;

/// True when the segment's guardian runs (pid + start time).
inline bool guardian_alive(const node_state& n) noexcept {
  const std::int32_t g = n.guardian_pid.load();
  return g > 0 && as_safe::alive(g, n.guardian_start_time.load());
}

/// Cheap check for the region fast path: a guardian heartbeat within 0.5 s.
inline bool guardian_recently_seen(const node_state& n) noexcept {
  const std::uint64_t hb = n.guardian_heartbeat_ns.load(std::memory_order_relaxed);
  return n.guardian_pid.load(std::memory_order_relaxed) > 0 &&
         as_safe::now_ns() - hb < 500'000'000ULL;
}

namespace guardian_impl {

inline bool any_live_tenant(node_state& n) noexcept {
  for (const tenant_slot& s : n.tenants)
    if (s.owner.load() > 0 && slot_alive(s)) return true;
  return false;
}

/// Cgroup methods: frees the slots that name a live process but have no leaf
/// under the guardian's root, once their heartbeat has been still for
/// guardian_leafless_ns. A tenant is slot_active only once in its leaf, and a
/// leaf with a process cannot be removed: such a slot was written into the
/// segment by hand, and its live pid would keep it from ever being reaped.
/// Slots of another freeze domain are left alone. Returns the slots freed.
inline std::uint32_t reap_leafless_slots(node_state& n, const recovery_config& c) noexcept {
  if ((c.method != freeze_method::cgroup_v2 && c.method != freeze_method::cgroup_v1) ||
      c.root[0] != '/')
    return 0;
  std::uint32_t freed = 0;
  const std::uint64_t now = as_safe::now_ns();
  for (std::uint32_t i = 0; i < max_tenants; ++i) {
    tenant_slot& s = n.tenants[i];
    const std::int32_t pid = s.owner.load();
    const std::uint64_t hb = s.heartbeat_ns.load();
    const std::uint64_t dh = s.domain_hash.load();
    if (pid <= 0 || s.state.load() != slot_active || hb > now || now - hb < guardian_leafless_ns ||
        (dh != 0 && dh != c.domain_hash))
      continue;
    const as_safe::path_buf leaf = as_safe::leaf_path(c, i, "");
    struct stat st {};
    if (!leaf.ok() || ::stat(leaf.c_str(), &st) == 0 || errno != ENOENT) continue;
    if (reap_slot(n, i, pid, &c)) {
      n.reaped.fetch_add(1, std::memory_order_relaxed);
      ++freed;
    }
  }
  return freed;
}

inline void detach_from_tenant() noexcept {
  // No inherited descriptor may keep a pipe (a test runner's stdout, a
  // harness's socket) open: close them all, stdio goes to /dev/null.
#if defined(SYS_close_range)
  if (::syscall(SYS_close_range, 0U, ~0U, 0U) != 0)
#endif  // defined(SYS_close_range)
    for (int fd = 0; fd < 4096; ++fd) ::close(fd);
  const int null = ::open("/dev/null", O_RDWR);
  if (null >= 0) {
    ::dup2(null, 0);
    ::dup2(null, 1);
    ::dup2(null, 2);
    if (null > 2) ::close(null);
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);  // NOLINT(concurrency-mt-unsafe): one thread here
  if (::chdir("/") != 0) {
  }
}

/// On leaving with no tenant left: the leaves of free slots, then the
/// segment's own directory under the derived root if that is empty now.
/// A tenant joining meanwhile makes the directory again (enter retries).
inline void remove_segment_dir(node_state& n, const recovery_config& c) noexcept {
  clean_stale_leaves(n, c, max_tenants);
  if (c.own_dir && c.root[0] == '/' && !any_live_tenant(n)) ::rmdir(c.root);
}

/// Gives up the guardian role if no tenant is left. False if one appeared
/// meanwhile and the role was taken back.
inline bool retire(node_state& n, std::int32_t me) noexcept {
  std::int32_t expected = me;
  if (!n.guardian_pid.compare_exchange_strong(expected, 0)) return true;
  // A tenant joining now either saw our pid (then we see it here) or sees 0
  // and starts a new guardian.
  if (!any_live_tenant(n)) return true;
  expected = 0;
  return !n.guardian_pid.compare_exchange_strong(expected, me);
}

[[noreturn]] KREX_DETAIL_COLD inline void run(node_state& n, const recovery_config& c, std::int32_t claim) noexcept {
  detach_from_tenant();
  const auto me = static_cast<std::int32_t>(::getpid());
  n.guardian_start_time.store(read_proc_stat(me).start_time);
  n.guardian_heartbeat_ns.store(as_safe::now_ns());
  std::int32_t expected = claim;
  if (!n.guardian_pid.compare_exchange_strong(expected, me)) ::_exit(0);
  n.guardian_starts.fetch_add(1);

  int pidfd[max_devices];
  std::int32_t watched[max_devices];
  for (std::uint32_t d = 0; d < max_devices; ++d) {
    pidfd[d] = -1;
    watched[d] = 0;
  }
  std::uint64_t last_reap = 0;
  std::uint64_t last_sweep = 0;
  std::uint64_t last_registry = 0;
  std::uint64_t idle_since = 0;
  for (;;) {
    std::uint64_t now = as_safe::now_ns();
    n.guardian_heartbeat_ns.store(now, std::memory_order_relaxed);
    if (n.guardian_pid.load() != me) ::_exit(0);  // replaced (krexctl recover)
    const std::uint64_t domain = n.cgroup_root_hash.load();
    if (domain != 0 && domain != c.domain_hash) {
      // A new run re-recorded the freeze domain: our root is not theirs.
      expected = me;
      n.guardian_pid.compare_exchange_strong(expected, 0);
      ::_exit(0);
    }
    std::uint64_t wait = guardian_poll_ns;
    pollfd fds[max_devices];
    nfds_t nfds = 0;
    for (std::uint32_t d = 0; d < max_devices; ++d) {
      device_state& dev = n.devices[d];
      if (dev.lease_slot.load() != 0 || (dev.gate.load() & 1U) != 0) recover_device(n, d, c);
      // A served ticket nobody takes (its waiter died, or is stopped past the
      // hand-off deadline) would hold the queue with no lease to expire.
      if (dev.lease_slot.load() == 0 && dev.now_serving.load() != dev.next_ticket.load())
        advance_queue(n, d, c, recover_dead_holder);
      const std::uint32_t ls = dev.lease_slot.load();
      const std::int32_t lp = ls != 0 ? dev.lease_pid.load() : 0;
      if (lp != watched[d]) {
        if (pidfd[d] >= 0) ::close(pidfd[d]);
        pidfd[d] = lp > 0 ? as_safe::pidfd_open(lp) : -1;
        watched[d] = lp;
      }
      if (pidfd[d] >= 0) fds[nfds++] = pollfd{pidfd[d], POLLIN, 0};
      const std::uint64_t deadline = ls != 0 ? dev.lease_deadline_ns.load() : 0;
      if (deadline > now && deadline - now < wait) wait = deadline - now + 1'000'000;
    }
    if (now - last_reap >= guardian_reap_ns) {
      last_reap = now;
      reap_dead_tenants(n, c);
      reap_leafless_slots(n, c);
      if (now - last_sweep >= guardian_sweep_ns) {
        last_sweep = now;
        clean_stale_leaves(n, c, max_tenants);
      }
      if (now - last_registry >= guardian_registry_ns) {
        last_registry = now;
        sweep_segment_entries(n);
      }
      if (any_live_tenant(n)) {
        idle_since = 0;
      } else if (idle_since == 0) {
        idle_since = now;
      } else if (now - idle_since >= guardian_linger_ns) {
        if (retire(n, me)) {
          remove_segment_dir(n, c);
          sweep_segment_entries(n);
          ::_exit(0);
        }
        idle_since = 0;
      }
    }
    const timespec ts{static_cast<time_t>(wait / 1'000'000'000ULL),
                      static_cast<long>(wait % 1'000'000'000ULL)};
    ::ppoll(nfds != 0 ? fds : nullptr, nfds, &ts, nullptr);
  }
}

}  // namespace guardian_impl

/// Starts a guardian for segment `n` unless one is alive or being started.
/// `c`: the caller's own recovery configuration (the guardian thaws by it).
/// Returns true if this call forked one. Never throws; a failed fork leaves
/// the next tenant action to try again.
KREX_DETAIL_COLD inline bool ensure_guardian(node_state& n, const recovery_config& c) noexcept {
  std::int32_t g = n.guardian_pid.load();
  // A live guardian with a fresh heartbeat stays. One that stopped beating
  // (frozen, stuck) is replaced: it exits once it sees another pid recorded.
  if (g > 0 && as_safe::alive(g, n.guardian_start_time.load()) &&
      as_safe::now_ns() - n.guardian_heartbeat_ns.load() < guardian_stale_ns)
    return false;
  // A claim is honoured while its tenant lives, for guardian_claim_ns: also
  // the back-off after a start that failed (fork, or leaving the leaf).
  if (g < 0 && as_safe::now_ns() - n.guardian_claim_ns.load() < guardian_claim_ns &&
      as_safe::alive(-g, 0))
    return false;
  const std::int32_t claim = -static_cast<std::int32_t>(::getpid());
  n.guardian_claim_ns.store(as_safe::now_ns());
  if (!n.guardian_pid.compare_exchange_strong(g, claim)) return false;
  // The child must never sit in this tenant's leaf: a sibling's region could
  // freeze it there. cgroup v2: created in its home cgroup (clone3); else
  // forked and moved there before it does anything else.
  const int home_fd = c.method == freeze_method::cgroup_v2 && c.home[0] != '\0'
                          ? ::open(c.home, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
                          : -1;
  bool raw = home_fd >= 0;
  long child = raw ? as_safe::fork_into_cgroup(home_fd) : -1;
  if (raw && child < 0) {
    raw = false;
    child = ::fork();
  } else if (!raw) {
    child = ::fork();
  }
  if (child < 0) {
    if (home_fd >= 0) ::close(home_fd);
    return false;  // the claim stays: nobody retries before guardian_claim_ns
  }
  if (child == 0) {
    // Not the agent thread's name, which proves slot membership (identity.hpp).
    ::prctl(PR_SET_NAME, "krex-guardian", 0, 0, 0);
    // Intermediate child: out of the leaf, a new session, then the guardian
    // as its child, so that it is nobody's child in the tenant's process tree.
    if (!raw && as_safe::move_home(c) != 0) ::_exit(0);  // claim stays: back-off
    ::setsid();
    const long guardian = raw ? as_safe::fork_into_cgroup(home_fd) : ::fork();
    if (guardian != 0) ::_exit(0);
    guardian_impl::run(n, c, claim);
  }
  if (home_fd >= 0) ::close(home_fd);
  int status = 0;
  while (::waitpid(static_cast<pid_t>(child), &status, 0) < 0 && errno == EINTR) {
  }
  return true;
}

}  // namespace krex::detail
