// SPDX-License-Identifier: Apache-2.0
#pragma once

// The one seam through which krex makes the system calls whose failures a
// user can cause (cgroup files, affinity, futex, signals). Tests replace an
// entry to inject EACCES, ENOENT, EINTR, ... and check that every error path
// produces a clear krex::error; production code never touches the table.

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

namespace krex::detail {

struct sys_table {
  int (*open)(const char* path, int flags, mode_t mode);
  ssize_t (*read)(int fd, void* buf, size_t n);
  ssize_t (*write)(int fd, const void* buf, size_t n);
  int (*close)(int fd);
  int (*mkdir)(const char* path, mode_t mode);
  int (*rmdir)(const char* path);
  int (*sched_setaffinity)(pid_t pid, size_t size, const cpu_set_t* set);
  int (*sched_getaffinity)(pid_t pid, size_t size, cpu_set_t* set);
  int (*kill)(pid_t pid, int sig);
  /// futex(2) FUTEX_WAIT (non-private: the word lives in shared memory).
  long (*futex_wait)(const void* word, std::uint32_t expected, const timespec* rel_timeout);
  /// futex(2) FUTEX_WAKE (non-private).
  long (*futex_wake)(const void* word, int count);
  /// pidfd_open(2): -1 with errno ENOSYS where the kernel lacks it.
  int (*pidfd_open)(pid_t pid);
  /// pidfd_send_signal(2) (signal freezing signals processes only through pidfds).
  int (*pidfd_send_signal)(int pidfd, int sig);
};

namespace sys_impl {
inline int open(const char* p, int f, mode_t m) { return ::open(p, f | O_CLOEXEC, m); }
inline ssize_t read(int fd, void* b, size_t n) { return ::read(fd, b, n); }
inline ssize_t write(int fd, const void* b, size_t n) { return ::write(fd, b, n); }
inline int close(int fd) { return ::close(fd); }
inline int mkdir(const char* p, mode_t m) { return ::mkdir(p, m); }
inline int rmdir(const char* p) { return ::rmdir(p); }
inline int setaff(pid_t pid, size_t size, const cpu_set_t* s) { return ::sched_setaffinity(pid, size, s); }
inline int getaff(pid_t pid, size_t size, cpu_set_t* s) { return ::sched_getaffinity(pid, size, s); }
inline int kill(pid_t pid, int sig) { return ::kill(pid, sig); }
inline long futex_wait(const void* w, std::uint32_t expected, const timespec* t) {
  return ::syscall(SYS_futex, w, FUTEX_WAIT, expected, t, nullptr, 0);
}
inline long futex_wake(const void* w, int count) {
  return ::syscall(SYS_futex, w, FUTEX_WAKE, count, nullptr, nullptr, 0);
}
inline int pidfd_open(pid_t pid) {
#if defined(SYS_pidfd_open)
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif  // defined(SYS_pidfd_open)
}
inline int pidfd_send_signal(int pidfd, int sig) {
#if defined(SYS_pidfd_send_signal)
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, nullptr, 0));
#else
  (void)pidfd;
  (void)sig;
  errno = ENOSYS;
  return -1;
#endif  // defined(SYS_pidfd_send_signal)
}
}  // namespace sys_impl

/// A file descriptor that is closed at scope end (a segment file, a pidfd).
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : m_fd(fd) {}
  unique_fd(unique_fd&& o) noexcept : m_fd(std::exchange(o.m_fd, -1)) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) {
      reset();
      m_fd = std::exchange(o.m_fd, -1);
    }
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }
  int get() const noexcept { return m_fd; }
  void reset() noexcept {
    if (m_fd >= 0) ::close(m_fd);
    m_fd = -1;
  }

 private:
  int m_fd = -1;
};

/// The table in use. Tests may swap entries (see tests/sys_override.hpp).
inline sys_table& sys() noexcept {
  static sys_table table{sys_impl::open,  sys_impl::read,   sys_impl::write,      sys_impl::close,
                         sys_impl::mkdir, sys_impl::rmdir,  sys_impl::setaff,     sys_impl::getaff,
                         sys_impl::kill,  sys_impl::futex_wait, sys_impl::futex_wake,
                         sys_impl::pidfd_open, sys_impl::pidfd_send_signal};
  return table;
}

/// Reads a whole small (pseudo-)file into `out` through the seam, at most
/// `limit` bytes (no cgroup, sysfs or /proc file krex reads comes near the
/// default). Returns 0 or an errno value; `out` then holds what was read.
/// The one file reader of the library (cgroup control files, topology);
/// the async-signal-safe recovery code has its own raw calls (as_safe.hpp).
inline int read_small_file(const std::string& path, std::string& out,
                           std::size_t limit = std::size_t{1} << 20) {
  out.clear();
  const int fd = sys().open(path.c_str(), O_RDONLY, 0);
  if (fd < 0) return errno;
  char buf[4096];
  int e = 0;
  while (out.size() < limit) {
    const ssize_t n = sys().read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      e = errno;
      break;
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  sys().close(fd);
  return e;
}

}  // namespace krex::detail
