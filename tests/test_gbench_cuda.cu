// SPDX-License-Identifier: Apache-2.0
// krex::gbench::run on a CUDA stream with placements: a bandwidth-bound kernel
// over K device copies of its inputs (krex::cuda::placement_buffers), each
// iteration's pointers from placement i % K, the placement counters and
// last_run() filled from device-event times. Skips where there is no CUDA
// device; a body that cannot rotate is refused before any CUDA work.

#include <krex/gbench.hpp>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "gbench_util.hpp"
#include "krex_test.hpp"

namespace {

__global__ void axpby4(const float4* __restrict__ x, const float4* __restrict__ y,
                       float4* __restrict__ z, std::size_t n4) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n4;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float4 a = x[i], b = y[i];
    z[i] = make_float4(2 * a.x + b.x, 2 * a.y + b.y, 2 * a.z + b.z, 2 * a.w + b.w);
  }
}

// Why there is no device to test on ("" when there is one).
std::string no_gpu() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) return std::string("no CUDA device: ") + cudaGetErrorName(e);
  return n > 0 ? "" : "no CUDA device";
}

using krex_test::capture;
using krex_test::run_one;
using krex_test::run_only;

constexpr std::size_t n4 = std::size_t{1} << 20;  // 16 MiB per buffer
cudaStream_t g_stream{};
krex::cuda::placement_buffers* g_in = nullptr;
std::vector<const void*> g_z;  // the output pointer of every enqueued call

void bm_axpby_placements(benchmark::State& st) {
  krex::gbench::run(
      st, g_stream,
      [&](krex::placement p) {
        float4* z = g_in->get<float4>(p, 2);
        g_z.push_back(z);
        axpby4<<<132 * 4, 256, 0, g_stream>>>(g_in->get<const float4>(p, 0),
                                              g_in->get<const float4>(p, 1), z, n4);
      },
      krex::gbench::run_options{}.over(*g_in));
}

TEST(gbench_cuda_placements, iterations_rotate_over_k_device_copies) {
  const std::string why = no_gpu();
  if (!why.empty()) GTEST_SKIP() << why;
  krex_test::gbench_segment();
  ASSERT_EQ(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), cudaSuccess);
  const std::size_t bytes = n4 * sizeof(float4);
  krex::cuda::placement_buffers in(4, {bytes, bytes, bytes}, std::size_t{1} << 30);
  std::vector<float> host(n4 * 4, 1.0F);
  in.upload(0, host.data());
  in.upload(1, host.data());
  g_in = &in;
  g_z.clear();
  KREX_BENCHMARK(bm_axpby_placements)->Iterations(16);
  const auto r = run_one("bm_axpby_placements");
  g_in = nullptr;
  ASSERT_TRUE(r);

  // 4 warm-up calls (one per placement), then iteration i on placement i % 4.
  ASSERT_EQ(g_z.size(), 20U);
  for (std::size_t i = 0; i < g_z.size(); ++i) {
    const int p = static_cast<int>(i < 4 ? i : (i - 4) % 4);
    EXPECT_EQ(g_z[i], in.data(p, 2)) << "call " << i;
  }
  const krex::measure_result m = krex::gbench::last_run();
  EXPECT_EQ(m.method, "cuda-events+cold-l2");
  ASSERT_EQ(m.samples_ms.size(), 16U);
  EXPECT_EQ(m.placement[5], 1);
  ASSERT_EQ(m.placement_median_ms.size(), 4U);
  for (double ms : m.placement_median_ms) EXPECT_GT(ms, 0.0);
  std::fprintf(stderr, "axpby 16M floats over 4 placements: median %.4f ms, spread %.2f%%\n",
               m.median_ms, 100 * m.placement_spread);
  // 48 MiB per placement: the spread between copies is a few percent at
  // most; 50% would mean the rotation timed something else.
  EXPECT_LT(m.placement_spread, 0.5);
  EXPECT_EQ(r->counters.at("krex_placements").value, 4.0);
  EXPECT_EQ(r->counters.at("krex_placement_bytes").value, static_cast<double>(in.bytes()));
  EXPECT_DOUBLE_EQ(r->counters.at("krex_placement_spread").value, m.placement_spread);
  EXPECT_GT(r->counters.at("krex_placement_min_s").value, 0.0);
  EXPECT_GE(r->counters.at("krex_placement_max_s").value,
            r->counters.at("krex_placement_min_s").value);
  EXPECT_NE(r->report_label.find("gate+drain"), std::string::npos) << r->report_label;
  EXPECT_EQ(cudaStreamDestroy(g_stream), cudaSuccess);
}

int g_plain_calls = 0;

void bm_plain_body_placements(benchmark::State& st) {
  krex::gbench::run_options o;
  o.placements = 2;
  krex::gbench::run(st, g_stream, [&] { ++g_plain_calls; }, o);
}

TEST(gbench_cuda_placements, a_body_that_cannot_rotate_is_an_error_row) {
  const std::string why = no_gpu();
  if (!why.empty()) GTEST_SKIP() << why;
  krex_test::gbench_segment();
  KREX_BENCHMARK(bm_plain_body_placements)->Iterations(3);
  const std::uint64_t before = krex::gbench::failures();
  const capture rep = run_only("bm_plain_body_placements");
  const auto* r = rep.find("bm_plain_body_placements");
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(krex_test::gbench_failed(*r));
  const std::string error = krex_test::gbench_message(*r);
  EXPECT_NE(error.find("does not take a krex::placement"), std::string::npos) << error;
  EXPECT_EQ(g_plain_calls, 0);
  EXPECT_EQ(krex::gbench::failures() - before, 1U);
}

}  // namespace
