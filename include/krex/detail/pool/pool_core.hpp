// SPDX-License-Identifier: Apache-2.0
#pragma once

// The harness side of a worker pool (krex::pool, pool.hpp): commands queue
// in FIFO order (one queue for any device, one per device for submit_to) and
// go to idle workers, a command for any device to the least-loaded device over length-prefixed frames
// (pool_wire.hpp); one I/O thread polls every worker socket, the spawner's
// reports (pool_spawner.hpp) and the per-command deadlines. A worker's end
// is what the spawner reports (its wait status), never a socket's end of
// stream: a process the worker forked may keep its socket open.

#include <krex/detail/pool/pool_spawner.hpp>
#include <krex/detail/pool/pool_wire.hpp>
#include <krex/error.hpp>
#include <krex/pool_options.hpp>

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

namespace krex::detail {

/// The harness side of krex::pool, whatever the backend: the queue, the
/// workers' states, the I/O thread that moves commands and results, the
/// spawner, timeouts, respawns and shutdown. basic_pool<Backend> (pool.hpp)
/// adds the handlers and what runs in a worker.
class pool_core {
  using clock = std::chrono::steady_clock;

 public:
  explicit pool_core(const pool_options& o) : m_opts(o) {}
  ~pool_core() { shutdown(); }
  pool_core(const pool_core&) = delete;
  pool_core& operator=(const pool_core&) = delete;

  /// Forks the spawner (workers run `body(ctx, index, fd)`), asks it for
  /// every worker and waits until all are ready; `names` are the handler
  /// names submit() accepts; `devices` the pool's devices, opts().workers()
  /// workers each: worker i serves devices[i / workers()]. Throws
  /// krex::error(step::pool) if called twice or if a worker cannot start.
  void start(pool_spawner::body_fn body, void* ctx, std::vector<std::string> names,
             std::vector<int> devices) {
    std::unique_lock<std::mutex> lk(m_mu);
    if (m_started)
      throw error(step::pool, "start() called twice", 0, "start a pool once; make a new one to restart");
    m_names = std::move(names);
    m_devices = std::move(devices);
    if (m_devices.empty()) m_devices.push_back(m_opts.tenant().device());
    m_dq.resize(m_devices.size());
    m_wake = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (m_wake < 0) throw error(step::pool, "cannot create the pool's eventfd", errno);
    pool_fd_registry::get().add(m_wake);
    try {
      m_spawner.start(body, ctx);
    } catch (...) {
      pool_fd_registry::get().remove(m_wake);
      ::close(m_wake);
      m_wake = -1;
      throw;
    }
    m_started = true;
    const std::size_t per = static_cast<std::size_t>(m_opts.workers());
    m_workers.resize(per * m_devices.size());
    for (std::size_t i = 0; i < m_workers.size(); ++i) {
      m_workers[i].index = static_cast<int>(i);
      m_workers[i].dev = static_cast<int>(i / per);
      m_workers[i].device = m_devices[i / per];
      spawn(m_workers[i]);
    }
    m_running = true;
    m_io = std::thread([this] { io_loop(); });
    const bool up = m_cv.wait_until(lk, clock::now() + m_opts.start_timeout(), [&] {
      return !m_start_error.empty() ||
             std::all_of(m_workers.begin(), m_workers.end(),
                         [](const worker& w) { return w.st == wstate::idle; });
    });
    if (up && m_start_error.empty()) {
      m_start_done = true;
      return;
    }
    std::string why = m_start_error.empty()
                          ? "not every worker's tenant joined within " +
                                std::to_string(m_opts.start_timeout().count()) + " ms"
                          : m_start_error;
    lk.unlock();
    shutdown(std::chrono::milliseconds(0));
    throw error(step::pool, "the pool could not start: " + why, 0,
                "a worker's tenant must be able to join (see its error); start the pool before "
                "this process initializes CUDA/HIP; raise start_timeout if joins are slow");
  }

