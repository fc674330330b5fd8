// SPDX-License-Identifier: Apache-2.0
#pragma once

// Helpers for tests that run real child processes (shared by every krex test
// that forks):
//
//   krex_test::child c = krex_test::spawn([&] { ...; return 0; });  // fork, run, _exit
//   auto status = krex_test::wait_exit(c.pid(), std::chrono::seconds(5)); // bounded
//   krex_test::shared<counters> mem;            // MAP_SHARED anonymous block
//   std::string name = krex_test::unique_name("krex-test");  // "krex-test-<pid>-<n>"
//   std::string text = krex_test::file_text(path);  // a whole file
//
// Rules that keep these tests honest: fork children before the test process
// creates any thread; children leave through _exit (never return into gtest,
// never run atexit handlers); every wait is bounded, and a child still running
// at the end of its scope is SIGKILLed and reaped.

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <new>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

namespace krex_test {

/// "<prefix>-<pid>-<n>", unique per process and call: names of cgroups,
/// segments, files a test creates, so concurrent runs never collide.
inline std::string unique_name(const std::string& prefix) {
  static std::atomic<unsigned> n{0};
  return prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

/// Exit status a child reports when its body threw.
inline constexpr int exit_threw = 111;

/// Forks; the child runs `body` and `_exit`s with the int it returns (or
/// exit_threw if it threw). Returns the child's pid; throws if fork fails.
template <class F>
pid_t fork_child(F&& body) {
  std::fflush(nullptr);  // no duplicated stdio buffers
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid > 0) return pid;
  int status = exit_threw;
  try {
    status = body();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %d threw: %s\n", static_cast<int>(::getpid()), e.what());
  } catch (...) {
  }
  std::fflush(nullptr);
  ::_exit(status);
}

/// SIGKILLs `pid` (if > 0) and reaps it when it is our child. For processes
/// that may be frozen, thaw them first: a cgroup-v1-frozen task cannot die.
/// Gives up (leaving a zombie-to-be) after 5 s rather than hang the test run.
inline void kill_and_reap(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGCONT);
  ::kill(pid, SIGKILL);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int status;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() >= end) {
      std::fprintf(stderr, "krex_test: child %d did not die within 5 s\n", static_cast<int>(pid));
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

/// Waits for child `pid` at most `timeout`. Returns its raw wait status, or
/// nullopt if it had to be SIGKILLed (it is reaped either way).
inline std::optional<int> wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0) return std::nullopt;  // not our child, or already reaped
    if (std::chrono::steady_clock::now() >= end) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  kill_and_reap(pid);
  return std::nullopt;
}

/// Exit code of a child that exited normally, -1 otherwise (killed, timed out).
inline int exit_code(const std::optional<int>& status) {
  return status && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1;
}

/// Makes this process the reaper of orphaned descendants (grandchildren whose
/// parent died), so that reap_orphans() can collect them.
inline void become_subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }

/// What a shell command printed on stdout and how it ended.
struct command_result {
  int rc = -1;  ///< exit status; -1 if it did not exit (killed) or could not start
  std::string out;
};

/// Runs `cmd` through /bin/sh and collects its stdout (add " 2>&1" for
/// stderr too). The command line bounds itself: start it with `timeout N`.
inline command_result run_shell(const std::string& cmd) {
  command_result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

/// The whole content of the file at `path` ("" if it cannot be opened).
inline std::string file_text(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

/// Reaps every child that has already exited, without blocking.
inline void reap_orphans() {
  int status;
  while (::waitpid(-1, &status, WNOHANG) > 0) {
  }
}

/// A forked child that is killed and reaped when the handle goes out of scope.
class child {
 public:
  child() = default;
  explicit child(pid_t pid) : m_pid(pid) {}
  child(child&& o) noexcept : m_pid(std::exchange(o.m_pid, -1)) {}
  child& operator=(child&& o) noexcept {
    if (this != &o) {
      kill_and_reap(m_pid);
      m_pid = std::exchange(o.m_pid, -1);
    }
    return *this;
  }
  ~child() { kill_and_reap(m_pid); }

  pid_t pid() const noexcept { return m_pid; }
  /// Bounded wait (see wait_exit); afterwards the handle owns nothing.
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    const auto s = wait_exit(m_pid, timeout);
    m_pid = -1;
    return s;
  }

 private:
  pid_t m_pid = -1;
};

/// fork_child wrapped in a scoped handle.
template <class F>
child spawn(F&& body) {
  return child(fork_child(std::forward<F>(body)));
}

/// A T in a MAP_SHARED anonymous mapping: parent and children forked after
/// its construction see the same object. T must be usable across processes
/// (lock-free atomics, plain data).
template <class T>
class shared {
  static_assert(std::is_trivially_destructible_v<T>, "shared<T> is never destroyed in children");

 public:
  shared() {
    void* p = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap of a shared block failed");
    m_p = new (p) T();
  }
  ~shared() { ::munmap(m_p, sizeof(T)); }
  shared(const shared&) = delete;
  shared& operator=(const shared&) = delete;
  T* operator->() const noexcept { return m_p; }
  T& operator*() const noexcept { return *m_p; }

 private:
  T* m_p = nullptr;
};

/// A block of counters for "is it still running?" checks.
struct counters {
  static constexpr int size = 32;
  std::atomic<std::uint64_t> value[size];
  std::atomic<int> pid[size];  ///< pids the children report
  std::atomic<int> ready;      ///< children bump this once set up
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
};

/// Polls `pred` every millisecond until it is true or `timeout` passes.
template <class P>
bool wait_until(P&& pred, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= end) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace krex_test
