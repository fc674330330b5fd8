// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::measure for CUDA streams: the loop of gpu/measure.hpp over
// the CUDA runtime (device events around each sample, cold L2, optional
// CUDA-graph timing, throttle marking through NVML), and
// krex::prepare_measure, which also makes the quiet step's probe.

#include <krex/backend/cuda.hpp>
#include <krex/backend/cuda_api.hpp>
#include <krex/backend/gpu_quiet.hpp>
#include <krex/gpu/measure.hpp>
#include <krex/host/measure.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>

namespace krex {
namespace detail {
// The CUDA instances, by the names CUDA code (gbench, bench/eval) uses.
using device_buffer = gpu::device_buffer<cuda_api>;
using event_set = gpu::event_set<cuda_api>;
inline std::size_t flush_size(std::size_t requested) {
  return gpu::flush_size<cuda_api>(requested);
}
}  // namespace detail

/// Allocates krex::measure's device scratch for the current device (its L2
/// flush buffer and events for `o`) and the quiet step's probe buffers, and
/// loads NVML, now, outside any region, so that neither the region's entry
/// nor its measure allocates or loads anything. Optional: without it the first
/// measure of the process allocates (inside its region) and later ones reuse.
/// Throws krex::error(step::backend).
inline void prepare_measure(const measure_options& o = {}) {
  detail::gpu::prepare_scratch<detail::cuda_api>(o);
  int dev = 0;
  detail::cuda_check(cudaGetDevice(&dev), "cudaGetDevice");
  detail::gpu::quiet_probe<detail::cuda_api>::get().prepare(dev);  // the region's quiet probe, too
  // NVML, which the region reads at entry (foreign processes, clocks).
  backend::cuda::preload_nvml();
}

/// Times `fn` (which enqueues work on `stream`) inside the held region `held`
/// (a `basic_region<B>&`), or outside any region with `krex::unprotected` (a
/// baseline); anything else does not compile. Warm-up, then o.samples
/// samples, each between two events on `stream`; with o.cold_l2 the L2 is
/// flushed (a memset of twice its size) before each sample, outside its
/// events; with o.graph_batch = n each sample is one launch of a graph of n
/// calls, divided by n. `fn` may take the sample index (rotate inputs).
/// Synchronizes `stream`. The flush buffer and the events come from a
/// per-process cache (see prepare_measure), so only the first measure of a
/// context allocates. Throws krex::error(step::backend).
template <class R, class F>
measure_result measure(R&& /*held*/, cudaStream_t stream, F&& fn, const measure_options& o = {}) {
  return detail::gpu::measure<detail::cuda_api, R&&>(stream, fn, o);
}

namespace cuda {
/// K placements of a set of device buffers (gpu/measure.hpp).
using placement_buffers = detail::gpu::placement_buffers<detail::cuda_api>;
}  // namespace cuda

}  // namespace krex
