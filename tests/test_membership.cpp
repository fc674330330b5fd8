// SPDX-License-Identifier: Apache-2.0
// Whose membership a slot is (issue 10, findings 7, 8a, 8d), with real
// processes: a forked child's copy of a tenant leaves the parent's slot
// alone; a join into a table full of dead slots takes one; in group mode a
// region of one user freezes the leaf of another.

#include "cgroup_util.hpp"
#include "krex_test.hpp"
#include "proc_util.hpp"
#include "segment_util.hpp"

#include <krex/detail/segment/segment.hpp>
#include <krex/region.hpp>

#include <gtest/gtest.h>

#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>

#include <cstdlib>
#include <string>

namespace {

using namespace std::chrono_literals;
namespace kd = krex::detail;

// --- finding 7: fork ---------------------------------------------------------

TEST(fork, child_copy_of_a_tenant_leaves_the_parents_membership_alone) {
  krex_test::scoped_segment seg;
  krex::tenant t{seg.opts()};
  const std::uint32_t slot = t.slot();
  kd::tenant_slot* mine = &krex::detail::member_of(t).node->tenants[slot];
  auto kid = krex_test::spawn([&] {
    // Guards pass, on a private gate: the parent's in_submit is not touched.
    {
      krex::submit_guard g{t};
      if (mine->in_submit.load() != 0) return 2;
    }
    if (t.joined()) return 3;
    for (int what = 0; what < 2; ++what) {
      try {
        if (what == 0) {
          krex::region r{t};
        } else {
          t.submit([] {});
        }
        return 4 + what;
      } catch (const krex::error& e) {
        if (std::string(e.what()).find("forked child must construct its own krex::tenant") ==
            std::string::npos) {
          std::fprintf(stderr, "unexpected: %s\n", e.what());
          return 6;
        }
      }
    }
    // What exiting would run: leave() and the destructor of the copy.
    t.leave();
    t.~basic_tenant();
    return 0;
  });
  EXPECT_EQ(krex_test::exit_code(kid.wait(10s)), 0);
  // The parent is still the member of its slot, and works.
  EXPECT_TRUE(t.joined());
  EXPECT_EQ(mine->owner.load(), ::getpid());
  EXPECT_EQ(mine->state.load(), kd::slot_active);
  EXPECT_NE(mine->start_time.load(), 0u);
  {
    krex::region r{t};
    EXPECT_TRUE(r.report().gated);
  }
  EXPECT_EQ(t.submit([] { return 7; }), 7);
  // A sibling sees it as a sibling.
  auto sib = krex_test::spawn([&] {
    krex::tenant s{seg.opts()};
    krex::region r{s};
    return r.report().siblings_seen == 1 ? 0 : 1;
  });
  EXPECT_EQ(krex_test::exit_code(sib.wait(20s)), 0);
}

// --- finding 8a: a full table of dead slots -----------------------------------

TEST(slots, join_takes_a_dead_slot_when_every_slot_is_taken) {
  krex_test::scoped_segment seg;
  pid_t dead = 0;
  {
    auto c = krex_test::spawn([] { return 0; });
    dead = c.pid();
    ASSERT_EQ(krex_test::exit_code(c.wait(5s)), 0);  // exited and reaped
  }
  {
    kd::segment s{seg.opts()};
    for (kd::tenant_slot& ts : s.node().tenants) {
      ts.start_time.store(12345);  // not the start time of whoever has the pid now
      ts.ticket.store(kd::no_ticket);
      ts.state.store(kd::slot_active);
      ts.owner.store(dead);
    }
  }
  krex::tenant t{seg.opts()};  // used to fail: "no free tenant slot"
  ASSERT_LT(t.slot(), kd::max_tenants);
  EXPECT_EQ(krex::detail::member_of(t).node->tenants[t.slot()].owner.load(), ::getpid());
}

// Issue 38: 300 simultaneous joiners were told "256 tenants are already
// joined" when 254 were (the rest were being claimed). The error now counts
// the slots of each kind, and a joiner waits out slots that are taken only
// for a moment (bounded), while a table of joined tenants fails at once.
TEST(slots, a_full_table_says_who_holds_it_and_a_joiner_waits_out_a_moment) {
  krex_test::scoped_segment seg;
  kd::segment s{seg.opts()};
  const pid_t me = ::getpid();
  const std::uint64_t start = kd::self_start_time();
  // Every slot held by this (live) process: the first `claiming` still joining.
  const auto fill = [&](std::uint32_t claiming) {
    for (std::uint32_t i = 0; i < kd::max_tenants; ++i) {
      kd::tenant_slot& ts = s.node().tenants[i];
      ts.start_time.store(start);
      ts.ticket.store(kd::no_ticket);
      ts.device.store(0);
      ts.state.store(i < claiming ? kd::slot_claiming : kd::slot_active);
      ts.owner.store(me);
    }
  };
  const auto clear = [&] {
    for (kd::tenant_slot& ts : s.node().tenants) {
      ts.owner.store(0);
      ts.state.store(kd::slot_free);
    }
  };
  const auto timed_join = [&](long long& ms) {
    const auto t0 = std::chrono::steady_clock::now();
    const krex_test::join_result r = krex_test::try_join(seg.opts(), 20s);
    ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    return r;
  };
  long long ms = 0;

  fill(0);  // all joined: refused at once
  krex_test::join_result r = timed_join(ms);
  EXPECT_EQ(r.how, krex_test::join_result::krex_error) << krex_test::to_string(r.how) << r.what;
  EXPECT_NE(r.what.find("256 by joined tenants, 0 by tenants still joining"), std::string::npos)
      << r.what;
  EXPECT_LT(ms, 1500) << "a table of joined tenants is no moment to wait out";

  fill(2);  // two still joining, for good: refused after the retry, counted
  r = timed_join(ms);
  EXPECT_EQ(r.how, krex_test::join_result::krex_error) << krex_test::to_string(r.how) << r.what;
  EXPECT_NE(r.what.find("254 by joined tenants, 2 by tenants still joining"), std::string::npos)
      << r.what;
  EXPECT_NE(r.what.find("after retrying"), std::string::npos) << r.what;
  EXPECT_GE(ms, 1500) << "gave up without waiting for the slots being claimed";
  EXPECT_LT(ms, 6000);

  fill(2);  // one of the two joiners gives its slot up 300 ms later: the join waits and gets it
  auto freer = krex_test::spawn([&] {
    std::this_thread::sleep_for(300ms);
    s.node().tenants[0].state.store(kd::slot_free);
    s.node().tenants[0].owner.store(0);
    return 0;
  });
  r = timed_join(ms);
  EXPECT_EQ(r.how, krex_test::join_result::joined) << krex_test::to_string(r.how) << ": " << r.what;
  EXPECT_EQ(krex_test::exit_code(freer.wait(5s)), 0);
  clear();
}

// --- finding 8d: group mode, two users, cgroup v2 -----------------------------

// A group and two users in it, made for the test and removed after.
struct throwaway_users {
  std::string group, a, b;
  gid_t gid = 0;
  uid_t uid_a = 0, uid_b = 0;
  bool ok = false;
  throwaway_users() {
    const std::string tag = std::to_string(::getpid() % 1000000);
    group = "krxg" + tag;
    a = "krxa" + tag;
    b = "krxb" + tag;
    if (std::system(("groupadd " + group + " >/dev/null 2>&1").c_str()) != 0) return;
    for (const std::string& u : {a, b})
      if (std::system(("useradd -M -N -g " + group + " -s /usr/sbin/nologin " + u +
                       " >/dev/null 2>&1")
                          .c_str()) != 0)
        return;
    // One at a time: getpwnam returns a static buffer.
    const struct group* g = ::getgrnam(group.c_str());
    if (g == nullptr) return;
    gid = g->gr_gid;
    const passwd* p = ::getpwnam(a.c_str());
    if (p == nullptr) return;
    uid_a = p->pw_uid;
    p = ::getpwnam(b.c_str());
    if (p == nullptr) return;
    uid_b = p->pw_uid;
    ok = uid_a != uid_b;
  }
  ~throwaway_users() {
    for (const std::string& u : {a, b})
      (void)std::system(("userdel -f " + u + " >/dev/null 2>&1").c_str());
    (void)std::system(("groupdel " + group + " >/dev/null 2>&1").c_str());
  }
};

struct group_board {
  std::atomic<int> ready;
  std::atomic<int> stop;
  std::atomic<int> region;    // B: 1 entered and checked, 2 failed to enter
  std::atomic<int> a_held;    // B saw A's counter hold during its region
  std::atomic<int> a_frozen;  // A's pid was in B's frozen_pids
  std::atomic<int> a_pid;
  std::atomic<std::uint64_t> count;
  char error[512];
};

int give(const std::string& path, uid_t u, gid_t g, mode_t mode) {
  return ::chown(path.c_str(), u, g) == 0 && ::chmod(path.c_str(), mode) == 0 ? 0 : errno;
}

TEST(group_mode, a_region_of_one_user_freezes_the_leaf_of_another) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to create throwaway users";
  const std::string base = kd::cgroup::self_view::read().locate(true).own;
  if (base.empty()) GTEST_SKIP() << "no cgroup v2 hierarchy here";
  throwaway_users users;
  if (!users.ok) GTEST_SKIP() << "cannot create throwaway users (groupadd/useradd)";
  krex_test::scoped_segment seg;
  krex_test::become_subreaper();
  // As an operator would set it up: a directory the group may write, with
  // the krex root and each user's home cgroup below it (moving a process
  // needs write access to the common ancestor's cgroup.procs).
  const std::string top = base + "/" + krex_test::unique_name("krex-test-grp");
  const std::string root = top + "/krex";
  ASSERT_EQ(::mkdir(top.c_str(), 0775), 0);
  ASSERT_EQ(::mkdir(root.c_str(), 0775), 0);
  for (const std::string& d : {top, root}) {
    ASSERT_EQ(give(d, 0, users.gid, 0775), 0) << d;
    ASSERT_EQ(give(d + "/cgroup.procs", 0, users.gid, 0664), 0) << d;
  }
  krex_test::shared<group_board> b;
  const krex::options o = seg.opts()
                              .access(krex::segment_access::group)
                              .freeze(krex::freeze_method::cgroup_v2)
                              .cgroup_root(root)
                              .drain_deadline(5s)
                              .freeze_deadline(5s);
  const auto run_as = [&](uid_t uid, const std::string& home, auto body) {
    if (::mkdir(home.c_str(), 0755) != 0 || give(home, uid, users.gid, 0755) != 0 ||
        give(home + "/cgroup.procs", uid, users.gid, 0644) != 0)
      throw std::runtime_error("cannot make " + home);
    return krex_test::spawn([&, uid, home, body] {
      if (kd::cgroup::write_file(home + "/cgroup.procs", std::to_string(::getpid())) != 0 ||
          ::setgroups(0, nullptr) != 0 || ::setgid(users.gid) != 0 || ::setuid(uid) != 0)
        return 9;
      try {
        return body();
      } catch (const std::exception& e) {
        std::snprintf(b->error, sizeof b->error, "%s", e.what());
        b->ready = -1;
        return 8;
      }
    });
  };
  auto a = run_as(users.uid_a, top + "/ha", [&] {
    krex::tenant t{o};
    b->a_pid = ::getpid();
    b->ready = 1;
    while (b->stop.load() == 0) {
      b->count++;
      ::usleep(500);
    }
    return 0;
  });
  ASSERT_TRUE(krex_test::wait_until([&] { return b->ready.load() != 0; }, 10s));
  ASSERT_EQ(b->ready.load(), 1) << b->error;
  auto bb = run_as(users.uid_b, top + "/hb", [&] {
    krex::tenant t{o};
    try {
      krex::region r{t};
      const std::uint64_t c0 = b->count.load();
      ::usleep(150'000);
      b->a_held = b->count.load() == c0 ? 1 : 0;
      for (int p : r.report().frozen_pids)
        if (p == b->a_pid.load()) b->a_frozen = 1;
      b->region = 1;
    } catch (const krex::error& e) {
      std::snprintf(b->error, sizeof b->error, "%s", e.what());
      b->region = 2;
    }
    return 0;
  });
  EXPECT_EQ(krex_test::exit_code(bb.wait(30s)), 0);
  EXPECT_EQ(b->region.load(), 1) << "user B's region failed: " << b->error;
  EXPECT_EQ(b->a_frozen.load(), 1);
  EXPECT_EQ(b->a_held.load(), 1) << "user A kept running in user B's region";
  // The leaf of A is the group's: what a holder or recoverer of the group writes.
  b->stop = 1;
  EXPECT_EQ(krex_test::exit_code(a.wait(10s)), 0);
  krex_test::scrub_cgroup_root(root);
  // A's guardian lives in A's home until it retires (300 ms after the last tenant).
  EXPECT_TRUE(krex_test::wait_until(
      [&] {
        krex_test::reap_orphans();
        for (const std::string& d : {top + "/ha", top + "/hb"}) ::rmdir(d.c_str());
        return ::rmdir(top.c_str()) == 0 || errno == ENOENT;
      },
      5s))
      << "test cgroup left behind: " << top;
  ::unlink(("/dev/shm/krex-L" + std::to_string(kd::layout_version) + "-g" +
            std::to_string(users.gid) + "-" + seg.name())
               .c_str());
}

}  // namespace

