// SPDX-License-Identifier: Apache-2.0
#pragma once

// A flag in shared memory, in place of an atomic int and a sleep loop:
//
//   struct board { krex_test::flag go; ... };   shared<board> b;
//   child c = spawn([&] { b->go.child_wait(); ...; return 0; });  // in the child
//   b->go.raise();                                 // in the test
//   ASSERT_TRUE(b->ready.wait(20s));               // a bounded wait

#include "proc_util.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>

namespace krex_test {

/// How long a child waits for a flag (a holder to be released) before it
/// gives up: longer than any test holds a region, shorter than a test's ctest
/// timeout (300 s).
inline constexpr std::chrono::seconds hold_at_most{240};
/// Exit code of a child whose flag was not raised within hold_at_most.
inline constexpr int exit_unreleased = 112;

/// A flag one process raises and others wait for. It lives in shared memory:
/// a member of a shared<board>, or a shared<flag> of its own.
struct flag {
  std::atomic<int> value;

  void raise(int v = 1) noexcept { value.store(v); }
  void lower() noexcept { value.store(0); }
  bool up() const noexcept { return value.load() != 0; }
  /// Waits (1 ms polls) at most `timeout` for the flag; true once it is up.
  bool wait(std::chrono::milliseconds timeout) const {
    return wait_until([this] { return up(); }, timeout);
  }
  /// In a forked child only: waits for the flag at most hold_at_most, and
  /// leaves the child (_exit(exit_unreleased)) if it is not raised by then.
  void child_wait() const {
    if (!wait(hold_at_most)) {
      std::fflush(nullptr);
      ::_exit(exit_unreleased);
    }
  }
};
static_assert(std::atomic<int>::is_always_lock_free);

}  // namespace krex_test
