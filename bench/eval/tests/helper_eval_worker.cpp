// SPDX-License-Identifier: Apache-2.0
// A stand-in for krex_eval_worker (bench/eval/worker.cu) with no GPU, for
// bench/eval/tests/test_eval.cpp: the same arguments and line protocol, results whose
// "true" duration follows the candidate table (est_ms, +3% per rank-set
// position), commands with timing suffixes (candidates.hpp: @sync,
// @loop<ms>), 20 samples each, worker-side CLOCK_MONOTONIC start stamps,
// optional noise, and faults on request:
//   KREX_FAKE_FAIL=<id>   report ok=false for that candidate
//   KREX_FAKE_CRASH=<id>  exit 3 without a result
//   KREX_FAKE_HANG=<id>   never answer
//   KREX_FAKE_NOISE=<x>   multiplicative noise of +-x on medians
//   KREX_FAKE_ENV=<VAR>   echo the value of VAR in the result (as "env")
//   KREX_FAKE_EXIT_MS=<n> take n ms to exit after stdin closes (a slow teardown)
//   KREX_FAKE_TAIL=<pct>  in --mode lock, one sample in 20 is pct% slow (a tail
//                         the command median hides)
//   KREX_FAKE_BIMODAL=<pct> two sample levels pct% apart (below);
//   KREX_FAKE_BIMODAL_MODE=<mode> only in workers of that --mode
// Every result names the --device it was given ("device"), and carries the
// fields that krex_eval does not read but keeps (the worker's issue-19
// forensics): fake buffer addresses (x_addr, y_addr, z_addr, flush_addr:
// 2^47, every digit) and, in --mode krex, the region's clocks at entry and
// exit (mem_mhz, temp_c, clock_reasons, exit_*) and quiet_last_ratio.
//
// Placements as the real worker: --placements K and --placement-budget-mb M
// (bench/eval/plan.hpp's placements_within on the candidate's input_bytes),
// sample i on placement i % K, each result with placements,
// placements_asked, placement_bytes, placement_spread, placement_median_ms,
// sample_placement and placements_reused (a worker keeps one copy set of
// K > 1, reuses it when plan.hpp's placements_reusable says it fits, with
// the one-buffer size input_bytes, and frees it otherwise; krex::measure's
// bookkeeping; the stand-in keeps its 20 samples, where the real worker
// rounds them up to a multiple of K where that adds at most 5%).
//
// --pool C: the persistent krex shape on a real krex::pool of C workers
// (bench/eval/pool_host.hpp, the host backend): each pool worker joins the
// driver's --segment (pin, confine and freezing off: a test machine), runs
// each command's "timed loop" inside a krex::region of its tenant, and
// stamps it (mono_critical_ns, mono_critical_end_ns); a crash is the pool
// worker's exit, a hang the pool's --timeout-s.

#include "../candidates.hpp"
#include "../json.hpp"
#include "../plan.hpp"
#include "../pool_host.hpp"
#include "../stats.hpp"

