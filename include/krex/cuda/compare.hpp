// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::compare for CUDA streams: the loop of gpu/compare.hpp over the CUDA
// runtime (device events around each sample, interleaved candidates, cold L2).

#include <krex/backend/cuda_api.hpp>
#include <krex/cuda/measure.hpp>
#include <krex/gpu/compare.hpp>

#include <cuda_runtime_api.h>

#include <vector>

namespace krex {

/// Times the candidates `cs` (each enqueues its work on `stream`) inside the
/// held region `held`, or outside any region with krex::unprotected, in the
/// interleaved order of krex::compare (compare.hpp), and compares each with
/// the first. Synchronizes `stream`. Throws krex::error (step::options for a
/// user error, step::backend for a CUDA failure).
template <class R>
compare_result compare(R&& /*held*/, cudaStream_t stream, const std::vector<candidate>& cs,
                       const compare_options& o = {}) {
  return detail::gpu::compare<detail::cuda_api, R&&>(stream, cs, o);
}

}  // namespace krex
