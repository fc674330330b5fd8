// SPDX-License-Identifier: Apache-2.0
// krex::compare: the interleaved order, the statistics (pairs, interval,
// verdict) on synthetic samples, its errors, and the host loop end to end in
// a region (the CUDA loop runs on the GPU: bench/gpu/compare.cu).

#include "errors.hpp"
#include "krex_test.hpp"

#include <krex/compare.hpp>
#include <krex/region.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

using krex::verdict;
using krex_test::options_error;
using krex_test::scoped_segment;

namespace {

/// Synthetic samples of `m` candidates with true times `base[c]`, in the
/// time order `order` (from compare_order or any other): sample s (in time)
/// is base[c] x (1 + drift x s / total) x (1 + noise), noise ~ N(0, sd);
/// odd positions `odd_faster` faster, and the sample that opens each double
/// round (position s % 2m == 0, the first on a new placement) `opener_slower`
/// slower.
std::vector<std::vector<double>> synth(const std::vector<double>& base,
                                       const std::vector<int>& order, double drift, double sd,
                                       std::uint64_t seed, double odd_faster = 0,
                                       double opener_slower = 0) {
  const std::size_t m = base.size();
  const std::size_t n = order.size() / m;
  std::vector<std::vector<double>> out(m);
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0, sd);
  for (std::size_t s = 0; s < order.size(); ++s) {
    const auto c = static_cast<std::size_t>(order[s]);
    const double t = base[c] * (1 + drift * static_cast<double>(s) / static_cast<double>(n * m)) *
                     (1 + noise(rng)) * (s % 2 == 1 ? 1 - odd_faster : 1) *
                     (s % (2 * m) == 0 ? 1 + opener_slower : 1);
    out[c].push_back(t);
  }
  return out;
}

/// All of candidate 0's samples, then all of candidate 1's: no interleaving.
/// How many of the seeds 1..n `pred(seed)` holds for.
template <class Pred>
int seeds_where(std::uint64_t n, Pred pred) {
  int k = 0;
  for (std::uint64_t seed = 1; seed <= n; ++seed) k += pred(seed) ? 1 : 0;
  return k;
}

std::vector<int> blocked(int m, int n) {
  std::vector<int> o;
  for (int c = 0; c < m; ++c)
    for (int j = 0; j < n; ++j) o.push_back(c);
  return o;
}

}  // namespace

TEST(Compare, TwoCandidatesAlternateAbbaBaab) {
  EXPECT_EQ(krex::detail::compare_order(2, 4, 7), (std::vector<int>{0, 1, 1, 0, 1, 0, 0, 1}));
  const std::vector<int> o = krex::detail::compare_order(2, 120, 1);
  int a_opens = 0;
  for (std::size_t s = 0; s < o.size(); s += 4) a_opens += o[s] == 0 ? 1 : 0;
  EXPECT_EQ(a_opens, 30) << "each candidate opens half of the 60 double rounds";
}

TEST(Compare, MoreCandidatesAreShuffledPerRoundFromTheSeed) {
  const std::vector<int> a = krex::detail::compare_order(3, 300, 1);
  ASSERT_EQ(a.size(), 900U);
  std::vector<int> first(3, 0);
  for (std::size_t r = 0; r < 300; ++r) {
    std::vector<int> round(a.begin() + static_cast<long>(3 * r),
                           a.begin() + static_cast<long>(3 * r + 3));
    ++first[static_cast<std::size_t>(round[0])];
    std::sort(round.begin(), round.end());
    EXPECT_EQ(round, (std::vector<int>{0, 1, 2})) << "every round times each candidate once";
  }
  for (int f : first) EXPECT_GT(f, 60) << "each candidate goes first in about a third of rounds";
  for (std::size_t r = 0; r < 300; r += 2)
    EXPECT_TRUE(std::equal(a.begin() + static_cast<long>(3 * r),
                           a.begin() + static_cast<long>(3 * r + 3),
                           a.rbegin() + static_cast<long>(900 - 3 * r - 6)))
        << "the second round of a double round is the first reversed";
  EXPECT_EQ(krex::detail::compare_order(3, 300, 1), a) << "a seed names one order";
  EXPECT_NE(krex::detail::compare_order(3, 300, 2), a);
}

