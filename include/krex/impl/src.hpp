// SPDX-License-Identifier: Apache-2.0
#pragma once

// The compiled part of krex under KREX_SEPARATE_COMPILATION: include this in
// exactly one translation unit of the program (the CMake target
// krex::compiled does it for you), and define KREX_SEPARATE_COMPILATION for
// every translation unit that includes a krex header. Without it, krex is
// header-only and this file is not needed.

#include <krex/detail/config.hpp>

#if !defined(KREX_SEPARATE_COMPILATION)
#error "<krex/impl/src.hpp> is for KREX_SEPARATE_COMPILATION builds: define it for the whole program (or link krex::compiled), or do not include this file (krex is header-only by default)"
#endif  // !defined(KREX_SEPARATE_COMPILATION)

#include <krex/impl/region_core.hpp>
#include <krex/impl/tenant_core.hpp>
