// SPDX-License-Identifier: Apache-2.0
#pragma once

// Google Benchmark integration: one krex region per benchmark run, around its
// warm-up and measured loop, entered by Google Benchmark's per-run Setup hook
// and left by its Teardown hook; every iteration timed by krex (host clock,
// or device events with a cold L2 on CUDA) and reported with
// SetIterationTime; the region's protection as the benchmark's label and its
// step times as counters.
//
// Label and counters (set once the run's region has ended, so they include
// what was seen during the body):
//   label  the protection reached, e.g. "gate+drain+freeze(cgroup2)+pin";
//          with " | WARNING (n): <first warning>" appended when the region
//          report has warnings (non-krex work on the reserved CPUs, the
//          measuring thread preempted): such a run was not fully protected.
//   krex_lock_s, krex_drain_s, krex_freeze_s   entry steps, in seconds
//   krex_reserved_foreign_s   other tasks' CPU time on the reserved CPUs
//                             during the body, in seconds (when measured)
//   krex_warnings, krex_frozen   counts
// Google Benchmark prints counters with SI prefixes: krex_drain_s=8.1u is
// 8.1 microseconds.
//
// Strict mode, the default: a krex error in any run (the tenant cannot join,
// a bad KREX_* value, no region, a lease lost) still becomes that run's error
// row, and the program then exits with status 1 instead of 0
// (BENCHMARK_MAIN() included), so that a script or CI job cannot take a run
// krex did not protect for a good one. KREX_GBENCH_STRICT=0 (or
// krex::gbench::strict(false)) turns it off: the error rows only, status 0
// (Google Benchmark's own rule). failures() counts them for a harness with
// its own main().
//
//     #include <krex/gbench.hpp>
//
//     void bm_saxpy(benchmark::State& st) {
//       krex::gbench::run(st, [&] { saxpy(n, a, x, y); });           // host work
//       // CUDA: krex::gbench::run(st, stream, [&] { k<<<g, b, 0, stream>>>(...); });
//     }
//     KREX_BENCHMARK(bm_saxpy)->Arg(1 << 20);
//
// Google Benchmark calls Setup before each run (each trial while it searches
// for the iteration count, and each repetition) and Teardown after it, on the
// thread that then runs the benchmark's thread 0 — which is the thread krex
// pins. The hooks are plain function pointers (Google Benchmark 1.7 takes
// nothing else), so the tenant and the current region are per process: the
// tenant joins on the first Setup with krex::options{} and KREX_* overrides,
// or with what krex::gbench::configure() set before the benchmarks run.
// Works with Google Benchmark 1.7.1 (Debian 12) and later releases.
//
// KREX_GBENCH=0 turns krex off for a whole program (no tenant, no region;
// iterations still timed the same way, label "unprotected"): the control for
// comparing protected with unprotected concurrent runs of one binary.
//
// Placements (run_options::placements = K > 1), as krex::measure's: the body
// takes a krex::placement and runs on inputs number p.index; iteration i of
// a run uses placement i % K, every placement runs once untimed before the
// loop, and the run gets the counters krex_placements (K),
// krex_placement_spread ((max - min) / median of the placements' medians),
// krex_placement_min_s / krex_placement_max_s (the fastest and slowest
// placement's median) and krex_placement_bytes (the memory of the K copies,
// from run_options::placement_bytes). last_run() has every iteration's time
// and placement. K copies of the inputs: krex::placements<T> (host) or
// krex::cuda::placement_buffers, and run_options{}.over(buffers).
//
//     krex::cuda::placement_buffers in(8, {bytes, bytes}, std::size_t{1} << 30);  // outside
//     krex::gbench::run(st, stream, [&](krex::placement p) {
//       axpby<<<g, b, 0, stream>>>(in.get<float>(p, 0), in.get<float>(p, 1), n);
//     }, krex::gbench::run_options{}.over(in));

#include <krex/adapters/bench_state.hpp>
#include <krex/error.hpp>
#include <krex/host/measure.hpp>
#include <krex/options.hpp>
#include <krex/region.hpp>

