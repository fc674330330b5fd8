// SPDX-License-Identifier: Apache-2.0
// The protocol core with real processes and real shared memory: exclusivity,
// drain, FIFO order, CPU-only siblings, stress.

#include "flag.hpp"
#include "holder.hpp"
#include "krex_test.hpp"

#include <krex/detail/slots/handoff.hpp>
#include <krex/detail/steps/gate.hpp>
#include <krex/detail/steps/lock.hpp>
#include <krex/region.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using krex_test::child;
using krex_test::scoped_segment;
using krex_test::shared;

namespace {

constexpr int max_kids = 16;

struct board {
  std::atomic<int> stop;
  std::atomic<int> ready;
  std::atomic<std::uint64_t> count[max_kids];  // submissions completed per child
  std::atomic<int> in_flight;                   // submissions running now, all children
  krex_test::flag go[max_kids];
  std::atomic<int> order[max_kids];
  std::atomic<int> next_order;
  std::atomic<std::uint64_t> violations;
  std::atomic<std::uint64_t> regions;
  std::atomic<int> holders;  // processes inside a region body
  std::atomic<std::uint64_t> stamp[max_kids];
};

std::uint64_t total(const board& b, int k) {
  std::uint64_t s = 0;
  for (int i = 0; i < k; ++i) s += b.count[i].load();
  return s;
}

// K children hammer submit(); while the parent holds a region the counters do
// not move, and no submission is in flight; afterwards they move again.
void exclusivity(int k) {
  scoped_segment seg;
  shared<board> b;
  std::vector<child> kids =
      krex_test::spawn_tenants(k, seg.opts(), b->ready, [&](int i, krex::tenant& t) {
        while (b->stop.load() == 0)
          t.submit([&] {
            b->in_flight.fetch_add(1);
            krex_test::spin_for(20'000);
            b->count[i].fetch_add(1);
            b->in_flight.fetch_sub(1);
          });
        return 0;
      });
  ASSERT_TRUE(krex_test::wait_until([&] { return b->ready.load() == k; }, 30s));
  krex::tenant t{seg.opts()};
  for (int r = 0; r < 20; ++r) {
    const std::uint64_t before = total(*b, k);
    ASSERT_TRUE(krex_test::wait_until([&] { return total(*b, k) > before + k; }, 30s))
        << "siblings make no progress outside regions";
    {
      krex::region reg{t};
      EXPECT_EQ(reg.report().siblings_seen, static_cast<std::uint32_t>(k));
      EXPECT_TRUE(reg.report().drained);
      EXPECT_EQ(b->in_flight.load(), 0) << "a submission runs inside the region";
      const std::uint64_t frozen_total = total(*b, k);
      std::this_thread::sleep_for(10ms);
      EXPECT_EQ(total(*b, k), frozen_total) << "a sibling submitted inside the region";
      EXPECT_EQ(b->in_flight.load(), 0);
    }
  }
  b->stop.store(1);
  for (auto& c : kids) EXPECT_EQ(krex_test::exit_code(c.wait(30s)), 0);
}

}  // namespace

TEST(Protocol, SingleTenantRegion) {
  scoped_segment seg;
  krex::tenant t{seg.opts()};
  int x = 0;
  t.submit([&] { ++x; });
  {
    krex::submit_guard g{t};
    ++x;
  }
  {
    krex::region r{t};
    EXPECT_EQ(r.report().siblings_seen, 0U);
    EXPECT_TRUE(r.report().gated);
    EXPECT_TRUE(r.report().drained);
    EXPECT_EQ(r.report().epoch % 2, 1U);
    EXPECT_EQ(r.report().level(), "gate+drain");
    t.submit([&] { ++x; });  // the holder passes its own gate
  }
  EXPECT_EQ(x, 3);
  EXPECT_EQ(t.submits(), 3U);
  const std::uint32_t slot = t.slot();
  auto& node = *krex::detail::member_of(t).node;
  t.leave();
  EXPECT_EQ(node.tenants[slot].owner.load(), 0) << "slot not freed by leave()";
  EXPECT_THROW(t.submit([] {}), krex::error);
  EXPECT_THROW(krex::region{t}, krex::error);
}

TEST(Protocol, RegionsDoNotNest) {
  scoped_segment seg;
  krex::tenant t{seg.opts()};
  krex::region r{t};
  try {
    krex::region inner{t};
    FAIL() << "nested region did not throw";
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), krex::step::lock);
    EXPECT_NE(std::string(e.what()).find("do not nest"), std::string::npos) << e.what();
  }
}

