// SPDX-License-Identifier: Apache-2.0
// Does where a long-lived process's buffers land change a bandwidth-bound
// kernel's time? (issue 19: in long-lived workers, ~50 us kernels shift by up
// to +-2% from one command to the next, with one worker alone and no krex.)
// One process, no krex: for each of --allocs allocations, a spacer of random
// size (0 .. --spacer-mb) is allocated first, so the inputs land elsewhere in
// the device's memory; then x, y, z (16 Mi floats each, the eval's axpby-16M
// candidate) are allocated and filled, and the axpby is timed twice in a row,
// --samples samples each (cold L2, an event pair per sample, synchronized).
// If the spread of the medians across allocations is much larger than the
// difference between the two timings of the same allocation, placement, not
// the measurement, moves the kernel. The process sleeps --settle-ms after the
// allocations and after the frees, so the driver's work after large
// allocations and frees (bench/gpu/quiet.cu: ~2.5 ms per GB) is over before
// anything is timed.
//
//   krex_gpu_placement [--allocs 40] [--samples 100] [--spacer-mb 4096] [--settle-ms 200] [--seed 1] [--json FILE]

#include <krex/measure.hpp>
#include <krex_tools/cli.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <chrono>
#include <vector>

#include "kernels.cuh"

namespace {

/// krex::measure's quantile (linear between closest ranks) of unsorted `v`.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return krex::detail::quantile_sorted(v, q);
}

}  // namespace

int main(int argc, char** argv) {
  int allocs = 40, samples = 100, seed = 1, settle_ms = 200;
  long spacer_mb = 4096;
  std::string json;
  krex_tools::cli::program prog(
      "krex_gpu_placement",
      "Does where a long-lived process's buffers land move a bandwidth-bound kernel? (no krex)");
  prog.root()
      .integer("--allocs", "N", allocs, 2, 100000, "allocations of the inputs (default 40)")
      .integer("--samples", "N", samples, 5, 100000, "samples per timing (default 100)")
      .integer("--spacer-mb", "MB", spacer_mb, 0, 1L << 30, "the random spacer's largest size (default 4096)")
      .integer("--settle-ms", "MS", settle_ms, 0, 600000,
               "idle time after allocating and after freeing (default 200)")
      .integer("--seed", "N", seed, 0, 1000000000, "the spacer sizes' seed (default 1)")
      .text("--json", "FILE", json, "also write every trial to FILE");
  prog.parse(argc, argv);
  int dev = 0, l2 = 0, sms = 0;
  KREX_GPU_CHECK(cudaGetDevice(&dev));
  KREX_GPU_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  KREX_GPU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const size_t n4 = (16u << 20) / 4, bytes = n4 * sizeof(float4);
  const size_t flush_bytes = 2 * static_cast<size_t>(l2);
  void* flush = nullptr;
  KREX_GPU_CHECK(cudaMalloc(&flush, flush_bytes));
  cudaEvent_t e0, e1;
  KREX_GPU_CHECK(cudaEventCreate(&e0));
  KREX_GPU_CHECK(cudaEventCreate(&e1));
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::uniform_int_distribution<long> spacer_dist(0, spacer_mb / 2);  // in 2 MB pages

  auto time_median = [&](float4* x, float4* y, float4* z) {
    std::vector<double> t;
    for (int s = 0; s < samples + 3; ++s) {
      KREX_GPU_CHECK(cudaMemsetAsync(flush, s & 0xff, flush_bytes));
      KREX_GPU_CHECK(cudaEventRecord(e0));
      krex_gpu::axpby4<<<sms * 8, 256>>>(x, y, z, n4, 2.0f, 3.0f);
      KREX_GPU_CHECK(cudaEventRecord(e1));
      KREX_GPU_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      KREX_GPU_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (s >= 3) t.push_back(ms);
    }
    return quantile(t, 0.5);
  };

  std::vector<double> first, second, spacers;
  for (int k = 0; k < allocs; ++k) {
    const size_t spacer = static_cast<size_t>(spacer_dist(rng)) << 21;
    void* sp = nullptr;
    if (spacer > 0) KREX_GPU_CHECK(cudaMalloc(&sp, spacer));
    float4 *x = nullptr, *y = nullptr, *z = nullptr;
    KREX_GPU_CHECK(cudaMalloc(&x, bytes));
    KREX_GPU_CHECK(cudaMalloc(&y, bytes));
    KREX_GPU_CHECK(cudaMalloc(&z, bytes));
    KREX_GPU_CHECK(cudaMemset(x, 1, bytes));
    KREX_GPU_CHECK(cudaMemset(y, 2, bytes));
    KREX_GPU_CHECK(cudaDeviceSynchronize());
    std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
    first.push_back(time_median(x, y, z));
    second.push_back(time_median(x, y, z));
    spacers.push_back(static_cast<double>(spacer >> 20));
    KREX_GPU_CHECK(cudaFree(x));
    KREX_GPU_CHECK(cudaFree(y));
    KREX_GPU_CHECK(cudaFree(z));
    if (sp != nullptr) KREX_GPU_CHECK(cudaFree(sp));
    KREX_GPU_CHECK(cudaDeviceSynchronize());
    std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
  }
  // Across allocations: each allocation's first median against the median of
  // all; within an allocation: second against first.
  const double center = quantile(first, 0.5);
  std::vector<double> across, within;
  for (int k = 0; k < allocs; ++k) {
    across.push_back(100.0 * (first[k] / center - 1));
    within.push_back(100.0 * std::fabs(second[k] / first[k] - 1));
  }
  std::vector<double> abs_across;
  for (double v : across) abs_across.push_back(std::fabs(v));
  std::printf("axpby 16 Mi floats, %d allocations (spacer 0..%ld MB, settle %d ms), %d samples per timing, median %.5f ms\n",
              allocs, spacer_mb, settle_ms, samples, center);
  std::printf("| | p50 | p90 | max |\n|---|---|---|---|\n");
  std::printf("| across allocations: |median - all's median| %% | %.2f | %.2f | %.2f |\n", quantile(abs_across, 0.5),
              quantile(abs_across, 0.9), quantile(abs_across, 1.0));
  std::printf("| within an allocation: |2nd - 1st| %% | %.2f | %.2f | %.2f |\n", quantile(within, 0.5),
              quantile(within, 0.9), quantile(within, 1.0));
  std::printf("across allocations: min %+.2f%%, max %+.2f%%\n", quantile(across, 0.0), quantile(across, 1.0));
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (f == nullptr) {
      std::perror(json.c_str());
      return 1;
    }
    std::fprintf(f, "{\"allocs\":%d,\"samples\":%d,\"spacer_mb\":%ld,\"settle_ms\":%d,\"median_ms\":%.6f,\"trials\":[",
                 allocs, samples, spacer_mb, settle_ms, center);
    for (int k = 0; k < allocs; ++k)
      std::fprintf(f, "%s{\"spacer_mb\":%.0f,\"first_ms\":%.6f,\"second_ms\":%.6f}", k ? "," : "", spacers[k],
                   first[k], second[k]);
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