  /// Queues a command for the first idle worker (FIFO), on the least-loaded
  /// device that has one. Thread-safe. Throws krex::error(step::pool) for an
  /// unknown handler name, before start(), after shutdown(), or when no
  /// worker is left.
  std::future<pool_result> submit(const std::string& name, std::vector<std::string> args = {}) {
    return enqueue(-1, name, std::move(args));
  }

  /// Queues a command for a worker of `device` (FIFO with the other
  /// commands). Throws as submit() does, and for a device the pool does not serve.
  std::future<pool_result> submit_to(int device, const std::string& name,
                                     std::vector<std::string> args = {}) {
    return enqueue(device, name, std::move(args));
  }

  /// The devices the pool serves, in its order.
  std::vector<int> devices() const {
    std::lock_guard<std::mutex> lk(m_mu);
    return m_devices;
  }

  /// Node and per-device counters.
  pool_stats stats() const {
    std::lock_guard<std::mutex> lk(m_mu);
    pool_stats s;
    s.submitted = m_next_id;
    s.ok = m_n_ok;
    s.failures = m_n_failed;
    s.cancelled = m_n_cancelled;
    s.queued = m_queue.size();
    for (std::size_t k = 0; k < m_devices.size(); ++k) {
      pool_device_stats d;
      d.device = m_devices[k];
      d.queued = m_dq[k].size();
      s.queued += d.queued;
      s.devices.push_back(d);
    }
    for (const worker& w : m_workers) {
      pool_device_stats& d = s.devices[static_cast<std::size_t>(w.dev)];
      ++d.workers;
      if (w.st == wstate::idle || w.st == wstate::busy) ++d.alive;
      if (w.st == wstate::busy) ++d.busy;
      d.commands += w.commands;
      d.failures += w.failures;
      d.respawns += w.respawns;
    }
    for (const pool_device_stats& d : s.devices) {
      s.workers += d.workers;
      s.alive += d.alive;
      s.busy += d.busy;
      s.respawns += d.respawns;
    }
    return s;
  }

 private:
  std::future<pool_result> enqueue(int device, const std::string& name,
                                   std::vector<std::string> args) {
    std::unique_lock<std::mutex> lk(m_mu);
    if (!m_start_done || m_stopping)
      throw error(step::pool, m_stopping ? "submit() after shutdown()" : "submit() before start()",
                  0, "submit between start() and shutdown()");
    if (std::find(m_names.begin(), m_names.end(), name) == m_names.end()) {
      std::string known;
      for (const auto& h : m_names) known += (known.empty() ? "" : ", ") + h;
      throw error(step::pool, "no handler \"" + name + "\"", 0,
                  "register it with handle() before start(); registered: " + known);
    }
    int dev = -1;
    if (device >= 0) {
      const auto it = std::find(m_devices.begin(), m_devices.end(), device);
      if (it == m_devices.end()) {
        std::string known;
        for (int d : m_devices) known += (known.empty() ? "" : ", ") + std::to_string(d);
        throw error(step::pool, "submit_to(" + std::to_string(device) + "): the pool does not serve device " +
                                    std::to_string(device),
                    0, "pass one of the pool's devices: " + known);
      }
      dev = static_cast<int>(it - m_devices.begin());
    }
    if (!any_worker_left(dev))
      throw error(step::pool,
                  dev < 0 ? "no worker is left: " + m_last_error
                          : "no worker is left on device " + std::to_string(device) + ": " + m_last_error,
                  0, "see the workers' errors (workers()); make a new pool");
    auto j = std::make_unique<job>();
    j->id = ++m_next_id;
    j->name = name;
    j->args = std::move(args);
    j->submitted = clock::now();
    std::future<pool_result> f = j->done.get_future();
    (dev < 0 ? m_queue : m_dq[static_cast<std::size_t>(dev)]).push_back(std::move(j));
    wake();  // under the lock: shutdown() closes the eventfd under it
    return f;
  }

 public:

  /// submit(name, args) and wait for the result.
  pool_result run(const std::string& name, std::vector<std::string> args = {}) {
    return submit(name, std::move(args)).get();
  }

