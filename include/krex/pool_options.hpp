// SPDX-License-Identifier: Apache-2.0
#pragma once

// What a krex::pool is configured with (pool_options) and what it gives back:
// a command's pool_result and each worker's pool_worker_stats. The pool
// itself is pool.hpp.

#include <krex/detail/config.hpp>
#include <krex/error.hpp>
#include <krex/options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace krex {

/// Configuration of a worker pool. Setters validate at once and throw
/// krex::error (step::options) naming the option and the accepted values.
class pool_options {
 public:
  using ms = std::chrono::milliseconds;

  /// Worker processes per device, each with its own tenant (1..256; default
  /// 1). A pool over one device (the default) has exactly this many.
  pool_options& workers(int n) {
    if (n < 1 || n > 256)
      detail::bad_option("pool workers", std::to_string(n),
                         "1..256 (one worker process per concurrent command)");
    m_workers = n;
    return *this;
  }
  int workers() const noexcept { return m_workers; }

  /// The devices the pool serves, `workers()` workers on each; every worker
  /// is a tenant of its own device (tenant().device() is replaced by it).
  /// Unset (the default): one device, tenant().device(). Ordinals
  /// 0..options::max_devices-1, no repeats, at least one; a device the
  /// backend does not have fails start() with the worker's join error.
  pool_options& devices(std::vector<int> list) {
    if (list.empty())
      detail::bad_option("pool devices", "{}", "at least one device ordinal, or all_devices()");
    for (std::size_t i = 0; i < list.size(); ++i) {
      const int d = list[i];
      if (d < 0 || d >= options::max_devices)
        detail::bad_option("pool devices", std::to_string(d),
                           "ordinals 0.." + std::to_string(options::max_devices - 1));
      if (std::count(list.begin(), list.end(), d) > 1)
        detail::bad_option("pool devices", std::to_string(d) + " (listed twice)",
                           "each device once");
    }
    m_devices = std::move(list);
    m_all_devices = false;
    return *this;
  }
  /// Every device the backend sees (counted at start(), in a short-lived
  /// child process, so that this process does not initialize CUDA/HIP).
  pool_options& all_devices() noexcept {
    m_devices.clear();
    m_all_devices = true;
    return *this;
  }
  /// The devices set with devices() (empty: unset or all_devices()).
  const std::vector<int>& devices() const noexcept { return m_devices; }
  /// all_devices() was chosen.
  bool on_all_devices() const noexcept { return m_all_devices; }

  /// The options every worker's tenant joins with (KREX_* still override
  /// them in the worker, except KREX_DEVICE in a pool with devices() or
  /// all_devices(): there the pool decides each worker's device).
  pool_options& tenant(const options& o) {
    m_tenant = o;
    return *this;
  }
  const options& tenant() const noexcept { return m_tenant; }

  /// How long a command may run in its worker (from when it is sent, queue
  /// time excluded; time frozen by a sibling's region counts). Past it the
  /// worker is killed and replaced, and the command fails with
  /// pool_status::timed_out. 0 = no limit. Default 600 s.
  pool_options& timeout(ms t) { return set_ms("pool timeout", m_timeout, t, 0); }
  ms timeout() const noexcept { return m_timeout; }

  /// Replace a worker that died (crash, kill, timeout). Default true.
  pool_options& respawn(bool b) noexcept {
    m_respawn = b;
    return *this;
  }
  bool respawn() const noexcept { return m_respawn; }

  /// Starts in a row that may fail for one worker before its place is given
  /// up (a replacement that cannot join, a crash before its tenant is up):
  /// the bound on respawn loops. Default 3. At start() any failure throws.
  pool_options& start_retries(int n) {
    if (n < 0 || n > 1000) detail::bad_option("pool start_retries", std::to_string(n), "0..1000");
    m_start_retries = n;
    return *this;
  }
  int start_retries() const noexcept { return m_start_retries; }

  /// Replace a worker after a command whose handler threw (a CUDA error can
  /// leave its context unusable: a fresh process gets a fresh one). Default false.
  pool_options& recycle_on_error(bool b) noexcept {
    m_recycle = b;
    return *this;
  }
  bool recycle_on_error() const noexcept { return m_recycle; }

  /// How long start() waits for every worker's tenant to join. Default 60 s.
  pool_options& start_timeout(ms t) { return set_ms("pool start_timeout", m_start_timeout, t, 1); }
  ms start_timeout() const noexcept { return m_start_timeout; }

