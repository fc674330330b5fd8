// SPDX-License-Identifier: Apache-2.0
// krex::gbench::run with placements (run_options::placements = K) on the host
// backend: every placement runs once before the timed loop, iteration i runs
// on placement i % K, the run's counters carry the spread between the
// placements' medians and their memory, last_run() has every iteration with
// its placement, and a bad K or a body that cannot rotate is an error row
// that fails the program in strict mode.

#include <krex/gbench.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "gbench_util.hpp"
#include "krex_test.hpp"

namespace {

using krex_test::capture;
using krex_test::run_one;
using krex_test::run_only;

// Placement 1 is twice as slow as the others: 1 ms vs 0.5 ms.
std::uint64_t spin_ns(int placement) { return placement == 1 ? 1'000'000 : 500'000; }

std::vector<std::pair<int, int>> g_calls;  // (p.index, p.sample) of every call

void bm_place_rotation(benchmark::State& st) {
  krex::gbench::run_options o;
  o.placements = 3;
  o.placement_bytes = 12345;
  krex::gbench::run(
      st,
      [&](krex::placement p) {
        g_calls.emplace_back(p.index, p.sample);
        krex_test::spin_for(spin_ns(p.index));
      },
      o);
}

TEST(gbench_placements, iterations_rotate_and_the_run_reports_the_spread) {
  g_calls.clear();
  KREX_BENCHMARK(bm_place_rotation)->Iterations(12);
  const auto r = run_one("bm_place_rotation");
  ASSERT_TRUE(r);

  // Warm-up: each placement once (calls 0, 1, 2), then the 12 iterations on
  // placement i % 3.
  std::vector<std::pair<int, int>> want{{0, 0}, {1, 1}, {2, 2}};
  for (int i = 0; i < 12; ++i) want.emplace_back(i % 3, i);
  EXPECT_EQ(g_calls, want);

  const krex::measure_result m = krex::gbench::last_run();
  EXPECT_EQ(m.method, "host");
  ASSERT_EQ(m.samples_ms.size(), 12U);
  EXPECT_EQ(m.placement, (std::vector<int>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}));
  // Each sample is its own placement's call: a busy machine only lengthens
  // a sample, so every sample of placement 1 is at least its 1 ms, and a
  // sample taken from another placement's 0.5 ms call would show.
  for (std::size_t i = 0; i < m.samples_ms.size(); ++i)
    EXPECT_GE(m.samples_ms[i], spin_ns(m.placement[i]) / 1e6) << "sample " << i;
  // Each placement's median is the median of its samples, the spread theirs.
  ASSERT_EQ(m.placement_median_ms.size(), 3U);
  std::vector<double> med;
  for (int p = 0; p < 3; ++p) {
    std::vector<double> v;
    for (int i = p; i < 12; i += 3) v.push_back(m.samples_ms[static_cast<std::size_t>(i)]);
    std::sort(v.begin(), v.end());
    EXPECT_DOUBLE_EQ(m.placement_median_ms[static_cast<std::size_t>(p)], (v[1] + v[2]) / 2) << p;
    med.push_back(m.placement_median_ms[static_cast<std::size_t>(p)]);
  }
  std::sort(med.begin(), med.end());
  EXPECT_DOUBLE_EQ(m.placement_spread, (med[2] - med[0]) / med[1]);
  EXPECT_EQ(m.placement_bytes, 12345U);

  // The counters: K, the spread, the fastest and slowest placement (seconds), the bytes.
  EXPECT_EQ(r->counters.at("krex_placements").value, 3.0);
  EXPECT_DOUBLE_EQ(r->counters.at("krex_placement_spread").value, m.placement_spread);
  EXPECT_DOUBLE_EQ(r->counters.at("krex_placement_min_s").value, med[0] / 1e3);
  EXPECT_DOUBLE_EQ(r->counters.at("krex_placement_max_s").value, med[2] / 1e3);
  EXPECT_GE(r->counters.at("krex_placement_max_s").value, 0.001);  // placement 1's median
  EXPECT_EQ(r->counters.at("krex_placement_bytes").value, 12345.0);
  EXPECT_EQ(r->counters.count("krex_placements_timed"), 0U);
  // The region's label as before, with nothing about placements.
  EXPECT_NE(r->report_label.find("gate+drain"), std::string::npos) << r->report_label;
  EXPECT_EQ(r->report_label.find("PLACEMENTS"), std::string::npos) << r->report_label;
}

void bm_place_one(benchmark::State& st) {
  krex::gbench::run(st, [&](int i) { g_calls.emplace_back(0, i); });
}

TEST(gbench_placements, one_placement_is_the_loop_as_before) {
  g_calls.clear();
  KREX_BENCHMARK(bm_place_one)->Iterations(5);
  const auto r = run_one("bm_place_one");
  ASSERT_TRUE(r);
  // No extra calls, the iteration index as before, no placement counters.
  EXPECT_EQ(g_calls, (std::vector<std::pair<int, int>>{{0, 0}, {0, 1}, {0, 2}, {0, 3}, {0, 4}}));
  for (const auto& c : r->counters) EXPECT_EQ(c.first.find("krex_placement"), std::string::npos);
  const krex::measure_result m = krex::gbench::last_run();
  EXPECT_EQ(m.samples_ms.size(), 5U);
  EXPECT_EQ(m.placement, (std::vector<int>(5, 0)));
  EXPECT_DOUBLE_EQ(m.placement_spread, 0);
}

// Fewer iterations than placements: the timed ones only, and the label says so.
void bm_place_short(benchmark::State& st) {
  krex::gbench::run_options o;
  o.placements = 4;
  krex::gbench::run(st, [&](krex::placement p) { krex_test::spin_for(spin_ns(p.index)); }, o);
}

TEST(gbench_placements, fewer_iterations_than_placements_are_said_in_the_label) {
  KREX_BENCHMARK(bm_place_short)->Iterations(2);
  const auto r = run_one("bm_place_short");
  ASSERT_TRUE(r);
  EXPECT_NE(r->report_label.find("PLACEMENTS: 2 of 4 timed"), std::string::npos)
      << r->report_label;
  EXPECT_NE(r->report_label.find("->Iterations()"), std::string::npos) << r->report_label;
  EXPECT_EQ(r->counters.at("krex_placements_timed").value, 2.0);
  // The spread of the two timed placements, not of the untimed ones' empty
  // (0) medians, which would make it (max - 0) / ... .
  const krex::measure_result m = krex::gbench::last_run();
  EXPECT_EQ(m.placement, (std::vector<int>{0, 1}));
  ASSERT_EQ(m.placement_median_ms.size(), 4U);
  EXPECT_EQ(m.placement_median_ms[2], 0.0);
  const double lo = std::min(m.samples_ms[0], m.samples_ms[1]);
  const double hi = std::max(m.samples_ms[0], m.samples_ms[1]);
  EXPECT_DOUBLE_EQ(m.placement_spread, (hi - lo) / ((lo + hi) / 2));
  EXPECT_DOUBLE_EQ(r->counters.at("krex_placement_min_s").value, lo / 1e3);
  EXPECT_GE(r->counters.at("krex_placement_min_s").value, 0.0005);
}

// K copies of a host buffer set feed run_options::over().
std::vector<const float*> g_seen;

void bm_place_over(benchmark::State& st) {
  static krex::placements<float> in(2, {std::vector<float>(1000, 1.0f)});
  krex::gbench::run(st, [&](krex::placement p) { g_seen.push_back(in.data(p, 0)); },
                    krex::gbench::run_options{}.over(in));
}

TEST(gbench_placements, over_takes_k_and_the_bytes_from_the_copies) {
  g_seen.clear();
  KREX_BENCHMARK(bm_place_over)->Iterations(4);
  const auto r = run_one("bm_place_over");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->counters.at("krex_placements").value, 2.0);
  EXPECT_EQ(r->counters.at("krex_placement_bytes").value, 2.0 * 1000 * sizeof(float));
  ASSERT_EQ(g_seen.size(), 6U);  // 2 warm-up calls, 4 iterations
  EXPECT_NE(g_seen[0], g_seen[1]);  // two copies, two allocations
  EXPECT_EQ(g_seen[2], g_seen[0]);
  EXPECT_EQ(g_seen[3], g_seen[1]);
}

