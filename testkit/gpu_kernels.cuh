// SPDX-License-Identifier: Apache-2.0
#pragma once

// Device code shared by the GPU tests and benchmarks: kernels that stamp
// %globaltimer (the GPU's own nanosecond clock, common to every process and
// context on the device) at their start and end, and busy kernels of a chosen length.

#include <cuda_runtime.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace krex_gpu {

#define KREX_GPU_CHECK(call)                                             \
  do {                                                                   \
    const cudaError_t krex_gpu_e = (call);                               \
    if (krex_gpu_e != cudaSuccess) {                                     \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorString(krex_gpu_e));                      \
      std::abort();                                                      \
    }                                                                    \
  } while (0)

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Every block spins `ns` nanoseconds; the kernel's interval [first block
/// start, last block end] goes to start[0] (atomicMin, init ~0ULL) and end[0]
/// (atomicMax, init 0).
__global__ void stamped_spin(unsigned long long* start, unsigned long long* end,
                             unsigned long long ns) {
  __shared__ unsigned long long t0;
  if (threadIdx.x == 0) {
    t0 = globaltimer();
    atomicMin(start, t0);
  }
  __syncthreads();
  while (globaltimer() - t0 < ns) {
  }
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(end, globaltimer());
}

/// One thread writes the clock to *out.
__global__ void stamp(unsigned long long* out) { *out = globaltimer(); }

/// Compute-bound work whose length scales with `iters` (FMA chains per thread).
__global__ void fma_loop(float* out, int iters) {
  float a = threadIdx.x * 1e-3f, b = 1.0001f, c = 0.9999f, d = blockIdx.x * 1e-4f;
  for (int i = 0; i < iters; ++i) {
    a = fmaf(a, b, c);
    d = fmaf(d, c, b);
    b = fmaf(b, c, a) * 1e-6f + 1.0001f;
  }
  if (a + d == 1234.5f) out[threadIdx.x] = a + d;  // keeps the loop alive, never true in practice
}

/// z = a*x + b*y over n float4s: the bandwidth-bound kernel of the eval's
/// axpby-16M candidate (16 Mi floats per array: ~54 us on an H200), where a
/// short memory-bound timed loop is the subject (quiet.cu, placement.cu,
/// cross_gpu.cu).
__global__ void axpby4(const float4* __restrict__ x, const float4* __restrict__ y, float4* __restrict__ z,
                       std::size_t n, float a, float b) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float4 u = x[i], v = y[i];
    z[i] = make_float4(a * u.x + b * v.x, a * u.y + b * v.y, a * u.z + b * v.z, a * u.w + b * v.w);
  }
}

/// Streams over `n` floats (memory-bound sibling work).
__global__ void stream_rw(float* p, std::size_t n, float k) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = p[i] * k + 1.0f;
}

/// Sets a flag in mapped host memory (visible to the host while kernels run).
__global__ void set_flag(volatile int* flag, int v) {
  *flag = v;
  __threadfence_system();
}

/// Spins `ns`, then sets a mapped host flag.
__global__ void spin_then_flag(unsigned long long ns, volatile int* flag) {
  const unsigned long long t0 = globaltimer();
  while (globaltimer() - t0 < ns) {
  }
  *flag = 1;
  __threadfence_system();
}

/// Number of CUDA devices, asked in a forked child so that this process does
/// not initialize CUDA before forking its own children.
inline int gpu_count_forked() {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    ::_exit(n > 100 ? 100 : n);
  }
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 0;
  return WEXITSTATUS(status);
}

/// Exit code of a GPU benchmark that found no GPU (ctest SKIP_RETURN_CODE).
constexpr int exit_no_gpu = 77;

/// No CUDA device here (gpu_count_forked): says so; the benchmark then exits
/// with exit_no_gpu.
inline bool no_gpu() {
  if (gpu_count_forked() > 0) return false;
  std::printf("no CUDA device: skipped\n");
  return true;
}

/// A region's level (report().level()) at full protection: the gate and the
/// drain held, nothing contended, busy, broken, shared or split; with
/// `pinned`, the pin step as well.
inline bool full_protection(const std::string& level, bool pinned = false) {
  const auto has = [&](const char* x) { return level.find(x) != std::string::npos; };
  return level.rfind("gate+drain", 0) == 0 && (!pinned || has("+pin")) && !has("(contended)") &&
         !has("(busy)") && !has(",broken") && !has("-shared") && !has("-split");
}

}  // namespace krex_gpu
