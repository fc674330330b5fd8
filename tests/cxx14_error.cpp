// SPDX-License-Identifier: Apache-2.0
// Compiled with -std=c++14 by the ctest `cxx14_error` (tests/CMakeLists.txt),
// which passes only if the compiler says what krex/detail/config.hpp says:
// krex needs C++17. Not part of any target.
#include <krex/region.hpp>

int main() { return 0; }