// Pairs: within a double round, even positions with even, odd with odd.
TEST(Compare, PairsMatchTheParityOfTheirPositions) {
  const auto p = krex::detail::compare_pairs(krex::detail::compare_order(2, 4, 1), 2);
  // A B B A | B A A B: B's sample 0 (position 1) with A's 1 (position 3), B's 1
  // (position 2) with A's 0 (position 0); B's 2 (position 4) with A's 3
  // (position 6), B's 3 (position 7) with A's 2 (position 5).
  EXPECT_EQ(p[1], (std::vector<std::pair<int, int>>{{0, 1}, {1, 0}, {2, 3}, {3, 2}}));
  // Three candidates: every pair within one double round, same parity.
  const std::vector<int> o = krex::detail::compare_order(3, 40, 9);
  const auto q = krex::detail::compare_pairs(o, 3);
  std::vector<std::vector<int>> pos(3);
  for (std::size_t s = 0; s < o.size(); ++s)
    pos[static_cast<std::size_t>(o[s])].push_back(static_cast<int>(s));
  for (std::size_t c = 1; c < 3; ++c) {
    ASSERT_EQ(q[c].size(), 40U);
    for (const auto& [jc, j0] : q[c]) {
      const int a = pos[c][static_cast<std::size_t>(jc)], b = pos[0][static_cast<std::size_t>(j0)];
      EXPECT_EQ(a % 2, b % 2);
      EXPECT_EQ(a / 6, b / 6) << "the same double round";
      EXPECT_EQ(krex::detail::compare_placement(jc, 4), krex::detail::compare_placement(j0, 4));
    }
  }
  // A last single round (odd rounds) pairs its samples as they come.
  EXPECT_EQ(krex::detail::compare_pairs(krex::detail::compare_order(2, 3, 1), 2)[1].back(),
            (std::pair<int, int>{2, 2}));
}

TEST(Compare, MedianIntervalRanksAreTheBinomialOnes) {
  // 2 x P(Bin(6, 1/2) = 0) = 1/32 <= 0.05: [x_(1), x_(6)], coverage 31/32.
  auto [k6, c6] = krex::detail::median_interval_rank(6, 0.05);
  EXPECT_EQ(k6, 1);
  EXPECT_DOUBLE_EQ(c6, 1 - 2.0 / 64);
  EXPECT_EQ(krex::detail::median_interval_rank(5, 0.05).first, 0) << "5 pairs are too few";
  auto [k50, c50] = krex::detail::median_interval_rank(50, 0.05);
  EXPECT_EQ(k50, 18);
  EXPECT_NEAR(c50, 0.96716, 1e-4);
  EXPECT_EQ(krex::detail::median_interval_rank(100, 0.05).first, 40);
  EXPECT_EQ(krex::detail::min_pairs(0.05), 6);
}

TEST(Compare, VerdictOfAnInterval) {
  EXPECT_EQ(krex::decide(0.997, 1.004, 0.005), verdict::same);
  EXPECT_EQ(krex::decide(0.97, 0.99, 0.005), verdict::faster);
  EXPECT_EQ(krex::decide(1.01, 1.03, 0.005), verdict::slower);
  EXPECT_EQ(krex::decide(0.99, 1.01, 0.005), verdict::unsure) << "straddles the band";
  EXPECT_EQ(krex::decide(0.985, 0.997, 0.005), verdict::faster)
      << "excludes 1, reaches past the band";
  EXPECT_EQ(krex::decide(1.003, 1.012, 0.005), verdict::slower);
  EXPECT_EQ(krex::decide(0.996, 0.999, 0.005), verdict::same)
      << "a real difference, smaller than the tolerance";
  EXPECT_EQ(krex::decide(0.98, 0.999, 0), verdict::faster) << "no band: excluding 1 decides";
  EXPECT_EQ(krex::decide(0.999, 1.001, 0), verdict::unsure);
}

