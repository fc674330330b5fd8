// SPDX-License-Identifier: Apache-2.0
// An nvbench benchmark whose measurements run inside krex regions: the one
// change from plain nvbench is krex::nvbench::exec(state, ...) in place of
// state.exec(...). Its table gains the columns "krex" (the protection) and
// "krex Wait" (how long the region took to begin); --json adds the rest.
//
//   build/examples/nvbench/krex_nvbench_copy                 # krex on
//   KREX_NVBENCH_REGIONS=0 build/examples/nvbench/krex_nvbench_copy   # the control

#include <krex/nvbench.hpp>

#include <nvbench/nvbench.cuh>

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace {

__global__ void copy_kernel(const float* in, float* out, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) out[i] = in[i];
}

/// A device buffer of n floats, zeroed.
struct device_floats {
  float* p = nullptr;
  explicit device_floats(std::size_t n) {
    if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess || cudaMemset(p, 0, n * sizeof(float)) != cudaSuccess)
      throw std::runtime_error("cudaMalloc/cudaMemset of " + std::to_string(n) + " floats failed");
  }
  ~device_floats() { cudaFree(p); }
  device_floats(const device_floats&) = delete;
  device_floats& operator=(const device_floats&) = delete;
};

}  // namespace

void copy(nvbench::state& state) {
  const auto n = static_cast<std::size_t>(state.get_int64("Elements"));
  device_floats in(n), out(n);  // inputs: made beside the other processes
  state.add_element_count(n);
  state.add_global_memory_reads<float>(n);
  state.add_global_memory_writes<float>(n);
  krex::nvbench::exec(state, [&](nvbench::launch& launch) {  // was: state.exec(...)
    copy_kernel<<<1024, 256, 0, launch.get_stream()>>>(in.p, out.p, n);
  });
}
NVBENCH_BENCH(copy).add_int64_power_of_two_axis("Elements", {20, 24, 27});

NVBENCH_MAIN
