// SPDX-License-Identifier: Apache-2.0
#pragma once

// CUDA C++ sources of the candidate families, compiled at run time with
// NVRTC by each benchmark command (bench/eval/worker.cu), variant
// parameters passed as -D macros. Plain kernels without headers: NVRTC
// compiles them with no include path.

namespace krex_eval {

/// Tiled SGEMM, row-major C[MxN] = A[MxK] B[KxN]; block (T, T/TM), each
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

/// Sum of n floats into *out (atomicAdd of block partials); grid-stride,
/// KX_VEC = 1 (scalar) or 4 (float4 loads). Macros: KX_BS (block size), KX_VEC.
inline const char* const reduce_src = R"(
extern "C" __global__ void candidate(const float* __restrict__ x, float* __restrict__ out,
                                     long long n) {
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
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  __shared__ float s[KX_BS / 32];
  if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < KX_BS / 32 ? s[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    if (threadIdx.x == 0) atomicAdd(out, v);
  }
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

/// Row-wise softmax of a rows x cols matrix. KX_BPR = 0: one warp per row
/// (8 rows per 256-thread block); KX_BPR = 1: one 256-thread block per row.
inline const char* const softmax_src = R"(
#define NEG_BIG (-3.402823466e38f)
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
extern "C" __global__ void candidate(const float* __restrict__ x, float* __restrict__ y, int rows,
                                     int cols) {
#if KX_BPR == 0
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const float* xr = x + (long long)row * cols;
  float* yr = y + (long long)row * cols;
  float m = NEG_BIG;
  for (int c = lane; c < cols; c += 32) m = fmaxf(m, xr[c]);
  m = warp_max(m);
  float s = 0.f;
  for (int c = lane; c < cols; c += 32) s += __expf(xr[c] - m);
  const float inv = 1.f / warp_sum(s);
  for (int c = lane; c < cols; c += 32) yr[c] = __expf(xr[c] - m) * inv;
#else
  __shared__ float red[32];
  const int row = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  const float* xr = x + (long long)row * cols;
  float* yr = y + (long long)row * cols;
  float m = NEG_BIG;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
  m = warp_max(m);
  if (lane == 0) red[warp] = m;
  __syncthreads();
  m = warp_max(lane < nw ? red[lane] : NEG_BIG);
  __syncthreads();
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += __expf(xr[c] - m);
  s = warp_sum(s);
  if (lane == 0) red[warp] = s;
  __syncthreads();
  s = warp_sum(lane < nw ? red[lane] : 0.f);
  const float inv = 1.f / s;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = __expf(xr[c] - m) * inv;
#endif
}
)";

}  // namespace krex_eval
