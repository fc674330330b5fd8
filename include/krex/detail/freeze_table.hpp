// SPDX-License-Identifier: Apache-2.0
#pragma once

// The cgroup freezers as one table: for each method the files and values the
// kernel uses. freezer.hpp drives every cgroup method through it, and the
// guardian's async-signal-safe thaw (guardian_sys.hpp) writes the same entries.
// Plain constexpr data: no strings, no allocation. v2 is the core freezer, not
// a controller (no `cgroup.subtree_control` is touched). v1 reads FREEZING
// while a freeze is in progress; a frozen v1 task cannot even die until it is
// thawed. none is the empty entry: no file, freezing does nothing. signal has
// no files either; it lives in freeze_signal.hpp.

#include <krex/options.hpp>

#include <linux/magic.h>

namespace krex::detail {

struct freeze_table {
  freeze_method method = freeze_method::none;
  const char* control = nullptr;       ///< written to freeze and thaw; null: no cgroup freezing
  const char* freeze_value = nullptr;  ///< written to `control` to freeze
  const char* thaw_value = nullptr;    ///< written to `control` to thaw
  const char* status = nullptr;        ///< read for the freeze's completion
  const char* frozen_line = nullptr;   ///< a line of `status` once every task is frozen
  const char* busy_file = nullptr;     ///< where live processes show
  const char* busy_line = nullptr;     ///< its line while populated; null: any pid listed
  const char* procs = nullptr;         ///< the file processes are moved through
  const char* hierarchy = nullptr;     ///< the hierarchy's name in messages
  long magic = 0;                      ///< its filesystem magic
  bool v2 = false;                     ///< which of the two hierarchies it lives in

  constexpr bool cgroup() const noexcept { return control != nullptr; }
};

// clang-format off
inline constexpr freeze_table freeze_cgroup_v2{
    freeze_method::cgroup_v2,
    "cgroup.freeze", "1", "0",       // control file, freeze value, thaw value
    "cgroup.events", "frozen 1",     // status file, its line once frozen
    "cgroup.events", "populated 1",  // busy file, its line while populated
    "cgroup.procs", "cgroup v2 hierarchy", CGROUP2_SUPER_MAGIC, true};
inline constexpr freeze_table freeze_cgroup_v1{
    freeze_method::cgroup_v1,
    "freezer.state", "FROZEN", "THAWED",
    "freezer.state", "FROZEN",       // FREEZING while in progress
    "cgroup.procs", nullptr,         // any pid listed
    "cgroup.procs", "cgroup v1 freezer hierarchy", CGROUP_SUPER_MAGIC, false};
// clang-format on
inline constexpr freeze_table freeze_none{};

/// The table of method `m`: the empty one for none, signal and automatic.
constexpr const freeze_table& freeze_table_of(freeze_method m) noexcept {
  return m == freeze_method::cgroup_v2   ? freeze_cgroup_v2
         : m == freeze_method::cgroup_v1 ? freeze_cgroup_v1
                                         : freeze_none;
}

}  // namespace krex::detail
