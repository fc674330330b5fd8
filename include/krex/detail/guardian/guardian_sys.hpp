// SPDX-License-Identifier: Apache-2.0
#pragma once

// The guardian's own async-signal-safe system calls: leaving the forking
// tenant's leaf for its home cgroup, and forking straight into it. The
// building blocks it shares with slot bookkeeping and the lock (write_file,
// leaf paths, thawing and removing a leaf, futex wake-ups, recovery_config)
// live one layer down, in as_safe.hpp.

#include <krex/detail/as_safe.hpp>

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace krex::detail::as_safe {

/// Moves the calling process into `c.home`. Returns 0 or errno (0 if no home).
inline int move_home(const recovery_config& c) noexcept {
  if (c.home[0] == '\0') return 0;
  path_buf procs;
  procs.add(c.home).add("/cgroup.procs");
  path_buf pid;
  pid.add(static_cast<std::uint64_t>(::getpid()));
  return write_file(procs.c_str(), pid.c_str());
}

/// fork(2) by raw clone3 with CLONE_INTO_CGROUP: the child starts in the
/// cgroup v2 directory `cgroup_fd`, never for an instant in the caller's (a
/// tenant leaf a sibling may be freezing). Bypasses glibc's fork: the child
/// may only make raw system calls. Returns -1 with errno (ENOSYS, E2BIG,
/// EINVAL on kernels before 5.7) when unavailable.
inline long fork_into_cgroup(int cgroup_fd) noexcept {
#if defined(SYS_clone3)
  struct {
    std::uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
        set_tid_size, cgroup;
  } args{};
  args.flags = 0x200000000ULL;  // CLONE_INTO_CGROUP
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<std::uint64_t>(cgroup_fd);
  return ::syscall(SYS_clone3, &args, sizeof args);
#else
  (void)cgroup_fd;
  errno = ENOSYS;
  return -1;
#endif  // defined(SYS_clone3)
}

}  // namespace krex::detail::as_safe
