// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::pool: persistent worker processes that each keep their device
// context and their krex::tenant and run the commands a harness sends them,
// so a harness that would spawn a process per candidate pays context
// creation and tenant join once per worker instead of once per command. No
// daemon: the pool lives in the harness process.
//
//     krex::pool p{krex::pool_options{}.workers(8).tenant(krex::options{}.device(0))};
//     p.handle("bench", [](krex::tenant& t, const std::vector<std::string>& args) {
//       // compile, check ...
//       krex::region r{t};
//       return to_json(krex::measure(r, [&] { ... }));
//     });
//     p.start();  // before this process touches CUDA: a context does not survive fork
//     std::string out = p.run("bench", {"candidate-17"}).get();
//
// Over several devices: pool_options{}.devices({0, 1, 2, 3}).workers(2) (or
// .all_devices()) starts two workers per device, each a tenant of its own
// device; submit() goes to the least-loaded device, submit_to(d, ...) to d.
//
// docs/POOL.md: when to use it, the fork-before-CUDA rule, faults, the API.

#include <krex/detail/config.hpp>
#include <krex/detail/pool/pool_core.hpp>
#include <krex/detail/pool/pool_worker.hpp>
#include <krex/error.hpp>
#include <krex/options.hpp>
#include <krex/pool_options.hpp>
#include <krex/region.hpp>
#include <krex/tenant.hpp>

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace krex {

/// A pool of persistent worker processes, each a member of the node through
/// its own basic_tenant<Backend>, running named commands sent by this
/// (harness) process. Register handlers, start(), then submit() or run()
/// from any thread. Neither copyable nor movable.
template <class Backend>
class basic_pool {
 public:
  using tenant_type = basic_tenant<Backend>;
  /// A command handler: runs in a worker, on that worker's tenant, with the
  /// command's arguments; returns the result payload (e.g. JSON). What it
  /// throws becomes the command's error (pool_status::failed).
  using handler = std::function<std::string(tenant_type&, const std::vector<std::string>&)>;

  explicit basic_pool(const pool_options& o = pool_options{}) : m_core(o) {}
  /// shutdown() with the configured grace.
  ~basic_pool() { shutdown(); }
  basic_pool(const basic_pool&) = delete;
  basic_pool& operator=(const basic_pool&) = delete;

  /// Registers handler `name`. Only before start() (workers are copies of
  /// this process taken then). Throws krex::error(step::pool) after start,
  /// for an empty name or callable, or a name registered twice.
  basic_pool& handle(const std::string& name, handler h) {
    std::lock_guard<std::mutex> lk(m_mu);
    check_not_started("handle(\"" + name + "\")");
    if (name.empty())
      throw error(step::pool, "handle() with an empty name", 0,
                  "name each command: submit() picks the handler by this name");
    if (!h)
      throw error(step::pool, "handler \"" + name + "\" is empty", 0,
                  "pass a callable std::string(krex::tenant&, const std::vector<std::string>&)");
    if (!m_handlers.emplace(name, std::move(h)).second)
      throw error(step::pool, "handler \"" + name + "\" is registered twice", 0,
                  "give each handler its own name");
    return *this;
  }

  /// Sets what each worker runs once, after its tenant joined and before it
  /// takes commands (and again in every replacement): e.g. create the CUDA
  /// context (`cudaFree(0)`), load modules, allocate buffers, so that no
  /// command pays for them. What it throws fails that worker's start, with
  /// its message. Only before start().
  basic_pool& on_worker_start(std::function<void(tenant_type&)> fn) {
    std::lock_guard<std::mutex> lk(m_mu);
    check_not_started("on_worker_start()");
    m_on_start = std::move(fn);
    return *this;
  }

  /// Forks the pool's spawner and the workers, and waits until every
  /// worker's tenant has joined (and its on_worker_start ran). Call it
  /// before this process initializes CUDA or HIP (a device context does not
  /// survive fork) and before it joins a tenant of its own; throws
  /// krex::error(step::pool) if it has, if no handler is registered, if
  /// called twice, or if a worker cannot start (its own error is in the message).
  void start() {
    std::vector<std::string> names;
    {
      std::lock_guard<std::mutex> lk(m_mu);
      if (m_started)
        throw error(step::pool, "start() called twice", 0,
                    "start a pool once; make a new one to restart");
      if (m_handlers.empty())
        throw error(step::pool, "start() with no handler registered", 0,
                    "register the commands with handle(name, fn) before start()");
      if (detail::process_holds_tenant())
        throw error(step::pool, "start() in a process that already joined a krex tenant", 0,
                    "start the pool before this process constructs a krex::tenant or touches "
                    "the GPU: workers are forked, and a CUDA/HIP context does not survive fork");
      m_started = true;
      for (const auto& h : m_handlers) names.push_back(h.first);
    }
    const pool_options& o = m_core.opts();
    m_multi = o.on_all_devices() || !o.devices().empty();
    if (o.on_all_devices()) {
      const int n = count_devices(o.tenant());
      if (n < 1)
        throw error(step::pool, "all_devices(): the backend sees no device", 0,
                    "check the driver and CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES, or list "
                    "the devices with devices({...})");
      for (int d = 0; d < n && d < options::max_devices; ++d) m_devices.push_back(d);
    } else if (!o.devices().empty()) {
      m_devices = o.devices();
    } else {
      int d = o.tenant().device();  // the device its workers join, KREX_DEVICE included
      try {
        d = o.tenant().with_env().device();
      } catch (const error&) {
        // a bad KREX_* value: every worker's join fails with it, and so does start()
      }
      m_devices.push_back(d);
    }
    m_core.start(&worker_entry, this, std::move(names), m_devices);
  }

  /// Queues a command for the first idle worker (FIFO) on the least-loaded
  /// device (the smallest share of busy workers among the devices that have
  /// an idle one). Thread-safe. Throws krex::error(step::pool) for an unknown
  /// handler name, before start(), after shutdown(), or when no worker is left.
  std::future<pool_result> submit(const std::string& name, std::vector<std::string> args = {}) {
    return m_core.submit(name, std::move(args));
  }

  /// Queues a command for a worker of `device` (the ordinal). Throws as
  /// submit() does, and for a device the pool does not serve (naming those it does).
  std::future<pool_result> submit_to(int device, const std::string& name,
                                     std::vector<std::string> args = {}) {
    return m_core.submit_to(device, name, std::move(args));
  }

  /// submit(name, args) and wait for the result.
  pool_result run(const std::string& name, std::vector<std::string> args = {}) {
    return submit(name, std::move(args)).get();
  }

  /// Stops the pool: queued commands are cancelled; commands in flight get
  /// `grace` to finish; then every worker's socket is closed and workers
  /// leave the node (at most max(grace, 1 s)); the rest are killed, and
  /// their commands cancelled. Bounded; noexcept; idempotent.
  void shutdown(std::chrono::milliseconds grace) noexcept { m_core.shutdown(grace); }
  void shutdown() noexcept { m_core.shutdown(); }

  /// Each worker place: current pid and slot, commands, respawns, last error.
  std::vector<pool_worker_stats> workers() const { return m_core.workers(); }
  /// Node counters (submitted, queued, ok, failures, cancelled, workers
  /// alive and busy, respawns) and the same per device.
  pool_stats stats() const { return m_core.stats(); }
  /// The devices the pool serves (after start(); all_devices() resolved).
  std::vector<int> devices() const { return m_core.devices(); }
  const pool_options& opts() const noexcept { return m_core.opts(); }

 private:
  void check_not_started(const std::string& what) const {
    if (m_started)
      throw error(step::pool, what + " after start()", 0,
                  "do it before start(): workers are forked copies of the process as it was then");
  }

  // In a worker process, forked from the spawner: this object is the copy
  // taken at start(); only the handlers, the hook and the options are read
  // (its mutexes may have been copied locked).
  static void worker_entry(void* self, int index, int fd) noexcept {
    const basic_pool& p = *static_cast<const basic_pool*>(self);
    options topts = p.m_core.opts().tenant();
    if (p.m_multi && !p.m_devices.empty()) {
      // The pool decides the device: KREX_DEVICE (applied at join) must not.
      // This process is single-threaded here (just forked by the spawner).
      ::unsetenv("KREX_DEVICE");  // NOLINT(concurrency-mt-unsafe)
      const int per = p.m_core.opts().workers();
      topts.device(p.m_devices[static_cast<std::size_t>(index / per) % p.m_devices.size()]);
    }
    detail::pool_worker_main<tenant_type>(fd, topts, p.m_on_start, p.m_handlers,
                                          p.m_core.opts().recycle_on_error());
  }

  // all_devices(): the backend's device count, asked in a child process so
  // that this one does not initialize CUDA/HIP before it forks the workers.
  static int count_devices(const options& o) {
    int fds[2];
    if (::pipe(fds) != 0) throw error(step::pool, "all_devices(): cannot create a pipe", errno);
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int e = errno;
      ::close(fds[0]);
      ::close(fds[1]);
      throw error(step::pool, "all_devices(): cannot fork to count the devices", e);
    }
    if (pid == 0) {
      ::close(fds[0]);
      int n = -1;
      try {
        n = typename tenant_type::backend_type(o.with_env()).device_count();
      } catch (...) {
        n = -1;
      }
      (void)!::write(fds[1], &n, sizeof n);
      ::_exit(0);
    }
    ::close(fds[1]);
    int n = -1;
    ssize_t got;
    do {
      got = ::read(fds[0], &n, sizeof n);
    } while (got < 0 && errno == EINTR);
    ::close(fds[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return got == static_cast<ssize_t>(sizeof n) ? n : -1;
  }

  std::mutex m_mu;  // registration
  bool m_started = false;
  std::map<std::string, handler> m_handlers;
  std::function<void(tenant_type&)> m_on_start;
  bool m_multi = false;       // devices() or all_devices(): the pool sets each worker's device
  std::vector<int> m_devices;  // resolved at start()
  detail::pool_core m_core;  // last: its I/O thread stops before the handlers go
};

/// A worker pool over the build's default backend (see krex::tenant).
using pool = basic_pool<default_backend>;

}  // namespace krex
