// SPDX-License-Identifier: Apache-2.0
#pragma once

// The scaffold of the tests that need a region held in another process, and
// the flag that processes wait on:
//
//   krex_test::holder h{seg.opts()};   // forks: join, enter a region, hold it
//   ASSERT_TRUE(h.ready(20s));         // it is inside its region
//   ...                                // what a held region does to the others
//   EXPECT_EQ(h.finish(30s), 0);       // released: its exit code
//
//   // what the holder checks once released, in its region (its exit code):
//   krex_test::holder h{o, [](krex::region& r) { r.exit(); return r.report().drained ? 0 : 3; }};
//
//   shared<board> b;  b->go.raise();  ...  ASSERT_TRUE(b->go.wait(20s));  // flag
//
// Every wait is bounded: the parent's by its argument, the holder's for its
// release by hold_at_most (then it leaves with exit_unreleased); a holder
// still running when its handle goes out of scope is SIGKILLed and reaped.

#include <krex/region.hpp>

#include "proc_util.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>

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

/// What a holder does once released, by default: nothing (its region is left
/// by the region's destructor as the child returns), exit code 0.
struct keep_region {
  template <class R>
  int operator()(R& /*region*/) const {
    return 0;
  }
};

/// An `after` for a holder whose lease a test takes away (a forced recovery,
/// an expiry): 0 if leaving the region throws at the release step with
/// lease_lost reported, 3 if it throws otherwise, 2 if it does not throw.
struct lease_lost_on_exit {
  template <class R>
  int operator()(R& r) const {
    try {
      r.exit();
    } catch (const krex::error& e) {
      return e.where() == krex::step::release && r.report().lease_lost ? 0 : 3;
    }
    return 2;
  }
};

/// A child process that joins with `o`, enters a region, raises ready() and
/// holds the region until release(); then `after(region)` runs in the child,
/// and what it returns is the child's exit code (a thrown exception: exit_threw).
template <class Backend = krex::default_backend>
class basic_holder {
 public:
  using tenant_type = krex::basic_tenant<Backend>;
  using region_type = krex::basic_region<Backend>;

  template <class After = keep_region>
  explicit basic_holder(const krex::options& o, After after = {}) {
    m_b->slot.store(-1);
    m_child = spawn([&] {
      tenant_type t{o};
      m_b->slot.store(static_cast<int>(t.slot()));
      m_b->joined.raise();
      region_type r{t};
      m_b->ready.raise();
      if (!m_b->release.wait(hold_at_most)) return exit_unreleased;
      const int code = after(r);
      std::snprintf(m_b->report, sizeof m_b->report, "%s", krex::to_json(r.report()).c_str());
      return code;
    });
  }

  /// The holder has joined (its slot is known), within `timeout`.
  bool joined(std::chrono::milliseconds timeout) const { return m_b->joined.wait(timeout); }
  /// The holder is inside its region, within `timeout`.
  bool ready(std::chrono::milliseconds timeout) const { return m_b->ready.wait(timeout); }
  /// Lets the holder go on: `after`, then it leaves.
  void release() { m_b->release.raise(); }
  /// release(), then its exit code within `timeout` (-1: killed, or timed out
  /// and then killed).
  int finish(std::chrono::milliseconds timeout) {
    release();
    return exit_code(m_child.wait(timeout));
  }
  /// Its raw wait status within `timeout`, without releasing it (nullopt: it
  /// had to be killed); for a holder that is killed or ends on its own.
  std::optional<int> wait(std::chrono::milliseconds timeout) { return m_child.wait(timeout); }

  pid_t pid() const noexcept { return m_child.pid(); }
  /// Its tenant slot once joined(), -1 before.
  int slot() const noexcept { return m_b->slot.load(); }
  /// Its region's report (to_json) as `after` left it; "" until it has run.
  std::string report_json() const { return m_b->report; }

 private:
  struct board {
    flag joined, ready, release;
    std::atomic<int> slot;
    char report[16384];
  };
  shared<board> m_b;  // before m_child: mapped before the fork, unmapped after the reap
  child m_child;
};

using holder = basic_holder<>;

}  // namespace krex_test
