// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <krex/detail/config.hpp>

// Kept by hand, equal to project(krex VERSION ...) in CMakeLists.txt and to
// python/pyproject.toml: tests/test_version.cpp checks all three. A release is
// the git tag v<KREX_VERSION_STRING> on the commit that sets them.

/// krex's major version: the installed CMake package is compatible within one.
#define KREX_VERSION_MAJOR 0
/// krex's minor version.
#define KREX_VERSION_MINOR 1
/// krex's patch version.
#define KREX_VERSION_PATCH 0
/// "MAJOR.MINOR.PATCH".
#define KREX_VERSION_STRING "0.1.0"
/// MAJOR * 10000 + MINOR * 100 + PATCH, for `#if KREX_VERSION >= 200` (0.2.0).
#define KREX_VERSION (KREX_VERSION_MAJOR * 10000 + KREX_VERSION_MINOR * 100 + KREX_VERSION_PATCH)
