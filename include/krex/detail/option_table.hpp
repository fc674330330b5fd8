// SPDX-License-Identifier: Apache-2.0
#pragma once

// The one list of krex::options and the names of its choices. options.hpp
// stores each option's value by its row here (no field or case per option);
// to_string(), parsing, error texts, the report, the Python binding and
// krexctl read the names and rows; `krexctl options --write DIR` writes the
// docs' tables and the .pyi stubs from them (tools/krex_tools/option_docs.hpp,
// checked by tests/test_tables.cpp). Adding an option: docs/ARCHITECTURE.md.

#include <krex/detail/layout.hpp>

#include <cstddef>
#include <string>
#include <type_traits>

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

namespace detail {

/// A choice enum's names, by value; any after the first `offered` are former names.
struct choice_names {
  const char* const* names = nullptr;
  std::size_t count = 0;
  std::size_t offered = 0;
};
template <std::size_t N>
constexpr choice_names names_of(const char* const (&names)[N], std::size_t offered = N) {
  return {names, N, offered};
}

/// The names of choice enum E, once (a new choice enum: its names here and its
/// type in visit_choice below).
template <class E>
inline constexpr choice_names choices_of{};
inline constexpr const char* freeze_method_names[] = {"auto", "cgroup2", "cgroup1", "signal",
                                                      "none"};
template <>
inline constexpr choice_names choices_of<freeze_method> = names_of(freeze_method_names);
inline constexpr const char* freeze_scope_names[] = {"all", "device", "active"};
template <>
inline constexpr choice_names choices_of<freeze_scope> = names_of(freeze_scope_names, 2);
inline constexpr const char* segment_access_names[] = {"user", "group"};
template <>
inline constexpr choice_names choices_of<segment_access> = names_of(segment_access_names);
inline constexpr const char* gating_names[] = {"auto", "explicit"};
template <>
inline constexpr choice_names choices_of<gating> = names_of(gating_names);

/// Calls f(value) with `v` as the choice enum whose names `c` are.
template <class F>
void visit_choice(const choice_names* c, long long v, F& f) {
  const auto as = [&](auto e) {
    using E = decltype(e);
    if (c != &choices_of<E>) return false;
    f(static_cast<E>(v));
    return true;
  };
  (void)(as(freeze_method{}) || as(freeze_scope{}) || as(segment_access{}) || as(gating{}));
}

/// Every name of `c` ("auto, cgroup2, ..."): what Python and the tables list.
inline std::string choice_list(const choice_names& c, const char* open = "",
                               const char* close = "") {
  std::string out;
  for (std::size_t i = 0; i < c.count; ++i)
    out += (i == 0 ? "" : ", ") + std::string(open) + c.names[i] + close;
  return out;
}

/// The accepted text of an error: the names, then the former ones as such
/// ("all, device (active is its former name)").
inline std::string choice_accepted(const choice_names& c) {
  std::string out;
  for (std::size_t i = 0; i < c.count; ++i)
    out += i < c.offered ? (i == 0 ? "" : ", ") + std::string(c.names[i])
                         : std::string(" (") + c.names[i] + " is its former name)";
  return out;
}

/// The value of `c` named `v`, or -1.
inline long long choice_value(const choice_names& c, const std::string& v) {
  for (std::size_t i = 0; i < c.count; ++i)
    if (v == c.names[i]) return static_cast<long long>(i);
  return -1;
}

}  // namespace detail

/// The name of a choice (freeze_method, freeze_scope, segment_access,
/// gating), as options, variables and reports write it.
template <class E, std::enable_if_t<(detail::choices_of<E>.count > 0), int> = 0>
const char* to_string(E e) noexcept {
  const auto i = static_cast<std::size_t>(e);
  return i < detail::choices_of<E>.count ? detail::choices_of<E>.names[i] : "?";
}

}  // namespace krex

