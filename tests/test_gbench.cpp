// SPDX-License-Identifier: Apache-2.0
// krex::gbench on the host backend: each Google Benchmark run holds one
// region (Setup/Teardown), iterations are reported as manual time, the label
// and counters say what the region did, and a sibling's gated submissions
// never run inside a run's measured loop.

#include <krex/gbench.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "gbench_util.hpp"
#include "krex_test.hpp"
#include "proc_util.hpp"
#include "sibling_log.hpp"

namespace {

using namespace std::chrono_literals;

// What the benchmark functions saw, per run.
struct run_window {
  std::uint64_t begin_ns, end_ns;
};
std::vector<run_window> g_windows;
std::uint64_t g_spin_ns = 2'000'000;
int g_unprotected_calls = 0;

// The window is the function's start to its last iteration's end: run()
// ends the region once the measured loop is done (so that the label and
// counters include what the region saw during its body).
void bm_protected(benchmark::State& st) {
  const std::uint64_t b = krex::detail::now_ns();
  std::uint64_t last = b;
  krex::gbench::run(st, [&] {
    krex_test::spin_for(g_spin_ns);
    last = krex::detail::now_ns();
  });
  g_windows.push_back({b, last});
}

// Registered without the hooks: run() must refuse to time it.
void bm_without_hooks(benchmark::State& st) {
  krex::gbench::run(st, [] { ++g_unprotected_calls; });
}

TEST(gbench, each_run_holds_a_region_and_siblings_never_submit_inside_it) {
  krex_test::scoped_segment seg;
  krex_test::shared<krex_test::sibling_log<200000>> log;
  // Forked before this process starts any thread (the gbench tenant's agent).
  krex_test::child sib = krex_test::spawn_submitter(seg.opts(), *log);
  ASSERT_EQ(log->ready.load(), 1) << "sibling did not join";

  krex::gbench::configure(seg.opts());
  // bm_without_hooks fails on purpose: its error row must not fail this test
  // program (strict mode, the default, would make it exit 1).
  krex::gbench::strict(false);
  KREX_BENCHMARK(bm_protected)->Iterations(25)->Repetitions(4);
  BENCHMARK(bm_without_hooks)->Iterations(5)->UseManualTime();
  krex_test::capture rep;
  const std::uint64_t regions_before = krex::gbench::regions();
  benchmark::RunSpecifiedBenchmarks(&rep);
  log->stop.store(1);
  EXPECT_TRUE(krex_test::wait_exit(sib.pid(), 10s).has_value());
  ASSERT_EQ(log->failed.load(), 0);

  // One region per run: 4 repetitions, fixed iterations (no trial runs).
  EXPECT_EQ(krex::gbench::regions() - regions_before, 4U);
  EXPECT_EQ(krex::gbench::lost_leases(), 0U);
  ASSERT_EQ(g_windows.size(), 4U);

  int protected_runs = 0;
  for (const auto& r : rep.runs) {
    if (r.run_name.function_name != "bm_protected" || r.run_type != benchmark::BenchmarkReporter::Run::RT_Iteration)
      continue;
    ++protected_runs;
    EXPECT_EQ(r.iterations, 25);
    EXPECT_NE(r.report_label.find("gate+drain"), std::string::npos) << r.report_label;
    // Base units, named: seconds, never milliseconds shown as "8.146m".
    for (const char* c : {"krex_lock_s", "krex_drain_s", "krex_freeze_s", "krex_frozen",
                          "krex_warnings"})
      EXPECT_EQ(r.counters.count(c), 1U) << c;
    EXPECT_EQ(r.counters.count("krex_drain_ms"), 0U);
    if (r.counters.count("krex_drain_s") == 1) {
      EXPECT_GE(r.counters.at("krex_drain_s").value, 0.0);
      EXPECT_LT(r.counters.at("krex_drain_s").value, 10.0);  // seconds: under the drain deadline
    }
    // Manual time is krex's per-iteration time: about the 2 ms spin each.
    const double per_iter_s = r.real_accumulated_time / static_cast<double>(r.iterations);
    EXPECT_GE(per_iter_s, 0.0019);
    EXPECT_LT(per_iter_s, 0.05);
  }
  EXPECT_EQ(protected_runs, 4);

  // The sibling tried to submit during the runs (so the test can fail) but
  // no submission ran inside one: it parked until the run's region ended.
  const std::uint32_t n = log->n.load();
  int ran_inside = 0, wanted = 0;
  for (const auto& w : g_windows) {
    bool waited = false;  // a submission was pending during (part of) this run
    for (std::uint32_t i = 0; i < n; ++i) {
      if (log->at_ns[i] > w.begin_ns && log->at_ns[i] < w.end_ns) ++ran_inside;
      if (log->tried_ns[i] < w.end_ns && log->at_ns[i] > w.begin_ns) waited = true;
    }
    wanted += waited ? 1 : 0;
  }
  EXPECT_GE(wanted, 3) << "the sibling did not want the device during the runs: the test "
                          "proves nothing";
  EXPECT_EQ(ran_inside, 0) << "sibling submissions ran inside a benchmark run's region";

  // Without the hooks nothing is timed.
  EXPECT_EQ(g_unprotected_calls, 0);
}

TEST(gbench, configure_after_join_is_an_error) {
  try {
    krex::gbench::configure(krex::options{});
    // Only reachable if the first test did not join (it skipped or failed early).
    if (krex::gbench::regions() > 0) ADD_FAILURE() << "configure() after join did not throw";
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), krex::step::join);
    EXPECT_NE(std::string(e.what()).find("before benchmark::RunSpecifiedBenchmarks"),
              std::string::npos);
  }
}

