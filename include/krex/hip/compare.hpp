// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::compare for HIP streams: the loop of gpu/compare.hpp over the HIP
// runtime, what <krex/cuda/compare.hpp> is for CUDA.

#include <krex/backend/hip_api.hpp>
#include <krex/gpu/compare.hpp>
#include <krex/hip/measure.hpp>

#include <hip/hip_runtime_api.h>

#include <vector>

namespace krex {

/// Times the candidates `cs` on `stream` in krex::compare's interleaved
/// order, inside the held region `held` (or krex::unprotected), and compares
/// each with the first. Synchronizes `stream`. Throws krex::error.
template <class R>
compare_result compare(R&& /*held*/, hipStream_t stream, const std::vector<candidate>& cs,
                       const compare_options& o = {}) {
  return detail::gpu::compare<detail::hip_api, R&&>(stream, cs, o);
}

}  // namespace krex
