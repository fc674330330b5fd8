// SPDX-License-Identifier: Apache-2.0
// A Google Benchmark run's failure, across the library's versions: up to 1.7
// a failed run has error_occurred and error_message; from 1.8 on it is
// `skipped` (SkippedWithError) with skip_message. Tests read both through
// these two functions, so they build against the Debian package (1.7) and a
// newer one (the GPU machine's).
#pragma once

#include <string>

namespace krex_test {
namespace detail {
template <class R>
auto gbench_failed(const R& r, int) -> decltype(static_cast<bool>(r.error_occurred)) {
  return r.error_occurred;
}
template <class R>
bool gbench_failed(const R& r, long) {
  return static_cast<int>(r.skipped) != 0;
}
template <class R>
auto gbench_message(const R& r, int) -> decltype(std::string(r.error_message)) {
  return r.error_message;
}
template <class R>
std::string gbench_message(const R& r, long) {
  return r.skip_message;
}
}  // namespace detail

/// Whether the benchmark run failed (SkipWithError, or an error before 1.8).
template <class R>
bool gbench_failed(const R& r) {
  return detail::gbench_failed(r, 0);
}
/// The failed run's message ("" when it did not fail).
template <class R>
std::string gbench_message(const R& r) {
  return detail::gbench_message(r, 0);
}
}  // namespace krex_test