TEST(Protocol, Exclusivity1) { exclusivity(1); }
TEST(Protocol, Exclusivity4) { exclusivity(4); }
TEST(Protocol, Exclusivity16) { exclusivity(16); }

// A submission in flight when the region starts finishes before the body; a
// submission attempted after the gate rose starts only after the region.
TEST(Protocol, DrainWaitsForInFlightAndGatesNewOnes) {
  scoped_segment seg;
  shared<board> b;
  child kid = krex_test::spawn([&] {
    krex::tenant t{seg.opts()};
    t.submit([&] {
      b->in_flight.store(1);
      std::this_thread::sleep_for(300ms);
      b->stamp[0].store(krex_test::now_ns());  // end of the in-flight submission
      b->in_flight.store(0);
    });
    // Told to submit while the gate is up: must not start until it is lowered.
    b->go[0].child_wait();
    t.submit([&] { b->stamp[1].store(krex_test::now_ns()); });
    return 0;
  });
  ASSERT_TRUE(krex_test::wait_until([&] { return b->in_flight.load() == 1; }, 30s));
  krex::tenant t{seg.opts()};
  std::uint64_t body_start = 0;
  std::uint64_t body_end = 0;
  {
    krex::region r{t};
    body_start = krex_test::now_ns();
    EXPECT_EQ(b->in_flight.load(), 0);
    EXPECT_NE(b->stamp[0].load(), 0U);
    EXPECT_LE(b->stamp[0].load(), body_start);
    EXPECT_GE(r.report().gate_ns + r.report().drain_ns, 100'000'000U)
        << "the region did not wait for the in-flight submission";
    b->go[0].raise();
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(b->stamp[1].load(), 0U) << "a submission ran inside the region";
    body_end = krex_test::now_ns();
  }
  EXPECT_EQ(krex_test::exit_code(kid.wait(30s)), 0);
  EXPECT_GT(b->stamp[1].load(), body_end);
}

// The hand-off at region exit (detail/steps/gate.hpp, let_parked_through): a submission
// parked at the gate passes before the region's exit returns, so the next
// region in the queue (already waiting for the lock) cannot raise the gate
// first, and it starts only after that submission ended. Without the hand-off
// the exit returned before the woken submitter ran, and the next holder
// usually won the race: a device-management call could stay parked through
// region after region (issue 11).
TEST(Protocol, ParkedSubmissionPassesBeforeTheNextRegion) {
  scoped_segment seg;
  shared<board> b;
  child s = krex_test::spawn([&] {
    krex::tenant t{seg.opts()};
    b->ready.fetch_add(1);
    b->go[0].child_wait();
    t.submit([&] {
      b->stamp[1].store(krex_test::now_ns());
      std::this_thread::sleep_for(50ms);
      b->stamp[2].store(krex_test::now_ns());
    });
    return 0;
  });
  child next = krex_test::spawn([&] {
    krex::tenant t{seg.opts()};
    b->ready.fetch_add(1);
    b->go[1].child_wait();
    krex::region r{t};
    b->stamp[3].store(krex_test::now_ns());
    return 0;
  });
  ASSERT_TRUE(krex_test::wait_until([&] { return b->ready.load() == 2; }, 30s));
  krex::tenant t{seg.opts()};
  krex::detail::member& m = krex::detail::member_of(t);
  std::uint64_t exit_returned = 0;
  {
    krex::region r{t};
    b->go[0].raise();
    ASSERT_TRUE(krex_test::wait_until(
        [&] {
          for (std::uint32_t i = 0; i < krex::detail::max_tenants; ++i)
            if (m.slot_at(i).owner.load() == s.pid() && m.slot_at(i).parked.load() == 1) return true;
          return false;
        },
        10s))
        << "the sibling's submission did not park";
    b->go[1].raise();
    ASSERT_TRUE(krex_test::wait_until(
        [&] { return m.dev->next_ticket.load() - m.dev->now_serving.load() >= 2; }, 10s))
        << "the next region did not queue";
    r.exit();
    exit_returned = krex_test::now_ns();
  }
  EXPECT_EQ(krex_test::exit_code(next.wait(30s)), 0);
  EXPECT_EQ(krex_test::exit_code(s.wait(30s)), 0);
  ASSERT_NE(b->stamp[1].load(), 0U);
  EXPECT_LE(b->stamp[1].load(), exit_returned) << "the exit returned before the parked submission passed";
  EXPECT_LE(b->stamp[2].load(), b->stamp[3].load())
      << "the next region started while the parked submission ran";
}

