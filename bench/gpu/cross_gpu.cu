// SPDX-License-Identifier: Apache-2.0
// Does device management on one GPU disturb a timed loop on another? (issue
// 24's experiment; the KREX study reports that context creation takes a
// node-wide driver lock). krex gates context creation, module loading and
// allocations per device only: a tenant of GPU 1 creating its context is not
// held back by a region on GPU 0.
//
// The parent times a ~50 us bandwidth-bound axpby on --device (cold L2, an
// event pair per sample, synchronized: the eval's @sync timing) in batches of
// --batch samples, back to back, for --seconds. --disturbers child processes,
// spread over the other GPUs, each cycle: create a context (cudaFree(0)),
// allocate and fill --alloc-mb, launch a kernel for the first time (a lazy
// module load), free, destroy the context (cudaDeviceReset). The parent turns
// them on and off every --phase-ms (SIGCONT / SIGSTOP), so quiet and disturbed
// batches interleave under the same clocks and temperature; each batch is
// classed by the phase it ran in wholly (batches that straddle a switch are
// dropped). Prints each phase's batch medians and sample tails, and the
// disturbed phase's inflation over the quiet one.
//
//   krex_gpu_cross_gpu [--device 0] [--disturbers 4] [--seconds 20] [--phase-ms 1000]
//                      [--batch 20] [--alloc-mb 1024] [--same-device] [--json FILE]
//
// With fewer than 2 GPUs it exits 77 (skipped), unless --same-device puts the
// disturbers on --device itself: the control that shows what the same work
// does to a timed loop on its own GPU (the case krex gates).

#include <krex/measure.hpp>
#include <krex_tools/cli.hpp>

#include <cuda_runtime.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gpu_kernels.cuh"

namespace {

__global__ void touch(int* p) {
  if (threadIdx.x == 0) *p += 1;
}

using clk = std::chrono::steady_clock;

/// krex::measure's quantile (linear between closest ranks) of unsorted `v`.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return krex::detail::quantile_sorted(v, q);
}

/// A disturber: device management on `dev`, cycle after cycle, until killed.
[[noreturn]] void disturb(int dev, size_t alloc_bytes) {
  for (;;) {
    KREX_GPU_CHECK(cudaSetDevice(dev));
    KREX_GPU_CHECK(cudaFree(nullptr));  // the context
    void* p = nullptr;
    KREX_GPU_CHECK(cudaMalloc(&p, alloc_bytes));
    KREX_GPU_CHECK(cudaMemset(p, 1, alloc_bytes));
    touch<<<1, 32>>>(static_cast<int*>(p));  // first launch in this context: the module loads
    KREX_GPU_CHECK(cudaDeviceSynchronize());
    KREX_GPU_CHECK(cudaFree(p));
    KREX_GPU_CHECK(cudaDeviceReset());  // the context goes
  }
}

struct phase_stats {
  std::vector<double> batch_medians, samples;
};

}  // namespace

