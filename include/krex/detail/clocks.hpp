// SPDX-License-Identifier: Apache-2.0
#pragma once

// What a backend reads of its device: the clock state as the region report
// and krex::measure carry it (NVML, detail/device/nvml.hpp; the test seam that
// replaces the reading), and one probe of the quiet step (krex/detail/steps/quiet.hpp).

#include <cstdint>
#include <string>

namespace krex {

/// One reading of a GPU's clock state (NVML). `valid` is false where NVML is
/// absent or the device is not an NVIDIA GPU (the host backend).
struct device_clocks {
  bool valid = false;
  unsigned sm_mhz = 0;
  unsigned mem_mhz = 0;
  unsigned power_mw = 0;
  unsigned temp_c = 0;
  /// NVML clocks-event reasons (nvmlClocksEventReason*): 0x4 software power
  /// cap, 0x8 hardware slowdown, 0x20 software thermal, 0x40 hardware
  /// thermal, 0x80 power brake are slowdowns (see slowdown()); 0x1 idle,
  /// 0x2 application clocks, 0x10 sync boost, 0x100 display clock are not.
  unsigned long long reasons = 0;

  /// The reasons that slow a kernel down (power or thermal), 0 if none.
  unsigned long long slowdown() const noexcept { return reasons & slowdown_mask; }
  static constexpr unsigned long long slowdown_mask = 0x4ULL | 0x8ULL | 0x20ULL | 0x40ULL | 0x80ULL;
};

/// Names the slowdown reasons in `mask`, e.g. "power cap, thermal (sw)".
inline std::string slowdown_names(unsigned long long mask) {
  static const struct {
    unsigned long long bit;
    const char* name;
  } names[] = {{0x4, "power cap"},      {0x8, "hardware slowdown"}, {0x20, "thermal (sw)"},
               {0x40, "thermal (hw)"},  {0x80, "power brake"}};
  std::string s;
  for (const auto& n : names)
    if ((mask & n.bit) != 0) s += (s.empty() ? "" : ", ") + std::string(n.name);
  return s;
}

namespace detail {

/// What a backend's quiet probe returns: its duration, or why it could not run.
struct quiet_sample {
  bool ok = false;
  std::uint64_t ns = 0;
  std::string why_not;  ///< when !ok: "no CUDA context in this process yet", ...
};

/// Test seam: when set, replaces NVML for every clock reading of device
/// `ordinal` (CUDA ordinal, or the host backend's virtual device). Tests
/// inject slowdown reasons through it; never set in production.
inline device_clocks (*clocks_hook)(int ordinal) noexcept = nullptr;

}  // namespace detail
}  // namespace krex
