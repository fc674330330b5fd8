// SPDX-License-Identifier: Apache-2.0
// Regions on different GPUs proceed concurrently, with disjoint pinned cores.
//
//   krex_gpu_two_gpus [--regions R] [--body-ms M] [--siblings S]
//
// One measurer process per GPU (devices 0 and 1) and S busy sibling tenants
// per GPU. Each measurer takes R regions with an M-millisecond kernel body and
// records each body's host interval (steady_clock, common to the node). If
// regions on the two GPUs were serialized, no two bodies would overlap.
// Exit 1 if the bodies never overlapped or the pinned cores intersect; exit 77
// with fewer than 2 GPUs.

#include "../../tests/proc_util.hpp"
#include "kernels.cuh"

#include <krex/region.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int max_regions = 256;

struct board {
  std::atomic<int> ready;
  std::atomic<int> go;
  std::atomic<int> stop;
  std::atomic<std::uint64_t> begin[2][max_regions];
  std::atomic<std::uint64_t> end[2][max_regions];
  std::atomic<int> pinned[2][64];
  std::atomic<int> npinned[2];
  std::atomic<int> frozen[2];
};

krex::options opts(const std::string& seg, int device) {
  using namespace std::chrono_literals;
  return krex::options{}.segment(seg).device(device).drain_deadline(20s).lock_wait(120s);
}

int sibling(const std::string& seg, int device, board* b) {
  krex::tenant t{opts(seg, device)};
  KREX_GPU_CHECK(cudaSetDevice(device));
  cudaStream_t s;
  KREX_GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned long long* st = nullptr;
  KREX_GPU_CHECK(cudaMalloc(&st, 16));
  b->ready.fetch_add(1);
  int k = 0;
  while (b->stop.load() == 0) {
    krex_gpu::stamped_spin<<<16, 128, 0, s>>>(st, st + 1, 200'000);  // gated by CUPTI
    if (++k % 4 == 0) KREX_GPU_CHECK(cudaStreamSynchronize(s));
  }
  KREX_GPU_CHECK(cudaStreamSynchronize(s));
  return 0;
}

int measurer(const std::string& seg, int device, int regions, int body_ms, board* b) {
  krex::tenant t{opts(seg, device)};
  KREX_GPU_CHECK(cudaSetDevice(device));
  cudaStream_t s;
  KREX_GPU_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned long long* st = nullptr;
  KREX_GPU_CHECK(cudaMalloc(&st, 16));
  b->ready.fetch_add(1);
  while (b->go.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int r = 0; r < regions; ++r) {
    krex::region reg{t};
    b->begin[device][r] = krex::detail::now_ns();
    krex_gpu::stamped_spin<<<132, 128, 0, s>>>(
        st, st + 1, static_cast<unsigned long long>(body_ms) * 1'000'000);
    KREX_GPU_CHECK(cudaStreamSynchronize(s));
    b->end[device][r] = krex::detail::now_ns();
    if (r == 0) {
      const auto& p = reg.report().pinned_cpus;
      b->npinned[device] = static_cast<int>(std::min<std::size_t>(p.size(), 64));
      for (std::size_t i = 0; i < p.size() && i < 64; ++i) b->pinned[device][i] = p[i];
      b->frozen[device] = static_cast<int>(reg.report().frozen_pids.size());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return 0;
}

std::string cpus(const board& b, int d) {
  std::string out;
  for (int i = 0; i < b.npinned[d].load(); ++i)
    out += (i ? "," : "") + std::to_string(b.pinned[d][i].load());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int regions = 20, body_ms = 20, siblings = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--regions")
      regions = std::min(max_regions, std::stoi(v));
    else if (k == "--body-ms")
      body_ms = std::stoi(v);
    else if (k == "--siblings")
      siblings = std::stoi(v);
  }
  const int gpus = krex_gpu::gpu_count_forked();
  if (gpus < 2) {
    std::printf("two_gpus: %d GPU(s): skipped\n", gpus);
    return krex_gpu::exit_no_gpu;
  }
  const std::string seg = "krexgpu-2-" + std::to_string(::getpid());
  krex_test::become_subreaper();
  krex_test::shared<board> b;
  std::vector<krex_test::child> kids, measurers;
  for (int d = 0; d < 2; ++d)
    for (int i = 0; i < siblings; ++i)
      kids.push_back(krex_test::spawn([&, d] { return sibling(seg, d, &*b); }));
  for (int d = 0; d < 2; ++d)
    measurers.push_back(
        krex_test::spawn([&, d] { return measurer(seg, d, regions, body_ms, &*b); }));
  if (!krex_test::wait_until([&] { return b->ready.load() == 2 * siblings + 2; },
                             std::chrono::seconds(120))) {
    std::fprintf(stderr, "processes did not start\n");
    return 3;
  }
  b->go.store(1);
  int failed = 0;
  for (auto& m : measurers) failed += krex_test::exit_code(m.wait(std::chrono::seconds(240))) != 0;
  b->stop.store(1);
  for (auto& k : kids) krex_test::exit_code(k.wait(std::chrono::seconds(60)));

  double overlap_ms = 0, body_total_ms = 0;
  int overlapping_pairs = 0;
  for (int i = 0; i < regions; ++i) {
    body_total_ms += (b->end[0][i] - b->begin[0][i]) / 1e6;
    for (int j = 0; j < regions; ++j) {
      const std::uint64_t lo = std::max(b->begin[0][i].load(), b->begin[1][j].load());
      const std::uint64_t hi = std::min(b->end[0][i].load(), b->end[1][j].load());
      if (hi > lo) {
        overlap_ms += (hi - lo) / 1e6;
        ++overlapping_pairs;
      }
    }
  }
  std::vector<int> p0, p1, both;
  for (int i = 0; i < b->npinned[0].load(); ++i) p0.push_back(b->pinned[0][i]);
  for (int i = 0; i < b->npinned[1].load(); ++i) p1.push_back(b->pinned[1][i]);
  std::sort(p0.begin(), p0.end());
  std::sort(p1.begin(), p1.end());
  std::set_intersection(p0.begin(), p0.end(), p1.begin(), p1.end(), std::back_inserter(both));
  std::printf("two_gpus: %d regions of %d ms per GPU, %d busy siblings per GPU\n", regions, body_ms,
              siblings);
  std::printf("  GPU0 region bodies: %.1f ms in all; overlapping GPU1 bodies: %.1f ms (%d pairs)\n",
              body_total_ms, overlap_ms, overlapping_pairs);
  std::printf(
      "  pinned cpus: GPU0 {%s}, GPU1 {%s}, common %zu; frozen siblings per region: %d, %d\n",
      cpus(*b, 0).c_str(), cpus(*b, 1).c_str(), both.size(), b->frozen[0].load(),
      b->frozen[1].load());
  krex::remove_segment(opts(seg, 0));
  return (failed == 0 && overlap_ms > 0 && both.empty() && !p0.empty()) ? 0 : 1;
}
