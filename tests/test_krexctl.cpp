// SPDX-License-Identifier: Apache-2.0
// krexctl, the real binary, on real state: status of a missing, a live, a
// wedged and a corrupt segment (text and --json), recover of a wedged device
// (holder and guardian killed, a sibling left frozen), clean of a crashed
// run's segment and leaves (and of a leaf with live processes, with --kill).

#include "cgroup_util.hpp"
#include "krex_test.hpp"

#include <krex/region.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#ifndef KREX_KREXCTL_PATH
#error "tests/CMakeLists.txt passes KREX_KREXCTL_PATH when the krexctl target exists"
#endif  // KREX_KREXCTL_PATH

using namespace std::chrono_literals;
using krex_test::child;
using krex_test::scoped_segment;
using krex_test::shared;

namespace {

struct result {
  int rc = -1;
  std::string out;
};

/// Runs krexctl with `args` (stdout and stderr together), bounded by `timeout` seconds.
result krexctl(const std::string& args) {
  result r;
  const std::string cmd = "timeout 30 " KREX_KREXCTL_PATH " " + args + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

using krex_test::read_text;

struct board {
  std::atomic<int> ready;
  std::atomic<int> in_body;
  std::atomic<int> stop;
  std::atomic<std::uint64_t> spins;
};

}  // namespace

TEST(Krexctl, UsageAndMissingSegment) {
  scoped_segment seg;
  result r = krexctl("status --segment " + seg.name());
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_TRUE(contains(r.out, "no segment /dev/shm/")) << r.out;
  r = krexctl("status --segment " + seg.name() + " --json");
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(contains(r.out, "\"healthy\":false")) << r.out;
  r = krexctl("frobnicate");
  EXPECT_EQ(r.rc, 64);
  EXPECT_TRUE(contains(r.out, "usage: krexctl status")) << r.out;
  r = krexctl("status --segment 'bad/name'");
  EXPECT_EQ(r.rc, 64) << r.out;
}

// A live holder: status shows the raised gate, the holder, its age and the tenants.
TEST(Krexctl, StatusOfALiveRegion) {
  scoped_segment seg;
  shared<board> b;
  child holder = krex_test::spawn([&] {
    krex::tenant t{seg.opts()};
    krex::region r{t};
    b->in_body.store(1);
    while (b->stop.load() == 0) std::this_thread::sleep_for(1ms);
    return 0;
  });
  ASSERT_TRUE(krex_test::wait_until([&] { return b->in_body.load() == 1; }, 20s));
  std::this_thread::sleep_for(20ms);
  const std::string pid = std::to_string(holder.pid());
  result r = krexctl("status --segment " + seg.name());
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "gate RAISED")) << r.out;
  EXPECT_TRUE(contains(r.out, "phase body")) << r.out;
  EXPECT_TRUE(contains(r.out, "holder  slot 0 pid " + pid + ", region age ")) << r.out;
  EXPECT_TRUE(contains(r.out, "guardian  pid ")) << r.out;
  EXPECT_TRUE(contains(r.out, "healthy")) << r.out;
  r = krexctl("status --json --segment " + seg.name());
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "\"gate_raised\":true")) << r.out;
  EXPECT_TRUE(contains(r.out, "\"holder\":{\"slot\":0,\"pid\":" + pid + ",\"alive\":true"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "\"tenants\":[{\"slot\":0,\"pid\":" + pid)) << r.out;
  EXPECT_TRUE(contains(r.out, "\"healthy\":true")) << r.out;
  b->stop.store(1);
  EXPECT_EQ(krex_test::exit_code(holder.wait(10s)), 0);
}

// A corrupt segment is reported (exit 3), refused by a joining tenant, and
// removed by clean (it has no live member).
TEST(Krexctl, CorruptSegment) {
  scoped_segment seg;
  {
    krex::detail::segment s{seg.opts()};
    s.node().devices[0].key.store(1);
    s.node().devices[0].holder.store(9999);
    s.node().tenants[3].owner.store(2147483000);  // no such pid
    s.node().tenants[3].device.store(77);
  }
  result r = krexctl("status --segment " + seg.name());
  EXPECT_EQ(r.rc, 3) << r.out;
  EXPECT_TRUE(contains(r.out, "device 0 gate holder = 9999")) << r.out;
  EXPECT_TRUE(contains(r.out, "tenant slot 3 device = 77")) << r.out;
  try {
    krex::tenant t{seg.opts()};
    ADD_FAILURE() << "joined a corrupt segment";
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), krex::step::segment);
    EXPECT_TRUE(contains(e.what(), "corrupt node state")) << e.what();
  }
  r = krexctl("clean --freeze none --segment " + seg.name());
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "no live member, removed")) << r.out;
}

class krexctl_cgroup : public krex_test::cgroup2_test<board> {
 protected:
  krexctl_cgroup() : cgroup2_test("krex-ctl") {}
  std::string where() const {
    return " --segment " + m_seg.name() + " --freeze cgroup2 --cgroup-root " + m_root;
  }
  bool frozen(int slot) const { return contains(read_text(leaf(slot) + "/cgroup.events"), "frozen 1"); }
};

