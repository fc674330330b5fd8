// SPDX-License-Identifier: Apache-2.0
#pragma once

// The scaffold of the tests that need a region held (or a tenant kept) in
// another process, with the flags between it and the test (flag.hpp):
//
//   krex_test::holder h{seg.opts()};   // forks: join, enter a region, hold it
//   ASSERT_TRUE(h.ready(20s));         // it is inside its region
//   ...                                // what a held region does to the others
//   EXPECT_EQ(h.finish(30s), 0);       // released: its exit code
//
//   krex_test::member m{seg.opts()};   // forks: join, stay a tenant (no region)
//   ASSERT_TRUE(m.ready(20s));
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

#include "flag.hpp"
#include "proc_util.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace krex_test {

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

/// What a member does once joined, by default: nothing.
struct nothing {
  template <class T>
  void operator()(T& /*tenant*/) const {}
};

/// A forked child that joins with the options it is given (a tenant of one
/// segment), and the flags between it and the test: joined(), ready() (what
/// "ready" means is the holder's or the member's), release(). Both below.
class tenant_child {
 public:
  /// It has joined (its slot is known), within `timeout`.
  bool joined(std::chrono::milliseconds timeout) const { return m_b->joined.wait(timeout); }
  /// It is ready (a holder: inside its region; a member: joined and set up), within `timeout`.
  bool ready(std::chrono::milliseconds timeout) const { return m_b->ready.wait(timeout); }
  /// Lets it go on (a holder: `after`, then it leaves; a member: it leaves).
  void release() { m_b->release.raise(); }
  /// release(), then its exit code within `timeout` (-1: killed, or timed out
  /// and then killed).
  int finish(std::chrono::milliseconds timeout) {
    release();
    return exit_code(m_child.wait(timeout));
  }
  /// Its raw wait status within `timeout`, without releasing it (nullopt: it
  /// had to be killed); for a child that is killed or ends on its own.
  std::optional<int> wait(std::chrono::milliseconds timeout) { return m_child.wait(timeout); }

  pid_t pid() const noexcept { return m_child.pid(); }
  /// Its tenant slot once joined(), -1 before.
  int slot() const noexcept { return m_b->slot.load(); }

 protected:
  struct board {
    flag joined, ready, release;
    std::atomic<int> slot;
    char report[16384];
  };

  /// Forks: the child joins with `o` as a basic_tenant<Backend>, and its exit
  /// code is `then(tenant, board)`.
  template <class Backend, class Then>
  void start(const krex::options& o, Then&& then) {
    m_b->slot.store(-1);
    m_child = spawn([&] {
      krex::basic_tenant<Backend> t{o};
      m_b->slot.store(static_cast<int>(t.slot()));
      m_b->joined.raise();
      return then(t, *m_b);
    });
  }

  shared<board> m_b;  // before m_child: mapped before the fork, unmapped after the reap
  child m_child;
};

/// A child process that joins with `o`, enters a region, raises ready() and
/// holds the region until release(); then `after(region)` runs in the child,
/// and what it returns is the child's exit code (a thrown exception: exit_threw).
template <class Backend = krex::default_backend>
class basic_holder : public tenant_child {
 public:
  using region_type = krex::basic_region<Backend>;

  template <class After = keep_region>
  explicit basic_holder(const krex::options& o, After after = {}) {
    start<Backend>(o, [&](krex::basic_tenant<Backend>& t, board& b) {
      region_type r{t};
      b.ready.raise();
      if (!b.release.wait(hold_at_most)) return exit_unreleased;
      const int code = after(r);
      std::snprintf(b.report, sizeof b.report, "%s", krex::to_json(r.report()).c_str());
      return code;
    });
  }

  /// Its region's report (to_json) as `after` left it; "" until it has run.
  std::string report_json() const { return m_b->report; }
};

using holder = basic_holder<>;

/// A child process that joins with `o`, runs `first(tenant)` (a submission,
/// a region: what the test needs it to have done), raises ready() and stays a
/// tenant, outside any region, until release(); then it leaves, exit code 0.
template <class Backend = krex::default_backend>
class basic_member : public tenant_child {
 public:
  template <class First = nothing>
  explicit basic_member(const krex::options& o, First first = {}) {
    start<Backend>(o, [&](krex::basic_tenant<Backend>& t, board& b) {
      first(t);
      b.ready.raise();
      return b.release.wait(hold_at_most) ? 0 : exit_unreleased;
    });
  }
};

using member = basic_member<>;

/// `n` forked children, each a tenant of `o` (a default_backend tenant)
/// that adds 1 to `joined` once joined and then runs body(i, tenant), i in
/// 0..n-1; its exit code is what body returns. `joined` lives in shared
/// memory (a member of a shared<board>).
template <class Body>
std::vector<child> spawn_tenants(int n, const krex::options& o, std::atomic<int>& joined,
                                 Body body) {
  std::vector<child> kids;
  for (int i = 0; i < n; ++i)
    kids.push_back(spawn([&, i] {
      krex::tenant t{o};
      joined.fetch_add(1);
      return body(i, t);
    }));
  return kids;
}

}  // namespace krex_test
