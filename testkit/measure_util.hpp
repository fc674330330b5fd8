// SPDX-License-Identifier: Apache-2.0
#pragma once

// Options of the measurement loop for the tests of krex::measure.

#include <krex/measure.hpp>

namespace krex_test {

/// measure_options with `warmup` warm-up calls and `samples` samples, the
/// rest as default.
inline krex::measure_options loop_options(int warmup, int samples) {
  krex::measure_options o;
  o.warmup = warmup;
  o.samples = samples;
  return o;
}

}  // namespace krex_test