// Regions are granted in arrival order.
// The gate's and the lock's own undo (gate_exit, lock_exit), which their steps' destructors
// call in reverse order: each says whether what it undoes was still its
// own. With the lease held the gate comes down and the parked submissions
// are let through (here a slot that stays parked: the bounded wait, then
// handoff_grace), then the lock moves on. With the lease taken away (a
// recoverer released it, lowered the gate and moved the lock on) neither
// touches what moved, nothing waits, and only the slot's ticket goes.
TEST(Protocol, GateAndLockExitsUndoOnlyWhatIsStillTheirs) {
  namespace kd = krex::detail;
  scoped_segment seg;
  krex::tenant t{seg.opts().handoff_grace(100ms)};
  kd::member& m = kd::member_of(t);
  kd::device_state& dev = *m.dev;
  // A sibling slot with a submission parked at the gate (owned by this live
  // process, so nobody reaps it).
  std::uint32_t other = kd::max_tenants;
  for (std::uint32_t i = 0; i < kd::max_tenants && other == kd::max_tenants; ++i) {
    std::int32_t free = 0;
    if (i != m.index && m.slot_at(i).owner.compare_exchange_strong(free, ::getpid())) other = i;
  }
  ASSERT_LT(other, kd::max_tenants);
  kd::tenant_slot& sib = m.slot_at(other);
  sib.device.store(m.device);
  sib.parked.store(1);
  const auto ms_since = [](std::uint64_t t0) {
    return static_cast<double>(krex_test::now_ns() - t0) / 1e6;
  };

  std::uint32_t ticket = kd::acquire_region_lock(m);
  std::uint32_t epoch = kd::raise_gate(m).first;
  ASSERT_TRUE(kd::claim_exit(m));
  std::uint64_t t0 = krex_test::now_ns();
  EXPECT_TRUE(kd::gate_exit(m, epoch, true));
  EXPECT_GE(ms_since(t0), 100.0) << "the parked submission was not waited for";
  EXPECT_EQ(dev.gate.load(), epoch + 1);
  EXPECT_EQ(dev.holder.load(), 0U);
  EXPECT_TRUE(kd::lock_exit(m, ticket, true));
  EXPECT_EQ(dev.lease_slot.load(), 0U);
  EXPECT_EQ(dev.now_serving.load(), ticket + 1);
  EXPECT_EQ(m.slot->ticket.load(), kd::no_ticket);

  ticket = kd::acquire_region_lock(m);
  epoch = kd::raise_gate(m).first;
  dev.lease_slot.store(0);                   // a recoverer took the lease,
  dev.gate.store(epoch + 1);                 // lowered the gate
  ASSERT_TRUE(kd::serve_next(dev, ticket));  // and moved the lock on
  EXPECT_FALSE(kd::claim_exit(m));
  t0 = krex_test::now_ns();
  EXPECT_FALSE(kd::gate_exit(m, epoch, false));
  EXPECT_EQ(dev.gate.load(), epoch + 1);
  EXPECT_FALSE(kd::lock_exit(m, ticket, false));
  EXPECT_LT(ms_since(t0), 100.0) << "a lost lease still waited for the parked";
  EXPECT_EQ(dev.now_serving.load(), ticket + 1) << "the lock moved twice";
  EXPECT_EQ(m.slot->ticket.load(), kd::no_ticket);

  // A gate still at its epoch comes down without the lease too (the
  // recoverer snapshotted it before it rose), without the hand-off.
  ticket = kd::acquire_region_lock(m);
  epoch = kd::raise_gate(m).first;
  dev.lease_slot.store(0);
  ASSERT_TRUE(kd::serve_next(dev, ticket));
  t0 = krex_test::now_ns();
  EXPECT_TRUE(kd::gate_exit(m, epoch, false));
  EXPECT_FALSE(kd::lock_exit(m, ticket, false));
  EXPECT_LT(ms_since(t0), 100.0) << "a lost lease still waited for the parked";
  EXPECT_EQ(dev.gate.load(), epoch + 1);
  EXPECT_EQ(dev.now_serving.load(), ticket + 1);

  sib.parked.store(0);
  sib.owner.store(0);
}

