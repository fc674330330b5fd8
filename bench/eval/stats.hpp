// SPDX-License-Identifier: Apache-2.0
#pragma once

// Statistics of the evaluation (bench/eval): quantiles, inflation by
// duration band, pairwise flip rate and Kendall tau against a reference
// order, and the toy throughput bound. Plain C++; tested in tests/test_eval.cpp.

#include <krex/measure.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

namespace krex_eval {

/// Quantile q in [0,1], the same interpolation krex::measure reports
/// (krex::detail::quantile_sorted); NaN if empty.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return krex::detail::quantile_sorted(v, q);
}

/// Signed timing inflation of `measured` against `reference`, in percent.
inline double inflation_pct(double measured, double reference) {
  return (measured / reference - 1.0) * 100.0;
}

/// A duration band: reference durations strictly above `above_ms` (and at
/// most `up_to_ms`, if positive).
struct band {
  std::string name;
  double above_ms;
  double up_to_ms;
  bool contains(double ref_ms) const {
    return ref_ms > above_ms && (up_to_ms <= 0 || ref_ms <= up_to_ms);
  }
};

/// The paper's nested bands (over 0.1 / 1 / 10 ms) and the short kernels below them.
inline std::vector<band> bands() {
  return {{"<=0.1ms", 0, 0.1}, {">0.1ms", 0.1, 0}, {">1ms", 1, 0}, {">10ms", 10, 0}};
}

/// The paper's p95 inflation targets (percent) for the nested bands; NaN if none.
inline double paper_p95_target(const std::string& band_name) {
  if (band_name == ">0.1ms") return 3.90;
  if (band_name == ">1ms") return 1.58;
  if (band_name == ">10ms") return 0.30;
  return NAN;
}

/// Pairwise order agreement of `measured` with `reference` (same length,
/// same items): pairs, flipped pairs (discordant), and Kendall tau-a =
/// (concordant - discordant) / pairs. Ties in either count as neither.
struct rank_agreement {
  std::size_t pairs = 0, concordant = 0, flips = 0;
  double tau() const {
    return pairs == 0 ? NAN
                      : (static_cast<double>(concordant) - static_cast<double>(flips)) /
                            static_cast<double>(pairs);
  }
  double flip_rate() const {
    return pairs == 0 ? NAN : static_cast<double>(flips) / static_cast<double>(pairs);
  }
  rank_agreement& operator+=(const rank_agreement& o) {
    pairs += o.pairs, concordant += o.concordant, flips += o.flips;
    return *this;
  }
};

inline rank_agreement compare_order(const std::vector<double>& reference,
                                    const std::vector<double>& measured) {
  rank_agreement r;
  const std::size_t n = std::min(reference.size(), measured.size());
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) {
      ++r.pairs;
      const double a = reference[i] - reference[j], b = measured[i] - measured[j];
      if (a * b > 0) ++r.concordant;
      else if (a * b < 0) ++r.flips;
    }
  return r;
}

/// The toy bound (DESIGN: serial region time bounds throughput): with C
/// commands at once, each taking `cmd_ms` of which `critical_ms` must run
/// alone on the device, throughput relative to one-at-a-time is at most
/// min(C, cmd_ms / critical_ms).
inline double bound_speedup(int c, double cmd_ms, double critical_ms) {
  if (!(critical_ms > 0) || !(cmd_ms > 0)) return static_cast<double>(c);
  return std::min(static_cast<double>(c), cmd_ms / critical_ms);
}

}  // namespace krex_eval
