// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::compare: see krex/host/compare.hpp.
// The host part and, in a CUDA build, the CUDA part (tools/relayout.py).

#include <krex/detail/config.hpp>
#include <krex/host/compare.hpp>

#if defined(KREX_WITH_CUDA) && KREX_WITH_CUDA
#include <krex/cuda/compare.hpp>
#endif  // KREX_WITH_CUDA
