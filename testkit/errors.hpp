// SPDX-License-Identifier: Apache-2.0
#pragma once

// What a call that must refuse its options says, the error a call must
// throw, and the table of command lines a program must refuse:
//
//   EXPECT_NE(krex_test::options_error([&] { krex::measure(...); }).find("raise samples"),
//             std::string::npos);
//   const krex_test::usage_case cases[] = {{"--reps 0", "an integer 1..100"}, ...};

#include <krex/error.hpp>

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <string>

namespace krex_test {

/// The message of the krex::error that `f` throws, which must come from the
/// options step; a test failure (and "") if it throws none.
inline std::string options_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), krex::step::options);
    return e.what();
  }
  ADD_FAILURE() << "no krex::error";
  return {};
}

/// The krex::error that `f` throws; nullopt, and a test failure saying
/// `otherwise`, if it throws none:
///
///   const auto e = krex_test::error_of([&] { krex::tenant t{o}; }, "joined");
///   ASSERT_TRUE(e);
///   EXPECT_EQ(e->where(), krex::step::segment);
inline std::optional<krex::error> error_of(const std::function<void()>& f,
                                           const std::string& otherwise = "no krex::error") {
  try {
    f();
  } catch (const krex::error& e) {
    return e;
  }
  ADD_FAILURE() << otherwise;
  return std::nullopt;
}

/// A command line a program must refuse (exit 64, EX_USAGE), and what its
/// message must say.
struct usage_case {
  std::string args;  ///< the arguments
  std::string says;  ///< a part of the message
};

}  // namespace krex_test
