// SPDX-License-Identifier: Apache-2.0
#pragma once

// The host-backend examples' "kernel" (demo.cpp, gbench.cpp): a chain of
// dependent integer operations (xorshift), a fixed amount of CPU work whose
// time a noisy neighbour on the same core would inflate.

#include <cstdint>

namespace krex_example {

/// `iters` xorshift steps; the caller must use the result (so that the work
/// is not optimized away).
inline std::uint64_t xorshift_chain(std::uint64_t iters) {
  std::uint64_t x = 88172645463325252ULL;
  for (std::uint64_t i = 0; i < iters; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
  }
  return x;
}

}  // namespace krex_example
