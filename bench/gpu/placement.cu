// SPDX-License-Identifier: Apache-2.0
// Does where a long-lived process's buffers land change a bandwidth-bound
// kernel's time? (issue 19: in long-lived workers, ~50 us kernels shift by up
// to +-2% from one command to the next, with one worker alone and no krex.)
// One process, no krex: for each of --allocs allocations, a spacer of random
// size (0 .. --spacer-mb) is allocated first, so the inputs land elsewhere in
// the device's memory; then x, y, z (--floats floats each; by default 16 Mi,
// the eval's axpby-16M candidate at set position 0) are allocated and filled,
// and the axpby is timed twice in a row, --samples samples each (cold L2, an
// event pair per sample). If the spread of the medians across allocations is
// much larger than the difference between the two timings of the same
// allocation, placement, not the measurement, moves the kernel. The process
// sleeps --settle-ms after the allocations and after the frees, so the
// driver's work after large allocations and frees (bench/gpu/quiet.cu:
// ~2.5 ms per GB) is over before anything is timed.
//
// Timings (--timing):
//   own      this file's loop on the default stream: flush (a buffer of its
//            own), event, kernel, event, synchronize, per sample (the default;
//            lab/results/ranks.md's placement table)
//   own-batched  the same operations, every sample enqueued before one
//            synchronize (an event pair per sample), as krex::measure's
//            batched timing
//   The own timings' flush (--flush): memset (cudaMemsetAsync of byte
//   --flush-byte, or of the sample's index & 0xff as krex::measure does:
//   the default), memset2 (the same bytes in two memsets of half the buffer:
//   an even number of memsets per sample), write (a kernel storing to the buffer: dirty lines, no
//   memset engine), read (a kernel loading the buffer: the L2 left clean),
//   none. Issue 19: in fresh processes, krex::measure's batched samples are
//   fast at odd indices and almost never at indices 4 and 6 mod 8; in
//   long-lived ones the alternation comes in either phase or not at all
//   (flip_forensics.py T11). These flushes tell whether the flush's value,
//   its engine or its dirty lines set the two levels.
//   sync     krex::measure (krex::unprotected) on a stream of its own with
//            sync_each: the eval's @sync timing, krex's flush buffer
//   batched  krex::measure without sync_each: the eval's default timing
// The eval's candidate launches min(n/4/256, 16 per SM) blocks of 256
// (--grid-per-sm 16); this bench's default is 8 per SM.
//
// Fast samples (issue 19's two levels): a sample more than --fast-pct below
// the median of every allocation's first-timing median. Per allocation the
// share of fast samples of each timing; if the share belongs to the
// allocation (placement), the two timings' shares agree (their correlation
// across allocations is printed). --json writes every trial: the spacer, the
// device addresses of x, y, z and of the flush buffer, both medians, both
// shares and every sample.
//
// Siblings (--churn-procs N, issue 19: the 1-2% flips grow with the number of
// concurrent workers): N child processes, forked before this process touches
// CUDA, each with a context of its own, hold device memory the way long-lived
// workers do. Before each allocation of the inputs every child frees about
// half of its buffers and allocates new ones of 64-512 MB (up to --churn-mb
// each), then waits, idle, while this process allocates, settles and times:
// the device's memory is shared and fragmented as in a pool of workers, but
// no sibling kernel runs during a timing. --churn-procs 0 (the default) is
// the lone process.
//
//   krex_gpu_placement [--allocs 40] [--samples 100] [--spacer-mb 4096] [--settle-ms 200] [--seed 1]
//                      [--floats 16777216] [--timing own|own-batched|sync|batched] [--grid-per-sm 8]
//                      [--fast-pct 1.5] [--churn-procs 0] [--churn-mb 2048]
//                      [--flush memset|memset2|write|read|none] [--flush-byte -1] [--json FILE]

#include <krex/measure.hpp>
#include <krex_tools/cli.hpp>

#include <cuda_runtime.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gpu_kernels.cuh"

namespace {

/// krex::measure's quantile (linear between closest ranks) of unsorted `v`.
double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return krex::detail::quantile_sorted(v, q);
}

/// Pearson's r of `a` and `b` (NAN if either is constant).
double correlation(const std::vector<double>& a, const std::vector<double>& b) {
  const double n = static_cast<double>(a.size());
  double ma = 0, mb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) ma += a[i] / n, mb += b[i] / n;
  double sab = 0, saa = 0, sbb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma);
    sbb += (b[i] - mb) * (b[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : NAN;
}

unsigned long long addr(const void* p) {
  return static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(p));
}