#include <krex/measure.hpp>
#include <krex/pool.hpp>
#include <krex/region.hpp>

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {
std::string env(const char* k) {
  const char* v = std::getenv(k);
  return v != nullptr ? v : "";
}

long long mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

struct args_t {
  std::string mode, segment;
  int device = 0, pool = 0, placements = 1;
  long budget_mb = 0;
  double timeout_s = 300;
};

/// One process's state: its first command, its noise.
struct fake_worker {
  explicit fake_worker(args_t a)
      : m_a(std::move(a)), m_all(krex_eval::all_candidates()), m_rng(static_cast<unsigned>(::getpid())) {}

  /// The result line of `cmd`; nothing when the command crashes its worker
  /// (KREX_FAKE_CRASH). `t`: the pool worker's tenant (--pool), else none.
  std::optional<std::string> run(const std::string& cmd, krex::tenant* t) {
    const long long mono_start_ns = mono_ns();
    if (cmd == env("KREX_FAKE_CRASH")) return std::nullopt;
    if (cmd == env("KREX_FAKE_HANG")) std::this_thread::sleep_for(std::chrono::hours(1));
    const double noise = std::atof(env("KREX_FAKE_NOISE").c_str());
    std::uniform_real_distribution<double> u(-noise, noise);
    const double tail = std::atof(env("KREX_FAKE_TAIL").c_str());
    std::string id, why;
    krex_eval::timing tm;
    const bool parsed = krex_eval::parse_command(cmd, &id, &tm, &why);
    const krex_eval::candidate* c = parsed ? krex_eval::find_candidate(m_all, id) : nullptr;
    krex_eval::json_object o;
    o.str("id", cmd).str("mode", m_a.mode).num("pid", ::getpid()).boolean("first_in_process", m_first);
    o.integer("mono_start_ns", mono_start_ns).str("timing", tm.name()).num("device", m_a.device);
    if (m_first) o.num("t_context_ms", 1.5).str("gpu", "fake GPU");
    m_first = false;
    if (c == nullptr || cmd == env("KREX_FAKE_FAIL")) {
      o.boolean("ok", false).str("error", !parsed ? why : c == nullptr ? "unknown candidate id" : "wrong result: fake");
      return o.text();
    }
    const int critical_ms = tm.loop_ms > 0 ? 6 : 1;  // the loop workload: a longer timed loop
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    if (t != nullptr) {  // a pool worker: the timed loop in a region of its tenant
      krex::region r{*t};
      o.integer("mono_critical_ns", mono_ns());
      std::this_thread::sleep_for(std::chrono::milliseconds(critical_ms));
      o.integer("mono_critical_end_ns", mono_ns());
      r.exit();
      o.str("level", r.report().level());
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(critical_ms));
    }
    const double tt = c->est_ms * (1 + 0.03 * c->set_pos) * (1 + u(m_rng));
    std::vector<double> samples(20, tt);
    if (m_a.mode == "lock" && tail > 0) samples[7] = tt * (1 + tail / 100);
    // KREX_FAKE_BIMODAL=P: two levels P% apart, as short bandwidth-bound
    // kernels measure (docs/EVAL.md): 16 of 20 samples on the slow level at
    // even set positions, 4 at odd ones, so that the median jumps a level
    // and the 10th percentile stays on the fast one.
    // KREX_FAKE_BIMODAL_MODE=<mode>: only workers of that --mode do.
    const std::string bimodal_mode = env("KREX_FAKE_BIMODAL_MODE");
    const double bimodal =
        bimodal_mode.empty() || bimodal_mode == m_a.mode ? std::atof(env("KREX_FAKE_BIMODAL").c_str()) : 0;
    if (bimodal > 0)
      for (int k = 0; k < (c->set_pos % 2 == 0 ? 16 : 4); ++k) samples[k] = tt * (1 + bimodal / 100);
    const double median_t = krex_eval::quantile(samples, 0.5);
    o.str("set", c->set).num("set_pos", c->set_pos);
    o.num("t_compile_ms", 3).num("t_inputs_ms", 0.5).num("t_check_ms", 0.5);
    o.num("t_wait_ms", 0).num("t_critical_ms", critical_ms).num("median_ms", median_t).num("p95_ms", tt);
    o.num("sync_each", tm.sync_each ? 1 : 0);
    o.nums("samples_ms", samples).boolean("ok", true);
    // Placements: K within the budget, sample i on placement i % K.
    const std::int64_t per_copy = krex_eval::input_bytes(*c);
    const int k = krex_eval::placements_within(m_a.placements, per_copy, m_a.budget_mb << 20,
                                               static_cast<int>(samples.size()));
    const std::vector<std::size_t> sizes{static_cast<std::size_t>(per_copy)};
    const bool reused = krex_eval::placements_reusable(m_kept_k, m_kept_sizes, m_kept_bytes, k, sizes,
                                                       m_a.budget_mb << 20);
    if (!reused) {  // the kept copies freed; K > 1 keeps the command's own
      m_kept_k = k > 1 ? k : 0;
      m_kept_sizes = k > 1 ? sizes : std::vector<std::size_t>{};
      m_kept_bytes = k > 1 ? static_cast<std::int64_t>(k) * per_copy : 0;
    }
    krex::measure_result res;
    res.samples_ms = samples;
    krex::detail::summarize_placements(
        res, k, static_cast<std::size_t>(k > 1 ? m_kept_bytes : per_copy));
    o.boolean("placements_reused", reused);
    o.num("placements", k).num("placements_asked", m_a.placements).num("placement_spread", res.placement_spread);
    o.integer("placement_bytes", static_cast<long long>(res.placement_bytes));
    o.integer("placement_budget_bytes", m_a.budget_mb << 20);
    o.nums("placement_median_ms", res.placement_median_ms);
    o.nums("sample_placement", std::vector<double>(res.placement.begin(), res.placement.end()));
    const long long x_addr = 0x7f1200000000LL + (1LL << 26) * c->set_pos;
    o.integer("x_addr", x_addr).integer("y_addr", x_addr + (1LL << 24)).integer("z_addr", x_addr + (2LL << 24));
    o.integer("flush_addr", 1LL << 47).integer("flush_bytes", 100663296);
    if (m_a.mode == "krex") {
      o.num("quiet_last_ratio", 1.01).num("mem_mhz", 3201).num("temp_c", 41).integer("clock_reasons", 0);
      o.num("exit_sm_mhz", 1980).num("exit_mem_mhz", 3201).num("exit_power_w", 612.5).num("exit_temp_c", 43);
      o.integer("exit_clock_reasons", 0x4);
    }
    if (!env("KREX_FAKE_ENV").empty()) o.str("env", env(env("KREX_FAKE_ENV").c_str()));
    return o.text();
  }

 private:
  args_t m_a;
  std::vector<krex_eval::candidate> m_all;
  std::mt19937 m_rng;
  bool m_first = true;
  int m_kept_k = 0;  // the copies this worker keeps (K > 1), as the real worker
  std::vector<std::size_t> m_kept_sizes;
  std::int64_t m_kept_bytes = 0;
};
}  // namespace

