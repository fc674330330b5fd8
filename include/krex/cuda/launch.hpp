// SPDX-License-Identifier: Apache-2.0
#pragma once

// Explicit gating for CUDA launches, host-compilable (no <<<>>>):
//
//     krex::launch(t, my_kernel, grid, block, smem, stream, a, b, n);
//
// passes the gate (parks while a sibling holds a region), then launches with
// cudaLaunchKernel (gpu/launch.hpp over the CUDA runtime). Arguments
// are converted to the kernel's parameter types. For anything else (copies,
// library calls) use krex::submit_guard or t.submit(fn).

#include <krex/backend/cuda.hpp>
#include <krex/backend/cuda_api.hpp>
#include <krex/gpu/launch.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

namespace krex {

/// Launches `kernel<<<grid, block, smem, stream>>>(args...)` inside a
/// submit_guard of tenant `t`. Throws krex::error(step::backend) if the launch fails.
template <class Tenant, class... P, class... A>
void launch(Tenant& t, void (*kernel)(P...), dim3 grid, dim3 block, std::size_t smem,
            cudaStream_t stream, A&&... args) {
  detail::gpu::launch<detail::cuda_api>(t, kernel, grid, block, smem, stream,
                                        std::forward<A>(args)...);
}

}  // namespace krex