namespace krex::detail {

/// What an option holds; decides its parsing, its checks and its Python type.
enum class option_kind {
  integer,       ///< int, lo..hi
  milliseconds,  ///< std::chrono::milliseconds, at least lo (setters: at most hi where hi is set)
  boolean,       ///< bool
  segment_name,  ///< 1..64 of [A-Za-z0-9._-]
  path,          ///< an absolute path without '..', or empty
  choice,        ///< an enum, by its names (`choices`)
};

/// Every option, in the order with_env() reads their variables.
// clang-format off
enum class option_id {
  device, segment, access, gate_park, drain_deadline, lock_wait, lease, allow_contended, freeze,
  scope, freeze_deadline, handoff_grace, cgroup_root, pin, reserved_cores, confine,
  gate_contexts, release_on_leave, host_devices, gate_mode, quiet_deadline, quiet_tolerance_pct,
  count_  // the number of options (not one): new ones go before it
};
// clang-format on

/// The most milliseconds a KREX_*_MS variable takes (a day).
inline constexpr long long max_env_ms = 86'400'000LL;

struct option_spec {
  option_id id;
  const char* name;    ///< the setter of krex::options
  const char* python;  ///< the keyword of krex.Tenant
  const char* env;     ///< the KREX_* variable with_env() reads
  option_kind kind;
  long long lo;  ///< integer, milliseconds: the least value
  long long
      hi;  ///< integer: the most; milliseconds: the most (max_env_ms: no cap but the variable's)
  long long def;         ///< integer, milliseconds, boolean, choice (the enum's value): the default
  const char* def_text;  ///< segment_name, path: the default ("" for a path: derived)
  const choice_names* choices;  ///< choice: its enum's names
  const char* doc;  ///< what it does, one line (README.md's table; choice: "" lists its names)
  /// milliseconds with a cap: the accepted text of a variable over it
  const char* env_cap = nullptr;
};

/// A choice's default, its enum's value.
template <class E>
constexpr long long def_of(E e) {
  return static_cast<long long>(e);
}

/// The device limit, the layout's (device: 0..it-1; host_devices: 1..it).
inline constexpr long long option_max_devices = static_cast<long long>(max_devices);

inline constexpr option_spec option_table[] = {
    {option_id::device, "device", "device", "KREX_DEVICE", option_kind::integer, 0,
     option_max_devices - 1, 0, "", nullptr, "device ordinal"},
    {option_id::segment, "segment", "segment", "KREX_SEGMENT", option_kind::segment_name, 0, 0, 0,
     "krex", nullptr,
     "base name of the node segment in `/dev/shm` (the full name adds layout version and domain; "
     "the directory is `KREX_SHM_DIR`, default `/dev/shm`: an absolute path of a directory owned "
     "by root or you, sticky if others can write it)"},
    {option_id::access, "access", "access", "KREX_SEGMENT_ACCESS", option_kind::choice, 0, 0,
     def_of(segment_access::user), "", &choices_of<segment_access>,
     "`user`: per uid, mode 0600; `group`: per gid, mode 0660 for shared fleets"},
    {option_id::gate_park, "gate_park", "gate_park_ms", "KREX_GATE_PARK_MS",
     option_kind::milliseconds, 1, max_env_ms, 20, "", nullptr,
     "how often a parked submitter rechecks the holder's liveness"},
    {option_id::drain_deadline, "drain_deadline", "drain_deadline_ms", "KREX_DRAIN_DEADLINE_MS",
     option_kind::milliseconds, 1, max_env_ms, 10'000, "", nullptr,
     "how long a region waits for siblings' in-flight work and drain acks"},
    {option_id::lock_wait, "lock_wait", "lock_wait_ms", "KREX_LOCK_WAIT_MS",
     option_kind::milliseconds, 0, max_env_ms, 600'000, "", nullptr,
     "how long a region waits for the FIFO region lock"},
    {option_id::lease, "lease", "lease_ms", "KREX_LEASE_MS", option_kind::milliseconds, 1,
     max_env_ms, 600'000, "", nullptr,
     "how long a region may be held, in every phase (a holder stopped or starved past it loses "
     "the device); must exceed `drain_deadline` + 3 × `freeze_deadline`"},
    {option_id::allow_contended, "allow_contended", "allow_contended", "KREX_ALLOW_CONTENDED",
     option_kind::boolean, 0, 0, 0, "", nullptr,
     "on a missed drain deadline, proceed flagged `contended` instead of throwing"},
    {option_id::freeze, "freeze", "freeze", "KREX_FREEZE", option_kind::choice, 0, 0,
     def_of(freeze_method::automatic), "", &choices_of<freeze_method>, ""},
    {option_id::scope, "scope", "scope", "KREX_FREEZE_SCOPE", option_kind::choice, 0, 0,
     def_of(freeze_scope::device), "", &choices_of<freeze_scope>,
     "freeze only the siblings that touch the device (`device`: work in flight, or inside a gated "
     "call, device management included, when the region starts; `active` is its former name), "
     "or `all` siblings (the KREX paper's choice; the demo's, since on the host backend its "
     "CPU-only siblings are the interference)"},
    {option_id::freeze_deadline, "freeze_deadline", "freeze_deadline_ms", "KREX_FREEZE_DEADLINE_MS",
     option_kind::milliseconds, 1, max_env_ms, 2'000, "", nullptr,
     "how long to wait for siblings to report frozen"},
    {option_id::handoff_grace, "handoff_grace", "handoff_grace_ms", "KREX_HANDOFF_GRACE_MS",
     option_kind::milliseconds, 0, 100, 2, "", nullptr,
     "at region exit, when siblings' calls were parked at the gate: how long the gate stays "
     "lowered after they passed, so their next calls run too (0..100)",
     "0..100"},
    {option_id::cgroup_root, "cgroup_root", "cgroup_root", "KREX_CGROUP_ROOT", option_kind::path, 0,
     0, 0, "", nullptr,
     "absolute path of the krex cgroup root; default: a `krex` child of the process's own "
     "cgroup"},
    {option_id::pin, "pin", "pin", "KREX_PIN", option_kind::boolean, 0, 0, 1, "", nullptr,
     "pin the measuring thread to its device's reserved cores in a region"},
    {option_id::reserved_cores, "reserved_cores", "reserved_cores", "KREX_RESERVED_CORES",
     option_kind::integer, 1, 64, 1, "", nullptr, "physical cores reserved per device slice"},
    {option_id::confine, "confine", "confine", "KREX_CONFINE", option_kind::boolean, 0, 0, 1, "",
     nullptr,
     "keep tenant threads off every reserved core outside regions (on a machine with very few "
     "cores this costs a large share of the CPU; `docs/RESULTS.md` measures it)"},
    {option_id::gate_contexts, "gate_contexts", "gate_contexts", "KREX_GATE_CONTEXTS",
     option_kind::boolean, 0, 0, 1, "", nullptr,
     "gate context creation and destruction too (CUDA)"},
    {option_id::release_on_leave, "release_on_leave", "release_on_leave", "KREX_RELEASE_ON_LEAVE",
     option_kind::boolean, 0, 0, 0, "", nullptr,
     "leaving releases the process's device state (CUDA: `cudaDeviceReset`) inside the gate, so "
     "its teardown never overlaps a sibling's region; for a process that is done with the GPU "
     "when it leaves"},
    {option_id::host_devices, "host_devices", "host_devices", "KREX_HOST_DEVICES",
     option_kind::integer, 1, option_max_devices, 1, "", nullptr,
     "virtual devices of the host backend"},
    {option_id::gate_mode, "gate_mode", "gating", "KREX_GATING", option_kind::choice, 0, 0,
     def_of(gating::automatic), "", &choices_of<gating>,
     "`auto` (automatic gating where the backend has it) or `explicit`"},
    {option_id::quiet_deadline, "quiet_deadline", "quiet_deadline_ms", "KREX_QUIET_DEADLINE_MS",
     option_kind::milliseconds, 0, 60'000, 500, "", nullptr,
     "the quiet step: how long a region waits, after freezing its siblings, for the device "
     "itself to become quiet (the driver's work after large frees) before its body; then it "
     "proceeds flagged `quiet(busy)`; 0 turns the probe off (0..60000)",
     "milliseconds 0..60000"},
    {option_id::quiet_tolerance_pct, "quiet_tolerance_pct", "quiet_tolerance_pct",
     "KREX_QUIET_TOLERANCE_PCT", option_kind::integer, 1, 100, 5, "", nullptr,
     "how much slower than the device's idle figure the quiet probe may be and still count as "
     "quiet (1..100)"},
};

inline constexpr std::size_t option_count = sizeof(option_table) / sizeof(option_table[0]);

/// The table's row of `id` (rows are in option_id order).
constexpr const option_spec& option(option_id id) {
  return option_table[static_cast<std::size_t>(id)];
}

namespace option_table_check {
constexpr bool in_id_order() {
  for (std::size_t i = 0; i < option_count; ++i)
    if (static_cast<std::size_t>(option_table[i].id) != i) return false;
  return true;
}
static_assert(in_id_order(), "option_table: one row per option_id, in option_id order");
static_assert(option_count == static_cast<std::size_t>(option_id::count_),
              "option_table: a row for every option_id");
constexpr bool choices_fit() {
  for (const option_spec& s : option_table)
    if ((s.kind == option_kind::choice) != (s.choices != nullptr) ||
        (s.choices != nullptr &&
         (s.def < 0 || static_cast<std::size_t>(s.def) >= s.choices->count)))
      return false;
  return true;
}
static_assert(choices_fit(), "option_table: a choice row has its names and a default among them");
static_assert(choices_of<freeze_method>.count == def_of(freeze_method::none) + 1 &&
                  choices_of<freeze_scope>.count == def_of(freeze_scope::active) + 1 &&
                  choices_of<segment_access>.count == def_of(segment_access::group) + 1 &&
                  choices_of<gating>.count == def_of(gating::explicit_) + 1,
              "a name for every value of a choice enum");
}  // namespace option_table_check

/// An option held as text (segment_name, path).
constexpr bool is_text(option_kind k) {
  return k == option_kind::segment_name || k == option_kind::path;
}
/// Where options keeps option `id`'s value: its place among the text
/// options, or among the others (numbers, booleans, choices).
constexpr std::size_t value_slot(option_id id) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < static_cast<std::size_t>(id); ++i)
    n += is_text(option_table[i].kind) == is_text(option(id).kind) ? 1 : 0;
  return n;
}
constexpr std::size_t count_text_options() {
  std::size_t n = 0;
  for (const option_spec& s : option_table) n += is_text(s.kind) ? 1 : 0;
  return n;
}
inline constexpr std::size_t text_option_count = count_text_options();
inline constexpr std::size_t number_option_count = option_count - text_option_count;

/// `KREX_*` variables krex reads outside options::with_env(): they are no
/// misspelling, and `krexctl options` lists them after the options.
struct env_variable {
  const char* name;
  const char* doc;
};
inline constexpr env_variable other_env_table[] = {
    {"KREX_SHM_DIR", "the segment directory (default `/dev/shm`; detail/segment/segment_file.hpp)"},
    {"KREX_GBENCH", "`0`: krex off for a Google Benchmark program (gbench.hpp)"},
    {"KREX_GBENCH_STRICT",
     "`0`: a krex error only makes error rows; by default it fails the Google Benchmark "
     "program, exit status 1 (gbench.hpp)"},
    {"KREX_NVBENCH_REGIONS", "`0`: krex off for an nvbench program (nvbench.hpp, krex.nvbench)"},
    {"KREX_PATCH", "`0`: krex.patch(), krex.run, krex.torch.enable() turn krex off (control run)"},
    {"KREX_PATCH_JOIN", "`1`: krex.patch() joins at once (krex.run does); `0`: at the first call"},
};

}  // namespace krex::detail
