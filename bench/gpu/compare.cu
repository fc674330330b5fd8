// SPDX-License-Identifier: Apache-2.0
// krex::compare on two variants 1% apart of a ~50 us bandwidth-bound kernel
// (issue 35): does it put them in the right order, and does it call two
// identical candidates "same" or "unsure", never "faster"/"slower"?
//
// Variant A is the axpby z = a*x + b*y over --floats-a floats (default 2^24,
// ~54 us on an H200), variant B the same kernel over --floats-b (default
// 16,944,128: 1.0% more bytes). Both run over the same --placements K copies
// of x, y, z (krex::cuda::placement_buffers of --floats-b floats each; A reads
// the first --floats-a of them). Each of --comparisons comparisons, like one
// command of a long-lived worker, allocates fresh placements (after a random
// spacer of 0..--spacer-mb, so they land elsewhere each time), then, in one
// krex::region (or none with --unprotected), runs two krex::compare calls:
//   pair:      A vs B (alternately B vs A: the first is the reference, so both
//              directions are judged); right = the bigger one called slower
//              (or the smaller one faster), wrong = the opposite verdict
//   identical: A vs A on the same placements; ok = same or unsure
// and frees the placements. Prints a table (the issue's targets: right order
// >= 95%, identical same/unsure >= 95%) and, with --json, every comparison.
//
//   krex_gpu_compare [--comparisons 100] [--samples 200] [--placements 8] [--tolerance 0.005]
//                    [--confidence 0.99] [--floats-a 16777216] [--floats-b 16944128]
//                    [--grid-per-sm 16] [--spacer-mb 2048] [--budget-mb 0] [--settle-ms 100]
//                    [--seed 1] [--pool N]
//                    [--sync-each] [--unprotected] [--segment NAME] [--json FILE]
//
// --samples and --confidence default to krex::compare's own defaults. One
// process, a tenant of the node's segment for the current device (or
// --segment); with --pool N, a krex::pool of N workers (each a tenant) runs
// the comparisons, N at once, as the commands of long-lived workers. The
// spacer of comparison c comes from (--seed, c), so a comparison is the same
// in both shapes. --json also has every sample and the time order of each
// compare, so a pairing or statistic can be re-derived offline
// (krex::compare_schedule).

#include "gpu_kernels.cuh"

#include <krex/compare.hpp>
#include <krex/measure.hpp>
#include <krex/pool.hpp>
#include <krex/region.hpp>

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <krex_tools/cli.hpp>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return krex::detail::quantile_sorted(v, q);
}

struct config {
  long comparisons = 100, samples = krex::compare_default_samples, placements = 8,
       grid_per_sm = 16, spacer_mb = 2048, budget_mb = 0, seed = 1, settle_ms = 100, pool = 0;
  long long floats_a = 16777216, floats_b = 16944128;
  double tolerance = 0.005, confidence = krex::compare_default_confidence;
  bool sync_each = false, unprotected = false;
  std::string json, segment;
};

struct record {
  int index = 0;
  bool b_first = false;   ///< the pair's reference (first candidate) was B
  krex::comparison pair;  ///< second vs first
  krex::comparison same;  ///< A vs A
  double median_a_ms = 0, median_b_ms = 0;
  double spread_a = 0, spread_b = 0;  ///< placement spread of each in the pair
  double region_ms = 0;
  unsigned long long spacer_bytes = 0;
  std::size_t placement_bytes = 0;
  bool right = false, wrong = false, same_ok = false;
  std::string level;  ///< the region's protection level ("unprotected" without one)
  int pid = 0;        ///< the process that ran it
  /// Every sample, for offline analysis: the pair's candidates (in the
  /// pair's order: the first is B when b_first) and time order, the
  /// identical pair's.
  std::vector<std::vector<double>> pair_samples, same_samples;
  std::vector<int> pair_order, same_order;
};

/// `v` as a JSON array.
template <class T>
void json_array(std::ostringstream& f, const std::vector<T>& v) {
  f << '[';
  char buf[32];
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i != 0) f << ',';
    if constexpr (std::is_integral_v<T>)
      f << static_cast<int>(v[i]);
    else {
      std::snprintf(buf, sizeof buf, "%.6f", static_cast<double>(v[i]));
      f << buf;
    }
  }
  f << ']';
}

