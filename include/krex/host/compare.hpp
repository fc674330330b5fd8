// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::compare: two or more candidates timed in ONE region, sample by
// sample in an interleaved order, each over the same placements, so that
// drift (clocks, temperature, a neighbour's memory traffic) and placement are
// common to all of them; then each candidate against the first: the median of
// the paired ratios, a confidence interval, and a verdict (faster, slower,
// same, unsure). Use it to decide between close candidates (docs/COMPARE.md).
//
//     krex::region r{t};
//     krex::candidate a{"old", [&](krex::placement p) { old_kernel<<<g, b, 0, s>>>(x[p.index]); }};
//     krex::candidate b{"new", [&](krex::placement p) { new_kernel<<<g, b, 0, s>>>(x[p.index]); }};
//     krex::compare_result c = krex::compare(r, s, {a, b}, o);
//     if (c.vs_first[1].verdict == krex::verdict::faster) ...
//
// Order: round j times every candidate once (its sample j). Rounds come in
// double rounds, the second the first reversed: two candidates go ABBA
// BAAB (A B B A, B A A B, ...); three or more in a shuffled order (from a fixed
// seed) and its reverse (C A B B A C, ...). Both samples of a candidate in
// double round d run on placement d % K. Pairs: in each double round, a
// candidate's sample at an even position (counting every sample in time) is
// paired with the first's at an even position, odd with odd: the pair is on
// the same placement, at most 2m - 1 samples apart, and a period-2 effect of
// the loop (issue 19: batched samples of a 55 us kernel alternate between
// two levels ~2-3% apart with the count of L2 flushes) falls on both members
// alike instead of splitting every pair.
//
// The statistics (compare_samples) are a separate function over sample
// vectors; the loops live here (host: steady_clock) and in cuda/compare.hpp
// (device events; included below in KREX_WITH_CUDA builds). Not included by
// <krex/region.hpp>.

#include <krex/error.hpp>
#include <krex/host/measure.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace krex {

/// A candidate against the first (compare_result::vs_first).
enum class verdict {
  baseline,  ///< the first candidate itself
  faster,    ///< the interval lies wholly below 1 and not within 1 +- tolerance
  slower,    ///< the interval lies wholly above 1 and not within 1 +- tolerance
  same,      ///< the interval lies wholly within 1 +- tolerance
  unsure,    ///< none of these: more samples, or a wider tolerance, may decide it
};

inline const char* to_string(verdict v) noexcept {
  switch (v) {
    case verdict::baseline: return "baseline";
    case verdict::faster: return "faster";
    case verdict::slower: return "slower";
    case verdict::same: return "same";
    case verdict::unsure: return "unsure";
  }
  return "unknown";
}

/// One candidate of krex::compare: a body (taking a krex::placement, the
/// sample index as an int, or nothing, as krex::measure's) and a name.
class candidate {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, candidate> &&
                                              !std::is_convertible_v<F, std::string>>>
  candidate(F&& fn)  // NOLINT(google-explicit-constructor): {fa, fb} lists of bodies
      : candidate(std::string{}, std::forward<F>(fn)) {}

  template <class F>
  candidate(std::string name, F&& fn) : m_name(std::move(name)) {
    using D = std::decay_t<F>;
    static_assert(std::is_invocable_v<D&, placement> || std::is_invocable_v<D&, int> ||
                      std::is_invocable_v<D&>,
                  "a krex::candidate body takes a krex::placement, an int (the sample index) "
                  "or nothing");
    m_takes_placement = detail::takes_placement<D>;
    m_fn = [f = D(std::forward<F>(fn))](placement p) mutable {
      if constexpr (std::is_invocable_v<D&, int>)
        f(p.sample);
      else if constexpr (std::is_invocable_v<D&, placement>)
        f(p);
      else
        f();
    };
  }

  void operator()(placement p) const { m_fn(p); }
  const std::string& name() const noexcept { return m_name; }
  /// The body takes a krex::placement (required with placements > 1).
  bool takes_placement() const noexcept { return m_takes_placement; }

 private:
  std::string m_name;
  std::function<void(placement)> m_fn;
  bool m_takes_placement = false;
};

