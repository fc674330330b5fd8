// SPDX-License-Identifier: Apache-2.0
#pragma once

// Process identity and liveness: a pid is only trusted together with its
// start time (field 22 of /proc/<pid>/stat), so a reused pid is a dead tenant.

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace krex::detail {

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process of the node.
inline std::uint64_t now_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

struct proc_stat {
  bool exists = false;
  char state = '?';             ///< R, S, D, T, t, Z, X, ...
  std::uint64_t start_time = 0; ///< clock ticks after boot
  int pgid = 0;
};

/// Reads /proc/<pid>/stat. Async-signal-safe (open/read/close only).
inline proc_stat read_proc_stat(int pid) noexcept {
  proc_stat out;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return out;
  buf[n] = '\0';
  // The command name may contain spaces and ')': fields start after the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr || p[1] != ' ') return out;
  p += 2;
  out.exists = true;
  out.state = *p;
  // Fields after the name, counting from 3 (state). pgrp is 5, starttime is 22.
  int field = 3;
  while (*p != '\0' && field < 22) {
    if (*p == ' ') {
      ++field;
      if (field == 5) out.pgid = std::atoi(p + 1);
      if (field == 22) out.start_time = std::strtoull(p + 1, nullptr, 10);
    }
    ++p;
  }
  return out;
}

/// Start time of this process.
inline std::uint64_t self_start_time() noexcept { return read_proc_stat(::getpid()).start_time; }

/// True when `pid` runs and is the same process that had `start_time` (0 =
/// not yet recorded: existence is enough). Zombies count as dead.
inline bool alive(int pid, std::uint64_t start_time) noexcept {
  if (pid <= 0) return false;
  const proc_stat st = read_proc_stat(pid);
  if (!st.exists || st.state == 'Z' || st.state == 'X') return false;
  return start_time == 0 || st.start_time == start_time;
}

}  // namespace krex::detail
