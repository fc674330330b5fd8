// SPDX-License-Identifier: Apache-2.0
#pragma once

// Async-signal-safe building blocks shared by slot bookkeeping (reaping a
// dead tenant removes its leaf), the region lock's hand-off and fault
// recovery (the guardian, and a tenant that recovers a dead holder through
// its recoverer, see slots.hpp). The guardian runs them in a process forked
// from a (possibly multi-threaded) tenant, where nothing that may allocate or
// take a lock is allowed: so no std::string, no stdio, no sys() table, only
// raw system calls on fixed buffers.
//
// recovery_config carries what a recoverer needs to thaw siblings: the freeze
// method and the krex cgroup root, both from the recoverer's own
// configuration, never from the segment. Leaf paths are built here from that
// root and a slot number the caller bounds-checked.
//
// The cgroup freezers as one table (freeze_table): for each method the files
// and values the kernel uses, which freeze/freezer.hpp drives and the thaw
// here writes. Plain constexpr data. v2 is the core freezer, not a controller
// (no `cgroup.subtree_control` is touched). v1 reads FREEZING while a freeze
// is in progress; a frozen v1 task cannot even die until it is thawed. none
// is the empty entry; signal has no files either (freeze/freeze_signal.hpp).

#include <krex/detail/identity.hpp>
#include <krex/detail/layout.hpp>
#include <krex/detail/proc.hpp>
#include <krex/options.hpp>

#include <fcntl.h>
#include <linux/futex.h>
#include <linux/magic.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>

namespace krex::detail {

struct freeze_table {
  freeze_method method = freeze_method::none;
  const char* control = nullptr;       ///< written to freeze and thaw; null: no cgroup freezing
  const char* freeze_value = nullptr;  ///< written to `control` to freeze
  const char* thaw_value = nullptr;    ///< written to `control` to thaw
  const char* status = nullptr;        ///< read for the freeze's completion
  const char* frozen_line = nullptr;   ///< a line of `status` once every task is frozen
  const char* busy_file = nullptr;     ///< where live processes show
  const char* busy_line = nullptr;     ///< its line while populated; null: any pid listed
  const char* procs = nullptr;         ///< the file processes are moved through
  const char* hierarchy = nullptr;     ///< the hierarchy's name in messages
  long magic = 0;                      ///< its filesystem magic
  bool v2 = false;                     ///< which of the two hierarchies it lives in

  constexpr bool cgroup() const noexcept { return control != nullptr; }
};

// clang-format off
inline constexpr freeze_table freeze_cgroup_v2{
    freeze_method::cgroup_v2,
    "cgroup.freeze", "1", "0",       // control file, freeze value, thaw value
    "cgroup.events", "frozen 1",     // status file, its line once frozen
    "cgroup.events", "populated 1",  // busy file, its line while populated
    "cgroup.procs", "cgroup v2 hierarchy", CGROUP2_SUPER_MAGIC, true};
inline constexpr freeze_table freeze_cgroup_v1{
    freeze_method::cgroup_v1,
    "freezer.state", "FROZEN", "THAWED",
    "freezer.state", "FROZEN",       // FREEZING while in progress
    "cgroup.procs", nullptr,         // any pid listed
    "cgroup.procs", "cgroup v1 freezer hierarchy", CGROUP_SUPER_MAGIC, false};
// clang-format on
inline constexpr freeze_table freeze_none{};

/// The table of method `m`: the empty one for none, signal and automatic.
constexpr const freeze_table& freeze_table_of(freeze_method m) noexcept {
  return m == freeze_method::cgroup_v2   ? freeze_cgroup_v2
         : m == freeze_method::cgroup_v1 ? freeze_cgroup_v1
                                         : freeze_none;
}

/// What a recoverer needs to thaw a device's tenants. Plain data: it is
/// copied into the guardian by fork.
struct recovery_config {
  freeze_method method = freeze_method::none;  ///< cgroup_v2, cgroup_v1, signal or none
  char root[1024] = {};  ///< krex cgroup root (cgroup methods), NUL-terminated
  /// The cgroup (directory) a guardian lives in: outside every tenant leaf
  /// (the cgroup the forking tenant came from). Empty: where it was forked.
  char home[1024] = {};
  std::uint64_t domain_hash = 0;  ///< freeze_domain_hash of method and root
  /// `root` is the segment's own directory under a derived root (created
  /// with its first leaf): the guardian that leaves last removes it.
  bool own_dir = false;
  /// Signal method: who may be continued (the recoverer's own domain, never
  /// the segment's word; see identity.hpp). Invalid: nobody.
  identity_domain identity;
};

namespace as_safe {

/// A fixed buffer that strings are appended to; overflow marks it bad.
class path_buf {
 public:
  path_buf& add(const char* s) noexcept {
    while (s != nullptr && *s != '\0') put(*s++);
    return *this;
  }
  path_buf& add(std::uint64_t v) noexcept {
    char digits[20];
    const int n = decimal_digits(v, digits);
    for (int i = 0; i < n; ++i) put(digits[i]);
    return *this;
  }
  const char* c_str() const noexcept { return m_ok ? m_buf : nullptr; }
  bool ok() const noexcept { return m_ok; }
  std::size_t size() const noexcept { return m_len; }

