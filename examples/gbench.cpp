// SPDX-License-Identifier: Apache-2.0
// Google Benchmark under krex: every benchmark run holds a region (its
// warm-up and measured loop), so several copies of this program can share a
// node and still time their kernels as if alone. Each iteration is timed by
// krex and reported as manual time; the label says the protection reached.
//
//   build/examples/krex_gbench                           # alone
//   for i in 1 2 3 4; do build/examples/krex_gbench & done; wait   # four at once
//
// The "kernel" is CPU work (the host backend): a chain of dependent integer
// operations whose time a noisy neighbour on the same core would inflate.

#include <krex/gbench.hpp>

#include <cstdint>

#include "cpu_kernel.hpp"

namespace {

std::uint64_t g_sink = 0;

void xorshift_chain(std::uint64_t iters) {
  const std::uint64_t x = krex_example::xorshift_chain(iters);
  g_sink += x;
  benchmark::DoNotOptimize(x);
}

void bm_xorshift(benchmark::State& st) {
  const auto iters = static_cast<std::uint64_t>(st.range(0));
  // Input generation, compilation, checks: outside run(), still inside the
  // run's region (Setup entered it). Keep them cheap or do them once, before
  // the benchmarks, so the region stays short.
  krex::gbench::run(st, [&] { xorshift_chain(iters); });
}

}  // namespace

KREX_BENCHMARK(bm_xorshift)->Arg(1 << 16)->Arg(1 << 20);

BENCHMARK_MAIN();
