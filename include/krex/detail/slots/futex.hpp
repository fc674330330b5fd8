// SPDX-License-Identifier: Apache-2.0
#pragma once

// Bounded waits on 32-bit words in shared memory (non-private futexes).

#include <krex/detail/proc.hpp>
#include <krex/detail/sys.hpp>

#include <atomic>
#include <climits>
#include <cstdint>

namespace krex::detail {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t),
              "futex words must be plain 32-bit atomics");

/// Sleeps while `word == expected`, at most until `deadline_ns` (now_ns clock)
/// and at most `slice_ns`. Returns on wake, value change, timeout or signal;
/// callers re-check their condition.
inline void futex_wait(const std::atomic<std::uint32_t>& word, std::uint32_t expected,
                       std::uint64_t deadline_ns, std::uint64_t slice_ns) noexcept {
  const std::uint64_t now = now_ns();
  if (now >= deadline_ns) return;
  std::uint64_t rel = deadline_ns - now;
  if (rel > slice_ns) rel = slice_ns;
  timespec ts{static_cast<time_t>(rel / 1'000'000'000ULL),
              static_cast<long>(rel % 1'000'000'000ULL)};
  (void)sys().futex_wait(&word, expected, &ts);
}

inline void futex_wake_all(const std::atomic<std::uint32_t>& word) noexcept {
  (void)sys().futex_wake(&word, INT_MAX);
}

}  // namespace krex::detail
