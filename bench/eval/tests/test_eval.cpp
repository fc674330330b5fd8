// SPDX-License-Identifier: Apache-2.0
// The evaluation's statistics (bench/eval/stats.hpp: sample-level tails,
// construction-order flips, the issue-11 targets, the repetition for
// persistent workers), its candidates and command ids (candidates.hpp), its
// plan (plan.hpp), its JSON line format (json.hpp), and the driver krex_eval
// run for real, as separate processes, with a stand-in worker
// (helper_eval_worker): dispatch, both command shapes (the krex modes'
// persistent workers on a real krex::pool), placements, the flips beside the
// fresh-process reference, timings, the summary, faults (a failed check, a
// crashed worker, a hung worker) and every usage error.

#include "errors.hpp"
#include "proc_util.hpp"
#include "../candidates.hpp"
#include "../json.hpp"
#include "../plan.hpp"
#include "../pool_host.hpp"
#include "../stats.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>

namespace {

TEST(EvalStats, Quantiles) {
  EXPECT_TRUE(std::isnan(krex_eval::quantile({}, 0.5)));
  EXPECT_DOUBLE_EQ(krex_eval::quantile({3, 1, 2}, 0.5), 2);
  EXPECT_DOUBLE_EQ(krex_eval::quantile({1, 2, 3, 4}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(krex_eval::quantile({5}, 0.95), 5);
  EXPECT_NEAR(krex_eval::quantile({0, 10}, 0.95), 9.5, 1e-12);
  EXPECT_NEAR(krex_eval::inflation_pct(1.05, 1.0), 5.0, 1e-9);
  EXPECT_NEAR(krex_eval::inflation_pct(0.99, 1.0), -1.0, 1e-9);
}

TEST(EvalStats, OrderAgreement) {
  const auto same = krex_eval::compare_order({1, 2, 3, 4}, {10, 20, 30, 40});
  EXPECT_EQ(same.pairs, 6u);
  EXPECT_EQ(same.flips, 0u);
  EXPECT_DOUBLE_EQ(same.tau(), 1.0);
  const auto rev = krex_eval::compare_order({1, 2, 3, 4}, {4, 3, 2, 1});
  EXPECT_EQ(rev.flips, 6u);
  EXPECT_DOUBLE_EQ(rev.tau(), -1.0);
  EXPECT_DOUBLE_EQ(rev.flip_rate(), 1.0);
  const auto one = krex_eval::compare_order({1, 2, 3}, {2, 1, 3});  // one adjacent swap
  EXPECT_EQ(one.flips, 1u);
  EXPECT_NEAR(one.tau(), 1.0 / 3.0, 1e-12);
  const auto tie = krex_eval::compare_order({1, 2}, {5, 5});  // a tie is neither
  EXPECT_EQ(tie.pairs, 1u);
  EXPECT_EQ(tie.flips + tie.concordant, 0u);
  krex_eval::rank_agreement sum;
  sum += same;
  sum += rev;
  EXPECT_EQ(sum.pairs, 12u);
  EXPECT_DOUBLE_EQ(sum.flip_rate(), 0.5);
  EXPECT_TRUE(std::isnan(krex_eval::rank_agreement{}.tau()));
}

TEST(EvalStats, BandsAndBound) {
  const auto b = krex_eval::bands();
  ASSERT_EQ(b.size(), 4u);
  EXPECT_TRUE(b[0].contains(0.05));
  EXPECT_FALSE(b[0].contains(0.2));
  EXPECT_TRUE(b[1].contains(0.2));   // >0.1ms
  EXPECT_TRUE(b[1].contains(50));    // nested: over 0.1 ms includes over 10 ms
  EXPECT_FALSE(b[2].contains(0.5));  // >1ms
  EXPECT_TRUE(b[3].contains(10.5));
  EXPECT_FALSE(b[3].contains(10.0));
  EXPECT_DOUBLE_EQ(krex_eval::paper_p95_target(">10ms"), 0.30);
  EXPECT_DOUBLE_EQ(krex_eval::bound_speedup(16, 1000, 100), 10.0);  // region-bound
  EXPECT_DOUBLE_EQ(krex_eval::bound_speedup(4, 1000, 100), 4.0);    // concurrency-bound
  EXPECT_DOUBLE_EQ(krex_eval::bound_speedup(4, 1000, 0), 4.0);
}

TEST(EvalStats, SampleLevelTails) {
  // 100 inflations: 95 at 0%, 5 at +50% (a tail one command in 20 has).
  std::vector<double> v(95, 0.0);
  v.insert(v.end(), 5, 50.0);
  v.push_back(NAN);  // not counted
  const krex_eval::tail_stats t = krex_eval::tails(v);
  EXPECT_EQ(t.n, 100u);
  EXPECT_DOUBLE_EQ(t.p50, 0);
  EXPECT_NEAR(t.p95, 0.05 * 50, 1e-9);  // between the 95th (0) and the 96th (50) value
  EXPECT_DOUBLE_EQ(t.p99, 50);
  EXPECT_DOUBLE_EQ(t.over_1pct, 0.05);
  const krex_eval::tail_stats none = krex_eval::tails({});
  EXPECT_EQ(none.n, 0u);
  EXPECT_TRUE(std::isnan(none.p95) && std::isnan(none.over_1pct));
  // Every sample against the reference median of its kernel.
  std::vector<double> out;
  krex_eval::append_inflations({1.0, 1.02, 0.99, NAN}, 1.0, &out);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_NEAR(out[1], 2.0, 1e-9);
  EXPECT_NEAR(out[2], -1.0, 1e-9);
  krex_eval::append_inflations({1.0}, NAN, &out);  // no reference: nothing
  krex_eval::append_inflations({1.0}, 0, &out);
  EXPECT_EQ(out.size(), 3u);
  EXPECT_DOUBLE_EQ(krex_eval::tails({0.5, 1.0, 1.5, 2.0}).over_1pct, 0.5);  // strictly more than 1%
}

TEST(EvalStats, ConstructionOrderFlips) {
  krex_eval::rank_totals t;
  // The configuration swaps members 1 and 2; the reference has them right.
  t.add_trial({{1.00, 1.00, 0}, {1.01, 1.03, 1}, {1.02, 1.02, 2}});
  EXPECT_EQ(t.vs_reference.pairs, 3u);
  EXPECT_EQ(t.vs_reference.flips, 1u);
  EXPECT_EQ(t.vs_construction.flips, 1u);
  // The reference itself misorders 0 and 1 and the configuration does not:
  // a flip against the reference, none against the construction order.
  t.add_trial({{1.02, 1.00, 0}, {1.01, 1.01, 1}, {1.03, 1.03, 2}});
  EXPECT_EQ(t.vs_reference.flips, 2u);
  EXPECT_EQ(t.vs_construction.flips, 1u);
  EXPECT_EQ(t.vs_construction.pairs, 6u);
  EXPECT_EQ(t.trials, 2u);
  EXPECT_NEAR(t.tau_mean(), 1.0 / 3.0, 1e-12);  // both trials: (2 - 1) / 3
  t.add_trial({{1.0, 1.0, 0}});  // one member: no pairs, no trial
  EXPECT_EQ(t.trials, 2u);
  EXPECT_TRUE(std::isnan(krex_eval::rank_totals{}.tau_mean()));
}

TEST(EvalStats, RepetitionForPersistentWorkers) {
  EXPECT_EQ(krex_eval::copies_for_workers(41, 16, 10), 4u);  // 164 >= 160
  EXPECT_EQ(krex_eval::copies_for_workers(40, 16, 10), 4u);  // exactly 160
  EXPECT_EQ(krex_eval::copies_for_workers(18, 2, 10), 2u);
  EXPECT_EQ(krex_eval::copies_for_workers(100, 2, 10), 1u);
  EXPECT_EQ(krex_eval::copies_for_workers(10, 4, 0), 1u);  // off
  EXPECT_EQ(krex_eval::copies_for_workers(0, 4, 10), 1u);
  const std::vector<std::string> order = {"a", "b", "c", "d", "e", "f", "g"};
  std::mt19937 rng(7);
  const auto list = krex_eval::repeat_for_workers(order, 4, 10, rng);
  ASSERT_EQ(list.size(), 6u * order.size());  // ceil(40 / 7) = 6 copies
  EXPECT_GE(list.size(), 40u);
  EXPECT_TRUE(std::equal(order.begin(), order.end(), list.begin()));  // the first copy is the order
  std::map<std::string, int> n;
  for (const auto& x : list) ++n[x];
  for (const auto& x : order) EXPECT_EQ(n[x], 6) << x;  // every command equally often
  bool reshuffled = false;
  for (std::size_t k = 1; k < 6; ++k)
    reshuffled = reshuffled || !std::equal(order.begin(), order.end(), list.begin() + static_cast<long>(k * order.size()));
  EXPECT_TRUE(reshuffled);
}

TEST(EvalStats, Issue11TargetsFromData) {
  EXPECT_DOUBLE_EQ(krex_eval::issue11_p95_target(">0.1ms"), 2.5);
  EXPECT_DOUBLE_EQ(krex_eval::issue11_p95_target(">1ms"), 1.0);
  EXPECT_DOUBLE_EQ(krex_eval::issue11_p95_target(">10ms"), 0.2);
  EXPECT_TRUE(std::isnan(krex_eval::issue11_p95_target("<=0.1ms")));
  EXPECT_EQ(krex_eval::at_most(0.19, 0.2), krex_eval::verdict::pass);
  EXPECT_EQ(krex_eval::at_most(0.21, 0.2), krex_eval::verdict::fail);
  EXPECT_EQ(krex_eval::at_most(NAN, 0.2), krex_eval::verdict::na);
  EXPECT_EQ(krex_eval::at_least(4.0, 4.0), krex_eval::verdict::pass);
  EXPECT_STREQ(krex_eval::to_string(krex_eval::verdict::fail), "FAIL");
  // Persistent: 1.07x lock-only beats lock-only but misses 1.15x; 5x serial.
  auto p = krex_eval::throughput_targets(300, 280, 60, true);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].outcome, krex_eval::verdict::pass);
  EXPECT_NEAR(p[0].value, 300.0 / 280.0, 1e-12);
  EXPECT_EQ(p[1].outcome, krex_eval::verdict::pass);
  EXPECT_NEAR(p[1].value, 5.0, 1e-12);
  EXPECT_EQ(p[2].outcome, krex_eval::verdict::fail);
  // Process shape: slower than lock-only, under 4x serial; no 1.15x target.
  auto q = krex_eval::throughput_targets(180, 210, 48, false);
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].outcome, krex_eval::verdict::fail);
  EXPECT_EQ(q[1].outcome, krex_eval::verdict::fail);
  // No lock-only configuration at that C and shape: not measurable.
  EXPECT_EQ(krex_eval::throughput_targets(180, NAN, 48, false)[0].outcome, krex_eval::verdict::na);
}

