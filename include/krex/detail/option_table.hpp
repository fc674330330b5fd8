// SPDX-License-Identifier: Apache-2.0
#pragma once

// The one list of krex::options: for each option its setter, its Python
// keyword, its KREX_* variable, its kind, its range, its default and one line
// of what it does. options.hpp's setters and with_env() take names, ranges
// and error texts from here; the Python binding (python/src/krex_python.cpp)
// reads its keywords from here; `krexctl options` prints it, and
// `krexctl options --markdown` prints README.md's options table.
// tests/test_tables.cpp checks the rest against it: options{}'s defaults,
// README.md's table, docs/PYTHON.md, the .pyi stubs and krexctl's help.
// Adding an option: a row here; its field, setter and case of
// options::visit() in options.hpp (-Wswitch names a missing case, an error
// in the header tests); its keyword in python/krex/_krex.pyi; then the
// README.md and docs/PYTHON.md tables, whose text test_tables prints when
// they differ.

#include <krex/detail/layout.hpp>

#include <cstddef>
#include <string>

namespace krex::detail {

/// What an option holds; decides its parsing, its checks and its Python type.
enum class option_kind {
  integer,       ///< int, lo..hi
  milliseconds,  ///< std::chrono::milliseconds, at least lo (setters: at most hi where hi is set)
  boolean,       ///< bool
  segment_name,  ///< 1..64 of [A-Za-z0-9._-]
  path,          ///< an absolute path without '..', or empty
  choice,        ///< an enum, by the names in `values`
};

/// Every option, in the order with_env() reads their variables.
enum class option_id {
  device,
  segment,
  access,
  gate_park,
  drain_deadline,
  lock_wait,
  lease,
  allow_contended,
  freeze,
  scope,
  freeze_deadline,
  handoff_grace,
  cgroup_root,
  pin,
  reserved_cores,
  confine,
  gate_contexts,
  release_on_leave,
  host_devices,
  gate_mode,
  quiet_deadline,
  quiet_tolerance_pct,
};

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
  long long def;         ///< integer, milliseconds, boolean: the default
  const char* def_text;  ///< segment_name, path, choice: the default ("" for a path: derived)
  const char* values;    ///< choice: the names it takes, in order
  const char* doc;       ///< what it does, one line (README.md's table)
  /// milliseconds with a cap: the accepted text of a variable over it
  const char* env_cap = nullptr;
};

/// The device limit, the layout's (device: 0..it-1; host_devices: 1..it).
inline constexpr long long option_max_devices = static_cast<long long>(max_devices);

