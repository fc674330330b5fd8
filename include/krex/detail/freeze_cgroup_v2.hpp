// SPDX-License-Identifier: Apache-2.0
#pragma once

// Freezing through the cgroup v2 core freezer: `cgroup.freeze` in a leaf,
// completion reported as "frozen 1" in its `cgroup.events`. It is not a
// controller: nothing is enabled in any `cgroup.subtree_control`, so the
// "no internal processes" rule never bites the krex root.

#include <krex/detail/cgroup.hpp>
#include <krex/options.hpp>

#include <string>

namespace krex::detail {

struct freeze_cgroup_v2 {
  static constexpr freeze_method method = freeze_method::cgroup_v2;
  static constexpr bool v2 = true;
  static constexpr const char* control = "cgroup.freeze";
  static constexpr const char* status = "cgroup.events";
  static constexpr long magic = CGROUP2_SUPER_MAGIC;

  /// Asks the kernel to freeze (or thaw) every process below `leaf`.
  static int request(const std::string& leaf, bool frozen) {
    return cgroup::write_file(leaf + "/" + control, frozen ? "1" : "0");
  }

  /// `frozen`: the freeze of `leaf` has completed. Returns 0 or an errno value.
  static int is_frozen(const std::string& leaf, bool& frozen) {
    return event(leaf, "frozen", frozen);
  }

  /// `busy`: some live process is in `leaf` or below it.
  static int is_busy(const std::string& leaf, bool& busy) { return event(leaf, "populated", busy); }

  /// Checks that leaves can be made below `root` and that the kernel has the
  /// v2 freezer (5.2+). Returns 0, or an errno value and the path that failed.
  static int probe(const std::string& root, std::string& failed) {
    failed = root + "/cgroup.procs";
    if (const int e = cgroup::probe_open(failed, O_WRONLY)) return e;
    failed = root + "/" + control;
    if (const int e = cgroup::probe_open(failed, O_RDONLY)) return e;
    failed.clear();
    return 0;
  }

 private:
  // cgroup.events holds "populated <0|1>\nfrozen <0|1>\n".
  static int event(const std::string& leaf, const char* key, bool& on) {
    std::string text;
    if (const int e = cgroup::read_file(leaf + "/" + status, text)) return e;
    const std::string want = std::string(key) + " 1";
    on = false;
    for (const std::string& line : cgroup::split(text, '\n'))
      if (line == want) on = true;
    return 0;
  }
};

}  // namespace krex::detail
