// SPDX-License-Identifier: Apache-2.0
#pragma once

// Process identity and liveness: a pid is only trusted together with its
// start time (field 22 of /proc/<pid>/stat), so a reused pid is a dead tenant.

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>

namespace krex::detail {

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process of the node.
inline std::uint64_t now_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

/// A duration option in now_ns() units (options are never negative).
inline std::uint64_t to_ns(std::chrono::milliseconds d) noexcept {
  return static_cast<std::uint64_t>(d.count()) * 1'000'000;
}

struct proc_stat {
  bool exists = false;
  char state = '?';              ///< R, S, D, T, t, Z, X, ...
  std::uint64_t start_time = 0;  ///< clock ticks after boot
};

/// "/proc/<pid><tail>" into `out[n]`. False if it does not fit. Async-signal-safe.
inline bool proc_path(char* out, std::size_t n, std::int64_t pid, const char* tail) noexcept {
  const char* head = "/proc/";
  std::size_t len = 0;
  for (; head[len] != '\0'; ++len) out[len] = head[len];
  char digits[24];
  int nd = 0;
  auto v = static_cast<std::uint64_t>(pid);
  do {
    digits[nd++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0 && nd < 24);
  while (nd > 0) {
    if (len + 1 >= n) return false;
    out[len++] = digits[--nd];
  }
  for (; *tail != '\0'; ++tail) {
    if (len + 1 >= n) return false;
    out[len++] = *tail;
  }
  out[len] = '\0';
  return true;
}

/// Reads state and start time from /proc/<pid>/stat. Async-signal-safe
/// (open/read/close on fixed buffers, no stdio or allocation): the guardian
/// and recoverers call it after fork.
inline proc_stat read_proc_stat(std::int64_t pid) noexcept {
  proc_stat out;
  if (pid <= 0 || pid > INT_MAX) return out;
  char path[32];
  if (!proc_path(path, sizeof path, pid, "/stat")) return out;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[1024];
  ssize_t n;
  do n = ::read(fd, buf, sizeof buf - 1);
  while (n < 0 && errno == EINTR);
  ::close(fd);
  if (n <= 0) return out;
  buf[n] = '\0';
  // The command name may contain spaces and ')': fields start after the last ')'.
  const char* close = nullptr;
  for (const char* q = buf; *q != '\0'; ++q)
    if (*q == ')') close = q;
  if (close == nullptr || close[1] != ' ') return out;
  const char* q = close + 2;
  out.exists = true;
  out.state = *q;
  // Fields after the name, counting from 3 (state); starttime is 22.
  int field = 3;
  while (*q != '\0' && field < 22) {
    if (*q == ' ') ++field;
    ++q;
  }
  if (field == 22)
    while (*q >= '0' && *q <= '9')
      out.start_time = out.start_time * 10 + static_cast<std::uint64_t>(*q++ - '0');
  return out;
}

/// Start time of this process.
inline std::uint64_t self_start_time() noexcept { return read_proc_stat(::getpid()).start_time; }

/// True when `pid` runs and is the same process that had `start_time` (0 =
/// not yet recorded: existence is enough). Zombies count as dead.
/// Async-signal-safe.
inline bool alive(std::int64_t pid, std::uint64_t start_time) noexcept {
  const proc_stat st = read_proc_stat(pid);
  if (!st.exists || st.state == 'Z' || st.state == 'X') return false;
  return start_time == 0 || st.start_time == start_time;
}

}  // namespace krex::detail
