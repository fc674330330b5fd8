// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::measure: see krex/host/measure.hpp.
// The host part and, in a CUDA build, the CUDA part (tools/relayout.py).

#include <krex/detail/config.hpp>
#include <krex/host/measure.hpp>

#if defined(KREX_WITH_CUDA) && KREX_WITH_CUDA
#include <krex/cuda/measure.hpp>
#endif  // KREX_WITH_CUDA
