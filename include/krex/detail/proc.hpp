// SPDX-License-Identifier: Apache-2.0
#pragma once

// Process identity and liveness: a pid is only trusted together with its
// start time (field 22 of /proc/<pid>/stat), so a reused pid is a dead tenant.
// "Cannot see it" is not "dead": a pid is dead only on positive evidence
// (probe_life); a /proc entry that cannot be read leaves it alive, bounded
// by its lease (docs/FAULTS.md, "Liveness").

#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
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
  int err = 0;                   ///< why it could not be read (errno; 0: read, or no such pid)
};

/// Test seam (fault injection, as fmt injects errno): when set, every read of
/// /proc/<pid>/... by this process first asks it; a non-zero return is the
/// errno that read then fails with (EMFILE, ENFILE, EACCES; ENOENT is what a
/// /proc mounted with hidepid=2 answers for another user's live process).
/// kill(pid, 0) is not affected: it is the positive evidence of death that
/// no /proc view can fake. Never set in production.
inline int (*proc_fault_hook)(std::int64_t pid) noexcept = nullptr;

/// The decimal digits of `v`, most significant first, into `out` (no NUL).
/// Returns how many (1 to 20). Async-signal-safe.
inline int decimal_digits(std::uint64_t v, char (&out)[20]) noexcept {
  char low_first[20];
  int n = 0;
  do {
    low_first[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  for (int i = 0; i < n; ++i) out[i] = low_first[n - 1 - i];
  return n;
}

/// "/proc/<pid><tail>" into `out[n]`. False if it does not fit. Async-signal-safe.
inline bool proc_path(char* out, std::size_t n, std::int64_t pid, const char* tail) noexcept {
  const char* head = "/proc/";
  std::size_t len = 0;
  for (; head[len] != '\0'; ++len) out[len] = head[len];
  char digits[20];
  const int nd = decimal_digits(static_cast<std::uint64_t>(pid), digits);
  for (int i = 0; i < nd; ++i) {
    if (len + 1 >= n) return false;
    out[len++] = digits[i];
  }
  for (; *tail != '\0'; ++tail) {
    if (len + 1 >= n) return false;
    out[len++] = *tail;
  }
  out[len] = '\0';
  return true;
}

/// Reads /proc/<pid><tail> into buf[n] (NUL-terminated). Returns the length
/// read, or -errno (the fault hook's, if any). Async-signal-safe.
inline ssize_t read_proc_file(std::int64_t pid, const char* tail, char* buf,
                              std::size_t n) noexcept {
  if (pid <= 0 || pid > INT_MAX || n < 2) return -EINVAL;
  if (proc_fault_hook != nullptr) {
    const int e = proc_fault_hook(pid);
    if (e != 0) return -e;
  }
  char path[48];
  if (!proc_path(path, sizeof path, pid, tail)) return -ENAMETOOLONG;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  ssize_t r;
  do r = ::read(fd, buf, n - 1);
  while (r < 0 && errno == EINTR);
  const int e = errno;
  ::close(fd);
  if (r < 0) return -e;
  buf[r] = '\0';
  return r;
}

/// Reads state and start time from /proc/<pid>/stat. Async-signal-safe
/// (open/read/close on fixed buffers, no stdio or allocation): the guardian
/// and recoverers call it after fork. `exists` false with `err` set: it
/// could not be read, which says nothing about whether the process lives.
inline proc_stat read_proc_stat(std::int64_t pid) noexcept {
  proc_stat out;
  if (pid <= 0 || pid > INT_MAX) return out;
  char buf[1024];
  const ssize_t n = read_proc_file(pid, "/stat", buf, sizeof buf);
  if (n <= 0) {
    out.err = n < 0 ? static_cast<int>(-n) : EIO;
    return out;
  }
  // The command name may contain spaces and ')': fields start after the last ')'.
  const char* close = nullptr;
  for (const char* q = buf; *q != '\0'; ++q)
    if (*q == ')') close = q;
  if (close == nullptr || close[1] != ' ') {
    out.err = EIO;
    return out;
  }
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

/// Threads of `pid` that still run ("Threads:" of /proc/<pid>/status), or -1
/// if unreadable. A process whose main thread called pthread_exit() shows
/// its leader as a zombie, with its other threads counted here (2 or more);
/// a process that ended shows 1 (or none). Async-signal-safe.
inline int proc_threads(std::int64_t pid) noexcept {
  char buf[2048];
  const ssize_t n = read_proc_file(pid, "/status", buf, sizeof buf);
  if (n <= 0) return -1;
  const char* key = "\nThreads:";
  for (const char* q = buf; *q != '\0'; ++q) {
    std::size_t k = 0;
    while (key[k] != '\0' && q[k] == key[k]) ++k;
    if (key[k] != '\0') continue;
    q += k;
    while (*q == ' ' || *q == '\t') ++q;
    int v = 0;
    bool any = false;
    for (; *q >= '0' && *q <= '9'; ++q) {
      v = v * 10 + (*q - '0');
      any = true;
    }
    return any ? v : -1;
  }
  return -1;
}

/// Start time of this process.
inline std::uint64_t self_start_time() noexcept { return read_proc_stat(::getpid()).start_time; }

/// What a liveness check of a pid found. krex takes a tenant's device, slot
/// or lease away only on `dead`: positive evidence (kill(pid, 0) answers
/// ESRCH, or the pid now names another process, by its start time, or a
/// process that ended and was not reaped yet). `unknown` (its /proc entry
/// cannot be read: EMFILE, EACCES, hidepid, another pid namespace) is treated
/// as alive, and a holder so treated is bounded by its lease, as a stopped
/// holder is.
enum class liveness : std::uint8_t { alive, dead, unknown };

struct life {
  liveness verdict = liveness::unknown;
  int err = 0;  ///< unknown: why /proc could not tell (errno)
};

/// Judges `pid` (of this process's pid namespace) against `start_time` (0 =
/// not yet recorded: existence is enough). Async-signal-safe.
inline life probe_life(std::int64_t pid, std::uint64_t start_time) noexcept {
  if (pid <= 0 || pid > INT_MAX) return {liveness::dead, 0};
  // The one answer no view of /proc can fake: no such process.
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return {liveness::dead, 0};
  const proc_stat st = read_proc_stat(pid);
  if (!st.exists) {
    // Gone between the two looks, or hidden (hidepid), or not readable now.
    if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return {liveness::dead, 0};
    return {liveness::unknown, st.err != 0 ? st.err : ENOENT};
  }
  if (start_time != 0 && st.start_time != start_time) return {liveness::dead, 0};  // pid reused
  if (st.state == 'X') return {liveness::dead, 0};
  if (st.state == 'Z') {
    // A zombie leader whose other threads run is a live process.
    const int threads = proc_threads(pid);
    if (threads >= 2) return {liveness::alive, 0};
    if (threads >= 0) return {liveness::dead, 0};
    return {liveness::unknown, EIO};
  }
  return {liveness::alive, 0};
}

/// False only when `pid` is positively not the process that had `start_time`
/// (see probe_life): "cannot see it" is not "dead". Async-signal-safe.
inline bool alive(std::int64_t pid, std::uint64_t start_time) noexcept {
  return probe_life(pid, start_time).verdict != liveness::dead;
}

}  // namespace krex::detail