// Misuse: the run is an error row saying what to do, the body never runs,
// and the failure is counted (strict mode would fail the program).
int g_misuse_calls = 0;

void bm_place_zero(benchmark::State& st) {
  krex::gbench::run_options o;
  o.placements = 0;
  krex::gbench::run(st, [&](krex::placement) { ++g_misuse_calls; }, o);
}

void bm_place_plain_body(benchmark::State& st) {
  krex::gbench::run_options o;
  o.placements = 2;
  krex::gbench::run(st, [&] { ++g_misuse_calls; }, o);
}

void bm_place_int_body(benchmark::State& st) {
  krex::gbench::run_options o;
  o.placements = 2;
  krex::gbench::run(st, [&](int) { ++g_misuse_calls; }, o);
}

TEST(gbench_placements, a_bad_k_or_a_body_that_cannot_rotate_is_an_error_row) {
  g_misuse_calls = 0;
  KREX_BENCHMARK(bm_place_zero)->Iterations(3);
  KREX_BENCHMARK(bm_place_plain_body)->Iterations(3);
  KREX_BENCHMARK(bm_place_int_body)->Iterations(3);
  const std::uint64_t failures_before = krex::gbench::failures();
  const capture rep = run_only("bm_place_(zero|plain_body|int_body)");
  EXPECT_EQ(g_misuse_calls, 0);
  EXPECT_EQ(krex::gbench::failures() - failures_before, 3U);
  const auto* zero = rep.find("bm_place_zero");
  ASSERT_NE(zero, nullptr);
  EXPECT_TRUE(krex_test::gbench_failed(*zero));
  const std::string zero_why = krex_test::gbench_message(*zero);
  EXPECT_NE(zero_why.find("placements = 0 is not >= 1"), std::string::npos) << zero_why;
  EXPECT_NE(zero_why.find("use 1"), std::string::npos) << zero_why;
  EXPECT_EQ(zero_why.find("krex: krex:"), std::string::npos) << zero_why;
  for (const char* name : {"bm_place_plain_body", "bm_place_int_body"}) {
    const auto* r = rep.find(name);
    ASSERT_NE(r, nullptr) << name;
    EXPECT_TRUE(krex_test::gbench_failed(*r)) << name;
    const std::string why = krex_test::gbench_message(*r);
    EXPECT_NE(why.find("does not take a krex::placement"), std::string::npos) << why;
    EXPECT_NE(why.find("[&](krex::placement p)"), std::string::npos) << why;
  }
  // A failed run leaves no stale iterations behind.
  EXPECT_TRUE(krex::gbench::last_run().samples_ms.empty());
}

}  // namespace