/// One sibling of --churn-procs: each byte read from `rfd` is one round (free
/// about half of what it holds, allocate 64-512 MB buffers up to `cap_mb`,
/// synchronize), answered by one byte on `wfd`; at end of file (the parent
/// closed the pipe or died) it frees everything and returns.
int churn_child(int rfd, int wfd, unsigned seed, long cap_mb) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pages(32, 256);  // 2 MB pages: 64-512 MB
  const size_t cap = static_cast<size_t>(cap_mb) << 20;
  std::vector<std::pair<void*, size_t>> held;
  size_t total = 0;
  char c = 0;
  while (read(rfd, &c, 1) == 1) {
    for (size_t i = 0; i < held.size();) {
      if (rng() & 1u) {
        (void)cudaFree(held[i].first);
        total -= held[i].second;
        held.erase(held.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    for (;;) {
      const size_t b = static_cast<size_t>(pages(rng)) << 21;
      void* p = nullptr;
      if (total + b > cap || cudaMalloc(&p, b) != cudaSuccess) break;
      (void)cudaMemset(p, 0, b);
      held.emplace_back(p, b);
      total += b;
    }
    (void)cudaGetLastError();
    if (cudaDeviceSynchronize() != cudaSuccess) return 1;
    if (write(wfd, "d", 1) != 1) break;
  }
  for (const auto& h : held) (void)cudaFree(h.first);
  return 0;
}

/// The parent's side of the siblings: their pids and pipes.
struct churners {
  std::vector<pid_t> pids;
  std::vector<int> to, from;

  /// One round: every sibling reallocates; false (with the reason on stderr)
  /// if one does not answer within `timeout_ms`.
  bool round(int timeout_ms) {
    for (int fd : to)
      if (write(fd, "g", 1) != 1) return false;
    for (int fd : from) {
      pollfd p{fd, POLLIN, 0};
      char c = 0;
      if (poll(&p, 1, timeout_ms) != 1 || read(fd, &c, 1) != 1) {
        std::fprintf(stderr, "krex_gpu_placement: a --churn-procs sibling did not answer within %d ms\n",
                     timeout_ms);
        return false;
      }
    }
    return true;
  }

  /// Closes the pipes (the siblings free and exit) and reaps them: 10 s,
  /// then SIGKILL.
  ~churners() {
    for (int fd : to) close(fd);
    for (int fd : from) close(fd);
    const auto t0 = std::chrono::steady_clock::now();
    for (pid_t pid : pids) {
      int st = 0;
      while (waitpid(pid, &st, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) {
          kill(pid, SIGKILL);
          (void)waitpid(pid, &st, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }
};

/// --flush write: stores `v` over the flush buffer (dirty lines in L2).
__global__ void flush_store(float4* p, size_t n4, float v) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = make_float4(v, v, v, v);
}

/// --flush read: loads the flush buffer (the L2 left holding clean lines);
/// the sum is stored only if it equals `never`, so the loads stay.
__global__ void flush_load(const float4* p, size_t n4, float never, float* sink) {
  float acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n4;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float4 v = p[i];
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == never) *sink = acc;
}

/// One timing of one allocation.
struct timing_result {
  std::vector<double> samples;
  double median = NAN;
  double fast_share = NAN;  ///< filled once the center is known
};

}  // namespace

int main(int argc, char** argv) {
  int allocs = 40, samples = 100, seed = 1, settle_ms = 200, grid_per_sm = 8;
  long spacer_mb = 4096, churn_procs = 0, churn_mb = 2048;
  long long floats = 16LL << 20;
  double fast_pct = 1.5;
  std::string json, timing = "own", flush_kind = "memset";
  long flush_byte = -1;
  krex_tools::cli::program prog(
      "krex_gpu_placement",
      "Does where a long-lived process's buffers land move a bandwidth-bound kernel? (no krex)");
  prog.root()
      .integer("--allocs", "N", allocs, 2, 100000, "allocations of the inputs (default 40)")
      .integer("--samples", "N", samples, 5, 100000, "samples per timing (default 100)")
      .integer("--spacer-mb", "MB", spacer_mb, 0, 1L << 30, "the random spacer's largest size (default 4096)")
      .integer("--settle-ms", "MS", settle_ms, 0, 600000,
               "idle time after allocating and after freeing (default 200)")
      .integer("--seed", "N", seed, 0, 1000000000, "the spacer sizes' seed (default 1)")
      .integer("--floats", "N", floats, 1024, 1L << 32,
               "floats per buffer, a multiple of 4 (default 16777216; the axpby-16M set: 16777216 "
               "16944128 17112064 17363968 17615872)")
      .value(
          "--timing", "own|own-batched|sync|batched",
          [&](const std::string& v) {
            if (v != "own" && v != "own-batched" && v != "sync" && v != "batched")
              throw krex_tools::cli::usage_error("invalid value '" + v +
                                                 "' for --timing: own, own-batched, sync or batched");
            timing = v;
          },
          "own: this bench's synchronized loop (default); own-batched: the same, one synchronize at the "
          "end; sync / batched: krex::measure with and without sync_each (the eval's @sync and default "
          "timings)")
      .value(
          "--flush", "memset|memset2|write|read|none",
          [&](const std::string& v) {
            if (v != "memset" && v != "memset2" && v != "write" && v != "read" && v != "none")
              throw krex_tools::cli::usage_error("invalid value '" + v +
                                                 "' for --flush: memset, memset2, write, read or none");
            flush_kind = v;
          },
          "the own timings' L2 flush before each sample (default memset, as krex::measure)")
      .integer("--flush-byte", "B", flush_byte, -1, 255,
               "the memset flush's byte (default -1: the sample's index & 0xff, as krex::measure)")
      .integer("--grid-per-sm", "N", grid_per_sm, 1, 1024,
               "blocks of 256 per SM, capped at n/4/256 (default 8; the eval's candidate: 16)")
      .number("--fast-pct", "PCT", fast_pct, 0, 50,
              "a sample this many % below the allocations' median is fast (default 1.5)")
      .integer("--churn-procs", "N", churn_procs, 0, 64,
               "sibling processes that hold and reallocate device memory before each allocation "
               "(default 0: none)")
      .integer("--churn-mb", "MB", churn_mb, 64, 1L << 20, "device memory each sibling holds at most (default 2048)")
      .text("--json", "FILE", json, "also write every trial to FILE");
  prog.parse(argc, argv);
  const bool own = timing == "own" || timing == "own-batched";
  if (!own && (flush_kind != "memset" || flush_byte != -1)) {
    std::fprintf(stderr, "krex_gpu_placement: --flush and --flush-byte apply to --timing own and own-batched "
                         "only (krex::measure flushes with its own memset)\n");
    return krex_tools::cli::exit_usage;
  }
  if (floats % 4 != 0) {
    std::fprintf(stderr, "krex_gpu_placement: --floats must be a multiple of 4 (got %lld)\n", floats);
    return krex_tools::cli::exit_usage;
  }
  // The siblings first: a process that has touched CUDA must not fork.
  churners sib;
  for (long i = 0; i < churn_procs; ++i) {
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0) {
      std::perror("krex_gpu_placement: pipe");
      return 1;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("krex_gpu_placement: fork");
      return 1;
    }
    if (pid == 0) {
      close(down[1]);
      close(up[0]);
      for (int fd : sib.to) close(fd);
      for (int fd : sib.from) close(fd);
      _exit(churn_child(down[0], up[1], static_cast<unsigned>(seed * 1000 + i), churn_mb));
    }
    close(down[0]);
    close(up[1]);
    sib.pids.push_back(pid);
    sib.to.push_back(down[1]);
    sib.from.push_back(up[0]);
  }
  int dev = 0, l2 = 0, sms = 0;
  KREX_GPU_CHECK(cudaGetDevice(&dev));
  KREX_GPU_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  KREX_GPU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const size_t n4 = static_cast<size_t>(floats) / 4, bytes = n4 * sizeof(float4);
  const unsigned grid = static_cast<unsigned>(
      std::max<long long>(1, std::min<long long>((static_cast<long long>(n4) + 255) / 256,
                                                 static_cast<long long>(sms) * grid_per_sm)));

  // The flush buffer: this bench's own (--timing own), or krex::measure's
  // per-process scratch, allocated now as the eval's worker does
  // (krex::prepare_measure, before its first command's inputs).
  size_t flush_bytes = 2 * static_cast<size_t>(l2);
  void* flush = nullptr;
  cudaStream_t stream = nullptr;
  krex::measure_options mo;
  mo.samples = samples;
  mo.warmup = 3;
  mo.sync_each = timing == "sync";
  if (own) {
    KREX_GPU_CHECK(cudaMalloc(&flush, flush_bytes));
  } else {
    KREX_GPU_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    krex::prepare_measure(mo);
    // Its address, through the scratch's lease (a krex detail; nothing allocated).
    using scratch = krex::detail::gpu::measure_scratch<krex::detail::cuda_api>;
    flush_bytes = krex::detail::flush_size(mo.flush_bytes);
    scratch::lease l;
    if (scratch::get().take(flush_bytes, 2 * static_cast<size_t>(samples), l)) flush = l.flush;
  }
  // The own timings' events: a pair per sample (own-batched) or one pair (own);
  // krex::measure brings its own.
  std::vector<cudaEvent_t> ev(timing == "own-batched" ? 2 * static_cast<size_t>(samples + 3) : own ? 2 : 0);
  for (auto& e : ev) KREX_GPU_CHECK(cudaEventCreate(&e));
  float* sink = nullptr;  // --flush read's never-written result
  if (own) KREX_GPU_CHECK(cudaMalloc(&sink, sizeof(float)));
  std::mt19937 rng(static_cast<unsigned>(seed));
  std::uniform_int_distribution<long> spacer_dist(0, spacer_mb / 2);  // in 2 MB pages

  auto time_it = [&](float4* x, float4* y, float4* z) {
    timing_result r;
    if (own) {
      const auto do_flush = [&](int s) {
        const size_t f4 = flush_bytes / sizeof(float4);
        const int byte = flush_byte < 0 ? (s & 0xff) : static_cast<int>(flush_byte);
        if (flush_kind == "memset") {
          KREX_GPU_CHECK(cudaMemsetAsync(flush, byte, flush_bytes));
        } else if (flush_kind == "memset2") {  // the same bytes in two memsets of half the buffer
          KREX_GPU_CHECK(cudaMemsetAsync(flush, byte, flush_bytes / 2));
          KREX_GPU_CHECK(cudaMemsetAsync(static_cast<char*>(flush) + flush_bytes / 2, byte,
                                         flush_bytes - flush_bytes / 2));
        } else if (flush_kind == "write")
          flush_store<<<static_cast<unsigned>(sms) * 8, 256>>>(static_cast<float4*>(flush), f4,
                                                               static_cast<float>(s));
        else if (flush_kind == "read")
          flush_load<<<static_cast<unsigned>(sms) * 8, 256>>>(static_cast<const float4*>(flush), f4, -1.0f,
                                                              sink);
      };
      const int total = samples + 3;  // 3 warm-up samples, not kept
      const bool batched = timing == "own-batched";
      for (int s = 0; s < total; ++s) {
        do_flush(s);
        KREX_GPU_CHECK(cudaEventRecord(ev[batched ? 2 * s : 0]));
        krex_gpu::axpby4<<<grid, 256>>>(x, y, z, n4, 2.0f, 3.0f);
        KREX_GPU_CHECK(cudaEventRecord(ev[batched ? 2 * s + 1 : 1]));
        if (batched) continue;
        KREX_GPU_CHECK(cudaEventSynchronize(ev[1]));
        float ms = 0;
        KREX_GPU_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
        if (s >= 3) r.samples.push_back(ms);
      }
      KREX_GPU_CHECK(cudaGetLastError());
      if (batched) {
        KREX_GPU_CHECK(cudaDeviceSynchronize());
        for (int s = 3; s < total; ++s) {
          float ms = 0;
          KREX_GPU_CHECK(cudaEventElapsedTime(&ms, ev[2 * s], ev[2 * s + 1]));
          r.samples.push_back(ms);
        }
      }
    } else {
      const krex::measure_result m = krex::measure(
          krex::unprotected, stream, [&] { krex_gpu::axpby4<<<grid, 256, 0, stream>>>(x, y, z, n4, 2.0f, 3.0f); },
          mo);
      KREX_GPU_CHECK(cudaGetLastError());
      r.samples = m.samples_ms;
    }
    r.median = quantile(r.samples, 0.5);
    return r;
  };

  std::vector<timing_result> first, second;
  std::vector<double> spacers;
  std::vector<unsigned long long> xa, ya, za;
  for (int k = 0; k < allocs; ++k) {
    if (!sib.pids.empty() && !sib.round(60000)) return 1;
    const size_t spacer = static_cast<size_t>(spacer_dist(rng)) << 21;
    void* sp = nullptr;
    if (spacer > 0) KREX_GPU_CHECK(cudaMalloc(&sp, spacer));
    float4 *x = nullptr, *y = nullptr, *z = nullptr;
    KREX_GPU_CHECK(cudaMalloc(&x, bytes));
    KREX_GPU_CHECK(cudaMalloc(&y, bytes));
    KREX_GPU_CHECK(cudaMalloc(&z, bytes));
    KREX_GPU_CHECK(cudaMemset(x, 1, bytes));
    KREX_GPU_CHECK(cudaMemset(y, 2, bytes));
    KREX_GPU_CHECK(cudaDeviceSynchronize());
    std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
    first.push_back(time_it(x, y, z));
    second.push_back(time_it(x, y, z));
    spacers.push_back(static_cast<double>(spacer >> 20));
    xa.push_back(addr(x)), ya.push_back(addr(y)), za.push_back(addr(z));
    KREX_GPU_CHECK(cudaFree(x));
    KREX_GPU_CHECK(cudaFree(y));
    KREX_GPU_CHECK(cudaFree(z));
    if (sp != nullptr) KREX_GPU_CHECK(cudaFree(sp));
    KREX_GPU_CHECK(cudaDeviceSynchronize());
    std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
  }
  // Across allocations: each allocation's first median against the median of
  // all; within an allocation: second against first.
  std::vector<double> medians;
  for (const auto& t : first) medians.push_back(t.median);
  const double center = quantile(medians, 0.5);
  const double fast_below = center * (1 - fast_pct / 100);
  std::vector<double> across, within, share1, share2;
  long fast_n = 0, all_n = 0;
  for (int k = 0; k < allocs; ++k) {
    across.push_back(100.0 * (first[k].median / center - 1));
    within.push_back(100.0 * std::fabs(second[k].median / first[k].median - 1));
    for (timing_result* t : {&first[k], &second[k]}) {
      long f = 0;
      for (double s : t->samples) f += s < fast_below;
      t->fast_share = t->samples.empty() ? NAN : static_cast<double>(f) / static_cast<double>(t->samples.size());
      fast_n += f;
      all_n += static_cast<long>(t->samples.size());
    }
    share1.push_back(first[k].fast_share);
    share2.push_back(second[k].fast_share);
  }
  std::vector<double> abs_across;
  for (double v : across) abs_across.push_back(std::fabs(v));
  std::printf("axpby %lld floats (%u blocks of 256), timing %s, %d allocations (spacer 0..%ld MB, settle %d ms), "
              "%d samples per timing, median %.5f ms, %ld sibling process(es) holding up to %ld MB each, "
              "flush %s (byte %s)\n",
              floats, grid, timing.c_str(), allocs, spacer_mb, settle_ms, samples, center, churn_procs, churn_mb,
              own ? flush_kind.c_str() : "krex::measure's memset",
              flush_byte < 0 ? "the sample's index" : std::to_string(flush_byte).c_str());
  std::printf("| | p50 | p90 | max |\n|---|---|---|---|\n");
  std::printf("| across allocations: |median - all's median| %% | %.2f | %.2f | %.2f |\n", quantile(abs_across, 0.5),
              quantile(abs_across, 0.9), quantile(abs_across, 1.0));
  std::printf("| within an allocation: |2nd - 1st| %% | %.2f | %.2f | %.2f |\n", quantile(within, 0.5),
              quantile(within, 0.9), quantile(within, 1.0));
  std::printf("across allocations: min %+.2f%%, max %+.2f%%\n", quantile(across, 0.0), quantile(across, 1.0));
  // The fast level: allocations by their share of fast samples (the bins of
  // lab/scripts/flip_forensics.py's T4).
  static const double edges[] = {0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.01};
  std::printf("fast samples (> %.2f%% below %.5f ms): %.1f%% of all; allocations by their share:\n", fast_pct,
              center, all_n ? 100.0 * static_cast<double>(fast_n) / static_cast<double>(all_n) : NAN);
  std::printf("| timing | <10%% | 10-30%% | 30-50%% | 50-70%% | 70-90%% | >=90%% |\n|---|---|---|---|---|---|---|\n");
  for (int w = 0; w < 2; ++w) {
    const std::vector<double>& sh = w == 0 ? share1 : share2;
    int h[6] = {0, 0, 0, 0, 0, 0};
    for (double s : sh)
      for (int b = 0; b < 6; ++b)
        if (s >= edges[b] && s < edges[b + 1]) ++h[b];
    std::printf("| %s | %d | %d | %d | %d | %d | %d |\n", w == 0 ? "1st" : "2nd", h[0], h[1], h[2], h[3], h[4],
                h[5]);
  }
  std::printf("fast share, 1st against 2nd timing of the same allocation: r = %.2f (near 1: the share "
              "belongs to the allocation)\n",
              correlation(share1, share2));
  // The fast samples by index (flip_forensics.py T11): even / odd, and the
  // timings in which one parity carries them by 20 points or more.
  std::printf("| timing | fast %% at even / odd index | odd fast | even fast | no alternation |\n|---|---|---|---|---|\n");
  for (int w = 0; w < 2; ++w) {
    long fe = 0, ne = 0, fo = 0, no = 0;
    int odd = 0, even = 0, none = 0;
    for (int k = 0; k < allocs; ++k) {
      const timing_result& t = w == 0 ? first[k] : second[k];
      long e = 0, o = 0, en = 0, on = 0;
      for (std::size_t i = 0; i < t.samples.size(); ++i) {
        const bool fast = t.samples[i] < fast_below;
        if (i % 2 == 0) e += fast, ++en;
        else o += fast, ++on;
      }
      fe += e, ne += en, fo += o, no += on;
      const double d = (on ? static_cast<double>(o) / static_cast<double>(on) : 0) -
                       (en ? static_cast<double>(e) / static_cast<double>(en) : 0);
      (d >= 0.2 ? odd : d <= -0.2 ? even : none) += 1;
    }
    std::printf("| %s | %.1f / %.1f | %d | %d | %d |\n", w == 0 ? "1st" : "2nd",
                ne ? 100.0 * static_cast<double>(fe) / static_cast<double>(ne) : NAN,
                no ? 100.0 * static_cast<double>(fo) / static_cast<double>(no) : NAN, odd, even, none);
  }
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (f == nullptr) {
      std::perror(json.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\"allocs\":%d,\"samples\":%d,\"spacer_mb\":%ld,\"settle_ms\":%d,\"median_ms\":%.6f,"
                 "\"floats\":%lld,\"timing\":\"%s\",\"grid\":%u,\"fast_pct\":%g,\"flush_addr\":%llu,"
                 "\"flush_bytes\":%zu,\"churn_procs\":%ld,\"churn_mb\":%ld,\"flush\":\"%s\",\"flush_byte\":%ld,"
                 "\"trials\":[",
                 allocs, samples, spacer_mb, settle_ms, center, floats, timing.c_str(), grid, fast_pct, addr(flush),
                 flush_bytes, churn_procs, churn_mb, own ? flush_kind.c_str() : "measure", flush_byte);
    const auto samples_of = [&](const timing_result& t) {
      std::string s;
      char b[32];
      for (std::size_t i = 0; i < t.samples.size(); ++i) {
        std::snprintf(b, sizeof b, "%s%.6f", i ? "," : "", t.samples[i]);
        s += b;
      }
      return s;
    };
    for (int k = 0; k < allocs; ++k)
      std::fprintf(f,
                   "%s{\"spacer_mb\":%.0f,\"first_ms\":%.6f,\"second_ms\":%.6f,\"x_addr\":%llu,\"y_addr\":%llu,"
                   "\"z_addr\":%llu,\"first_fast_share\":%.4f,\"second_fast_share\":%.4f,"
                   "\"first_samples_ms\":[%s],\"second_samples_ms\":[%s]}",
                   k ? "," : "", spacers[k], first[k].median, second[k].median, xa[k], ya[k], za[k],
                   first[k].fast_share, second[k].fast_share, samples_of(first[k]).c_str(),
                   samples_of(second[k]).c_str());
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  if (stream != nullptr) KREX_GPU_CHECK(cudaStreamDestroy(stream));
  for (auto& e : ev) KREX_GPU_CHECK(cudaEventDestroy(e));
  if (sink != nullptr) KREX_GPU_CHECK(cudaFree(sink));
  return 0;
}