/// Each of `vs` as a JSON array, in one.
template <class T>
void json_arrays(std::ostringstream& f, const std::vector<std::vector<T>>& vs) {
  f << '[';
  for (std::size_t c = 0; c < vs.size(); ++c) {
    if (c != 0) f << ',';
    json_array(f, vs[c]);
  }
  f << ']';
}

/// One comparison as a JSON object.
std::string record_json(const record& r) {
  std::ostringstream f;
  char buf[1024];
  std::snprintf(
      buf, sizeof buf,
      "{\"i\":%d,\"b_first\":%s,\"pair\":{\"ratio\":%.6f,\"low\":%.6f,\"high\":%.6f,"
      "\"coverage\":%.4f,\"verdict\":\"%s\"},\"identical\":{\"ratio\":%.6f,\"low\":%.6f,"
      "\"high\":%.6f,\"verdict\":\"%s\"},\"median_a_ms\":%.6f,\"median_b_ms\":%.6f,"
      "\"spread_a\":%.6f,\"spread_b\":%.6f,\"region_ms\":%.3f,\"spacer_bytes\":%llu,"
      "\"right\":%s,\"wrong\":%s,\"pid\":%d,\"level\":\"%s\"",
      r.index, r.b_first ? "true" : "false", r.pair.ratio, r.pair.low, r.pair.high,
      r.pair.coverage, krex::to_string(r.pair.verdict), r.same.ratio, r.same.low, r.same.high,
      krex::to_string(r.same.verdict), r.median_a_ms, r.median_b_ms, r.spread_a, r.spread_b,
      r.region_ms, r.spacer_bytes, r.right ? "true" : "false", r.wrong ? "true" : "false", r.pid,
      r.level.c_str());
  f << buf << ",\"pair_order\":";
  json_array(f, r.pair_order);
  f << ",\"pair_samples_ms\":";
  json_arrays(f, r.pair_samples);
  f << ",\"identical_order\":";
  json_array(f, r.same_order);
  f << ",\"identical_samples_ms\":";
  json_arrays(f, r.same_samples);
  f << "}";
  return f.str();
}

/// What the summary needs of a comparison (and its JSON), as one line of
/// numbers and the JSON after it: how a pool worker sends it back.
struct row {
  bool right = false, wrong = false, same_ok = false, pair_same = false, pair_unsure = false,
       same_same = false, same_unsure = false, full = false;
  double ratio_ab = 1, width_pair = 0, width_same = 0, spread_a = 0, spread_b = 0, region_ms = 0;
  unsigned long long placement_bytes = 0;
  std::string json;
};

row to_row(const record& r) {
  row w;
  w.right = r.right;
  w.wrong = r.wrong;
  w.same_ok = r.same_ok;
  w.pair_same = r.pair.verdict == krex::verdict::same;
  w.pair_unsure = r.pair.verdict == krex::verdict::unsure;
  w.same_same = r.same.verdict == krex::verdict::same;
  w.same_unsure = r.same.verdict == krex::verdict::unsure;
  w.full = krex_gpu::full_protection(r.level);
  w.ratio_ab = r.b_first ? 1 / r.pair.ratio : r.pair.ratio;
  w.width_pair = r.pair.high - r.pair.low;
  w.width_same = r.same.high - r.same.low;
  w.spread_a = r.spread_a;
  w.spread_b = r.spread_b;
  w.region_ms = r.region_ms;
  w.placement_bytes = r.placement_bytes;
  w.json = record_json(r);
  return w;
}

std::string encode(const row& w) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%d %d %d %d %d %d %d %d %.9g %.9g %.9g %.9g %.9g %.9g %llu\n",
                w.right, w.wrong, w.same_ok, w.pair_same, w.pair_unsure, w.same_same,
                w.same_unsure, w.full, w.ratio_ab, w.width_pair, w.width_same, w.spread_a,
                w.spread_b, w.region_ms, w.placement_bytes);
  return buf + w.json;
}

row decode(const std::string& s) {
  const std::size_t nl = s.find('\n');
  if (nl == std::string::npos) throw std::runtime_error("a worker's result has no summary line");
  std::istringstream in(s.substr(0, nl));
  row w;
  int f[8] = {};
  for (int& x : f) in >> x;
  in >> w.ratio_ab >> w.width_pair >> w.width_same >> w.spread_a >> w.spread_b >> w.region_ms >>
      w.placement_bytes;
  if (!in) throw std::runtime_error("a worker's summary line does not parse: " + s.substr(0, nl));
  w.right = f[0] != 0;
  w.wrong = f[1] != 0;
  w.same_ok = f[2] != 0;
  w.pair_same = f[3] != 0;
  w.pair_unsure = f[4] != 0;
  w.same_same = f[5] != 0;
  w.same_unsure = f[6] != 0;
  w.full = f[7] != 0;
  w.json = s.substr(nl + 1);
  return w;
}

