// SPDX-License-Identifier: Apache-2.0
// krex::measure: statistics, and the host overload inside a region (the CUDA
// overload is tested on the GPU in test_cuda.cu).

#include "errors.hpp"
#include "krex_test.hpp"
#include "measure_util.hpp"

#include <krex/measure.hpp>
#include <krex/region.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <utility>
#include <string>
#include <vector>

using krex_test::scoped_segment;

TEST(Measure, Statistics) {
  krex::measure_result r;
  for (int i = 1; i <= 101; ++i) r.samples_ms.push_back(102 - i);  // 101..1, unsorted
  krex::detail::summarize(r);
  EXPECT_DOUBLE_EQ(r.median_ms, 51);
  EXPECT_DOUBLE_EQ(r.p5_ms, 6);
  EXPECT_DOUBLE_EQ(r.p95_ms, 96);
  EXPECT_DOUBLE_EQ(r.mean_ms, 51);
  EXPECT_DOUBLE_EQ(r.min_ms, 1);
  EXPECT_DOUBLE_EQ(r.max_ms, 101);
  EXPECT_EQ(r.samples_ms.front(), 101) << "samples keep their order";

  krex::measure_result two;
  two.samples_ms = {1, 2};
  krex::detail::summarize(two);
  EXPECT_DOUBLE_EQ(two.median_ms, 1.5);
  EXPECT_DOUBLE_EQ(two.p95_ms, 1.95);
}

TEST(Measure, HostLoopInsideRegion) {
  scoped_segment seg;
  krex::tenant t{seg.opts()};
  krex::region r{t};
  std::vector<int> seen;
  krex::measure_options o = krex_test::loop_options(2, 7);
  const krex::measure_result m = krex::measure(
      r,
      [&](int i) {
        seen.push_back(i);
        krex_test::spin_for(200'000);
      },
      o);
  EXPECT_EQ(m.method, "host");
  ASSERT_EQ(m.samples_ms.size(), 7U);
  EXPECT_EQ(seen.size(), 9U);  // warm-up calls, then samples with their index
  EXPECT_EQ(seen.back(), 6);
  EXPECT_GE(m.min_ms, 0.19);
  EXPECT_LE(m.p5_ms, m.median_ms);
  EXPECT_LE(m.median_ms, m.p95_ms);

  int calls = 0;
  o.warmup = 0;
  o.samples = 1;
  o.warmup_time = std::chrono::milliseconds(5);
  const auto t0 = std::chrono::steady_clock::now();
  krex::measure(
      r,
      [&] {
        ++calls;
        krex_test::spin_for(100'000);
      },
      o);
  // Warm-up ran for at least warmup_time, then one sample (counts depend on load).
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(5));
  EXPECT_GE(calls, 2);

  o.samples = 0;
  EXPECT_THROW(krex::measure(
                   r, [] {}, o),
               krex::error);
}

// Outside any region the same loop runs on krex::unprotected (anything else
// as the first argument does not compile: ctest measure_needs_region).
TEST(Measure, UnprotectedRunsTheSameLoopWithoutARegion) {
  std::vector<int> seen;
  krex::measure_options o = krex_test::loop_options(1, 4);
  const krex::measure_result m = krex::measure(
      krex::unprotected, [&](int i) { seen.push_back(i); }, o);
  EXPECT_EQ(m.method, "host");
  ASSERT_EQ(m.samples_ms.size(), 4U);
  EXPECT_EQ(seen, (std::vector<int>{0, 0, 1, 2, 3}));
  o.samples = 0;
  EXPECT_THROW(krex::measure(
                   krex::unprotected, [] {}, o),
               krex::error);
}

// warm_placements off: the warm-up is `warmup` calls only, still rotating,
// for placements the harness already touched; the samples rotate as before.
TEST(Measure, PlacementWarmupCanBeLeftToTheHarness) {
  std::vector<int> seen;
  krex::measure_options o = krex_test::loop_options(2, 8);
  o.placements = 4;
  o.warm_placements = false;
  krex::measure(
      krex::unprotected, [&](krex::placement p) { seen.push_back(p.index); }, o);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 0, 1, 2, 3, 0, 1, 2, 3}))
      << "2 warm-up calls (placements 0, 1), then 8 samples over all 4";
  o.warmup = 6;  // more warm-up calls than placements still rotate
  seen.clear();
  krex::measure(
      krex::unprotected, [&](krex::placement p) { seen.push_back(p.index); }, o);
  ASSERT_EQ(seen.size(), 14U);
  EXPECT_EQ(std::vector<int>(seen.begin(), seen.begin() + 6), (std::vector<int>{0, 1, 2, 3, 0, 1}));
  EXPECT_EQ(krex::detail::warmup_calls(o), 6);
  o.warmup = 1;
  EXPECT_EQ(krex::detail::warmup_calls(o), 1);
  o.warm_placements = true;
  EXPECT_EQ(krex::detail::warmup_calls(o), 4) << "on (the default): every placement once";
}

