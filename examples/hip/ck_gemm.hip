// SPDX-License-Identifier: Apache-2.0
// Times one Composable Kernel GEMM instance (fp16, A row-major, B column-major,
// the instance of CK's example/01_gemm/gemm_xdl_fp16.cpp) under krex, twice:
//
//  1. krex::measure on a HIP stream inside a krex region: hipEvents around
//     each sample, the L2 flushed before each sample, the device to itself.
//  2. CK's own timing (Invoker::Run with StreamConfig{stream, true}: warm-up
//     and timed loop inside Run) inside a region, the way krex's CK patch
//     times every ckProfiler GEMM instance.
//
//   krex_ck_gemm [M N K] [--samples n]     (default 3840 4096 4096, 20 samples)
//
// Run several at once on one GPU: each region has the device to itself while
// the others prepare. Needs an MI200/MI300-class GPU (gfx90a XDL instance);
// without a device it says so and exits 2.

#include "ck/ck.hpp"
#include "ck/tensor_operation/gpu/device/device_gemm_xdl_cshuffle.hpp"
#include "ck/tensor_operation/gpu/device/gemm_specialization.hpp"
#include "ck/tensor_operation/gpu/element/element_wise_operation.hpp"

#include <krex/hip/measure.hpp>
#include <krex/region.hpp>

#include <hip/hip_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

template <ck::index_t... Is>
using S = ck::Sequence<Is...>;
using F16 = ck::half_t;
using F32 = float;
using Row = ck::tensor_layout::gemm::RowMajor;
using Col = ck::tensor_layout::gemm::ColumnMajor;
using PassThrough = ck::tensor_operation::element_wise::PassThrough;
constexpr auto gemm_default = ck::tensor_operation::device::GemmSpecialization::Default;

// clang-format off
using device_gemm = ck::tensor_operation::device::DeviceGemm_Xdl_CShuffle
    <Row, Col, Row, F16, F16, F16, F32, F32, PassThrough, PassThrough, PassThrough, gemm_default,
     1, 256, 256, 128, 32, 8, 8, 32, 32, 4, 2,
     S<4, 64, 1>, S<1, 0, 2>, S<1, 0, 2>, 2, 8, 8, 1,
     S<4, 64, 1>, S<1, 0, 2>, S<1, 0, 2>, 2, 8, 8, 1,
     1, 1, S<1, 32, 1, 8>, 8>;
// clang-format on

void check(hipError_t e, const char* what) {
  if (e != hipSuccess)
    throw krex::error(krex::step::backend, std::string(what) + " failed: " + hipGetErrorString(e),
                      static_cast<int>(e));
}

// Device memory for the example's three matrices.
struct buffer {
  void* p = nullptr;
  explicit buffer(std::size_t bytes) { check(hipMalloc(&p, bytes), "hipMalloc"); }
  ~buffer() { (void)hipFree(p); }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
};

}  // namespace

int main(int argc, char** argv) {
  ck::index_t m = 3840, n = 4096, k = 4096;
  int samples = 20;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--samples") == 0 && i + 1 < argc)
      samples = std::atoi(argv[++i]);
    else
      pos.emplace_back(argv[i]);
  }
  if (pos.size() == 3) {
    m = std::stoi(pos[0]);
    n = std::stoi(pos[1]);
    k = std::stoi(pos[2]);
  } else if (!pos.empty()) {
    std::fprintf(stderr, "usage: %s [M N K] [--samples n]\n", argv[0]);
    return 1;
  }

  int devices = 0;
  if (hipGetDeviceCount(&devices) != hipSuccess || devices == 0) {
    std::fprintf(stderr, "krex_ck_gemm: no AMD GPU (hipErrorNoDevice): nothing to time\n");
    return 2;
  }
  try {
    krex::tenant t{krex::options{}};  // KREX_DEVICE etc. apply; gating: HIP API callbacks
    std::printf("gating: %s\n", t.gating_note().c_str());
    check(hipSetDevice(t.device()), "hipSetDevice");

    // Compile-free preparation (allocation, init) runs beside the siblings.
    buffer a(sizeof(F16) * m * k), b(sizeof(F16) * k * n), c(sizeof(F16) * m * n);
    check(hipMemset(a.p, 0x3c, sizeof(F16) * m * k), "hipMemset");  // 0x3c3c: ~1.06 in fp16
    check(hipMemset(b.p, 0x3c, sizeof(F16) * k * n), "hipMemset");
    hipStream_t s = nullptr;
    check(hipStreamCreate(&s), "hipStreamCreate");

    device_gemm gemm;
    auto invoker = gemm.MakeInvoker();
    auto arg = gemm.MakeArgument(static_cast<F16*>(a.p), static_cast<F16*>(b.p),
                                 static_cast<F16*>(c.p), m, n, k, /*StrideA=*/k, /*StrideB=*/k,
                                 /*StrideC=*/n, PassThrough{}, PassThrough{}, PassThrough{});
    if (!gemm.IsSupportedArgument(arg)) {
      std::fprintf(stderr, "%s does not support M=%d N=%d K=%d on this device\n",
                   gemm.GetTypeString().c_str(), m, n, k);
      return 3;
    }
    const double tflop = 2.0 * m * n * k / 1e12;

    {  // 1. krex::measure: hipEvents per sample, cold L2
      krex::region r{t};
      krex::measure_options o;
      o.samples = samples;
      const krex::measure_result res = krex::measure(
          r, s,
          [&] {
            invoker.Run(arg, StreamConfig{s, false});
          },
          o);
      std::printf(
          "%s\n  krex::measure (%s): median %.4f ms (p5 %.4f, p95 %.4f), %.1f TFLOPS, "
          "region %s\n",
          gemm.GetTypeString().c_str(), res.method.c_str(), res.median_ms, res.p5_ms, res.p95_ms,
          tflop / (res.median_ms / 1e3), r.report().level().c_str());
    }
    {  // 2. CK's own timing inside a region (what the ckProfiler patch does)
      krex::region r{t};
      const float ms = invoker.Run(arg, StreamConfig{s, true});
      r.exit();
      std::printf("  CK Invoker::Run(time_kernel): %.4f ms, %.1f TFLOPS, region %s\n", ms,
                  tflop / (ms / 1e3), r.report().level().c_str());
    }
    check(hipStreamDestroy(s), "hipStreamDestroy");
  } catch (const krex::error& e) {
    std::fprintf(stderr, "krex_ck_gemm: %s\n", e.what());
    return 1;
  }
  return 0;
}
