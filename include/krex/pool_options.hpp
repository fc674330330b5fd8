// SPDX-License-Identifier: Apache-2.0
#pragma once

// What a krex::pool is configured with (pool_options) and what it gives back:
// a command's pool_result and each worker's pool_worker_stats. The pool
// itself is pool.hpp.

#include <krex/detail/config.hpp>
#include <krex/error.hpp>
#include <krex/options.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace krex {

namespace detail {
/// Every pool_options setter, in the order of the class and docs/POOL.md's
/// table (generated from pool_option_table).
enum class pool_option_id {
  workers,
  devices,
  all_devices,
  tenant,
  timeout,
  respawn,
  start_retries,
  recycle_on_error,
  start_timeout,
  shutdown_grace,
};

/// A pool option, as detail::option_spec is a tenant's: integer (lo..hi),
/// milliseconds (at least lo) and boolean rows hold their value in the
/// table's slot; a row with `def_text` is documented here and held by a
/// field of its own (devices, all_devices, tenant).
struct pool_option_spec {
  pool_option_id id;
  option_kind kind;
  const char* name;  ///< the setter
  const char* arg;   ///< its argument, as docs/POOL.md writes it
  long long lo, hi, def;
  const char* doc;                 ///< what it does (an integer's range follows it)
  const char* accepted;            ///< integer: the accepted text of an error ("": the range)
  const char* def_text = nullptr;  ///< a row held by a field of its own: its default's text
};

inline constexpr pool_option_spec pool_option_table[] = {
    {pool_option_id::workers, option_kind::integer, "workers", "n", 1, 256, 1,
     "worker processes per device", "1..256 (one worker process per concurrent command)"},
    {pool_option_id::devices, option_kind::integer, "devices", "{...}", 0, 0, 0,
     "the devices served, each ordinal once", "", "unset: one device, `tenant().device()`"},
    {pool_option_id::all_devices, option_kind::boolean, "all_devices", "", 0, 0, 0,
     "every device the backend sees, counted at `start()`", "", ""},
    {pool_option_id::tenant, option_kind::integer, "tenant", "options", 0, 0, 0,
     "each worker's tenant; `KREX_*` variables still apply in the worker", "", "`krex::options{}`"},
    {pool_option_id::timeout, option_kind::milliseconds, "timeout", "ms", 0, 0, 600'000,
     "per command, from when it is sent; 0 = none", ""},
    {pool_option_id::respawn, option_kind::boolean, "respawn", "bool", 0, 0, 1,
     "replace a worker that died", ""},
    {pool_option_id::start_retries, option_kind::integer, "start_retries", "n", 0, 1000, 3,
     "failed starts in a row before a worker's place is given up", ""},
    {pool_option_id::recycle_on_error, option_kind::boolean, "recycle_on_error", "bool", 0, 0, 0,
     "replace the worker after a command whose handler threw (a CUDA error can leave a context "
     "unusable)",
     ""},
    {pool_option_id::start_timeout, option_kind::milliseconds, "start_timeout", "ms", 1, 0, 60'000,
     "how long `start()` waits for every worker", ""},
    {pool_option_id::shutdown_grace, option_kind::milliseconds, "shutdown_grace", "ms", 0, 0,
     10'000,
     "in-flight commands get this long at shutdown; then workers get max(this, 1 s) to "
     "leave",
     ""},
};
inline constexpr std::size_t pool_option_count =
    sizeof(pool_option_table) / sizeof(pool_option_table[0]);
static_assert(static_cast<std::size_t>(pool_option_id::shutdown_grace) + 1 == pool_option_count,
              "pool_option_table: a row per pool_option_id");

constexpr const pool_option_spec& pool_option(pool_option_id id) {
  return pool_option_table[static_cast<std::size_t>(id)];
}
}  // namespace detail

/// Configuration of a worker pool. Setters validate at once and throw
/// krex::error (step::options) naming the option and the accepted values.
/// Each option's range, default and meaning are detail::pool_option_table's.
class pool_options {
 public:
  using ms = std::chrono::milliseconds;
  using id = detail::pool_option_id;

  /// Worker processes per device, each with its own tenant (1..256; default
  /// 1). A pool over one device (the default) has exactly this many.
  pool_options& workers(int n) { return set(id::workers, n); }
  int workers() const noexcept { return static_cast<int>(get(id::workers)); }

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
  pool_options& timeout(ms t) { return set(id::timeout, t.count()); }
  ms timeout() const noexcept { return ms(get(id::timeout)); }

  /// Replace a worker that died (crash, kill, timeout). Default true.
  pool_options& respawn(bool b) noexcept { return put(id::respawn, b); }
  bool respawn() const noexcept { return get(id::respawn) != 0; }

  /// Starts in a row that may fail for one worker before its place is given
  /// up (a replacement that cannot join, a crash before its tenant is up):
  /// the bound on respawn loops. Default 3. At start() any failure throws.
  pool_options& start_retries(int n) { return set(id::start_retries, n); }
  int start_retries() const noexcept { return static_cast<int>(get(id::start_retries)); }

  /// Replace a worker after a command whose handler threw (a CUDA error can
  /// leave its context unusable: a fresh process gets a fresh one). Default false.
  pool_options& recycle_on_error(bool b) noexcept { return put(id::recycle_on_error, b); }
  bool recycle_on_error() const noexcept { return get(id::recycle_on_error) != 0; }

  /// How long start() waits for every worker's tenant to join. Default 60 s.
  pool_options& start_timeout(ms t) { return set(id::start_timeout, t.count()); }
  ms start_timeout() const noexcept { return ms(get(id::start_timeout)); }

  /// Shutdown: how long commands in flight may still finish, and then how
  /// long (at least 1 s) workers get to leave the node before they are
  /// killed. Default 10 s.
  pool_options& shutdown_grace(ms t) { return set(id::shutdown_grace, t.count()); }
  ms shutdown_grace() const noexcept { return ms(get(id::shutdown_grace)); }

 private:
  long long get(id i) const noexcept { return m_value[static_cast<std::size_t>(i)]; }
  pool_options& put(id i, long long v) noexcept {
    m_value[static_cast<std::size_t>(i)] = v;
    return *this;
  }
  /// Checked against the row, the message naming "pool <setter>".
  pool_options& set(id i, long long v) {
    const detail::pool_option_spec& s = detail::pool_option(i);
    const std::string name = std::string("pool ") + s.name;
    if (s.kind == detail::option_kind::milliseconds && v < s.lo)
      detail::bad_option(name, std::to_string(v) + " ms",
                         "a duration of at least " + std::to_string(s.lo) + " ms");
    if (s.kind == detail::option_kind::integer && (v < s.lo || v > s.hi))
      detail::bad_option(name, std::to_string(v),
                         *s.accepted != '\0' ? std::string(s.accepted)
                                             : std::to_string(s.lo) + ".." + std::to_string(s.hi));
    return put(i, v);
  }
  static constexpr std::array<long long, detail::pool_option_count> defaults() {
    std::array<long long, detail::pool_option_count> out{};
    for (std::size_t i = 0; i < detail::pool_option_count; ++i)
      out[i] = detail::pool_option_table[i].def;
    return out;
  }

  std::array<long long, detail::pool_option_count> m_value = defaults();
  std::vector<int> m_devices;
  bool m_all_devices = false;
  options m_tenant;
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
