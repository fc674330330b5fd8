// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <krex/detail/layout.hpp>
#include <krex/error.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace krex {

/// How siblings' process trees are frozen during a region (step 3).
enum class freeze_method {
  automatic,  ///< the strongest method that works here: cgroup_v2, cgroup_v1, signal
  cgroup_v2,  ///< `cgroup.freeze` in each sibling's leaf cgroup
  cgroup_v1,  ///< `freezer.state` in each sibling's leaf of the v1 freezer hierarchy
  signal,     ///< SIGSTOP / SIGCONT to each sibling's process group
  none,       ///< no freezing: gate and drain only
};

/// Which siblings a region freezes.
enum class freeze_scope {
  all,     ///< every sibling of the device (the KREX paper's choice)
  device,  ///< only siblings that touch the device: device work in flight when the region
           ///< started (their drain had work to sync) or inside a gated driver call then
           ///< (launch, copy, allocation, context creation, module load...). CPU-only
           ///< siblings (compiling, generating inputs on the host) keep running on the
           ///< cores the region does not reserve; every gated call they make parks.
  active,  ///< the former name of `device`: the same selection
};

/// Who may attach to the node's segment (its security domain).
enum class segment_access {
  user,   ///< this user only: segment per uid, mode 0600
  group,  ///< this user's primary group: segment per gid, mode 0660
};

/// How submissions pass the gate (step 1).
enum class gating {
  automatic,  ///< where the backend can: every launch/copy is gated (CUDA: CUPTI); else explicit
  // NOLINTNEXTLINE(readability-identifier-naming): `explicit` is a keyword
  explicit_,  ///< only submit_guard / submit() / launch wrappers pass the gate
};

inline const char* to_string(gating g) noexcept {
  return g == gating::automatic ? "auto" : "explicit";
}

inline const char* to_string(freeze_method m) noexcept {
  switch (m) {
    case freeze_method::automatic: return "auto";
    case freeze_method::cgroup_v2: return "cgroup2";
    case freeze_method::cgroup_v1: return "cgroup1";
    case freeze_method::signal: return "signal";
    case freeze_method::none: return "none";
  }
  return "?";
}
inline const char* to_string(freeze_scope s) noexcept {
  switch (s) {
    case freeze_scope::all: return "all";
    case freeze_scope::device: return "device";
    case freeze_scope::active: return "active";
  }
  return "?";
}
inline const char* to_string(segment_access a) noexcept {
  return a == segment_access::user ? "user" : "group";
}

namespace detail {
[[noreturn]] inline void bad_option(const std::string& name, const std::string& value,
                                    const std::string& accepted) {
  throw error(step::options, "invalid value '" + value + "' for " + name,
              0, "accepted: " + accepted);
}

inline freeze_method parse_freeze_method(const std::string& name, const std::string& v) {
  if (v == "auto") return freeze_method::automatic;
  if (v == "cgroup2") return freeze_method::cgroup_v2;
  if (v == "cgroup1") return freeze_method::cgroup_v1;
  if (v == "signal") return freeze_method::signal;
  if (v == "none") return freeze_method::none;
  bad_option(name, v, "auto, cgroup2, cgroup1, signal, none");
}
inline freeze_scope parse_freeze_scope(const std::string& name, const std::string& v) {
  if (v == "all") return freeze_scope::all;
  if (v == "device") return freeze_scope::device;
  if (v == "active") return freeze_scope::active;
  bad_option(name, v, "all, device (active is its former name)");
}
inline segment_access parse_access(const std::string& name, const std::string& v) {
  if (v == "user") return segment_access::user;
  if (v == "group") return segment_access::group;
  bad_option(name, v, "user, group");
}
inline gating parse_gating(const std::string& name, const std::string& v) {
  if (v == "auto") return gating::automatic;
  if (v == "explicit") return gating::explicit_;
  bad_option(name, v, "auto, explicit");
}
inline bool parse_bool(const std::string& name, const std::string& v) {
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  if (v == "0" || v == "false" || v == "off" || v == "no") return false;
  bad_option(name, v, "1, 0, true, false, on, off, yes, no");
}
inline long long parse_int(const std::string& name, const std::string& v, long long lo,
                           long long hi, const std::string& accepted) {
  if (v.empty()) bad_option(name, v, accepted);
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0' || x < lo || x > hi)
    bad_option(name, v, accepted);
  return x;
}
inline bool valid_segment_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          c == '-' || c == '_' || c == '.'))
      return false;
  return true;
}

