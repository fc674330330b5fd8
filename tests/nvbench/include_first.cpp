// SPDX-License-Identifier: Apache-2.0
// krex/nvbench.hpp first: NVBENCH_MAIN gets krex's parse hook (tenants join
// before any benchmark runs) and the header says nothing. ctest
// nvbench_include_first: plain host C++ (nvbench's headers compile without
// nvcc), no message, and the hook NVBENCH_MAIN expands is krex's.
#include <krex/nvbench.hpp>
#include <nvbench/nvbench.cuh>

#define KREX_TEST_STR2(...) #__VA_ARGS__
#define KREX_TEST_STR(...) KREX_TEST_STR2(__VA_ARGS__)

constexpr bool contains(const char* s, const char* w) {
  for (; *s != '\0'; ++s) {
    const char* a = s;
    const char* b = w;
    while (*b != '\0' && *a == *b) ++a, ++b;
    if (*b == '\0') return true;
  }
  return false;
}
static_assert(contains(KREX_TEST_STR(NVBENCH_MAIN_PARSE_CUSTOM_POST(parser)), "join_parsed"),
              "NVBENCH_MAIN's parse hook is not krex's");

int main() { return 0; }