/// The samples per candidate krex::compare takes by default, and the
/// confidence of its intervals: with them two ~50 us candidates 1% apart
/// are put in order and identical ones are called faster or slower at most
/// 1% of the time (docs/COMPARE.md, "How many samples").
inline constexpr int compare_default_samples = 200;
inline constexpr double compare_default_confidence = 0.99;

namespace detail {
inline measure_options compare_measure_defaults() {
  measure_options o;
  o.samples = compare_default_samples;
  return o;
}
}  // namespace detail

/// How krex::compare runs and judges.
struct compare_options {
  /// The loop of each candidate, as krex::measure's: warmup, samples (per
  /// candidate: the number of pairs; compare_default_samples unless set),
  /// placements, cold_l2, flush_bytes, graph_batch, sync_each.
  /// retake_throttled is refused (a retaken sample would leave its pair);
  /// throttled samples are marked in each candidate's
  /// measure_result::throttled.
  measure_options measure = detail::compare_measure_defaults();
  /// The "same" band: ratios within 1 +- tolerance count as no difference
  /// (0.005: +-0.5%): an interval wholly inside it is "same". Outside it,
  /// "faster"/"slower" need the whole interval on one side of 1.
  double tolerance = 0.005;
  /// The confidence of all the intervals together (Bonferroni over the
  /// candidates after the first: with m candidates each interval has
  /// 1 - (1 - confidence) / (m - 1)).
  double confidence = compare_default_confidence;
  /// Seed of the per-round shuffle with three or more candidates.
  std::uint64_t seed = 1;
};

/// One candidate against the first: ratio = candidate / first.
struct comparison {
  int pairs = 0;     ///< the pairs (samples per candidate)
  double ratio = 1;  ///< median of the paired ratios (below 1: the candidate is faster)
  double low = 1;    ///< the interval of the median ratio (see compare_samples)
  double high = 1;
  double coverage = 1;  ///< the interval's exact coverage (>= the confidence asked)
  double diff_ms = 0;   ///< median of the paired differences, candidate - first
  krex::verdict verdict = verdict::baseline;
};

/// What krex::compare measured and concluded.
struct compare_result {
  std::vector<std::string> names;          ///< each candidate's name (may be empty)
  std::vector<measure_result> candidates;  ///< each candidate's samples and statistics
  std::vector<comparison> vs_first;        ///< each against the first ([0]: baseline)
  std::vector<int> order;                  ///< the candidate of each sample, in time order
  std::string method;                      ///< as measure_result::method
};

namespace detail {

/// splitmix64: a small generator whose sequence is the same everywhere (the
/// standard library's distributions are not), so a seed names one order.
struct split_mix {
  std::uint64_t state;
  std::uint64_t next() noexcept {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31U);
  }
  /// Uniform in [0, n), n >= 1 (rejection: no modulo bias).
  std::uint64_t below(std::uint64_t n) noexcept {
    const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % n);
    std::uint64_t x = next();
    while (x >= limit) x = next();
    return x % n;
  }
};

/// The time order of krex::compare's samples: `rounds` rounds, each with
/// every one of `m` candidates once, in double rounds whose second round is
/// the first reversed, so each candidate takes one even and one odd position
/// per double round and a linear drift cancels over it. m = 2: ABBA BAAB
/// ABBA ... (the candidate that opens a double round, and so comes first on
/// its placement, alternates: with A always first, two identical candidates
/// measured 0.15% apart on an H200); m > 2: the first round of each double
/// round shuffled from `seed`. Returns the candidate of each sample in time
/// order.
inline std::vector<int> compare_order(int m, int rounds, std::uint64_t seed) {
  std::vector<int> order;
  order.reserve(static_cast<std::size_t>(m) * static_cast<std::size_t>(rounds));
  split_mix rng{seed};
  std::vector<int> round(static_cast<std::size_t>(m));
  for (int j = 0; j < rounds; j += 2) {
    for (int c = 0; c < m; ++c) round[static_cast<std::size_t>(c)] = c;
    if (m == 2 && (j / 2) % 2 == 1) std::swap(round[0], round[1]);
    if (m > 2)
      for (std::size_t i = round.size(); i > 1; --i)  // Fisher-Yates
        std::swap(round[i - 1], round[rng.below(i)]);
    order.insert(order.end(), round.begin(), round.end());
    if (j + 1 < rounds) order.insert(order.end(), round.rbegin(), round.rend());
  }
  return order;
}

