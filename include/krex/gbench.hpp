// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::gbench: see krex/adapters/gbench.hpp.
// The host part and, in a CUDA build, the CUDA part (tools/relayout.py).

#include <krex/adapters/gbench.hpp>
#if defined(KREX_WITH_CUDA) && KREX_WITH_CUDA
// krex::measure's CUDA part, as <krex/measure.hpp> brings it.
#include <krex/cuda/measure.hpp>
#endif  // KREX_WITH_CUDA
#if defined(KREX_WITH_CUDA) && KREX_WITH_CUDA && \
    !(defined(KREX_DEFAULT_BACKEND_HOST) && KREX_DEFAULT_BACKEND_HOST)
#include <krex/cuda/gbench.hpp>
#endif  // KREX_WITH_CUDA
