// SPDX-License-Identifier: Apache-2.0
// The HIP backend. Without an AMD GPU (hipGetDeviceCount: hipErrorNoDevice)
// only the tests that need none run: which API calls automatic gating picks,
// which runtimes it refuses and why, error messages, the L2 flush size, and
// that a tenant (and krex::prepare_measure) on a node without a device fails
// with a clear error. The
// tests that need a device skip, naming hipErrorNoDevice.
//
// Like test_cuda.cu, the test process itself never initializes HIP (a process
// that forks after initializing the runtime cannot use it in the child):
// every HIP step runs in a forked child, which reports through exit codes
// and shared memory.

#include "krex_test.hpp"

#include <krex/backend/hip.hpp>
#include <krex/hip/launch.hpp>
#include <krex/hip/measure.hpp>
#include <krex/region.hpp>

#include <gtest/gtest.h>
#include <hip/hip_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

using namespace std::chrono_literals;
using krex_test::scoped_segment;
using krex_test::shared;
using hip_tenant = krex::basic_tenant<krex::backend::hip>;
using hip_region = krex::basic_region<krex::backend::hip>;

namespace {

// Runs `body` in a forked child; returns its exit code (-1 if killed or timed out).
template <class F>
int in_child(F&& body, std::chrono::milliseconds timeout = 120s) {
  krex_test::child c = krex_test::spawn(std::forward<F>(body));
  return krex_test::exit_code(c.wait(timeout));
}

// hipGetDeviceCount in a child: 0..100 devices, 101 hipErrorNoDevice, 102 another error.
constexpr int probe_no_device = 101;
int probe() {
  static const int r = in_child([] {
    int c = 0;
    const hipError_t e = hipGetDeviceCount(&c);
    if (e == hipErrorNoDevice) return probe_no_device;
    if (e != hipSuccess) return probe_no_device + 1;
    return c > 100 ? 100 : c;
  });
  return r;
}
int gpu_count() { return probe() >= 0 && probe() <= 100 ? probe() : 0; }

#define REQUIRE_GPU()                                                                          \
  if (gpu_count() == 0)                                                                        \
  GTEST_SKIP() << "no AMD GPU (hipGetDeviceCount: "                                            \
               << (probe() == probe_no_device ? "hipErrorNoDevice" : "another error or crash") \
               << "): needs a ROCm device, see docs/HIP.md"

#define CHILD_EXPECT(cond, code)                                                   \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "child check failed: %s (line %d)\n", #cond, __LINE__); \
      return code;                                                                 \
    }                                                                              \
  } while (0)

struct board {
  std::atomic<int> step;
  std::atomic<std::uint64_t> value[4];
};

__global__ void set_flag(int* flag, int v) { *flag = v; }

// Spins about `cycles` shader clocks, then sets *flag (host-mapped) to 1.
__global__ void spin_then_flag(unsigned long long cycles, int* flag) {
  const unsigned long long t0 = clock64();
  while (static_cast<unsigned long long>(clock64()) - t0 < cycles) {
  }
  if (flag != nullptr) *flag = 1;
}

__global__ void axpy(float a, const float* x, float* y, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = a * x[i] + y[i];
}

}  // namespace

// Which HIP API calls automatic gating registers for (no GPU needed).
TEST(HipGate, GatedApiNames) {
  using krex::detail::hip_callbacks::gated_api;
  for (const char* n : {"hipLaunchKernel",
                        "hipLaunchCooperativeKernel",
                        "hipLaunchHostFunc",
                        "hipExtLaunchKernel",
                        "hipModuleLaunchKernel",
                        "hipExtModuleLaunchKernel",
                        "hipHccModuleLaunchKernel",
                        "hipGraphLaunch",
                        "hipMemcpy",
                        "hipMemcpyAsync",
                        "hipMemcpyHtoDAsync",
                        "hipMemcpyToSymbol",
                        "hipMemcpy2DAsync",
                        "hipMemset",
                        "hipMemsetD32Async",
                        "hipEventRecord",
                        "hipStreamWriteValue64",
                        "hipStreamWaitValue32",
                        "hipMemPrefetchAsync",
                        "hipSignalExternalSemaphoresAsync",
                        "hipWaitExternalSemaphoresAsync"})
    EXPECT_TRUE(gated_api(n)) << n;
  for (const char* n : {"hipDeviceSynchronize", "hipStreamSynchronize", "hipMalloc", "hipFree",
                        "hipSetDevice", "hipEventSynchronize", "hipStreamIsCapturing",
                        "hipStreamBeginCapture", "hipGraphInstantiate", "hipStreamWaitEvent",
                        "__hipPushCallConfiguration", "hipGetDeviceCount", "hipMallocAsync"})
    EXPECT_FALSE(gated_api(n)) << n;
  EXPECT_FALSE(gated_api(nullptr));
}

