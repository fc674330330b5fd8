// SPDX-License-Identifier: Apache-2.0
// detail::device_ops: the join and the region reach a backend only through
// it (krex/impl/ is compiled once, also into krex::compiled), so every hook a
// backend provides must arrive, and every hook it lacks must fall back. A
// backend with every optional hook records each call; the host backend has
// none. Also built as test_device_ops_compiled (tests/CMakeLists.txt).

#include "krex_test.hpp"

#include <krex/region.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace kd = krex::detail;

struct calls {
  std::atomic<int> bind{0};
  std::atomic<int> attach{0};
  std::atomic<int> detach{0};
  std::atomic<int> release{0};
  std::atomic<int> probes{0};
  std::atomic<int> clocks{0};
  std::atomic<int> processes{0};
  std::atomic<std::thread::id> bind_thread{};
  kd::member* attached = nullptr;
};
calls g;

// Every optional hook of detail/device/device_ops.hpp, each recording its call.
struct hooked_backend : krex::backend::host {
  static constexpr const char* name = "hooked";
  using krex::backend::host::host;
  void bind(int) noexcept {
    g.bind.fetch_add(1);
    g.bind_thread = std::this_thread::get_id();
  }
  void attach(kd::member& m) {
    g.attach.fetch_add(1);
    g.attached = &m;
  }
  void detach() noexcept { g.detach.fetch_add(1); }
  void release() noexcept { g.release.fetch_add(1); }
  const char* gating_note() const { return "hooked: test gating"; }
  kd::quiet_sample quiet_probe() {
    g.probes.fetch_add(1);
    kd::quiet_sample q;
    q.ok = true;
    q.ns = 1000;
    return q;
  }
  krex::device_clocks clocks() const {
    g.clocks.fetch_add(1);
    krex::device_clocks c;
    c.valid = true;
    c.sm_mhz = 1234;
    return c;
  }
  bool device_processes(std::vector<int>& pids) const {
    g.processes.fetch_add(1);
    pids = {::getpid(), 999999};  // this tenant (a member) and one outside the segment
    return true;
  }
};

class device_ops : public ::testing::Test {
 protected:
  void SetUp() override {
    g.bind = g.attach = g.detach = g.release = g.probes = g.clocks = g.processes = 0;
    g.bind_thread = std::thread::id{};
    g.attached = nullptr;
  }
  krex_test::scoped_segment seg;
};

TEST_F(device_ops, every_hook_a_backend_provides_is_called) {
  {
    krex::basic_tenant<hooked_backend> t{seg.opts().release_on_leave(true)};
    EXPECT_EQ(g.attach.load(), 1);
    EXPECT_EQ(g.attached, &kd::member_of(t)) << "attach got another member than the tenant's";
    EXPECT_EQ(t.gating_note(), "hooked: test gating");
    // bind runs once, on the agent thread, not the joining one.
    for (int i = 0; i < 200 && g.bind.load() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(g.bind.load(), 1);
    EXPECT_NE(g.bind_thread.load(), std::this_thread::get_id());
    {
      krex::basic_region<hooked_backend> r{t};
      const krex::region_report& rep = r.report();
      EXPECT_EQ(rep.gating, "hooked: test gating");
      EXPECT_TRUE(rep.quiet_checked) << rep;
      EXPECT_GT(g.probes.load(), 0);
      EXPECT_TRUE(rep.foreign_checked) << rep;
      EXPECT_EQ(rep.foreign_pids, std::vector<int>{999999}) << rep;
      EXPECT_TRUE(rep.clocks_entry.valid);
      EXPECT_EQ(rep.clocks_entry.sm_mhz, 1234U);
      r.exit();
      EXPECT_TRUE(r.report().clocks_exit.valid);
    }
    EXPECT_EQ(g.clocks.load(), 2);  // entry and exit
    EXPECT_EQ(g.processes.load(), 1);
    EXPECT_EQ(g.detach.load(), 0);
    EXPECT_EQ(g.release.load(), 0);
    t.leave();
    EXPECT_EQ(g.detach.load(), 1);
    EXPECT_EQ(g.release.load(), 1);  // release_on_leave
  }
  EXPECT_EQ(g.detach.load(), 1) << "the destructor detached again after leave()";
  EXPECT_EQ(g.release.load(), 1);
}

TEST_F(device_ops, release_is_called_only_with_release_on_leave) {
  { krex::basic_tenant<hooked_backend> t{seg.opts().release_on_leave(false)}; }
  EXPECT_EQ(g.detach.load(), 1);
  EXPECT_EQ(g.release.load(), 0);
}

TEST_F(device_ops, a_backend_without_hooks_gets_the_fallbacks) {
  krex::basic_tenant<krex::backend::host> t{seg.opts()};
  EXPECT_EQ(t.gating_note(), "explicit");
  krex::basic_region<krex::backend::host> r{t};
  const krex::region_report& rep = r.report();
  EXPECT_EQ(rep.gating, "explicit");
  EXPECT_FALSE(rep.quiet_checked) << rep;  // no probe, no reason
  EXPECT_FALSE(rep.foreign_checked) << rep;
  EXPECT_FALSE(rep.clocks_entry.valid);  // no clocks_hook set
}

struct deviceless_backend : krex::backend::host {
  static constexpr const char* name = "nameless-test";
  using krex::backend::host::host;
  int device_count() const noexcept { return 0; }
};

TEST_F(device_ops, the_backend_name_reaches_the_join_errors) {
  try {
    krex::basic_tenant<deviceless_backend> t{seg.opts()};
    FAIL() << "joined with no device";
  } catch (const krex::error& e) {
    EXPECT_NE(std::string(e.what()).find("the nameless-test backend sees no device"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
