// SPDX-License-Identifier: Apache-2.0
// Google Benchmark + CUDA under krex: cuBLAS SGEMMs whose K differs by ~3%
// and a bandwidth-bound copy, each run holding a krex region; iterations are
// timed with device events and a cold L2 (krex::gbench::run with a stream).
//
//   build-cuda/examples/krex_gbench_cuda --benchmark_format=json > solo.json
//   for i in $(seq 8); do build-cuda/examples/krex_gbench_cuda --benchmark_format=json > krex$i.json & done; wait
//   for i in $(seq 8); do KREX_GBENCH=0 build-cuda/examples/krex_gbench_cuda ... > none$i.json & done; wait
//
// lab/scripts/gbench_compare.py compares the medians with the solo run.

#include <krex/gbench.hpp>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace {

#define EX_CHECK(call)                                                      \
  do {                                                                      \
    if ((call) != 0) {                                                      \
      std::fprintf(stderr, "%s:%d: %s failed\n", __FILE__, __LINE__, #call); \
      std::abort();                                                         \
    }                                                                       \
  } while (0)

// Inputs made once per process, before any benchmark runs (outside regions).
struct inputs {
  cudaStream_t stream{};
  cublasHandle_t blas{};
  float *a{}, *b{}, *c{};
  float *src{}, *dst{};
  static constexpr int max_n = 4096, max_k = 4096 + 128;
  static constexpr std::size_t copy_floats = std::size_t{1} << 27;  // 512 MiB
  inputs() {
    EX_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    EX_CHECK(cublasCreate(&blas));
    EX_CHECK(cublasSetStream(blas, stream));
    EX_CHECK(cudaMalloc(&a, sizeof(float) * max_n * max_k));
    EX_CHECK(cudaMalloc(&b, sizeof(float) * max_n * max_k));
    EX_CHECK(cudaMalloc(&c, sizeof(float) * max_n * max_n));
    EX_CHECK(cudaMalloc(&src, sizeof(float) * copy_floats));
    EX_CHECK(cudaMalloc(&dst, sizeof(float) * copy_floats));
    EX_CHECK(cudaMemset(a, 0, sizeof(float) * max_n * max_k));
    EX_CHECK(cudaMemset(b, 0, sizeof(float) * max_n * max_k));
    EX_CHECK(cudaMemset(src, 0, sizeof(float) * copy_floats));
    EX_CHECK(cudaDeviceSynchronize());
  }
};

inputs& in() {
  static inputs i;
  return i;
}

// C[n x n] = A[n x k] * B[k x n], fp32 (TF32 off: the default math mode).
void bm_sgemm(benchmark::State& st) {
  inputs& x = in();
  const int n = static_cast<int>(st.range(0));
  const int k = static_cast<int>(st.range(1));
  const float one = 1.0f, zero = 0.0f;
  krex::gbench::run(st, x.stream, [&] {
    EX_CHECK(cublasSgemm(x.blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, k, &one, x.a, n, x.b, k, &zero,
                         x.c, n));
  });
  st.counters["TFLOPS"] = benchmark::Counter(2.0 * n * n * k * static_cast<double>(st.iterations()) / 1e12,
                                             benchmark::Counter::kIsRate);
}

void bm_copy(benchmark::State& st) {
  inputs& x = in();
  const auto bytes = static_cast<std::size_t>(st.range(0)) << 20;
  krex::gbench::run(st, x.stream, [&] {
    EX_CHECK(cudaMemcpyAsync(x.dst, x.src, bytes, cudaMemcpyDeviceToDevice, x.stream));
  });
  st.SetBytesProcessed(static_cast<std::int64_t>(2 * bytes) * st.iterations());
}

}  // namespace

KREX_BENCHMARK(bm_sgemm)->Args({2048, 2048})->Args({2048, 2112})->Args({4096, 4096})
    ->Args({4096, 4224});
KREX_BENCHMARK(bm_copy)->Arg(256)->Arg(264);

int main(int argc, char** argv) {
  in();  // context, handles and inputs before the first region
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
