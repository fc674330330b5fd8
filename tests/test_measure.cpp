// SPDX-License-Identifier: Apache-2.0
// krex::measure: statistics, and the host overload inside a region (the CUDA
// overload is tested on the GPU in test_cuda.cu).

#include "krex_test.hpp"

#include <krex/measure.hpp>
#include <krex/region.hpp>

#include <gtest/gtest.h>

#include <chrono>
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
  krex::measure_options o;
  o.warmup = 2;
  o.samples = 7;
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
  krex::measure_options o;
  o.warmup = 1;
  o.samples = 4;
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