int main(int argc, char** argv) {
  args_t a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--mode") a.mode = v;
    else if (k == "--device") a.device = std::atoi(v.c_str());
    else if (k == "--segment") a.segment = v;
    else if (k == "--pool") a.pool = std::atoi(v.c_str());
    else if (k == "--placements") a.placements = std::atoi(v.c_str());
    else if (k == "--placement-budget-mb") a.budget_mb = std::atol(v.c_str());
    else if (k == "--timeout-s") a.timeout_s = std::atof(v.c_str());
  }
  if (a.mode != "none" && a.mode != "lock" && a.mode != "krex") return 2;
  if (a.pool > 0) {
    if (a.mode != "krex") return 2;
    krex_eval::pool_host_options po;
    po.workers = a.pool;
    po.timeout_s = a.timeout_s;
    po.tenant = krex_eval::worker_tenant_options(a.device, a.segment)
                    .pin(false)
                    .confine(false)
                    .freeze(krex::freeze_method::none);
    // One fake_worker per pool worker process, made in that process.
    return krex_eval::pool_host_main(
        po,
        [a](krex::tenant& t, const std::string& cmd) {
          static fake_worker w{a};
          std::optional<std::string> line = w.run(cmd, &t);
          if (!line) std::_Exit(3);  // KREX_FAKE_CRASH: the pool worker dies
          return *line;
        },
        std::cin, std::cout);
  }
  fake_worker w{a};
  for (std::string cmd; std::getline(std::cin, cmd);) {
    std::optional<std::string> line = w.run(cmd, nullptr);
    if (!line) return 3;
    std::cout << *line << std::endl;
  }
  const int exit_ms = std::atoi(env("KREX_FAKE_EXIT_MS").c_str());
  if (exit_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(exit_ms));
  return 0;
}
