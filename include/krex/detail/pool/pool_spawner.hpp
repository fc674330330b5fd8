// SPDX-License-Identifier: Apache-2.0
#pragma once

// The worker pool's spawner (krex::pool, pool.hpp): a small single-threaded
// process, forked once when the pool starts, that forks every worker, kills
// the ones the pool asks it to and reports how each one ended.
//
// Why a process of its own rather than fork() from the pool: a respawn
// happens while the harness runs threads (the pool's I/O thread, the
// harness's own). A child forked from a multi-threaded process inherits every
// lock another thread held at that instant; a worker runs arbitrary C++ (a
// tenant join, the user's handlers), so it must be forked from a process that
// has only one thread. The spawner is that process, a copy of the harness
// taken at start() (handlers included). It is also the workers' parent, so a
// worker's pid cannot be reused before the spawner reaps it: a kill the pool
// asks for never hits another process, and every exit status is reported.
//
// The spawner is gone when the pool closes its control socket (or the
// harness dies): it SIGKILLs the workers still alive, reaps them and exits.
// Workers die with it (PR_SET_PDEATHSIG).

#include <krex/detail/sys.hpp>
#include <krex/error.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace krex::detail {

/// The descriptors pools keep in the harness process (control sockets, the
/// pool's ends of worker sockets). A spawner forked later, by another pool,
/// closes its copies: a worker must see end of stream when its own pool
/// closes its socket, not wait on a copy another pool's spawner holds.
/// Lock-free: the spawner reads it right after fork, whatever other threads
/// were doing.
struct pool_fd_registry {
  static constexpr int capacity = 1024;
  std::atomic<int> fds[capacity];

  pool_fd_registry() noexcept {
    for (auto& f : fds) f.store(-1);
  }
  static pool_fd_registry& get() noexcept {
    static pool_fd_registry r;
    return r;
  }
  void add(int fd) noexcept {
    // A full table costs only a slower shutdown of another pool (it waits
    // out its grace instead of seeing end of stream), never correctness.
    for (auto& f : fds) {
      int none = -1;
      if (f.compare_exchange_strong(none, fd)) return;
    }
  }
  void remove(int fd) noexcept {
    for (auto& f : fds) {
      int mine = fd;
      if (f.compare_exchange_strong(mine, -1)) return;
    }
  }
  /// In a freshly forked spawner: closes every registered descriptor.
  void close_all_in_child() noexcept {
    for (auto& f : fds) {
      const int fd = f.exchange(-1);
      if (fd >= 0) ::close(fd);
    }
  }
};

/// One message between the pool and its spawner (a SOCK_SEQPACKET datagram).
struct spawn_msg {
  enum op_code : std::int32_t {
    spawn = 1,         ///< pool -> spawner: fork worker `index`/`gen`; its socket rides along
    kill = 2,          ///< pool -> spawner: SIGKILL worker `pid` (if it is still alive)
    spawned = 3,       ///< spawner -> pool: worker `index`/`gen` is `pid`
    spawn_failed = 4,  ///< spawner -> pool: fork failed, `status` is the errno
    exited = 5,        ///< spawner -> pool: worker `pid` ended, `status` is its wait status
  };
  std::int32_t op = 0;
  std::int32_t index = -1;
  std::uint64_t gen = 0;
  std::int32_t pid = -1;
  std::int32_t status = 0;
};

/// "exit status 3", "killed by signal 6 (SIGABRT)": how a wait status reads in messages.
inline std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (!WIFSIGNALED(status)) return "wait status " + std::to_string(status);
  const int sig = WTERMSIG(status);
  const char* name = nullptr;  // strsignal is not thread-safe; these are the usual ends
  switch (sig) {
    case SIGABRT: name = "SIGABRT"; break;
    case SIGSEGV: name = "SIGSEGV"; break;
    case SIGBUS: name = "SIGBUS"; break;
    case SIGFPE: name = "SIGFPE"; break;
    case SIGILL: name = "SIGILL"; break;
    case SIGKILL: name = "SIGKILL"; break;
    case SIGTERM: name = "SIGTERM"; break;
    case SIGINT: name = "SIGINT"; break;
    default: break;
  }
  std::string out = "killed by signal " + std::to_string(sig);
  if (name != nullptr) out += std::string(" (") + name + ")";
  return out;
}

