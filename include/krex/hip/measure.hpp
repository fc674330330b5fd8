// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::measure for HIP streams: the loop of gpu/measure.hpp over
// the HIP runtime (hipEvents around each sample, cold L2 from
// hipDeviceAttributeL2CacheSize, optional HIP-graph timing), and
// krex::prepare_measure. What <krex/cuda/measure.hpp> is for CUDA, less
// NVML's throttle reasons and the quiet probe (docs/HIP.md).

#include <krex/backend/hip.hpp>
#include <krex/backend/hip_api.hpp>
#include <krex/gpu/measure.hpp>
#include <krex/host/measure.hpp>

#include <hip/hip_runtime_api.h>

namespace krex {

/// Allocates krex::measure's device scratch for the current device (its L2
/// flush buffer and events for `o`) now, outside any region, so that the
/// region's measure allocates nothing. Optional: without it the first
/// measure of the process allocates (inside its region) and later ones
/// reuse. Throws krex::error(step::backend).
inline void prepare_measure(const measure_options& o = {}) {
  detail::gpu::prepare_scratch<detail::hip_api>(o);
}

/// Times `fn` (which enqueues work on `stream`) inside the held region `held`
/// (a `basic_region<B>&`), or outside any region with `krex::unprotected` (a
/// baseline); anything else does not compile. Warm-up, then o.samples
/// samples, each between two hipEvents on `stream`; with o.cold_l2 the L2
/// is flushed (a memset of twice its size) before each sample, outside its
/// events; with o.graph_batch = n each sample is one launch of a HIP graph
/// of n calls, divided by n. `fn` may take the sample index (rotate inputs).
/// Synchronizes `stream`. The flush buffer and the events come from a
/// per-process cache (see prepare_measure). Throws krex::error(step::backend).
template <class R, class F>
measure_result measure(R&& /*held*/, hipStream_t stream, F&& fn, const measure_options& o = {}) {
  return detail::gpu::measure<detail::hip_api, R&&>(stream, fn, o);
}

namespace hip {
/// K placements of a set of device buffers (gpu/measure.hpp).
using placement_buffers = detail::gpu::placement_buffers<detail::hip_api>;
}  // namespace hip

}  // namespace krex
