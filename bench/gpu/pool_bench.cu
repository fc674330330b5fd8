// SPDX-License-Identifier: Apache-2.0
// krex_gpu_pool_bench: the C++ krex::pool on a fixed synthetic workload, the
// twin of bench/python/pool_bench.py (krex.Pool), so the two pools can be
// compared command for command (lab/scripts/pool_compare.sh runs both).
//
// Each command: a CPU phase of --prep-ms (a busy spin standing in for
// compiling, generating inputs and checking; concurrent with the other
// workers), then a region around krex::measure of one spin kernel of
// --kernel-cycles GPU clock cycles (the same kernel as torch.cuda._sleep:
// one thread spinning on clock64), --samples samples after 3 warm-ups,
// L2 flushed before each sample (measure's default).
//
//     krex_gpu_pool_bench --workers 16 --commands 400 --json out.json
//
// Built against today's pool it serves the device list given by --device
// (pool_options::devices({d})); compiled with -DKREX_BENCH_OLD_POOL against
// the headers of the single-device pool (before krex::pool served several
// devices) it uses that pool's defaults, for the "one device matches
// today's pool" comparison.

#include <krex/measure.hpp>
#include <krex/pool.hpp>
#include <krex/region.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gpu_kernels.cuh"

namespace {

__global__ void spin_cycles(long long cycles) {
  const long long start = clock64();
  long long offset = 0;
  while (offset < cycles) offset = clock64() - start;
}

struct config {
  int workers = 16, commands = 400, samples = 50, device = 0;
  double prep_ms = 40;
  long long kernel_cycles = 100000;
  std::string json;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "krex_gpu_pool_bench: %s\n"
               "usage: krex_gpu_pool_bench [--workers N] [--commands M] [--samples S] [--prep-ms P]\n"
               "                           [--kernel-cycles C] [--device D] [--json PATH]\n",
               why);
  std::exit(64);
}

config parse(int argc, char** argv) {
  config c;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing value for " + a).c_str());
    const char* v = argv[++i];
    char* end = nullptr;
    const double x = std::strtod(v, &end);
    const bool num = end != v && *end == '\0';
    if (a == "--json") {
      c.json = v;
      continue;
    }
    if (!num || x < 0) usage(("bad value for " + a + ": " + v).c_str());
    if (a == "--workers" && x >= 1 && x <= 64) c.workers = static_cast<int>(x);
    else if (a == "--commands" && x >= 1) c.commands = static_cast<int>(x);
    else if (a == "--samples" && x >= 1) c.samples = static_cast<int>(x);
    else if (a == "--prep-ms") c.prep_ms = x;
    else if (a == "--kernel-cycles" && x >= 1) c.kernel_cycles = static_cast<long long>(x);
    else if (a == "--device") c.device = static_cast<int>(x);
    else usage(("unknown option or value out of range: " + a + " " + v).c_str());
  }
  return c;
}

void spin_cpu(double ms) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double, std::milli>(ms);
  while (std::chrono::steady_clock::now() < until) {
  }
}

// Full protection, read from the level string the same way as pool_bench.py:
// gated, drained, pinned, nothing contended, busy at the quiet deadline, broken,
// foreign or split.
// args: prep_ms, kernel_cycles, samples. Returns "median_ms p95_ms full level".
std::string command(krex::tenant& t, const std::vector<std::string>& args) {
  spin_cpu(std::stod(args.at(0)));
  const long long cycles = std::stoll(args.at(1));
  krex::measure_options mo;
  mo.samples = std::stoi(args.at(2));
  krex::region r{t};
  // CUDA events on the legacy default stream, as krex.measure(stream=None)
  // times PyTorch's work (the overload without a stream would time the host
  // side of each launch).
  const krex::measure_result m =
      krex::measure(r, cudaStreamLegacy, [&] { spin_cycles<<<1, 1, 0, cudaStreamLegacy>>>(cycles); }, mo);
  r.exit();
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)  // e.g. no kernel image for this GPU: build with its architecture
    throw std::runtime_error(std::string("spin kernel: ") + cudaGetErrorString(e));
  const std::string level = r.report().level();
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.6f %.6f %d %s", m.median_ms, m.p95_ms,
                krex_gpu::full_protection(level, true) ? 1 : 0, level.c_str());
  std::string out = buf;
  for (double s : m.samples_ms) {
    std::snprintf(buf, sizeof buf, " %.6f", s);
    out += buf;
  }
  return out;
}

// Before the clock starts: the worker's CUDA context (as pool_bench.py's
// warm() makes it with torch.zeros), then a pause so that each of the
// simultaneous warm calls lands on its own worker.
std::string warm(krex::tenant& t, const std::vector<std::string>&) {
  if (cudaFree(nullptr) != cudaSuccess) throw std::runtime_error("cudaFree(0): no CUDA context");
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  return std::to_string(t.slot());
}