/// The pool's handle on its spawner process.
class pool_spawner {
 public:
  /// Runs in a new worker process (forked from the spawner) and returns when
  /// the worker is done; the process then _exits with status 0.
  using body_fn = void (*)(void* ctx, int index, int fd) noexcept;

  pool_spawner() = default;
  ~pool_spawner() { stop(std::chrono::seconds(5)); }
  pool_spawner(const pool_spawner&) = delete;
  pool_spawner& operator=(const pool_spawner&) = delete;

  /// Forks the spawner; `body(ctx, index, fd)` is what each worker runs.
  /// Throws krex::error(step::pool) when the socket or the fork fails.
  void start(body_fn body, void* ctx) {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
      throw error(step::pool, "cannot create the spawner's control socket", errno,
                  "check the process's descriptor limit (ulimit -n)");
    std::fflush(nullptr);  // no stdio buffer is written twice
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int e = errno;
      ::close(sv[0]);
      ::close(sv[1]);
      throw error(step::pool, "cannot fork the pool's spawner process", e,
                  "check the process limit (ulimit -u) and free memory");
    }
    if (pid == 0) {
      ::close(sv[0]);
      pool_fd_registry::get().close_all_in_child();
      run(sv[1], body, ctx);
    }
    ::close(sv[1]);
    m_ctl = sv[0];
    m_pid = pid;
    pool_fd_registry::get().add(m_ctl);
  }

  int fd() const noexcept { return m_ctl; }
  pid_t pid() const noexcept { return m_pid; }

  /// Asks for worker `index` (generation `gen`) on `worker_fd`, the worker's
  /// end of its socket (the caller still closes its copy). 0 or an errno.
  int spawn(int index, std::uint64_t gen, int worker_fd) noexcept {
    spawn_msg m;
    m.op = spawn_msg::spawn;
    m.index = index;
    m.gen = gen;
    return send_msg(m_ctl, m, worker_fd);
  }
  /// Asks for worker `pid` to be SIGKILLed. 0 or an errno.
  int kill(pid_t pid) noexcept {
    spawn_msg m;
    m.op = spawn_msg::kill;
    m.pid = pid;
    return send_msg(m_ctl, m, -1);
  }
  /// The next report, without waiting: 1 (got one), 0 (none yet), -1 (the spawner is gone).
  int next(spawn_msg& m) noexcept {
    for (;;) {
      const ssize_t n = ::recv(m_ctl, &m, sizeof m, MSG_DONTWAIT);
      if (n == static_cast<ssize_t>(sizeof m)) return 1;
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
      return -1;
    }
  }

  /// Closes the control socket: the spawner SIGKILLs the workers still
  /// alive, reaps them and exits. Waits at most `bound` for that, then
  /// SIGKILLs the spawner. Idempotent.
  void stop(std::chrono::milliseconds bound) noexcept {
    if (m_ctl >= 0) {
      pool_fd_registry::get().remove(m_ctl);
      ::close(m_ctl);
      m_ctl = -1;
    }
    if (m_pid <= 0) return;
    const auto end = std::chrono::steady_clock::now() + bound;
    int status = 0;
    for (bool killed = false;;) {
      const pid_t r = ::waitpid(m_pid, &status, WNOHANG);
      if (r == m_pid || r < 0) break;  // reaped, or reaped by someone else (waitpid(-1))
      if (std::chrono::steady_clock::now() >= end) {
        if (killed) break;  // give up rather than hang: it is unkillable right now
        ::kill(m_pid, SIGKILL);
        killed = true;
        continue;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    m_pid = -1;
  }

 private:
  static int send_msg(int ctl, const spawn_msg& m, int fd) noexcept {
    if (ctl < 0) return EBADF;
    iovec iov{const_cast<spawn_msg*>(&m), sizeof m};
    msghdr h{};
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
    if (fd >= 0) {
      std::memset(cbuf, 0, sizeof cbuf);
      h.msg_control = cbuf;
      h.msg_controllen = sizeof cbuf;
      cmsghdr* c = CMSG_FIRSTHDR(&h);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
    }
    for (;;) {
      if (::sendmsg(ctl, &h, MSG_NOSIGNAL) >= 0) return 0;
      if (errno != EINTR) return errno;
    }
  }

  // Receives one message and the descriptor riding along (or -1).
  // Returns the byte count, 0 at end of stream, -1 on error (errno).
  static ssize_t recv_msg(int ctl, spawn_msg& m, int& fd) noexcept {
    fd = -1;
    iovec iov{&m, sizeof m};
    msghdr h{};
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int))];
    h.msg_control = cbuf;
    h.msg_controllen = sizeof cbuf;
    const ssize_t n = ::recvmsg(ctl, &h, MSG_CMSG_CLOEXEC);
    if (n <= 0) return n;
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS)
        std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return n;
  }

  // The spawner's whole life. Single-threaded; never returns.
  [[noreturn]] static void run(int ctl, body_fn body, void* ctx) noexcept {
    // Exit statuses are read through a signalfd; a harness that ignores
    // SIGCHLD would have the kernel reap them unseen.
    ::signal(SIGCHLD, SIG_DFL);
    sigset_t chld, old;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    ::sigprocmask(SIG_BLOCK, &chld, &old);
    const int sfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    const pid_t self = ::getpid();
    std::vector<pid_t> live;
    const auto report = [&](spawn_msg m) { (void)send_msg(ctl, m, -1); };
    const auto reap = [&] {
      int status = 0;
      pid_t p;
      while ((p = ::waitpid(-1, &status, WNOHANG)) > 0) {
        const auto it = std::find(live.begin(), live.end(), p);
        if (it == live.end()) continue;
        live.erase(it);
        spawn_msg m;
        m.op = spawn_msg::exited;
        m.pid = p;
        m.status = status;
        report(m);
      }
    };
    for (;;) {
      pollfd p[2] = {{ctl, POLLIN, 0}, {sfd, POLLIN, 0}};
      // Without a signalfd (it failed), poll reaps every 50 ms instead.
      if (::poll(p, sfd >= 0 ? 2 : 1, sfd >= 0 ? -1 : 50) < 0 && errno != EINTR) break;
      if (sfd >= 0 && (p[1].revents & POLLIN) != 0) {
        signalfd_siginfo si;
        while (::read(sfd, &si, sizeof si) > 0) {
        }
      }
      reap();
      if (p[0].revents == 0) continue;
      spawn_msg m;
      int fd = -1;
      const ssize_t n = recv_msg(ctl, m, fd);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // the pool closed its end, or the harness died
      if (m.op == spawn_msg::spawn) {
        const pid_t pid = ::fork();
        if (pid == 0) {
          ::close(ctl);
          if (sfd >= 0) ::close(sfd);
          ::sigprocmask(SIG_SETMASK, &old, nullptr);
          ::prctl(PR_SET_PDEATHSIG, SIGKILL);
          if (::getppid() != self) ::_exit(1);  // the spawner died before prctl
          if (fd >= 0) body(ctx, m.index, fd);
          std::fflush(nullptr);
          ::_exit(0);
        }
        spawn_msg r;
        r.index = m.index;
        r.gen = m.gen;
        if (pid < 0) {
          r.op = spawn_msg::spawn_failed;
          r.status = errno;
        } else {
          r.op = spawn_msg::spawned;
          r.pid = pid;
          live.push_back(pid);
        }
        report(r);
      } else if (m.op == spawn_msg::kill) {
        // Only our own, not yet reaped children: their pids cannot have been reused.
        if (std::find(live.begin(), live.end(), m.pid) != live.end()) {
          ::kill(m.pid, SIGCONT);  // a signal-stopped worker dies only once it runs
          ::kill(m.pid, SIGKILL);
        }
      }
      if (fd >= 0) ::close(fd);
    }
    for (const pid_t w : live) ::kill(w, SIGKILL);
    // Reap them, bounded: a worker in a frozen cgroup v1 cannot die until thawed.
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!live.empty() && std::chrono::steady_clock::now() < end) {
      int status = 0;
      const pid_t p = ::waitpid(-1, &status, WNOHANG);
      if (p > 0) {
        live.erase(std::remove(live.begin(), live.end(), p), live.end());
        continue;
      }
      if (p < 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ::_exit(0);
  }

  int m_ctl = -1;
  pid_t m_pid = -1;
};

}  // namespace krex::detail
