// SPDX-License-Identifier: Apache-2.0
#pragma once

// The build's default backend: CUDA when built with KREX_WITH_CUDA, HIP with
// KREX_WITH_HIP, otherwise host.

#include <krex/backend/host.hpp>

#if defined(KREX_WITH_CUDA) && KREX_WITH_CUDA
#include <krex/backend/cuda.hpp>
namespace krex { using default_backend = backend::cuda; }
#elif defined(KREX_WITH_HIP) && KREX_WITH_HIP
#include <krex/backend/hip.hpp>
namespace krex { using default_backend = backend::hip; }
#else
namespace krex { using default_backend = backend::host; }
#endif  // KREX_WITH_CUDA / KREX_WITH_HIP