inline constexpr option_spec option_table[] = {
    {option_id::device, "device", "device", "KREX_DEVICE", option_kind::integer, 0,
     option_max_devices - 1, 0, "", "", "device ordinal"},
    {option_id::segment, "segment", "segment", "KREX_SEGMENT", option_kind::segment_name, 0, 0, 0,
     "krex", "",
     "base name of the node segment in `/dev/shm` (the full name adds layout version and domain; "
     "the directory is `KREX_SHM_DIR`, default `/dev/shm`: an absolute path of a directory owned "
     "by root or you, sticky if others can write it)"},
    {option_id::access, "access", "access", "KREX_SEGMENT_ACCESS", option_kind::choice, 0, 0, 0,
     "user", "user, group",
     "`user`: per uid, mode 0600; `group`: per gid, mode 0660 for shared fleets"},
    {option_id::gate_park, "gate_park", "gate_park_ms", "KREX_GATE_PARK_MS",
     option_kind::milliseconds, 1, max_env_ms, 20, "", "",
     "how often a parked submitter rechecks the holder's liveness"},
    {option_id::drain_deadline, "drain_deadline", "drain_deadline_ms", "KREX_DRAIN_DEADLINE_MS",
     option_kind::milliseconds, 1, max_env_ms, 10'000, "", "",
     "how long a region waits for siblings' in-flight work and drain acks"},
    {option_id::lock_wait, "lock_wait", "lock_wait_ms", "KREX_LOCK_WAIT_MS",
     option_kind::milliseconds, 0, max_env_ms, 600'000, "", "",
     "how long a region waits for the FIFO region lock"},
    {option_id::lease, "lease", "lease_ms", "KREX_LEASE_MS", option_kind::milliseconds, 1,
     max_env_ms, 600'000, "", "",
     "how long a region may be held, in every phase (a holder stopped or starved past it loses "
     "the device); must exceed `drain_deadline` + 3 × `freeze_deadline`"},
    {option_id::allow_contended, "allow_contended", "allow_contended", "KREX_ALLOW_CONTENDED",
     option_kind::boolean, 0, 0, 0, "", "",
     "on a missed drain deadline, proceed flagged `contended` instead of throwing"},
    {option_id::freeze, "freeze", "freeze", "KREX_FREEZE", option_kind::choice, 0, 0, 0, "auto",
     "auto, cgroup2, cgroup1, signal, none", "`auto`, `cgroup2`, `cgroup1`, `signal`, `none`"},
    {option_id::scope, "scope", "scope", "KREX_FREEZE_SCOPE", option_kind::choice, 0, 0, 0,
     "device", "all, device, active",
     "freeze only the siblings that touch the device (`device`: work in flight, or inside a gated "
     "call, device management included, when the region starts; `active` is its former name), "
     "or `all` siblings (the KREX paper's choice; the demo's, since on the host backend its "
     "CPU-only siblings are the interference)"},
    {option_id::freeze_deadline, "freeze_deadline", "freeze_deadline_ms", "KREX_FREEZE_DEADLINE_MS",
     option_kind::milliseconds, 1, max_env_ms, 2'000, "", "",
     "how long to wait for siblings to report frozen"},
    {option_id::handoff_grace, "handoff_grace", "handoff_grace_ms", "KREX_HANDOFF_GRACE_MS",
     option_kind::milliseconds, 0, 100, 2, "", "",
     "at region exit, when siblings' calls were parked at the gate: how long the gate stays "
     "lowered after they passed, so their next calls run too (0..100)",
     "0..100"},
    {option_id::cgroup_root, "cgroup_root", "cgroup_root", "KREX_CGROUP_ROOT", option_kind::path, 0,
     0, 0, "", "",
     "absolute path of the krex cgroup root; default: a `krex` child of the process's own "
     "cgroup"},
    {option_id::pin, "pin", "pin", "KREX_PIN", option_kind::boolean, 0, 0, 1, "", "",
     "pin the measuring thread to its device's reserved cores in a region"},
    {option_id::reserved_cores, "reserved_cores", "reserved_cores", "KREX_RESERVED_CORES",
     option_kind::integer, 1, 64, 1, "", "", "physical cores reserved per device slice"},
    {option_id::confine, "confine", "confine", "KREX_CONFINE", option_kind::boolean, 0, 0, 1, "",
     "",
     "keep tenant threads off every reserved core outside regions (on a machine with very few "
     "cores this costs a large share of the CPU; `docs/RESULTS.md` measures it)"},
    {option_id::gate_contexts, "gate_contexts", "gate_contexts", "KREX_GATE_CONTEXTS",
     option_kind::boolean, 0, 0, 1, "", "", "gate context creation and destruction too (CUDA)"},
    {option_id::release_on_leave, "release_on_leave", "release_on_leave", "KREX_RELEASE_ON_LEAVE",
     option_kind::boolean, 0, 0, 0, "", "",
     "leaving releases the process's device state (CUDA: `cudaDeviceReset`) inside the gate, so "
     "its teardown never overlaps a sibling's region; for a process that is done with the GPU "
     "when it leaves"},
    {option_id::host_devices, "host_devices", "host_devices", "KREX_HOST_DEVICES",
     option_kind::integer, 1, option_max_devices, 1, "", "", "virtual devices of the host backend"},
    {option_id::gate_mode, "gate_mode", "gating", "KREX_GATING", option_kind::choice, 0, 0, 0,
     "auto", "auto, explicit", "`auto` (automatic gating where the backend has it) or `explicit`"},
    {option_id::quiet_deadline, "quiet_deadline", "quiet_deadline_ms", "KREX_QUIET_DEADLINE_MS",
     option_kind::milliseconds, 0, 60'000, 500, "", "",
     "the quiet step: how long a region waits, after freezing its siblings, for the device "
     "itself to become quiet (the driver's work after large frees) before its body; then it "
     "proceeds flagged `quiet(busy)`; 0 turns the probe off (0..60000)",
     "milliseconds 0..60000"},
    {option_id::quiet_tolerance_pct, "quiet_tolerance_pct", "quiet_tolerance_pct",
     "KREX_QUIET_TOLERANCE_PCT", option_kind::integer, 1, 100, 5, "", "",
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
static_assert(option_count == static_cast<std::size_t>(option_id::quiet_tolerance_pct) + 1,
              "option_table: a row for every option_id");
}  // namespace option_table_check

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

/// The option's default as README.md's table writes it.
inline std::string option_default_text(const option_spec& s) {
  switch (s.kind) {
    case option_kind::integer:
    case option_kind::milliseconds: return std::to_string(s.def);
    case option_kind::boolean: return s.def != 0 ? "true" : "false";
    case option_kind::path:
      return *s.def_text == '\0' ? std::string("derived") : "`" + std::string(s.def_text) + "`";
    case option_kind::segment_name:
    case option_kind::choice: return "`" + std::string(s.def_text) + "`";
  }
  return "?";
}

/// README.md's options table, header included, one line per row, each
/// ending in '\n' (`krexctl options --markdown` prints it).
inline std::string options_markdown() {
  std::string out = "| setter | environment | default | meaning |\n|---|---|---|---|\n";
  for (const option_spec& s : option_table)
    out += std::string("| `") + s.name + "` | `" + s.env + "` | " + option_default_text(s) + " | " +
           s.doc + " |\n";
  return out;
}

}  // namespace krex::detail