TEST(Protocol, FifoOrder) {
  constexpr int n = 8;
  scoped_segment seg;
  shared<board> b;
  std::vector<child> kids =
      krex_test::spawn_tenants(n, seg.opts(), b->ready, [&](int i, krex::tenant& t) {
        b->go[i].child_wait();
        krex::region r{t};
        b->order[i].store(b->next_order.fetch_add(1));
        return 0;
      });
  ASSERT_TRUE(krex_test::wait_until([&] { return b->ready.load() == n; }, 30s));
  krex::tenant t{seg.opts()};
  auto& dev = *krex::detail::member_of(t).dev;
  // Release them in a scrambled order; each takes its ticket before the next goes.
  std::vector<int> arrival(n);
  for (int i = 0; i < n; ++i) arrival[i] = (i * 5) % n;
  {
    krex::region r{t};  // everyone queues behind this
    for (int pos = 0; pos < n; ++pos) {
      const std::uint32_t before = dev.next_ticket.load();
      b->go[arrival[pos]].raise();
      ASSERT_TRUE(krex_test::wait_until([&] { return dev.next_ticket.load() == before + 1; }, 30s));
    }
  }
  for (auto& c : kids) EXPECT_EQ(krex_test::exit_code(c.wait(30s)), 0);
  for (int pos = 0; pos < n; ++pos)
    EXPECT_EQ(b->order[arrival[pos]].load(), pos) << "child " << arrival[pos];
}

// 16 processes x 1000 operations, a random mix of submissions and regions:
// no deadlock, and at every moment at most one region body runs and no
// sibling submission overlaps it.
TEST(Protocol, Stress16x1000) {
  constexpr int k = 16;
  constexpr int ops = 1000;
  scoped_segment seg;
  shared<board> b;
  std::vector<child> kids =
      krex_test::spawn_tenants(k, seg.opts(), b->ready, [&](int i, krex::tenant& t) {
        while (b->ready.load() < k) std::this_thread::sleep_for(100us);
        std::mt19937 rng(static_cast<unsigned>(i * 7919 + 1));
        for (int op = 0; op < ops; ++op) {
          if (rng() % 4 == 0) {
            krex::region r{t};
            if (b->holders.fetch_add(1) != 0) b->violations.fetch_add(1);
            if (b->in_flight.load() != 0) b->violations.fetch_add(1);
            krex_test::spin_for(rng() % 50'000);
            if (b->in_flight.load() != 0) b->violations.fetch_add(1);
            b->holders.fetch_sub(1);
            b->regions.fetch_add(1);
          } else {
            t.submit([&] {
              b->in_flight.fetch_add(1);
              if (b->holders.load() != 0) b->violations.fetch_add(1);
              krex_test::spin_for(rng() % 20'000);
              if (b->holders.load() != 0) b->violations.fetch_add(1);
              b->in_flight.fetch_sub(1);
            });
            b->count[i].fetch_add(1);
          }
        }
        return 0;
      });
  for (auto& c : kids) EXPECT_EQ(krex_test::exit_code(c.wait(240s)), 0) << "deadlock or crash";
  EXPECT_EQ(b->violations.load(), 0U);
  EXPECT_EQ(b->regions.load() + total(*b, k), static_cast<std::uint64_t>(k) * ops);
  std::printf("stress: %llu regions, %llu submissions, %llu violations\n",
              static_cast<unsigned long long>(b->regions.load()),
              static_cast<unsigned long long>(total(*b, k)),
              static_cast<unsigned long long>(b->violations.load()));
}
