// SPDX-License-Identifier: Apache-2.0
// Regions on different GPUs proceed concurrently, with disjoint pinned cores.
//
//   krex_gpu_two_gpus [--gpus N] [--regions R] [--body-ms M] [--siblings S]
//
// One measurer process per GPU (devices 0..N-1; N defaults to every visible
// GPU) and S busy sibling tenants per GPU. Each measurer takes R regions with
// an M-millisecond kernel body and records each body's host interval
// (steady_clock, common to the node). If regions on different GPUs were
// serialized, no two bodies would overlap. Exit 1 if some GPU's bodies never
// overlapped another GPU's, or two GPUs' pinned cores intersect; exit 77 with
// fewer than 2 GPUs (or fewer than N). Also printed: each GPU's NUMA node
// (sysfs, by its PCI bus id) and the NUMA nodes of its pinned cores.

#include "proc_util.hpp"
#include "gpu_kernels.cuh"

#include <krex/region.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iterator>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int max_regions = 256;
constexpr int max_gpus = 16;

struct board {
  std::atomic<int> ready;
  std::atomic<int> go;
  std::atomic<int> stop;
  std::atomic<std::uint64_t> begin[max_gpus][max_regions];
  std::atomic<std::uint64_t> end[max_gpus][max_regions];
  std::atomic<int> pinned[max_gpus][64];
  std::atomic<int> npinned[max_gpus];
  std::atomic<int> frozen[max_gpus];
  std::atomic<int> numa[max_gpus];  // the GPU's NUMA node (-1: unknown)
};

/// The NUMA node of GPU `device` from its PCI address (-1: unknown), through
/// the library's sysfs readers (detail/cpu/topology.hpp).
int gpu_node(int device) {
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) return -1;
  const std::string id = krex::detail::normalize_pci_bus_id(bus);
  return krex::detail::read_int_file("/sys/bus/pci/devices/" + id + "/numa_node").value_or(-1);
}

/// The NUMA node of each CPU this process may use (topology::read: node 0
/// where sysfs has no node directories).
std::map<int, int> cpu_nodes() {
  std::map<int, int> out;
  for (const krex::detail::cpu_info& c : krex::detail::topology::read().cpus) out[c.cpu] = c.node;
  return out;
}

krex::options opts(const std::string& seg, int device) {
  using namespace std::chrono_literals;
  return krex::options{}.segment(seg).device(device).drain_deadline(20s).lock_wait(120s);
}

/// A tenant of `device` in segment `seg`, with the device set, a stream and
/// two stamps (stamped_spin's start and end) in device memory.
struct gpu_tenant {
  krex::tenant tenant;
  cudaStream_t stream{};
  unsigned long long* stamps = nullptr;
  gpu_tenant(const std::string& seg, int device) : tenant{opts(seg, device)} {
    KREX_GPU_CHECK(cudaSetDevice(device));
    KREX_GPU_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    KREX_GPU_CHECK(cudaMalloc(&stamps, 16));
  }
};