TEST(EvalStats, BusyThroughput) {
  // Two slots: ends at 10, 20, 25, 30, 40 s; the last start at 30 s. Busy
  // window 10..30 s: the commands ending at 20, 25 and 30 s, 3 in 20 s.
  const std::vector<std::pair<double, double>> se = {
      {0, 10000}, {0, 20000}, {10000, 25000}, {20000, 30000}, {25000, 40000}, {30000, 41000}};
  EXPECT_NEAR(krex_eval::busy_cpm(se), 3.0 / 20.0 * 60.0, 1e-9);
  EXPECT_TRUE(std::isnan(krex_eval::busy_cpm({})));
  EXPECT_TRUE(std::isnan(krex_eval::busy_cpm({{0, 10}, {0, 20}})));  // never busy past the first end
}

TEST(EvalCandidates, TableIsConsistent) {
  const auto all = krex_eval::all_candidates();
  std::set<std::string> ids;
  std::map<std::string, std::set<int>> sets;
  double lo = 1e9, hi = 0;
  for (const auto& c : all) {
    EXPECT_TRUE(ids.insert(c.id).second) << "duplicate id " << c.id;
    EXPECT_GT(c.est_ms, 0) << c.id;
    const int s = krex_eval::samples_for(c);
    EXPECT_GE(s, 10);
    EXPECT_LE(s, 100);
    lo = std::min(lo, c.est_ms), hi = std::max(hi, c.est_ms);
    if (!c.set.empty()) {
      EXPECT_TRUE(sets[c.set].insert(c.set_pos).second) << c.id;
    }
    EXPECT_EQ(krex_eval::find_candidate(all, c.id), &c);
  }
  EXPECT_LE(lo, 0.02);  // ~10 us ...
  EXPECT_GE(hi, 40);    // ... to ~50 ms
  EXPECT_GE(sets.size(), 4u);
  for (const auto& kv : sets) EXPECT_GE(kv.second.size(), 4u) << kv.first;
  EXPECT_EQ(krex_eval::find_candidate(all, "no-such-kernel"), nullptr);
}

TEST(EvalCandidates, RankSetsAreOrderedByConstruction) {
  const auto all = krex_eval::all_candidates();
  std::map<std::string, std::map<int, const krex_eval::candidate*>> sets;
  for (const auto& c : all)
    if (!c.set.empty()) sets[c.set][c.set_pos] = &c;
  std::size_t fine = 0;
  for (const auto& kv : sets) {
    const bool is_fine = krex_eval::is_fine_set(kv.first);
    fine += is_fine ? 1 : 0;
    const krex_eval::candidate* prev = nullptr;
    for (const auto& m : kv.second) {
      EXPECT_EQ(m.second->fam, kv.second.begin()->second->fam) << m.second->id;
      EXPECT_EQ(m.second->variant, kv.second.begin()->second->variant) << m.second->id;
      if (prev != nullptr) {
        const double gap = krex_eval::work_of(*m.second) / krex_eval::work_of(*prev) - 1;
        if (is_fine) {  // neighbours 0.1-0.5% apart
          EXPECT_GE(gap, 0.00095) << m.second->id;
          EXPECT_LE(gap, 0.005) << m.second->id;
        } else if (krex_eval::is_wide_set(kv.first)) {  // wide: every pair > 5% apart
          EXPECT_GE(gap, 0.06) << m.second->id;
        } else {  // coarse: 1-5% apart
          EXPECT_GE(gap, 0.009) << m.second->id;
        }
      }
      prev = m.second;
    }
  }
  EXPECT_GE(fine, 3u);
  // The fine sets span the > 0.1 ms, > 1 ms and > 10 ms bands (rough H200 durations).
  std::set<int> bands;
  for (const auto& kv : sets)
    if (krex_eval::is_fine_set(kv.first)) {
      const double ms = kv.second.begin()->second->est_ms;
      bands.insert(ms > 10 ? 3 : ms > 1 ? 2 : ms > 0.1 ? 1 : 0);
    }
  EXPECT_EQ(bands, (std::set<int>{1, 2, 3}));
  // Existing ids keep their sets: new sets are appended, never merged into old ones.
  const auto* g = krex_eval::find_candidate(all, "gemm-t16m1-4096x4096x4096");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->set, "gemm-4K-t16");
  EXPECT_EQ(g->set_pos, 0);
  const auto* a = krex_eval::find_candidate(all, "axpby-vec4-16777216");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->set, "axpby-16M");
  EXPECT_FALSE(krex_eval::is_fine_set("-fine"));
  EXPECT_FALSE(krex_eval::is_fine_set("gemm-2K"));
  // The wide sets (the > 5% gap class) are outside the default selection, like the fine ones.
  std::size_t wide = 0;
  for (const auto& kv : sets) wide += krex_eval::is_wide_set(kv.first) ? 1 : 0;
  EXPECT_GE(wide, 2u);
  EXPECT_STREQ(krex_eval::set_kind("axpby-16M-wide"), "wide");
  EXPECT_STREQ(krex_eval::set_kind("axpby-448M-fine"), "fine");
  EXPECT_STREQ(krex_eval::set_kind("axpby-16M"), "coarse");
  for (const auto& c : all)
    EXPECT_EQ(krex_eval::in_default_selection(c), !krex_eval::is_fine_set(c.set) && !krex_eval::is_wide_set(c.set))
        << c.id;
}