// Holder and guardian killed mid-region: the sibling stays frozen and the
// gate raised (nobody is left to recover). status says so; recover fixes it.
TEST_F(krexctl_cgroup, RecoverAWedgedDevice) {
  krex::detail::segment seg{opts()};
  krex::detail::node_state& n = seg.node();
  m_kids.push_back(krex_test::spawn([&] {
    krex::tenant t{opts()};
    m_b->ready.fetch_add(1);
    while (m_b->stop.load() == 0) m_b->spins.fetch_add(1);
    return 0;
  }));
  ASSERT_TRUE(krex_test::wait_until([&] { return m_b->ready.load() == 1; }, 20s));
  child holder = krex_test::spawn([&] {
    krex::tenant t{opts()};
    krex::region r{t};
    m_b->in_body.store(1);
    for (;;) ::pause();
    return 0;
  });
  ASSERT_TRUE(krex_test::wait_until([&] { return m_b->in_body.load() == 1; }, 20s));
  ASSERT_TRUE(frozen(0));
  const int g = n.guardian_pid.load();
  ASSERT_GT(g, 0);
  const int holder_pid = holder.pid();
  ::kill(g, SIGKILL);
  ::kill(holder_pid, SIGKILL);
  (void)holder.wait(5s);
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(frozen(0)) << "something recovered the device already";

  result r = krexctl("status --segment " + m_seg.name());
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "gate RAISED")) << r.out;
  EXPECT_TRUE(contains(r.out, "pid " + std::to_string(holder_pid) + " (DEAD)")) << r.out;
  EXPECT_TRUE(contains(r.out, "problem: device 0: region holder pid")) << r.out;
  EXPECT_TRUE(contains(r.out, "problem: no guardian is running")) << r.out;

  // Not by another freeze domain: krexctl's own default root is not the tenants'.
  r = krexctl("recover --segment " + m_seg.name() + " --freeze cgroup2");
  EXPECT_EQ(r.rc, 3) << r.out;
  EXPECT_TRUE(contains(r.out, "--cgroup-root")) << r.out;
  EXPECT_TRUE(frozen(0));

  r = krexctl("recover" + where());
  EXPECT_TRUE(contains(r.out, "device 0: recovered (holder pid")) << r.out;
  EXPECT_FALSE(frozen(0)) << r.out;
  const std::uint64_t before = m_b->spins.load();
  EXPECT_TRUE(krex_test::wait_until([&] { return m_b->spins.load() > before; }, 2s));
  EXPECT_EQ(n.devices[0].gate.load() % 2, 0U);
  // Healthy again once a guardian runs (the spinner's agent starts one).
  EXPECT_TRUE(krex_test::wait_until(
      [&] { return krexctl("status --segment " + m_seg.name()).rc == 0; }, 5s))
      << krexctl("status --segment " + m_seg.name()).out;
  // A new region is granted at once.
  child next = krex_test::spawn([&] {
    krex::tenant t{opts().lock_wait(2s)};
    krex::region reg{t};
    return 0;
  });
  EXPECT_EQ(krex_test::exit_code(next.wait(10s)), 0);
}

// A crashed run (tenant and guardian killed): clean removes its leaf and its
// segment; a leaf with a live process is kept, or killed and removed with --kill.
TEST_F(krexctl_cgroup, CleanACrashedRun) {
  child t = krex_test::spawn([&] {
    krex::tenant ten{opts()};
    m_b->ready.store(1);
    for (;;) ::pause();
    return 0;
  });
  ASSERT_TRUE(krex_test::wait_until([&] { return m_b->ready.load() == 1; }, 20s));
  {
    krex::detail::segment seg{opts()};
    ASSERT_TRUE(krex_test::wait_until([&] { return seg.node().guardian_pid.load() > 0; }, 5s));
    ::kill(seg.node().guardian_pid.load(), SIGKILL);
  }
  ::kill(t.pid(), SIGKILL);
  (void)t.wait(5s);
  ASSERT_EQ(::access((m_root + "/t0").c_str(), F_OK), 0);

  // A stray process in a leaf nobody owns.
  ASSERT_EQ(::mkdir((m_root + "/t9").c_str(), 0755), 0);
  child stray = krex_test::spawn([&] {
    for (;;) ::pause();
    return 0;
  });
  ASSERT_EQ(
      krex::detail::cgroup::write_file(m_root + "/t9/cgroup.procs", std::to_string(stray.pid())),
      0);

  result r = krexctl("status --segment " + m_seg.name());
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(contains(r.out, "problem: tenant slot 0 belongs to dead pid")) << r.out;

  r = krexctl("clean --dry-run" + where());
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(contains(r.out, m_root + "/t0: stale, would be removed")) << r.out;
  EXPECT_EQ(::access((m_root + "/t0").c_str(), F_OK), 0);

  r = krexctl("clean" + where());
  EXPECT_EQ(r.rc, 1) << r.out;
  EXPECT_TRUE(contains(r.out, m_root + "/t0: removed")) << r.out;
  EXPECT_TRUE(contains(r.out, "t9: stale, but processes " + std::to_string(stray.pid()))) << r.out;
  EXPECT_TRUE(contains(r.out, "no live member, removed")) << r.out;
  EXPECT_NE(::access((m_root + "/t0").c_str(), F_OK), 0);
  EXPECT_EQ(::access((m_root + "/t9").c_str(), F_OK), 0);
  EXPECT_EQ(krexctl("status --segment " + m_seg.name()).rc, 2);

  r = krexctl("clean --kill" + where());
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_TRUE(contains(r.out, "t9: removed")) << r.out;
  EXPECT_TRUE(krex_test::exit_code(stray.wait(5s)) == -1);
  EXPECT_NE(::access((m_root + "/t9").c_str(), F_OK), 0);
}
