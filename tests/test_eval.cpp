// SPDX-License-Identifier: Apache-2.0
// The evaluation's statistics (bench/eval/stats.hpp), its JSON line format
// (bench/eval/json.hpp), and the driver krex_eval run for real, as separate
// processes, with a stand-in worker (helper_eval_worker): dispatch, both
// command shapes, the summary, faults (a failed check, a crashed worker, a
// hung worker) and every usage error.

#include "proc_util.hpp"
#include "../bench/eval/candidates.hpp"
#include "../bench/eval/json.hpp"
#include "../bench/eval/stats.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
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

TEST(EvalJson, FlatRoundTrip) {
  krex_eval::json_object o;
  o.str("id", "a\"b\\c\n").num("x", 1.5).boolean("ok", true).boolean("no", false);
  o.nums("s", {1, 2.5, 3}).num("nan", NAN);
  krex_eval::flat_record r;
  std::string why;
  ASSERT_TRUE(krex_eval::parse_flat(o.text(), &r, &why)) << why << ": " << o.text();
  EXPECT_EQ(r.str("id"), "a\"b\\c\n");
  EXPECT_DOUBLE_EQ(r.num("x"), 1.5);
  EXPECT_DOUBLE_EQ(r.num("ok"), 1);
  EXPECT_DOUBLE_EQ(r.num("no"), 0);
  EXPECT_TRUE(std::isnan(r.num("nan")));
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

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
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
    return "env " + env + " " KREX_EVAL_PATH " --worker " KREX_TEST_BIN_DIR "/helper_eval_worker --out '" + dir +
           "' " + args;
  }
  std::string dir;
};

TEST_F(EvalDriver, RunsEveryShapeAndWritesTheSummary) {
  const auto r = run(driver("--filter gemm-2K,axpby-16M --reps 2 --configs "
                            "serial:1,unprotected:3,lock:2,krex-nopin:2,krex:2:persistent,serial:1",
                            "KREX_FAKE_ENV=KREX_PIN"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string md = slurp(dir + "/summary.md");
  const std::string js = slurp(dir + "/eval.json");
  // 9 candidates (4 + 5) x 2 reps = 18 commands in each of 6 configurations.
  EXPECT_NE(md.find("| reference (serial) | 18 | 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| unprotected C=3 | 18 | 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| lock C=2 | 18 | 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| krex C=2 persistent | 18 | 0 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| native repeat (serial) | 18 | 0 |"), std::string::npos) << md;
  EXPECT_EQ(count(js, "\"label\":"), 6u);
  EXPECT_EQ(count(js, "\"samples_ms\":["), 6u * 18u);
  // Without noise every order matches the reference: 0 flips, tau 1.
  EXPECT_EQ(count(js, "\"flip_rate\":0,"), 6u) << js.substr(0, 2000);
  EXPECT_EQ(count(js, "\"kendall_tau\":1,"), 6u);
  // Two rank sets x 2 reps: 4 set trials, 2 x (6 + 10) = 32 pairs.
  EXPECT_EQ(count(js, "\"rank_pairs\":32,"), 6u);
  // A process per command: every command is its process's first; persistent
  // workers: exactly C=2 first commands.
  EXPECT_EQ(count(js, "\"first_in_process\":true"), 5u * 18u + 2u);
  // The ablation's environment reached its workers (and only theirs).
  EXPECT_EQ(count(js, "\"env\":\"0\""), 18u);
  // Workers got the driver's lock file and segment.
  EXPECT_NE(md.find("critical-region fraction"), std::string::npos);
}

TEST_F(EvalDriver, NoiseFlipsNearEqualCandidates) {
  const auto r = run(driver("--filter axpby-16M --reps 4 --configs serial:1,unprotected:4,serial:1",
                            "KREX_FAKE_NOISE=0.2"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string js = slurp(dir + "/eval.json");
  // +-20% noise on 3% gaps: some pair flips in some configuration.
  EXPECT_LT(count(js, "\"flip_rate\":0,"), 3u) << js.substr(0, 1500);
}

TEST_F(EvalDriver, FaultsAreRecordedAndTheRunGoesOn) {
  const std::string bad = krex_eval::all_candidates()[0].id, crash = krex_eval::all_candidates()[1].id,
                    hang = krex_eval::all_candidates()[2].id;
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run(driver("--filter " + bad + "," + crash + "," + hang +
                                " --timeout-s 2 --configs serial:1,unprotected:2,krex:2:persistent,serial:1",
                            "KREX_FAKE_FAIL=" + bad + " KREX_FAKE_CRASH=" + crash + " KREX_FAKE_HANG=" + hang));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60));
  EXPECT_EQ(r.status, 1) << r.output;  // failures: exit 1, but every configuration ran
  const std::string md = slurp(dir + "/summary.md");
  EXPECT_NE(md.find("## Failed commands (12)"), std::string::npos) << md;
  EXPECT_NE(md.find("wrong result: fake"), std::string::npos);
  EXPECT_NE(md.find("without a result"), std::string::npos);
  EXPECT_NE(r.output.find("passed --timeout-s 2: killed"), std::string::npos) << r.output;
  EXPECT_NE(md.find("| native repeat (serial) | 0 | 3 |"), std::string::npos) << md;
}

TEST_F(EvalDriver, AProcessCommandEndsWhenItsWorkerExits) {
  // Workers that take 400 ms to exit after their result: a command of the
  // process shape includes that (the process is the command), and exits
  // overlap: 7 commands 4 at a time take about 2 x 0.4 s, not 7 x 0.4 s.
  const auto r = run(driver("--filter gemm-2K,axpby-vec1-4194304,axpby-vec4-4194304,softmax-warp-4096x1024 "
                            "--configs serial:1,unprotected:4,serial:1",
                            "KREX_FAKE_EXIT_MS=400"));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string js = slurp(dir + "/eval.json");
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

TEST_F(EvalDriver, UsageErrorsSayWhatToDo) {
  struct bad_case {
    std::string args, says;
  };
  const bad_case cases[] = {
      {"--configs serial:1,turbo:4,serial:1", "unknown mode 'turbo'"},
      {"--configs serial:4,serial:1", "use serial:1"},
      {"--configs krex:4,serial:1", "must start and end with serial:1"},
      {"--configs serial:1,krex:0,serial:1", "an integer 1..256"},
      {"--configs serial:1,krex:4:sideways,serial:1", "persistent or process"},
      {"--config huge", "smoke, quick or full"},
      {"--reps 0", "an integer 1..100"},
      {"--reps=1.5", "invalid value '1.5' for --reps"},
      {"--timeout-s=0", "a number 1..86400"},
      {"--filter no-such-kernel", "matches no candidate"},
      {"--bogus 1", "unknown option '--bogus'"},
      {"--reps", "needs a value"},
      {"stray", "unexpected argument 'stray'"},
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
