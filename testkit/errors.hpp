// SPDX-License-Identifier: Apache-2.0
#pragma once

// What a call that must refuse its options says, and the table of command
// lines a program must refuse:
//
//   EXPECT_NE(krex_test::options_error([&] { krex::measure(...); }).find("raise samples"),
//             std::string::npos);
//   const krex_test::usage_case cases[] = {{"--reps 0", "an integer 1..100"}, ...};

#include <krex/error.hpp>

#include <gtest/gtest.h>

#include <functional>
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

/// A command line a program must refuse (exit 64, EX_USAGE), and what its
/// message must say.
struct usage_case {
  std::string args;  ///< the arguments
  std::string says;  ///< a part of the message
};

}  // namespace krex_test
