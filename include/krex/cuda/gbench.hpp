// SPDX-License-Identifier: Apache-2.0
#pragma once

// krex::gbench::run for CUDA streams: each iteration between two events on
// the stream, the L2 flushed before it (outside the events), as krex::measure
// does. Included by krex/gbench.hpp in CUDA builds.

#include <krex/cuda/measure.hpp>
#include <krex/adapters/gbench.hpp>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <mutex>

namespace krex::gbench {
namespace detail {

/// Per process: the flush buffer and two events, made once and kept, so that
/// no run pays for allocating them inside its region after the first.
struct cuda_timing {
  krex::detail::device_buffer flush;
  krex::detail::event_set events{2};
  explicit cuda_timing(std::size_t bytes) : flush(bytes) {}
};

inline cuda_timing& timing(bool cold_l2) {
  static std::unique_ptr<cuda_timing> t;
  if (!t) t = std::make_unique<cuda_timing>(krex::detail::flush_size(0));
  (void)cold_l2;
  return *t;
}

}  // namespace detail

/// Times every iteration of `st` with device events on `stream`: `fn`
/// enqueues the work; with o.cold_l2 (default) the L2 is overwritten before
/// each iteration, outside its events. Synchronizes `stream` once per
/// iteration. With o.placements = K > 1, `fn` takes a krex::placement:
/// iteration i runs on placement i % K, each placement runs once untimed
/// (with its flush) before the loop, and the run gets the placement counters
/// (krex/gbench.hpp). Skips with an error if the run holds no region, or for
/// a bad o.placements; a CUDA error skips with its message.
template <class F>
void run(benchmark::State& st, cudaStream_t stream, F&& fn, const run_options& o) {
  if (!detail::placements_ok<F>(st, o)) return;
  const region_report* r = detail::held_or_skip(st);
  if (r == nullptr) return;
  const int k = o.placements;
  detail::iterations_log log(st);
  try {
    detail::cuda_timing& t = detail::timing(o.cold_l2);
    using krex::detail::cuda_check;
    const auto flush = [&](int i) {
      if (o.cold_l2)
        cuda_check(cudaMemsetAsync(t.flush.get(), i & 0xff, t.flush.size(), stream),
                   "cudaMemsetAsync (L2 flush)");
    };
    if (k > 1) {  // every placement once before it is timed, as krex::measure's warm-up
      for (int p = 0; p < k; ++p) {
        flush(p);
        krex::detail::call_sample(fn, p, k);
      }
      cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (placements warm-up)");
    }
    int i = 0;
    for (auto _ : st) {
      flush(i);
      cuda_check(cudaEventRecord(t.events[0], stream), "cudaEventRecord");
      krex::detail::call_sample(fn, i++, k);
      cuda_check(cudaEventRecord(t.events[1], stream), "cudaEventRecord");
      cuda_check(cudaEventSynchronize(t.events[1]), "cudaEventSynchronize");
      float ms = 0;
      cuda_check(cudaEventElapsedTime(&ms, t.events[0], t.events[1]), "cudaEventElapsedTime");
      st.SetIterationTime(static_cast<double>(ms) / 1e3);
      log.add(static_cast<double>(ms) / 1e3);
    }
  } catch (const std::exception& e) {
    detail::fail_run(st, e.what());
    return;
  }
  const std::string label = detail::describe(st, detail::finish_run(st));
  log.finish(st, o, o.cold_l2 ? "cuda-events+cold-l2" : "cuda-events", label);
}

/// run() on `stream` with one placement; `cold_l2` as run_options::cold_l2.
template <class F>
void run(benchmark::State& st, cudaStream_t stream, F&& fn, bool cold_l2 = true) {
  run_options o;
  o.cold_l2 = cold_l2;
  run(st, stream, std::forward<F>(fn), o);
}

}  // namespace krex::gbench