// Placements: sample i runs on placement i % K, warm-up covers every
// placement, and the result records each sample's placement, the median of
// each placement and their spread.
TEST(Measure, PlacementsRotatePerSampleAndAreRecorded) {
  std::vector<int> warm, timed;
  int calls = 0;
  // 2 warm-up calls, fewer than K: warm-up still visits every placement once.
  krex::measure_options o = krex_test::loop_options(2, 30);
  o.placements = 3;
  o.placement_bytes = 12345;
  const krex::measure_result m = krex::measure(
      krex::unprotected,
      [&](krex::placement p) {
        (calls < 3 ? warm : timed).push_back(p.index);
        ++calls;
        // Placement 1 is twice as slow: the spread must show it.
        krex_test::spin_for(p.index == 1 ? 600'000 : 300'000);
      },
      o);
  EXPECT_EQ(warm, (std::vector<int>{0, 1, 2}));
  ASSERT_EQ(timed.size(), 30U);
  for (std::size_t i = 0; i < 30; ++i) EXPECT_EQ(timed[i], static_cast<int>(i % 3));
  EXPECT_EQ(m.placement, timed) << "each sample's placement, parallel to samples_ms";
  ASSERT_EQ(m.placement_median_ms.size(), 3U);
  // Medians of 10 samples each: a preempted spin or two moves none of them.
  EXPECT_GT(m.placement_median_ms[1], 1.5 * m.placement_median_ms[0]);
  EXPECT_GT(m.placement_median_ms[1], 1.5 * m.placement_median_ms[2]);
  std::vector<double> med = m.placement_median_ms;
  std::sort(med.begin(), med.end());
  EXPECT_DOUBLE_EQ(m.placement_spread, (med[2] - med[0]) / med[1]);
  EXPECT_GT(m.placement_spread, 0.6);  // (0.6 - 0.3) / 0.3 = 1 without preemption
  EXPECT_EQ(m.placement_bytes, 12345U);
}

TEST(Measure, OnePlacementIsTheLoopAsBefore) {
  std::vector<int> seen;
  krex::measure_options o = krex_test::loop_options(1, 4);
  const krex::measure_result m = krex::measure(
      krex::unprotected, [&](int i) { seen.push_back(i); }, o);
  EXPECT_EQ(seen, (std::vector<int>{0, 0, 1, 2, 3})) << "an int body still gets the sample index";
  EXPECT_EQ(m.placement, (std::vector<int>{0, 0, 0, 0}));
  ASSERT_EQ(m.placement_median_ms.size(), 1U);
  EXPECT_DOUBLE_EQ(m.placement_spread, 0);
  EXPECT_EQ(m.placement_bytes, 0U);
}