/// What one process keeps between its comparisons: the stream, the grids,
/// the host copy of the inputs. Made at its first comparison (in a pool
/// worker: after the fork).
struct worker_state {
  cudaStream_t stream{};
  unsigned grid_a = 0, grid_b = 0;
  std::size_t buf_bytes = 0;
  std::vector<float> host;
  krex::compare_options o;

  explicit worker_state(const config& cfg) {
    int dev = 0, sms = 0;
    KREX_GPU_CHECK(cudaGetDevice(&dev));
    KREX_GPU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    KREX_GPU_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const long long big = std::max(cfg.floats_a, cfg.floats_b);
    const auto grid_for = [&](long long floats) {
      const long long n4 = floats / 4;
      return static_cast<unsigned>(std::max<long long>(
          1, std::min<long long>((n4 + 255) / 256, static_cast<long long>(sms) * cfg.grid_per_sm)));
    };
    grid_a = grid_for(cfg.floats_a);
    grid_b = grid_for(cfg.floats_b);
    buf_bytes = static_cast<std::size_t>(big) * sizeof(float);
    host.assign(static_cast<std::size_t>(big), 1.0F);
    o.measure.samples = static_cast<int>(cfg.samples);
    o.tolerance = cfg.tolerance;
    o.confidence = cfg.confidence;
    o.measure.sync_each = cfg.sync_each;
    // The scratch a compare of two candidates uses (2 x samples event pairs),
    // made now, not inside the first region.
    krex::measure_options prep = o.measure;
    prep.samples *= 2;
    krex::prepare_measure(prep);
  }
};

/// Comparison c: fresh placements (after a random spacer, so they land
/// elsewhere each time), then in one region (none without a tenant) the
/// pair and the identical pair, then the placements freed.
record run_comparison(worker_state& w, const config& cfg, krex::tenant* t, long c) {
  record rec;
  rec.index = static_cast<int>(c);
  rec.b_first = (c % 2) == 1;
  rec.pid = static_cast<int>(getpid());
  std::mt19937_64 rng(static_cast<std::uint64_t>(cfg.seed) * 1000003ULL +
                      static_cast<std::uint64_t>(c));
  void* spacer = nullptr;
  if (cfg.spacer_mb > 0) {
    rec.spacer_bytes = (rng() % static_cast<std::uint64_t>(cfg.spacer_mb + 1)) << 20;
    if (rec.spacer_bytes != 0) KREX_GPU_CHECK(cudaMalloc(&spacer, rec.spacer_bytes));
  }
  krex::compare_options o = w.o;
  {
    krex::cuda::placement_buffers in(static_cast<int>(cfg.placements),
                                     {w.buf_bytes, w.buf_bytes, w.buf_bytes},
                                     static_cast<std::size_t>(cfg.budget_mb) << 20);
    in.upload(0, w.host.data());
    in.upload(1, w.host.data());
    in.configure(o.measure);
    rec.placement_bytes = in.bytes();
    KREX_GPU_CHECK(cudaDeviceSynchronize());
    // The driver's work after large allocations (bench/gpu/quiet.cu) is
    // over before anything is timed.
    std::this_thread::sleep_for(std::chrono::milliseconds(cfg.settle_ms));
    cudaStream_t stream = w.stream;
    const auto axpby = [&](long long floats, unsigned grid) {
      return [&in, stream, floats, grid](krex::placement p) {
        krex_gpu::axpby4<<<grid, 256, 0, stream>>>(
            in.get<const float4>(p, 0), in.get<const float4>(p, 1), in.get<float4>(p, 2),
            static_cast<std::size_t>(floats / 4), 2.0F, 3.0F);
      };
    };
    const krex::candidate a{"A", axpby(cfg.floats_a, w.grid_a)};
    const krex::candidate b{"B", axpby(cfg.floats_b, w.grid_b)};
    o.seed = static_cast<std::uint64_t>(cfg.seed) + static_cast<std::uint64_t>(c);
    krex::compare_result pair, same;
    const auto t0 = std::chrono::steady_clock::now();
    const auto both = [&](auto& held) {
      pair = rec.b_first ? krex::compare(held, stream, {b, a}, o)
                         : krex::compare(held, stream, {a, b}, o);
      same = krex::compare(held, stream, {a, a}, o);
    };
    if (t != nullptr) {
      krex::region r{*t};
      both(r);
      r.exit();
      rec.level = r.report().level();
    } else {
      both(krex::unprotected);
      rec.level = "unprotected";
    }
    rec.region_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    rec.pair = pair.vs_first[1];
    rec.same = same.vs_first[1];
    const krex::measure_result& ma = pair.candidates[rec.b_first ? 1 : 0];
    const krex::measure_result& mb = pair.candidates[rec.b_first ? 0 : 1];
    rec.median_a_ms = ma.median_ms;
    rec.median_b_ms = mb.median_ms;
    rec.spread_a = ma.placement_spread;
    rec.spread_b = mb.placement_spread;
    for (const krex::measure_result& m : pair.candidates) rec.pair_samples.push_back(m.samples_ms);
    for (const krex::measure_result& m : same.candidates) rec.same_samples.push_back(m.samples_ms);
    rec.pair_order = pair.order;
    rec.same_order = same.order;
  }
  if (spacer != nullptr) KREX_GPU_CHECK(cudaFree(spacer));
  // The bigger variant is slower: B vs A "slower", A vs B "faster".
  const krex::verdict want =
      (cfg.floats_b > cfg.floats_a) != rec.b_first ? krex::verdict::slower : krex::verdict::faster;
  const krex::verdict opposite =
      want == krex::verdict::slower ? krex::verdict::faster : krex::verdict::slower;
  rec.right = rec.pair.verdict == want;
  rec.wrong = rec.pair.verdict == opposite;
  rec.same_ok =
      rec.same.verdict == krex::verdict::same || rec.same.verdict == krex::verdict::unsure;
  return rec;
}