// A known 2% difference (1% noise per sample, 50 pairs) is found, in its
// direction, in at least 95% of 200 seeds.
TEST(Compare, KnownTwoPercentDifferenceIsFasterOrSlower) {
  int slower = 0, faster = 0;
  const std::vector<int> order = krex::detail::compare_order(2, 50, 1);
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const auto up = krex::compare_schedule(synth({1.0, 1.02}, order, 0, 0.01, seed), order);
    const auto down =
        krex::compare_schedule(synth({1.0, 0.98}, order, 0, 0.01, seed + 1000), order);
    EXPECT_EQ(up[0].verdict, verdict::baseline);
    slower += up[1].verdict == verdict::slower ? 1 : 0;
    faster += down[1].verdict == verdict::faster ? 1 : 0;
    EXPECT_NE(up[1].verdict, verdict::faster) << "seed " << seed;
    EXPECT_NE(down[1].verdict, verdict::slower) << "seed " << seed;
    EXPECT_LT(up[1].low, up[1].ratio);
    EXPECT_GT(up[1].high, up[1].ratio);
  }
  EXPECT_GE(slower, 190);
  EXPECT_GE(faster, 190);
}

// Identical candidates are never called faster or slower in at least 95% of
// 200 seeds; and with little noise, mostly "same".
TEST(Compare, IdenticalCandidatesAreSameOrUnsure) {
  int decided = 0, same = 0, same_quiet = 0;
  const std::vector<int> order = krex::detail::compare_order(2, 50, 1);
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const auto r = krex::compare_schedule(synth({1.0, 1.0}, order, 0, 0.01, seed), order);
    decided += (r[1].verdict == verdict::faster || r[1].verdict == verdict::slower) ? 1 : 0;
    same += r[1].verdict == verdict::same ? 1 : 0;
    const auto q = krex::compare_schedule(synth({1.0, 1.0}, order, 0, 0.002, seed), order);
    same_quiet += q[1].verdict == verdict::same ? 1 : 0;
  }
  EXPECT_LE(decided, 10);
  EXPECT_GT(same + 0, 0);
  EXPECT_GE(same_quiet, 190) << "0.2% noise: the interval fits in +-0.5%";
}

// Two candidates 0.77% apart (the H200's axpby pair 1% apart in bytes), with
// the H200's per-sample noise (1.2%), at the default samples and
// confidence: put in order in at least 95% of 200 seeds, never in the wrong
// one; identical ones are called faster or slower in at most 2%.
TEST(Compare, OnePercentApartIsInOrderAtTheDefaultSamples) {
  const int n = krex::compare_default_samples;
  const std::vector<int> order = krex::detail::compare_order(2, n, 1);
  int right = 0, wrong = 0, decided = 0;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const auto r = krex::compare_schedule(synth({1.0, 1.0077}, order, 0, 0.012, seed), order);
    right += r[1].verdict == verdict::slower ? 1 : 0;
    wrong += r[1].verdict == verdict::faster ? 1 : 0;
    const auto q = krex::compare_schedule(synth({1.0, 1.0}, order, 0, 0.012, seed + 500), order);
    decided += (q[1].verdict == verdict::faster || q[1].verdict == verdict::slower) ? 1 : 0;
  }
  EXPECT_GE(right, 190);
  EXPECT_EQ(wrong, 0);
  EXPECT_LE(decided, 4);
}

