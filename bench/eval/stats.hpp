// SPDX-License-Identifier: Apache-2.0
#pragma once

// Statistics of the evaluation (bench/eval): quantiles, inflation by
// duration band (per command and per sample), pairwise flip rate and Kendall
// tau against a reference order and against the construction order, the
// issue-11 targets as pass/fail, throughput while every slot is busy, the
// repetition of a persistent configuration's list, and the toy throughput
// bound. Plain C++; tested in bench/eval/tests/test_eval.cpp.

#include <krex/measure.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <string>
#include <utility>
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

/// A set of inflations (percent): how many, their median, p95 and p99, and
/// the fraction more than 1% slow. The same for the per-command view (each
/// command's median sample) and the sample-level view (every timed sample).
struct tail_stats {
  std::size_t n = 0;
  double p50 = NAN, p95 = NAN, p99 = NAN;
  double over_1pct = NAN;  ///< fraction of the n with inflation > 1%
};

inline tail_stats tails(std::vector<double> v) {
  tail_stats t;
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return !std::isfinite(x); }), v.end());
  t.n = v.size();
  if (v.empty()) return t;
  std::sort(v.begin(), v.end());
  t.p50 = krex::detail::quantile_sorted(v, 0.5);
  t.p95 = krex::detail::quantile_sorted(v, 0.95);
  t.p99 = krex::detail::quantile_sorted(v, 0.99);
  t.over_1pct = static_cast<double>(std::count_if(v.begin(), v.end(), [](double x) { return x > 1.0; })) /
                static_cast<double>(v.size());
  return t;
}

/// Appends every sample's inflation against `reference_ms` (the reference
/// median of the same kernel and timing) to `out`.
inline void append_inflations(const std::vector<double>& samples_ms, double reference_ms,
                              std::vector<double>* out) {
  if (!(reference_ms > 0)) return;
  for (const double s : samples_ms)
    if (std::isfinite(s)) out->push_back(inflation_pct(s, reference_ms));
}

/// Issue 11's p95 inflation targets (percent) for the nested bands, at the
/// sample level and for command medians; NaN if none.
inline double issue11_p95_target(const std::string& band_name) {
  if (band_name == ">0.1ms") return 2.5;
  if (band_name == ">1ms") return 1.0;
  if (band_name == ">10ms") return 0.2;
  return NAN;
}

/// The outcome of a target: met, missed, or not measurable (no data).
enum class verdict { pass, fail, na };
inline const char* to_string(verdict v) {
  return v == verdict::pass ? "PASS" : v == verdict::fail ? "FAIL" : "n/a";
}
inline verdict at_most(double value, double limit) {
  if (!std::isfinite(value) || !std::isfinite(limit)) return verdict::na;
  return value <= limit ? verdict::pass : verdict::fail;
}
inline verdict at_least(double value, double limit) {
  if (!std::isfinite(value) || !std::isfinite(limit)) return verdict::na;
  return value >= limit ? verdict::pass : verdict::fail;
}

/// One target checked against the data.
struct target_check {
  std::string what;  ///< e.g. "krex >= lock-only"
  double value = NAN, limit = NAN;
  verdict outcome = verdict::na;
};

/// Issue 11's throughput targets for a krex-family configuration, shape for
/// shape: at least lock-only's throughput (at the same C and shape), at least
/// 4x serial, and in the persistent shape at least 1.15x lock-only.
/// Throughputs in commands/min; NaN where a configuration is missing.
inline std::vector<target_check> throughput_targets(double krex_cpm, double lock_cpm, double serial_cpm,
                                                    bool persistent) {
  std::vector<target_check> v;
  const double vs_lock = krex_cpm / lock_cpm, vs_serial = krex_cpm / serial_cpm;
  v.push_back({">= lock-only", vs_lock, 1.0, at_least(vs_lock, 1.0)});
  v.push_back({">= 4x serial", vs_serial, 4.0, at_least(vs_serial, 4.0)});
  if (persistent) v.push_back({">= 1.15x lock-only", vs_lock, 1.15, at_least(vs_lock, 1.15)});
  return v;
}

