// SPDX-License-Identifier: Apache-2.0
// What the device does after large allocations and frees, and whether a short
// bandwidth probe sees it (issue 19). One process, no krex: a ~50 us
// bandwidth-bound axpby (the kernel class the eval's <= 0.1 ms band holds) and
// a probe (a device-to-device copy larger than L2) are timed back to back,
// each with cold L2 and a synchronize, for `--window-ms` after an operation
// (cudaMalloc/cudaFree of N GB, with or without a memset, through the runtime
// or a stream-ordered pool). Every pair is binned by the time since the
// operation returned, as slowdown over the quiet medians measured just before.
//
//   krex_gpu_quiet [--window-ms 400] [--reps 2] [--json FILE]
//
// Prints one table per operation: per time bin, pairs, the axpby's median and
// max slowdown, the probe's median slowdown, and how often a slow axpby
// (> 2%) came with a probe that looked quiet (<= the probe threshold).

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gpu_kernels.cuh"

#define QCHECK(call)                                                                        \
  do {                                                                                      \
    const cudaError_t qe = (call);                                                          \
    if (qe != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(qe)); \
      std::exit(1);                                                                         \
    }                                                                                       \
  } while (0)

namespace {

using clk = std::chrono::steady_clock;
double ms_since(clk::time_point t) {
  return std::chrono::duration<double, std::milli>(clk::now() - t).count();
}

struct rig {
  size_t n4 = (16u << 20) / 4;  // 16 Mi floats per array
  float4 *x = nullptr, *y = nullptr, *z = nullptr;
  void* flush = nullptr;
  size_t flush_bytes = 0;
  void *psrc = nullptr, *pdst = nullptr;
  size_t probe_bytes = 64u << 20;
  cudaEvent_t e0{}, e1{};
  cudaStream_t s{};
  int blocks = 0;