// The first sample on each new placement is 1.5% slower. With ABBA BAAB it
// falls on each candidate in half the double rounds, and identical
// candidates stay same-or-unsure; with ABBA ABBA it always falls on A, and
// the same samples call B faster: the test tells the two orders apart.
TEST(Compare, ASlowOpenerFallsOnBothCandidatesAlike) {
  const int n = 120;
  const std::vector<int> order = krex::detail::compare_order(2, n, 1);
  std::vector<int> abba;
  for (int j = 0; j < n; j += 2) abba.insert(abba.end(), {0, 1, 1, 0});
  int decided = 0, decided_abba = 0;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const auto r =
        krex::compare_schedule(synth({1.0, 1.0}, order, 0, 0.002, seed, 0, 0.015), order);
    decided += (r[1].verdict == verdict::faster || r[1].verdict == verdict::slower) ? 1 : 0;
    const auto q = krex::compare_schedule(synth({1.0, 1.0}, abba, 0, 0.002, seed, 0, 0.015), abba);
    decided_abba += q[1].verdict == verdict::faster ? 1 : 0;
  }
  EXPECT_LE(decided, 10);
  EXPECT_GE(decided_abba, 150);
}

// Both candidates drift upward by 20% over the run (clocks, heat): the 2%
// faster one is still called faster because each pair is taken side by side.
// The same drift with the candidates timed one after the other (no
// interleaving) calls it slower: the test can tell the two apart.
TEST(Compare, ADriftingPairIsStillCalledRightWhenInterleaved) {
  const std::vector<int> order = krex::detail::compare_order(2, 60, 1);
  EXPECT_GE(seeds_where(200, [&](std::uint64_t seed) {
              const auto t = synth({1.0, 0.98}, order, 0.2, 0.005, seed);
              return krex::compare_schedule(t, order)[1].verdict == verdict::faster;
            }),
            190);
  EXPECT_GE(seeds_where(200, [&](std::uint64_t seed) {
              const auto t = synth({1.0, 0.98}, blocked(2, 60), 0.2, 0.005, seed);
              return krex::compare_samples(t)[1].verdict == verdict::slower;
            }),
            190);
}

// Issue 19's two levels: samples at odd positions 3% faster (the batched
// loop's alternation with the L2 flush count). Pairs of the same parity
// still find a 1% difference; pairs taken within a round (one odd, one even)
// split into two modes 6% apart and cannot: the test tells them apart.
TEST(Compare, APeriodTwoLevelFallsOnBothMembersOfAPair) {
  const std::vector<int> order = krex::detail::compare_order(2, 60, 1);
  const auto two_level = [&](std::uint64_t seed) {
    return synth({1.0, 1.01}, order, 0, 0.002, seed, 0.03);
  };
  EXPECT_GE(seeds_where(200, [&](std::uint64_t seed) {
              return krex::compare_schedule(two_level(seed), order)[1].verdict == verdict::slower;
            }),
            190);
  EXPECT_LE(seeds_where(200, [&](std::uint64_t seed) {
              return krex::compare_samples(two_level(seed))[1].verdict == verdict::slower;
            }),
            20);
}

TEST(Compare, ThreeCandidatesEachAgainstTheFirst) {
  const std::vector<int> order = krex::detail::compare_order(3, 60, 5);
  int ok = 0;
  for (std::uint64_t seed = 1; seed <= 100; ++seed) {
    const auto r = krex::compare_schedule(synth({1.0, 0.97, 1.0}, order, 0.1, 0.005, seed), order);
    ASSERT_EQ(r.size(), 3U);
    EXPECT_EQ(r[0].verdict, verdict::baseline);
    EXPECT_NE(r[2].verdict, verdict::faster);
    EXPECT_NE(r[2].verdict, verdict::slower);
    ok += r[1].verdict == verdict::faster ? 1 : 0;
    // Bonferroni over 2 comparisons: each interval at >= 99.5%.
    EXPECT_GE(r[1].coverage, 0.995);
  }
  EXPECT_GE(ok, 95);
}

