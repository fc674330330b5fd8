// SPDX-License-Identifier: Apache-2.0
// Stale state from crashed runs, recognised and cleaned by the next join, and
// the guardian's life cycle: started on demand outside every tenant cgroup,
// in its own session, gone when the last tenant leaves.

#include "cgroup_util.hpp"
#include "holder.hpp"
#include "krex_test.hpp"

#include <krex/region.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using krex_test::child;
using krex_test::scoped_segment;
using krex_test::shared;

namespace {

struct board {
  std::atomic<int> ready;
  krex_test::flag stop;
  std::atomic<int> guardian;
  std::atomic<int> ok;
  std::atomic<std::uint64_t> lock_ns;
  std::atomic<std::uint64_t> spins;
};

using krex_test::read_text;

bool exists(const std::string& p) { return ::access(p.c_str(), F_OK) == 0; }

class stale : public krex_test::cgroup2_test<board> {
 protected:
  stale() : cgroup2_test("krex-st") {}

  /// A live process that never joins (until `stop`).
  child spawn_outsider() {
    return krex_test::spawn([&] {
      m_b->stop.child_wait();
      return 0;
    });
  }

  /// Writes the slot `offset` past `t`'s own as an active tenant of its
  /// device owned by `pid` (a process that never joined), heartbeat `heartbeat_ns`.
  krex::detail::tenant_slot& forge_slot(krex::tenant& t, std::uint32_t offset, int pid,
                                         std::uint64_t heartbeat_ns) {
    const krex::detail::member& m = krex::detail::member_of(t);
    krex::detail::tenant_slot& s = m.node->tenants[(t.slot() + offset) % krex::detail::max_tenants];
    s.start_time.store(krex::detail::read_proc_stat(pid).start_time);
    s.device.store(m.device);
    s.ticket.store(krex::detail::no_ticket);
    s.heartbeat_ns.store(heartbeat_ns);
    s.state.store(krex::detail::slot_active);
    s.owner.store(pid);
    return s;
  }
};

}  // namespace

// Issue 38: a slot written into the segment by hand (its owner a live
// process that never joined) made every region under cgroup freezing fail
// (its leaf does not exist) and was never reaped. Now the region leaves it
// unfrozen, says so, and frees its slot (its heartbeat is still).
TEST_F(stale, ForgedSlotUnderCgroupFreezingIsReportedAndFreed) {
  child outsider = spawn_outsider();
  krex::tenant t{opts()};
  // Its heartbeat fresh: nobody frees it for 2 s.
  krex::detail::tenant_slot& s = forge_slot(t, 7, outsider.pid(), krex::detail::now_ns());
  {
    krex::region r{t};  // used to throw krex::error(step::freeze): no leaf t<forged>
    const krex::region_report& rep = r.report();
    EXPECT_EQ(rep.unverified_pids, std::vector<int>{outsider.pid()}) << rep;
    ASSERT_EQ(rep.warnings.size(), 1U) << rep;
    EXPECT_NE(rep.warnings[0].find("has no leaf"), std::string::npos) << rep.warnings[0];
    EXPECT_NE(rep.warnings[0].find("its slot is kept"), std::string::npos) << rep.warnings[0];
  }
  EXPECT_EQ(s.owner.load(), outsider.pid());
  s.heartbeat_ns.store(1);  // still: the next region (or the guardian, first) frees it
  {
    krex::region r{t};
    const krex::region_report& rep = r.report();
    for (const std::string& w : rep.warnings)
      EXPECT_NE(w.find("its slot was freed"), std::string::npos) << w;
  }
  EXPECT_TRUE(krex_test::wait_until([&] { return s.owner.load() == 0; }, 5s))
      << "the forged slot was not freed";
  {
    krex::region r{t};
    EXPECT_TRUE(r.report().warnings.empty()) << r.report();
  }
}

// Issue 38: with no region to notice it, the guardian frees a forged slot
// (no leaf, a still heartbeat); it used to keep it forever (its pid lives).
TEST_F(stale, ForgedSlotIsFreedByTheGuardian) {
  child outsider = spawn_outsider();
  krex::tenant t{opts()};
  krex::detail::member& m = krex::detail::member_of(t);
  ASSERT_GT(krex_test::wait_guardian_pid(*m.node, 10s), 0);
  krex::detail::tenant_slot& s = forge_slot(t, 9, outsider.pid(), 1);
  EXPECT_TRUE(krex_test::wait_until([&] { return s.owner.load() == 0; }, 10s))
      << "the guardian did not free the forged slot";
  EXPECT_EQ(m.node->tenants[t.slot()].owner.load(), ::getpid()) << "it freed a real tenant's slot";
}