  /// Stops the pool: queued commands are cancelled; commands in flight get
  /// `grace` to finish; then every worker's socket is closed and workers
  /// leave the node (at most max(grace, 1 s)); the rest are killed, and
  /// their commands cancelled. Bounded; noexcept; idempotent.
  void shutdown(std::chrono::milliseconds grace) noexcept {
    std::unique_lock<std::mutex> lk(m_mu);
    if (!m_running || m_stopping) {
      m_cv.wait(lk, [&] { return !m_running; });
      return;
    }
    m_stopping = true;
    for (auto& j : m_queue)
      finish(*j, pool_status::cancelled, "the pool shut down before the command was sent");
    m_queue.clear();
    for (auto& q : m_dq) {
      for (auto& j : q)
        finish(*j, pool_status::cancelled, "the pool shut down before the command was sent");
      q.clear();
    }
    wake();
    const auto none_busy = [&] {
      return std::none_of(m_workers.begin(), m_workers.end(),
                          [](const worker& w) { return w.st == wstate::busy; });
    };
    const auto all_gone = [&] {
      return std::all_of(m_workers.begin(), m_workers.end(), [](const worker& w) {
        return w.st == wstate::exited || w.st == wstate::retired;
      });
    };
    m_cv.wait_until(lk, clock::now() + grace, none_busy);
    m_phase = phase::closing;
    wake();
    m_cv.wait_until(lk, clock::now() + std::max(grace, std::chrono::milliseconds(1000)), all_gone);
    m_phase = phase::killing;
    wake();
    m_cv.wait_until(lk, clock::now() + std::chrono::seconds(5), all_gone);
    m_io_stop = true;
    lk.unlock();
    wake();
    if (m_io.joinable()) m_io.join();
    m_spawner.stop(std::chrono::seconds(5));  // kills whatever is left
    lk.lock();
    for (worker& w : m_workers) {
      if (w.current)
        finish(*w.current, pool_status::cancelled,
               "the pool shut down while the command ran (worker killed)");
      w.current.reset();
      close_fd(w);
      if (w.st != wstate::retired) w.st = wstate::exited;
    }
    if (m_wake >= 0) {
      pool_fd_registry::get().remove(m_wake);
      ::close(m_wake);
      m_wake = -1;
    }
    m_running = false;
    m_cv.notify_all();
  }
  void shutdown() noexcept { shutdown(m_opts.shutdown_grace()); }

  /// Each worker place: current pid and slot, commands, respawns, last error.
  std::vector<pool_worker_stats> workers() const {
    std::lock_guard<std::mutex> lk(m_mu);
    std::vector<pool_worker_stats> out;
    for (const worker& w : m_workers) {
      pool_worker_stats s;
      s.index = w.index;
      s.device = w.device;
      s.pid = w.pid;
      s.slot = w.slot;
      s.alive = w.st == wstate::idle || w.st == wstate::busy;
      s.commands = w.commands;
      s.failures = w.failures;
      s.respawns = w.respawns;
      s.last_error = w.last_error;
      out.push_back(s);
    }
    return out;
  }

  const pool_options& opts() const noexcept { return m_opts; }
 private:
  struct job {
    std::uint64_t id = 0;
    std::string name;
    std::vector<std::string> args;
    std::promise<pool_result> done;
    clock::time_point submitted, sent;
    int device = -1;
    int worker = -1;
    int pid = -1;
    std::uint32_t slot = 0;
  };
  // spawning: asked the spawner; starting: forked, tenant joining; idle,
  // busy: ready; recycling/killing: asked to end; exited: gone (shutdown);
  // retired: given up.
  enum class wstate { spawning, starting, idle, busy, recycling, killing, exited, retired };
  struct worker {
    int index = 0;
    int dev = 0;     // index into m_devices
    int device = 0;  // the ordinal
    std::uint64_t gen = 0;
    wstate st = wstate::exited;
    int pid = -1;
    std::uint32_t slot = 0;
    int fd = -1;
    pool_wire::inbox in;
    pool_wire::outbox out;
    std::unique_ptr<job> current;
    clock::time_point deadline;
    std::uint64_t commands = 0, failures = 0;
    int respawns = 0;
    int start_failures = 0;  // in a row
    std::string start_error, last_error, protocol_error;
  };
  enum class phase { running, closing, killing };

