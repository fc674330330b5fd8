// SPDX-License-Identifier: Apache-2.0
#pragma once

// The one hash of krex: 64-bit FNV-1a, mapped off 0. Device keys (a GPU's
// UUID, or its PCI address) and the freeze domain (method and cgroup root)
// are stored in the segment with it, where 0 means "none".

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace krex::detail {

inline constexpr std::uint64_t fnv1a_offset_basis = 14695981039346656037ULL;
inline constexpr std::uint64_t fnv1a_prime = 1099511628211ULL;

/// 64-bit FNV-1a over `n` bytes at `p`; never 0 (a hash of 0 becomes 1).
inline std::uint64_t fnv1a(const void* p, std::size_t n) noexcept {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t h = fnv1a_offset_basis;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * fnv1a_prime;
  return h == 0 ? 1 : h;
}

/// 64-bit FNV-1a of the bytes of `s`; never 0.
inline std::uint64_t fnv1a(std::string_view s) noexcept { return fnv1a(s.data(), s.size()); }

}  // namespace krex::detail