/// Throughput while every slot is busy, commands/min: the commands that
/// ended after the first end and by the last start, over that window (after
/// the last start no new command begins and the slots drain; before the
/// first end they ramp up). NaN with fewer than 2 such commands.
/// `start_end_ms`: each command's (start, end) on one clock.
inline double busy_cpm(const std::vector<std::pair<double, double>>& start_end_ms) {
  if (start_end_ms.empty()) return NAN;
  double first_end = INFINITY, last_start = -INFINITY;
  for (const auto& se : start_end_ms) {
    first_end = std::min(first_end, se.second);
    last_start = std::max(last_start, se.first);
  }
  if (!(last_start > first_end)) return NAN;
  std::size_t n = 0;
  for (const auto& se : start_end_ms)
    if (se.second > first_end && se.second <= last_start) ++n;
  if (n < 2) return NAN;
  return static_cast<double>(n) / (last_start - first_end) * 60000.0;
}

/// How many copies of a list of `n` commands give each of `c` workers at
/// least `min_per_worker` commands on average (at least 1 copy).
inline std::size_t copies_for_workers(std::size_t n, int c, int min_per_worker) {
  if (n == 0 || min_per_worker <= 0 || c <= 0) return 1;
  const std::size_t want = static_cast<std::size_t>(min_per_worker) * static_cast<std::size_t>(c);
  return std::max<std::size_t>(1, (want + n - 1) / n);
}

/// `order` repeated for a persistent configuration of `c` workers (see
/// copies_for_workers); each copy after the first is reshuffled with `rng`,
/// so no worker sees the same sequence twice.
template <class Rng>
std::vector<std::string> repeat_for_workers(const std::vector<std::string>& order, int c, int min_per_worker,
                                            Rng& rng) {
  const std::size_t copies = copies_for_workers(order.size(), c, min_per_worker);
  std::vector<std::string> out = order;
  for (std::size_t k = 1; k < copies; ++k) {
    std::vector<std::string> copy = order;
    std::shuffle(copy.begin(), copy.end(), rng);
    out.insert(out.end(), copy.begin(), copy.end());
  }
  return out;
}

/// One member of a rank-set trial: its reference median, the median this
/// configuration measured, and its position by construction (more work later).
struct rank_member {
  double reference_ms = NAN, measured_ms = NAN;
  int construction_pos = 0;
};

/// The KREX study's gap classes: a pair's members are 0-1%, 1-2%, 2-5% or
/// more than 5% apart by the reference (|a - b| / min(a, b)).
inline constexpr std::size_t gap_classes = 4;
inline const char* gap_class_name(std::size_t k) {
  static const char* const names[gap_classes] = {"0-1%", "1-2%", "2-5%", ">5%"};
  return k < gap_classes ? names[k] : "?";
}
inline std::size_t gap_class(double a_ms, double b_ms) {
  const double gap = std::fabs(a_ms - b_ms) / std::min(a_ms, b_ms) * 100.0;
  return gap < 1 ? 0 : gap < 2 ? 1 : gap < 5 ? 2 : 3;
}

/// Flips against the order of `truth`, counted per gap class of the pair in
/// `classes` (the reference's times): against the reference pass
/// (truth = classes) or against the construction order (truth = positions).
inline std::array<rank_agreement, gap_classes> compare_by_gap(const std::vector<double>& classes,
                                                              const std::vector<double>& truth,
                                                              const std::vector<double>& measured) {
  std::array<rank_agreement, gap_classes> g{};
  const std::size_t n = std::min({classes.size(), truth.size(), measured.size()});
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = i + 1; j < n; ++j) {
      if (!(classes[i] > 0) || !(classes[j] > 0)) continue;
      rank_agreement& r = g[gap_class(classes[i], classes[j])];
      ++r.pairs;
      const double a = truth[i] - truth[j], b = measured[i] - measured[j];
      if (a * b > 0) ++r.concordant;
      else if (a * b < 0) ++r.flips;
    }
  return g;
}

