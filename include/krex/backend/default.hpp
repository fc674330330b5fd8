// SPDX-License-Identifier: Apache-2.0
#pragma once

// The build's default backend: CUDA when built with KREX_WITH_CUDA, HIP with
// KREX_WITH_HIP, otherwise host.

#include <krex/backend/host.hpp>

#if defined(KREX_DEFAULT_BACKEND_HOST) && KREX_DEFAULT_BACKEND_HOST
// Host-backend code in a GPU build (krex's own protocol tests, which fork
// after joining: a process that forks after initializing CUDA cannot use it).
namespace krex { using default_backend = backend::host; }
#elif defined(KREX_WITH_CUDA) && KREX_WITH_CUDA
#include <krex/backend/cuda.hpp>
namespace krex { using default_backend = backend::cuda; }
#elif defined(KREX_WITH_HIP) && KREX_WITH_HIP
#include <krex/backend/hip.hpp>
namespace krex { using default_backend = backend::hip; }
#else
namespace krex { using default_backend = backend::host; }
#endif  // KREX_DEFAULT_BACKEND_HOST / KREX_WITH_CUDA / KREX_WITH_HIP
