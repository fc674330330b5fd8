// SPDX-License-Identifier: Apache-2.0
// The test scaffold itself (testkit/holder.hpp, flag.hpp): a holder really
// holds its region until released and returns what `after` says and its
// report; a member stays a tenant outside any region; a flag's waits are
// bounded on both sides.

#include "flag.hpp"
#include "holder.hpp"
#include "krex_test.hpp"

#include <krex/region.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

using namespace std::chrono_literals;
using krex_test::scoped_segment;

// While the holder is ready its region is held (the lock taken, the gate
// raised, still 100 ms later); released, it runs `after` in its region, its
// exit code and report come back, and the lock and the gate are free.
TEST(Testkit, HolderHoldsItsRegionUntilReleased) {
  scoped_segment seg;
  krex_test::holder h{seg.opts(), [](krex::region& r) {
                        r.exit();
                        return r.report().gated ? 7 : 8;
                      }};
  ASSERT_TRUE(h.joined(20s));
  ASSERT_TRUE(h.ready(20s));
  EXPECT_GE(h.slot(), 0);
  EXPECT_EQ(h.report_json(), "") << "a report before `after` ran";
  krex::detail::segment s{seg.opts()};
  const krex::detail::device_state& dev = s.node().devices[0];
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(dev.gate.load() % 2, 1U) << "ready, and the holder's gate is down";
  EXPECT_EQ(dev.next_ticket.load(), dev.now_serving.load() + 1) << "its ticket is not the one served";
  EXPECT_EQ(h.finish(20s), 7);
  EXPECT_NE(h.report_json().find("\"gated\":true"), std::string::npos) << h.report_json();
  EXPECT_EQ(dev.gate.load() % 2, 0U) << "the gate stayed raised";
  EXPECT_EQ(dev.next_ticket.load(), dev.now_serving.load()) << "the lock stayed taken";
}

// A member is a tenant (the region counts it as a sibling) that holds no
// region; what `first` did runs before it is ready.
TEST(Testkit, MemberStaysATenantOutsideAnyRegion) {
  scoped_segment seg;
  krex_test::shared<krex_test::flag> submitted;
  krex_test::member m{seg.opts(), [&](krex::tenant& t) { t.submit([&] { submitted->raise(); }); }};
  ASSERT_TRUE(m.ready(20s));
  EXPECT_TRUE(submitted->up());
  krex::tenant t{seg.opts().lock_wait(5s)};
  {
    krex::region r{t};
    EXPECT_EQ(r.report().siblings_seen, 1U);
  }
  EXPECT_EQ(m.finish(20s), 0);
}

// A flag not raised: the test's wait returns false at its bound. Raised, a
// child waiting for it (child_wait, bounded by hold_at_most) goes on.
TEST(Testkit, FlagWaitsAreBounded) {
  krex_test::shared<krex_test::flag> f;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(f->wait(50ms));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 50ms);
  krex_test::child c = krex_test::spawn([&] {
    f->child_wait();
    return 5;
  });
  f->raise();
  EXPECT_EQ(krex_test::exit_code(c.wait(20s)), 5);
  f->lower();
  EXPECT_FALSE(f->up());
}