/// Flips against `reference` counted per gap class of the reference pair.
inline std::array<rank_agreement, gap_classes> compare_by_gap(const std::vector<double>& reference,
                                                              const std::vector<double>& measured) {
  return compare_by_gap(reference, reference, measured);
}

/// The low quantile the evaluation ranks by beside the median (docs/EVAL.md,
/// "Which statistic ranks"): a command's time is then the 10th percentile of
/// its samples, and the reference's the median of its commands' 10th
/// percentiles. Short bandwidth-bound kernels' samples sit on two levels
/// whose shares change with the buffers' placement; the median jumps
/// between the levels, a low quantile stays on the fast one.
inline constexpr int rank_low_pct = 10;
inline constexpr double rank_low_q = rank_low_pct / 100.0;

/// Rank agreement summed over set trials: flips against the reference
/// pass's order and against the construction order, and Kendall tau against
/// the reference averaged over trials.
struct rank_totals {
  rank_agreement vs_reference, vs_construction;
  std::array<rank_agreement, gap_classes> by_gap{};  ///< vs_reference, by the pair's gap class
  /// vs_construction, by the pair's gap class (the reference's): errors against the known order
  std::array<rank_agreement, gap_classes> by_gap_construction{};
  std::size_t trials = 0;
  double tau_sum = 0;
  double tau_mean() const { return trials == 0 ? NAN : tau_sum / static_cast<double>(trials); }

  /// Adds one trial (a set's members measured in one repetition); trials of
  /// fewer than 2 members count for nothing.
  void add_trial(const std::vector<rank_member>& m) {
    if (m.size() < 2) return;
    std::vector<double> ref, got, pos;
    for (const auto& x : m) {
      ref.push_back(x.reference_ms);
      got.push_back(x.measured_ms);
      pos.push_back(static_cast<double>(x.construction_pos));
    }
    const rank_agreement a = compare_order(ref, got);
    vs_reference += a;
    vs_construction += compare_order(pos, got);
    const auto g = compare_by_gap(ref, got);
    const auto gc = compare_by_gap(ref, pos, got);
    for (std::size_t k = 0; k < gap_classes; ++k) {
      by_gap[k] += g[k];
      by_gap_construction[k] += gc[k];
    }
    if (a.pairs > 0) {
      tau_sum += a.tau();
      ++trials;
    }
  }
};

/// A configuration's flips in one gap class beside the fresh-process
/// reference's (the native repeat: every command in a fresh process, one at
/// a time), against the same truth (the construction order, or the
/// reference pass's order): by how many percentage points its flip rate is
/// above the reference's (NaN when either has no pair in the class).
struct beside_fresh {
  rank_agreement config, fresh;
  double delta_pts() const { return (config.flip_rate() - fresh.flip_rate()) * 100.0; }
};

inline std::array<beside_fresh, gap_classes> against_fresh(const std::array<rank_agreement, gap_classes>& config,
                                                           const std::array<rank_agreement, gap_classes>& fresh) {
  std::array<beside_fresh, gap_classes> out{};
  for (std::size_t k = 0; k < gap_classes; ++k) out[k] = {config[k], fresh[k]};
  return out;
}

/// Whether the configuration's flip rate is at most `points` above the
/// fresh-process reference's in every gap class where both have pairs (the
/// issue's targets: 1 point against construction, 3 against the
/// reference); n/a when no class has pairs in both.
inline verdict within_points(const std::array<beside_fresh, gap_classes>& g, double points) {
  bool any = false;
  for (const beside_fresh& b : g) {
    if (b.config.pairs == 0 || b.fresh.pairs == 0) continue;
    any = true;
    if (b.delta_pts() > points + 1e-9) return verdict::fail;
  }
  return any ? verdict::pass : verdict::na;
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