/// The placement of a candidate's sample j in krex::compare (of k): both
/// samples of a double round on the same one.
inline int compare_placement(int j, int k) { return (j / 2) % (k < 1 ? 1 : k); }

/// The warm-up calls of each candidate in krex::compare: o.warmup, and
/// every placement (two calls each, as the samples use them) unless
/// o.warm_placements is off.
inline int compare_warmup_calls(const measure_options& o) {
  return o.placements > 1 && o.warm_placements ? std::max(o.warmup, 2 * o.placements) : o.warmup;
}

/// The pairs of krex::compare for the samples taken in time order `order`
/// (m candidates, each once per round): for each candidate c (index 0
/// empty), the pairs (c's sample, the first's sample). Per double round
/// (2m consecutive samples) in which every candidate has one sample at an
/// even and one at an odd position: even with even, odd with odd; samples
/// of any other block (a last single round, an order not from
/// compare_order) are paired in their order within the block.
inline std::vector<std::vector<std::pair<int, int>>> compare_pairs(const std::vector<int>& order,
                                                                   int m) {
  const auto um = static_cast<std::size_t>(m);
  std::vector<std::vector<std::pair<int, int>>> out(um);
  std::vector<int> count(um, 0);
  const std::size_t block = 2 * um;
  for (std::size_t b0 = 0; b0 < order.size(); b0 += block) {
    const std::size_t b1 = std::min(order.size(), b0 + block);
    // Each candidate's samples in this block: (sample index, position parity).
    std::vector<std::vector<std::pair<int, int>>> mine(um);
    for (std::size_t s = b0; s < b1; ++s) {
      const auto c = static_cast<std::size_t>(order[s]);
      mine[c].emplace_back(count[c]++, static_cast<int>(s % 2));
    }
    bool by_parity = true;
    for (const auto& v : mine) by_parity = by_parity && v.size() == 2 && v[0].second != v[1].second;
    for (std::size_t c = 1; c < um; ++c) {
      const std::size_t n = std::min(mine[c].size(), mine[0].size());
      for (std::size_t i = 0; i < n; ++i) {
        std::size_t f = i;  // the first's sample paired with c's i-th in this block
        if (by_parity) f = mine[0][0].second == mine[c][i].second ? 0 : 1;
        out[c].emplace_back(mine[c][i].first, mine[0][f].first);
      }
    }
  }
  return out;
}

/// The distribution-free interval of a median from order statistics (the
/// sign-test interval): of n sorted values, [x_(k), x_(n+1-k)] covers the
/// median with probability 1 - 2 P(Bin(n, 1/2) <= k - 1). Returns the
/// largest k >= 1 whose coverage is at least 1 - alpha, and that coverage;
/// k = 0 when n is too small for any.
inline std::pair<int, double> median_interval_rank(int n, double alpha) {
  int k = 0;
  double coverage = 0;
  double cdf = 0;  // P(B <= i)
  const double log_half_n = static_cast<double>(n) * std::log(0.5);
  for (int i = 0; 2 * (i + 1) <= n; ++i) {
    cdf += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) +
                    log_half_n);
    if (2 * cdf > alpha) break;
    k = i + 1;
    coverage = 1 - 2 * cdf;
  }
  return {k, coverage};
}

/// The fewest pairs with which median_interval_rank finds an interval.
inline int min_pairs(double alpha) {
  int n = 1;
  while (median_interval_rank(n, alpha).first == 0 && n < 100000) ++n;
  return n;
}

inline void check_judging(double tolerance, double confidence) {
  if (!(tolerance >= 0 && tolerance < 1))
    throw error(step::options,
                "compare: tolerance = " + std::to_string(tolerance) + " is not in [0, 1)", 0,
                "give the same band as a fraction: 0.005 for +-0.5%");
  if (!(confidence > 0 && confidence < 1))
    throw error(step::options,
                "compare: confidence = " + std::to_string(confidence) + " is not in (0, 1)", 0,
                "give it as a fraction: 0.99");
}

inline double alpha_each(double confidence, std::size_t candidates) {
  return (1 - confidence) / static_cast<double>(candidates > 1 ? candidates - 1 : 1);
}