// tenant::join_report(): every phase is timed and the phases add up to at most
// the whole; the stale-leaf sweep runs on a segment with no live guardian and
// is left to the guardian once one runs.
TEST(join, report_times_each_phase_and_skips_the_sweep_while_a_guardian_runs) {
  krex_test::scoped_segment seg;
  krex::tenant a{seg.opts()};
  const krex::join_timings& ja = a.join_report();
  EXPECT_TRUE(ja.swept) << "the first tenant of a fresh segment must sweep stale leaves";
  EXPECT_GT(ja.total_ns, 0U);
  const std::uint64_t sum = ja.driver_ns + ja.segment_ns + ja.slot_ns + ja.freeze_ns +
                            ja.recover_ns + ja.sweep_ns + ja.topology_ns + ja.agent_ns +
                            ja.gating_ns + ja.guardian_ns;
  EXPECT_LE(sum, ja.total_ns);
  EXPECT_GT(ja.segment_ns, 0U);
  EXPECT_GT(ja.guardian_ns, 0U);
  ASSERT_TRUE(krex_test::wait_until(
      [&] { return krex::detail::guardian_recently_seen(*krex::detail::member_of(a).node); }, 10s))
      << "no guardian heartbeat";
  krex::tenant b{seg.opts()};
  EXPECT_FALSE(b.join_report().swept) << "a joiner swept although a guardian runs";
}
