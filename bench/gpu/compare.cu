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
//   krex_gpu_compare [--comparisons 100] [--samples 60] [--placements 8] [--tolerance 0.005]
//                    [--confidence 0.95] [--floats-a 16777216] [--floats-b 16944128]
//                    [--grid-per-sm 16] [--spacer-mb 2048] [--budget-mb 0] [--settle-ms 100]
//                    [--seed 1]
//                    [--sync-each] [--unprotected] [--segment NAME] [--json FILE]
//
// One process; the tenant joins the node's segment for the current device
// (or --segment), so it can run beside other krex workers: to spread the
// comparisons over N workers, start N copies at once with --comparisons
// 100/N, different --seed and --json files, and pool their JSON records
// (right, wrong, identical.verdict). --json also has every sample and the
// time order of each compare, so a pairing or statistic can be re-derived
// offline (krex::compare_schedule).

#include "kernels.cuh"

#include <krex/compare.hpp>
#include <krex/measure.hpp>
#include <krex/region.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <krex_tools/cli.hpp>
#include <optional>
#include <random>
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

struct record {
  int index = 0;
  bool b_first = false;   ///< the pair's reference (first candidate) was B
  krex::comparison pair;  ///< second vs first
  krex::comparison same;  ///< A vs A
  double median_a_ms = 0, median_b_ms = 0;
  double spread_a = 0, spread_b = 0;  ///< placement spread of each in the pair
  double region_ms = 0;
  unsigned long long spacer_bytes = 0;
  bool right = false, wrong = false, same_ok = false;
  /// Every sample, for offline analysis: the pair's candidates (in the
  /// pair's order: the first is B when b_first) and time order, the
  /// identical pair's.
  std::vector<std::vector<double>> pair_samples, same_samples;
  std::vector<int> pair_order, same_order;
};

/// `v` as a JSON array.
template <class T>
void json_array(FILE* f, const std::vector<T>& v) {
  std::fputc('[', f);
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i != 0) std::fputc(',', f);
    if constexpr (std::is_integral_v<T>)
      std::fprintf(f, "%d", static_cast<int>(v[i]));
    else
      std::fprintf(f, "%.6f", static_cast<double>(v[i]));
  }
  std::fputc(']', f);
}

}  // namespace

