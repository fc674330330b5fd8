// SPDX-License-Identifier: Apache-2.0
#pragma once

// CUDA C++ sources of the candidate families, compiled at run time with
// NVRTC by each benchmark command (bench/eval/worker.cu), variant
// parameters passed as -D macros (KX_*: a bare T would collide with template
// parameters in NVRTC's built-in header). The reduce and softmax families
// include CUB (the worker gives NVRTC the toolkit's include path), the gemm
// and axpby families nothing.

namespace krex_eval {

/// Tiled SGEMM, row-major C[MxN] = A[MxK] B[KxN]; block (KX_T, KX_T/KX_TM), each
/// thread computes KX_TM rows of one column of a KX_T x KX_T tile. Macros: KX_T, KX_TM.
inline const char* const gemm_src = R"(
extern "C" __global__ void candidate(const float* __restrict__ A, const float* __restrict__ B,
                                     float* __restrict__ C, int M, int N, int K) {
  __shared__ float As[KX_T][KX_T];
  __shared__ float Bs[KX_T][KX_T];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int col = blockIdx.x * KX_T + tx;
  const int row0 = blockIdx.y * KX_T + ty * KX_TM;
  float acc[KX_TM];
#pragma unroll
  for (int r = 0; r < KX_TM; ++r) acc[r] = 0.f;
  for (int k0 = 0; k0 < K; k0 += KX_T) {
#pragma unroll
    for (int r = 0; r < KX_TM; ++r) {
      const int ar = row0 + r, bk = k0 + ty * KX_TM + r;
      As[ty * KX_TM + r][tx] = (ar < M && k0 + tx < K) ? A[(long long)ar * K + k0 + tx] : 0.f;
      Bs[ty * KX_TM + r][tx] = (bk < K && col < N) ? B[(long long)bk * N + col] : 0.f;
    }
    __syncthreads();
#pragma unroll 8
    for (int kk = 0; kk < KX_T; ++kk) {
      const float b = Bs[kk][tx];
#pragma unroll
      for (int r = 0; r < KX_TM; ++r) acc[r] += As[ty * KX_TM + r][kk] * b;
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < KX_TM; ++r)
    if (row0 + r < M && col < N) C[(long long)(row0 + r) * N + col] = acc[r];
}
)";

/// Sum of n floats into *out: grid-stride loads (KX_VEC = 1 scalar, 4
/// float4), cub::BlockReduce per block, atomicAdd of block partials.
/// Macros: KX_BS (block size), KX_VEC. Includes CUB, as real candidates do:
/// this is most of its compile time.
inline const char* const reduce_src = R"(
#include <cub/block/block_reduce.cuh>
extern "C" __global__ void candidate(const float* __restrict__ x, float* __restrict__ out,
                                     long long n) {
  using block_reduce = cub::BlockReduce<float, KX_BS>;
  __shared__ typename block_reduce::TempStorage tmp;
  float v = 0.f;
  const long long tid = blockIdx.x * (long long)KX_BS + threadIdx.x;
  const long long stride = (long long)gridDim.x * KX_BS;
#if KX_VEC == 4
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const long long n4 = n / 4;
  for (long long i = tid; i < n4; i += stride) {
    const float4 q = x4[i];
    v += (q.x + q.y) + (q.z + q.w);
  }
  for (long long i = n4 * 4 + tid; i < n; i += stride) v += x[i];
#else
  for (long long i = tid; i < n; i += stride) v += x[i];
#endif
  v = block_reduce(tmp).Sum(v);
  if (threadIdx.x == 0) atomicAdd(out, v);
}
)";

/// z = a*x + b*y over n floats, grid-stride; KX_VEC = 1, 2 or 4 (vector loads).
inline const char* const axpby_src = R"(
extern "C" __global__ void candidate(const float* __restrict__ x, const float* __restrict__ y,
                                     float* __restrict__ z, float a, float b, long long n) {
  const long long tid = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  const long long stride = (long long)gridDim.x * blockDim.x;
#if KX_VEC == 4
  const long long nv = n / 4;
  const float4* x4 = reinterpret_cast<const float4*>(x);
  const float4* y4 = reinterpret_cast<const float4*>(y);
  float4* z4 = reinterpret_cast<float4*>(z);
  for (long long i = tid; i < nv; i += stride) {
    const float4 p = x4[i], q = y4[i];
    z4[i] = make_float4(a * p.x + b * q.x, a * p.y + b * q.y, a * p.z + b * q.z, a * p.w + b * q.w);
  }
#elif KX_VEC == 2
  const long long nv = n / 2;
  const float2* x2 = reinterpret_cast<const float2*>(x);
  const float2* y2 = reinterpret_cast<const float2*>(y);
  float2* z2 = reinterpret_cast<float2*>(z);
  for (long long i = tid; i < nv; i += stride) {
    const float2 p = x2[i], q = y2[i];
    z2[i] = make_float2(a * p.x + b * q.x, a * p.y + b * q.y);
  }
#else
  const long long nv = 0;
#endif
  for (long long i = nv * KX_VEC + tid; i < n; i += stride) z[i] = a * x[i] + b * y[i];
}
)";

/// Row-wise softmax of a rows x cols matrix with CUB reductions.
/// KX_BPR = 0: one warp per row (8 rows per 256-thread block, cub::WarpReduce);
/// KX_BPR = 1: one 256-thread block per row (cub::BlockReduce).
inline const char* const softmax_src = R"(
#include <cub/block/block_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>
#define NEG_BIG (-3.402823466e38f)
struct max_op {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
extern "C" __global__ void candidate(const float* __restrict__ x, float* __restrict__ y, int rows,
                                     int cols) {
#if KX_BPR == 0
  using warp_reduce = cub::WarpReduce<float>;
  __shared__ typename warp_reduce::TempStorage tmp[8];
  __shared__ float bcast[8];
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int row = blockIdx.x * 8 + w;
  if (row >= rows) return;
  const float* xr = x + (long long)row * cols;
  float* yr = y + (long long)row * cols;
  float m = NEG_BIG;
  for (int c = lane; c < cols; c += 32) m = fmaxf(m, xr[c]);
  m = warp_reduce(tmp[w]).Reduce(m, max_op{});
  if (lane == 0) bcast[w] = m;
  __syncwarp();
  m = bcast[w];
  float s = 0.f;
  for (int c = lane; c < cols; c += 32) s += __expf(xr[c] - m);
  __syncwarp();
  s = warp_reduce(tmp[w]).Sum(s);
  if (lane == 0) bcast[w] = s;
  __syncwarp();
  const float inv = 1.f / bcast[w];
  for (int c = lane; c < cols; c += 32) yr[c] = __expf(xr[c] - m) * inv;
#else
  using block_reduce = cub::BlockReduce<float, 256>;
  __shared__ typename block_reduce::TempStorage tmp;
  __shared__ float bcast;
  const int row = blockIdx.x;
  const float* xr = x + (long long)row * cols;
  float* yr = y + (long long)row * cols;
  float m = NEG_BIG;
  for (int c = threadIdx.x; c < cols; c += 256) m = fmaxf(m, xr[c]);
  m = block_reduce(tmp).Reduce(m, max_op{});
  if (threadIdx.x == 0) bcast = m;
  __syncthreads();
  m = bcast;
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += 256) s += __expf(xr[c] - m);
  s = block_reduce(tmp).Sum(s);
  if (threadIdx.x == 0) bcast = s;
  __syncthreads();
  const float inv = 1.f / bcast;
  for (int c = threadIdx.x; c < cols; c += 256) yr[c] = __expf(xr[c] - m) * inv;
#endif
}
)";

}  // namespace krex_eval