// A run that crashed mid-region (holder, sibling and guardian SIGKILLed):
// gate raised, lock held, a frozen leaf, dead slots. The next tenant to join
// recovers the device, reaps the dead and removes their leaves, and gets a
// region at once.
TEST_F(stale, CrashedRunIsCleanedByTheNextJoin) {
  krex::detail::segment seg{opts()};
  krex::detail::node_state& n = seg.node();
  child sibling = krex_test::spawn([&] {
    krex::tenant t{opts()};
    m_b->ready.store(1);
    for (;;) m_b->spins.fetch_add(1);
    return 0;
  });
  ASSERT_TRUE(krex_test::wait_until([&] { return m_b->ready.load() == 1; }, 20s));
  krex_test::holder holder{opts()};  // killed inside its region
  ASSERT_TRUE(holder.ready(20s));
  ASSERT_NE(read_text(leaf(0) + "/cgroup.events").find("frozen 1"), std::string::npos);
  const int g = krex_test::wait_guardian_pid(n);
  ASSERT_GT(g, 0);
  ::kill(g, SIGKILL);
  ::kill(holder.pid(), SIGKILL);
  ::kill(sibling.pid(), SIGKILL);  // frozen (v2 lets a frozen task die)
  (void)holder.wait(5s);
  (void)sibling.wait(5s);
  std::this_thread::sleep_for(100ms);
  ASSERT_EQ(n.devices[0].gate.load() % 2, 1U) << "the crash should have left the gate raised";
  ASSERT_TRUE(exists(leaf(0)) && exists(leaf(1)));
  const std::uint64_t reaped = n.reaped.load();

  child next = krex_test::spawn([&] {
    krex::tenant t{opts().lock_wait(2s)};
    krex::region r{t};
    m_b->lock_ns.store(r.report().lock_ns);
    m_b->ok.store(1);
    return 0;
  });
  EXPECT_EQ(krex_test::exit_code(next.wait(20s)), 0);
  EXPECT_EQ(m_b->ok.load(), 1);
  EXPECT_LT(m_b->lock_ns.load(), 100'000'000U) << "the join did not release the dead holder's lock";
  EXPECT_GE(n.devices[0].recoveries.load(), 1U);
  EXPECT_GE(n.reaped.load(), reaped + 2) << "dead holder and sibling not both reaped";
  // Their leaves go (the sweep of the guardian the joiner started, or the reaps).
  EXPECT_TRUE(krex_test::wait_until([&] { return !exists(leaf(0)) && !exists(leaf(1)); }, 3s))
      << "stale leaves left";
  // (A negative owner is a sweep's momentary reservation, not a tenant.)
  for (std::uint32_t i = 0; i < krex::detail::max_tenants; ++i)
    EXPECT_LE(n.tenants[i].owner.load(), 0) << "slot " << i;
}

// Leaves left by a crashed run whose segment is gone: a fresh segment's first
// join removes the empty ones (thawing them first) and keeps one in which a
// process still runs.
TEST_F(stale, StaleLeavesWithoutASegment) {
  ASSERT_EQ(::mkdir(m_root.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(leaf(3).c_str(), 0755), 0);
  ASSERT_EQ(krex::detail::cgroup::write_file(leaf(3) + "/cgroup.freeze", "1"), 0);
  ASSERT_EQ(::mkdir(leaf(5).c_str(), 0755), 0);
  child stray = krex_test::spawn([&] {
    for (;;) ::pause();
    return 0;
  });
  ASSERT_EQ(
      krex::detail::cgroup::write_file(leaf(5) + "/cgroup.procs", std::to_string(stray.pid())), 0);
  krex_test::member t{opts()};
  ASSERT_TRUE(t.ready(20s));
  EXPECT_FALSE(exists(leaf(3))) << "empty stale leaf kept";
  EXPECT_TRUE(exists(leaf(5))) << "a leaf with a live process was removed";
  EXPECT_EQ(t.finish(10s), 0);
}

// The guardian: started by the first join, in its own session, outside every
// tenant leaf and not the tenant's child; gone once the last tenant left.
TEST_F(stale, GuardianLifeCycle) {
  krex::detail::segment seg{opts()};
  krex::detail::node_state& n = seg.node();
  krex_test::member t{opts()};
  ASSERT_TRUE(t.ready(20s));
  ASSERT_TRUE(krex_test::wait_until([&] { return krex::detail::guardian_alive(n); }, 5s));
  const int g = krex_test::wait_guardian_pid(n);
  ASSERT_GT(g, 0);
  EXPECT_NE(::getsid(g), ::getsid(t.pid())) << "the guardian is in the tenant's session";
  const std::string cg = read_text("/proc/" + std::to_string(g) + "/cgroup");
  EXPECT_EQ(cg.find(m_root.substr(m_base.size())), std::string::npos)
      << "the guardian sits in a tenant cgroup: " << cg;
  EXPECT_EQ(
      read_text("/proc/" + std::to_string(g) + "/stat").find(" " + std::to_string(t.pid()) + " "),
      std::string::npos)
      << "the guardian is the tenant's child";
  EXPECT_EQ(t.finish(10s), 0);
  EXPECT_TRUE(krex_test::wait_until(
      [&] {
        krex_test::reap_orphans();
        return n.guardian_pid.load() == 0 && !krex::detail::alive(g, 0);
      },
      3s))
      << "the guardian outlived the last tenant";
}