TEST(EvalCandidates, CommandIdsAndTimings) {
  std::string id, why;
  krex_eval::timing t;
  ASSERT_TRUE(krex_eval::parse_command("gemm-t32m4-512x512x512", &id, &t, &why)) << why;
  EXPECT_EQ(id, "gemm-t32m4-512x512x512");
  EXPECT_EQ(t.name(), "batched");
  for (const krex_eval::timing x : {krex_eval::timing{true, 0}, krex_eval::timing{false, 250},
                                    krex_eval::timing{true, 40}}) {
    const std::string cmd = krex_eval::command_id("axpby-vec1-4194304", x);
    ASSERT_TRUE(krex_eval::parse_command(cmd, &id, &t, &why)) << cmd << ": " << why;
    EXPECT_EQ(id, "axpby-vec1-4194304");
    EXPECT_EQ(t.sync_each, x.sync_each) << cmd;
    EXPECT_EQ(t.loop_ms, x.loop_ms) << cmd;
  }
  EXPECT_EQ(krex_eval::command_id("k", {true, 250}), "k@sync@loop250");
  EXPECT_EQ((krex_eval::timing{true, 250}).name(), "sync+loop");
  for (const char* bad : {"k@bogus", "k@loop0", "k@loopx", "k@loop", "k@sync@sync", "@sync", "k@", "k@loop5@loop6"}) {
    EXPECT_FALSE(krex_eval::parse_command(bad, &id, &t, &why)) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
  // The plans: sync only sets sync_each; the loop fills about loop_ms.
  const auto all = krex_eval::all_candidates();
  for (const auto& c : all) {
    const auto base = krex_eval::plan_for(c, {});
    EXPECT_EQ(base.samples, krex_eval::samples_for(c));
    EXPECT_FALSE(base.sync_each);
    EXPECT_EQ(base.warmup_ms, 0);
    EXPECT_TRUE(krex_eval::plan_for(c, {true, 0}).sync_each);
    const auto loop = krex_eval::plan_for(c, {false, 400});
    EXPECT_GE(loop.samples, base.samples) << c.id;
    EXPECT_LE(loop.samples, 2000);
    EXPECT_GE(loop.warmup_ms, 0);
    // At least about the loop asked for, and never shorter than the default loop.
    EXPECT_GE(krex_eval::est_loop_ms(c, {false, 400}), 400 * 0.99) << c.id;
    EXPECT_GE(krex_eval::est_loop_ms(c, {false, 400}), krex_eval::est_loop_ms(c, {})) << c.id;
  }
}

TEST(EvalPlan, LoopWorkloadAndEstimates) {
  const auto all = krex_eval::all_candidates();
  for (const auto& c : all) {
    // The loop is about pct of the estimated command.
    const int ms = krex_eval::loop_ms_for(c, 12);
    const double share = ms / (krex_eval::est_setup_ms(c) + ms);
    EXPECT_NEAR(share, 0.12, 0.005) << c.id;
    EXPECT_GT(krex_eval::est_command_s(c, {}), 0.5) << c.id;
    EXPECT_GE(krex_eval::est_command_s(c, {false, ms}), krex_eval::est_command_s(c, {})) << c.id;
  }
  // More concurrency never estimates slower throughput; persistent workers never slower than processes.
  for (const char* mode : {"unprotected", "lock", "krex", "krex-all", "krex-mps"}) {
    double prev = 0;
    for (int c = 1; c <= 32; c *= 2) {
      const double s = krex_eval::est_speedup(mode, c, false);
      EXPECT_GE(s, prev) << mode << " C=" << c;
      EXPECT_GE(krex_eval::est_speedup(mode, c, true), s) << mode << " C=" << c;
      prev = s;
    }
  }
  EXPECT_DOUBLE_EQ(krex_eval::est_speedup("serial", 1, false), 1.0);
  EXPECT_DOUBLE_EQ(krex_eval::est_config_s(100, "serial", 1, false), 100);
}

// Placements: the default K is one constant, K shrinks to what the budget
// and the samples allow (never below 1), and samples round up to a multiple of K.
TEST(EvalPlan, PlacementsWithinTheBudget) {
  EXPECT_EQ(krex_eval::default_placements, 8);
  const auto all = krex_eval::all_candidates();
  const auto* axpby = krex_eval::find_candidate(all, "axpby-vec4-16777216");
  const auto* gemm = krex_eval::find_candidate(all, "gemm-t16m1-4096x4096x4096");
  ASSERT_NE(axpby, nullptr);
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(krex_eval::input_bytes(*axpby), 3LL * 4 * 16777216);  // x, y, z
  EXPECT_EQ(krex_eval::input_bytes(*gemm), 3LL * 4 * 4096 * 4096);  // A, B, C
  for (const auto& c : all) EXPECT_GT(krex_eval::input_bytes(c), 0) << c.id;
  const long long mib = 1LL << 20, per = krex_eval::input_bytes(*axpby);  // 192 MiB
  EXPECT_EQ(krex_eval::placements_within(8, per, 0, 100), 8);            // no budget
  EXPECT_EQ(krex_eval::placements_within(8, per, 4096 * mib, 100), 8);   // 1.5 GiB fits
  EXPECT_EQ(krex_eval::placements_within(8, per, 1024 * mib, 100), 5);   // 5 x 192 = 960 MiB
  EXPECT_EQ(krex_eval::placements_within(8, per, 100 * mib, 100), 1);    // not even one copy: the inputs
  EXPECT_EQ(krex_eval::placements_within(8, per, 0, 6), 6);              // no more than the samples
  EXPECT_EQ(krex_eval::placements_within(1, per, 0, 100), 1);
  EXPECT_EQ(krex_eval::placements_within(0, per, 0, 100), 1);
  // Samples round up to a multiple of K only where that adds at most 5%: 10
  // samples over 8 copies stay 10 (16 would be 60% more region time).
  EXPECT_EQ(krex_eval::samples_for_placements(10, 8), 10);
  EXPECT_EQ(krex_eval::samples_for_placements(30, 8), 30);    // 32 would be +6.7%
  EXPECT_EQ(krex_eval::samples_for_placements(40, 8), 40);
  EXPECT_EQ(krex_eval::samples_for_placements(100, 8), 104);  // +4%
  EXPECT_EQ(krex_eval::samples_for_placements(342, 8), 344);
  EXPECT_EQ(krex_eval::samples_for_placements(96, 8), 96);
  EXPECT_EQ(krex_eval::samples_for_placements(13, 1), 13);
  EXPECT_EQ(krex_eval::placements_within(8, per, 0, 10), 8);  // K does not follow the samples
  for (int n = 1; n <= 400; ++n) {
    const int k = krex_eval::placements_within(8, per, 0, n);
    const int s = krex_eval::samples_for_placements(n, k);
    EXPECT_TRUE(s == n || s % k == 0) << n;
    EXPECT_LE((s - n) * 20, n) << n << " samples, K " << k;
  }
}

// A long-lived worker's kept copies serve the next command only when they
// are as many copies of as many buffers, each at least as large, within the
// budget; K = 1 never keeps (its inputs are allocated for the command).
TEST(EvalPlan, KeptPlacementsReusedOnlyWhenTheyFit) {
  using v = std::vector<std::size_t>;
  const v kept{300, 300, 300};
  EXPECT_TRUE(krex_eval::placements_reusable(8, kept, 7200, 8, v{300, 300, 300}, 0));
  EXPECT_TRUE(krex_eval::placements_reusable(8, kept, 7200, 8, v{200, 300, 100}, 8000));
  EXPECT_FALSE(krex_eval::placements_reusable(8, kept, 7200, 8, v{301, 300, 300}, 0));  // one larger
  EXPECT_FALSE(krex_eval::placements_reusable(8, kept, 7200, 4, v{300, 300, 300}, 0));  // other K
  EXPECT_FALSE(krex_eval::placements_reusable(8, kept, 7200, 8, v{300, 300}, 0));       // other buffers
  EXPECT_FALSE(krex_eval::placements_reusable(8, kept, 7200, 8, v{10, 10, 10}, 7000));  // over budget
  EXPECT_FALSE(krex_eval::placements_reusable(1, v{300}, 300, 1, v{300}, 0));          // K = 1
  EXPECT_FALSE(krex_eval::placements_reusable(8, v{}, 0, 8, v{}, 0));
}

// Flips beside the fresh-process reference, on synthetic trials: a
// configuration that swaps the 1%-apart pair of every trial against one that
// never does, and the targets in points.
TEST(EvalStats, FlipsBesideTheFreshProcessReference) {
  // Members 100, 101.5, 110 (reference = construction order): one pair at
  // 1-2%, one at 2-5%... 101.5 vs 110 is 8.4%, 100 vs 110 is 10%: >5%.
  const std::vector<double> ref{100.0, 101.5, 110.0};
  krex_eval::rank_totals fresh, pool;
  for (int trial = 0; trial < 10; ++trial) {
    std::vector<krex_eval::rank_member> f, q;
    for (int i = 0; i < 3; ++i) {
      f.push_back({ref[i], ref[i] * 1.001, i});
      // the pool swaps the first two members in 3 trials of 10
      const double got = trial < 3 && i < 2 ? ref[1 - i] : ref[i];
      q.push_back({ref[i], got, i});
    }
    fresh.add_trial(f);
    pool.add_trial(q);
  }
  const auto g = krex_eval::against_fresh(pool.by_gap_construction, fresh.by_gap_construction);
  EXPECT_EQ(g[1].config.pairs, 10u);  // the 1.5% pair, once per trial
  EXPECT_EQ(g[1].config.flips, 3u);
  EXPECT_EQ(g[1].fresh.flips, 0u);
  EXPECT_NEAR(g[1].delta_pts(), 30.0, 1e-9);
  EXPECT_EQ(g[3].config.pairs, 20u);
  EXPECT_NEAR(g[3].delta_pts(), 0.0, 1e-9);
  EXPECT_TRUE(std::isnan(g[0].delta_pts()));  // no pair in 0-1%
  EXPECT_EQ(krex_eval::within_points(g, 1.0), krex_eval::verdict::fail);
  EXPECT_EQ(krex_eval::within_points(g, 30.0), krex_eval::verdict::pass);
  // The other way round the fresh-process reference is 30 points worse: a pass.
  EXPECT_EQ(krex_eval::within_points(krex_eval::against_fresh(fresh.by_gap, pool.by_gap), 1.0),
            krex_eval::verdict::pass);
  EXPECT_NEAR(krex_eval::against_fresh(fresh.by_gap, pool.by_gap)[1].delta_pts(), -30.0, 1e-9);
  // No class with pairs in both: not measurable.
  EXPECT_EQ(krex_eval::within_points(krex_eval::against_fresh(pool.by_gap, {}), 1.0), krex_eval::verdict::na);
}

// The pool host's result lines: the worker's line with the pool's fields
// added, or the pool's reason for a command it could not complete.
TEST(EvalJson, PoolResultLines) {
  krex::pool_result ok;
  ok.status = krex::pool_status::ok;
  ok.value = "{\"id\":\"k\",\"ok\":true}";
  ok.worker = 3;
  krex_eval::flat_record r;
  std::string why;
  ASSERT_TRUE(krex_eval::parse_flat(krex_eval::pool_result_line("k", 7, ok), &r, &why)) << why;
  EXPECT_EQ(r.str("id"), "k");
  EXPECT_EQ(r.num("ok"), 1);
  EXPECT_EQ(r.num("pool_seq"), 7);
  EXPECT_EQ(r.num("pool_worker"), 3);
  EXPECT_EQ(r.str("pool_status"), "ok");
  krex::pool_result crash;
  crash.status = krex::pool_status::crashed;
  crash.error = "worker 1 (pid 42) exited with status 3";
  crash.pid = 42;
  krex_eval::flat_record c;
  ASSERT_TRUE(krex_eval::parse_flat(krex_eval::pool_result_line("k@sync", 8, crash), &c, &why)) << why;
  EXPECT_EQ(c.str("id"), "k@sync");
  EXPECT_EQ(c.num("ok"), 0);
  EXPECT_EQ(c.num("pid"), 42);
  EXPECT_NE(c.str("error").find("the pool worker died without a result (worker 1"), std::string::npos);
  // A broken worker's own line (worker_broken) comes back as it was.
  krex::pool_result broken;
  broken.status = krex::pool_status::failed;
  broken.error = "{\"id\":\"k\",\"ok\":false,\"error\":\"an illegal memory access\"}";
  krex_eval::flat_record b;
  ASSERT_TRUE(krex_eval::parse_flat(krex_eval::pool_result_line("k", 9, broken), &b, &why)) << why;
  EXPECT_EQ(b.str("error"), "an illegal memory access");
  EXPECT_EQ(b.str("pool_status"), "failed");
  EXPECT_EQ(krex_eval::append_fields("{}", krex_eval::json_object().num("a", 1)), "{\"a\":1}");
}

TEST(EvalJson, FlatRoundTrip) {
  krex_eval::json_object o;
  o.str("id", "a\"b\\c\n").num("x", 1.5).boolean("ok", true).boolean("no", false);
  o.nums("s", {1, 2.5, 3}).num("nan", NAN).integer("ns", 1234567890123456LL);
  krex_eval::flat_record r;
  std::string why;
  ASSERT_TRUE(krex_eval::parse_flat(o.text(), &r, &why)) << why << ": " << o.text();
  EXPECT_EQ(r.str("id"), "a\"b\\c\n");
  EXPECT_DOUBLE_EQ(r.num("x"), 1.5);
  EXPECT_DOUBLE_EQ(r.num("ok"), 1);
  EXPECT_DOUBLE_EQ(r.num("no"), 0);
  EXPECT_TRUE(std::isnan(r.num("nan")));
  EXPECT_EQ(static_cast<long long>(r.num("ns")), 1234567890123456LL);  // every digit
  EXPECT_TRUE(std::isnan(r.num("missing")));
  ASSERT_EQ(r.arrays["s"].size(), 3u);
  EXPECT_DOUBLE_EQ(r.arrays["s"][1], 2.5);
  for (const char* bad : {"", "{", "{\"a\":}", "{\"a\":1,}", "{\"a\" 1}", "{\"a\":[1,]}",
                          "{\"a\":1} x", "[1]", "{\"a\":{\"b\":1}}"}) {
    krex_eval::flat_record x;
    EXPECT_FALSE(krex_eval::parse_flat(bad, &x, &why)) << bad;
  }
}

// ---------------------------------------------------------------- the driver
struct run_result {
  int status = -1;
  std::string output;
};

/// Runs `cmd` through the shell (stderr into the output), bounded by `timeout 120`.
run_result run(const std::string& cmd) {
  krex_test::command_result c = krex_test::run_shell("timeout 120 " + cmd + " 2>&1");
  return run_result{c.rc, std::move(c.out)};
}

std::size_t count(const std::string& hay, const std::string& needle) {
  std::size_t n = 0;
  for (auto p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

class EvalDriver : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/krex-test-eval-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir = tmpl;
  }
  void TearDown() override { run("rm -rf '" + dir + "'"); }
  std::string driver(const std::string& args, const std::string& env = "") {
    // The pool workers' segment in the test's directory, not /dev/shm.
    return "env KREX_SHM_DIR='" + dir + "' " + env + " " KREX_EVAL_PATH " --worker " KREX_TEST_BIN_DIR
           "/helper_eval_worker --out '" + dir + "' " + args;
  }
  std::string dir;
};

TEST_F(EvalDriver, RunsEveryShapeAndWritesTheSummary) {
  const auto r = run(driver("--filter gemm-2K,axpby-16M --reps 2 --configs "
                            "serial:1,unprotected:3,lock:2,krex-nopin:2,krex:2:persistent,serial:1",
                            "KREX_FAKE_ENV=KREX_PIN"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string md = krex_test::file_text(dir + "/summary.md");
  const std::string js = krex_test::file_text(dir + "/eval.json");
  // 9 candidates (4 + 5) x 2 reps = 18 commands in each of 6 configurations;
  // the 2 persistent workers run the list twice (at least 10 each: 36).
  EXPECT_NE(md.find("| reference (serial) | 18 | 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| unprotected C=3 | 18 | 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| lock C=2 | 18 | 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| krex C=2 persistent | 36 | 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| native repeat (serial) | 18 | 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| krex C=2 persistent | 36 | 2 | 2 |"), std::string::npos) << md;  // commands per worker
  EXPECT_NE(md.find("| lock C=2 | 18 | 1 | 18 | 1 | 1 | 1 |"), std::string::npos) << md;
  EXPECT_EQ(count(js, "\"label\":"), 6u);
  EXPECT_EQ(count(js, "\"samples_ms\":["), 5u * 18u + 36u);
  EXPECT_EQ(count(js, "\"worker_start_ms\":"), 5u * 18u + 36u);
  // Without noise every order matches the reference: 0 flips, tau 1.
  EXPECT_EQ(count(js, "\"flip_rate\":0,"), 6u) << js.substr(0, 2000);
  // (the config's own tau; each ranking group has a kendall_tau of its own)
  EXPECT_EQ(count(js, "\"flip_rate\":0,\"kendall_tau\":1,"), 6u);
  // Flips by gap class: in the JSON per rank-set kind, and a summary table; none without noise.
  EXPECT_GE(count(js, "\"by_gap\":{\"0-1%\":{\"pairs\":"), 6u);
  EXPECT_EQ(count(js, "\"flips\":1"), 0u);
  EXPECT_NE(md.find("## Ranking by gap class"), std::string::npos) << md;
  EXPECT_NE(md.find("## Device state (quiet step, clocks, throttling)"), std::string::npos) << md;
  // Two rank sets x 2 reps: 4 set trials, 2 x (6 + 10) = 32 pairs; twice that persistent.
  EXPECT_EQ(count(js, "\"rank_pairs\":32,"), 5u);
  EXPECT_EQ(count(js, "\"rank_pairs\":64,"), 1u);
  EXPECT_EQ(count(js, "\"flips_vs_construction\":0,"), 2u * 6u);  // ranked by the median and by p10
  // Every command's start: driver side (ms since the run started) and worker
  // side (CLOCK_MONOTONIC, on the driver's clock): the worker starts the
  // command after the driver sent it and before the driver saw it end.
  std::size_t checked = 0;
  for (auto p = js.find("\"start_ms\":"); p != std::string::npos; p = js.find("\"start_ms\":", p + 1)) {
    const double start = std::atof(js.c_str() + p + 11);
    const auto e = js.find("\"end_ms\":", p);
    const auto w = js.find("\"worker_start_ms\":", p);
    ASSERT_NE(e, std::string::npos);
    ASSERT_NE(w, std::string::npos);
    const double end = std::atof(js.c_str() + e + 9), ws = std::atof(js.c_str() + w + 18);
    EXPECT_GT(start, 0);
    EXPECT_LE(start, ws + 0.01);  // printed to the microsecond
    EXPECT_LE(ws, end + 0.01);
    ++checked;
  }
  EXPECT_EQ(checked, 5u * 18u + 36u);
  // A process per command: every command is its process's first; persistent
  // workers: exactly C=2 first commands.
  EXPECT_EQ(count(js, "\"first_in_process\":true"), 5u * 18u + 2u);
  // The ablation's environment reached its workers (and only theirs).
  EXPECT_EQ(count(js, "\"env\":\"0\""), 18u);
  // Fields the driver does not read reach eval.json as the worker wrote them:
  // addresses (every digit) in every mode, the region's exit clocks in krex's.
  EXPECT_EQ(count(js, "\"flush_addr\":140737488355328,"), 5u * 18u + 36u);
  EXPECT_EQ(count(js, "\"x_addr\":"), 5u * 18u + 36u);
  EXPECT_EQ(count(js, "\"exit_clock_reasons\":4"), 18u + 36u);  // krex-nopin and krex persistent
  // Workers got the driver's lock file and segment.
  EXPECT_NE(md.find("critical-region fraction"), std::string::npos);
}

TEST_F(EvalDriver, NoiseFlipsNearEqualCandidates) {
  const auto r = run(driver("--filter axpby-16M --reps 4 --configs serial:1,unprotected:4,serial:1",
                            "KREX_FAKE_NOISE=0.2"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string js = krex_test::file_text(dir + "/eval.json");
  // +-20% noise on 3% gaps: some pair flips in some configuration.
  EXPECT_LT(count(js, "\"flip_rate\":0,"), 3u) << js.substr(0, 1500);
}

// Two-level samples (KREX_FAKE_BIMODAL, as short bandwidth-bound kernels
// measure): ranked by the median, the even set positions (mostly slow
// samples) overtake the next candidate, 3% slower, in every pass, the
// reference's too, so the flips show against the construction order only;
// ranked by the samples' 10th percentile nothing flips.
TEST_F(EvalDriver, LowQuantileRanksTwoLevelSamplesByTheFastLevel) {
  const auto r = run(driver("--filter axpby-16M --reps 2 --configs serial:1,unprotected:2,serial:1",
                            "KREX_FAKE_BIMODAL=5"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string md = krex_test::file_text(dir + "/summary.md");
  const std::string js = krex_test::file_text(dir + "/eval.json");
  const auto row = [&](const std::string& head) {
    const auto p = md.find("| " + head + " |");
    EXPECT_NE(p, std::string::npos) << head << "\n" << md;
    return p == std::string::npos ? std::string() : md.substr(p, md.find('\n', p) - p);
  };
  for (const std::string cfg : {"reference (serial)", "unprotected C=2", "native repeat (serial)"}) {
    const std::string median = row(cfg + " | all | median"), low = row(cfg + " | all | p10");
    // 8 cells each: 4 gap classes against the reference, 4 against construction.
    EXPECT_EQ(count(low, " 0/"), 8u) << low;          // no flip at all
    // The five candidates 3% apart, medians (x the first's time) 1.05, 1.03,
    // 1.113, 1.09, 1.176: each pass, the reference's too, swaps 0-1 (1-2%
    // apart) and 2-3 (2-5%), so its order is the reference's, and against
    // construction 1 of 1 pair flips at 1-2%, 1 of 2 at 2-5%, 0 of 7 at >5%.
    EXPECT_NE(median.find("| 0/0 (–)* | 0/2 (0.0)* | 0/4 (0.0)* | 0/14 (0.0)* | 0/0 (–)* | 2/2 (100.0)* | "
                          "2/4 (50.0)* | 0/14 (0.0)* |"),
              std::string::npos)
        << median;
  }
  EXPECT_EQ(count(js, "\"ranking_p10\":{"), 3u);
  EXPECT_EQ(count(js, "\"by_gap_construction\":{"), count(js, "\"by_gap\":{"));
  EXPECT_EQ(count(md, "## Ranking by gap class: median or p10"), 1u);
}

TEST_F(EvalDriver, FaultsAreRecordedAndTheRunGoesOn) {
  const std::string bad = krex_eval::all_candidates()[0].id, crash = krex_eval::all_candidates()[1].id,
                    hang = krex_eval::all_candidates()[2].id;
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run(driver("--filter " + bad + "," + crash + "," + hang +
                                " --timeout-s 2 --min-per-worker 0 --configs serial:1,unprotected:2,krex:2:persistent,serial:1",
                            "KREX_FAKE_FAIL=" + bad + " KREX_FAKE_CRASH=" + crash + " KREX_FAKE_HANG=" + hang));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
  EXPECT_EQ(r.status, 1) << r.output;  // failures: exit 1, but every configuration ran
  const std::string md = krex_test::file_text(dir + "/summary.md");
  EXPECT_NE(md.find("## Failed commands (12)"), std::string::npos) << md;
  EXPECT_NE(md.find("wrong result: fake"), std::string::npos);
  EXPECT_NE(md.find("without a result"), std::string::npos);
  EXPECT_NE(r.output.find("passed --timeout-s 2: killed"), std::string::npos) << r.output;
  EXPECT_NE(md.find("| native repeat (serial) | 0 | 3 |"), std::string::npos) << md;
  // The persistent krex workers are a krex::pool: it replaced the crashed
  // worker and killed the hung one at --timeout-s, and each command says so.
  EXPECT_NE(md.find("| krex C=2 persistent | 0 | 3 |"), std::string::npos) << md;
  EXPECT_NE(md.find("- krex C=2 persistent: " + crash + ": the pool worker died without a result ("),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("- krex C=2 persistent: " + hang + ": the pool worker passed --timeout-s and was killed ("),
            std::string::npos)
      << md;
}

// The krex modes' persistent workers run on krex::pool (one
// krex_eval_worker --pool process; the stand-in's pool workers are real
// tenants of the driver's segment, each command's timed loop in a region);
// lock-only's persistent workers keep the eval's own loop. The output is
// the same format either way.
TEST_F(EvalDriver, PersistentKrexRunsThroughKrexPool) {
  const auto r = run(driver("--filter gemm-2K,axpby-16M --configs serial:1,krex:2:persistent,lock:2:persistent,serial:1"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string md = krex_test::file_text(dir + "/summary.md");
  const std::string js = krex_test::file_text(dir + "/eval.json");
  // 9 commands per pass; 2 persistent workers, at least 10 each: 3 copies.
  EXPECT_NE(md.find("| krex C=2 persistent | 27 | 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| lock C=2 persistent | 27 | 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| krex C=2 persistent | 27 | 3 | 2 | "), std::string::npos) << md;
  EXPECT_NE(md.find(" | krex::pool |\n"), std::string::npos) << md;
  EXPECT_NE(md.find("| lock C=2 persistent | 27 | 3 | 2 | "), std::string::npos) << md;
  EXPECT_NE(md.find(" | own loop |\n"), std::string::npos) << md;
  EXPECT_EQ(count(js, "\"runner\":\"krex::pool\""), 1u);
  EXPECT_EQ(count(js, "\"runner\":\"own loop\""), 1u);
  EXPECT_EQ(count(js, "\"runner\":\"process per command\""), 2u);
  // One pool process took all 27 commands in order of arrival.
  EXPECT_EQ(count(js, "\"pool_seq\":"), 27u);
  for (int i = 0; i < 27; ++i) EXPECT_EQ(count(js, "\"pool_seq\":" + std::to_string(i) + ","), 1u) << i;
  EXPECT_EQ(count(js, "\"pool_status\":\"ok\""), 27u);
  // Each pool command's timed loop ran in a region of its worker's tenant
  // (gating and drain; the stand-in freezes nothing), and no two overlapped.
  EXPECT_EQ(count(js, "\"level\":\"gate+drain\""), 27u) << js.substr(0, 3000);
  std::vector<std::pair<long long, long long>> regions;
  for (auto p = js.find("\"mono_critical_ns\":"); p != std::string::npos; p = js.find("\"mono_critical_ns\":", p + 1)) {
    const auto e = js.find("\"mono_critical_end_ns\":", p);
    ASSERT_NE(e, std::string::npos);
    regions.push_back({std::atoll(js.c_str() + p + 19), std::atoll(js.c_str() + e + 23)});
  }
  ASSERT_EQ(regions.size(), 27u);
  std::sort(regions.begin(), regions.end());
  for (std::size_t i = 0; i < regions.size(); ++i) {
    EXPECT_LT(regions[i].first, regions[i].second);
    if (i > 0) {
      EXPECT_LE(regions[i - 1].second, regions[i].first) << "regions " << i - 1 << " and " << i << " overlap";
    }
  }
}

// --placements and --placement-budget-mb reach every worker (the pool's
// too); a command uses as many copies as fit its budget, and the summary
// prints what they cost.
TEST_F(EvalDriver, PlacementsReachTheWorkersWithinTheBudget) {
  const auto r = run(driver("--filter axpby-16M --placements 4 --placement-budget-mb 600 "
                            "--configs serial:1,krex:2:persistent,serial:1"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string md = krex_test::file_text(dir + "/summary.md");
  const std::string js = krex_test::file_text(dir + "/eval.json");
  EXPECT_NE(js.find("\"placements\":4,\"placement_budget_mb\":600,"), std::string::npos);
  // Each candidate's K: the most copies of its inputs within 600 MiB (192 to
  // 202 MiB each: 3, or 2 for the largest), the same in every configuration.
  const auto all = krex_eval::all_candidates();
  std::size_t commands = 0, fewer = 0, reuses = 0;
  for (auto p = js.find("\"candidate\":\""); p != std::string::npos; p = js.find("\"candidate\":\"", p + 1)) {
    const std::string cand = js.substr(p + 13, js.find('"', p + 13) - p - 13);
    const auto* c = krex_eval::find_candidate(all, cand);
    ASSERT_NE(c, nullptr) << cand;
    const int want = krex_eval::placements_within(4, krex_eval::input_bytes(*c), 600LL << 20, 20);
    EXPECT_LT(want, 4);
    const auto k = js.find("\"placements\":", js.find("\"result\":", p));
    ASSERT_NE(k, std::string::npos);
    EXPECT_EQ(std::atoi(js.c_str() + k + 13), want) << cand;
    const auto b = js.find("\"placement_bytes\":", k);
    const auto u = js.find("\"placements_reused\":", js.find("\"result\":", p));
    ASSERT_LT(u, js.find("\"candidate\":\"", p + 1)) << "each result says whether it reused";
    const bool reused = js.compare(u + 20, 4, "true") == 0;
    // Kept copies (a persistent worker's) may be larger than this command's;
    // a command's own are exactly its K copies.
    if (reused)
      EXPECT_GE(std::atoll(js.c_str() + b + 18), want * krex_eval::input_bytes(*c)) << cand;
    else
      EXPECT_EQ(std::atoll(js.c_str() + b + 18), want * krex_eval::input_bytes(*c)) << cand;
    EXPECT_LE(std::atoll(js.c_str() + b + 18), 600LL << 20);
    reuses += reused ? 1 : 0;
    ++commands;
    fewer += want < 4 ? 1 : 0;
  }
  EXPECT_EQ(commands, 5u + 20u + 5u);  // the pool's 2 workers: 4 copies of the list
  EXPECT_EQ(count(js, "\"placements_asked\":4,"), commands);
  EXPECT_EQ(count(js, "\"sample_placement\":[0,1,2,0,1,2,"), 24u) << "K = 3: samples rotate over 3 copies";
  EXPECT_EQ(count(js, "\"sample_placement\":[0,1,0,1,"), 6u);
  // The memory the placements cost, per configuration.
  EXPECT_NE(md.find("## Placements and their memory"), std::string::npos) << md;
  EXPECT_NE(md.find("(--placements 4; --placement-budget-mb 600 per command;"), std::string::npos) << md;
  // The pool's workers keep their copies (the five candidates' sizes differ
  // by 5%: a worker reuses its copies for every smaller one); a fresh process
  // per command never reuses.
  EXPECT_NE(md.find("| krex C=2 persistent | 20 | 2 / 3 / 3 | 20 | " + std::to_string(reuses) + " | "),
            std::string::npos)
      << md;
  EXPECT_GE(reuses, 4u) << "two workers, 20 commands: most reuse";
  EXPECT_LT(reuses, 20u) << "a worker's first command allocates";
  EXPECT_NE(md.find("| reference (serial) | 5 | 2 / 3 / 3 | 5 | 0 | "), std::string::npos) << md;
  EXPECT_EQ(fewer, commands);
  // Without the options: the default K and budget, in the plan too.
  const auto d = run(driver("--filter gemm-2K --plan"));
  ASSERT_EQ(d.status, 0) << d.output;
  EXPECT_NE(d.output.find("every command timed over 8 placement(s) of its inputs (--placements), at most 4096 MiB"),
            std::string::npos)
      << d.output;
}

// Flips beside the fresh-process reference (the native repeat): a pool whose
// short kernels sit on two levels (the stand-in's bimodal samples, in its
// krex workers only) flips against construction where fresh processes do not;
// ranked by the 10th percentile it does not.
TEST_F(EvalDriver, FlipsBesideTheFreshProcessReference) {
  const auto r = run(driver("--filter axpby-16M --reps 2 --configs serial:1,krex:2:persistent,serial:1",
                            "KREX_FAKE_BIMODAL=5 KREX_FAKE_BIMODAL_MODE=krex"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string md = krex_test::file_text(dir + "/summary.md");
  const std::string js = krex_test::file_text(dir + "/eval.json");
  const auto row = [&](const std::string& head) {
    const auto s = md.find("## Flips beside the fresh-process reference");
    const auto p = md.find("| " + head + " |", s);
    EXPECT_NE(p, std::string::npos) << head << "\n" << md;
    return p == std::string::npos ? std::string() : md.substr(p, md.find('\n', p) - p);
  };
  EXPECT_NE(md.find("The fresh-process reference is the native repeat (serial) pass"), std::string::npos) << md;
  // 4 set trials in the pool (2 copies of the list): the medians swap the
  // 3%-apart pairs 0-1 and 2-3 of every trial (2-5% by the reference), the
  // native repeat's 2 trials swap nothing.
  EXPECT_EQ(row("krex C=2 persistent | all | median"),
            "| krex C=2 persistent | all | median | 0/0 (–)* – | 0/0 (–)* – | 8/16 (50.0)* +50.0 | 0/24 (0.0)* +0.0 | "
            "0/0 (–)* – | 0/0 (–)* – | 8/16 (50.0)* +50.0 | 0/24 (0.0)* +0.0 | FAIL | FAIL |");
  EXPECT_EQ(row("krex C=2 persistent | all | p10"),
            "| krex C=2 persistent | all | p10 | 0/0 (–)* – | 0/0 (–)* – | 0/16 (0.0)* +0.0 | 0/24 (0.0)* +0.0 | "
            "0/0 (–)* – | 0/0 (–)* – | 0/16 (0.0)* +0.0 | 0/24 (0.0)* +0.0 | PASS | PASS |");
  EXPECT_EQ(row("native repeat (serial) | all | median"),
            "| native repeat (serial) | all | median | 0/0 (–)* | 0/0 (–)* | 0/8 (0.0)* | 0/12 (0.0)* | "
            "0/0 (–)* | 0/0 (–)* | 0/8 (0.0)* | 0/12 (0.0)* | (the fresh-process reference) | |");
  // The same in eval.json, per configuration.
  EXPECT_NE(js.find("\"fresh_reference\":\"native repeat (serial)\""), std::string::npos);
  EXPECT_NE(js.find("\"all, median\":{\"by_gap_construction\":{\"0-1%\":{\"pairs\":0,\"flips\":0,\"fresh_pairs\":0,"
                    "\"fresh_flips\":0,\"delta_pts\":null},\"1-2%\":{\"pairs\":0,\"flips\":0,\"fresh_pairs\":0,"
                    "\"fresh_flips\":0,\"delta_pts\":null},\"2-5%\":{\"pairs\":16,\"flips\":8,\"fresh_pairs\":8,"
                    "\"fresh_flips\":0,\"delta_pts\":50}"),
            std::string::npos)
      << js.substr(0, 4000);
  EXPECT_EQ(count(js, "\"construction_within_1pt\":\"FAIL\""), 2u);  // krex all and batched, median
  EXPECT_EQ(count(js, "\"vs_fresh_reference\":{"), 3u);
}

TEST_F(EvalDriver, AProcessCommandEndsWhenItsWorkerExits) {
  // Workers that take 400 ms to exit after their result: a command of the
  // process shape includes that (the process is the command), and exits
  // overlap: 7 commands 4 at a time take about 2 x 0.4 s, not 7 x 0.4 s.
  const auto r = run(driver("--filter gemm-2K,axpby-vec1-4194304,axpby-vec4-4194304,softmax-warp-4096x1024 "
                            "--configs serial:1,unprotected:4,serial:1",
                            "KREX_FAKE_EXIT_MS=400"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string js = krex_test::file_text(dir + "/eval.json");
  const auto at = js.find("\"label\":\"unprotected C=4\"");
  ASSERT_NE(at, std::string::npos);
  const auto w = js.find("\"wall_s\":", at);
  ASSERT_NE(w, std::string::npos);
  const double wall = std::atof(js.c_str() + w + 9);
  EXPECT_GE(wall, 0.8);  // two rounds of exits at least
  EXPECT_LT(wall, 2.4) << "the workers' exits did not overlap";
  std::size_t short_cmds = 0;
  for (auto p = js.find("\"t_total_ms\":"); p != std::string::npos; p = js.find("\"t_total_ms\":", p + 1))
    if (std::atof(js.c_str() + p + 13) < 400) ++short_cmds;
  EXPECT_EQ(short_cmds, 0u) << "a command ended before its worker exited";
}

TEST_F(EvalDriver, TimingsTailsAndTargets) {
  // A fine set in > 1 ms, each member also timed @sync and @loop; lock-only
  // workers report one sample in 20 at +50%: a tail their command medians hide.
  const auto r = run(driver("--filter axpby-448M-fine --sync axpby-448M-fine --loop axpby-448M-fine "
                            "--configs serial:1,lock:2,krex:2,krex-all:2,krex-device:2,lock:2:persistent,"
                            "krex:2:persistent,serial:1",
                            "KREX_FAKE_TAIL=50 KREX_FAKE_ENV=KREX_FREEZE_SCOPE"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string md = krex_test::file_text(dir + "/summary.md");
  const std::string js = krex_test::file_text(dir + "/eval.json");
  // 5 members x 3 timings = 15 commands; persistent: 2 copies (at least 10 per worker).
  EXPECT_NE(md.find("| lock C=2 | 15 | 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| krex C=2 persistent | 30 | 0 |"), std::string::npos) << md;
  // 6 process-shape configurations x 5 + 2 persistent x 10 sync (and loop)
  // commands, each named by the driver and by the worker's result.
  EXPECT_EQ(count(js, "@sync\","), 2u * (6u * 5u + 2u * 10u));
  EXPECT_EQ(count(js, "\"timing\":\"loop\""), 2u * (6u * 5u + 2u * 10u));
  // The scope modes pass KREX_FREEZE_SCOPE through; krex keeps the library's default (unset).
  EXPECT_EQ(count(js, "\"env\":\"all\""), 15u);
  EXPECT_EQ(count(js, "\"env\":\"device\""), 15u);
  // Sample level: lock-only's command medians are clean (p95 0.00) but 5% of
  // its samples are > 1% slow, and its sample p95 misses the 1% target.
  EXPECT_NE(md.find("| lock C=2 | all | 15 | 0.00 | 0.00 | 300 | 0.00 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| 50.00 | 5.0% |"), std::string::npos) << md;
  EXPECT_NE(md.find("| krex C=2 | all | 15 | 0.00 | 0.00 | 300 | 0.00 | 0.00 | 0.00 | 0.0% |"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| lock C=2 | sync | 5 |"), std::string::npos) << md;  // timings reported separately
  EXPECT_NE(md.find("| lock C=2 | loop | 5 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| lock C=2 | 15 | 300 | PASS 0.00 (15) | FAIL 2.50 (300) | PASS 0.00 (15) | FAIL 2.50 (300) |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| krex C=2 | 15 | 300 | PASS 0.00 (15) | PASS 0.00 (300) | PASS 0.00 (15) | PASS 0.00 (300) |"),
            std::string::npos)
      << md;
  EXPECT_NE(js.find("\"over_1pct_frac\":0.05"), std::string::npos);
  // Shape for shape: each krex-family configuration beside lock-only at its C and shape.
  const auto sfs = md.find("## Shape for shape");
  ASSERT_NE(sfs, std::string::npos) << md;
  for (const char* row : {"| krex C=2 | 15 |", "| krex-all C=2 | 15 |", "| krex-device C=2 | 15 |",
                          "| krex C=2 persistent | 30 |"})
    EXPECT_NE(md.find(row, sfs), std::string::npos) << row << "\n" << md;
  EXPECT_EQ(md.find("| lock C=2 | 15 |", sfs), md.find("| lock C=2 | 15 | 300 |", sfs)) << "lock-only is a column there";
  EXPECT_EQ(count(js, "\"target\":\">= lock-only\""), 4u);
  EXPECT_EQ(count(js, "\"target\":\">= 1.15x lock-only\""), 1u);
  // Fine-set ranking: flips against the reference and the construction order.
  EXPECT_NE(md.find("| krex C=2 | fine, sync | 1 | 10 | 0.0 (0) | 0.0 (0) | 1.000 |"), std::string::npos) << md;
  EXPECT_NE(js.find("\"fine, loop\":{\"trials\":1,\"pairs\":10,"), std::string::npos);
  // The critical fraction per timing (the stand-in's loop workload: 6 ms of a longer command).
  EXPECT_NE(md.find("| reference (serial) | loop | 5 |"), std::string::npos) << md;
}

TEST_F(EvalDriver, PlanPrintsTheDurationEstimateAndExits) {
  // --plan needs no worker and writes nothing.
  const auto r = run(std::string(KREX_EVAL_PATH) + " --config issue11 --plan --worker /nonexistent --out '" + dir +
                     "/not-made'");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("estimated duration"), std::string::npos) << r.output;
  EXPECT_NE(::access((dir + "/not-made").c_str(), F_OK), 0);
  // The issue-11 preset: the fine sets, both extra timings, scope comparison,
  // and at least 10 commands per persistent worker.
  EXPECT_GT(count(r.output, "@sync\n"), 0u) << r.output;
  EXPECT_GT(count(r.output, "@loop"), 0u) << r.output;
  EXPECT_NE(r.output.find("krex-all C=16:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gemm-t16m1-4096x4112x4096\n"), std::string::npos);  // a fine set's member
  std::size_t persistent = 0;
  for (auto p = r.output.find(" persistent: "); p != std::string::npos; p = r.output.find(" persistent: ", p + 1)) {
    EXPECT_GE(std::atoi(r.output.c_str() + p + 13), 160) << r.output;
    ++persistent;
  }
  EXPECT_EQ(persistent, 2u);
  // The other presets leave the fine sets out unless --filter names them.
  const auto q = run(std::string(KREX_EVAL_PATH) + " --config smoke --plan");
  ASSERT_EQ(q.status, 0) << q.output;
  EXPECT_EQ(q.output.find("gemm-t16m1-4096x4112x4096"), std::string::npos);
  EXPECT_EQ(q.output.find("@sync"), std::string::npos);
  EXPECT_NE(q.output.find("krex C=4 persistent: "), std::string::npos);
  EXPECT_EQ(q.output.find("gemm-t32m4-2048x2048x2304"), std::string::npos);  // a wide set's member
  // The ranks preset (issue 19's flips by gap class): the wide sets, every set
  // also @sync, 6 native copies, at least 20 commands per persistent worker.
  const auto k = run(std::string(KREX_EVAL_PATH) + " --config ranks --plan");
  ASSERT_EQ(k.status, 0) << k.output;
  EXPECT_NE(k.output.find("gemm-t32m4-2048x2048x2304\n"), std::string::npos) << k.output;
  EXPECT_NE(k.output.find("gemm-t32m4-2048x2048x2304@sync\n"), std::string::npos) << k.output;
  EXPECT_EQ(k.output.find("@loop"), std::string::npos) << k.output;
  EXPECT_NE(k.output.find("native repeat (serial): 312 commands (6 copies of the list)"), std::string::npos)
      << k.output;
  EXPECT_NE(k.output.find("krex C=16 persistent: 364 commands"), std::string::npos) << k.output;
  // An explicit option beats the preset's default.
  const auto k2 = run(std::string(KREX_EVAL_PATH) + " --config ranks --plan --native-copies 2");
  ASSERT_EQ(k2.status, 0) << k2.output;
  EXPECT_NE(k2.output.find("native repeat (serial): 104 commands (2 copies of the list)"), std::string::npos)
      << k2.output;
  // --native-copies: only the native repeat (the last serial pass) runs the
  // list more than once; the reference stays one pass.
  const auto n = run(std::string(KREX_EVAL_PATH) + " --config smoke --plan --native-copies 3");
  ASSERT_EQ(n.status, 0) << n.output;
  const auto first = n.output.find("reference (serial): ");
  const auto last = n.output.find("native repeat (serial): ");
  ASSERT_NE(first, std::string::npos) << n.output;
  ASSERT_NE(last, std::string::npos) << n.output;
  const std::string first_line = n.output.substr(first, n.output.find('\n', first) - first);
  const std::string last_line = n.output.substr(last, n.output.find('\n', last) - last);
  EXPECT_EQ(first_line.find("copies of the list"), std::string::npos) << n.output;
  EXPECT_NE(last_line.find("(3 copies of the list)"), std::string::npos) << n.output;
  EXPECT_EQ(std::atoi(last_line.c_str() + 24), 3 * std::atoi(first_line.c_str() + 20)) << n.output;
}

// --devices: every configuration on every device at once, each device's
// accuracy against its own reference, per-GPU reports and the node's.
TEST_F(EvalDriver, DevicesRunEveryConfigurationOnEveryDeviceAtOnce) {
  const auto r = run(driver("--filter gemm-2K --reps 1 --devices 1,0 --configs "
                            "serial:1,krex:2,lock:2:persistent,serial:1"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string node = krex_test::file_text(dir + "/node.md");
  const std::string nj = krex_test::file_text(dir + "/node.json");
  // The reference ran on each GPU in turn, the others on both at once.
  EXPECT_NE(node.find("| reference (serial) | 1 (in turn) |"), std::string::npos) << node;
  EXPECT_NE(node.find("| krex C=2 | 2 |"), std::string::npos) << node;
  EXPECT_NE(node.find("| lock C=2 persistent | 2 |"), std::string::npos) << node;
  EXPECT_NE(node.find("| native repeat (serial) | 2 |"), std::string::npos) << node;
  EXPECT_NE(node.find("## Accuracy per GPU"), std::string::npos) << node;
  EXPECT_NE(nj.find("\"devices\":[1,0]"), std::string::npos) << nj;
  EXPECT_EQ(count(nj, "\"gpus_at_once\":2"), 3u) << nj;
  EXPECT_EQ(count(nj, "\"flips_by_gap\":"), 8u) << nj;  // 4 configurations x 2 GPUs
  EXPECT_EQ(count(nj, "\"context_ms_median\":1.5"), 8u) << nj;  // the stand-in's context time
  for (const char* d : {"0", "1"}) {
    const std::string md = krex_test::file_text(dir + "/gpu" + d + "/summary.md");
    const std::string js = krex_test::file_text(dir + "/gpu" + d + "/eval.json");
    EXPECT_NE(md.find(std::string(", GPU ") + d + " of 2 run at once"), std::string::npos) << md;
    EXPECT_NE(md.find("| reference (serial) |"), std::string::npos) << md;
    EXPECT_NE(js.find(std::string("\"device\":") + d + ",\"node_devices\":2"), std::string::npos) << js;
    // Every command of this GPU's report ran on this GPU's workers.
    const std::string other = std::string("\"device\":") + (d[0] == '0' ? "1" : "0") + "}";
    EXPECT_EQ(count(js, other), 0u) << js;
    EXPECT_GT(count(js, std::string("\"device\":") + d), 4u) << js;
  }
  // all: every device the backend sees (here the host backend's virtual ones;
  // a CUDA build counts the real GPUs, which the GPU tests cover).
#if !(defined(KREX_WITH_CUDA) && KREX_WITH_CUDA)
  const auto a = run(driver("--filter gemm-2K --reps 1 --devices all --configs serial:1,krex:1,serial:1",
                            "KREX_HOST_DEVICES=3"));
  ASSERT_EQ(a.status, 0) << a.output;
  EXPECT_NE(krex_test::file_text(dir + "/node.json").find("\"devices\":[0,1,2]"), std::string::npos);
  EXPECT_FALSE(krex_test::file_text(dir + "/gpu2/summary.md").empty());
#endif
  // The plan says so, and counts the reference's extra passes.
  const auto p = run(driver("--config smoke --devices 0,1 --plan"));
  ASSERT_EQ(p.status, 0) << p.output;
  EXPECT_NE(p.output.find("on 2 GPU(s) (--devices 0 1): every configuration on all at once, the "
                          "reference on each in turn (+~"),
            std::string::npos)
      << p.output;
}

// --native-spacer-mb reaches the native repeat's workers alone (the worker
// allocates the spacer: bench/eval/worker.cu), and the report says so.
TEST_F(EvalDriver, NativeSpacerGoesToTheNativeRepeatOnly) {
  const auto r = run(driver("--filter gemm-2K --configs serial:1,krex:2,serial:1 --native-copies 2 "
                            "--native-spacer-mb 512",
                            "KREX_FAKE_ENV=KREX_EVAL_SPACER_MB"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string md = krex_test::file_text(dir + "/summary.md");
  const std::string js = krex_test::file_text(dir + "/eval.json");
  // gemm-2K: 4 candidates; the native repeat runs the list twice.
  EXPECT_EQ(count(js, "\"env\":\"512\""), 8u) << js.substr(0, 2000);
  EXPECT_EQ(count(js, "\"env\":\"\""), 8u);  // the reference (4) and krex C=2 (4)
  EXPECT_NE(js.find("\"native_spacer_mb\":512"), std::string::npos);
  EXPECT_NE(md.find("behind a random spacer of 0-512 MB (--native-spacer-mb"), std::string::npos) << md;
  // ...and its label, so that a spaced repeat is never pooled with a plain one.
  EXPECT_NE(md.find("| native repeat (serial, spaced) | 8 | 0 |"), std::string::npos) << md;
  EXPECT_EQ(md.find("| native repeat (serial) |"), std::string::npos) << md;
  // Without the option no worker sees the variable, and the summary says nothing of it.
  const auto plain = run(driver("--filter gemm-2K --configs serial:1,serial:1", "KREX_FAKE_ENV=KREX_EVAL_SPACER_MB"));
  ASSERT_EQ(plain.status, 0) << plain.output;
  EXPECT_EQ(count(krex_test::file_text(dir + "/eval.json"), "\"env\":\"512\""), 0u);
  EXPECT_EQ(krex_test::file_text(dir + "/summary.md").find("random spacer"), std::string::npos);
  EXPECT_NE(krex_test::file_text(dir + "/summary.md").find("| native repeat (serial) |"), std::string::npos);
}

TEST_F(EvalDriver, UsageErrorsSayWhatToDo) {
  const krex_test::usage_case cases[] = {
      {"--configs serial:1,turbo:4,serial:1", "unknown mode 'turbo'"},
      {"--configs serial:4,serial:1", "use serial:1"},
      {"--configs krex:4,serial:1", "must start and end with serial:1"},
      {"--configs serial:1,krex:0,serial:1", "an integer 1..256"},
      {"--configs serial:1,krex:4:sideways,serial:1", "persistent or process"},
      {"--config huge", "smoke, quick, full, issue11 or ranks"},
      {"--configs serial:1,krex-everything:4,serial:1", "krex-all, krex-device"},
      {"--filter gemm-2K --sync axpby-16M", "--sync matches none of the selected candidates"},
      {"--filter gemm-2K --loop no-such", "--loop matches none of the selected candidates"},
      {"--filter ''", "--filter is empty"},
      {"--loop-pct 95", "a number 1..90"},
      {"--min-per-worker -1", "an integer 0..1000"},
      {"--native-copies 0", "an integer 1..100"},
      {"--native-spacer-mb -2", "an integer 0..1048576"},
      {"--native-spacer-mb 2G", "invalid value '2G' for --native-spacer-mb"},
      {"--min-per-slot x", "invalid value 'x' for --min-per-slot"},
      {"--reps 0", "an integer 1..100"},
      {"--reps=1.5", "invalid value '1.5' for --reps"},
      {"--timeout-s=0", "a number 1..86400"},
      {"--filter no-such-kernel", "matches no candidate"},
      {"--bogus 1", "unknown option '--bogus'"},
      {"--reps", "needs a value"},
      {"stray", "unexpected argument 'stray'"},
      {"--devices 0,0", "device 0 is listed twice"},
      {"--devices 0,x", "'x' is not a device 0..15"},
      {"--devices 16", "'16' is not a device 0..15"},
      {"--placements 0", "an integer 1..256"},
      {"--placements 2x", "invalid value '2x' for --placements"},
      {"--placement-budget-mb -1", "an integer 0..16777216"},
  };
  // A wrong command line: exit 64 (EX_USAGE), the message, then the usage.
  for (const auto& c : cases) {
    const auto r = run(driver(c.args));
    EXPECT_EQ(r.status, 64) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find("usage: krex_eval "), std::string::npos) << c.args << "\n" << r.output;
  }
  // What keeps it from starting that is not the command line: exit 2.
  const auto r = run(std::string(KREX_EVAL_PATH) + " --worker /nonexistent/worker --out '" + dir + "'");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("build krex_eval_worker"), std::string::npos) << r.output;
  const auto o = run(std::string(KREX_EVAL_PATH) + " --worker " KREX_TEST_BIN_DIR
                     "/helper_eval_worker --out /proc/krex-no-such-dir/x --configs serial:1,serial:1");
  EXPECT_EQ(o.status, 2);
  EXPECT_NE(o.output.find("cannot create --out directory"), std::string::npos) << o.output;
}

}  // namespace

// Flips by the study's gap classes: each pair lands in the class of its
// reference gap, and only a discordant pair counts as a flip.
TEST(EvalStats, FlipsByGapClass) {
  EXPECT_EQ(krex_eval::gap_class(100.0, 100.5), 0U);
  EXPECT_EQ(krex_eval::gap_class(100.0, 101.5), 1U);
  EXPECT_EQ(krex_eval::gap_class(100.0, 104.0), 2U);
  EXPECT_EQ(krex_eval::gap_class(100.0, 106.0), 3U);
  EXPECT_EQ(krex_eval::gap_class(106.0, 100.0), 3U);
  // Reference 100, 100.5, 101.5, 110: gaps 0.5%, 1.5%, 10%, 0.995%, 9.5%, 8.4%.
  const std::vector<double> ref{100.0, 100.5, 101.5, 110.0};
  // Measured: the first two swapped (a 0-1% flip), the rest in order.
  const std::vector<double> got{100.6, 100.4, 101.5, 110.0};
  const auto g = krex_eval::compare_by_gap(ref, got);
  EXPECT_EQ(g[0].pairs, 2U);  // 100 vs 100.5, 100.5 vs 101.5
  EXPECT_EQ(g[0].flips, 1U);
  EXPECT_EQ(g[1].pairs, 1U);  // 100 vs 101.5
  EXPECT_EQ(g[1].flips, 0U);
  EXPECT_EQ(g[2].pairs, 0U);
  EXPECT_EQ(g[3].pairs, 3U);
  EXPECT_EQ(g[3].flips, 0U);
  krex_eval::rank_totals t;
  std::vector<krex_eval::rank_member> m;
  for (std::size_t i = 0; i < ref.size(); ++i) m.push_back({ref[i], got[i], static_cast<int>(i)});
  t.add_trial(m);
  EXPECT_EQ(t.by_gap[0].flips, 1U);
  EXPECT_EQ(t.by_gap[0].pairs + t.by_gap[1].pairs + t.by_gap[2].pairs + t.by_gap[3].pairs,
            t.vs_reference.pairs);
  EXPECT_EQ(t.by_gap_construction[0].flips, 1U);  // construction order = the reference's here
  // A reference that swapped two members (100.5 first by construction):
  // measured in construction order, that is a flip against the reference
  // and none against construction, in the class of the reference's gap.
  krex_eval::rank_totals w;
  w.add_trial({{100.5, 100.0, 0}, {100.0, 100.5, 1}});
  EXPECT_EQ(w.by_gap[0].flips, 1U);
  EXPECT_EQ(w.by_gap_construction[0].pairs, 1U);
  EXPECT_EQ(w.by_gap_construction[0].flips, 0U);
}