/// The pairs a compare of `candidates` at `confidence` needs, or a
/// krex::error that says how many.
inline void check_pairs(int pairs, std::size_t candidates, double confidence) {
  const double a = alpha_each(confidence, candidates);
  if (median_interval_rank(pairs, a).first == 0)
    throw error(step::options,
                "compare: " + std::to_string(pairs) + " samples per candidate are too few for a " +
                    std::to_string(confidence) + " interval with " + std::to_string(candidates) +
                    " candidates (needs at least " + std::to_string(min_pairs(a)) + ")",
                0, "raise samples (30 or more per candidate decide 1% differences best)");
}

}  // namespace detail

/// The verdict of an interval [low, high] of a ratio, with the "same" band
/// 1 +- tolerance: same if the interval lies within the band (any
/// difference is smaller than the tolerance); else faster (slower) if it
/// lies wholly below (above) 1 (the direction is established, and the
/// difference may exceed the tolerance); else unsure.
inline verdict decide(double low, double high, double tolerance) {
  if (low >= 1 - tolerance && high <= 1 + tolerance) return verdict::same;
  if (high < 1) return verdict::faster;
  if (low > 1) return verdict::slower;
  return verdict::unsure;
}

namespace detail {

/// Checks a candidate's samples (positive, finite times).
inline void check_times(const std::vector<double>& v, std::size_t c) {
  for (std::size_t j = 0; j < v.size(); ++j)
    if (!(v[j] > 0) || !std::isfinite(v[j]))
      throw error(step::options,
                  "compare: sample " + std::to_string(j) + " of candidate " + std::to_string(c) +
                      " is " + std::to_string(v[j]) + " ms, not a positive time",
                  0, "check that the body does work (an empty body times as 0)");
}

/// One candidate against the first over pairs (other[j], first[j]), the
/// interval at 1 - alpha.
inline comparison compare_pair(const std::vector<double>& first, const std::vector<double>& other,
                               double tolerance, double alpha) {
  const std::size_t n = first.size();
  const auto [k, coverage] = median_interval_rank(static_cast<int>(n), alpha);
  std::vector<double> ratio(n), diff(n);
  for (std::size_t j = 0; j < n; ++j) {
    ratio[j] = other[j] / first[j];
    diff[j] = other[j] - first[j];
  }
  std::sort(ratio.begin(), ratio.end());
  std::sort(diff.begin(), diff.end());
  comparison r;
  r.pairs = static_cast<int>(n);
  r.ratio = quantile_sorted(ratio, 0.5);
  r.low = ratio[static_cast<std::size_t>(k - 1)];
  r.high = ratio[n - static_cast<std::size_t>(k)];
  r.coverage = coverage;
  r.diff_ms = quantile_sorted(diff, 0.5);
  r.verdict = decide(r.low, r.high, tolerance);
  return r;
}

/// Candidates, equal counts, positive times, enough pairs.
inline void check_samples(const std::vector<std::vector<double>>& samples, double confidence) {
  if (samples.size() < 2)
    throw error(step::options,
                "compare: " + std::to_string(samples.size()) + " candidate(s), needs at least 2", 0,
                "give the first (the reference) and at least one to compare with it");
  const std::size_t n = samples[0].size();
  for (std::size_t c = 0; c < samples.size(); ++c) {
    if (samples[c].size() != n)
      throw error(step::options,
                  "compare: candidate " + std::to_string(c) + " has " +
                      std::to_string(samples[c].size()) + " samples, the first " +
                      std::to_string(n) + ": samples are paired by index",
                  0, "give every candidate the same number of samples");
    check_times(samples[c], c);
  }
  check_pairs(static_cast<int>(n), samples.size(), confidence);
}

}  // namespace detail

