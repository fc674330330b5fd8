// SPDX-License-Identifier: Apache-2.0
// The quiet step (krex/detail/steps/quiet.hpp) and the device checks at region entry,
// through a host backend with a scripted device probe, clock reading and
// process list; and krex::measure's throttle marking with injected
// clocks-event reasons (the detail::clocks_hook seam). The real CUDA probe
// and NVML run in tests/test_cuda.cu on a GPU.

#include <krex/detail/steps/quiet.hpp>
#include <krex/measure.hpp>
#include <krex/region.hpp>

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "krex_test.hpp"
#include "measure_util.hpp"

namespace {

using namespace std::chrono_literals;
namespace kd = krex::detail;

// What the scripted device does: probes take `idle_ns`, or 10% longer until
// `busy_until_ns` (now_ns clock); `probe_error` makes the probe unable to run.
struct script {
  std::atomic<std::uint64_t> idle_ns{40'000};
  std::atomic<std::uint64_t> busy_until_ns{0};
  std::atomic<bool> always_busy{false};
  std::atomic<int> probes{0};
  std::string probe_error;
  krex::device_clocks clocks;
  std::vector<int> processes;
  bool processes_known = false;
};
script g;

struct probing_backend : krex::backend::host {
  static constexpr const char* name = "probing";
  using krex::backend::host::host;
  kd::quiet_sample quiet_probe() {
    kd::quiet_sample q;
    g.probes.fetch_add(1);
    if (!g.probe_error.empty()) {
      q.why_not = g.probe_error;
      return q;
    }
    const bool busy = g.always_busy.load() || kd::now_ns() < g.busy_until_ns.load();
    q.ok = true;
    q.ns = busy ? g.idle_ns.load() * 110 / 100 : g.idle_ns.load();
    return q;
  }
  krex::device_clocks clocks() const { return g.clocks; }
  bool device_processes(std::vector<int>& pids) const {
    pids = g.processes;
    return g.processes_known;
  }
};

using tenant = krex::basic_tenant<probing_backend>;
using region = krex::basic_region<probing_backend>;

bool has_line(const std::vector<std::string>& lines, const std::string& part) {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const std::string& l) { return l.find(part) != std::string::npos; });
}

class quiet : public ::testing::Test {
 protected:
  void SetUp() override {
    g.idle_ns = 40'000;
    g.busy_until_ns = 0;
    g.always_busy = false;
    g.probes = 0;
    g.probe_error.clear();
    g.clocks = {};
    g.processes.clear();
    g.processes_known = false;
  }
  // A device already calibrated at `idle` (as by earlier regions).
  static void calibrated(kd::device_state& dev, std::uint64_t idle = 40'000) {
    dev.quiet_ref_ns = idle;
    dev.quiet_calibrations = kd::quiet_calibration_bursts;
  }
  krex_test::scoped_segment seg;
};