/// `KREX_*` variables krex reads outside options::with_env(): they are no
/// misspelling. (The options' own variables are what with_env() reads:
/// options::env_variables() derives them from it.)
inline constexpr const char* other_env_variables[] = {
    "KREX_SHM_DIR",        // detail/segment_file.hpp: the segment directory
    "KREX_GBENCH",         // gbench.hpp: krex on or off for a Google Benchmark program
    "KREX_GBENCH_STRICT",  // gbench.hpp: a krex error fails the program
    "KREX_PATCH",          // python/krex/patch.py
};

/// Levenshtein distance (names are short).
inline std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0U : 1U)});
      diag = up;
    }
  }
  return row[b.size()];
}

/// The known variable nearest to `name` if it is close enough to be a
/// misspelling of it (at most 2 edits, 3 for names over 16 characters),
/// else "". `KREX_*` variables far from every known one (a script's own,
/// such as KREX_CUTLASS_REPS) are not krex's business and get "".
inline std::string misspelling_of(const std::string& name, const std::vector<std::string>& known) {
  std::string best;
  std::size_t best_d = ~std::size_t{0};
  for (const std::string& k : known) {
    if (k == name) return "";
    const std::size_t d = edit_distance(name, k);
    if (d < best_d) {
      best_d = d;
      best = k;
    }
  }
  return best_d <= (name.size() > 16 ? 3U : 2U) ? best : "";
}

/// Every `KREX_*` name in `env` (name=value strings, nullptr-terminated)
/// that looks like a misspelling of a known one, as (name, nearest) pairs.
inline std::vector<std::pair<std::string, std::string>> misspelled_env(
    const char* const* env, const std::vector<std::string>& known) {
  std::vector<std::pair<std::string, std::string>> out;
  for (; env != nullptr && *env != nullptr; ++env) {
    const std::string kv = *env;
    if (kv.compare(0, 5, "KREX_") != 0) continue;
    const std::string name = kv.substr(0, kv.find('='));
    std::string near = misspelling_of(name, known);
    if (!near.empty()) out.emplace_back(name, std::move(near));
  }
  return out;
}
}  // namespace detail

/// Configuration of one tenant. Setters validate at once and throw
/// krex::error (step::options) naming the option and the accepted values.
/// with_env() (at join) also checks that the lease outlasts the longest
/// region entry, drain_deadline + 3 x freeze_deadline (a freeze is retried
/// twice when siblings die): a lease expires in any phase, and a holder that
/// is still entering must never lose it while it runs.
/// `KREX_*` environment variables override what the code set; they are read
/// by `with_env()`, which the tenant calls when it joins.
///
/// | setter              | environment               | default |
/// |---------------------|---------------------------|---------|
/// | device              | KREX_DEVICE               | 0       |
/// | segment             | KREX_SEGMENT              | "krex"  |
/// | access              | KREX_SEGMENT_ACCESS       | user    |
/// | gate_park           | KREX_GATE_PARK_MS         | 20 ms   |
/// | drain_deadline      | KREX_DRAIN_DEADLINE_MS    | 10 s    |
/// | lock_wait           | KREX_LOCK_WAIT_MS         | 600 s   |
/// | lease               | KREX_LEASE_MS             | 600 s   |
/// | allow_contended     | KREX_ALLOW_CONTENDED      | false   |
/// | freeze              | KREX_FREEZE               | auto    |
/// | scope               | KREX_FREEZE_SCOPE         | device  |
/// | freeze_deadline     | KREX_FREEZE_DEADLINE_MS   | 2 s     |
/// | handoff_grace       | KREX_HANDOFF_GRACE_MS     | 2 ms    |
/// | cgroup_root         | KREX_CGROUP_ROOT          | derived |
/// | pin                 | KREX_PIN                  | true    |
/// | reserved_cores      | KREX_RESERVED_CORES       | 1       |
/// | confine             | KREX_CONFINE              | true    |
/// | host_devices        | KREX_HOST_DEVICES         | 1       |
/// | gate_mode           | KREX_GATING               | auto    |
/// | release_on_leave    | KREX_RELEASE_ON_LEAVE     | false   |
/// | gate_contexts       | KREX_GATE_CONTEXTS        | true    |
/// | quiet_deadline      | KREX_QUIET_DEADLINE_MS    | 500 ms  |
/// | quiet_tolerance_pct | KREX_QUIET_TOLERANCE_PCT  | 5       |
class options {
 public:
  using ms = std::chrono::milliseconds;
  /// Devices one node segment tracks (detail::max_devices, the layout's).
  static constexpr int max_devices = static_cast<int>(detail::max_devices);