int main(int argc, char** argv) {
  long comparisons = 100, samples = 60, placements = 8, grid_per_sm = 16, spacer_mb = 2048,
       budget_mb = 0, seed = 1, settle_ms = 100;
  long long floats_a = 16777216, floats_b = 16944128;
  double tolerance = 0.005, confidence = 0.95;
  bool sync_each = false, unprotected = false;
  std::string json, segment;
  krex_tools::cli::program prog(
      "krex_gpu_compare",
      "krex::compare on two axpby variants 1% apart, and on identical candidates (issue 35)");
  prog.root()
      .integer("--comparisons", "N", comparisons, 1, 100000, "comparisons (default 100)")
      .integer("--samples", "N", samples, 6, 100000,
               "samples per candidate per compare (default 60)")
      .integer("--placements", "K", placements, 1, 1024, "placements of the inputs (default 8)")
      .number("--tolerance", "F", tolerance, 0, 0.5, "the 'same' band, a fraction (default 0.005)")
      .number("--confidence", "F", confidence, 0.5, 0.9999,
              "the interval's confidence (default 0.95)")
      .integer("--floats-a", "N", floats_a, 1024, 1L << 32,
               "floats of variant A, a multiple of 4 (default 16777216)")
      .integer("--floats-b", "N", floats_b, 1024, 1L << 32,
               "floats of variant B, a multiple of 4 (default 16944128)")
      .integer("--grid-per-sm", "N", grid_per_sm, 1, 1024,
               "blocks of 256 per SM, capped at n/4/256 (default 16)")
      .integer(
          "--spacer-mb", "MB", spacer_mb, 0, 1L << 30,
          "the random spacer allocated before each comparison's placements, at most (default 2048)")
      .integer("--budget-mb", "MB", budget_mb, 0, 1L << 30,
               "the placements' memory budget (default 0: none; over it, krex::error)")
      .integer("--settle-ms", "MS", settle_ms, 0, 600000,
               "idle time after each comparison's allocations (default 100)")
      .integer("--seed", "N", seed, 0, 1000000000, "seed of the spacers and of compare (default 1)")
      .flag("--sync-each", sync_each, "synchronize after every sample (the do_bench style)")
      .flag("--unprotected", unprotected, "take no region (a baseline)")
      .text("--segment", "NAME", segment, "the krex segment to join (default: the node's)")
      .text("--json", "FILE", json, "also write every comparison to FILE");
  prog.parse(argc, argv);
  if (floats_a % 4 != 0 || floats_b % 4 != 0) {
    std::fprintf(stderr, "krex_gpu_compare: --floats-a and --floats-b must be multiples of 4\n");
    return krex_tools::cli::exit_usage;
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: skipped\n");
    return krex_gpu::exit_no_gpu;
  }
  try {
    std::optional<krex::tenant> t;
    if (!unprotected) {
      krex::options opts;
      if (!segment.empty()) opts.segment(segment);
      t.emplace(opts);
    }
    int dev = 0, sms = 0;
    KREX_GPU_CHECK(cudaGetDevice(&dev));
    KREX_GPU_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cudaStream_t stream;
    KREX_GPU_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const long long big = std::max(floats_a, floats_b);
    const auto grid_for = [&](long long floats) {
      const long long n4 = floats / 4;
      return static_cast<unsigned>(std::max<long long>(
          1, std::min<long long>((n4 + 255) / 256, static_cast<long long>(sms) * grid_per_sm)));
    };
    const unsigned grid_a = grid_for(floats_a), grid_b = grid_for(floats_b);
    const std::size_t buf_bytes = static_cast<std::size_t>(big) * sizeof(float);
    std::vector<float> host(static_cast<std::size_t>(big), 1.0F);

    krex::compare_options o;
    o.measure.samples = static_cast<int>(samples);
    o.tolerance = tolerance;
    o.confidence = confidence;
    o.measure.sync_each = sync_each;
    // The scratch a compare of two candidates uses (2 x samples event pairs),
    // made now, not inside the first region.
    krex::measure_options prep = o.measure;
    prep.samples *= 2;
    krex::prepare_measure(prep);

    std::mt19937_64 rng(static_cast<std::uint64_t>(seed));
    std::vector<record> recs;
    std::size_t placement_bytes = 0;
    for (long c = 0; c < comparisons; ++c) {
      record rec;
      rec.index = static_cast<int>(c);
      rec.b_first = (c % 2) == 1;
      // A fresh placement for this "command", somewhere else in memory.
      void* spacer = nullptr;
      if (spacer_mb > 0) {
        rec.spacer_bytes = (rng() % static_cast<std::uint64_t>(spacer_mb + 1)) << 20;
        if (rec.spacer_bytes != 0) KREX_GPU_CHECK(cudaMalloc(&spacer, rec.spacer_bytes));
      }
      krex::cuda::placement_buffers in(static_cast<int>(placements),
                                       {buf_bytes, buf_bytes, buf_bytes},
                                       static_cast<std::size_t>(budget_mb) << 20);
      in.upload(0, host.data());
      in.upload(1, host.data());
      in.configure(o.measure);
      placement_bytes = in.bytes();
      KREX_GPU_CHECK(cudaDeviceSynchronize());
      // The driver's work after large allocations (bench/gpu/quiet.cu) is
      // over before anything is timed.
      std::this_thread::sleep_for(std::chrono::milliseconds(settle_ms));
      const auto axpby = [&](long long floats, unsigned grid) {
        return [&in, &stream, floats, grid](krex::placement p) {
          krex_gpu::axpby4<<<grid, 256, 0, stream>>>(
              in.get<const float4>(p, 0), in.get<const float4>(p, 1), in.get<float4>(p, 2),
              static_cast<std::size_t>(floats / 4), 2.0F, 3.0F);
        };
      };
      const krex::candidate a{"A", axpby(floats_a, grid_a)};
      const krex::candidate b{"B", axpby(floats_b, grid_b)};
      o.seed = static_cast<std::uint64_t>(seed) + static_cast<std::uint64_t>(c);
      krex::compare_result pair, same;
      const auto t0 = std::chrono::steady_clock::now();
      const auto both = [&](auto& held) {
        pair = rec.b_first ? krex::compare(held, stream, {b, a}, o)
                           : krex::compare(held, stream, {a, b}, o);
        same = krex::compare(held, stream, {a, a}, o);
      };
      if (t) {
        krex::region r{*t};
        both(r);
      } else {
        both(krex::unprotected);
      }
      rec.region_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (spacer != nullptr) KREX_GPU_CHECK(cudaFree(spacer));
      rec.pair = pair.vs_first[1];
      rec.same = same.vs_first[1];
      const krex::measure_result& ma = pair.candidates[rec.b_first ? 1 : 0];
      const krex::measure_result& mb = pair.candidates[rec.b_first ? 0 : 1];
      rec.median_a_ms = ma.median_ms;
      rec.median_b_ms = mb.median_ms;
      rec.spread_a = ma.placement_spread;
      rec.spread_b = mb.placement_spread;
      for (const krex::measure_result& m : pair.candidates)
        rec.pair_samples.push_back(m.samples_ms);
      for (const krex::measure_result& m : same.candidates)
        rec.same_samples.push_back(m.samples_ms);
      rec.pair_order = pair.order;
      rec.same_order = same.order;
      // The bigger variant is slower: B vs A "slower", A vs B "faster".
      const krex::verdict want =
          (floats_b > floats_a) != rec.b_first ? krex::verdict::slower : krex::verdict::faster;
      const krex::verdict opposite =
          want == krex::verdict::slower ? krex::verdict::faster : krex::verdict::slower;
      rec.right = rec.pair.verdict == want;
      rec.wrong = rec.pair.verdict == opposite;
      rec.same_ok =
          rec.same.verdict == krex::verdict::same || rec.same.verdict == krex::verdict::unsure;
      recs.push_back(rec);
    }

    const auto pct = [&](auto pred) {
      long k = 0;
      for (const record& r : recs) k += pred(r) ? 1 : 0;
      return 100.0 * static_cast<double>(k) / static_cast<double>(recs.size());
    };
    std::vector<double> spreads, width_pair, width_same, ratio_ab, region_ms;
    for (const record& r : recs) {
      spreads.push_back(r.spread_a);
      spreads.push_back(r.spread_b);
      width_pair.push_back(r.pair.high - r.pair.low);
      width_same.push_back(r.same.high - r.same.low);
      ratio_ab.push_back(r.b_first ? 1 / r.pair.ratio : r.pair.ratio);
      region_ms.push_back(r.region_ms);
    }
    const double right = pct([](const record& r) { return r.right; });
    const double wrong = pct([](const record& r) { return r.wrong; });
    const double same_ok = pct([](const record& r) { return r.same_ok; });
    std::printf(
        "krex_gpu_compare: %ld comparisons, %s, K=%ld placements, %ld samples per candidate, "
        "tolerance %.2f%%, confidence %.3f%s\n",
        comparisons, unprotected ? "unprotected" : "one krex::region each", placements, samples,
        100 * tolerance, confidence, sync_each ? ", sync each" : "");
    std::printf(
        "A: %lld floats (grid %u), B: %lld floats (grid %u), %.2f%% apart; placements cost %.1f "
        "MiB\n",
        floats_a, grid_a, floats_b, grid_b,
        100.0 * (static_cast<double>(floats_b) / static_cast<double>(floats_a) - 1),
        static_cast<double>(placement_bytes) / (1 << 20));
    std::printf("\n%-16s %8s %8s %8s %8s %8s %14s %14s\n", "pair", "right%", "wrong%", "same%",
                "unsure%", "target", "median B/A", "median CI w%");
    std::printf("%-16s %8.1f %8.1f %8.1f %8.1f %8s %14.4f %14.3f\n", "A vs B (1%)", right, wrong,
                pct([](const record& r) { return r.pair.verdict == krex::verdict::same; }),
                pct([](const record& r) { return r.pair.verdict == krex::verdict::unsure; }),
                right >= 95 ? "met" : "MISSED", quantile(ratio_ab, 0.5),
                100 * quantile(width_pair, 0.5));
    std::printf("%-16s %8s %8.1f %8.1f %8.1f %8s %14s %14.3f\n", "A vs A", "-", 100 - same_ok,
                pct([](const record& r) { return r.same.verdict == krex::verdict::same; }),
                pct([](const record& r) { return r.same.verdict == krex::verdict::unsure; }),
                same_ok >= 95 ? "met" : "MISSED", "-", 100 * quantile(width_same, 0.5));
    std::printf(
        "\n(A vs A: wrong%% = called faster or slower.) placement spread: median %.2f%%, p95 "
        "%.2f%%; "
        "region: median %.1f ms, p95 %.1f ms\n",
        100 * quantile(spreads, 0.5), 100 * quantile(spreads, 0.95), quantile(region_ms, 0.5),
        quantile(region_ms, 0.95));

    if (!json.empty()) {
      FILE* f = std::fopen(json.c_str(), "w");
      if (f == nullptr) {
        std::perror(json.c_str());
        return 1;
      }
      std::fprintf(
          f,
          "{\"bench\":\"krex_gpu_compare\",\"comparisons\":%ld,\"samples\":%ld,\"placements\":%ld,"
          "\"tolerance\":%g,\"confidence\":%g,\"floats_a\":%lld,\"floats_b\":%lld,\"grid_a\":%u,"
          "\"grid_b\":%u,\"spacer_mb\":%ld,\"seed\":%ld,\"sync_each\":%s,\"unprotected\":%s,"
          "\"placement_bytes\":%zu,\"right_pct\":%g,\"wrong_pct\":%g,\"identical_same_or_unsure_"
          "pct\":%g,"
          "\"records\":[",
          comparisons, samples, placements, tolerance, confidence, floats_a, floats_b, grid_a,
          grid_b, spacer_mb, seed, sync_each ? "true" : "false", unprotected ? "true" : "false",
          placement_bytes, right, wrong, same_ok);
      for (std::size_t i = 0; i < recs.size(); ++i) {
        const record& r = recs[i];
        std::fprintf(
            f,
            "%s{\"i\":%d,\"b_first\":%s,\"pair\":{\"ratio\":%.6f,\"low\":%.6f,\"high\":%.6f,"
            "\"coverage\":%.4f,\"verdict\":\"%s\"},\"identical\":{\"ratio\":%.6f,\"low\":%.6f,"
            "\"high\":%.6f,\"verdict\":\"%s\"},\"median_a_ms\":%.6f,\"median_b_ms\":%.6f,"
            "\"spread_a\":%.6f,\"spread_b\":%.6f,\"region_ms\":%.3f,\"spacer_bytes\":%llu,"
            "\"right\":%s,\"wrong\":%s",
            i == 0 ? "" : ",", r.index, r.b_first ? "true" : "false", r.pair.ratio, r.pair.low,
            r.pair.high, r.pair.coverage, krex::to_string(r.pair.verdict), r.same.ratio, r.same.low,
            r.same.high, krex::to_string(r.same.verdict), r.median_a_ms, r.median_b_ms, r.spread_a,
            r.spread_b, r.region_ms, r.spacer_bytes, r.right ? "true" : "false",
            r.wrong ? "true" : "false");
        std::fprintf(f, ",\"pair_order\":");
        json_array(f, r.pair_order);
        std::fprintf(f, ",\"pair_samples_ms\":[");
        for (std::size_t c = 0; c < r.pair_samples.size(); ++c) {
          if (c != 0) std::fputc(',', f);
          json_array(f, r.pair_samples[c]);
        }
        std::fprintf(f, "],\"identical_order\":");
        json_array(f, r.same_order);
        std::fprintf(f, ",\"identical_samples_ms\":[");
        for (std::size_t c = 0; c < r.same_samples.size(); ++c) {
          if (c != 0) std::fputc(',', f);
          json_array(f, r.same_samples[c]);
        }
        std::fprintf(f, "]}");
      }
      std::fprintf(f, "]}\n");
      std::fclose(f);
      std::printf("wrote %s\n", json.c_str());
    }
    return 0;
  } catch (const krex::error& e) {
    std::fprintf(stderr, "krex_gpu_compare: %s\n", e.what());
    return 1;
  }
}