// krex::measure's interpolation, so these figures compare with its median and p95.
double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return krex::detail::quantile_sorted(v, q);
}

}  // namespace

int main(int argc, char** argv) try {
  const config cfg = parse(argc, argv);
  // Nothing here may touch CUDA before start(): the workers are forked, and a
  // child of a process that initialized CUDA cannot use it.
  krex::pool_options po;
  po.workers(cfg.workers).timeout(std::chrono::minutes(5));
#ifndef KREX_BENCH_OLD_POOL
  po.devices({cfg.device});
  const char* shape = "krex::pool devices({d})";
#else
  const char* shape = "krex::pool (single-device, before devices())";
#endif
  krex::pool p{po};
  p.handle("cmd", command);
  p.handle("warm", warm);
  const auto t_start = std::chrono::steady_clock::now();
  p.start();
  {
    std::vector<std::future<krex::pool_result>> ws;
    for (int i = 0; i < cfg.workers; ++i) ws.push_back(p.submit("warm", {}));
    for (auto& w : ws) {
      const krex::pool_result r = w.get();
      if (!r.ok()) throw std::runtime_error("warm-up: " + r.error);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::future<krex::pool_result>> fs;
  for (int i = 0; i < cfg.commands; ++i)
    fs.push_back(p.submit("cmd", {std::to_string(cfg.prep_ms), std::to_string(cfg.kernel_cycles),
                                  std::to_string(cfg.samples)}));
  std::vector<double> medians, samples;
  int failed = 0, full = 0, quiet = 0;
  std::string first_error, a_level;
  for (auto& f : fs) {
    const krex::pool_result r = f.get();
    if (!r.ok()) {
      if (first_error.empty()) first_error = r.error;
      ++failed;
      continue;
    }
    const char* s = r.value.c_str();
    char* end = nullptr;
    medians.push_back(std::strtod(s, &end));
    s = end;
    std::strtod(s, &end);  // p95
    s = end;
    full += static_cast<int>(std::strtol(s, &end, 10));
    s = end;
    while (*s == ' ') ++s;
    const char* lv = s;
    while (*s != ' ' && *s != '\0') ++s;
    const std::string level(lv, s);
    if (a_level.empty() || level.find("+quiet") != std::string::npos) a_level = level;
    quiet += level.find("+quiet+") != std::string::npos ? 1 : 0;
    for (;;) {
      const double x = std::strtod(s, &end);
      if (end == s) break;
      samples.push_back(x);
      s = end;
    }
  }
  const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - t0;
  const std::chrono::duration<double> with_start = std::chrono::steady_clock::now() - t_start;
  const int ok = cfg.commands - failed;
  const double cpm = ok / wall.count() * 60.0;
  std::printf("%s: %d workers, %d commands (%d failed), prep %.1f ms, kernel %lld cycles, %d samples\n",
              shape, cfg.workers, cfg.commands, failed, cfg.prep_ms, cfg.kernel_cycles, cfg.samples);
  std::printf("  wall %.2f s (%.2f s with start): %.1f commands/min; full protection %d/%d, quiet checked "
              "%d; level e.g. %s\n",
              wall.count(), with_start.count(), cpm, full, ok, quiet, a_level.c_str());
  std::printf("  command medians: median %.5f ms, p95 %.5f ms, max %.5f ms; samples p95 %.5f ms (%zu)\n",
              quantile(medians, 0.5), quantile(medians, 0.95), quantile(medians, 1.0),
              quantile(samples, 0.95), samples.size());
  if (!first_error.empty()) std::printf("  first error: %s\n", first_error.c_str());
  if (!cfg.json.empty()) {
    FILE* f = std::fopen(cfg.json.c_str(), "w");
    if (f == nullptr) {
      std::perror(cfg.json.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\"shape\": \"%s\", \"lang\": \"c++\", \"workers\": %d, \"commands\": %d, \"failed\": %d, "
                 "\"prep_ms\": %.3f, \"kernel_cycles\": %lld, \"samples\": %d, \"wall_s\": %.4f, "
                 "\"start_s\": %.4f, \"cmd_per_min\": %.2f, \"full_protection\": %d, \"quiet_checked\": %d, "
                 "\"median_of_medians_ms\": %.6f, \"p95_of_medians_ms\": %.6f, \"max_median_ms\": %.6f, "
                 "\"sample_p50_ms\": %.6f, \"sample_p95_ms\": %.6f, \"n_samples\": %zu}\n",
                 shape, cfg.workers, cfg.commands, failed, cfg.prep_ms, cfg.kernel_cycles, cfg.samples,
                 wall.count(), with_start.count() - wall.count(), cpm, full, quiet, quantile(medians, 0.5),
                 quantile(medians, 0.95), quantile(medians, 1.0), quantile(samples, 0.5),
                 quantile(samples, 0.95), samples.size());
    std::fclose(f);
  }
  return failed == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "krex_gpu_pool_bench: %s\n", e.what());
  return 1;
}