void print_summary(const config& cfg, const std::vector<row>& rows, unsigned grid_a,
                   unsigned grid_b, double wall_s) {
  const auto pct = [&](auto pred) {
    long k = 0;
    for (const row& r : rows) k += pred(r) ? 1 : 0;
    return 100.0 * static_cast<double>(k) / static_cast<double>(rows.size());
  };
  std::vector<double> spreads, width_pair, width_same, ratio_ab, region_ms;
  unsigned long long placement_bytes = 0;
  for (const row& r : rows) {
    spreads.push_back(r.spread_a);
    spreads.push_back(r.spread_b);
    width_pair.push_back(r.width_pair);
    width_same.push_back(r.width_same);
    ratio_ab.push_back(r.ratio_ab);
    region_ms.push_back(r.region_ms);
    placement_bytes = std::max(placement_bytes, r.placement_bytes);
  }
  const double right = pct([](const row& r) { return r.right; });
  const double wrong = pct([](const row& r) { return r.wrong; });
  const double same_ok = pct([](const row& r) { return r.same_ok; });
  std::printf(
      "krex_gpu_compare: %zu comparisons, %s, K=%ld placements, %ld samples per candidate, "
      "tolerance %.2f%%, confidence %.3f%s\n",
      rows.size(),
      cfg.unprotected ? "unprotected"
      : cfg.pool > 0  ? ("one krex::region each, krex::pool of " + std::to_string(cfg.pool) +
                        " workers")
                           .c_str()
                      : "one krex::region each, one process",
      cfg.placements, cfg.samples, 100 * cfg.tolerance, cfg.confidence,
      cfg.sync_each ? ", sync each" : "");
  std::printf(
      "A: %lld floats (grid %u), B: %lld floats (grid %u), %.2f%% apart; placements cost %.1f "
      "MiB per process\n",
      cfg.floats_a, grid_a, cfg.floats_b, grid_b,
      100.0 * (static_cast<double>(cfg.floats_b) / static_cast<double>(cfg.floats_a) - 1),
      static_cast<double>(placement_bytes) / (1 << 20));
  std::printf("\n%-16s %8s %8s %8s %8s %8s %14s %14s\n", "pair", "right%", "wrong%", "same%",
              "unsure%", "target", "median B/A", "median CI w%");
  std::printf("%-16s %8.1f %8.1f %8.1f %8.1f %8s %14.4f %14.3f\n", "A vs B (1%)", right, wrong,
              pct([](const row& r) { return r.pair_same; }),
              pct([](const row& r) { return r.pair_unsure; }), right >= 95 ? "met" : "MISSED",
              quantile(ratio_ab, 0.5), 100 * quantile(width_pair, 0.5));
  std::printf("%-16s %8s %8.1f %8.1f %8.1f %8s %14s %14.3f\n", "A vs A", "-", 100 - same_ok,
              pct([](const row& r) { return r.same_same; }),
              pct([](const row& r) { return r.same_unsure; }), same_ok >= 95 ? "met" : "MISSED",
              "-", 100 * quantile(width_same, 0.5));
  std::printf(
      "\n(A vs A: wrong%% = called faster or slower.) placement spread: median %.2f%%, p95 "
      "%.2f%%; region: median %.1f ms, p95 %.1f ms; regions fully protected: %.1f%%; wall %.1f "
      "s\n",
      100 * quantile(spreads, 0.5), 100 * quantile(spreads, 0.95), quantile(region_ms, 0.5),
      quantile(region_ms, 0.95), pct([](const row& r) { return r.full; }), wall_s);
}