  /// The device (GPU ordinal; for the host backend, a virtual device).
  options& device(int d) {
    if (d < 0 || d >= max_devices)
      detail::bad_option("device", std::to_string(d), "0.." + std::to_string(max_devices - 1));
    m_device = d;
    return *this;
  }
  int device() const noexcept { return m_device; }

  /// Base name of the node segment; the full name adds the layout version
  /// and the security domain. Letters, digits, '-', '_', '.'; 1..64 chars.
  options& segment(const std::string& name) {
    if (!detail::valid_segment_name(name))
      detail::bad_option("segment", name, "1..64 of [A-Za-z0-9._-]");
    m_segment = name;
    return *this;
  }
  const std::string& segment() const noexcept { return m_segment; }

  options& access(segment_access a) noexcept {
    m_access = a;
    return *this;
  }
  segment_access access() const noexcept { return m_access; }

  /// How long a parked submitter sleeps before re-checking the holder's liveness.
  options& gate_park(ms t) { return set_ms("gate_park", m_gate_park, t, 1); }
  ms gate_park() const noexcept { return m_gate_park; }

  /// How long a region waits for siblings to drain (and for their in-flight submissions).
  options& drain_deadline(ms t) { return set_ms("drain_deadline", m_drain_deadline, t, 1); }
  ms drain_deadline() const noexcept { return m_drain_deadline; }

  /// How long a region waits for the per-device region lock.
  options& lock_wait(ms t) { return set_ms("lock_wait", m_lock_wait, t, 0); }
  ms lock_wait() const noexcept { return m_lock_wait; }

  /// How long a region may be held before its lease expires.
  options& lease(ms t) { return set_ms("lease", m_lease, t, 1); }
  ms lease() const noexcept { return m_lease; }

  /// If true, a drain deadline expiry proceeds with the region flagged
  /// contended in its report instead of throwing.
  options& allow_contended(bool b) noexcept {
    m_allow_contended = b;
    return *this;
  }
  bool allow_contended() const noexcept { return m_allow_contended; }

  options& freeze(freeze_method m) noexcept {
    m_freeze = m;
    return *this;
  }
  freeze_method freeze() const noexcept { return m_freeze; }

  options& scope(freeze_scope s) noexcept {
    m_scope = s;
    return *this;
  }
  freeze_scope scope() const noexcept { return m_scope; }

  options& freeze_deadline(ms t) { return set_ms("freeze_deadline", m_freeze_deadline, t, 1); }
  ms freeze_deadline() const noexcept { return m_freeze_deadline; }

  /// At region exit, when siblings' submissions were parked at the gate:
  /// how long the gate stays lowered (the lock still held) after they
  /// passed, so that a sibling's next calls (an allocation after a module
  /// load, the launches of a check) run too instead of parking again behind
  /// the next region. 0: only the parked calls pass. At most 100 ms.
  options& handoff_grace(ms t) {
    if (t.count() > 100)
      detail::bad_option("handoff_grace", std::to_string(t.count()) + " ms", "0..100 ms");
    return set_ms("handoff_grace", m_handoff_grace, t, 0);
  }
  ms handoff_grace() const noexcept { return m_handoff_grace; }

