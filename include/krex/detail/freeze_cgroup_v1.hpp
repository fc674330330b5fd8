// SPDX-License-Identifier: Apache-2.0
#pragma once

// Freezing through the cgroup v1 freezer controller: `freezer.state` in a
// leaf of the hierarchy that carries `freezer`. Writing FROZEN starts the
// freeze; reads say FREEZING until every task has stopped, then FROZEN.
// Unlike v2, a frozen v1 task cannot even die until it is thawed.

#include <krex/detail/cgroup.hpp>
#include <krex/options.hpp>

#include <string>

namespace krex::detail {

struct freeze_cgroup_v1 {
  static constexpr freeze_method method = freeze_method::cgroup_v1;
  static constexpr bool v2 = false;
  static constexpr const char* control = "freezer.state";
  static constexpr const char* status = "freezer.state";
  static constexpr long magic = CGROUP_SUPER_MAGIC;

  /// Asks the kernel to freeze (or thaw) every task below `leaf`.
  static int request(const std::string& leaf, bool frozen) {
    return cgroup::write_file(leaf + "/" + control, frozen ? "FROZEN" : "THAWED");
  }

  /// `frozen`: the state reads FROZEN (not FREEZING). Returns 0 or an errno value.
  static int is_frozen(const std::string& leaf, bool& frozen) {
    std::string text;
    if (const int e = cgroup::read_file(leaf + "/" + status, text)) return e;
    frozen = text.compare(0, 6, "FROZEN") == 0;
    return 0;
  }

  /// `busy`: some live process is in `leaf` (v1 has no "populated" flag;
  /// a child cgroup of the leaf makes its rmdir fail instead).
  static int is_busy(const std::string& leaf, bool& busy) {
    std::string text;
    if (const int e = cgroup::read_file(leaf + "/cgroup.procs", text)) return e;
    busy = text.find_first_of("0123456789") != std::string::npos;
    return 0;
  }

  /// Checks that leaves can be made below `root` and carry `freezer.state`.
  /// Returns 0, or an errno value and the path that failed.
  static int probe(const std::string& root, std::string& failed) {
    failed = root + "/cgroup.procs";
    if (const int e = cgroup::probe_open(failed, O_WRONLY)) return e;
    failed = root + "/" + control;
    if (const int e = cgroup::probe_open(failed, O_RDONLY)) return e;
    failed.clear();
    return 0;
  }
};

}  // namespace krex::detail
