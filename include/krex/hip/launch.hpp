// SPDX-License-Identifier: Apache-2.0
#pragma once

// Explicit gating for HIP launches, host-compilable (no <<<>>>):
//
//     krex::launch(t, my_kernel, grid, block, smem, stream, a, b, n);
//
// passes the gate (parks while a sibling holds a region), then launches with
// hipLaunchKernel. Arguments are converted to the kernel's parameter types.
// For anything else (copies, library calls) use krex::submit_guard or t.submit(fn).
// The HIP twin of <krex/cuda/launch.hpp>.

#include <krex/backend/hip.hpp>
#include <krex/submit_guard.hpp>

#include <hip/hip_runtime_api.h>

#include <cstddef>
#include <tuple>
#include <utility>

namespace krex {
namespace detail {
template <class Tuple, std::size_t... I>
hipError_t hip_launch_tuple(const void* kernel, dim3 grid, dim3 block, std::size_t smem,
                            hipStream_t s, Tuple& args, std::index_sequence<I...>) {
  void* ptrs[sizeof...(I) + 1] = {static_cast<void*>(&std::get<I>(args))..., nullptr};
  return hipLaunchKernel(kernel, grid, block, ptrs, smem, s);
}
}  // namespace detail

/// Launches `kernel<<<grid, block, smem, stream>>>(args...)` inside a
/// submit_guard of tenant `t`. Throws krex::error(step::backend) if the launch fails.
template <class Tenant, class... P, class... A>
void launch(Tenant& t, void (*kernel)(P...), dim3 grid, dim3 block, std::size_t smem,
            hipStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "krex::launch: wrong number of kernel arguments");
  std::tuple<std::decay_t<P>...> params{std::forward<A>(args)...};
  basic_submit_guard<Tenant> g{t};
  detail::hip_check(detail::hip_launch_tuple(reinterpret_cast<const void*>(kernel), grid, block,
                                             smem, stream, params, std::index_sequence_for<P...>{}),
                    "hipLaunchKernel");
}

}  // namespace krex