  void wake() const noexcept {
    const std::uint64_t one = 1;
    if (m_wake >= 0) (void)!::write(m_wake, &one, sizeof one);
  }

  // A worker not given up, on device index `dev` (-1: on any device).
  bool any_worker_left(int dev = -1) const noexcept {
    return std::any_of(m_workers.begin(), m_workers.end(), [dev](const worker& w) {
      return w.st != wstate::retired && (dev < 0 || w.dev == dev);
    });
  }

  static double ms_between(clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  }

  // Completes a job's future (called under m_mu, by one thread per job).
  void finish(job& j, pool_status s, const std::string& text, double handler_ms = 0) {
    if (s == pool_status::ok)
      ++m_n_ok;
    else if (s == pool_status::cancelled)
      ++m_n_cancelled;
    else
      ++m_n_failed;
    pool_result r;
    r.status = s;
    (s == pool_status::ok ? r.value : r.error) = text;
    r.command = j.name;
    r.id = j.id;
    r.device = j.device;
    r.worker = j.worker;
    r.pid = j.pid;
    r.slot = j.slot;
    const clock::time_point now = clock::now();
    if (j.worker >= 0) {
      r.queue_ms = ms_between(j.submitted, j.sent);
      r.wall_ms = ms_between(j.sent, now);
    } else {
      r.queue_ms = ms_between(j.submitted, now);
    }
    r.handler_ms = handler_ms;
    j.done.set_value(std::move(r));
  }

  void close_fd(worker& w) noexcept {
    if (w.fd < 0) return;
    pool_fd_registry::get().remove(w.fd);
    ::close(w.fd);
    w.fd = -1;
    w.in.clear();
    w.out.clear();
  }

  // A new process for `w`: a fresh socket, the spawner forks it.
  void spawn(worker& w) {
    close_fd(w);
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
      retire(w, std::string("cannot create a worker socket: ") +
                    std::system_category().message(errno));
      return;
    }
    ++w.gen;
    w.fd = sv[0];
    pool_fd_registry::get().add(w.fd);
    const int e = m_spawner.spawn(w.index, w.gen, sv[1]);
    ::close(sv[1]);
    w.pid = -1;
    w.start_error.clear();
    w.protocol_error.clear();
    w.st = wstate::spawning;
    if (e != 0) retire(w, "the pool's spawner is gone: " + std::system_category().message(e));
  }

  void retire(worker& w, const std::string& why) {
    close_fd(w);
    w.st = wstate::retired;
    w.pid = -1;
    w.last_error = why;
    m_last_error = "worker " + std::to_string(w.index) + ": " + why;
    if (!m_start_done && m_start_error.empty()) m_start_error = m_last_error;
    const auto q = static_cast<std::size_t>(w.dev);
    if (!any_worker_left(w.dev)) {
      for (auto& j : m_dq[q])
        finish(*j, pool_status::cancelled,
               "no worker is left on device " + std::to_string(w.device) + ": " + m_last_error);
      m_dq[q].clear();
    }
    if (!any_worker_left()) {
      for (auto& j : m_queue) finish(*j, pool_status::cancelled, "no worker is left: " + m_last_error);
      m_queue.clear();
    }
  }