int write_json(const config& cfg, const std::vector<row>& rows, unsigned grid_a,
               unsigned grid_b) {
  FILE* f = std::fopen(cfg.json.c_str(), "w");
  if (f == nullptr) {
    std::perror(cfg.json.c_str());
    return 1;
  }
  const auto pct = [&](auto pred) {
    long k = 0;
    for (const row& r : rows) k += pred(r) ? 1 : 0;
    return 100.0 * static_cast<double>(k) / static_cast<double>(rows.size());
  };
  unsigned long long placement_bytes = 0;
  for (const row& r : rows) placement_bytes = std::max(placement_bytes, r.placement_bytes);
  std::fprintf(
      f,
      "{\"bench\":\"krex_gpu_compare\",\"comparisons\":%zu,\"samples\":%ld,\"placements\":%ld,"
      "\"tolerance\":%g,\"confidence\":%g,\"floats_a\":%lld,\"floats_b\":%lld,\"grid_a\":%u,"
      "\"grid_b\":%u,\"spacer_mb\":%ld,\"seed\":%ld,\"pool\":%ld,\"sync_each\":%s,"
      "\"unprotected\":%s,\"placement_bytes\":%llu,\"right_pct\":%g,\"wrong_pct\":%g,"
      "\"identical_same_or_unsure_pct\":%g,\"records\":[",
      rows.size(), cfg.samples, cfg.placements, cfg.tolerance, cfg.confidence, cfg.floats_a,
      cfg.floats_b, grid_a, grid_b, cfg.spacer_mb, cfg.seed, cfg.pool,
      cfg.sync_each ? "true" : "false", cfg.unprotected ? "true" : "false", placement_bytes,
      pct([](const row& r) { return r.right; }), pct([](const row& r) { return r.wrong; }),
      pct([](const row& r) { return r.same_ok; }));
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::fprintf(f, "%s%s", i == 0 ? "" : ",", rows[i].json.c_str());
  std::fprintf(f, "]}\n");
  std::fclose(f);
  std::printf("wrote %s\n", cfg.json.c_str());
  return 0;
}

krex::options tenant_options(const config& cfg) {
  krex::options opts;
  if (!cfg.segment.empty()) opts.segment(cfg.segment);
  return opts;
}

}  // namespace

