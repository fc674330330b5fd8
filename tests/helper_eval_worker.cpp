// SPDX-License-Identifier: Apache-2.0
// A stand-in for krex_eval_worker (bench/eval/worker.cu) with no GPU, for
// tests/test_eval.cpp: the same arguments and line protocol, results whose
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
// Every result names the --device it was given ("device"), and carries the
// fields that krex_eval does not read but keeps (the worker's issue-19
// forensics): fake buffer addresses (x_addr, y_addr, z_addr, flush_addr:
// 2^47, every digit) and, in --mode krex, the region's clocks at entry and
// exit (mem_mhz, temp_c, clock_reasons, exit_*) and quiet_last_ratio.

#include "../bench/eval/candidates.hpp"
#include "../bench/eval/json.hpp"
#include "../bench/eval/stats.hpp"

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {
std::string env(const char* k) {
  const char* v = std::getenv(k);
  return v != nullptr ? v : "";
}
}  // namespace

int main(int argc, char** argv) {
  std::string mode;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--mode") mode = argv[i + 1];
  int device = 0;
  for (int i = 1; i + 1 < argc; i += 2)
    if (std::string(argv[i]) == "--device") device = std::atoi(argv[i + 1]);
  if (mode != "none" && mode != "lock" && mode != "krex") return 2;
  const auto all = krex_eval::all_candidates();
  const double noise = std::atof(env("KREX_FAKE_NOISE").c_str());
  std::mt19937 rng(static_cast<unsigned>(::getpid()));
  std::uniform_real_distribution<double> u(-noise, noise);
  bool first = true;
  const double tail = std::atof(env("KREX_FAKE_TAIL").c_str());
  for (std::string cmd; std::getline(std::cin, cmd);) {
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    const long long mono_start_ns = static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
    if (cmd == env("KREX_FAKE_CRASH")) return 3;
    if (cmd == env("KREX_FAKE_HANG")) std::this_thread::sleep_for(std::chrono::hours(1));
    std::string id, why;
    krex_eval::timing tm;
    const bool parsed = krex_eval::parse_command(cmd, &id, &tm, &why);
    const krex_eval::candidate* c = parsed ? krex_eval::find_candidate(all, id) : nullptr;
    krex_eval::json_object o;
    o.str("id", cmd).str("mode", mode).num("pid", ::getpid()).boolean("first_in_process", first);
    o.integer("mono_start_ns", mono_start_ns).str("timing", tm.name()).num("device", device);
    if (first) o.num("t_context_ms", 1.5).str("gpu", "fake GPU");
    first = false;
    if (c == nullptr || cmd == env("KREX_FAKE_FAIL")) {
      o.boolean("ok", false).str("error", !parsed ? why : c == nullptr ? "unknown candidate id" : "wrong result: fake");
      std::cout << o.text() << std::endl;
      continue;
    }
    const int critical_ms = tm.loop_ms > 0 ? 6 : 1;  // the loop workload: a longer timed loop
    std::this_thread::sleep_for(std::chrono::milliseconds(2 + critical_ms));
    const double t = c->est_ms * (1 + 0.03 * c->set_pos) * (1 + u(rng));
    std::vector<double> samples(20, t);
    if (mode == "lock" && tail > 0) samples[7] = t * (1 + tail / 100);
    // KREX_FAKE_BIMODAL=P: two levels P% apart, as short bandwidth-bound
    // kernels measure (docs/EVAL.md): 16 of 20 samples on the slow level at
    // even set positions, 4 at odd ones, so that the median jumps a level
    // and the 10th percentile stays on the fast one.
    const double bimodal = std::atof(env("KREX_FAKE_BIMODAL").c_str());
    if (bimodal > 0)
      for (int k = 0; k < (c->set_pos % 2 == 0 ? 16 : 4); ++k) samples[k] = t * (1 + bimodal / 100);
    const double median_t = krex_eval::quantile(samples, 0.5);
    o.str("set", c->set).num("set_pos", c->set_pos);
    o.num("t_compile_ms", 3).num("t_inputs_ms", 0.5).num("t_check_ms", 0.5);
    o.num("t_wait_ms", 0).num("t_critical_ms", critical_ms).num("median_ms", median_t).num("p95_ms", t);
    o.num("sync_each", tm.sync_each ? 1 : 0);
    o.nums("samples_ms", samples).boolean("ok", true);
    const long long x_addr = 0x7f1200000000LL + (1LL << 26) * c->set_pos;
    o.integer("x_addr", x_addr).integer("y_addr", x_addr + (1LL << 24)).integer("z_addr", x_addr + (2LL << 24));
    o.integer("flush_addr", 1LL << 47).integer("flush_bytes", 100663296);
    if (mode == "krex") {
      o.num("quiet_last_ratio", 1.01).num("mem_mhz", 3201).num("temp_c", 41).integer("clock_reasons", 0);
      o.num("exit_sm_mhz", 1980).num("exit_mem_mhz", 3201).num("exit_power_w", 612.5).num("exit_temp_c", 43);
      o.integer("exit_clock_reasons", 0x4);
    }
    if (!env("KREX_FAKE_ENV").empty()) o.str("env", env(env("KREX_FAKE_ENV").c_str()));
    std::cout << o.text() << std::endl;
  }
  const int exit_ms = std::atoi(env("KREX_FAKE_EXIT_MS").c_str());
  if (exit_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(exit_ms));
  return 0;
}