  // The spawner reported that `w`'s process ended with wait status `status`.
  void on_exit(worker& w, int status) {
    // What it wrote before it ended is still in the socket (this report can
    // come before the I/O loop read it): a result, or why its start failed.
    if (w.fd >= 0) {
      w.in.fill(w.fd);
      std::string body;
      while (w.fd >= 0 && w.in.pop(body)) on_frame(w, body);
    }
    close_fd(w);
    const std::string how = describe_wait_status(status);
    const std::string who = "worker " + std::to_string(w.index) + " (pid " + std::to_string(w.pid) + ")";
    const wstate was = w.st;
    if (w.current) {
      job& j = *w.current;
      if (m_stopping)
        finish(j, pool_status::cancelled, "the pool shut down while the command ran; " + who + " " + how);
      else
        finish(j, pool_status::crashed,
               who + " died while running \"" + j.name + "\": " + how +
                   (w.protocol_error.empty() ? "" : " (" + w.protocol_error + ")"));
      ++w.commands;
      ++w.failures;
      w.current.reset();
    }
    w.pid = -1;
    if (was == wstate::starting || was == wstate::spawning) {
      w.last_error = w.start_error.empty() ? who + " ended before its tenant joined: " + how
                                           : w.start_error;
      if (!m_start_done) {
        retire(w, w.last_error);
        return;
      }
      if (++w.start_failures > m_opts.start_retries()) {
        retire(w, w.last_error + " (gave up after " + std::to_string(w.start_failures) +
                      " failed starts in a row)");
        return;
      }
    } else if (was != wstate::recycling) {
      w.last_error = who + " " + how;
    }
    if (m_stopping) {
      w.st = wstate::exited;
      return;
    }
    if (!m_opts.respawn() && was != wstate::recycling) {
      retire(w, w.last_error + " (respawn is off)");
      return;
    }
    ++w.respawns;
    spawn(w);
  }

  void on_frame(worker& w, const std::string& body) {
    namespace wire = pool_wire;
    wire::reader r(body);
    const wire::kind k = r.what();
    if (k == wire::kind::ready && (w.st == wstate::starting || w.st == wstate::spawning)) {
      w.pid = static_cast<int>(r.u32());
      w.slot = r.u32();
      if (!r.ok()) return protocol_error(w, "a malformed ready message");
      w.st = wstate::idle;
      w.start_failures = 0;
      return;
    }
    if (k == wire::kind::start_failed) {
      w.start_error = r.str();  // its end follows from the spawner
      return;
    }
    if (k == wire::kind::result && w.current) {
      const std::uint64_t id = r.u64();
      const bool ok = r.u8() != 0;
      const std::string text = r.str();
      const std::uint64_t ns = r.u64();
      if (!r.ok() || id != w.current->id) return protocol_error(w, "a malformed result");
      finish(*w.current, ok ? pool_status::ok : pool_status::failed, text,
             static_cast<double>(ns) / 1e6);
      w.current.reset();
      ++w.commands;
      if (!ok) ++w.failures;
      if (!ok && m_opts.recycle_on_error()) {
        w.st = wstate::recycling;  // the worker exits by itself after this result
        w.last_error = "recycled after a failed command";
      } else {
        w.st = wstate::idle;
      }
      return;
    }
    protocol_error(w, "an unexpected message");
  }

  void protocol_error(worker& w, const std::string& what) {
    w.protocol_error = "it sent " + what;
    kill(w);
  }

  void kill(worker& w) {
    if (w.pid > 0) (void)m_spawner.kill(w.pid);
    if (w.st != wstate::spawning) w.st = wstate::killing;
  }

  // The first idle worker on device index `dev`, or null.
  worker* idle_worker(int dev) {
    for (worker& w : m_workers)
      if (w.dev == dev && w.st == wstate::idle && w.fd >= 0) return &w;
    return nullptr;
  }

  // Among the devices with an idle worker, the one whose workers are the
  // least busy (busy / alive; ties: fewer busy, then pool order); -1 if none.
  int least_loaded() const {
    const std::size_t n = m_devices.size();
    std::vector<int> busy(n, 0), alive(n, 0), idle(n, 0);
    for (const worker& w : m_workers) {
      const auto k = static_cast<std::size_t>(w.dev);
      if (w.st == wstate::busy) ++busy[k];
      if (w.st == wstate::idle && w.fd >= 0) ++idle[k];
      if (w.st == wstate::idle || w.st == wstate::busy) ++alive[k];
    }
    int best = -1;
    for (std::size_t k = 0; k < n; ++k) {
      if (idle[k] == 0) continue;
      if (best < 0) {
        best = static_cast<int>(k);
        continue;
      }
      const auto b = static_cast<std::size_t>(best);
      const long long lhs = static_cast<long long>(busy[k]) * alive[b];
      const long long rhs = static_cast<long long>(busy[b]) * alive[k];
      if (lhs < rhs || (lhs == rhs && busy[k] < busy[b])) best = static_cast<int>(k);
    }
    return best;
  }

