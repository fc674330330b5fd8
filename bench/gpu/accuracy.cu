// SPDX-License-Identifier: Apache-2.0
// Accuracy: kernels from ~10 us to ~50 ms timed with krex::measure (device
// events, cold L2) three ways: solo, under N busy siblings unprotected, and
// under the same siblings with krex (one region per kernel's timed loop).
//
//   krex_gpu_accuracy [--siblings N] [--scale S]
//
// The siblings are tenants (half explicit guards, half CUPTI automatic
// gating) that run compute-bound and memory-bound kernels continuously; in
// the unprotected phase the measurer simply takes no region, so nothing
// gates them. Prints median and p95 per kernel and their ratios to solo.

#include "proc_util.hpp"
#include "gpu_kernels.cuh"

#include <krex/measure.hpp>
#include <krex/region.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

struct board {
  std::atomic<int> ready;
  std::atomic<int> phase;  // 0 idle, 1 busy, 2 stop
  std::atomic<std::uint64_t> launches;
};

krex::options tenant_opts(const std::string& seg) {
  using namespace std::chrono_literals;
  return krex::options{}.segment(seg).drain_deadline(20s).lock_wait(300s);
}

int run_sibling(int i, const std::string& seg, board* b) {
  const bool explicit_gate = (i % 2) == 0;
  krex::tenant t{tenant_opts(seg).gate_mode(explicit_gate ? krex::gating::explicit_
                                                          : krex::gating::automatic)};
  KREX_GPU_CHECK(cudaSetDevice(0));
  cudaStream_t s;
  KREX_GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const std::size_t n = std::size_t(64) << 20;  // 256 MiB of floats
  float *buf = nullptr, *out = nullptr;
  KREX_GPU_CHECK(cudaMalloc(&buf, n * sizeof(float)));
  KREX_GPU_CHECK(cudaMalloc(&out, 1024 * sizeof(float)));
  KREX_GPU_CHECK(cudaMemset(buf, 0, n * sizeof(float)));
  KREX_GPU_CHECK(cudaDeviceSynchronize());
  b->ready.fetch_add(1);
  std::uint64_t k = 0;
  while (b->phase.load() != 2) {
    if (b->phase.load() == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    const auto work = [&] {
      if (k % 2 == 0)
        krex_gpu::fma_loop<<<264, 256, 0, s>>>(out, 4000 + 3000 * int(k % 5));
      else
        krex_gpu::stream_rw<<<528, 256, 0, s>>>(buf, n, 1.0001f);
    };
    if (explicit_gate) {
      krex::submit_guard g{t};
      work();
    } else {
      work();
    }
    ++k;
    if (k % 4 == 0) KREX_GPU_CHECK(cudaStreamSynchronize(s));
  }
  KREX_GPU_CHECK(cudaStreamSynchronize(s));
  KREX_GPU_CHECK(cudaGetLastError());
  b->launches.fetch_add(k);
  return 0;
}

struct kernel_case {
  const char* label;
  double target_ms;
  int iters = 0;
  int samples = 0;
  krex::measure_result solo, shared, guarded;
};

}  // namespace

int main(int argc, char** argv) {
  int siblings = 15;
  double scale = 1.0;  // scales sample counts
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--siblings")
      siblings = std::stoi(v);
    else if (k == "--scale")
      scale = std::stod(v);
  }
  const std::string seg = "krexgpu-a-" + std::to_string(::getpid());
  if (krex_gpu::no_gpu()) return krex_gpu::exit_no_gpu;
  krex_test::become_subreaper();
  krex_test::shared<board> b;
  std::vector<krex_test::child> kids;
  for (int i = 0; i < siblings; ++i)
    kids.push_back(krex_test::spawn([&, i] { return run_sibling(i, seg, &*b); }));
  if (!krex_test::wait_until([&] { return b->ready.load() == siblings; },
                             std::chrono::seconds(120))) {
    std::fprintf(stderr, "siblings did not start\n");
    return 3;
  }

  krex::tenant t{tenant_opts(seg)};
  KREX_GPU_CHECK(cudaSetDevice(0));
  cudaStream_t s;
  KREX_GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float* out = nullptr;
  KREX_GPU_CHECK(cudaMalloc(&out, 1024 * sizeof(float)));

  // Calibrate iterations for each target duration, solo.
  std::vector<kernel_case> cases = {
      {"~10us", 0.010}, {"~100us", 0.100}, {"~1ms", 1.0}, {"~10ms", 10.0}, {"~50ms", 50.0}};
  double ms_per_iter = 0;
  {
    krex::region r{t};
    krex::measure_options o;
    o.samples = 5;
    const int probe = 200000;
    auto m = krex::measure(
        r, s, [&] { krex_gpu::fma_loop<<<264, 256, 0, s>>>(out, probe); }, o);
    ms_per_iter = m.median_ms / probe;
  }
  for (auto& c : cases) {
    c.iters = std::max(1, static_cast<int>(c.target_ms / ms_per_iter));
    const int base = c.target_ms <= 0.1  ? 300
                     : c.target_ms <= 1  ? 150
                     : c.target_ms <= 10 ? 60
                                         : 25;
    c.samples = std::max(10, static_cast<int>(base * scale));
  }
  const auto run = [&](auto& region_like, kernel_case& c) {
    krex::measure_options o;
    o.samples = c.samples;
    o.warmup = 3;
    return krex::measure(
        region_like, s, [&] { krex_gpu::fma_loop<<<264, 256, 0, s>>>(out, c.iters); }, o);
  };
  for (auto& c : cases) {
    krex::region r{t};
    c.solo = run(r, c);
  }
  b->phase.store(1);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  for (auto& c : cases) {
    c.shared = run(krex::unprotected, c);  // the unprotected phase: no region
  }
  std::vector<std::string> levels;
  for (auto& c : cases) {
    krex::region r{t};
    c.guarded = run(r, c);
    levels.push_back(r.report().level() + " gating=" + r.report().gating +
                     " frozen=" + std::to_string(r.report().frozen_pids.size()));
  }
  b->phase.store(2);
  for (auto& k : kids) krex_test::exit_code(k.wait(std::chrono::seconds(120)));

  std::printf("accuracy siblings=%d (half explicit, half cupti) sibling launches=%llu; method=%s\n",
              siblings, (unsigned long long)b->launches.load(), cases[0].solo.method.c_str());
  std::printf(
      "| kernel | samples | solo median ms | solo p95 ms | unprotected median x | "
      "unprotected p95 x | krex median x | krex p95 x | krex median err %% | krex p95 err %% |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (auto& c : cases) {
    const double mu = c.shared.median_ms / c.solo.median_ms, pu = c.shared.p95_ms / c.solo.p95_ms;
    const double mk = c.guarded.median_ms / c.solo.median_ms, pk = c.guarded.p95_ms / c.solo.p95_ms;
    std::printf("| %s | %d | %.4f | %.4f | %.2f | %.2f | %.4f | %.4f | %+.2f | %+.2f |\n", c.label,
                c.samples, c.solo.median_ms, c.solo.p95_ms, mu, pu, mk, pk, (mk - 1) * 100,
                (pk - 1) * 100);
  }
  std::printf("krex regions: %s\n", levels.empty() ? "" : levels.back().c_str());
  krex::remove_segment(tenant_opts(seg));
  return 0;
}
