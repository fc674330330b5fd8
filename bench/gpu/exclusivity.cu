// SPDX-License-Identifier: Apache-2.0
// Exclusivity, measured by the GPU itself, and region entry cost.
//
//   krex_gpu_exclusivity [--siblings N] [--regions R] [--mode krex|none] [--body-us U]
//
// N sibling processes (half explicitly gated with krex::submit_guard, half
// relying on CUPTI automatic gating with plain <<<>>> launches) launch
// kernels continuously; every sibling kernel records its interval [first
// block start, last block end] in %globaltimer. The measurer takes R regions;
// in each it stamps %globaltimer with a one-thread kernel at the start and at
// the end, with a U-microsecond body kernel between. Afterwards every sibling
// interval is checked against every region interval: with --mode krex the
// count of intersections must be 0. --mode none runs the same load with no
// krex at all (siblings do not join, the measurer takes no region): the
// control, which shows the check can see overlap. Exit status 1 if krex mode
// saw any intersection. Also prints the region entry cost (lock, gate, drain,
// freeze, pin) measured by the region's own report.

#include "proc_util.hpp"
#include "gpu_kernels.cuh"

#include <krex/region.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

using krex_gpu::globaltimer;

namespace {

constexpr std::size_t cap = 1U << 17;  // kernels recorded per sibling
constexpr int max_siblings = 32;

struct sibling_log {
  std::atomic<std::uint64_t> n;
  std::atomic<int> gating;  // 0 none, 1 explicit, 2 cupti, 3 explicit fallback
  std::atomic<int> done;
  std::uint64_t start[cap];
  std::uint64_t end[cap];
};

struct board {
  std::atomic<int> ready;
  std::atomic<int> stop;
  sibling_log sib[max_siblings];
};

struct args {
  int siblings = 15;
  int regions = 200;
  bool krex = true;
  int body_us = 300;
  int body_kernels = 5;
  bool idle = false;  // siblings launch once, then only sleep: the protocol's own cost
  std::string segment;
};

krex::options tenant_opts(const args& a) {
  using namespace std::chrono_literals;
  return krex::options{}.segment(a.segment).drain_deadline(20s).lock_wait(120s);
}

int run_sibling(int i, const args& a, board* b) {
  const bool explicit_gate = (i % 2) == 0;
  std::optional<krex::tenant> t;
  if (a.krex)
    t.emplace(tenant_opts(a).gate_mode(explicit_gate ? krex::gating::explicit_
                                                     : krex::gating::automatic));
  sibling_log& log = b->sib[i];
  if (!t)
    log.gating = 0;
  else if (t->gating_note() == "cupti")
    log.gating = 2;
  else if (t->gating_note() == "explicit")
    log.gating = 1;
  else
    log.gating = 3;
  KREX_GPU_CHECK(cudaSetDevice(0));
  cudaStream_t s;
  KREX_GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned long long *st = nullptr, *en = nullptr;
  KREX_GPU_CHECK(cudaMalloc(&st, cap * 8));
  KREX_GPU_CHECK(cudaMalloc(&en, cap * 8));
  KREX_GPU_CHECK(cudaMemset(st, 0xff, cap * 8));
  KREX_GPU_CHECK(cudaMemset(en, 0, cap * 8));
  KREX_GPU_CHECK(cudaDeviceSynchronize());
  b->ready.fetch_add(1);
  static const unsigned long long durations_ns[] = {20'000, 50'000, 200'000, 500'000};
  std::size_t k = 0;
  if (a.idle && t) {
    krex::submit_guard g{*t};  // one kernel, so the first drain has something to sync
    krex_gpu::stamped_spin<<<1, 32, 0, s>>>(st, en, 1000);
    k = 1;
  }
  while (a.idle && b->stop.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  while (b->stop.load() == 0 && k < cap) {
    const unsigned long long ns = durations_ns[(k * 7 + static_cast<std::size_t>(i)) % 4];
    if (t && explicit_gate) {
      krex::submit_guard g{*t};
      krex_gpu::stamped_spin<<<16, 128, 0, s>>>(st + k, en + k, ns);
    } else {
      krex_gpu::stamped_spin<<<16, 128, 0, s>>>(st + k, en + k, ns);
    }
    ++k;
    if (k % 4 == 0) KREX_GPU_CHECK(cudaStreamSynchronize(s));
  }
  KREX_GPU_CHECK(cudaStreamSynchronize(s));
  KREX_GPU_CHECK(cudaGetLastError());
  KREX_GPU_CHECK(cudaMemcpy(log.start, st, k * 8, cudaMemcpyDeviceToHost));
  KREX_GPU_CHECK(cudaMemcpy(log.end, en, k * 8, cudaMemcpyDeviceToHost));
  log.n = k;
  log.done = 1;
  return 0;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double p95(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(0.95 * static_cast<double>(v.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--siblings")
      a.siblings = std::min(max_siblings, std::stoi(v));
    else if (k == "--regions")
      a.regions = std::stoi(v);
    else if (k == "--mode")
      a.krex = (v != "none");
    else if (k == "--body-us")
      a.body_us = std::stoi(v);
    else if (k == "--body-kernels")
      a.body_kernels = std::max(1, std::stoi(v));
    else if (k == "--siblings-work")
      a.idle = (v == "idle");
    else {
      std::fprintf(stderr, "unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  a.segment = "krexgpu-x-" + std::to_string(::getpid());
  if (krex_gpu::no_gpu()) return krex_gpu::exit_no_gpu;
  krex_test::become_subreaper();

  // Siblings are forked before this process touches CUDA.
  krex_test::shared<board> b;
  std::vector<krex_test::child> kids;
  for (int i = 0; i < a.siblings; ++i)
    kids.push_back(krex_test::spawn([&, i] { return run_sibling(i, a, &*b); }));
  if (!krex_test::wait_until([&] { return b->ready.load() == a.siblings; },
                             std::chrono::seconds(120))) {
    std::fprintf(stderr, "siblings did not start\n");
    return 3;
  }

  std::optional<krex::tenant> t;
  if (a.krex) t.emplace(tenant_opts(a));
  KREX_GPU_CHECK(cudaSetDevice(0));
  cudaStream_t s;
  KREX_GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const std::size_t R = static_cast<std::size_t>(a.regions);
  unsigned long long *rs, *re, *bs, *be;
  KREX_GPU_CHECK(cudaMalloc(&rs, R * 8));
  KREX_GPU_CHECK(cudaMalloc(&re, R * 8));
  KREX_GPU_CHECK(cudaMalloc(&bs, R * 8));
  KREX_GPU_CHECK(cudaMalloc(&be, R * 8));
  KREX_GPU_CHECK(cudaMemset(bs, 0xff, R * 8));
  KREX_GPU_CHECK(cudaMemset(be, 0, R * 8));
  KREX_GPU_CHECK(cudaDeviceSynchronize());

  std::vector<double> entry_us, lock_us, gate_us, drain_us, freeze_us, pin_us, exit_us, body_ms;
  std::string level, gating;
  std::uint32_t frozen_max = 0, drained_min = 1000;
  std::mt19937 rng(42);
  for (std::size_t r = 0; r < R; ++r) {
    std::this_thread::sleep_for(std::chrono::microseconds(500 + rng() % 4000));
    auto body = [&] {
      // The body: stamp, then body_kernels kernels with a host sync after each
      // (the gaps are where an unprotected sibling gets the GPU), then stamp.
      krex_gpu::stamp<<<1, 1, 0, s>>>(rs + r);
      for (int j = 0; j < a.body_kernels; ++j) {
        krex_gpu::stamped_spin<<<132, 128, 0, s>>>(
            bs + r, be + r, static_cast<unsigned long long>(a.body_us) * 1000);
        KREX_GPU_CHECK(cudaStreamSynchronize(s));
      }
      krex_gpu::stamp<<<1, 1, 0, s>>>(re + r);
      KREX_GPU_CHECK(cudaStreamSynchronize(s));
    };
    if (t) {
      krex::region reg{*t};
      body();
      const krex::region_report& rp = reg.report();
      lock_us.push_back(rp.lock_ns / 1e3);
      gate_us.push_back(rp.gate_ns / 1e3);
      drain_us.push_back(rp.drain_ns / 1e3);
      freeze_us.push_back(rp.freeze_ns / 1e3);
      pin_us.push_back(rp.pin_ns / 1e3);
      entry_us.push_back((rp.lock_ns + rp.gate_ns + rp.drain_ns + rp.freeze_ns + rp.pin_ns) / 1e3);
      level = rp.level();
      gating = rp.gating;
      frozen_max =
          std::max<std::uint32_t>(frozen_max, static_cast<std::uint32_t>(rp.frozen_pids.size()));
      drained_min = std::min(drained_min, rp.siblings_drained);
      reg.exit();
      exit_us.push_back(reg.report().exit_ns / 1e3);
    } else {
      body();
    }
  }
  KREX_GPU_CHECK(cudaGetLastError());
  b->stop.store(1);
  for (auto& c : kids) {
    const int code = krex_test::exit_code(c.wait(std::chrono::seconds(120)));
    if (code != 0) std::fprintf(stderr, "a sibling exited with %d\n", code);
  }
  std::vector<unsigned long long> hs(R), he(R), hbs(R), hbe(R);
  KREX_GPU_CHECK(cudaMemcpy(hs.data(), rs, R * 8, cudaMemcpyDeviceToHost));
  KREX_GPU_CHECK(cudaMemcpy(he.data(), re, R * 8, cudaMemcpyDeviceToHost));
  KREX_GPU_CHECK(cudaMemcpy(hbs.data(), bs, R * 8, cudaMemcpyDeviceToHost));
  KREX_GPU_CHECK(cudaMemcpy(hbe.data(), be, R * 8, cudaMemcpyDeviceToHost));
  for (std::size_t r = 0; r < R; ++r) body_ms.push_back((he[r] - hs[r]) / 1e6);

  // Count sibling kernel intervals that intersect a region interval (strictly:
  // a shared endpoint tick is counted apart, as "touching").
  std::vector<std::pair<std::uint64_t, std::uint64_t>> regions;
  for (std::size_t r = 0; r < R; ++r) regions.emplace_back(hs[r], he[r]);
  std::sort(regions.begin(), regions.end());
  std::uint64_t kernels[4] = {}, hits[4] = {}, touching = 0, incomplete = 0;
  for (int i = 0; i < a.siblings; ++i) {
    const sibling_log& log = b->sib[i];
    const int g = log.gating.load();
    for (std::uint64_t k = 0; k < log.n.load(); ++k) {
      const std::uint64_t s0 = log.start[k], e0 = log.end[k];
      if (s0 == ~0ULL || e0 == 0) {
        ++incomplete;
        continue;
      }
      ++kernels[g];
      // Regions are disjoint and sorted, so only the last one starting before
      // e0 can intersect [s0, e0] (a kernel spanning earlier ones covers its start).
      const auto it =
          std::lower_bound(regions.begin(), regions.end(), std::make_pair(e0, std::uint64_t{0}));
      bool hit = false;
      if (it != regions.begin()) {
        const auto j = std::prev(it);
        if (j->second > s0)
          hit = true;
        else if (j->second == s0)
          ++touching;
      }
      if (it != regions.end() && it->first == e0) ++touching;
      if (hit) ++hits[g];
    }
  }
  const std::uint64_t total_hits = hits[0] + hits[1] + hits[2] + hits[3];
  std::printf("exclusivity mode=%s siblings=%d (%s) regions=%zu body=%dx%dus mps=%s\n",
              a.krex ? "krex" : "none", a.siblings, a.idle ? "idle" : "busy", R, a.body_kernels,
              a.body_us, std::getenv("KREX_BENCH_MPS") ? std::getenv("KREX_BENCH_MPS") : "?");
  std::printf(
      "  sibling kernels: explicit=%llu cupti=%llu fallback=%llu unprotected=%llu "
      "(incomplete %llu)\n",
      (unsigned long long)kernels[1], (unsigned long long)kernels[2],
      (unsigned long long)kernels[3], (unsigned long long)kernels[0],
      (unsigned long long)incomplete);
  std::printf(
      "  intersecting a region: explicit=%llu cupti=%llu fallback=%llu unprotected=%llu "
      "total=%llu (touching endpoints %llu)\n",
      (unsigned long long)hits[1], (unsigned long long)hits[2], (unsigned long long)hits[3],
      (unsigned long long)hits[0], (unsigned long long)total_hits, (unsigned long long)touching);
  std::printf("  region interval on GPU: median %.3f ms, p95 %.3f ms\n", median(body_ms),
              p95(body_ms));
  if (a.krex) {
    std::printf("  level=%s gating=%s min drained=%u max frozen=%u\n", level.c_str(),
                gating.c_str(), drained_min, frozen_max);
    std::printf(
        "| siblings | work | entry median us | entry p95 us | lock | gate | drain | freeze | pin | "
        "exit median us |\n");
    std::printf("| %d | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", a.siblings,
                a.idle ? "idle" : "busy", median(entry_us), p95(entry_us), median(lock_us),
                median(gate_us), median(drain_us), median(freeze_us), median(pin_us),
                median(exit_us));
    t.reset();
    krex::remove_segment(tenant_opts(a));
  }
  return (a.krex && total_hits != 0) ? 1 : 0;
}