int main(int argc, char** argv) {
  config cfg;
  krex_tools::cli::program prog(
      "krex_gpu_compare",
      "krex::compare on two axpby variants 1% apart, and on identical candidates");
  prog.root()
      .integer("--comparisons", "N", cfg.comparisons, 1, 100000, "comparisons (default 100)")
      .integer("--samples", "N", cfg.samples, 6, 100000,
               "samples per candidate per compare (default: krex::compare's, 200)")
      .integer("--placements", "K", cfg.placements, 1, 1024, "placements of the inputs (default 8)")
      .number("--tolerance", "F", cfg.tolerance, 0, 0.5,
              "the 'same' band, a fraction (default 0.005)")
      .number("--confidence", "F", cfg.confidence, 0.5, 0.9999,
              "the interval's confidence (default: krex::compare's, 0.99)")
      .integer("--floats-a", "N", cfg.floats_a, 1024, 1L << 32,
               "floats of variant A, a multiple of 4 (default 16777216)")
      .integer("--floats-b", "N", cfg.floats_b, 1024, 1L << 32,
               "floats of variant B, a multiple of 4 (default 16944128)")
      .integer("--grid-per-sm", "N", cfg.grid_per_sm, 1, 1024,
               "blocks of 256 per SM, capped at n/4/256 (default 16)")
      .integer(
          "--spacer-mb", "MB", cfg.spacer_mb, 0, 1L << 30,
          "the random spacer allocated before each comparison's placements, at most (default 2048)")
      .integer("--budget-mb", "MB", cfg.budget_mb, 0, 1L << 30,
               "the placements' memory budget (default 0: none; over it, krex::error)")
      .integer("--settle-ms", "MS", cfg.settle_ms, 0, 600000,
               "idle time after each comparison's allocations (default 100)")
      .integer("--seed", "N", cfg.seed, 0, 1000000000,
               "seed of the spacers and of compare (default 1)")
      .integer("--pool", "N", cfg.pool, 0, 256,
               "run the comparisons on a krex::pool of N workers (default 0: this process)")
      .flag("--sync-each", cfg.sync_each, "synchronize after every sample (the do_bench style)")
      .flag("--unprotected", cfg.unprotected, "take no region (a baseline)")
      .text("--segment", "NAME", cfg.segment, "the krex segment to join (default: the node's)")
      .text("--json", "FILE", cfg.json, "also write every comparison to FILE");
  prog.parse(argc, argv);
  if (cfg.floats_a % 4 != 0 || cfg.floats_b % 4 != 0) {
    std::fprintf(stderr, "krex_gpu_compare: --floats-a and --floats-b must be multiples of 4\n");
    return krex_tools::cli::exit_usage;
  }
  try {
    std::vector<row> rows;
    unsigned grid_a = 0, grid_b = 0;
    const auto t0 = std::chrono::steady_clock::now();
    if (cfg.pool > 0) {
      // Nothing here touches CUDA before start(): the workers are forked, and
      // a child of a process that initialized CUDA cannot use it. So no
      // cudaGetDeviceCount here: no driver's device node means no GPU.
      if (access("/dev/nvidiactl", F_OK) != 0) {
        std::printf("no CUDA device (no /dev/nvidiactl): skipped\n");
        return krex_gpu::exit_no_gpu;
      }
      krex::pool_options po;
      po.workers(static_cast<int>(cfg.pool)).timeout(std::chrono::minutes(5));
      if (!cfg.unprotected) po.tenant(tenant_options(cfg));
      krex::pool p{po};
      std::unique_ptr<worker_state> state;  // per worker process (a copy after the fork)
      p.handle("compare", [&](krex::tenant& t, const std::vector<std::string>& args) {
        int count = 0;
        if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
          throw std::runtime_error("no CUDA device in the worker");
        if (!state) state = std::make_unique<worker_state>(cfg);
        const long c = std::stol(args.at(0));
        return encode(to_row(run_comparison(*state, cfg, cfg.unprotected ? nullptr : &t, c))) +
               "\n" + std::to_string(state->grid_a) + " " + std::to_string(state->grid_b);
      });
      p.start();
      std::vector<std::future<krex::pool_result>> fs;
      for (long c = 0; c < cfg.comparisons; ++c) fs.push_back(p.submit("compare", {std::to_string(c)}));
      for (auto& f : fs) {
        const krex::pool_result r = f.get();
        if (!r.ok()) {
          std::fprintf(stderr, "krex_gpu_compare: comparison %llu: %s: %s\n",
                       static_cast<unsigned long long>(r.id), krex::to_string(r.status),
                       r.error.c_str());
          return r.error.find("no CUDA device") != std::string::npos ? krex_gpu::exit_no_gpu : 1;
        }
        const std::size_t last = r.value.rfind('\n');
        std::istringstream g(r.value.substr(last + 1));
        g >> grid_a >> grid_b;
        rows.push_back(decode(r.value.substr(0, last)));
      }
    } else {
      int count = 0;
      if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
        std::printf("no CUDA device: skipped\n");
        return krex_gpu::exit_no_gpu;
      }
      std::optional<krex::tenant> t;
      if (!cfg.unprotected) t.emplace(tenant_options(cfg));
      worker_state state(cfg);
      grid_a = state.grid_a;
      grid_b = state.grid_b;
      for (long c = 0; c < cfg.comparisons; ++c)
        rows.push_back(to_row(run_comparison(state, cfg, t ? &*t : nullptr, c)));
    }
    const double wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    print_summary(cfg, rows, grid_a, grid_b, wall_s);
    if (!cfg.json.empty()) return write_json(cfg, rows, grid_a, grid_b);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "krex_gpu_compare: %s\n", e.what());
    return 1;
  }
}
