// SPDX-License-Identifier: Apache-2.0
// krex::nvbench with nvbench itself, on the host (no GPU needed): real
// nvbench states of a CPU-only benchmark (nvbench's own measure_cpu_only loop
// and summaries) run through krex::nvbench::exec on krex's host backend. The
// state is made as nvbench's own tests make theirs (nvbench::detail::state_tester,
// the friend nvbench declares for testing), since nvbench's runner needs a
// CUDA driver to list devices. Checked: each exec holds one region, a
// sibling's gated submissions never run inside it, nvbench's summaries are
// intact and krex's are added, and every misuse is a krex::error that says
// what to do.

#include <krex/nvbench.hpp>

#include <nvbench/benchmark.cuh>
#include <nvbench/callable.cuh>

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "krex_test.hpp"
#include "proc_util.hpp"
#include "sibling_log.hpp"

void krex_nvbench_dummy(nvbench::state&) {}
NVBENCH_DEFINE_CALLABLE(krex_nvbench_dummy, krex_nvbench_dummy_callable);
using dummy_bench = nvbench::benchmark<krex_nvbench_dummy_callable>;

namespace nvbench::detail {
// nvbench's test seam: a state of `bench` (no device: CPU-only), with a
// non-owning null stream so that nothing calls the CUDA runtime.
struct state_tester : public nvbench::state {
  explicit state_tester(const nvbench::benchmark_base& bench) : nvbench::state{bench} {
    this->set_cuda_stream(nvbench::cuda_stream{cudaStream_t{}, false});
  }
};
}  // namespace nvbench::detail

namespace {

using namespace std::chrono_literals;
using nvbench::detail::state_tester;

/// A CPU-only benchmark that measures quickly: at least 5 samples, at most
/// 0.3 s of measuring.
dummy_bench& cpu_bench() {
  static dummy_bench b;
  static bool set = false;
  if (!set) {
    b.set_is_cpu_only(true);
    b.set_min_samples(5);
    b.set_timeout(0.3);
    b.set_skip_time(-1.0);
    set = true;
  }
  return b;
}

const nvbench::summary* find(const nvbench::state& st, const std::string& tag) {
  for (const nvbench::summary& s : st.get_summaries())
    if (s.get_tag() == tag) return &s;
  return nullptr;
}

krex_test::scoped_segment& segment() {
  static krex_test::scoped_segment seg;
  return seg;
}

// Runs first (gtest keeps file order): configure() before any tenant joins.
TEST(nvbench, each_exec_holds_a_region_and_siblings_never_submit_inside_it) {
  krex_test::shared<krex_test::sibling_log<100000>> log;
  const krex::options opts = segment().opts();  // named before the fork: one segment for both
  krex_test::child sib = krex_test::spawn_submitter(opts, *log);
  ASSERT_EQ(log->ready.load(), 1) << "sibling did not join";

  krex::nvbench::configure(opts);
  krex::nvbench::join();  // as NVBENCH_MAIN does after parsing: before the first exec
  krex::nvbench::join();  // once per device
  struct window {
    std::uint64_t begin_ns, end_ns;
  };
  std::vector<window> windows;
  std::vector<std::unique_ptr<state_tester>> states;
  const std::uint64_t regions_before = krex::nvbench::regions();
  for (int k = 0; k < 3; ++k) {
    states.push_back(std::make_unique<state_tester>(cpu_bench()));
    nvbench::state& st = *states.back();
    std::uint64_t first = 0, last = 0;
    krex::nvbench::exec(st, nvbench::exec_tag::no_gpu, [&](nvbench::launch&) {
      if (first == 0) first = krex::detail::now_ns();
      krex_test::spin_for(2'000'000);
      last = krex::detail::now_ns();
    });
    windows.push_back({first, last});
    ::usleep(20'000);  // between states the sibling runs again
  }
  log->stop.store(1);
  EXPECT_TRUE(krex_test::wait_exit(sib.pid(), 10s).has_value());
  ASSERT_EQ(log->failed.load(), 0);
  EXPECT_EQ(krex::nvbench::regions() - regions_before, 3U);
  EXPECT_EQ(krex::nvbench::failures(), 0U);

  for (const auto& p : states) {
    const nvbench::state& st = *p;
    EXPECT_FALSE(st.is_skipped()) << st.get_skip_reason();
    // nvbench's own CPU-only measurement ran and summarized itself.
    const nvbench::summary* mean = find(st, "nv/cpu_only/time/cpu/mean");
    ASSERT_NE(mean, nullptr);
    EXPECT_GE(mean->get_float64("value"), 0.0019);
    EXPECT_LT(mean->get_float64("value"), 0.05);
    const nvbench::summary* samples = find(st, "nv/cpu_only/sample_size");
    ASSERT_NE(samples, nullptr);
    EXPECT_GE(samples->get_int64("value"), 5);
    // krex's: the level as a column, the wait as a duration column, the rest hidden.
    const nvbench::summary* level = find(st, "krex/level");
    ASSERT_NE(level, nullptr);
    EXPECT_EQ(level->get_string("name"), "krex");
    EXPECT_EQ(level->get_string("value").rfind("gate+drain", 0), 0U) << level->get_string("value");
    EXPECT_FALSE(level->has_value("hide"));
    const nvbench::summary* wait = find(st, "krex/wait");
    ASSERT_NE(wait, nullptr);
    EXPECT_EQ(wait->get_string("hint"), "duration");
    EXPECT_GE(wait->get_float64("value"), 0.0);
    EXPECT_LT(wait->get_float64("value"), 10.0);  // seconds: the drain deadline bounds it
    for (const char* tag : {"krex/lock", "krex/drain", "krex/freeze", "krex/body", "krex/frozen",
                            "krex/warnings", "krex/report"}) {
      const nvbench::summary* s = find(st, tag);
      ASSERT_NE(s, nullptr) << tag;
      EXPECT_TRUE(s->has_value("hide")) << tag;
      EXPECT_TRUE(s->has_value("description")) << tag;
    }
    // The body is state.exec: at least its samples' 2 ms each.
    EXPECT_GE(find(st, "krex/body")->get_float64("value"), 5 * 0.002);
    EXPECT_NE(find(st, "krex/report")->get_string("value").find("\"epoch\""), std::string::npos);
  }

  // No sibling submission ran inside an exec's measured window; and in each
  // window the sibling wanted the device (a submission tried before the
  // window ended ran only after it: held back by the region), or the test
  // would prove nothing.
  int ran_inside = 0;
  std::size_t held_back = 0;
  const std::uint32_t n = log->n.load();
  for (const window& w : windows) {
    bool held = false;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (log->at_ns[i] > w.begin_ns && log->at_ns[i] < w.end_ns) ++ran_inside;
      if (log->tried_ns[i] < w.end_ns && log->at_ns[i] > w.end_ns)
        held = true;
    }
    held_back += held ? 1 : 0;
  }
  EXPECT_EQ(held_back, windows.size()) << "the sibling did not want the device during every exec";
  EXPECT_EQ(ran_inside, 0) << "sibling submissions ran inside a state's region";
  EXPECT_GT(krex::nvbench::last_report().body_ns, 0U);
}

TEST(nvbench, configure_after_join_is_an_error) {
  try {
    krex::nvbench::configure(segment().opts());
    FAIL() << "configure() after the tenant joined did not throw";
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), krex::step::join);
    EXPECT_NE(std::string(e.what()).find("call configure() before the benchmarks run"),
              std::string::npos)
        << e.what();
  }
}

