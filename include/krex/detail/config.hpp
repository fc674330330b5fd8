// SPDX-License-Identifier: Apache-2.0
// What every public krex header needs of the compiler, checked before anything
// else so that the first error a C++14 build sees says what to do.
#pragma once

// MSVC keeps __cplusplus at 199711L unless /Zc:__cplusplus; _MSVC_LANG is the real one.
#if defined(_MSVC_LANG)
#define KREX_DETAIL_CPLUSPLUS _MSVC_LANG
#else
#define KREX_DETAIL_CPLUSPLUS __cplusplus
#endif  // defined(_MSVC_LANG)

#if KREX_DETAIL_CPLUSPLUS < 201703L
#error "krex needs C++17 or later: compile with -std=c++17 (MSVC: /std:c++17), or link the CMake target krex::krex, which asks for C++17"
#endif  // KREX_DETAIL_CPLUSPLUS < 201703L

// The header tests (cmake/krexHeaderTesting.cmake) check that every public
// header defines this, i.e. that it cannot be used without the check above.
#define KREX_DETAIL_CONFIG_INCLUDED 1

// How the join and the region (krex/impl/) are compiled: header-only by
// default, their functions `inline` in every translation unit that uses them;
// with KREX_SEPARATE_COMPILATION defined for the whole program (the CMake
// target krex::compiled does it), declared here and compiled once, in the
// translation unit that includes <krex/impl/src.hpp> (docs/ARCHITECTURE.md,
// "Separate compilation").
#if defined(KREX_SEPARATE_COMPILATION)
#define KREX_DECL
#else
#define KREX_DECL inline
#endif  // defined(KREX_SEPARATE_COMPILATION)

// Out of line (cold: for size) error paths and message writers (compile-time.md).
#if defined(__GNUC__)
#define KREX_DETAIL_COLD __attribute__((cold, noinline))
#define KREX_DETAIL_NOINLINE __attribute__((noinline))
#else
#define KREX_DETAIL_COLD
#define KREX_DETAIL_NOINLINE
#endif
