// SPDX-License-Identifier: Apache-2.0
// Steps 3 and 4 through krex::region, with real processes and real cgroups:
// a frozen sibling tree makes no progress for the whole body and resumes
// after; scope `active` spares siblings that only compute; a freeze that
// cannot complete fails the region and leaves nothing frozen or gated; the
// measuring thread runs on exactly the reserved cores and gets its mask back.

#include <krex/region.hpp>

#include <gtest/gtest.h>

#include "holder.hpp"
#include "krex_test.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using krex::freeze_method;
using krex_test::child;
using krex_test::scoped_segment;
using krex_test::shared;

namespace {

std::string own_cgroup(freeze_method m) {
  const auto view = krex::detail::cgroup::self_view::read();
  return view.locate(m == freeze_method::cgroup_v2).own;
}

struct board {
  std::atomic<std::uint64_t> work[4];  // child A, A's grandchild, child B, B's grandchild
  std::atomic<int> grandchild[2];
  std::atomic<int> ready;
  std::atomic<int> stop;
  std::atomic<int> release;
};

class isolation : public ::testing::TestWithParam<freeze_method> {
 protected:
  void SetUp() override {
    m_method = GetParam();
    if (m_method != freeze_method::signal) {
      if (::geteuid() != 0) GTEST_SKIP() << "cgroup freezing needs root (or a delegated subtree)";
      const std::string base = own_cgroup(m_method);
      if (base.empty()) GTEST_SKIP() << krex::to_string(m_method) << " hierarchy not mounted here";
      m_root = base + "/" + krex_test::unique_name("krex-it");
    }
    krex_test::become_subreaper();
  }
  void TearDown() override {
    krex::detail::sys() = m_saved;
    m_b->stop.store(1);
    for (int g : {m_b->grandchild[0].load(), m_b->grandchild[1].load()})
      if (g > 0) krex_test::kill_and_reap(g);
    for (auto& k : m_kids) EXPECT_EQ(krex_test::exit_code(k.wait(10s)), 0);
    krex_test::reap_orphans();
    if (!m_root.empty()) {
      krex_test::wait_until(
          [&] {
            for (int s = 0; s < 8; ++s) ::rmdir((m_root + "/t" + std::to_string(s)).c_str());
            return ::rmdir(m_root.c_str()) == 0 || errno == ENOENT;
          },
          3s);
      EXPECT_NE(::access(m_root.c_str(), F_OK), 0) << "cgroup root left behind: " << m_root;
    }
  }

  krex::options opts() const {
    return m_seg.opts().freeze(m_method).cgroup_root(m_root).freeze_deadline(2s);
  }

  // A sibling tenant: optionally submits once (making it "active"), forks a
  // grandchild, and both count in shared memory until told to stop.
  void start_sibling(int k, bool submit) {
    m_kids.push_back(krex_test::spawn([this, k, submit] {
      if (m_method == freeze_method::signal) ::setpgid(0, 0);  // its own group to stop
      krex::tenant t{opts()};
      if (submit) t.submit([] {});
      const pid_t g = ::fork();
      if (g == 0) {
        while (m_b->stop.load() == 0) m_b->work[2 * k + 1]++;
        ::_exit(0);
      }
      m_b->grandchild[k] = g;
      m_b->ready++;
      while (m_b->stop.load() == 0) m_b->work[2 * k]++;
      ::kill(g, SIGKILL);
      ::waitpid(g, nullptr, 0);
      return 0;
    }));
  }

  bool moves(int i) const {
    const std::uint64_t a = m_b->work[i].load();
    return krex_test::wait_until([&] { return m_b->work[i].load() > a; }, 3s);
  }
  bool still(int i, std::chrono::milliseconds window) const {
    const std::uint64_t a = m_b->work[i].load();
    std::this_thread::sleep_for(window);
    return m_b->work[i].load() == a;
  }