  rig() {
    int dev = 0, l2 = 0, sms = 0;
    QCHECK(cudaGetDevice(&dev));
    QCHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    QCHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    blocks = sms * 8;
    flush_bytes = 2 * static_cast<size_t>(l2);
    QCHECK(cudaMalloc(&x, n4 * sizeof(float4)));
    QCHECK(cudaMalloc(&y, n4 * sizeof(float4)));
    QCHECK(cudaMalloc(&z, n4 * sizeof(float4)));
    QCHECK(cudaMalloc(&flush, flush_bytes));
    QCHECK(cudaMalloc(&psrc, probe_bytes));
    QCHECK(cudaMalloc(&pdst, probe_bytes));
    QCHECK(cudaMemset(x, 1, n4 * sizeof(float4)));
    QCHECK(cudaMemset(y, 2, n4 * sizeof(float4)));
    QCHECK(cudaMemset(psrc, 3, probe_bytes));
    QCHECK(cudaEventCreate(&e0));
    QCHECK(cudaEventCreate(&e1));
    QCHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    QCHECK(cudaDeviceSynchronize());
  }
  float time(const std::function<void()>& f) {
    QCHECK(cudaMemsetAsync(flush, 0, flush_bytes, s));
    QCHECK(cudaEventRecord(e0, s));
    f();
    QCHECK(cudaEventRecord(e1, s));
    QCHECK(cudaEventSynchronize(e1));
    float ms = 0;
    QCHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
  }
  float kernel() {
    return time([&] { krex_gpu::axpby4<<<blocks, 256, 0, s>>>(x, y, z, n4, 1.5f, 0.5f); });
  }
  float probe() {
    return time([&] { QCHECK(cudaMemcpyAsync(pdst, psrc, probe_bytes, cudaMemcpyDeviceToDevice, s)); });
  }
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double quant(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

struct op {
  std::string name;
  std::function<void()> act;
  std::function<void()> after;  // outside the timeline (cleanup)
};

FILE* g_json = nullptr;
bool g_first = true;

void timeline(rig& r, const op& o, double window_ms, double probe_thr) {
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  std::vector<double> qk, qp;
  for (int i = 0; i < 60; ++i) {
    qp.push_back(r.probe());
    qk.push_back(r.kernel());
  }
  const double mk = median(qk), mp = median(qp);
  const auto t0 = clk::now();
  o.act();
  const double op_ms = ms_since(t0);
  const auto t1 = clk::now();
  struct pt {
    double t, k, p;
  };
  std::vector<pt> pts;
  while (ms_since(t1) < window_ms) {
    const double t = ms_since(t1);
    const double p = r.probe() / mp;
    const double k = r.kernel() / mk;
    pts.push_back({t, k, p});
  }
  if (o.after) o.after();
  static const double edges[] = {0, 1, 2, 5, 10, 20, 50, 100, 200, 400, 800, 1600, 1e9};
  std::printf("\n%s (op %.1f ms; quiet axpby %.1f us, probe %.1f us, quiet p95 %.3f / %.3f)\n",
              o.name.c_str(), op_ms, mk * 1e3, mp * 1e3, quant(qk, 0.95) / mk, quant(qp, 0.95) / mp);
  std::printf("  %-12s %6s %9s %9s %9s %10s %10s\n", "since(ms)", "pairs", "k_med", "k_max",
              "p_med", "k>2%&p_ok", "k_ok&p>thr");
  for (size_t b = 0; b + 1 < sizeof edges / sizeof edges[0]; ++b) {
    std::vector<double> k, p;
    int missed = 0, false_alarm = 0;
    for (const pt& q : pts)
      if (q.t >= edges[b] && q.t < edges[b + 1]) {
        k.push_back(q.k);
        p.push_back(q.p);
        if (q.k > 1.02 && q.p <= probe_thr) ++missed;
        if (q.k <= 1.01 && q.p > probe_thr) ++false_alarm;
      }
    if (k.empty()) continue;
    std::printf("  %5.0f-%-6.0f %6zu %9.4f %9.4f %9.4f %10d %10d\n", edges[b],
                std::min(edges[b + 1], window_ms), k.size(), median(k),
                *std::max_element(k.begin(), k.end()), median(p), missed, false_alarm);
  }
  // Time until the kernel stays within 1%: the last pair above 1.01.
  double last_slow = -1, last_probe_slow = -1;
  for (const pt& q : pts) {
    if (q.k > 1.01) last_slow = q.t;
    if (q.p > probe_thr) last_probe_slow = q.t;
  }
  std::printf("  last axpby > +1%%: %.1f ms after the op; last probe > %.3f: %.1f ms\n", last_slow,
              probe_thr, last_probe_slow);
  if (g_json != nullptr) {
    std::fprintf(g_json, "%s{\"op\":\"%s\",\"op_ms\":%.3f,\"quiet_kernel_ms\":%.6f,\"quiet_probe_ms\":%.6f,"
                 "\"last_slow_ms\":%.2f,\"last_probe_slow_ms\":%.2f,\"pts\":[",
                 g_first ? "" : ",\n", o.name.c_str(), op_ms, mk, mp, last_slow, last_probe_slow);
    g_first = false;
    for (size_t i = 0; i < pts.size(); ++i)
      std::fprintf(g_json, "%s[%.3f,%.5f,%.5f]", i ? "," : "", pts[i].t, pts[i].k, pts[i].p);
    std::fprintf(g_json, "]}");
  }
}

}  // namespace

int main(int argc, char** argv) {
  double window_ms = 400;
  int reps = 2;
  double probe_thr = 1.03;
  const char* json = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--window-ms" && i + 1 < argc) window_ms = std::atof(argv[++i]);
    else if (a == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (a == "--probe-threshold" && i + 1 < argc) probe_thr = std::atof(argv[++i]);
    else if (a == "--json" && i + 1 < argc) json = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--window-ms MS] [--reps N] [--probe-threshold R] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("no CUDA device\n");
    return 77;
  }
  if (json) {
    g_json = std::fopen(json, "w");
    std::fprintf(g_json, "[");
  }
  rig r;
  const auto gb = [](double g) { return static_cast<size_t>(g * (1u << 30)); };
  void* keep = nullptr;
  std::vector<op> ops;
  ops.push_back({"control (nothing)", [] {}, nullptr});
  for (double g : {0.5, 1.0, 4.0, 8.0})
    ops.push_back({"malloc+free " + std::to_string(g).substr(0, 3) + " GB", [=] {
                     void* p = nullptr;
                     QCHECK(cudaMalloc(&p, gb(g)));
                     QCHECK(cudaFree(p));
                   }, nullptr});
  ops.push_back({"malloc+memset+free 4 GB", [=] {
                   void* p = nullptr;
                   QCHECK(cudaMalloc(&p, gb(4)));
                   QCHECK(cudaMemset(p, 0, gb(4)));
                   QCHECK(cudaFree(p));
                 }, nullptr});
  ops.push_back({"malloc 4 GB (kept)", [&] { QCHECK(cudaMalloc(&keep, gb(4))); }, nullptr});
  ops.push_back({"free of that 4 GB", [&] { QCHECK(cudaFree(keep)); keep = nullptr; }, nullptr});
  ops.push_back({"mallocAsync+freeAsync 4 GB, pool releases (threshold 0)", [&] {
                   void* p = nullptr;
                   QCHECK(cudaMallocAsync(&p, gb(4), r.s));
                   QCHECK(cudaFreeAsync(p, r.s));
                   QCHECK(cudaStreamSynchronize(r.s));
                 }, nullptr});
  ops.push_back({"mallocAsync+freeAsync 4 GB, pool keeps (threshold max)", [&] {
                   cudaMemPool_t pool{};
                   int dev = 0;
                   QCHECK(cudaGetDevice(&dev));
                   QCHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
                   unsigned long long thr = ~0ULL;
                   QCHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr));
                   void* p = nullptr;
                   QCHECK(cudaMallocAsync(&p, gb(4), r.s));
                   QCHECK(cudaFreeAsync(p, r.s));
                   QCHECK(cudaStreamSynchronize(r.s));
                   QCHECK(cudaMallocAsync(&p, gb(4), r.s));  // the second round reuses the pool
                   QCHECK(cudaFreeAsync(p, r.s));
                   QCHECK(cudaStreamSynchronize(r.s));
                 }, [&] {
                   cudaMemPool_t pool{};
                   int dev = 0;
                   QCHECK(cudaGetDevice(&dev));
                   QCHECK(cudaDeviceGetDefaultMemPool(&pool, dev));
                   QCHECK(cudaMemPoolTrimTo(pool, 0));
                   unsigned long long thr = 0;
                   QCHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &thr));
                 }});
  for (int rep = 0; rep < reps; ++rep)
    for (const op& o : ops) timeline(r, o, window_ms, probe_thr);
  if (g_json) {
    std::fprintf(g_json, "]\n");
    std::fclose(g_json);
  }
  return 0;
}