// The ids this HIP's headers give the gated calls: every launch/copy/memset
// of the header's table, and none of the synchronizing or allocating ones.
TEST(HipGate, HeaderTableSelection) {
  using krex::detail::hip_callbacks::gated_api;
  int gated = 0;
  for (std::uint32_t id = HIP_API_ID_FIRST; id <= HIP_API_ID_LAST; ++id)
    if (gated_api(hip_api_name(id))) ++gated;
  EXPECT_TRUE(gated_api(hip_api_name(HIP_API_ID_hipLaunchKernel)));
  EXPECT_TRUE(gated_api(hip_api_name(HIP_API_ID_hipMemcpyAsync)));
  EXPECT_FALSE(gated_api(hip_api_name(HIP_API_ID_hipDeviceSynchronize)));
  EXPECT_FALSE(gated_api(hip_api_name(HIP_API_ID_hipMalloc)));
  std::fprintf(stderr, "HIP %d.%d headers: %d of %d API ids gated\n", HIP_VERSION_MAJOR,
               HIP_VERSION_MINOR, gated, static_cast<int>(HIP_API_ID_LAST));
  EXPECT_GT(gated, 40);  // ROCm 5.2: 60 (launches, copies, memsets, event records, ...)
}

// Which runtimes automatic gating refuses, and what the note says.
TEST(HipGate, UnsupportedRuntimesAreNamed) {
  using krex::detail::hip_callbacks::unsupported_runtime;
  const int v52 = 50221153;  // hipRuntimeGetVersion of ROCm 5.2.3
  EXPECT_EQ(unsupported_runtime(v52, false, true, false), "");
  EXPECT_NE(unsupported_runtime(v52, false, true, true).find("roctracer is loaded"),
            std::string::npos);
  EXPECT_NE(
      unsupported_runtime(v52, false, false, false).find("HIP 5.2 has no hipRegisterApiCallback"),
      std::string::npos);
  const std::string six = unsupported_runtime(60241134, false, true, false);
  EXPECT_NE(six.find("HIP 6.2"), std::string::npos) << six;
  EXPECT_NE(six.find("rocprofiler-sdk"), std::string::npos) << six;
  EXPECT_NE(unsupported_runtime(50530201, true, true, false).find("hipRegisterTracerCallback"),
            std::string::npos);
}

// HIP errors become krex::error(step::backend) naming the call and the error
// (in a child: hipGetErrorName must not initialize HIP in the test process).
TEST(HipBackend, ErrorsNameTheCallAndTheHipError) {
  const int code = in_child([] {
    try {
      krex::detail::hip_check(hipErrorInvalidValue, "hipMemcpyAsync");
      return 10;
    } catch (const krex::error& e) {
      CHILD_EXPECT(e.where() == krex::step::backend, 11);
      CHILD_EXPECT(e.code() == static_cast<int>(hipErrorInvalidValue), 12);
      std::fprintf(stderr, "%s\n", e.what());
      CHILD_EXPECT(std::string(e.what()).find("hipMemcpyAsync failed: hipErrorInvalidValue") !=
                       std::string::npos,
                   13);
    }
    try {
      krex::detail::hip_check(hipErrorNoDevice, "hipSetDevice");
      return 14;
    } catch (const krex::error& e) {
      CHILD_EXPECT(std::string(e.what()).find("rocm-smi") != std::string::npos, 15);
    }
    try {
      krex::detail::hip_check(hipSuccess, "hipFree");
    } catch (...) {
      return 16;
    }
    return 0;
  });
  EXPECT_EQ(code, 0);
}