  /// The krex cgroup root: an absolute filesystem path inside a cgroup v2
  /// mount or the v1 freezer mount (e.g. /sys/fs/cgroup/krex). Empty: derived
  /// at join (a `krex` child of the process's own cgroup).
  options& cgroup_root(const std::string& p) {
    if (!p.empty() && p.front() != '/')
      detail::bad_option("cgroup_root", p, "an absolute path, or empty to derive one");
    if (p.find("/../") != std::string::npos ||
        (p.size() >= 3 && p.compare(p.size() - 3, 3, "/..") == 0))
      detail::bad_option("cgroup_root", p, "a path without '..' components");
    m_cgroup_root = p;
    return *this;
  }
  const std::string& cgroup_root() const noexcept { return m_cgroup_root; }

  /// Pin the measuring thread to its device's reserved cores in a region.
  options& pin(bool b) noexcept {
    m_pin = b;
    return *this;
  }
  bool pin() const noexcept { return m_pin; }

  /// Physical cores reserved for measuring per device slice (with their SMT siblings).
  options& reserved_cores(int n) {
    if (n < 1 || n > 64) detail::bad_option("reserved_cores", std::to_string(n), "1..64");
    m_reserved_cores = n;
    return *this;
  }
  int reserved_cores() const noexcept { return m_reserved_cores; }

  /// Keep tenant threads off all reserved cores outside regions.
  options& confine(bool b) noexcept {
    m_confine = b;
    return *this;
  }
  bool confine() const noexcept { return m_confine; }

  /// Number of virtual devices of the host backend on this node.
  options& host_devices(int n) {
    if (n < 1 || n > max_devices)
      detail::bad_option("host_devices", std::to_string(n), "1.." + std::to_string(max_devices));
    m_host_devices = n;
    return *this;
  }
  int host_devices() const noexcept { return m_host_devices; }

  /// Automatic gating (CUDA: CUPTI callbacks) or explicit guards only.
  options& gate_mode(gating g) noexcept {
    m_gating = g;
    return *this;
  }
  gating gate_mode() const noexcept { return m_gating; }

  /// When the tenant leaves, release this process's device state (CUDA:
  /// cudaDeviceReset of the device: its context, memory and modules) inside
  /// the gate, so that the teardown a process does at exit never overlaps a
  /// sibling's region. Only for a process that is done with the device when
  /// it leaves (a process per benchmark command); off by default.
  options& release_on_leave(bool b) noexcept {
    m_release_on_leave = b;
    return *this;
  }
  bool release_on_leave() const noexcept { return m_release_on_leave; }

  /// Automatic gating of context creation and destruction (CUDA:
  /// cuCtxCreate/Destroy, primary-context retain/release/reset,
  /// cudaSetDevice, cudaInitDevice, cudaDeviceReset). On by default; off
  /// lets siblings create contexts while a region runs (faster for a process
  /// per command, at an accuracy cost measured in docs/RESULTS.md).
  options& gate_contexts(bool b) noexcept {
    m_gate_contexts = b;
    return *this;
  }
  bool gate_contexts() const noexcept { return m_gate_contexts; }