#include <benchmark/benchmark.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace krex::gbench {

/// How run() times a benchmark's iterations.
struct run_options {
  /// K placements of the body's inputs: iteration i of a run uses placement
  /// i % K (the body must take a krex::placement when K > 1), each placement
  /// runs once untimed before the loop, and the run reports the spread
  /// between placements. 1 (the default): the loop exactly as without it.
  int placements = 1;
  /// The memory the K placements cost, in bytes: reported as the counter
  /// krex_placement_bytes, never allocated (over() sets it).
  std::size_t placement_bytes = 0;
  /// CUDA: overwrite the L2 before each iteration, outside its events.
  bool cold_l2 = true;
  /// Takes K and the bytes from a set of K copies (krex::placements<T>,
  /// krex::cuda::placement_buffers, krex::hip::placement_buffers).
  template <class Buffers>
  run_options& over(const Buffers& copies) {
    placements = copies.count();
    placement_bytes = copies.bytes();
    return *this;
  }
};

namespace detail {

/// The process's benchmark tenant and its current region.
struct state : krex::detail::bench_state {
  std::unique_ptr<krex::tenant> tenant;
  std::optional<krex::region> region;
  std::string error;        ///< why the current run has no region ("" if it has one)
  std::uint64_t runs = 0;   ///< regions entered
  std::uint64_t lost = 0;   ///< regions whose lease expired before Teardown
  measure_result last_run;  ///< the iterations of the last run() that ended

  static constexpr const char* name = "gbench";
  static constexpr const char* failed =
      "benchmark run(s) had a krex error (see their error rows)";
  /// strict(), or else KREX_GBENCH_STRICT (below).
  bool strict_on() const;
  void leave() {
    region.reset();
    tenant.reset();
  }
};

inline state& global() { return krex::detail::process_state<state>(); }

/// KREX_GBENCH: unset or 1 = regions, 0 = off. Read once; any other value is
/// an error (reported by every run through SkipWithError).
using switch_state = krex::detail::env_switch;
inline const switch_state& krex_switch() {
  static const switch_state s = krex::detail::read_env_switch("KREX_GBENCH", "0, 1");
  return s;
}

/// `what` with one "krex: " in front (krex::error's what() has it already).
inline std::string krex_prefixed(const std::string& what) {
  return what.rfind("krex:", 0) == 0 ? what : "krex: " + what;
}

/// KREX_GBENCH_STRICT: unset or 1 = on (the default), 0 = off; anything
/// else is an error (reported like KREX_GBENCH's, and failing the program).
using strict_env = krex::detail::env_switch;
inline const strict_env& strict_from_env() {
  static const strict_env s = krex::detail::read_env_switch(
      "KREX_GBENCH_STRICT",
      "1, the default: a krex error fails the program; 0: it only makes error rows");
  return s;
}

inline bool state::strict_on() const { return strict >= 0 ? strict == 1 : strict_from_env().on; }

using krex::detail::arm_strict_exit;

/// Counts a run's krex error. Called with s.lock held.
inline void count_failure(state& s) {
  ++s.failures;
  arm_strict_exit(s);
}

}  // namespace detail

/// Strict mode (the default) on or off for this process (overrides
/// KREX_GBENCH_STRICT): with it, a krex error in any run makes the program
/// exit with status 1; without it, the runs' error rows are all.
inline void strict(bool on) {
  std::lock_guard<std::mutex> g(detail::global().lock);
  detail::global().strict = on ? 1 : 0;
  detail::arm_strict_exit(detail::global());
}

/// Runs that had a krex error so far (each one an error row in the output).
inline std::uint64_t failures() {
  std::lock_guard<std::mutex> g(detail::global().lock);
  return detail::global().failures;
}