// The example program, as a user runs it: protected by default, switched off
// by KREX_GBENCH=0 (the control), a bad KREX_GBENCH value is a clear error.
#ifdef KREX_GBENCH_EXAMPLE
krex_test::command_result run_example_rc(const std::string& env, const std::string& args = "") {
  const std::string cmd = env + " timeout 60 " KREX_GBENCH_EXAMPLE
                          " --benchmark_min_time=0.01 --benchmark_filter=65536 " + args + " 2>&1";
  return krex_test::run_shell(cmd);
}
std::string run_example(const std::string& env) { return run_example_rc(env).out; }

// The number after `"name": ` in Google Benchmark's JSON output (-1 if absent).
double json_number(const std::string& out, const std::string& name) {
  const std::size_t at = out.find("\"" + name + "\": ");
  if (at == std::string::npos) return -1;
  return std::strtod(out.c_str() + at + name.size() + 4, nullptr);
}

TEST(gbench_example, labels_say_protected_unprotected_or_why_not) {
  krex_test::scoped_segment seg;
  // Alone on its device, as a user runs it: this process's own tenant (the
  // tests above) is of another segment, which the example would rightly
  // report as a split segment ("gate+drain-split(1 other segment)") in a shared registry.
  const std::string registry = "/dev/shm/" + krex_test::unique_name("krex-registry");
  const std::string base = "KREX_SEGMENT=" + seg.name() +
                           " KREX_FREEZE=none KREX_PIN=0 KREX_DEVICE_REGISTRY=" + registry;
  const std::string on = run_example(base);
  EXPECT_NE(on.find("gate+drain"), std::string::npos) << on;
  const std::string off = run_example(base + " KREX_GBENCH=0");
  EXPECT_NE(off.find("unprotected"), std::string::npos) << off;
  EXPECT_EQ(off.find("gate+drain"), std::string::npos) << off;
  const std::string bad = run_example(base + " KREX_GBENCH=maybe");
  EXPECT_NE(bad.find("invalid value 'maybe' for KREX_GBENCH"), std::string::npos) << bad;
  const std::string bad_opt = run_example(base + " KREX_FREEZE=sometimes");
  EXPECT_NE(bad_opt.find("KREX_FREEZE"), std::string::npos) << bad_opt;
  EXPECT_NE(bad_opt.find("ERROR OCCURRED"), std::string::npos) << bad_opt;
  // One "krex:" prefix: the error's own.
  EXPECT_EQ(bad_opt.find("krex: krex:"), std::string::npos) << bad_opt;
  (void)std::system(("rm -rf '" + registry + "'").c_str());
}