TEST(HipMeasure, FlushIsTwiceTheL2AtLeastOneMiB) {
  using krex::detail::l2_flush_bytes;
  EXPECT_EQ(l2_flush_bytes(8 << 20), std::size_t{16} << 20);  // MI210/MI250X: 8 MiB L2
  EXPECT_EQ(l2_flush_bytes(0), std::size_t{1} << 20);         // no L2 reported
  // measure_options::flush_bytes, taken as it is (no HIP call)
  EXPECT_EQ(krex::detail::gpu::flush_size<krex::detail::hip_api>(12345), 12345U);
}

// krex::prepare_measure exists for HIP too (the scratch of the shared
// measure, gpu/measure.hpp). Without a device it fails with a clear
// error naming the call, before anything is allocated.
TEST(HipMeasure, PrepareMeasureWithoutADeviceIsAClearError) {
  if (gpu_count() > 0) GTEST_SKIP() << "an AMD GPU is present (this is the no-device case)";
  const int code = in_child([] {
    try {
      krex::prepare_measure();
      return 10;
    } catch (const krex::error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      CHILD_EXPECT(e.where() == krex::step::backend, 11);
      CHILD_EXPECT(std::string(e.what()).find("hipGetDevice failed: ") != std::string::npos, 12);
    }
    return 0;
  });
  EXPECT_EQ(code, 0);
}

// Without a device (this is what CI sees) the backend counts 0 devices and a
// tenant fails with a clear error instead of crashing or hanging.
TEST(HipBackend, NoDeviceIsAClearError) {
  if (gpu_count() != 0) GTEST_SKIP() << "a HIP device is present";
  scoped_segment seg;
  const int code = in_child([&] {
    krex::backend::hip b{krex::options{}};
    CHILD_EXPECT(b.device_count() == 0, 10);
    try {
      hip_tenant t{seg.opts()};
      return 11;
    } catch (const krex::error& e) {
      CHILD_EXPECT(e.where() == krex::step::options, 12);
      CHILD_EXPECT(std::string(e.what()).find("hip backend sees no device here") != std::string::npos,
                   13);
    }
    return 0;
  });
  EXPECT_EQ(code, 0);
}

TEST(HipBackend, IdentityAndIdleTenantNeverSyncs) {
  REQUIRE_GPU();
  scoped_segment seg;
  shared<board> b;
  krex_test::child idle = krex_test::spawn([&] {
    hip_tenant t{seg.opts()};
    b->step.store(1);
    while (b->step.load() < 2) std::this_thread::sleep_for(1ms);
    CHILD_EXPECT(t.syncs() == 0, 11);  // never submitted: its agent never touched the device
    return 0;
  });
  ASSERT_TRUE(krex_test::wait_until([&] { return b->step.load() == 1; }, 60s));
  const int holder = in_child([&] {
    krex::backend::hip x{krex::options{}}, y{krex::options{}};
    CHILD_EXPECT(x.device_key(0) == y.device_key(0) && x.device_key(0) != 0, 20);
    CHILD_EXPECT(x.device_name(0).find(" [") != std::string::npos, 21);
    CHILD_EXPECT(x.pci_bus_id(0).size() >= 12, 22);
    hip_tenant t{seg.opts()};
    hipLaunchKernelGGL(spin_then_flag, dim3(1), dim3(1), 0, nullptr, 1000ULL, nullptr);
    CHILD_EXPECT(hipDeviceSynchronize() == hipSuccess, 23);
    hip_region r{t};
    CHILD_EXPECT(r.report().siblings_drained == 1, 24);
    return 0;
  });
  EXPECT_EQ(holder, 0);
  b->step.store(2);
  EXPECT_EQ(krex_test::exit_code(idle.wait(60s)), 0);
}