  freeze_method m_method{};
  std::string m_root;
  scoped_segment m_seg;
  shared<board> m_b;
  std::vector<child> m_kids;
  krex::detail::sys_table m_saved = krex::detail::sys();
};

std::string name_of(const ::testing::TestParamInfo<freeze_method>& i) {
  return i.param == freeze_method::cgroup_v2   ? "cgroup_v2"
         : i.param == freeze_method::cgroup_v1 ? "cgroup_v1"
                                               : "signal";
}

}  // namespace

INSTANTIATE_TEST_SUITE_P(methods, isolation,
                         ::testing::Values(freeze_method::cgroup_v2, freeze_method::cgroup_v1,
                                           freeze_method::signal),
                         name_of);

TEST_P(isolation, region_freezes_sibling_tree_for_the_whole_body) {
  start_sibling(0, true);
  ASSERT_TRUE(krex_test::wait_until([&] { return m_b->ready.load() == 1; }, 10s));
  krex::tenant t{opts()};
  EXPECT_EQ(t.freeze(), m_method);
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE(moves(0) && moves(1)) << "sibling not running before the region";
    {
      krex::region r{t};
      EXPECT_TRUE(r.report().frozen);
      EXPECT_EQ(r.report().freeze, m_method);
      ASSERT_EQ(r.report().frozen_pids.size(), 1U);
      EXPECT_EQ(r.report().frozen_pids[0], m_kids[0].pid());
      EXPECT_TRUE(still(0, 200ms)) << "frozen sibling made progress";
      EXPECT_TRUE(still(1, 50ms)) << "frozen sibling's child made progress";
      EXPECT_NE(r.report().level().find(std::string("freeze(") + krex::to_string(m_method)),
                std::string::npos)
          << r.report().level();
    }
    EXPECT_TRUE(moves(0) && moves(1)) << "sibling not thawed after the region";
  }
}

TEST_P(isolation, scope_active_spares_siblings_that_only_compute) {
  start_sibling(0, true);   // submitted device work: active
  start_sibling(1, false);  // only computes
  ASSERT_TRUE(krex_test::wait_until([&] { return m_b->ready.load() == 2; }, 10s));
  krex::tenant t{opts().scope(krex::freeze_scope::active)};
  krex::region r{t};
  ASSERT_EQ(r.report().frozen_pids.size(), 1U);
  EXPECT_EQ(r.report().frozen_pids[0], m_kids[0].pid());
  EXPECT_EQ(r.report().scope, krex::freeze_scope::active);
  EXPECT_TRUE(still(0, 100ms));
  EXPECT_TRUE(moves(2)) << "the compiling sibling was frozen";
}

// Scope `device`: a sibling caught inside a gated call when the gate rises
// finishes it first, then is frozen (it touched the device); a sibling that
// only computes keeps running. `active` is the same selection.
TEST_P(isolation, scope_device_freezes_a_sibling_caught_in_a_submission) {
  std::atomic<int>& release = m_b->release;
  m_kids.push_back(krex_test::spawn([this, &release] {
    if (m_method == freeze_method::signal) ::setpgid(0, 0);
    krex::tenant t{opts()};
    {
      krex::submit_guard g{t};
      m_b->ready++;
      while (release.load() == 0) m_b->work[0]++;
    }
    while (m_b->stop.load() == 0) m_b->work[0]++;
    return 0;
  }));
  m_kids.push_back(krex_test::spawn([this] {
    if (m_method == freeze_method::signal) ::setpgid(0, 0);
    krex::tenant t{opts()};
    m_b->ready++;
    while (m_b->stop.load() == 0) m_b->work[2]++;
    return 0;
  }));
  ASSERT_TRUE(krex_test::wait_until([&] { return m_b->ready.load() == 2; }, 10s));
  krex::tenant t{opts().scope(krex::freeze_scope::device)};
  std::thread opener([&] {
    std::this_thread::sleep_for(200ms);
    release.store(1);
  });
  struct joiner {
    std::thread& t;
    ~joiner() {
      if (t.joinable()) t.join();
    }
  } join_opener{opener};
  {
    krex::region r{t};
    opener.join();
    EXPECT_EQ(r.report().scope, krex::freeze_scope::device);
    ASSERT_EQ(r.report().frozen_pids.size(), 1U);
    EXPECT_EQ(r.report().frozen_pids[0], m_kids[0].pid());
    EXPECT_TRUE(still(0, 100ms)) << "the sibling caught in a submission was not frozen";
    EXPECT_TRUE(moves(2)) << "the compiling sibling was frozen";
    EXPECT_GE(r.report().gate_ns, 100'000'000U) << "the gate did not wait for the open submission";
  }
}