  /// Shutdown: how long commands in flight may still finish, and then how
  /// long (at least 1 s) workers get to leave the node before they are
  /// killed. Default 10 s.
  pool_options& shutdown_grace(ms t) { return set_ms("pool shutdown_grace", m_grace, t, 0); }
  ms shutdown_grace() const noexcept { return m_grace; }

 private:
  pool_options& set_ms(const char* name, ms& field, ms t, long long min) {
    if (t.count() < min)
      detail::bad_option(name, std::to_string(t.count()) + " ms",
                         "a duration of at least " + std::to_string(min) + " ms");
    field = t;
    return *this;
  }

  int m_workers = 1;
  std::vector<int> m_devices;
  bool m_all_devices = false;
  options m_tenant;
  ms m_timeout{600'000};
  bool m_respawn = true;
  int m_start_retries = 3;
  bool m_recycle = false;
  ms m_start_timeout{60'000};
  ms m_grace{10'000};
};

/// How a command ended.
enum class pool_status {
  ok,         ///< the handler returned; pool_result::value is what it returned
  failed,     ///< the handler threw; pool_result::error is the message
  crashed,    ///< the worker died while running it (signal or exit); it was replaced
  timed_out,  ///< it ran past pool_options::timeout; its worker was killed and replaced
  cancelled,  ///< the pool shut down first, or no worker was left to run it
};

inline const char* to_string(pool_status s) noexcept {
  switch (s) {
    case pool_status::ok: return "ok";
    case pool_status::failed: return "failed";
    case pool_status::crashed: return "crashed";
    case pool_status::timed_out: return "timed_out";
    case pool_status::cancelled: return "cancelled";
  }
  return "unknown";
}

/// One command's outcome and where and how long it ran.
struct pool_result {
  pool_status status = pool_status::cancelled;
  std::string value;    ///< what the handler returned (status ok)
  std::string error;    ///< why not ok (the handler's message, the worker's end, ...)
  std::string command;  ///< the handler name
  std::uint64_t id = 0;  ///< submission number, from 1
  int device = -1;       ///< the device it ran on (-1: never sent)
  int worker = -1;       ///< index of the worker that ran it (-1: never sent)
  int pid = -1;          ///< that worker's process
  std::uint32_t slot = 0;  ///< that worker's tenant slot
  double queue_ms = 0;     ///< submitted -> sent to a worker
  double wall_ms = 0;      ///< sent -> result back (the handler and the round trip)
  double handler_ms = 0;   ///< the handler alone, timed in the worker (ok and failed)

  bool ok() const noexcept { return status == pool_status::ok; }
  /// The handler's return value; throws krex::error(step::pool) carrying
  /// `error` if the command did not succeed.
  const std::string& get() const {
    if (!ok())
      throw krex::error(step::pool, "command '" + command + "' " + to_string(status) + ": " + error);
    return value;
  }
};

/// A worker's place in the pool (its current process and what it did).
struct pool_worker_stats {
  int index = 0;
  int device = 0;          ///< the device this place's processes are tenants of
  int pid = -1;            ///< current process (-1 between a death and its replacement)
  std::uint32_t slot = 0;  ///< its tenant's slot
  bool alive = false;      ///< ready or running a command
  std::uint64_t commands = 0;  ///< commands that ended here (any status), all its processes
  std::uint64_t failures = 0;  ///< ...of which failed, crashed or timed out
  int respawns = 0;            ///< processes that replaced a dead one here
  std::string last_error;      ///< why its last process ended abnormally, or why the place was given up
};

/// One device's share of a pool (pool_stats::devices).
struct pool_device_stats {
  int device = 0;
  int workers = 0;             ///< worker places on this device
  int alive = 0;               ///< ...of which ready or running a command
  int busy = 0;                ///< ...of which running a command now
  std::uint64_t queued = 0;    ///< commands waiting for this device (submit_to)
  std::uint64_t commands = 0;  ///< commands that ended here (any status)
  std::uint64_t failures = 0;  ///< ...of which failed, crashed or timed out
  int respawns = 0;            ///< replacement processes on this device
};

/// The pool as a whole (pool.stats()): node counters and one entry per device.
struct pool_stats {
  std::uint64_t submitted = 0;  ///< commands accepted by submit()/submit_to()
  std::uint64_t queued = 0;     ///< waiting now, for any device or a given one
  int workers = 0, alive = 0, busy = 0;
  std::uint64_t ok = 0;         ///< ended with pool_status::ok
  std::uint64_t failures = 0;   ///< ended failed, crashed or timed_out
  std::uint64_t cancelled = 0;  ///< ended cancelled
  int respawns = 0;
  std::vector<pool_device_stats> devices;  ///< in the pool's device order
};

}  // namespace krex
