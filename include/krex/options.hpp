// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <krex/detail/layout.hpp>
#include <krex/detail/option_table.hpp>
#include <krex/error.hpp>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace krex {

// The choice enums (freeze_method, freeze_scope, segment_access, gating),
// their names and to_string() are detail/option_table.hpp's.

namespace detail {
[[noreturn]] KREX_DETAIL_COLD inline void bad_option(std::string_view name, std::string_view value,
                                                     std::string_view accepted) {
  throw error(step::options, cat({"invalid value '", value, "' for ", name}), 0,
              cat({"accepted: ", accepted}));
}

/// The value (its enum's) of choice `c` named `v`; else an error naming
/// `name` that lists the names.
inline long long parse_choice(const std::string& name, const std::string& v,
                              const choice_names& c) {
  const long long x = choice_value(c, v);
  if (x < 0) bad_option(name, v, choice_accepted(c));
  return x;
}
template <class E>
E parse_choice(const std::string& name, const std::string& v) {
  return static_cast<E>(parse_choice(name, v, choices_of<E>));
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
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
          c == '_' || c == '.'))
      return false;
  return true;
}

/// T is how options hold an option of row `s` (options::visit's types).
template <class T>
constexpr bool holds(const option_spec& s) {
  return (std::is_same_v<T, int> && s.kind == option_kind::integer) ||
         (std::is_same_v<T, std::chrono::milliseconds> && s.kind == option_kind::milliseconds) ||
         (std::is_same_v<T, bool> && s.kind == option_kind::boolean) ||
         (std::is_same_v<T, std::string> && is_text(s.kind)) ||
         (s.kind == option_kind::choice && s.choices == &choices_of<T>);
}

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

/// The variable of the option whose setter or Python keyword `name` spells
/// after `KREX_`, in upper case (KREX_SCOPE, KREX_LEASE, KREX_GATE_MODE: names
/// built from the C++ or Python API, not the table's), else "".
inline std::string env_of_option_name(const std::string& name) {
  if (name.compare(0, 5, "KREX_") != 0) return "";
  for (const option_spec& s : option_table) {
    for (const char* alias : {s.name, s.python}) {
      std::string upper = "KREX_";
      for (const char* c = alias; *c != '\0'; ++c)
        upper += static_cast<char>(*c >= 'a' && *c <= 'z' ? *c - 'a' + 'A' : *c);
      if (upper == name && name != s.env) return s.env;
    }
  }
  return "";
}

/// A set `KREX_*` variable krex does not read that looks meant as one it
/// does (`near`). `sure`: an option's setter or Python keyword name
/// (env_of_option_name), or a letter off a known variable (two for one over
/// 7 letters after KREX_, three over 16 characters): an error at join.
/// Otherwise up to 2 edits off (3 over 16 characters): a warning, since a
/// script's own variable may be that close (KREX_CONFIG, KREX_CONFINE).
struct env_misspelling {
  std::string name, near;
  bool sure = false;
};

/// What `name` was meant as, if it looks like a misspelling of a known
/// variable (see env_misspelling; `near` empty: far from all of them, such
/// as a script's own KREX_CUTLASS_REPS, which is not krex's business).
KREX_DETAIL_COLD inline env_misspelling misspelling_of(const std::string& name,
                                      const std::vector<std::string>& known) {
  env_misspelling m{name, "", true};
  if (std::find(known.begin(), known.end(), name) != known.end()) return m;
  m.near = env_of_option_name(name);
  if (!m.near.empty()) return m;
  std::size_t best_d = ~std::size_t{0};
  for (const std::string& k : known) {
    const std::size_t d = edit_distance(name, k);
    if (d < best_d) {
      best_d = d;
      m.near = k;
    }
  }
  const std::size_t loose = name.size() > 16 ? 3U : 2U;
  if (best_d > loose) m.near.clear();
  m.sure = best_d <= (m.near.size() <= 12 ? 1U : loose);
  return m;
}