TEST(Measure, PlacementStatisticsFromSamples) {
  krex::measure_result r;
  r.samples_ms = {1, 2, 3, 4, 5, 6, 7};
  krex::detail::summarize_placements(r, 2, 64);
  EXPECT_EQ(r.placement, (std::vector<int>{0, 1, 0, 1, 0, 1, 0}));
  ASSERT_EQ(r.placement_median_ms.size(), 2U);
  EXPECT_DOUBLE_EQ(r.placement_median_ms[0], 4);  // 1 3 5 7
  EXPECT_DOUBLE_EQ(r.placement_median_ms[1], 4);  // 2 4 6
  EXPECT_DOUBLE_EQ(r.placement_spread, 0);
  r.samples_ms = {1, 3, 1, 3};
  krex::detail::summarize_placements(r, 2, 64);
  EXPECT_DOUBLE_EQ(r.placement_spread, 1.0);  // (3 - 1) / 2
  EXPECT_EQ(r.placement_bytes, 64U);
}

using krex_test::options_error;

TEST(Measure, PlacementErrorsSayWhatToDo) {
  krex::measure_options o;
  o.samples = 4;
  const std::pair<int, const char*> refused[] = {{0, "placements = 0 is not >= 1"},
                                                 {5, "raise samples"}};
  for (const auto& [placements, says] : refused) {
    o.placements = placements;
    EXPECT_NE(options_error([&] {
                krex::measure(
                    krex::unprotected, [](krex::placement) {}, o);
              }).find(says),
              std::string::npos)
        << "placements = " << placements;
  }
  // With K > 1 the body must take the placement it is recorded on.
  o.placements = 2;
  EXPECT_NE(options_error([&] {
              krex::measure(
                  krex::unprotected, [] {}, o);
            }).find("[&](krex::placement p)"),
            std::string::npos);
  EXPECT_NE(options_error([&] {
              krex::measure(
                  krex::unprotected, [](int) {}, o);
            }).find("does not take a krex::placement"),
            std::string::npos);
}

TEST(Measure, HostPlacementsCopyTheBuffersAndCountTheirBytes) {
  const std::vector<float> x(1000, 1.0F), y(500, 2.0F);
  krex::placements<float> in(4, {x, y});
  EXPECT_EQ(in.count(), 4);
  EXPECT_EQ(in.bytes(), 4 * 1500 * sizeof(float));
  for (int p = 0; p < 4; ++p) {
    EXPECT_EQ(in.buffer(p, 0), x);
    EXPECT_EQ(in.buffer(p, 1), y);
    for (int q = 0; q < p; ++q) EXPECT_NE(in.data(p, 0), in.data(q, 0)) << "own allocations";
  }
  EXPECT_EQ(in.data(krex::placement{2, 9}, 1), in.data(2, 1));
  krex::measure_options o;
  o.samples = 8;
  in.configure(o);
  EXPECT_EQ(o.placements, 4);
  EXPECT_EQ(o.placement_bytes, in.bytes());
  std::vector<const float*> used;
  const krex::measure_result m = krex::measure(
      krex::unprotected, [&](krex::placement p) { used.push_back(in.data(p, 0)); }, o);
  EXPECT_EQ(m.placement_bytes, in.bytes());
  ASSERT_EQ(used.size(), 12U);  // 4 warm-up calls (one per placement), 8 samples
  EXPECT_EQ(used[4 + 5], in.data(1, 0));

  // The budget: 4 x 6000 bytes do not fit in 20000.
  const std::string w = options_error([&] { krex::placements<float> big(4, {x, y}, 20000); });
  EXPECT_NE(w.find("over the budget of 20000 bytes"), std::string::npos) << w;
  EXPECT_NE(w.find("lower K to at most 3"), std::string::npos) << w;
  EXPECT_NO_THROW((krex::placements<float>(3, {x, y}, 20000)));
  EXPECT_NE(options_error([&] { krex::placements<float> none(0, {x}); }).find("not >= 1"),
            std::string::npos);
}