// NVBENCH_MAIN's hook (NVBENCH_MAIN_PARSE_CUSTOM_POST) with a stand-in for
// nvbench's option_parser (its benchmarks' devices need a CUDA driver): one
// tenant per device, joined once; a device krex cannot join is an error
// there, which NVBENCH_MAIN prints before any benchmark runs.
struct fake_device {
  int id;
  int get_id() const { return id; }
};
struct fake_benchmark {
  std::vector<fake_device> devices;
  const std::vector<fake_device>& get_devices() const { return devices; }
};
struct fake_parser {
  std::vector<std::unique_ptr<fake_benchmark>> benches;
  std::vector<std::unique_ptr<fake_benchmark>>& get_benchmarks() { return benches; }
};

TEST(nvbench, the_main_hook_joins_each_device_once) {
  fake_parser p;
  p.benches.push_back(std::make_unique<fake_benchmark>(fake_benchmark{{{0}}}));
  p.benches.push_back(std::make_unique<fake_benchmark>(fake_benchmark{{{0}}}));
  NVBENCH_MAIN_PARSE_CUSTOM_POST(p);  // the macro NVBENCH_MAIN expands
  EXPECT_EQ(krex::nvbench::detail::global().tenants.size(), 1U);
  // The host backend has one device unless KREX_HOST_DEVICES says more.
  p.benches.push_back(std::make_unique<fake_benchmark>(fake_benchmark{{{7}}}));
  EXPECT_THROW(NVBENCH_MAIN_PARSE_CUSTOM_POST(p), krex::error);
  EXPECT_EQ(krex::nvbench::detail::global().tenants.size(), 1U);
}