TEST(Compare, PairedDifferenceAndRatioOfFixedSamples) {
  std::vector<std::vector<double>> s{{1, 1, 1, 1, 1, 1, 1}, {2, 2, 2, 2, 2, 2, 3}};
  const auto r = krex::compare_samples(s, 0.005, 0.95);
  EXPECT_DOUBLE_EQ(r[1].ratio, 2);
  EXPECT_DOUBLE_EQ(r[1].diff_ms, 1);
  EXPECT_DOUBLE_EQ(r[1].low, 2);
  EXPECT_DOUBLE_EQ(r[1].high, 3);  // 7 pairs at 95%: k = 1, [x_(1), x_(7)]
  EXPECT_DOUBLE_EQ(r[1].coverage, 1 - 2.0 / 128);
  EXPECT_EQ(r[1].pairs, 7);
  EXPECT_EQ(r[1].verdict, verdict::slower);
}

TEST(Compare, StatisticsErrorsSayWhatToDo) {
  const std::vector<double> ten(10, 1.0);
  EXPECT_NE(options_error([&] { krex::compare_samples({ten}); }).find("needs at least 2"),
            std::string::npos);
  EXPECT_NE(options_error([&] {
              krex::compare_samples({ten, std::vector<double>(9, 1.0)});
            }).find("same number of samples"),
            std::string::npos);
  std::vector<double> zero = ten;
  zero[3] = 0;
  EXPECT_NE(options_error([&] {
              krex::compare_samples({ten, zero});
            }).find("not a positive time"),
            std::string::npos);
  const std::vector<double> seven(7, 1.0);
  const std::string few = options_error([&] { krex::compare_samples({seven, seven}); });
  EXPECT_NE(few.find("needs at least 8"), std::string::npos) << few;  // at 0.99
  EXPECT_NO_THROW(krex::compare_samples({seven, seven}, 0.005, 0.95));  // 6 at 0.95
  EXPECT_NE(options_error([&] {
              krex::compare_samples({ten, ten}, -0.1);
            }).find("tolerance"),
            std::string::npos);
  EXPECT_NE(options_error([&] {
              krex::compare_samples({ten, ten}, 0.005, 1.0);
            }).find("confidence"),
            std::string::npos);
}