namespace {
std::string g_fake_status;
int open_never_frozen(const char* p, int f, mode_t m) {
  const std::string s(p);
  const auto ends = [&](const char* suf) {
    const std::string x(suf);
    return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if ((f & O_ACCMODE) == O_RDONLY &&
      (ends("/cgroup.events") || ends("/freezer.state") || ends("/stat")) &&
      s.find("/self/") == std::string::npos)
    return krex::detail::sys_impl::open(g_fake_status.c_str(), O_RDONLY, 0);
  return krex::detail::sys_impl::open(p, f, m);
}
}  // namespace

TEST_P(isolation, freeze_that_cannot_complete_fails_the_region_cleanly) {
  start_sibling(0, true);
  ASSERT_TRUE(krex_test::wait_until([&] { return m_b->ready.load() == 1; }, 10s));
  krex::tenant t{opts().freeze_deadline(200ms)};
  g_fake_status = "/tmp/" + krex_test::unique_name("krex-fake-status");
  {
    // Looks neither frozen (v2: "frozen 0"; v1: THAWED) nor stopped (a running
    // member of the sibling's process group, for the signal method).
    std::ofstream(g_fake_status) << "populated 1\nfrozen 0\nTHAWED\n1 (x) R 1 "
                                 << m_kids[0].pid() << " 1\n";
  }
  krex::detail::sys().open = open_never_frozen;
  try {
    krex::region r{t};
    ADD_FAILURE() << "region did not fail";
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), krex::step::freeze) << e.what();
  }
  krex::detail::sys() = m_saved;
  std::remove(g_fake_status.c_str());
  EXPECT_EQ(krex::detail::member_of(t).dev->gate.load() % 2, 0U) << "gate left raised";
  EXPECT_TRUE(moves(0) && moves(1)) << "sibling left frozen";
  krex::region again{t};  // the lock was released
  EXPECT_TRUE(again.report().frozen);
}

// Two segments under the derived default root (one job's cgroup): their
// slots are numbered independently, so each segment gets its own directory
// and the two slot-0 tenants never share a leaf. The directory goes with the
// segment's last tenant.
TEST(cgroup_domains, segments_sharing_the_default_root_never_share_leaves) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create cgroups";
  if (own_cgroup(freeze_method::cgroup_v2).empty()) GTEST_SKIP() << "no cgroup v2 hierarchy";
  struct report {
    char cgroup[2][512];
    char root[2][512];
    std::atomic<int> joined;
    std::atomic<int> go;
  };
  shared<report> rep;
  scoped_segment seg_a, seg_b;
  std::vector<child> kids;
  for (int k = 0; k < 2; ++k)
    kids.push_back(krex_test::spawn([&, k] {
      const scoped_segment& seg = k == 0 ? seg_a : seg_b;
      krex::tenant t{seg.opts().freeze(freeze_method::cgroup_v2)};
      std::snprintf(rep->root[k], sizeof rep->root[k], "%s", t.cgroup_root().c_str());
      std::snprintf(rep->cgroup[k], sizeof rep->cgroup[k], "%s",
                    own_cgroup(freeze_method::cgroup_v2).c_str());
      rep->joined++;
      while (rep->go.load() == 0) std::this_thread::sleep_for(1ms);
      return 0;
    }));
  ASSERT_TRUE(krex_test::wait_until([&] { return rep->joined.load() == 2; }, 10s));
  const std::string root_a = rep->root[0], root_b = rep->root[1];
  EXPECT_NE(root_a, root_b);
  EXPECT_NE(root_a.find(krex::detail::segment_name(seg_a.opts())), std::string::npos) << root_a;
  EXPECT_EQ(std::string(rep->cgroup[0]), root_a + "/t0");
  EXPECT_EQ(std::string(rep->cgroup[1]), root_b + "/t0");
  rep->go.store(1);
  for (auto& c : kids) EXPECT_EQ(krex_test::exit_code(c.wait(10s)), 0);
  EXPECT_NE(::access(root_a.c_str(), F_OK), 0) << "segment directory left behind: " << root_a;
  EXPECT_NE(::access(root_b.c_str(), F_OK), 0) << "segment directory left behind: " << root_b;
}