/// Options for the benchmark tenant (KREX_* variables still override them).
/// Call before benchmark::RunSpecifiedBenchmarks(); throws krex::error(step::join)
/// if the tenant has already joined.
inline void configure(const options& o) {
  detail::state& s = detail::global();
  std::lock_guard<std::mutex> g(s.lock);
  if (s.tenant)
    throw error(step::join, "krex::gbench::configure() after the benchmark tenant joined", 0,
                "call configure() before benchmark::RunSpecifiedBenchmarks()");
  s.opts = o;
}

/// The benchmark tenant, joined on first use. Throws krex::error if it cannot join.
inline krex::tenant& tenant() {
  detail::state& s = detail::global();
  std::lock_guard<std::mutex> g(s.lock);
  if (!s.tenant) s.tenant = std::make_unique<krex::tenant>(s.opts.value_or(options{}));
  return *s.tenant;
}

/// Setup hook: joins (first run) and enters a region for this run. A failure
/// is kept and reported by run() through SkipWithError, since a Setup hook
/// cannot fail a benchmark itself.
inline void setup(const benchmark::State& /*unused*/) {
  detail::state& s = detail::global();
  if (!detail::krex_switch().on) return;
  try {
    krex::tenant& t = tenant();
    std::lock_guard<std::mutex> g(s.lock);
    s.error.clear();
    s.region.emplace(t);
    ++s.runs;
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> g(s.lock);
    s.region.reset();
    s.error = e.what();
  }
}

/// Teardown hook: ends the run's region. A lost lease (the body outlived the
/// lease and the device was handed on) is printed to stderr and counted in
/// lost_leases(): the run's numbers were already reported by then.
inline void teardown(const benchmark::State& /*unused*/) {
  detail::state& s = detail::global();
  std::lock_guard<std::mutex> g(s.lock);
  if (!s.region) return;
  try {
    s.region->exit();
  } catch (const error& e) {
    ++s.lost;
    detail::count_failure(s);
    // State::name() is not in Google Benchmark 1.7: the run is the one just reported.
    std::fprintf(stderr, "%s (the Google Benchmark run just reported)\n", e.what());
  }
  s.last = s.region->report();
  s.region.reset();
}

/// Regions entered, and of those, regions whose lease expired before Teardown.
inline std::uint64_t regions() { return detail::global().runs; }
inline std::uint64_t lost_leases() { return detail::global().lost; }
/// The report of the last region that ended (its body fields are complete).
inline region_report last_report() {
  std::lock_guard<std::mutex> g(detail::global().lock);
  return detail::global().last;
}

/// The last run() that ended: each iteration's time (samples_ms, at most the
/// first 2^20 iterations of the run), its placement, each placement's
/// median (0 for a placement the run had too few iterations to time), their
/// spread and placement_bytes, and the statistics of the samples; method
/// "host" or "cuda-events" ("+cold-l2" when flushed). Empty before any
/// run() ended, or when the last one was refused (a bad option, no region,
/// a CUDA error).
inline measure_result last_run() {
  std::lock_guard<std::mutex> g(detail::global().lock);
  return detail::global().last_run;
}

