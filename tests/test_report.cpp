// SPDX-License-Identifier: Apache-2.0
// The region report tells what protection really was: every downgrade the
// tenant took at join is a note with its reason, and non-krex work on the
// reserved CPUs during the body is a warning.

#include <krex/detail/cpu/cpu_watch.hpp>
#include <krex/region.hpp>

#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "krex_test.hpp"
#include "proc_util.hpp"

namespace {

using namespace std::chrono_literals;

bool has_line(const std::vector<std::string>& lines, const std::string& part) {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const std::string& l) { return l.find(part) != std::string::npos; });
}

std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += l + "\n";
  return s;
}

TEST(report_notes, options_that_turn_steps_off_are_noted_with_their_reason) {
  krex_test::scoped_segment seg;
  krex::tenant t{seg.opts()};  // freeze none, pin off, confine off
  const auto& n = t.protection_notes();
  EXPECT_TRUE(has_line(n, "freeze: off")) << joined(n);
  EXPECT_TRUE(has_line(n, "KREX_FREEZE=none")) << joined(n);
  EXPECT_TRUE(has_line(n, "pin: off")) << joined(n);
  EXPECT_TRUE(has_line(n, "confine: off")) << joined(n);
  krex::region r{t};
  EXPECT_EQ(r.report().notes, n);
}

TEST(report_notes, signal_freezing_says_what_it_misses) {
  krex_test::scoped_segment seg;
  krex::tenant t{seg.opts().freeze(krex::freeze_method::signal)};
  EXPECT_TRUE(has_line(t.protection_notes(), "freeze: signal")) << joined(t.protection_notes());
  EXPECT_FALSE(has_line(t.protection_notes(), "freeze: off")) << joined(t.protection_notes());
}

TEST(report_notes, a_region_with_nothing_turned_off_has_no_freeze_or_pin_notes) {
  krex_test::scoped_segment seg;
  krex::tenant t{seg.opts().pin(true).confine(true)};
  if (t.reserved_cpus().empty()) GTEST_SKIP() << "no reserved CPUs on this machine";
  krex::region r{t};
  EXPECT_FALSE(has_line(r.report().notes, "pin:")) << joined(r.report().notes);
  EXPECT_FALSE(has_line(r.report().notes, "confine:")) << joined(r.report().notes);
}

TEST(cpu_watch, parses_per_cpu_lines_of_proc_stat) {
  const std::string path = "/tmp/" + krex_test::unique_name("krex-stat");
  {
    std::ofstream f(path);
    f << "cpu  100 0 50 1000 0 0 0 0 0 0\n"
         "cpu0 10 1 5 500 7 2 3 4 0 0\n"
         "cpu3 20 0 10 500 0 0 0 0 0 0\n"
         "intr 12345\n";
  }
  const krex::detail::cpu_times t = krex::detail::read_cpu_times(path.c_str());
  std::remove(path.c_str());
  ASSERT_TRUE(t.ok);
  ASSERT_EQ(t.busy.size(), 4U);
  EXPECT_EQ(t.busy[0], 10U + 1 + 5 + 2 + 3 + 4);  // iowait and idle are not busy
  EXPECT_EQ(t.busy[1], 0U);
  EXPECT_EQ(t.busy[3], 30U);
  EXPECT_FALSE(krex::detail::read_cpu_times("/nonexistent/stat").ok);
}

// A process that is not a krex tenant spins on the reserved CPU while the
// body runs: the report must say so (on a busy node this is what made krex's
// tail worse than unprotected while the report claimed full protection).
TEST(report_warnings, foreign_process_on_the_reserved_cpu_is_reported) {
  if (krex::detail::allowed_cpus().size() < 2) GTEST_SKIP() << "needs 2 allowed CPUs";
  struct flags {
    std::atomic<int> go{0};
    std::atomic<int> stop{0};
  };
  krex_test::shared<flags> f;
  // Forked before the tenant starts its agent thread.
  krex_test::child hog = krex_test::spawn([&] {
    while (f->go.load() == 0 && f->stop.load() == 0) ::usleep(1000);
    while (f->stop.load() == 0) {
    }
    return 0;
  });
  krex_test::scoped_segment seg;
  krex::tenant t{seg.opts().pin(true).confine(true)};
  if (t.reserved_cpus().empty()) {
    f->stop.store(1);
    GTEST_SKIP() << "no reserved CPUs on this machine";
  }
  {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(t.reserved_cpus().front(), &set);
    ASSERT_EQ(::sched_setaffinity(hog.pid(), sizeof set, &set), 0);
  }
  krex::region_report rep;
  {
    krex::region r{t};
    f->go.store(1);
    krex_test::spin_for(400'000'000);  // the "kernel": 400 ms on the pinned thread
    f->stop.store(1);
    r.exit();
    rep = r.report();
  }
  EXPECT_EQ(krex_test::wait_exit(hog.pid(), 5s).has_value(), true);
  ASSERT_TRUE(rep.pinned);
  EXPECT_GE(rep.body_preemptions, 1) << "the hog shared the measuring thread's CPU";
  EXPECT_GT(rep.reserved_foreign_ns, 50'000'000LL) << "hog ran ~half of 400 ms beside the body";
  EXPECT_TRUE(has_line(rep.warnings, "reserved CPUs")) << joined(rep.warnings);
}

}  // namespace