// Strict mode, the default (issue 38: a bad KREX_* value gave error rows and
// exit status 0 unless KREX_GBENCH_STRICT=1): a krex error fails the program
// (exit status 1); KREX_GBENCH_STRICT=0 turns it off, the error row only
// (status 0, Google Benchmark's own rule).
TEST(gbench_example, strict_mode_makes_a_krex_error_fail_the_program) {
  krex_test::scoped_segment seg;
  // Its own device registry: alone on its device, as in the test above.
  const std::string registry = "/dev/shm/" + krex_test::unique_name("krex-registry");
  const std::string base = "KREX_SEGMENT=" + seg.name() +
                           " KREX_FREEZE=none KREX_PIN=0 KREX_DEVICE_REGISTRY=" + registry;
  for (const char* strict : {"", " KREX_GBENCH_STRICT=1"}) {
    SCOPED_TRACE(strict);
    const auto r = run_example_rc(base + " KREX_FREEZE=sometimes" + strict);
    EXPECT_EQ(r.rc, 1) << r.out;
    EXPECT_NE(r.out.find("ERROR OCCURRED"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("krex: gbench: strict mode: 1 benchmark run(s) had a krex error"),
              std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("krex: krex:"), std::string::npos) << r.out;
  }
  // A misnamed variable (issue 38) fails it too, naming the right one.
  const auto misnamed = run_example_rc(base + " KREX_SCOPE=all");
  EXPECT_EQ(misnamed.rc, 1) << misnamed.out;
  EXPECT_NE(misnamed.out.find("did you mean KREX_FREEZE_SCOPE?"), std::string::npos)
      << misnamed.out;
  const auto lax = run_example_rc(base + " KREX_FREEZE=sometimes KREX_GBENCH_STRICT=0");
  EXPECT_EQ(lax.rc, 0) << lax.out;
  EXPECT_NE(lax.out.find("ERROR OCCURRED"), std::string::npos) << lax.out;
  EXPECT_EQ(lax.out.find("strict mode"), std::string::npos) << lax.out;
  const auto fine = run_example_rc(base);
  EXPECT_EQ(fine.rc, 0) << fine.out;
  EXPECT_NE(fine.out.find("gate+drain"), std::string::npos) << fine.out;
  const auto bad = run_example_rc(base + " KREX_GBENCH_STRICT=maybe");
  EXPECT_EQ(bad.rc, 1) << bad.out;
  EXPECT_NE(bad.out.find("invalid value 'maybe' for KREX_GBENCH_STRICT"), std::string::npos)
      << bad.out;
  (void)std::system(("rm -rf '" + registry + "'").c_str());
}

// A run with non-krex load on its reserved core is not labelled fully
// protected: the label carries the warning, and the foreign load and the
// warnings are counters. Spinners (not krex tenants) on every CPU make sure
// the reserved one is busy.
TEST(gbench_example, foreign_load_on_the_reserved_core_is_in_the_label_and_counters) {
  krex_test::scoped_segment seg;
  std::vector<krex_test::child> spinners = krex_test::spin_on_every_cpu(90'000'000'000ULL);  // killed at the end
  const std::string registry = "/dev/shm/" + krex_test::unique_name("krex-registry");
  const std::string env = "KREX_SEGMENT=" + seg.name() +
                          " KREX_FREEZE=none KREX_PIN=1 KREX_CONFINE=0 KREX_DEVICE_REGISTRY=" +
                          registry;
  const auto r = run_example_rc(env, "--benchmark_min_time=0.3 --benchmark_format=json");
  spinners.clear();
  (void)std::system(("rm -rf '" + registry + "'").c_str());
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("+pin | WARNING ("), std::string::npos) << r.out;
  EXPECT_GE(json_number(r.out, "krex_warnings"), 1.0) << r.out;
  EXPECT_GT(json_number(r.out, "krex_reserved_foreign_s"), 0.0) << r.out;
}
#endif  // KREX_GBENCH_EXAMPLE

}  // namespace