 private:
  void put(char c) noexcept {
    if (m_len + 1 >= sizeof m_buf) {
      m_ok = false;
      return;
    }
    m_buf[m_len++] = c;
    m_buf[m_len] = '\0';
  }
  char m_buf[1200] = {};
  std::size_t m_len = 0;
  bool m_ok = true;
};

/// Copies `src` into `dst[n]`; false (and dst empty) if it does not fit.
inline bool copy_text(char* dst, std::size_t n, const char* src) noexcept {
  std::size_t i = 0;
  for (; src[i] != '\0'; ++i) {
    if (i + 1 >= n) {
      dst[0] = '\0';
      return false;
    }
    dst[i] = src[i];
  }
  dst[i] = '\0';
  return true;
}

// /proc/<pid>/stat reading, liveness and the clock are async-signal-safe
// already: one implementation in proc.hpp serves tenants and recoverers.
using detail::alive;
using detail::now_ns;

/// Writes `data` to an existing file in one write(2). Returns 0 or errno.
inline int write_file(const char* path, const char* data) noexcept {
  if (path == nullptr) return ENAMETOOLONG;
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  std::size_t len = 0;
  while (data[len] != '\0') ++len;
  ssize_t n;
  do n = ::write(fd, data, len);
  while (n < 0 && errno == EINTR);
  int e = n < 0 ? errno : (static_cast<std::size_t>(n) != len ? EIO : 0);
  if (::close(fd) < 0 && e == 0) e = errno;
  return e;
}

inline void futex_wake_all(const std::atomic<std::uint32_t>& w) noexcept {
  ::syscall(SYS_futex, &w, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

/// Lowers gate `epoch` (odd: raised) of device `dev` by one CAS to
/// epoch + 1, so a gate that moved on (lowered, or raised again by a new
/// holder) is left alone, and wakes the submitters parked on it. True if
/// this call lowered it. The one place a gate comes down: the holder's exit
/// (steps/gate.hpp lower_gate) and recovery (guardian_recover.hpp) both call it.
inline bool lower_gate_at(device_state& dev, std::uint32_t epoch) noexcept {
  const bool lowered = (epoch & 1U) != 0 && dev.gate.compare_exchange_strong(epoch, epoch + 1);
  futex_wake_all(dev.gate);
  return lowered;
}

/// `<root>/t<slot>` + `tail` (+ `/` + `file`, if given), from the recoverer's own root.
inline path_buf leaf_path(const recovery_config& c, std::uint32_t slot, const char* tail,
                          const char* file = nullptr) noexcept {
  path_buf p;
  p.add(c.root).add("/t").add(static_cast<std::uint64_t>(slot)).add(tail);
  if (file != nullptr) p.add("/").add(file);
  return p;
}

/// SIGCONTs what a region holder recorded as stopped for slot `slot`:
/// `target` = a pid, or minus the process group that pid leads;
/// `start_time` = that pid's start time at join. Nothing is signalled unless the pid is verified, through a
/// pidfd taken first, as a member of `c.identity` with that start time
/// (identity.hpp); pid <= 1 never. The group only while its leader lives and
/// still leads it, and never this process's own. Returns 0 or errno; a
/// process that is gone, or not verified, counts as continued.
inline int continue_verified(const recovery_config& c, std::uint32_t slot, std::int32_t target,
                             std::uint64_t start_time) noexcept {
  if (target == 0 || target == INT32_MIN) return 0;
  const std::int32_t pid = target < 0 ? -target : target;
  if (pid <= 1) return 0;
  const int fd = pidfd_open(pid);
  if (fd < 0 && errno != ENOSYS) return errno == ESRCH ? 0 : errno;
  int e = 0;
  if (verify_member(c.identity, pid, start_time, slot) == identity_ok) {
    // Without pidfds (kernel < 5.3) the pid is signalled right after the checks.
    const int rc = fd >= 0 ? pidfd_signal(fd, SIGCONT) : ::kill(pid, SIGCONT);
    if (rc != 0) e = errno;
    if (rc == 0 && target < 0 && ::getpgid(pid) == pid && pid != ::getpgrp() &&
        ::kill(-pid, SIGCONT) != 0)
      e = errno;
  }
  if (fd >= 0) ::close(fd);
  return e == ESRCH ? 0 : e;
}

/// Thaws tenant slot `slot` (bounded by the caller) the way `c` freezes: the
/// thaw value of its table into the leaf's control file (nothing for none), or
/// (signal) continue_verified(c, slot, pid, start_time),
/// where `pid` is what the holder stopped (a pid, or minus the group it
/// leads). Returns 0 or errno; a leaf or process that is gone counts as thawed.
inline int thaw_slot(const recovery_config& c, std::uint32_t slot, std::int32_t pid,
                     std::uint64_t start_time) noexcept {
  if (slot >= max_tenants) return EINVAL;
  const freeze_table& t = freeze_table_of(c.method);
  int e = 0;
  if (c.method == freeze_method::signal)
    e = continue_verified(c, slot, pid, start_time);
  else if (t.cgroup())
    e = write_file(leaf_path(c, slot, "", t.control).c_str(), t.thaw_value);
  return e == ENOENT || e == ESRCH ? 0 : e;
}

/// Thaws slot `slot` of the segment: its leaf (cgroup methods), or exactly
/// what its region holder recorded as stopped (signal; the record is cleared
/// once that is continued).
inline int thaw_slot(const recovery_config& c, std::uint32_t slot, tenant_slot& s) noexcept {
  if (c.method != freeze_method::signal) return thaw_slot(c, slot, 0, 0);
  std::int32_t target = s.stop_target.load();
  if (target == 0) return 0;
  const int e = thaw_slot(c, slot, target, s.stop_start_time.load());
  if (e == 0) s.stop_target.compare_exchange_strong(target, 0);
  return e;
}

/// Removes the leaf of a dead tenant (thawed first: a frozen v1 leaf keeps
/// its dying tasks). Fails harmlessly (EBUSY) while processes remain in it.
inline int remove_leaf(const recovery_config& c, std::uint32_t slot) noexcept {
  if (slot >= max_tenants) return EINVAL;
  if (!freeze_table_of(c.method).cgroup()) return 0;
  thaw_slot(c, slot, 0, 0);
  const path_buf p = leaf_path(c, slot, "");
  if (!p.ok()) return ENAMETOOLONG;
  if (::rmdir(p.c_str()) != 0) return errno == ENOENT ? 0 : errno;
  return 0;
}

// pidfd_open(2) and pidfd_send_signal(2) live in identity.hpp.

}  // namespace as_safe
}  // namespace krex::detail