  /// The quiet step (quiet.hpp): how long a region waits, after freezing its
  /// siblings, for the device itself to become quiet (the driver's work after
  /// large frees; a process outside krex) before its body starts; past it the
  /// region proceeds flagged busy. 0 turns the check off. At most 60 s; the
  /// wait also ends half-way to the region's lease deadline.
  options& quiet_deadline(ms t) {
    if (t.count() > 60'000)
      detail::bad_option("quiet_deadline", std::to_string(t.count()) + " ms", "0..60000 ms");
    return set_ms("quiet_deadline", m_quiet_deadline, t, 0);
  }
  ms quiet_deadline() const noexcept { return m_quiet_deadline; }

  /// How much slower than the device's idle figure a probe may be and still
  /// count as quiet, in percent (1..100).
  options& quiet_tolerance_pct(int p) {
    if (p < 1 || p > 100) detail::bad_option("quiet_tolerance_pct", std::to_string(p), "1..100");
    m_quiet_tolerance_pct = p;
    return *this;
  }
  int quiet_tolerance_pct() const noexcept { return m_quiet_tolerance_pct; }

  /// A copy with every set `KREX_*` variable applied (see the table above).
  /// Throws krex::error naming the variable for an unparsable value. A set
  /// `KREX_*` variable that looks like a misspelling of a known one
  /// (`KREX_FREZE`) is ignored with a warning on stderr naming the nearest
  /// known variable, once per process and name.
  options with_env() const {
    options o = *this;
    // getenv races only with setenv, which a harness does not call while joining.
    o.apply_env([](const char* n) -> const char* {
      return std::getenv(n);  // NOLINT(concurrency-mt-unsafe)
    });
    o.check_lease();
    warn_misspelled_env();
    return o;
  }

  /// Every `KREX_*` variable krex reads: those with_env() reads (derived
  /// from it, so the list cannot drift from the parsing) and
  /// detail::other_env_variables.
  static const std::vector<std::string>& env_variables() {
    static const std::vector<std::string> names = [] {
      std::vector<std::string> v;
      options{}.apply_env([&v](const char* n) -> const char* {
        v.emplace_back(n);
        return nullptr;
      });
      for (const char* n : detail::other_env_variables) v.emplace_back(n);
      return v;
    }();
    return names;
  }

 private:
  /// Warns (stderr, once per name) about set variables that look like
  /// misspellings of env_variables().
  static void warn_misspelled_env() {
    static std::mutex lock;
    static std::set<std::string> warned;
    const std::lock_guard<std::mutex> g(lock);
    for (const auto& [name, near] : detail::misspelled_env(environ, env_variables())) {
      if (!warned.insert(name).second) continue;
      std::fprintf(stderr,
                   "krex: options: warning: %s is not a krex variable and is ignored; did you "
                   "mean %s?\n",
                   name.c_str(), near.c_str());
    }
  }

  /// Applies the `KREX_*` variables `env(name)` returns (nullptr: unset):
  /// the one place the options' variables are named and parsed.
  template <class Env>
  void apply_env(const Env& env) {
    options& o = *this;
    if (const char* v = env("KREX_DEVICE"))
      o.device(
          static_cast<int>(detail::parse_int("KREX_DEVICE", v, 0, max_devices - 1,
                                             "an integer 0.." + std::to_string(max_devices - 1))));
    if (const char* v = env("KREX_SEGMENT")) {
      if (!detail::valid_segment_name(v))
        detail::bad_option("KREX_SEGMENT", v, "1..64 of [A-Za-z0-9._-]");
      o.m_segment = v;
    }
    if (const char* v = env("KREX_SEGMENT_ACCESS"))
      o.m_access = detail::parse_access("KREX_SEGMENT_ACCESS", v);
    env_ms(env, o.m_gate_park, "KREX_GATE_PARK_MS", 1);
    env_ms(env, o.m_drain_deadline, "KREX_DRAIN_DEADLINE_MS", 1);
    env_ms(env, o.m_lock_wait, "KREX_LOCK_WAIT_MS", 0);
    env_ms(env, o.m_lease, "KREX_LEASE_MS", 1);
    if (const char* v = env("KREX_ALLOW_CONTENDED"))
      o.m_allow_contended = detail::parse_bool("KREX_ALLOW_CONTENDED", v);
    if (const char* v = env("KREX_FREEZE"))
      o.m_freeze = detail::parse_freeze_method("KREX_FREEZE", v);
    if (const char* v = env("KREX_FREEZE_SCOPE"))
      o.m_scope = detail::parse_freeze_scope("KREX_FREEZE_SCOPE", v);
    env_ms(env, o.m_freeze_deadline, "KREX_FREEZE_DEADLINE_MS", 1);
    env_ms(env, o.m_handoff_grace, "KREX_HANDOFF_GRACE_MS", 0);
    if (o.m_handoff_grace.count() > 100)
      detail::bad_option("KREX_HANDOFF_GRACE_MS", std::to_string(o.m_handoff_grace.count()),
                         "0..100");
    if (const char* v = env("KREX_CGROUP_ROOT")) {
      try {
        o.cgroup_root(v);
      } catch (const error&) {
        detail::bad_option("KREX_CGROUP_ROOT", v, "an absolute path without '..' components");
      }
    }
    if (const char* v = env("KREX_PIN")) o.m_pin = detail::parse_bool("KREX_PIN", v);
    if (const char* v = env("KREX_RESERVED_CORES"))
      o.m_reserved_cores =
          static_cast<int>(detail::parse_int("KREX_RESERVED_CORES", v, 1, 64, "an integer 1..64"));
    if (const char* v = env("KREX_CONFINE")) o.m_confine = detail::parse_bool("KREX_CONFINE", v);
    if (const char* v = env("KREX_GATE_CONTEXTS"))
      o.m_gate_contexts = detail::parse_bool("KREX_GATE_CONTEXTS", v);
    if (const char* v = env("KREX_RELEASE_ON_LEAVE"))
      o.m_release_on_leave = detail::parse_bool("KREX_RELEASE_ON_LEAVE", v);
    if (const char* v = env("KREX_HOST_DEVICES"))
      o.m_host_devices = static_cast<int>(detail::parse_int(
          "KREX_HOST_DEVICES", v, 1, max_devices, "an integer 1.." + std::to_string(max_devices)));
    if (const char* v = env("KREX_GATING")) o.m_gating = detail::parse_gating("KREX_GATING", v);
    env_ms(env, o.m_quiet_deadline, "KREX_QUIET_DEADLINE_MS", 0);
    if (o.m_quiet_deadline.count() > 60'000)
      detail::bad_option("KREX_QUIET_DEADLINE_MS", std::to_string(o.m_quiet_deadline.count()),
                         "milliseconds 0..60000");
    if (const char* v = env("KREX_QUIET_TOLERANCE_PCT"))
      o.m_quiet_tolerance_pct = static_cast<int>(
          detail::parse_int("KREX_QUIET_TOLERANCE_PCT", v, 1, 100, "an integer 1..100"));
  }

  void check_lease() const {
    const ms entry = m_drain_deadline + 3 * m_freeze_deadline;
    if (m_lease > entry) return;
    throw error(step::options,
                "lease (" + std::to_string(m_lease.count()) +
                    " ms) must be longer than a region's longest entry, drain_deadline + 3 x "
                    "freeze_deadline (" + std::to_string(entry.count()) + " ms)",
                0, "raise lease / KREX_LEASE_MS, or lower drain_deadline / KREX_DRAIN_DEADLINE_MS "
                   "and freeze_deadline / KREX_FREEZE_DEADLINE_MS");
  }

  options& set_ms(const char* name, ms& field, ms t, long long min) {
    if (t.count() < min)
      detail::bad_option(name, std::to_string(t.count()) + " ms",
                         "a duration of at least " + std::to_string(min) + " ms");
    field = t;
    return *this;
  }
  template <class Env>
  static void env_ms(const Env& env, ms& field, const char* var, long long min) {
    if (const char* v = env(var))
      field = ms(detail::parse_int(var, v, min, 86'400'000LL,
                                   min == 0 ? "milliseconds 0..86400000"
                                            : "milliseconds 1..86400000"));
  }

  int m_device = 0;
  std::string m_segment = "krex";
  segment_access m_access = segment_access::user;
  ms m_gate_park{20};
  ms m_drain_deadline{10'000};
  ms m_lock_wait{600'000};
  ms m_lease{600'000};
  bool m_allow_contended = false;
  freeze_method m_freeze = freeze_method::automatic;
  freeze_scope m_scope = freeze_scope::device;
  ms m_freeze_deadline{2'000};
  ms m_handoff_grace{2};
  std::string m_cgroup_root;
  bool m_pin = true;
  int m_reserved_cores = 1;
  bool m_confine = true;
  bool m_release_on_leave = false;
  bool m_gate_contexts = true;
  ms m_quiet_deadline{500};
  int m_quiet_tolerance_pct = 5;
  int m_host_devices = 1;
  gating m_gating = gating::automatic;
};

}  // namespace krex