// The host loop in a real region: CPU spin "kernels" of different lengths,
// two placements, three candidates.
TEST(Compare, HostLoopInsideARegion) {
  scoped_segment seg;
  krex::tenant t{seg.opts()};
  krex::region r{t};
  std::vector<std::vector<int>> seen(3);
  const auto spin = [&](int c, std::uint64_t ns) {
    return [&seen, c, ns](krex::placement p) {
      seen[static_cast<std::size_t>(c)].push_back(p.index);
      krex_test::spin_for(ns);
    };
  };
  krex::compare_options o;
  o.measure.warmup = 1;
  o.measure.samples = 30;
  o.measure.placements = 2;
  o.measure.placement_bytes = 4096;
  o.tolerance = 0.05;  // a shared CI machine: spins are exact, preemption is not
  const krex::compare_result c = krex::compare(
      r, {{"a", spin(0, 300'000)}, {"b", spin(1, 450'000)}, {"a2", spin(2, 300'000)}}, o);
  ASSERT_EQ(c.candidates.size(), 3U);
  EXPECT_EQ(c.names, (std::vector<std::string>{"a", "b", "a2"}));
  EXPECT_EQ(c.method, "host");
  ASSERT_EQ(c.order.size(), 90U);
  for (std::size_t i = 0; i < 3; ++i) {
    const krex::measure_result& m = c.candidates[i];
    ASSERT_EQ(m.samples_ms.size(), 30U);
    EXPECT_GE(m.min_ms, 0.29);
    ASSERT_EQ(m.placement.size(), 30U);
    for (std::size_t j = 0; j < 30; ++j) EXPECT_EQ(m.placement[j], static_cast<int>((j / 2) % 2));
    EXPECT_EQ(m.placement_median_ms.size(), 2U);
    EXPECT_EQ(m.placement_bytes, 4096U);
    // Warm-up: max(1, 2K) = 4 calls (placements 0 0 1 1), then the 30 samples,
    // two per placement in turn (both samples of a double round on one).
    ASSERT_EQ(seen[i].size(), 34U);
    EXPECT_EQ(std::vector<int>(seen[i].begin(), seen[i].begin() + 4),
              (std::vector<int>{0, 0, 1, 1}));
    EXPECT_EQ(seen[i][4 + 7], 1);
    EXPECT_EQ(seen[i][4 + 8], 0);
  }
  EXPECT_EQ(c.vs_first[0].verdict, verdict::baseline);
  EXPECT_EQ(c.vs_first[1].verdict, verdict::slower) << c.vs_first[1].ratio;
  EXPECT_NEAR(c.vs_first[1].ratio, 1.5, 0.2);
  EXPECT_NE(c.vs_first[2].verdict, verdict::faster) << c.vs_first[2].ratio;
  EXPECT_NE(c.vs_first[2].verdict, verdict::slower) << c.vs_first[2].ratio;

  // Two candidates, bodies without a placement (K = 1): ABBA in time.
  std::vector<char> calls;
  krex::compare_options two;
  two.measure.warmup = 0;
  two.measure.samples = 8;
  const krex::compare_result d = krex::compare(krex::unprotected,
                                               {[&] {
                                                  calls.push_back('A');
                                                  krex_test::spin_for(100'000);
                                                },
                                                [&](int) {
                                                  calls.push_back('B');
                                                  krex_test::spin_for(100'000);
                                                }},
                                               two);
  EXPECT_EQ(std::string(calls.begin(), calls.end()), "ABBABAABABBABAAB");
  EXPECT_EQ(d.order, krex::detail::compare_order(2, 8, 1));
  // The verdicts are compare_schedule's over the samples and that order.
  std::vector<std::vector<double>> times;
  for (const krex::measure_result& m : c.candidates) times.push_back(m.samples_ms);
  const auto again = krex::compare_schedule(times, c.order, o.tolerance, o.confidence);
  EXPECT_DOUBLE_EQ(again[1].ratio, c.vs_first[1].ratio);
  EXPECT_DOUBLE_EQ(again[2].low, c.vs_first[2].low);
}

TEST(Compare, LoopErrorsSayWhatToDo) {
  krex::compare_options o;
  o.measure.samples = 10;
  const auto body = [](krex::placement) {};
  EXPECT_NE(options_error([&] { krex::compare(krex::unprotected, {body}, o); }).find("krex::measure"),
            std::string::npos);
  o.measure.placements = 2;
  const std::string w = options_error([&] {
    krex::compare(krex::unprotected, {body, krex::candidate{"plain", [] {}}}, o);
  });
  EXPECT_NE(w.find("candidate 1 (plain) does not take a krex::placement"), std::string::npos) << w;
  o.measure.placements = 1;
  o.measure.retake_throttled = true;
  EXPECT_NE(options_error([&] {
              krex::compare(krex::unprotected, {body, body}, o);
            }).find("retake_throttled"),
            std::string::npos);
  o.measure.samples = 6;
  o.measure.placements = 4;  // 4 placements need 8 samples: two per placement
  o.measure.retake_throttled = false;
  EXPECT_NE(options_error([&] {
              krex::compare(krex::unprotected, {body, body}, o);
            }).find("need at least 8 samples per candidate"),
            std::string::npos);
  o.measure.placements = 1;  // 8: enough for two candidates, not for three (Bonferroni: 9)
  o.measure.samples = 8;
  EXPECT_NO_THROW(krex::compare(krex::unprotected, {body, body}, o));
  EXPECT_NE(options_error([&] {
              krex::compare(krex::unprotected, {body, body, body}, o);
            }).find("raise samples"),
            std::string::npos);
}