int main(int argc, char** argv) {
  int device = 0, disturbers = 4, batch = 20;
  double seconds = 20, phase_ms = 1000;
  long alloc_mb = 1024;
  bool same_device = false;
  std::string json;
  krex_tools::cli::program prog(
      "krex_gpu_cross_gpu",
      "Does device management on the other GPUs disturb a timed loop on this one? (no krex)");
  prog.root()
      .integer("--device", "N", device, 0, 1023, "the GPU of the timed loop (default 0)")
      .integer("--disturbers", "N", disturbers, 1, 1024, "disturbing processes (default 4)")
      .number("--seconds", "S", seconds, 1e-3, 86400, "how long to measure (default 20)")
      .number("--phase-ms", "MS", phase_ms, 50, 3600000, "quiet and disturbed phases' length (default 1000)")
      .integer("--batch", "N", batch, 5, 100000, "samples per batch (default 20)")
      .integer("--alloc-mb", "MB", alloc_mb, 1, 1L << 30, "each disturbing cycle's allocation (default 1024)")
      .flag("--same-device", same_device, "the control: the disturbers on the timed loop's own GPU")
      .text("--json", "FILE", json, "also write every sample to FILE");
  prog.parse(argc, argv);
  // How many GPUs, asked in a child (krex_gpu::gpu_count_forked): this process
  // forks the disturbers below, and a child of a process that initialized
  // CUDA cannot use it.
  const int n = krex_gpu::gpu_count_forked();
  if (n < 1) {
    std::printf("krex_gpu_cross_gpu: no CUDA device: skipped\n");
    return krex_gpu::exit_no_gpu;
  }
  if (device < 0 || device >= n) {
    std::fprintf(stderr, "krex_gpu_cross_gpu: --device %d: this node has GPUs 0..%d\n", device, n - 1);
    return 64;
  }
  std::vector<int> others;
  for (int d = 0; d < n; ++d)
    if (d != device) others.push_back(d);
  if (same_device) others.assign(1, device);
  if (others.empty()) {
    std::printf("krex_gpu_cross_gpu: one GPU: the experiment needs a second one (--same-device runs the "
                "control on this one): skipped\n");
    return krex_gpu::exit_no_gpu;
  }
  // The disturbers, round robin over the other GPUs; each stops itself until
  // the first disturbed phase.
  const pid_t parent = ::getpid();
  std::vector<pid_t> kids;
  for (int k = 0; k < disturbers; ++k) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      for (pid_t c : kids) kill(c, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      // Dies with the parent, whatever ends it (a failed check aborts): a
      // disturber is never left behind, stopped or running.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) std::_Exit(1);
      raise(SIGSTOP);
      disturb(others[static_cast<std::size_t>(k) % others.size()], static_cast<size_t>(alloc_mb) << 20);
    }
    kids.push_back(pid);
  }
  auto stop_kids = [&]() {
    for (pid_t c : kids) kill(c, SIGKILL);
    for (pid_t c : kids) waitpid(c, nullptr, 0);
  };
  auto signal_all = [&](int sig) {
    for (pid_t c : kids) kill(c, sig);
  };

  KREX_GPU_CHECK(cudaSetDevice(device));
  int l2 = 0, sms = 0;
  KREX_GPU_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  KREX_GPU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const size_t n4 = (16u << 20) / 4, bytes = n4 * sizeof(float4), flush_bytes = 2 * static_cast<size_t>(l2);
  float4 *x = nullptr, *y = nullptr, *z = nullptr;
  void* flush = nullptr;
  KREX_GPU_CHECK(cudaMalloc(&x, bytes));
  KREX_GPU_CHECK(cudaMalloc(&y, bytes));
  KREX_GPU_CHECK(cudaMalloc(&z, bytes));
  KREX_GPU_CHECK(cudaMalloc(&flush, flush_bytes));
  KREX_GPU_CHECK(cudaMemset(x, 1, bytes));
  KREX_GPU_CHECK(cudaMemset(y, 2, bytes));
  cudaEvent_t e0, e1;
  KREX_GPU_CHECK(cudaEventCreate(&e0));
  KREX_GPU_CHECK(cudaEventCreate(&e1));
  for (int w = 0; w < 50; ++w) krex_gpu::axpby4<<<sms * 8, 256>>>(x, y, z, n4, 2.0f, 3.0f);  // warm-up
  KREX_GPU_CHECK(cudaDeviceSynchronize());

  phase_stats quiet, disturbed;
  const auto t0 = clk::now();
  const auto phase_of = [&](clk::time_point t) {
    return static_cast<long>(std::chrono::duration<double, std::milli>(t - t0).count() / phase_ms);
  };
  long phase = 0;  // even: quiet (disturbers stopped), odd: disturbed
  int dropped = 0;
  while (std::chrono::duration<double>(clk::now() - t0).count() < seconds) {
    const auto b0 = clk::now();
    const long p = phase_of(b0);
    if (p != phase) {
      phase = p;
      signal_all(phase % 2 == 1 ? SIGCONT : SIGSTOP);
    }
    std::vector<double> s;
    for (int i = 0; i < batch; ++i) {
      KREX_GPU_CHECK(cudaMemsetAsync(flush, i & 0xff, flush_bytes));
      KREX_GPU_CHECK(cudaEventRecord(e0));
      krex_gpu::axpby4<<<sms * 8, 256>>>(x, y, z, n4, 2.0f, 3.0f);
      KREX_GPU_CHECK(cudaEventRecord(e1));
      KREX_GPU_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      KREX_GPU_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      s.push_back(ms);
    }
    if (phase_of(clk::now()) != p || p == 0) {  // straddled a switch (or the first, settling phase)
      ++dropped;
      continue;
    }
    phase_stats& into = p % 2 == 1 ? disturbed : quiet;
    into.batch_medians.push_back(quantile(s, 0.5));
    into.samples.insert(into.samples.end(), s.begin(), s.end());
  }
  stop_kids();

  const double base = quantile(quiet.batch_medians, 0.5);
  auto pct = [&](double v) { return 100.0 * (v / base - 1); };
  std::printf("timed loop on GPU %d; %d disturber(s) on %s, phases of %.0f ms, %.0f s; batches of %d samples "
              "(%d dropped at phase switches)\n",
              device, disturbers, same_device ? "the same GPU (control)" : "the other GPU(s)", phase_ms, seconds,
              batch, dropped);
  std::printf("| phase | batches | batch median ms | batch p95 %% | samples | sample p50 %% | sample p95 %% | sample p99 %% | max %% |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const auto* ph : {&quiet, &disturbed}) {
    const bool q = ph == &quiet;
    std::printf("| %s | %zu | %.5f | %+.2f | %zu | %+.2f | %+.2f | %+.2f | %+.2f |\n", q ? "quiet" : "disturbed",
                ph->batch_medians.size(), quantile(ph->batch_medians, 0.5), pct(quantile(ph->batch_medians, 0.95)),
                ph->samples.size(), pct(quantile(ph->samples, 0.5)), pct(quantile(ph->samples, 0.95)),
                pct(quantile(ph->samples, 0.99)), pct(quantile(ph->samples, 1.0)));
  }
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (f == nullptr) {
      std::perror(json.c_str());
      return 1;
    }
    std::fprintf(f, "{\"device\":%d,\"disturbers\":%d,\"same_device\":%s,\"phase_ms\":%.0f,\"batch\":%d", device,
                 disturbers, same_device ? "true" : "false", phase_ms, batch);
    for (const auto* ph : {&quiet, &disturbed}) {
      std::fprintf(f, ",\"%s\":[", ph == &quiet ? "quiet" : "disturbed");
      for (std::size_t i = 0; i < ph->samples.size(); ++i) std::fprintf(f, "%s%.6f", i ? "," : "", ph->samples[i]);
      std::fprintf(f, "]");
    }
    std::fprintf(f, "}\n");
    std::fclose(f);
  }
  if (quiet.batch_medians.empty() || disturbed.batch_medians.empty()) {
    std::fprintf(stderr, "krex_gpu_cross_gpu: a phase got no whole batch: lengthen --seconds or --phase-ms\n");
    return 1;
  }
  return 0;
}