/// The statistics of krex::compare, over sample vectors: samples[c][j] is
/// sample j of candidate c (ms, > 0), paired with samples[0][j]. For each
/// candidate: the median of the ratios samples[c][j] / samples[0][j], its
/// interval, and the verdict (decide). [0] is the first against itself.
///
/// The interval is the sign-test (order-statistic) interval of the median
/// ratio, not a bootstrap: its coverage is exact for any continuous
/// distribution of the ratios (no symmetry needed, unlike a Wilcoxon /
/// Hodges-Lehmann interval, and GPU timings are skewed), a few outliers (a
/// preempted launch) move it by a rank at most, and it needs no random
/// numbers (the same samples always give the same verdict). Its assumption:
/// the pairs are independent, which interleaving makes closer to true (a
/// drift common to both candidates divides out of each ratio). It is
/// conservative: coverage reports the exact level reached. With m
/// candidates, each interval is at 1 - (1 - confidence) / (m - 1)
/// (Bonferroni), so the verdicts hold together at `confidence`.
inline std::vector<comparison> compare_samples(const std::vector<std::vector<double>>& samples,
                                               double tolerance = 0.005,
                                               double confidence = compare_default_confidence) {
  detail::check_judging(tolerance, confidence);
  detail::check_samples(samples, confidence);
  const double alpha = detail::alpha_each(confidence, samples.size());
  std::vector<comparison> out(samples.size());
  out[0].pairs = static_cast<int>(samples[0].size());
  for (std::size_t c = 1; c < samples.size(); ++c)
    out[c] = detail::compare_pair(samples[0], samples[c], tolerance, alpha);
  return out;
}

/// compare_samples with compare_options' tolerance and confidence.
inline std::vector<comparison> compare_samples(const std::vector<std::vector<double>>& samples,
                                               const compare_options& o) {
  return compare_samples(samples, o.tolerance, o.confidence);
}

/// The statistics of a krex::compare run as it pairs them: times[c][j] is
/// sample j of candidate c, taken in the time order `order` (the candidate
/// of each sample; compare_order's), paired as detail::compare_pairs says
/// (same parity within a double round), then judged as compare_samples.
inline std::vector<comparison> compare_schedule(const std::vector<std::vector<double>>& times,
                                                const std::vector<int>& order,
                                                double tolerance = 0.005,
                                                double confidence = compare_default_confidence) {
  detail::check_judging(tolerance, confidence);
  detail::check_samples(times, confidence);
  const std::size_t m = times.size();
  if (order.size() != m * times[0].size())
    throw error(step::options,
                "compare: the order has " + std::to_string(order.size()) + " samples, the times " +
                    std::to_string(m * times[0].size()),
                0, "give the order the samples were taken in (compare_result::order)");
  for (int c : order)
    if (c < 0 || static_cast<std::size_t>(c) >= m)
      throw error(step::options, "compare: the order names candidate " + std::to_string(c), 0,
                  "give the order the samples were taken in (compare_result::order)");
  const auto pairs = detail::compare_pairs(order, static_cast<int>(m));
  const double alpha = detail::alpha_each(confidence, m);
  std::vector<comparison> out(m);
  out[0].pairs = static_cast<int>(times[0].size());
  for (std::size_t c = 1; c < m; ++c) {
    std::vector<double> first, other;
    for (const auto& [jc, j0] : pairs[c]) {
      other.push_back(times[c].at(static_cast<std::size_t>(jc)));
      first.push_back(times[0].at(static_cast<std::size_t>(j0)));
    }
    if (first.size() != times[0].size())
      throw error(step::options, "compare: the order does not time every candidate once a round", 0,
                  "give the order the samples were taken in (compare_result::order)");
    out[c] = detail::compare_pair(first, other, tolerance, alpha);
  }
  return out;
}