namespace detail {

/// Skips the benchmark unless this run holds a region (or krex is switched
/// off by KREX_GBENCH=0). Returns the held region's report, or an empty one
/// when switched off.
inline const region_report* held_or_skip(benchmark::State& st) {
  state& s = global();
  std::lock_guard<std::mutex> g(s.lock);
  static const region_report unprotected;
  const std::string& bad = !krex_switch().error.empty() ? krex_switch().error
                                                          : strict_from_env().error;
  if (!bad.empty()) {
    count_failure(s);
    s.last_run = measure_result{};
    st.SkipWithError(krex_prefixed(bad).c_str());
    return nullptr;
  }
  if (!krex_switch().on) return &unprotected;
  if (s.region) return &s.region->report();
  count_failure(s);
  s.last_run = measure_result{};
  st.SkipWithError(s.error.empty()
                       ? "krex: no region held: register the benchmark with KREX_BENCHMARK "
                         "(or ->Setup(krex::gbench::setup)->Teardown(krex::gbench::teardown))"
                       : krex_prefixed(s.error).c_str());
  return nullptr;
}

/// Ends the run's region once its measured loop is done, so that its report
/// holds what was seen during the body (warnings, foreign load). A lost lease
/// fails the run. Returns the final report (a copy); the unprotected one when
/// krex is switched off.
inline region_report finish_run(benchmark::State& st) {
  state& s = global();
  std::lock_guard<std::mutex> g(s.lock);
  if (!s.region) return region_report{};
  try {
    s.region->exit();
  } catch (const error& e) {
    ++s.lost;
    count_failure(s);
    st.SkipWithError(krex_prefixed(e.what()).c_str());
  }
  return s.region->report();
}

/// The region's protection as the label (with its warnings: a run with any
/// is not labelled as fully protected), its step times (seconds), foreign
/// load (seconds) and warnings as counters. Returns the label.
inline std::string describe(benchmark::State& st, const region_report& r) {
  if (!r.gated) {
    st.SetLabel("unprotected");
    return "unprotected";
  }
  std::string label = r.level();
  if (!r.warnings.empty())
    label += " | WARNING (" + std::to_string(r.warnings.size()) + "): " + r.warnings.front();
  st.SetLabel(label);
  const auto s = [](std::uint64_t ns) { return static_cast<double>(ns) / 1e9; };
  st.counters["krex_lock_s"] = s(r.lock_ns);
  st.counters["krex_drain_s"] = s(r.gate_ns + r.drain_ns);
  st.counters["krex_freeze_s"] = s(r.freeze_ns);
  st.counters["krex_frozen"] = static_cast<double>(r.frozen_pids.size());
  st.counters["krex_warnings"] = static_cast<double>(r.warnings.size());
  if (r.reserved_foreign_ns >= 0)
    st.counters["krex_reserved_foreign_s"] = static_cast<double>(r.reserved_foreign_ns) / 1e9;
  return label;
}

/// Counts and reports a krex error of this run (an error row; strict mode
/// fails the program).
inline void fail_run(benchmark::State& st, const std::string& what) {
  {
    std::lock_guard<std::mutex> g(global().lock);
    count_failure(global());
    global().last_run = measure_result{};
  }
  st.SkipWithError(krex_prefixed(what).c_str());
}

/// The placement checks of run(), as krex::measure's: K >= 1, and a body
/// that takes a krex::placement when K > 1. False after an error row.
template <class F>
bool placements_ok(benchmark::State& st, const run_options& o) {
  try {
    if (o.placements < 1)
      throw error(step::options,
                  "krex::gbench::run_options: placements = " + std::to_string(o.placements) +
                      " is not >= 1",
                  0, "use 1 (one copy of the inputs, the default) or the number of copies K");
    if (o.placements > 1 && !krex::detail::takes_placement<F>)
      throw error(step::options,
                  "krex::gbench::run_options: placements = " + std::to_string(o.placements) +
                      " but the body does not take a krex::placement, so it cannot run on the "
                      "placement each iteration records",
                  0,
                  "write the body as [&](krex::placement p) { ... inputs[p.index] ... }, or "
                  "leave placements at 1");
    return true;
  } catch (const error& e) {
    fail_run(st, e.what());
    return false;
  }
}

/// The iterations of one run(): each one's time in ms, recorded outside the
/// timed part, at most max_kept (memory for a run of millions of short
/// iterations stays bounded); reserved before the loop.
class iterations_log {
 public:
  static constexpr std::size_t max_kept = std::size_t{1} << 20;
  explicit iterations_log(const benchmark::State& st) {
    const auto want = static_cast<std::size_t>(std::max<benchmark::IterationCount>(
        st.max_iterations, 0));
    m_r.samples_ms.reserve(std::min(want, max_kept));
  }
  void add(double seconds) {
    if (m_r.samples_ms.size() < max_kept) m_r.samples_ms.push_back(seconds * 1e3);
  }
  /// The statistics and placement bookkeeping; the placement counters when
  /// K > 1 (averaged over threads, each of which times its own loop); kept
  /// as last_run().
  /// `label`: what describe() set (Google Benchmark has no getter for it).
  void finish(benchmark::State& st, const run_options& o, std::string method,
              const std::string& label) {
    measure_result& r = m_r;
    r.method = std::move(method);
    const int k = o.placements;
    krex::detail::summarize(r);
    krex::detail::summarize_placements(r, k, o.placement_bytes);
    // Fewer iterations than placements: the untimed placements have no
    // median, so the spread is over the timed ones, and the label says so.
    const auto timed = static_cast<int>(std::min<std::size_t>(r.samples_ms.size(),
                                                              static_cast<std::size_t>(k)));
    std::vector<double> m(r.placement_median_ms.begin(), r.placement_median_ms.begin() + timed);
    std::sort(m.begin(), m.end());
    const double mid = krex::detail::quantile_sorted(m, 0.5);
    r.placement_spread = m.empty() || mid <= 0 ? 0 : (m.back() - m.front()) / mid;
    if (k > 1) {
      using C = benchmark::Counter;
      st.counters["krex_placements"] = C(k, C::kAvgThreads);
      st.counters["krex_placement_spread"] = C(r.placement_spread, C::kAvgThreads);
      st.counters["krex_placement_min_s"] = C(m.empty() ? 0 : m.front() / 1e3, C::kAvgThreads);
      st.counters["krex_placement_max_s"] = C(m.empty() ? 0 : m.back() / 1e3, C::kAvgThreads);
      st.counters["krex_placement_bytes"] =
          C(static_cast<double>(o.placement_bytes), C::kAvgThreads, C::kIs1024);
      if (timed < k) {
        st.counters["krex_placements_timed"] = C(timed, C::kAvgThreads);
        st.SetLabel(label + " | PLACEMENTS: " + std::to_string(timed) + " of " +
                    std::to_string(k) +
                    " timed (give the run at least 4 x K iterations: ->Iterations() or "
                    "--benchmark_min_time)");
      }
    }
    std::lock_guard<std::mutex> g(global().lock);
    global().last_run = r;
  }