// Issue 20: a SIGKILLed last tenant never runs its leave(), so its leaf and
// the segment's directory under the derived root stayed. The guardian reaps
// the leaf and, leaving with no tenant left, removes the directory.
TEST(cgroup_domains, guardian_removes_the_segment_directory_a_killed_tenant_left) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create cgroups";
  if (own_cgroup(freeze_method::cgroup_v2).empty()) GTEST_SKIP() << "no cgroup v2 hierarchy";
  struct report {
    char root[512];
  };
  shared<report> rep;
  scoped_segment seg;
  krex_test::member tenant{seg.opts().freeze(freeze_method::cgroup_v2), [&](krex::tenant& t) {
    std::snprintf(rep->root, sizeof rep->root, "%s", t.cgroup_root().c_str());
  }};  // killed, a tenant
  ASSERT_TRUE(tenant.ready(10s));
  const std::string root = rep->root;
  ASSERT_NE(root.find(krex::detail::segment_name(seg.opts())), std::string::npos) << root;
  ASSERT_EQ(::access((root + "/t0").c_str(), F_OK), 0) << "no leaf to leave behind";
  krex::detail::segment shm{seg.opts()};
  const int guardian = krex_test::wait_guardian_pid(shm.node());
  ASSERT_GT(guardian, 0);
  const std::uint64_t guardian_start = shm.node().guardian_start_time.load();
  ::kill(tenant.pid(), SIGKILL);
  ASSERT_TRUE(tenant.wait(5s).has_value());
  EXPECT_TRUE(krex_test::wait_until(
      [&] { return !krex::detail::alive(guardian, guardian_start); }, 10s))
      << "the guardian did not leave after its last tenant died";
  EXPECT_TRUE(krex_test::wait_until([&] { return ::access(root.c_str(), F_OK) != 0; }, 2s))
      << "segment directory left behind: " << root;
  ::rmdir((root + "/t0").c_str());  // a failed run must not leave it for the next
  ::rmdir(root.c_str());
}

TEST(pinning, measuring_thread_runs_on_reserved_cores_and_is_restored) {
  const std::vector<int> original = krex::detail::current_affinity();
  if (original.size() < 2) GTEST_SKIP() << "needs at least 2 allowed CPUs";
  scoped_segment seg;
  {
    krex::tenant t{seg.opts().pin(true).confine(true)};
    const std::vector<int> reserved = t.reserved_cpus();
    ASSERT_FALSE(reserved.empty());
    const std::vector<int> outside = krex::detail::current_affinity();
    for (int c : reserved)
      EXPECT_EQ(std::count(outside.begin(), outside.end(), c), 0)
          << "tenant thread may run on reserved CPU " << c;
    {
      krex::region r{t};
      EXPECT_TRUE(r.report().pinned);
      EXPECT_EQ(r.report().pinned_cpus, reserved);
      EXPECT_EQ(krex::detail::current_affinity(), reserved);
      EXPECT_NE(r.report().level().find("+pin"), std::string::npos);
    }
    EXPECT_EQ(krex::detail::current_affinity(), outside) << "mask not restored after region";
  }
  EXPECT_EQ(krex::detail::current_affinity(), original) << "mask not restored after leave";
}

TEST(pinning, off_means_untouched) {
  scoped_segment seg;
  const std::vector<int> original = krex::detail::current_affinity();
  krex::tenant t{seg.opts().pin(false).confine(false)};
  krex::region r{t};
  EXPECT_FALSE(r.report().pinned);
  EXPECT_EQ(krex::detail::current_affinity(), original);
}
