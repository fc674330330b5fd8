// SPDX-License-Identifier: Apache-2.0
#pragma once

// Explicit gating for CUDA launches, host-compilable (no <<<>>>):
//
//     krex::launch(t, my_kernel, grid, block, smem, stream, a, b, n);
//
// passes the gate (parks while a sibling holds a region), then launches with
// cudaLaunchKernel. Arguments are converted to the kernel's parameter types.
// For anything else (copies, library calls) use krex::submit_guard or t.submit(fn).

#include <krex/backend/cuda.hpp>
#include <krex/submit_guard.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <tuple>
#include <utility>

namespace krex {
namespace detail {
template <class Tuple, std::size_t... I>
cudaError_t launch_tuple(const void* kernel, dim3 grid, dim3 block, std::size_t smem,
                         cudaStream_t s, Tuple& args, std::index_sequence<I...>) {
  void* ptrs[sizeof...(I) + 1] = {static_cast<void*>(&std::get<I>(args))..., nullptr};
  return cudaLaunchKernel(kernel, grid, block, ptrs, smem, s);
}
}  // namespace detail

/// Launches `kernel<<<grid, block, smem, stream>>>(args...)` inside a
/// submit_guard of tenant `t`. Throws krex::error(step::backend) if the launch fails.
template <class Tenant, class... P, class... A>
void launch(Tenant& t, void (*kernel)(P...), dim3 grid, dim3 block, std::size_t smem,
            cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "krex::launch: wrong number of kernel arguments");
  std::tuple<std::decay_t<P>...> params{std::forward<A>(args)...};
  basic_submit_guard<Tenant> g{t};
  detail::cuda_check(detail::launch_tuple(reinterpret_cast<const void*>(kernel), grid, block, smem,
                                          stream, params, std::index_sequence_for<P...>{}),
                     "cudaLaunchKernel");
}

}  // namespace krex