 private:
  measure_result m_r;
};

}  // namespace detail

/// Times every iteration of `st` on the host clock: `fn` runs once per
/// iteration; the iteration's time goes to SetIterationTime (register with
/// KREX_BENCHMARK, which sets UseManualTime). Skips with an error if the run
/// holds no region. `fn` may take the iteration index (rotate inputs), or,
/// with o.placements = K > 1, a krex::placement (iteration i on placement
/// i % K; the counters above).
template <class F>
void run(benchmark::State& st, F&& fn, const run_options& o) {
  if (!detail::placements_ok<F>(st, o)) return;
  const region_report* r = detail::held_or_skip(st);
  if (r == nullptr) return;
  const int k = o.placements;
  detail::iterations_log log(st);
  if (k > 1)  // every placement once before it is timed, as krex::measure's warm-up
    for (int p = 0; p < k; ++p) krex::detail::call_sample(fn, p, k);
  using clock = std::chrono::steady_clock;
  int i = 0;
  for (auto _ : st) {
    const auto t0 = clock::now();
    krex::detail::call_sample(fn, i++, k);
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    st.SetIterationTime(s);
    log.add(s);
  }
  const std::string label = detail::describe(st, detail::finish_run(st));
  log.finish(st, o, "host", label);
}

/// run() with the default options: one placement.
template <class F>
void run(benchmark::State& st, F&& fn) {
  run(st, std::forward<F>(fn), run_options{});
}

}  // namespace krex::gbench

/// Registers `fn` as a Google Benchmark whose runs each hold a krex region
/// and whose iterations are timed by krex (manual time). Returns the
/// benchmark::internal::Benchmark* for more settings (->Arg(...), ...).
#define KREX_BENCHMARK(fn)                      \
  BENCHMARK(fn)                                 \
      ->Setup(::krex::gbench::setup)            \
      ->Teardown(::krex::gbench::teardown)      \
      ->UseManualTime()