  // Sends queued commands to idle workers, oldest command first: a device
  // queue's head goes to its device, the any-device queue's head to the
  // least-loaded device with an idle worker.
  void dispatch() {
    namespace wire = pool_wire;
    for (;;) {
      std::deque<std::unique_ptr<job>>* from = nullptr;
      int dev = -1;
      std::uint64_t oldest = ~std::uint64_t{0};
      for (std::size_t k = 0; k < m_dq.size(); ++k)
        if (!m_dq[k].empty() && m_dq[k].front()->id < oldest &&
            idle_worker(static_cast<int>(k)) != nullptr) {
          oldest = m_dq[k].front()->id;
          from = &m_dq[k];
          dev = static_cast<int>(k);
        }
      if (!m_queue.empty() && m_queue.front()->id < oldest) {
        const int k = least_loaded();
        if (k >= 0) {
          from = &m_queue;
          dev = k;
        }
      }
      if (from == nullptr) return;
      worker& w = *idle_worker(dev);
      std::unique_ptr<job> j = std::move(from->front());
      from->pop_front();
      wire::writer f(wire::kind::command);
      f.u64(j->id).str(j->name).u32(static_cast<std::uint32_t>(j->args.size()));
      for (const std::string& a : j->args) f.str(a);
      std::string frame = f.take();
      if (frame.empty()) {
        finish(*j, pool_status::failed, "the command's arguments are over 64 MiB");
        continue;
      }
      j->device = w.device;
      j->worker = w.index;
      j->pid = w.pid;
      j->slot = w.slot;
      j->sent = clock::now();
      w.out.push(frame);
      w.current = std::move(j);
      w.st = wstate::busy;
      if (m_opts.timeout().count() > 0) w.deadline = w.current->sent + m_opts.timeout();
      if (w.out.flush(w.fd) != 0) close_fd(w);  // its end follows from the spawner
    }
  }

  void check_deadlines() {
    const clock::time_point now = clock::now();
    for (worker& w : m_workers) {
      if (w.st != wstate::busy || m_opts.timeout().count() == 0 || now < w.deadline) continue;
      finish(*w.current, pool_status::timed_out,
             "ran past the pool's timeout of " + std::to_string(m_opts.timeout().count()) +
                 " ms; worker " + std::to_string(w.index) + " (pid " + std::to_string(w.pid) +
                 ") was killed and is replaced");
      w.current.reset();
      ++w.commands;
      ++w.failures;
      w.last_error = "killed: a command timed out";
      kill(w);
    }
  }

