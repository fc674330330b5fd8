// SPDX-License-Identifier: Apache-2.0
#pragma once

// Cgroup helpers shared by the tests that create real cgroups.

#include <krex/detail/cgroup.hpp>

#include "proc_util.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>

namespace krex_test {

/// The whole content of a (cgroup or /proc) file; "" if it cannot be read.
inline std::string read_text(const std::string& path) {
  std::string out;
  krex::detail::cgroup::read_file(path, out);
  return out;
}

/// Test hygiene, whatever happened: thaw every leaf t0..t63 under `root`
/// (v2 and v1) and kill what still runs there (a test that failed half-way
/// must not leave frozen processes behind), then remove the leaves and the
/// root, waiting at most 5 s.
inline void scrub_cgroup_root(const std::string& root) {
  if (root.empty()) return;
  for (int s = 0; s < 64; ++s) {
    const std::string leaf = root + "/t" + std::to_string(s);
    if (::access(leaf.c_str(), F_OK) != 0) continue;
    krex::detail::cgroup::write_file(leaf + "/cgroup.freeze", "0");
    krex::detail::cgroup::write_file(leaf + "/freezer.state", "THAWED");
    if (krex::detail::cgroup::write_file(leaf + "/cgroup.kill", "1") != 0)
      for (const std::string& p :
           krex::detail::cgroup::split(read_text(leaf + "/cgroup.procs"), '\n'))
        if (!p.empty()) ::kill(std::atoi(p.c_str()), SIGKILL);
  }
  wait_until(
      [&] {
        reap_orphans();
        for (int s = 0; s < 64; ++s) ::rmdir((root + "/t" + std::to_string(s)).c_str());
        return ::rmdir(root.c_str()) == 0 || errno == ENOENT;
      },
      std::chrono::seconds(5));
}

}  // namespace krex_test
