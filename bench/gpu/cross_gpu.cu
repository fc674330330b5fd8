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

#include <cuda_runtime.h>
#include <signal.h>
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

#define XCHECK(call)                                                                             \
  do {                                                                                           \
    const cudaError_t xe = (call);                                                               \
    if (xe != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(xe)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

namespace {

__global__ void axpby(const float4* __restrict__ x, const float4* __restrict__ y, float4* __restrict__ z,
                      size_t n, float a, float b) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float4 u = x[i], v = y[i];
    z[i] = make_float4(a * u.x + b * v.x, a * u.y + b * v.y, a * u.z + b * v.z, a * u.w + b * v.w);
  }
}

__global__ void touch(int* p) {
  if (threadIdx.x == 0) *p += 1;
}

using clk = std::chrono::steady_clock;

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

/// A disturber: device management on `dev`, cycle after cycle, until killed.
[[noreturn]] void disturb(int dev, size_t alloc_bytes) {
  for (;;) {
    XCHECK(cudaSetDevice(dev));
    XCHECK(cudaFree(nullptr));  // the context
    void* p = nullptr;
    XCHECK(cudaMalloc(&p, alloc_bytes));
    XCHECK(cudaMemset(p, 1, alloc_bytes));
    touch<<<1, 32>>>(static_cast<int*>(p));  // first launch in this context: the module loads
    XCHECK(cudaDeviceSynchronize());
    XCHECK(cudaFree(p));
    XCHECK(cudaDeviceReset());  // the context goes
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
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "krex_gpu_cross_gpu: %s needs a value\n", a.c_str());
        std::exit(64);
      }
      return argv[++i];
    };
    if (a == "--device") device = std::atoi(next());
    else if (a == "--disturbers") disturbers = std::atoi(next());
    else if (a == "--seconds") seconds = std::atof(next());
    else if (a == "--phase-ms") phase_ms = std::atof(next());
    else if (a == "--batch") batch = std::atoi(next());
    else if (a == "--alloc-mb") alloc_mb = std::atol(next());
    else if (a == "--same-device") same_device = true;
    else if (a == "--json") json = next();
    else {
      std::fprintf(stderr,
                   "usage: krex_gpu_cross_gpu [--device N] [--disturbers N] [--seconds S] [--phase-ms MS] "
                   "[--batch N] [--alloc-mb MB] [--same-device] [--json FILE]\n");
      return a == "-h" || a == "--help" ? 0 : 64;
    }
  }
  if (disturbers < 1 || seconds <= 0 || phase_ms < 50 || batch < 5 || alloc_mb < 1) {
    std::fprintf(stderr,
                 "krex_gpu_cross_gpu: --disturbers >= 1, --seconds > 0, --phase-ms >= 50, --batch >= 5, "
                 "--alloc-mb >= 1\n");
    return 64;
  }
  // Disturbers first, before this process touches CUDA (a child of a process
  // that initialized CUDA cannot use it); each stops itself, and picks its GPU
  // once continued: the k-th GPU other than --device, round robin.
  std::vector<pid_t> kids;
  for (int k = 0; k < disturbers; ++k) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      for (pid_t c : kids) kill(c, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      raise(SIGSTOP);
      int count = 0;
      XCHECK(cudaGetDeviceCount(&count));
      std::vector<int> other;
      if (same_device) other.push_back(device);
      for (int d = 0; d < count && !same_device; ++d)
        if (d != device) other.push_back(d);
      if (other.empty()) std::_Exit(0);
      disturb(other[static_cast<std::size_t>(k) % other.size()], static_cast<size_t>(alloc_mb) << 20);
    }
    kids.push_back(pid);
  }
  auto stop_kids = [&]() {
    for (pid_t c : kids) kill(c, SIGKILL);
    for (pid_t c : kids) waitpid(c, nullptr, 0);
  };
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
    std::printf("krex_gpu_cross_gpu: no CUDA device: skipped\n");
    stop_kids();
    return 77;
  }
  if (device < 0 || device >= n) {
    std::fprintf(stderr, "krex_gpu_cross_gpu: --device %d: this node has GPUs 0..%d\n", device, n - 1);
    stop_kids();
    return 64;
  }
  if (n < 2 && !same_device) {
    std::printf("krex_gpu_cross_gpu: one GPU: the experiment needs a second one (--same-device runs the "
                "control on this one): skipped\n");
    stop_kids();
    return 77;
  }
  auto signal_all = [&](int sig) {
    for (pid_t c : kids) kill(c, sig);
  };

  XCHECK(cudaSetDevice(device));
  int l2 = 0, sms = 0;
  XCHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device));
  XCHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const size_t n4 = (16u << 20) / 4, bytes = n4 * sizeof(float4), flush_bytes = 2 * static_cast<size_t>(l2);
  float4 *x = nullptr, *y = nullptr, *z = nullptr;
  void* flush = nullptr;
  XCHECK(cudaMalloc(&x, bytes));
  XCHECK(cudaMalloc(&y, bytes));
  XCHECK(cudaMalloc(&z, bytes));
  XCHECK(cudaMalloc(&flush, flush_bytes));
  XCHECK(cudaMemset(x, 1, bytes));
  XCHECK(cudaMemset(y, 2, bytes));
  cudaEvent_t e0, e1;
  XCHECK(cudaEventCreate(&e0));
  XCHECK(cudaEventCreate(&e1));
  for (int w = 0; w < 50; ++w) axpby<<<sms * 8, 256>>>(x, y, z, n4, 2.0f, 3.0f);  // warm-up
  XCHECK(cudaDeviceSynchronize());

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
      XCHECK(cudaMemsetAsync(flush, i & 0xff, flush_bytes));
      XCHECK(cudaEventRecord(e0));
      axpby<<<sms * 8, 256>>>(x, y, z, n4, 2.0f, 3.0f);
      XCHECK(cudaEventRecord(e1));
      XCHECK(cudaEventSynchronize(e1));
      float ms = 0;
      XCHECK(cudaEventElapsedTime(&ms, e0, e1));
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