// Automatic gating: a kernel launch made while a sibling holds a region parks
// in the HIP API enter callback; the agent drains the earlier kernel meanwhile.
TEST(HipGate, LaunchParksInApiCallbackWhileAgentDrains) {
  REQUIRE_GPU();
  scoped_segment seg;
  const int code = in_child([&] {
    hip_tenant a{seg.opts().drain_deadline(5s)};  // automatic: callbacks route to a
    std::fprintf(stderr, "gating note: %s\n", a.gating_note().c_str());
    CHILD_EXPECT(a.gating_note() == krex::detail::hip_callbacks::note_automatic, 30);
    hip_tenant h{seg.opts().drain_deadline(5s).gate_mode(krex::gating::explicit_)};
    int* flags = nullptr;
    CHILD_EXPECT(hipHostMalloc(&flags, 2 * sizeof(int), hipHostMallocMapped) == hipSuccess, 31);
    volatile int* vf = flags;
    vf[0] = vf[1] = 0;
    int* dflags = nullptr;
    CHILD_EXPECT(hipHostGetDevicePointer(reinterpret_cast<void**>(&dflags), flags, 0) == hipSuccess,
                 32);
    const std::uint64_t gated0 = krex::detail::hip_callbacks::gated_calls();
    std::atomic<int> launched{0};
    auto& gate = krex::detail::member_of(a).dev->gate;
    std::thread launcher([&] {
      hipLaunchKernelGGL(spin_then_flag, dim3(1), dim3(1), 0, nullptr, 300'000'000ULL, dflags);
      launched.store(1);
      while ((gate.load() & 1U) == 0) std::this_thread::yield();
      hipLaunchKernelGGL(set_flag, dim3(1), dim3(1), 0, nullptr, dflags + 1, 1);  // parks
      launched.store(2);
    });
    while (launched.load() == 0) std::this_thread::yield();
    const std::uint64_t parks0 = krex::detail::member_of(a).dev->gate_parks.load();
    {
      hip_region r{h};
      CHILD_EXPECT(r.report().drained, 33);
      CHILD_EXPECT(vf[0] == 1, 34);  // the first kernel finished before the body
      std::this_thread::sleep_for(50ms);
      CHILD_EXPECT(launched.load() == 1, 35);  // the second launch is still parked
      CHILD_EXPECT(vf[1] == 0, 36);
      CHILD_EXPECT(krex::detail::member_of(a).dev->gate_parks.load() > parks0, 37);
    }
    launcher.join();
    CHILD_EXPECT(hipDeviceSynchronize() == hipSuccess, 38);
    CHILD_EXPECT(vf[1] == 1, 39);
    CHILD_EXPECT(krex::detail::hip_callbacks::gated_calls() >= gated0 + 2, 40);
    return 0;
  });
  EXPECT_EQ(code, 0);
}

// Explicit gating with krex::launch, and krex::measure on a HIP stream.
TEST(HipMeasure, TimesAKernelInARegion) {
  REQUIRE_GPU();
  scoped_segment seg;
  const int code = in_child([&] {
    hip_tenant t{seg.opts().gate_mode(krex::gating::explicit_)};
    CHILD_EXPECT(t.gating_note() == "explicit", 50);
    const int n = 1 << 20;
    float* x = nullptr;
    float* y = nullptr;
    CHILD_EXPECT(hipMalloc(&x, n * sizeof(float)) == hipSuccess, 51);
    CHILD_EXPECT(hipMalloc(&y, n * sizeof(float)) == hipSuccess, 52);
    hipStream_t s = nullptr;
    CHILD_EXPECT(hipStreamCreate(&s) == hipSuccess, 53);
    krex::launch(t, axpy, dim3((n + 255) / 256), dim3(256), 0, s, 2.0f, x, y, n);
    krex::measure_options o;
    o.samples = 5;
    krex::prepare_measure(o);  // the flush buffer and events, before the region
    hip_region r{t};
    const krex::measure_result m = krex::measure(
        r, s,
        [&] { hipLaunchKernelGGL(axpy, dim3((n + 255) / 256), dim3(256), 0, s, 2.0f, x, y, n); },
        o);
    CHILD_EXPECT(m.samples_ms.size() == 5, 54);
    CHILD_EXPECT(m.method == "hip-events+cold-l2", 55);
    CHILD_EXPECT(m.median_ms > 0, 56);
    return 0;
  });
  EXPECT_EQ(code, 0);
}