namespace detail {

/// Every user error of krex::compare, before anything runs.
inline void check_compare(const std::vector<candidate>& cs, const compare_options& o) {
  if (cs.size() < 2)
    throw error(step::options,
                "compare: " + std::to_string(cs.size()) + " candidate(s), needs at least 2", 0,
                "give the first (the reference) and at least one to compare with it; to time "
                "one body, use krex::measure");
  check_measure_options(o.measure);
  check_judging(o.tolerance, o.confidence);
  if (o.measure.retake_throttled)
    throw error(step::options,
                "compare: measure.retake_throttled is not supported (a retaken sample would "
                "leave its pair)",
                0, "leave it off; throttled samples are marked in each candidate's result");
  for (std::size_t c = 0; c < cs.size(); ++c)
    if (o.measure.placements > 1 && !cs[c].takes_placement())
      throw error(step::options,
                  "compare: placements = " + std::to_string(o.measure.placements) +
                      " but candidate " + std::to_string(c) +
                      (cs[c].name().empty() ? "" : " (" + cs[c].name() + ")") +
                      " does not take a krex::placement",
                  0,
                  "write its body as [&](krex::placement p) { ... inputs[p.index] ... }, or "
                  "leave placements at 1");
  if (2 * o.measure.placements > o.measure.samples && o.measure.placements > 1)
    throw error(step::options,
                "compare: placements = " + std::to_string(o.measure.placements) +
                    " need at least " + std::to_string(2 * o.measure.placements) +
                    " samples per candidate (two per " +
                    "placement: both samples of a double round share one), not " +
                    std::to_string(o.measure.samples),
                0, "raise samples to a multiple of 2 x placements, or lower placements");
  check_pairs(o.measure.samples, cs.size(), o.confidence);
}

/// The result of a compare from its samples (times[c][j]) and marks.
inline compare_result assemble_compare(const std::vector<candidate>& cs, const compare_options& o,
                                       std::vector<std::vector<double>> times,
                                       const std::vector<std::vector<int>>& throttled,
                                       std::vector<int> order, const std::string& method,
                                       const throttle_reader& t) {
  compare_result out;
  out.method = method;
  out.order = std::move(order);
  for (std::size_t c = 0; c < cs.size(); ++c) {
    out.names.push_back(cs[c].name());
    measure_result r;
    r.method = method;
    r.samples_ms = times[c];
    r.throttled = throttled[c];
    r.throttle_reasons = t.seen;
    r.clocks_checked = t.checked;
    summarize(r);
    summarize_placements(r, o.measure.placements, o.measure.placement_bytes, 2);
    out.candidates.push_back(std::move(r));
  }
  out.vs_first = compare_schedule(times, out.order, o.tolerance, o.confidence);
  return out;
}

/// The host loop of krex::compare: steady_clock around each call.
inline compare_result compare_host(const std::vector<candidate>& cs, const compare_options& o) {
  check_compare(cs, o);
  const auto m = cs.size();
  const int n = o.measure.samples;
  const int k = o.measure.placements;
  using clock = std::chrono::steady_clock;
  const auto w0 = clock::now();
  for (int i = 0; i < compare_warmup_calls(o.measure) || clock::now() - w0 < o.measure.warmup_time;
       ++i)
    for (const candidate& c : cs) c(placement{compare_placement(i, k), i});
  std::vector<int> order = compare_order(static_cast<int>(m), n, o.seed);
  std::vector<std::vector<double>> times(m, std::vector<double>(static_cast<std::size_t>(n)));
  std::vector<std::vector<int>> throttled(m);
  throttle_reader t = hook_reader(-1);
  for (std::size_t s = 0; s < order.size(); ++s) {
    const auto c = static_cast<std::size_t>(order[s]);
    const int j = static_cast<int>(s / m);
    const unsigned long long before = t.now();
    const auto t0 = clock::now();
    cs[c](placement{compare_placement(j, k), j});
    times[c][static_cast<std::size_t>(j)] =
        std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    if ((before | t.now()) != 0) throttled[c].push_back(j);
  }
  return assemble_compare(cs, o, std::move(times), throttled, std::move(order), "host", t);
}

}  // namespace detail

/// Host timing of the candidates `cs` inside the held region `held`: each
/// sample is the steady_clock time of one call, in the interleaved order of
/// compare_order. Throws krex::error(step::options) for fewer than 2
/// candidates, too few samples for the interval, bad tolerance/confidence,
/// or placements > 1 with a body that does not take a krex::placement.
template <class B>
compare_result compare(basic_region<B>& /*held*/, const std::vector<candidate>& cs,
                       const compare_options& o = {}) {
  return detail::compare_host(cs, o);
}

/// Host timing outside any region (krex::unprotected): the same loop.
inline compare_result compare(const unprotected_t& /*nothing held*/,
                              const std::vector<candidate>& cs, const compare_options& o = {}) {
  return detail::compare_host(cs, o);
}

/// Anything else as the first argument is a compile error, as for measure.
template <class NotARegion>
compare_result compare(NotARegion& /*not a region*/, const std::vector<candidate>& /*cs*/,
                       const compare_options& = {}) {
  static_assert(detail::measure_region_arg<NotARegion>, KREX_DETAIL_MEASURE_NEEDS_REGION);
  return {};
}

}  // namespace krex