int sibling(const std::string& seg, int device, board* b) {
  gpu_tenant g{seg, device};
  cudaStream_t s = g.stream;
  unsigned long long* st = g.stamps;
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
  gpu_tenant g{seg, device};
  cudaStream_t s = g.stream;
  unsigned long long* st = g.stamps;
  b->numa[device] = gpu_node(device);
  b->ready.fetch_add(1);
  while (b->go.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int r = 0; r < regions; ++r) {
    krex::region reg{g.tenant};
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
  int regions = 20, body_ms = 20, siblings = 2, want = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--regions")
      regions = std::min(max_regions, std::stoi(v));
    else if (k == "--body-ms")
      body_ms = std::stoi(v);
    else if (k == "--siblings")
      siblings = std::stoi(v);
    else if (k == "--gpus")
      want = std::stoi(v);
  }
  const int visible = krex_gpu::gpu_count_forked();
  const int gpus = std::min(max_gpus, want > 0 ? want : visible);
  if (visible < 2 || gpus < 2 || visible < gpus) {
    std::printf("two_gpus: %d GPU(s) visible, %d wanted: skipped (needs at least 2)\n", visible,
                want > 0 ? want : visible);
    return krex_gpu::exit_no_gpu;
  }
  const std::string seg = "krexgpu-n-" + std::to_string(::getpid());
  krex_test::become_subreaper();
  krex_test::shared<board> b;
  for (int d = 0; d < max_gpus; ++d) b->numa[d] = -1;
  std::vector<krex_test::child> kids, measurers;
  for (int d = 0; d < gpus; ++d)
    for (int i = 0; i < siblings; ++i)
      kids.push_back(krex_test::spawn([&, d] { return sibling(seg, d, &*b); }));
  for (int d = 0; d < gpus; ++d)
    measurers.push_back(
        krex_test::spawn([&, d] { return measurer(seg, d, regions, body_ms, &*b); }));
  if (!krex_test::wait_until([&] { return b->ready.load() == gpus * (siblings + 1); },
                             std::chrono::seconds(180))) {
    std::fprintf(stderr, "processes did not start\n");
    return 3;
  }
  b->go.store(1);
  int failed = 0;
  for (auto& m : measurers) failed += krex_test::exit_code(m.wait(std::chrono::seconds(240))) != 0;
  b->stop.store(1);
  for (auto& k : kids) krex_test::exit_code(k.wait(std::chrono::seconds(60)));

  std::printf("two_gpus: %d GPUs, %d regions of %d ms per GPU, %d busy siblings per GPU\n", gpus, regions,
              body_ms, siblings);
  bool all_overlap = true, disjoint = true, any_pinned = true;
  const std::map<int, int> node_of = cpu_nodes();
  std::vector<std::vector<int>> pins(static_cast<std::size_t>(gpus));
  for (int d = 0; d < gpus; ++d) {
    for (int i = 0; i < b->npinned[d].load(); ++i) pins[static_cast<std::size_t>(d)].push_back(b->pinned[d][i]);
    std::sort(pins[static_cast<std::size_t>(d)].begin(), pins[static_cast<std::size_t>(d)].end());
    any_pinned = any_pinned && !pins[static_cast<std::size_t>(d)].empty();
  }
  for (int d = 0; d < gpus; ++d) {
    double body_total_ms = 0, overlap_ms = 0;
    int pairs = 0;
    for (int i = 0; i < regions; ++i) {
      body_total_ms += (b->end[d][i] - b->begin[d][i]) / 1e6;
      for (int e = 0; e < gpus; ++e) {
        if (e == d) continue;
        for (int j = 0; j < regions; ++j) {
          const std::uint64_t lo = std::max(b->begin[d][i].load(), b->begin[e][j].load());
          const std::uint64_t hi = std::min(b->end[d][i].load(), b->end[e][j].load());
          if (hi > lo) {
            overlap_ms += (hi - lo) / 1e6;
            ++pairs;
          }
        }
      }
    }
    all_overlap = all_overlap && overlap_ms > 0;
    std::string nodes;
    for (int c : pins[static_cast<std::size_t>(d)]) {
      const auto f = node_of.find(c);
      const std::string n = std::to_string(f == node_of.end() ? -1 : f->second);
      if (nodes.find(n) == std::string::npos) nodes += (nodes.empty() ? "" : ",") + n;
    }
    std::printf("  GPU%d (NUMA node %d): region bodies %.1f ms in all, overlapping other GPUs' bodies %.1f ms "
                "(%d pairs); pinned cpus {%s} on NUMA node(s) {%s}; frozen siblings in its first region: %d\n",
                d, b->numa[d].load(), body_total_ms, overlap_ms, pairs, cpus(*b, d).c_str(), nodes.c_str(),
                b->frozen[d].load());
    for (int e = d + 1; e < gpus; ++e) {
      std::vector<int> both;
      std::set_intersection(pins[static_cast<std::size_t>(d)].begin(), pins[static_cast<std::size_t>(d)].end(),
                            pins[static_cast<std::size_t>(e)].begin(), pins[static_cast<std::size_t>(e)].end(),
                            std::back_inserter(both));
      if (!both.empty()) {
        std::printf("  GPU%d and GPU%d share %zu pinned cpu(s)\n", d, e, both.size());
        disjoint = false;
      }
    }
  }
  std::printf("  every GPU overlapped another: %s; pinned cores disjoint: %s\n", all_overlap ? "yes" : "NO",
              disjoint ? "yes" : "NO");
  krex::remove_segment(opts(seg, 0));
  return (failed == 0 && all_overlap && disjoint && any_pinned) ? 0 : 1;
}
