// SPDX-License-Identifier: Apache-2.0
// The version is said in three places that must agree: project(krex VERSION)
// in CMakeLists.txt (passed here as KREX_PROJECT_VERSION), the macros of
// <krex/version.hpp>, and the Python package (python/pyproject.toml and
// python/krex/__init__.py).

#include <krex/version.hpp>

#include <gtest/gtest.h>

#include "proc_util.hpp"

#include <regex>
#include <string>

#ifndef KREX_PROJECT_VERSION
#error \
    "tests/CMakeLists.txt passes KREX_PROJECT_VERSION (the CMake project version) to test_version"
#endif

namespace {

// The first `<key> = "<value>"` line of a TOML or Python file.
std::string assigned(const std::string& path, const std::string& key) {
  const std::string text = krex_test::file_text(path);
  std::smatch m;
  const std::regex re("(^|\\n)" + key + "\\s*=\\s*\"([^\"]*)\"");
  return std::regex_search(text, m, re) ? m[2].str() : "(no " + key + " in " + path + ")";
}

TEST(version, header_matches_the_cmake_project_version) {
  EXPECT_STREQ(KREX_VERSION_STRING, KREX_PROJECT_VERSION);
}

TEST(version, parts_string_and_number_agree) {
  const std::string parts = std::to_string(KREX_VERSION_MAJOR) + "." +
                            std::to_string(KREX_VERSION_MINOR) + "." +
                            std::to_string(KREX_VERSION_PATCH);
  EXPECT_EQ(parts, KREX_VERSION_STRING);
  EXPECT_EQ(KREX_VERSION,
            KREX_VERSION_MAJOR * 10000 + KREX_VERSION_MINOR * 100 + KREX_VERSION_PATCH);
  static_assert(KREX_VERSION_MINOR < 100 && KREX_VERSION_PATCH < 100,
                "KREX_VERSION packs minor and patch in two decimal digits each");
}

TEST(version, python_package_says_the_same) {
  const std::string py = std::string(KREX_SOURCE_DIR) + "/python/";
  EXPECT_EQ(assigned(py + "pyproject.toml", "version"), KREX_VERSION_STRING);
  EXPECT_EQ(assigned(py + "krex/__init__.py", "__version__"), KREX_VERSION_STRING);
}

}  // namespace
