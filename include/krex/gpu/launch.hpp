// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::launch written once over a vendor API `V` (backend/gpu_api.hpp):
// passes the tenant's submission gate, then launches through the runtime's
// launch call with the arguments converted to the kernel's parameter types.
// cuda/launch.hpp and hip/launch.hpp instantiate it.

#include <krex/backend/gpu_api.hpp>
#include <krex/submit_guard.hpp>

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

namespace krex::detail::gpu {

template <class V, class Dim, class Tuple, std::size_t... I>
typename V::error_t launch_tuple(const void* kernel, Dim grid, Dim block, std::size_t smem,
                                 typename V::stream_t s, Tuple& args, std::index_sequence<I...>) {
  void* ptrs[sizeof...(I) + 1] = {static_cast<void*>(&std::get<I>(args))..., nullptr};
  return V::launch_kernel(kernel, grid, block, ptrs, smem, s);
}

/// krex::launch for the vendor `V`: `kernel<<<grid, block, smem, stream>>>(args...)`
/// inside a submit_guard of tenant `t`. Throws krex::error(step::backend) if
/// the launch fails.
template <class V, class Tenant, class Dim, class... P, class... A>
void launch(Tenant& t, void (*kernel)(P...), Dim grid, Dim block, std::size_t smem,
            typename V::stream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "krex::launch: wrong number of kernel arguments");
  std::tuple<std::decay_t<P>...> params{std::forward<A>(args)...};
  basic_submit_guard<Tenant> g{t};
  gpu_call<V>(launch_tuple<V>(reinterpret_cast<const void*>(kernel), grid, block, smem, stream,
                              params, std::index_sequence_for<P...>{}),
              "LaunchKernel");
}

}  // namespace krex::detail::gpu