/// Every `KREX_*` name in `env` (name=value strings, nullptr-terminated)
/// that looks like a misspelling of a known one (misspelling_of).
KREX_DETAIL_COLD inline std::vector<env_misspelling> misspelled_env(const char* const* env,
                                                   const std::vector<std::string>& known) {
  std::vector<env_misspelling> out;
  for (; env != nullptr && *env != nullptr; ++env) {
    const std::string kv = *env;
    if (kv.compare(0, 5, "KREX_") != 0) continue;
    env_misspelling m = misspelling_of(kv.substr(0, kv.find('=')), known);
    if (!m.near.empty()) out.push_back(std::move(m));
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
/// Every option's variable, range, default and meaning are in one table,
/// detail::option_table (detail/option_table.hpp): the values are held by
/// its rows, and the setters and with_env() take their names, ranges and
/// messages from it (docs/ARCHITECTURE.md, "Adding an option").
class options {
 public:
  using ms = std::chrono::milliseconds;
  using option_id = detail::option_id;
  /// Devices one node segment tracks (detail::max_devices, the layout's).
  static constexpr int max_devices = static_cast<int>(detail::max_devices);

  /// The device (GPU ordinal; for the host backend, a virtual device).
  options& device(int d) { return set(option_id::device, d); }
  int device() const noexcept { return get<int, option_id::device>(); }

  /// Base name of the node segment; the full name adds the layout version
  /// and the security domain. Letters, digits, '-', '_', '.'; 1..64 chars.
  options& segment(const std::string& name) { return set(option_id::segment, name); }
  const std::string& segment() const noexcept { return text(option_id::segment); }

  options& access(segment_access a) noexcept { return set(option_id::access, a); }
  segment_access access() const noexcept { return get<segment_access, option_id::access>(); }

  /// How long a parked submitter sleeps before re-checking the holder's liveness.
  options& gate_park(ms t) { return set(option_id::gate_park, t); }
  ms gate_park() const noexcept { return get<ms, option_id::gate_park>(); }

  /// How long a region waits for siblings to drain (and for their in-flight submissions).
  options& drain_deadline(ms t) { return set(option_id::drain_deadline, t); }
  ms drain_deadline() const noexcept { return get<ms, option_id::drain_deadline>(); }

  /// How long a region waits for the per-device region lock.
  options& lock_wait(ms t) { return set(option_id::lock_wait, t); }
  ms lock_wait() const noexcept { return get<ms, option_id::lock_wait>(); }

  /// How long a region may be held before its lease expires.
  options& lease(ms t) { return set(option_id::lease, t); }
  ms lease() const noexcept { return get<ms, option_id::lease>(); }

  /// If true, a drain deadline expiry proceeds with the region flagged
  /// contended in its report instead of throwing.
  options& allow_contended(bool b) noexcept { return set(option_id::allow_contended, b); }
  bool allow_contended() const noexcept { return get<bool, option_id::allow_contended>(); }

  options& freeze(freeze_method m) noexcept { return set(option_id::freeze, m); }
  freeze_method freeze() const noexcept { return get<freeze_method, option_id::freeze>(); }

  options& scope(freeze_scope s) noexcept { return set(option_id::scope, s); }
  freeze_scope scope() const noexcept { return get<freeze_scope, option_id::scope>(); }

  options& freeze_deadline(ms t) { return set(option_id::freeze_deadline, t); }
  ms freeze_deadline() const noexcept { return get<ms, option_id::freeze_deadline>(); }

  /// At region exit, when siblings' submissions were parked at the gate:
  /// how long the gate stays lowered (the lock still held) after they
  /// passed, so that a sibling's next calls (an allocation after a module
  /// load, the launches of a check) run too instead of parking again behind
  /// the next region. 0: only the parked calls pass. At most 100 ms.
  options& handoff_grace(ms t) { return set(option_id::handoff_grace, t); }
  ms handoff_grace() const noexcept { return get<ms, option_id::handoff_grace>(); }

  /// The krex cgroup root: an absolute filesystem path inside a cgroup v2
  /// mount or the v1 freezer mount (e.g. /sys/fs/cgroup/krex). Empty: derived
  /// at join (a `krex` child of the process's own cgroup).
  options& cgroup_root(const std::string& p) { return set(option_id::cgroup_root, p); }
  const std::string& cgroup_root() const noexcept { return text(option_id::cgroup_root); }

  /// Pin the measuring thread to its device's reserved cores in a region.
  options& pin(bool b) noexcept { return set(option_id::pin, b); }
  bool pin() const noexcept { return get<bool, option_id::pin>(); }

  /// Physical cores reserved for measuring per device slice (with their SMT siblings).
  options& reserved_cores(int n) { return set(option_id::reserved_cores, n); }
  int reserved_cores() const noexcept { return get<int, option_id::reserved_cores>(); }

  /// Keep tenant threads off all reserved cores outside regions.
  options& confine(bool b) noexcept { return set(option_id::confine, b); }
  bool confine() const noexcept { return get<bool, option_id::confine>(); }

  /// Number of virtual devices of the host backend on this node.
  options& host_devices(int n) { return set(option_id::host_devices, n); }
  int host_devices() const noexcept { return get<int, option_id::host_devices>(); }

  /// Automatic gating (CUDA: CUPTI callbacks) or explicit guards only.
  options& gate_mode(gating g) noexcept { return set(option_id::gate_mode, g); }
  gating gate_mode() const noexcept { return get<gating, option_id::gate_mode>(); }

  /// When the tenant leaves, release this process's device state (CUDA:
  /// cudaDeviceReset of the device: its context, memory and modules) inside
  /// the gate, so that the teardown a process does at exit never overlaps a
  /// sibling's region. Only for a process that is done with the device when
  /// it leaves (a process per benchmark command); off by default.
  options& release_on_leave(bool b) noexcept { return set(option_id::release_on_leave, b); }
  bool release_on_leave() const noexcept { return get<bool, option_id::release_on_leave>(); }

  /// Automatic gating of context creation and destruction (CUDA:
  /// cuCtxCreate/Destroy, primary-context retain/release/reset,
  /// cudaSetDevice, cudaInitDevice, cudaDeviceReset). On by default; off
  /// lets siblings create contexts while a region runs (faster for a process
  /// per command, at an accuracy cost measured in docs/RESULTS.md).
  options& gate_contexts(bool b) noexcept { return set(option_id::gate_contexts, b); }
  bool gate_contexts() const noexcept { return get<bool, option_id::gate_contexts>(); }

  /// The quiet step (detail/steps/quiet.hpp): how long a region waits, after freezing its
  /// siblings, for the device itself to become quiet (the driver's work after
  /// large frees; a process outside krex) before its body starts; past it the
  /// region proceeds flagged busy. 0 turns the check off. At most 60 s; the
  /// wait also ends half-way to the region's lease deadline.
  options& quiet_deadline(ms t) { return set(option_id::quiet_deadline, t); }
  ms quiet_deadline() const noexcept { return get<ms, option_id::quiet_deadline>(); }

  /// How much slower than the device's idle figure a probe may be and still
  /// count as quiet, in percent (1..100).
  options& quiet_tolerance_pct(int p) { return set(option_id::quiet_tolerance_pct, p); }
  int quiet_tolerance_pct() const noexcept { return get<int, option_id::quiet_tolerance_pct>(); }

  /// A copy with every set `KREX_*` variable applied (see detail::option_table).
  /// Throws krex::error naming the variable for an unparsable value, and for
  /// a set `KREX_*` variable krex does not read that is surely meant as one
  /// it does (detail::misspelling_of: `KREX_SCOPE`, `KREX_LEASE`,
  /// `KREX_FREZE`), naming the right one. One only loosely close is ignored
  /// with a warning on stderr naming the nearest, once per process and name.
  options with_env() const {
    check_env_names();
    options o = *this;
    // getenv races only with setenv, which a harness does not call while joining.
    o.apply_env([](const char* n) -> const char* {
      return std::getenv(n);  // NOLINT(concurrency-mt-unsafe)
    });
    o.check_lease();
    return o;
  }

  /// Every `KREX_*` variable krex reads: those with_env() reads (derived
  /// from it, so the list cannot drift from the parsing) and
  /// detail::other_env_table.
  static const std::vector<std::string>& env_variables() {
    static const std::vector<std::string> names = [] {
      std::vector<std::string> v;
      options{}.apply_env([&v](const char* n) -> const char* {
        v.emplace_back(n);
        return nullptr;
      });
      for (const detail::env_variable& e : detail::other_env_table) v.emplace_back(e.name);
      return v;
    }();
    return names;
  }

  /// The option `id` of detail::option_table set to `value` (of the type
  /// visit() gives it), checked as its setter checks it; the setters are
  /// this. For bindings and tools that walk the table (the Python binding).
  template <class T>
  options& set(option_id id, const T& value) {
    const detail::option_spec& s = detail::option(id);
    if (!detail::holds<T>(s))
      throw std::logic_error("krex::options::set: a value of another type than the option's");
    check(s, value);
    store(s, value);
    return *this;
  }

  /// Calls f(value) with the value of option `id`: an int, ms, bool,
  /// const std::string& or choice enum (detail::option_kind says which).
  template <class F>
  void visit(option_id id, F&& f) const {
    const detail::option_spec& s = detail::option(id);
    const std::size_t i = detail::value_slot(id);
    switch (s.kind) {
      case detail::option_kind::integer: f(static_cast<int>(m_number[i])); return;
      case detail::option_kind::milliseconds: f(ms(m_number[i])); return;
      case detail::option_kind::boolean: f(m_number[i] != 0); return;
      case detail::option_kind::segment_name:
      case detail::option_kind::path: f(m_text[i]); return;
      case detail::option_kind::choice: detail::visit_choice(s.choices, m_number[i], f); return;
    }
  }

 private:
  // Every option's value, by its row (detail::value_slot): the text ones in
  // m_text, the others (the enum's value of a choice) in m_number. So an
  // option has no field, case or default here but its setter and getter.
  template <class T, option_id Id>
  T get() const noexcept {
    static_assert(detail::holds<T>(detail::option(Id)), "the getter's type is not its row's kind");
    return T(m_number[detail::value_slot(Id)]);  // NOLINT(google-readability-casting): ms too
  }
  const std::string& text(option_id id) const noexcept { return m_text[detail::value_slot(id)]; }
  void store(const detail::option_spec& s, const std::string& v) { m_text[slot(s)] = v; }
  void store(const detail::option_spec& s, ms v) { m_number[slot(s)] = v.count(); }
  template <class T>
  void store(const detail::option_spec& s, T v) {
    m_number[slot(s)] = static_cast<long long>(v);
  }
  static std::size_t slot(const detail::option_spec& s) { return detail::value_slot(s.id); }

  static std::string range(const detail::option_spec& s) {
    return detail::cat({s.lo, "..", s.hi});
  }

  /// The setters' checks, by kind (bool and enum values need none).
  static void check(const detail::option_spec& s, int v) {
    if (v < s.lo || v > s.hi) detail::bad_option(s.name, detail::cat({v}), range(s));
  }
  static void check(const detail::option_spec& s, ms t) {
    if (s.hi < detail::max_env_ms && t.count() > s.hi)
      detail::bad_option(s.name, detail::cat({t.count(), " ms"}), detail::cat({range(s), " ms"}));
    if (t.count() < s.lo)
      detail::bad_option(s.name, detail::cat({t.count(), " ms"}),
                         detail::cat({"a duration of at least ", s.lo, " ms"}));
  }
  static void check(const detail::option_spec& s, const std::string& v) {
    if (s.kind == detail::option_kind::segment_name) {
      if (!detail::valid_segment_name(v)) detail::bad_option(s.name, v, "1..64 of [A-Za-z0-9._-]");
      return;
    }
    if (!v.empty() && v.front() != '/')
      detail::bad_option(s.name, v, "an absolute path, or empty to derive one");
    if (v.find("/../") != std::string::npos ||
        (v.size() >= 3 && v.compare(v.size() - 3, 3, "/..") == 0))
      detail::bad_option(s.name, v, "a path without '..' components");
  }
  template <class T>
  static void check(const detail::option_spec&, const T&) noexcept {}

  /// A variable's value for a field of type T, parsed and checked (the
  /// message names the variable).
  static int from_env(const detail::option_spec& s, const std::string& v, int*) {
    return static_cast<int>(
        detail::parse_int(s.env, v, s.lo, s.hi, detail::cat({"an integer ", range(s)})));
  }
  static ms from_env(const detail::option_spec& s, const std::string& v, ms*) {
    const long long x = detail::parse_int(
        s.env, v, s.lo, detail::max_env_ms,
        detail::cat({"milliseconds ", s.lo, "..", detail::max_env_ms}));
    if (s.hi < detail::max_env_ms && x > s.hi) detail::bad_option(s.env, detail::cat({x}), s.env_cap);
    return ms(x);
  }
  static bool from_env(const detail::option_spec& s, const std::string& v, bool*) {
    return detail::parse_bool(s.env, v);
  }
  static std::string from_env(const detail::option_spec& s, const std::string& v, std::string*) {
    if (s.kind == detail::option_kind::segment_name) {
      if (!detail::valid_segment_name(v)) detail::bad_option(s.env, v, "1..64 of [A-Za-z0-9._-]");
      return v;
    }
    try {
      check(s, v);
    } catch (const error&) {
      detail::bad_option(s.env, v, "an absolute path without '..' components");
    }
    return v;
  }
  template <class Enum>
  static Enum from_env(const detail::option_spec& s, const std::string& v, Enum*) {
    return static_cast<Enum>(detail::parse_choice(s.env, v, *s.choices));
  }

  /// Set variables that look like misspellings of env_variables(): an
  /// error for the sure ones, all named; a warning (stderr, once per name)
  /// for the others.
  KREX_DETAIL_COLD static void check_env_names() {
    static std::mutex lock;
    static std::vector<std::string> warned;  // few: a vector, not a set
    std::string wrong, fix;
    for (const detail::env_misspelling& m : detail::misspelled_env(environ, env_variables())) {
      if (m.sure) {
        const bool ms = m.near.compare(m.near.size() - 3, 3, "_MS") == 0;
        wrong += detail::cat({wrong.empty() ? "" : "; ", m.name,
                              " is not a krex variable and would be ignored: did you mean ",
                              m.near, ms ? " (milliseconds)" : "", "?"});
        fix = fix.empty() ? detail::cat({"rename ", m.name, " to ", m.near}) : "rename each";
        continue;
      }
      const std::lock_guard<std::mutex> g(lock);
      if (std::find(warned.begin(), warned.end(), m.name) != warned.end()) continue;
      warned.push_back(m.name);
      std::fprintf(stderr,
                   "krex: options: warning: %s is not a krex variable and is ignored; did you "
                   "mean %s?\n",
                   m.name.c_str(), m.near.c_str());
    }
    if (!wrong.empty())
      throw error(step::options, wrong, 0,
                  detail::cat({fix, ", or unset it (`krexctl options` lists every KREX_* variable)"}));
  }

  /// Applies the `KREX_*` variables `env(name)` returns (nullptr: unset), in
  /// detail::option_table's order: the one place the variables are read.
  template <class Env>
  void apply_env(const Env& env) {
    for (const detail::option_spec& s : detail::option_table) {
      const char* v = env(s.env);
      if (v == nullptr) continue;
      visit(s.id, [&](const auto& now) {
        store(s, from_env(s, v, static_cast<std::decay_t<decltype(now)>*>(nullptr)));
      });
    }
  }

  void check_lease() const {
    const ms entry = drain_deadline() + 3 * freeze_deadline();
    if (lease() > entry) return;
    throw error(step::options,
                detail::cat({"lease (", lease().count(),
                             " ms) must be longer than a region's longest entry, drain_deadline + 3 x "
                             "freeze_deadline (",
                             entry.count(), " ms)"}),
                0,
                "raise lease / KREX_LEASE_MS, or lower drain_deadline / KREX_DRAIN_DEADLINE_MS "
                "and freeze_deadline / KREX_FREEZE_DEADLINE_MS");
  }

  /// The table's defaults, by slot.
  static constexpr std::array<long long, detail::number_option_count> number_defaults() {
    std::array<long long, detail::number_option_count> out{};
    for (const detail::option_spec& s : detail::option_table)
      if (!detail::is_text(s.kind)) out[detail::value_slot(s.id)] = s.def;
    return out;
  }
  static std::array<std::string, detail::text_option_count> text_defaults() {
    std::array<std::string, detail::text_option_count> out;
    for (const detail::option_spec& s : detail::option_table)
      if (detail::is_text(s.kind)) out[detail::value_slot(s.id)] = s.def_text;
    return out;
  }

  std::array<long long, detail::number_option_count> m_number = number_defaults();
  std::array<std::string, detail::text_option_count> m_text = text_defaults();
};

}  // namespace krex