TEST_F(quiet, a_quiet_device_is_calibrated_once_then_verified_with_one_burst) {
  tenant t{seg.opts()};
  kd::device_state& dev = *kd::member_of(t).dev;
  {
    region r{t};
    EXPECT_TRUE(r.report().quiet_checked);
    EXPECT_TRUE(r.report().quiet);
    EXPECT_EQ(r.report().quiet_wait_ns, 0U);
    EXPECT_EQ(r.report().level(), "gate+drain+quiet");
    // The first region on the device calibrates: spaced bursts, then the check.
    EXPECT_EQ(r.report().quiet_bursts, kd::quiet_calibration_bursts + 1);
  }
  EXPECT_EQ(dev.quiet_ref_ns.load(), 40'000U);
  EXPECT_EQ(dev.quiet_calibrations.load(), kd::quiet_calibration_bursts);
  region r{t};
  EXPECT_EQ(r.report().quiet_bursts, 1U);
  EXPECT_DOUBLE_EQ(r.report().quiet_first_ratio, 1.0);
  EXPECT_EQ(dev.quiet_checks.load(), 2U);
  EXPECT_EQ(dev.quiet_waits.load(), 0U);
}

TEST_F(quiet, a_busy_device_is_waited_for_and_the_report_says_so) {
  tenant t{seg.opts()};
  calibrated(*kd::member_of(t).dev);
  g.busy_until_ns = kd::now_ns() + 30'000'000;  // the driver's work after a ~12 GB free
  region r{t};
  const krex::region_report& rep = r.report();
  EXPECT_TRUE(rep.quiet) << rep;
  EXPECT_GE(rep.quiet_wait_ns, 20'000'000U) << rep;
  EXPECT_GE(rep.quiet_ns, rep.quiet_wait_ns);
  EXPECT_NEAR(rep.quiet_first_ratio, 1.10, 0.001);
  EXPECT_DOUBLE_EQ(rep.quiet_last_ratio, 1.0);
  EXPECT_GT(rep.quiet_bursts, 2U);
  EXPECT_TRUE(has_line(rep.notes, "waited")) << rep;
  EXPECT_TRUE(has_line(rep.notes, "10.0% slower than idle")) << rep;
  EXPECT_EQ(rep.level(), "gate+drain+quiet");
  EXPECT_EQ(kd::member_of(t).dev->quiet_waits.load(), 1U);
}

TEST_F(quiet, a_device_still_busy_at_the_deadline_is_a_warning_and_a_lower_level) {
  tenant t{seg.opts().quiet_deadline(40ms)};
  calibrated(*kd::member_of(t).dev);
  g.always_busy = true;
  const std::uint64_t t0 = kd::now_ns();
  region r{t};
  const krex::region_report& rep = r.report();
  EXPECT_LT(kd::now_ns() - t0, 2'000'000'000U);  // bounded by the deadline, not stuck
  EXPECT_TRUE(rep.quiet_checked);
  EXPECT_FALSE(rep.quiet);
  EXPECT_GE(rep.quiet_wait_ns, 30'000'000U) << rep;
  EXPECT_EQ(rep.level(), "gate+drain+quiet(busy)");
  EXPECT_TRUE(has_line(rep.warnings, "KREX_QUIET_DEADLINE_MS")) << rep;
  EXPECT_EQ(kd::member_of(t).dev->quiet_busy.load(), 1U);
  EXPECT_NE(krex::to_json(rep).find("\"quiet\":false"), std::string::npos);
}

TEST_F(quiet, quiet_deadline_zero_turns_the_probe_off_with_a_note) {
  tenant t{seg.opts().quiet_deadline(0ms)};
  region r{t};
  EXPECT_FALSE(r.report().quiet_checked);
  EXPECT_EQ(g.probes.load(), 0);
  EXPECT_EQ(r.report().level(), "gate+drain");
  EXPECT_TRUE(has_line(r.report().notes, "quiet: off")) << r.report();
}

TEST_F(quiet, a_probe_that_cannot_run_is_a_note_not_an_error) {
  g.probe_error = "this process has no CUDA context on the device yet (nothing submitted)";
  tenant t{seg.opts()};
  region r{t};
  EXPECT_FALSE(r.report().quiet_checked);
  EXPECT_EQ(r.report().level(), "gate+drain");
  EXPECT_TRUE(has_line(r.report().notes, "quiet: not probed: this process has no CUDA context"))
      << r.report();
  EXPECT_TRUE(r.report().warnings.empty()) << r.report();
}

TEST_F(quiet, the_host_backend_has_no_probe_and_no_note) {
  krex::tenant t{seg.opts()};
  krex::region r{t};
  EXPECT_FALSE(r.report().quiet_checked);
  EXPECT_FALSE(has_line(r.report().notes, "quiet")) << r.report();
  EXPECT_FALSE(has_line(r.report().warnings, "quiet")) << r.report();
  EXPECT_EQ(r.report().level(), "gate+drain");
}

TEST_F(quiet, the_idle_figure_only_goes_down) {
  tenant t{seg.opts()};
  { region warm{t}; }
  kd::device_state& dev = *kd::member_of(t).dev;
  g.idle_ns = 38'000;  // a faster probe than ever seen lowers the figure
  { region r{t}; }
  EXPECT_EQ(dev.quiet_ref_ns.load(), 38'000U);
  g.idle_ns = 39'000;  // within tolerance: quiet, and the figure stays
  region r{t};
  EXPECT_TRUE(r.report().quiet);
  EXPECT_EQ(dev.quiet_ref_ns.load(), 38'000U);
}

TEST_F(quiet, bad_quiet_options_are_refused_with_the_variable_named) {
  EXPECT_THROW(krex::options{}.quiet_deadline(-1ms), krex::error);
  EXPECT_THROW(krex::options{}.quiet_deadline(61s), krex::error);
  EXPECT_THROW(krex::options{}.quiet_tolerance_pct(0), krex::error);
  try {
    krex::options{}.quiet_tolerance_pct(101);
    FAIL();
  } catch (const krex::error& e) {
    EXPECT_NE(std::string(e.what()).find("quiet_tolerance_pct"), std::string::npos) << e.what();
  }
  ::setenv("KREX_QUIET_DEADLINE_MS", "soon", 1);
  try {
    (void)krex::options{}.with_env();
    ADD_FAILURE() << "KREX_QUIET_DEADLINE_MS=soon accepted";
  } catch (const krex::error& e) {
    EXPECT_NE(std::string(e.what()).find("KREX_QUIET_DEADLINE_MS"), std::string::npos) << e.what();
  }
  ::setenv("KREX_QUIET_DEADLINE_MS", "25", 1);
  ::setenv("KREX_QUIET_TOLERANCE_PCT", "3", 1);
  const krex::options o = krex::options{}.with_env();
  EXPECT_EQ(o.quiet_deadline(), 25ms);
  EXPECT_EQ(o.quiet_tolerance_pct(), 3);
  ::unsetenv("KREX_QUIET_DEADLINE_MS");
  ::unsetenv("KREX_QUIET_TOLERANCE_PCT");
}

TEST_F(quiet, processes_outside_the_segment_lower_the_level) {
  g.processes_known = true;
  g.processes = {static_cast<int>(::getpid()), 4'000'000};  // us (a member) and a stranger
  tenant t{seg.opts()};
  region r{t};
  const krex::region_report& rep = r.report();
  EXPECT_TRUE(rep.foreign_checked);
  EXPECT_EQ(rep.foreign_pids, std::vector<int>{4'000'000});
  EXPECT_EQ(rep.level(), "gate+drain+quiet-shared(1 foreign)");
  EXPECT_TRUE(has_line(rep.warnings, "outside this krex segment")) << rep;
  EXPECT_NE(krex::to_json(rep).find("\"foreign_pids\":[4000000]"), std::string::npos);
}

TEST_F(quiet, only_members_is_full_protection) {
  g.processes_known = true;
  g.processes = {static_cast<int>(::getpid())};
  tenant t{seg.opts()};
  region r{t};
  EXPECT_TRUE(r.report().foreign_checked);
  EXPECT_TRUE(r.report().foreign_pids.empty());
  EXPECT_EQ(r.report().level(), "gate+drain+quiet");
}

TEST_F(quiet, a_power_or_thermal_slowdown_at_entry_or_exit_is_a_warning) {
  g.clocks.valid = true;
  g.clocks.sm_mhz = 1500;
  g.clocks.reasons = 0x4 | 0x1;  // power cap (a slowdown) and idle (not one)
  tenant t{seg.opts()};
  krex::region_report rep;
  {
    region r{t};
    g.clocks.reasons = 0x1;  // gone by the exit
    r.exit();
    rep = r.report();
  }
  EXPECT_TRUE(rep.clocks_entry.valid);
  EXPECT_EQ(rep.clocks_entry.slowdown(), 0x4U);
  EXPECT_EQ(rep.clocks_exit.slowdown(), 0U);
  EXPECT_TRUE(has_line(rep.warnings, "power cap active at region entry (SM 1500 MHz)")) << rep;
  EXPECT_FALSE(has_line(rep.warnings, "at region exit")) << rep;
  EXPECT_NE(krex::to_json(rep).find("\"clocks_entry\":{\"sm_mhz\":1500"), std::string::npos)
      << krex::to_json(rep);
}

// krex::measure's throttle marking, through the clocks seam.
std::atomic<int> g_slow_reads{0};
krex::device_clocks injected(int) noexcept {
  krex::device_clocks c;
  c.valid = true;
  if (g_slow_reads.load() > 0) {
    g_slow_reads.fetch_sub(1);
    c.reasons = 0x20;  // software thermal slowdown
  }
  return c;
}

struct hook_scope {
  hook_scope() {
    g_slow_reads = 0;
    kd::clocks_hook = &injected;
  }
  ~hook_scope() { kd::clocks_hook = nullptr; }
};

TEST(measure_throttle, samples_taken_during_a_slowdown_are_marked) {
  hook_scope h;
  krex::measure_options o = krex_test::loop_options(0, 8);
  int calls = 0;
  const krex::measure_result m = krex::measure(krex::unprotected, [&] {
    if (calls++ == 3) g_slow_reads = 3;  // slow for the read after sample 3 and both of sample 4
  }, o);
  EXPECT_TRUE(m.clocks_checked);
  EXPECT_EQ(m.throttled, (std::vector<int>{3, 4}));
  EXPECT_EQ(m.throttle_reasons, 0x20U);
  EXPECT_EQ(m.retakes, 0);
  EXPECT_EQ(m.samples_ms.size(), 8U);
}

TEST(measure_throttle, retaken_samples_are_unmarked_when_the_slowdown_is_over) {
  hook_scope h;
  krex::measure_options o = krex_test::loop_options(0, 8);
  o.retake_throttled = true;
  o.throttle_recovery = 1ms;
  int calls = 0;
  const krex::measure_result m = krex::measure(krex::unprotected, [&] {
    if (calls++ == 3) g_slow_reads = 3;
  }, o);
  EXPECT_TRUE(m.throttled.empty());
  EXPECT_EQ(m.retakes, 2);
  EXPECT_EQ(calls, 10);
  EXPECT_EQ(m.throttle_reasons, 0x20U);  // still reported: it was seen
}

TEST(measure_throttle, a_slowdown_that_lasts_stays_marked_after_the_last_retake) {
  hook_scope h;
  krex::measure_options o = krex_test::loop_options(0, 4);
  o.retake_throttled = true;
  o.max_retakes = 2;
  o.throttle_recovery = 0ms;
  g_slow_reads = 1'000'000;
  const krex::measure_result m = krex::measure(krex::unprotected, [] {}, o);
  EXPECT_EQ(m.throttled, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(m.retakes, 8);
}

TEST(measure_throttle, without_a_clock_source_nothing_is_checked_or_marked) {
  krex::measure_options o = krex_test::loop_options(0, 4);
  const krex::measure_result m = krex::measure(krex::unprotected, [] {}, o);
  EXPECT_FALSE(m.clocks_checked);
  EXPECT_TRUE(m.throttled.empty());
  krex::measure_options bad;
  bad.max_retakes = -1;
  EXPECT_THROW(krex::measure(krex::unprotected, [] {}, bad), krex::error);
}

}  // namespace
