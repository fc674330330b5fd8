// SPDX-License-Identifier: Apache-2.0
// krex/nvbench.hpp after nvbench's main.cuh: NVBENCH_MAIN keeps nvbench's own
// parse hook, so the header says (at compile time) that the tenants will join
// late and what to do. ctest nvbench_include_late checks the message; plain
// host C++ (nvbench's headers compile without nvcc).
#include <nvbench/nvbench.cuh>
#include <krex/nvbench.hpp>

int main() { return 0; }