  int poll_timeout_ms() const {
    int t = 200;  // a bound, not a tick: every event wakes the loop at once
    if (m_opts.timeout().count() == 0) return t;
    const clock::time_point now = clock::now();
    for (const worker& w : m_workers)
      if (w.st == wstate::busy) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(w.deadline - now);
        t = std::min(t, static_cast<int>(std::max<long long>(left.count() + 1, 0)));
      }
    return t;
  }

  void on_spawner_message(const spawn_msg& m) {

    if (m.op == spawn_msg::spawned || m.op == spawn_msg::spawn_failed) {
      if (m.index < 0 || static_cast<std::size_t>(m.index) >= m_workers.size()) return;
      worker& w = m_workers[static_cast<std::size_t>(m.index)];
      if (w.gen != m.gen || w.st != wstate::spawning) return;
      if (m.op == spawn_msg::spawn_failed) {
        retire(w, "the spawner could not fork a worker: " + std::system_category().message(m.status));
        return;
      }
      w.pid = m.pid;
      w.st = wstate::starting;
      if (m_phase == phase::killing) kill(w);
      return;
    }
    if (m.op == spawn_msg::exited)
      for (worker& w : m_workers)
        if (w.pid == m.pid && w.st != wstate::retired && w.st != wstate::exited) {
          on_exit(w, m.status);
          return;
        }
  }

  void on_spawner_gone() {
    for (worker& w : m_workers) {
      if (w.st == wstate::retired || w.st == wstate::exited) continue;
      if (w.current) {
        finish(*w.current, m_stopping ? pool_status::cancelled : pool_status::crashed,
               "the pool's spawner process died; its workers died with it");
        w.current.reset();
      }
      if (m_stopping) {
        close_fd(w);
        w.st = wstate::exited;
      } else {
        retire(w, "the pool's spawner process died");
      }
    }
  }

  void io_loop() {
    std::unique_lock<std::mutex> lk(m_mu);
    std::vector<pollfd> fds;
    std::vector<int> who;  // worker index per pollfd; -1 wake, -2 spawner
    phase acted = phase::running;
    while (!m_io_stop) {
      if (m_phase != acted) {
        acted = m_phase;
        for (worker& w : m_workers) {
          if (acted == phase::closing) close_fd(w);  // workers see end of stream and leave
          if (acted == phase::killing && w.st != wstate::exited && w.st != wstate::retired) kill(w);
        }
      }
      if (!m_stopping) dispatch();
      check_deadlines();
      fds.clear();
      who.clear();
      fds.push_back({m_wake, POLLIN, 0});
      who.push_back(-1);
      if (m_spawner.fd() >= 0) {
        fds.push_back({m_spawner.fd(), POLLIN, 0});
        who.push_back(-2);
      }
      for (const worker& w : m_workers)
        if (w.fd >= 0) {
          fds.push_back({w.fd, static_cast<short>(POLLIN | (w.out.empty() ? 0 : POLLOUT)), 0});
          who.push_back(w.index);
        }
      const int timeout = poll_timeout_ms();
      lk.unlock();
      const int n = ::poll(fds.data(), fds.size(), timeout);
      lk.lock();
      if (n <= 0) continue;
      for (std::size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        if (who[i] == -1) {
          std::uint64_t v;
          while (::read(m_wake, &v, sizeof v) > 0) {
          }
        } else if (who[i] == -2) {
          spawn_msg m;
          int r;
          while ((r = m_spawner.next(m)) == 1) on_spawner_message(m);
          if (r < 0) {
            m_spawner.stop(std::chrono::seconds(5));
            on_spawner_gone();
          }
        } else {
          worker& w = m_workers[static_cast<std::size_t>(who[i])];
          if (w.fd != fds[i].fd) continue;  // closed (and maybe reopened) meanwhile
          if ((fds[i].revents & POLLOUT) != 0 && w.out.flush(w.fd) != 0) {
            close_fd(w);
            continue;
          }
          if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
          const bool open = w.in.fill(w.fd);
          std::string body;
          while (w.fd >= 0 && w.in.pop(body)) on_frame(w, body);
          if (w.in.bad()) protocol_error(w, "a frame over 64 MiB");
          if (!open) close_fd(w);  // its end follows from the spawner
        }
      }
      m_cv.notify_all();
    }
  }

  pool_options m_opts;
  std::vector<std::string> m_names;
  std::vector<int> m_devices;  // the ordinals, in the pool's order
  mutable std::mutex m_mu;
  std::condition_variable m_cv;
  pool_spawner m_spawner;
  std::vector<worker> m_workers;
  std::deque<std::unique_ptr<job>> m_queue;            // for any device
  std::vector<std::deque<std::unique_ptr<job>>> m_dq;  // per device index (submit_to)
  std::uint64_t m_n_ok = 0, m_n_failed = 0, m_n_cancelled = 0;
  std::thread m_io;
  int m_wake = -1;
  std::uint64_t m_next_id = 0;
  bool m_started = false;     // start() was called
  bool m_start_done = false;  // ...and every worker came up
  bool m_running = false;     // the I/O thread runs (until shutdown() is done)
  bool m_stopping = false;
  bool m_io_stop = false;
  phase m_phase = phase::running;
  std::string m_start_error, m_last_error;
};

}  // namespace krex::detail
