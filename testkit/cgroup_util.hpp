// SPDX-License-Identifier: Apache-2.0
#pragma once

// Cgroup helpers shared by the tests that create real cgroups.

#include <krex/detail/freeze/cgroup.hpp>
#include <krex/region.hpp>

#include "flag.hpp"
#include "krex_test.hpp"
#include "proc_util.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

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

/// A test on a cgroup v2 root of its own, `<own cgroup>/<prefix>-<unique>`
/// (skipped without root or a v2 hierarchy): a segment, a shared board
/// `Board` (with a krex_test::flag `stop` its children watch), the children the test
/// forks, and a teardown that stops and reaps them, then scrubs the root.
template <class Board>
class cgroup2_test : public ::testing::Test {
 protected:
  explicit cgroup2_test(const char* prefix) : m_prefix(prefix) {}
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "cgroup v2 freezing needs root (or a delegated subtree)";
    m_base = krex::detail::cgroup::self_view::read().locate(true).own;
    if (m_base.empty()) GTEST_SKIP() << "no cgroup v2 hierarchy here";
    m_root = m_base + "/" + unique_name(m_prefix);
    become_subreaper();
  }
  void TearDown() override {
    m_b->stop.raise();
    for (auto& k : m_kids) (void)k.wait(std::chrono::seconds(10));
    // Whatever happened: nothing left frozen or running in the test's leaves.
    scrub_cgroup_root(m_root);
  }
  krex::options opts() const {
    return m_seg.opts().freeze(krex::freeze_method::cgroup_v2).cgroup_root(m_root);
  }
  std::string leaf(int slot) const { return m_root + "/t" + std::to_string(slot); }
  /// A sibling that joins with opts(), adds 1 to `joined` (a word of the
  /// board) and computes, counting in the board's `spins`, until stop.
  void spawn_spinner(std::atomic<int>& joined) {
    m_kids.push_back(spawn([this, &joined] {
      krex::tenant t{opts()};
      joined.fetch_add(1);
      while (!m_b->stop.up()) m_b->spins.fetch_add(1);
      return 0;
    }));
  }

  const char* m_prefix;
  scoped_segment m_seg;
  shared<Board> m_b;
  std::string m_base, m_root;
  std::vector<child> m_kids;
};

}  // namespace krex_test