TEST(nvbench, tenants_leave_with_a_reset_unless_configured_otherwise) {
  // Without configure(): release_on_leave on (the exit's context teardown
  // inside the gate). This binary configured its segment's options, which
  // leave it off: they are used as given.
  EXPECT_TRUE(krex::nvbench::detail::default_options().release_on_leave());
  EXPECT_FALSE(krex::options{}.release_on_leave());
  krex::nvbench::detail::state unconfigured;
  EXPECT_TRUE(krex::nvbench::detail::tenant_options(unconfigured).release_on_leave());
  unconfigured.opts = krex::options{}.drain_deadline(std::chrono::milliseconds(1234));
  EXPECT_FALSE(krex::nvbench::detail::tenant_options(unconfigured).release_on_leave());
  EXPECT_EQ(krex::nvbench::detail::tenant_options(unconfigured).drain_deadline(),
            std::chrono::milliseconds(1234));
  krex::nvbench::join();
  ASSERT_FALSE(krex::nvbench::detail::global().tenants.empty());
  EXPECT_FALSE(krex::nvbench::detail::global().tenants.begin()->second->opts().release_on_leave());
}

TEST(nvbench, exec_twice_on_one_state_is_an_error) {
  krex::nvbench::strict(false);  // this test fails an exec on purpose
  state_tester st{cpu_bench()};
  int calls = 0;
  krex::nvbench::exec(st, nvbench::exec_tag::no_gpu, [&](nvbench::launch&) { ++calls; });
  const int after_first = calls;
  const std::uint64_t failures = krex::nvbench::failures();
  try {
    krex::nvbench::exec(st, nvbench::exec_tag::no_gpu, [&](nvbench::launch&) { ++calls; });
    FAIL() << "a second exec on one state did not throw";
  } catch (const krex::error& e) {
    EXPECT_NE(std::string(e.what()).find("call exec once per benchmark state"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(calls, after_first) << "the second exec ran its launcher";
  EXPECT_EQ(krex::nvbench::failures(), failures + 1);
}

TEST(nvbench, a_skipped_state_takes_no_region) {
  state_tester st{cpu_bench()};
  st.skip("skipped by the benchmark");
  const std::uint64_t before = krex::nvbench::regions();
  int calls = 0;
  krex::nvbench::exec(st, nvbench::exec_tag::no_gpu, [&](nvbench::launch&) { ++calls; });
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(krex::nvbench::regions(), before);
  EXPECT_EQ(find(st, "krex/level"), nullptr);
}

TEST(nvbench, an_exception_in_the_launcher_ends_the_region) {
  state_tester st{cpu_bench()};
  EXPECT_THROW(krex::nvbench::exec(st, nvbench::exec_tag::no_gpu,
                                   [&](nvbench::launch&) { throw std::runtime_error("boom"); }),
               std::runtime_error);
  // The region ended: the next exec gets one (a held lock would block it).
  state_tester next{cpu_bench()};
  krex::nvbench::exec(next, nvbench::exec_tag::no_gpu, [&](nvbench::launch&) {});
  ASSERT_NE(find(next, "krex/level"), nullptr);
}

}  // namespace

// Run by the ctest tests test_nvbench_off (KREX_NVBENCH_REGIONS=0) and
// test_nvbench_bad_switch (KREX_NVBENCH_REGIONS=maybe): the switch is read once
// per process. Skipped in the plain run.
namespace {

std::string regions_env() {
  const char* v = std::getenv("KREX_NVBENCH_REGIONS");
  return v == nullptr ? std::string("(unset)") : std::string(v);
}

TEST(nvbench_switch, off_runs_unprotected_and_says_so) {
  if (regions_env() != "0") GTEST_SKIP() << "run by ctest test_nvbench_off (KREX_NVBENCH_REGIONS=0)";
  state_tester st{cpu_bench()};
  int calls = 0;
  krex::nvbench::exec(st, nvbench::exec_tag::no_gpu, [&](nvbench::launch&) { ++calls; });
  EXPECT_GT(calls, 0);
  EXPECT_EQ(krex::nvbench::regions(), 0U);
  ASSERT_NE(find(st, "krex/level"), nullptr);
  EXPECT_EQ(find(st, "krex/level")->get_string("value"), "unprotected");
  EXPECT_EQ(find(st, "krex/wait"), nullptr);
  EXPECT_NE(find(st, "nv/cpu_only/time/cpu/mean"), nullptr);
}

TEST(nvbench_switch, an_invalid_value_is_an_error_and_fails_the_program) {
  if (regions_env() != "maybe")
    GTEST_SKIP() << "run by ctest test_nvbench_bad_switch (KREX_NVBENCH_REGIONS=maybe)";
  state_tester st{cpu_bench()};
  int calls = 0;
  try {
    krex::nvbench::exec(st, nvbench::exec_tag::no_gpu, [&](nvbench::launch&) { ++calls; });
    FAIL() << "an invalid KREX_NVBENCH_REGIONS did not throw";
  } catch (const krex::error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("invalid value 'maybe' for KREX_NVBENCH_REGIONS"), std::string::npos) << what;
    EXPECT_NE(what.find("set KREX_NVBENCH_REGIONS=1"), std::string::npos) << what;
  }
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(krex::nvbench::failures(), 1U);
  // Strict mode (the default): the program's status becomes 1 at exit, with
  // a message that ctest checks (PASS_REGULAR_EXPRESSION).
}

}  // namespace
