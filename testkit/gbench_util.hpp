// SPDX-License-Identifier: Apache-2.0
#pragma once

// The Google Benchmark tests' scaffold (test_gbench*.cpp, test_gbench_cuda.cu):
// a reporter that keeps every row, one segment for the whole program that
// the gbench tenant joins once, and a run of some of the benchmarks.

#include <krex/gbench.hpp>

#include <gtest/gtest.h>

#include "gbench_run.hpp"
#include "krex_test.hpp"

#include <optional>
#include <string>
#include <vector>

namespace krex_test {

/// A reporter that keeps every run's row.
struct capture : benchmark::BenchmarkReporter {
  std::vector<Run> runs;
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>& r) override {
    runs.insert(runs.end(), r.begin(), r.end());
  }
  /// The first row of benchmark function `function`; nullptr if none.
  const Run* find(const std::string& function) const {
    for (const Run& r : runs)
      if (r.run_name.function_name == function) return &r;
    return nullptr;
  }
};

/// One segment for the whole program, krex::gbench configured on it on the
/// first call, strict mode off (the misuse tests make error rows on purpose).
inline scoped_segment& gbench_segment() {
  static scoped_segment seg;
  static const bool configured = [] {
    krex::gbench::configure(seg.opts());
    krex::gbench::strict(false);
    return true;
  }();
  (void)configured;
  return seg;
}

/// Runs the benchmarks whose names match `filter` (a regex, as
/// --benchmark_filter) on gbench_segment(), capturing their rows.
inline capture run_only(const std::string& filter) {
  gbench_segment();
  capture rep;
  benchmark::RunSpecifiedBenchmarks(&rep, filter);
  return rep;
}

/// The row of benchmark `function` in `rep` if it ran without error; else
/// nullptr, with a test failure saying why.
inline const benchmark::BenchmarkReporter::Run* ok_row(const capture& rep,
                                                       const std::string& function) {
  const auto* r = rep.find(function);
  if (r == nullptr)
    ADD_FAILURE() << "no row of " << function;
  else if (gbench_failed(*r))
    ADD_FAILURE() << function << ": " << gbench_message(*r);
  return r != nullptr && !gbench_failed(*r) ? r : nullptr;
}

/// Runs the one benchmark `function` (its name as the filter): its row if it
/// ran without error, else nullopt, with a test failure saying why.
inline std::optional<benchmark::BenchmarkReporter::Run> run_one(const std::string& function) {
  const capture rep = run_only(function);
  const auto* r = ok_row(rep, function);
  if (r == nullptr) return std::nullopt;
  return *r;
}

}  // namespace krex_test
