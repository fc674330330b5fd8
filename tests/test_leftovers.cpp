// SPDX-License-Identifier: Apache-2.0
// What a tenant leaves behind when its process tree outgrows it: a child it
// exec'd inside a region that outlives it (its leaf must not stay busy, nor
// the child keep the reserved cores), and a tenant that exec()s after it
// submitted (its slot must not fail every later region's drain).

#include "cgroup_util.hpp"
#include "krex_test.hpp"

#include <krex/region.hpp>

#include <gtest/gtest.h>

#include <sched.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

using namespace std::chrono_literals;
using krex_test::child;
namespace kd = krex::detail;

namespace {

struct board {
  krex_test::flag stop;
  std::atomic<int> step;
  std::atomic<int> grandchild;  ///< the exec'd child's pid
  std::atomic<int> slot;
  std::atomic<std::uint64_t> pinned_mask;    ///< the cores the region pinned to (bits)
  std::atomic<std::uint64_t> outside_mask;   ///< the tenant's mask outside regions (bits)
};

std::uint64_t mask_bits(pid_t pid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(pid, sizeof set, &set) != 0) return 0;
  std::uint64_t bits = 0;
  for (int c = 0; c < 64; ++c)
    if (CPU_ISSET(c, &set)) bits |= 1ULL << c;
  return bits;
}

/// Forks a child that execs `sleep 60` (from a thread that may be pinned).
pid_t fork_sleeper() {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sleep", "sleep", "60", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

class leftovers : public krex_test::cgroup2_test<board> {
 protected:
  leftovers() : cgroup2_test("krex-left") {}
  void TearDown() override {
    if (m_b->grandchild.load() > 0) ::kill(m_b->grandchild.load(), SIGKILL);
    cgroup2_test::TearDown();
  }
};

}  // namespace

// A child exec'd inside a region outlives its tenant: it follows the tenant
// out of its leaf at leave (to the cgroup the tenant came from) with the
// tenant's own mask, not the reserved cores; the next tenant on that slot joins.
TEST_F(leftovers, ExecdChildOutlivingItsTenantLeavesTheLeafAndTheReservedCores) {
  const krex::options o = opts().pin(true).reserved_cores(1);
  child a = krex_test::spawn([&] {
    krex::tenant t{o};
    m_b->slot.store(static_cast<int>(t.slot()));
    m_b->outside_mask.store(mask_bits(0));
    {
      krex::region r{t};
      m_b->pinned_mask.store(mask_bits(0));
      m_b->grandchild.store(fork_sleeper());  // inherits the leaf and the pinned mask
    }
    return 0;  // leaves; the sleeper runs on
  });
  ASSERT_EQ(krex_test::exit_code(a.wait(20s)), 0);
  const pid_t g = m_b->grandchild.load();
  ASSERT_GT(g, 0);
  ASSERT_EQ(::kill(g, 0), 0) << "the exec'd child should outlive its tenant";
  const std::string l = leaf(m_b->slot.load());
  EXPECT_EQ(krex_test::read_text(l + "/cgroup.procs").find(std::to_string(g)), std::string::npos)
      << "the exec'd child is still in its tenant's leaf " << l;
  EXPECT_NE(m_b->pinned_mask.load(), m_b->outside_mask.load()) << "the region did not pin";
  EXPECT_EQ(mask_bits(g) & m_b->pinned_mask.load() & ~m_b->outside_mask.load(), 0U)
      << "the exec'd child kept the reserved cores";
  // The next tenant takes the same slot and joins.
  child b = krex_test::spawn([&] {
    krex::tenant t{o};
    return static_cast<int>(t.slot()) == m_b->slot.load() ? 0 : 3;
  });
  EXPECT_EQ(krex_test::exit_code(b.wait(20s)), 0) << "a later join failed";
}

// A leaf a crashed run left with live processes in it (a tenant SIGKILLed
// after it exec'd a child inside a region) no longer fails the joins of its
// slot: the joiner moves them out.
TEST_F(leftovers, LeafLeftBusyByACrashedTenantIsEvacuatedAtJoin) {
  child a = krex_test::spawn([&] {
    krex::tenant t{opts()};
    m_b->slot.store(static_cast<int>(t.slot()));
    m_b->grandchild.store(fork_sleeper());
    m_b->step.store(1);
    for (;;) ::pause();
    return 0;
  });
  ASSERT_TRUE(krex_test::wait_until([&] { return m_b->step.load() == 1; }, 20s));
  kd::segment seg{opts()};
  ::kill(a.pid(), SIGKILL);
  (void)a.wait(5s);
  // Its guardian reaps the dead tenant's slot (the leaf stays: it is busy).
  EXPECT_TRUE(krex_test::wait_until(
      [&] { return seg.node().tenants[m_b->slot.load()].owner.load() == 0; }, 5s));
  const pid_t g = m_b->grandchild.load();
  const std::string l = leaf(m_b->slot.load());
  ASSERT_NE(krex_test::read_text(l + "/cgroup.procs").find(std::to_string(g)), std::string::npos);
  child b = krex_test::spawn([&] {
    krex::tenant t{opts()};
    return static_cast<int>(t.slot()) == m_b->slot.load() ? 0 : 3;
  });
  EXPECT_EQ(krex_test::exit_code(b.wait(20s)), 0) << "the join of the busy leaf's slot failed";
  EXPECT_EQ(::kill(g, 0), 0) << "the leftover process was killed, not moved";
  EXPECT_EQ(krex_test::read_text(l + "/cgroup.procs").find(std::to_string(g)), std::string::npos);
}

// A tenant that exec()s after it submitted: its process runs, its agent and
// mapping are gone, so it can never ack a drain. The next region releases its
// slot (and says so) instead of failing, and the one after does not wait.
TEST_F(leftovers, TenantThatExecdAfterSubmittingIsReleasedByTheDrain) {
  const krex::options o = m_seg.opts().drain_deadline(300ms);
  child e = krex_test::spawn([&] {
    krex::tenant t{o};
    t.submit([] {});
    m_b->step.store(1);
    ::execl("/bin/sleep", "sleep", "60", static_cast<char*>(nullptr));
    return 127;
  });
  ASSERT_TRUE(krex_test::wait_until([&] { return m_b->step.load() == 1; }, 20s));
  // Its image replaced: wait until /proc shows sleep.
  ASSERT_TRUE(krex_test::wait_until(
      [&] { return krex_test::read_text("/proc/" + std::to_string(e.pid()) + "/comm") == "sleep\n"; },
      5s));
  child h = krex_test::spawn([&] {
    krex::tenant t{o};
    std::string notes;
    for (int i = 0; i < 2; ++i) {
      krex::region r{t};  // throws (exit 111) if the drain fails
      r.exit();
      if (!r.report().drained) return 4;
      for (const std::string& n : r.report().notes) notes += n + "\n";
    }
    return notes.find("no tenant any more") != std::string::npos ? 0 : 5;
  });
  EXPECT_EQ(krex_test::exit_code(h.wait(20s)), 0);
}
