// SPDX-License-Identifier: Apache-2.0
// "Cannot see it" is not "dead": a live region holder is never taken over
// because a sibling cannot read its /proc entry. Each trigger is made real
// where this machine can (a zombie main thread, EMFILE, a second pid
// namespace) and injected through detail::proc_fault_hook where it cannot
// (EACCES, hidepid's ENOENT); every scenario asserts that no two region
// bodies (nor a gated submission and a body) overlap.

#include "cgroup_util.hpp"
#include "krex_test.hpp"

#include <krex/detail/guardian/guardian_recover.hpp>
#include <krex/region.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

using namespace std::chrono_literals;
using krex_test::child;
using krex_test::shared;
namespace kd = krex::detail;

namespace {

struct board {
  std::atomic<int> holder_pid;       ///< the holder's pid, as this (the test's) namespace sees it
  std::atomic<int> holding;          ///< the holder is inside its body
  std::atomic<int> holder_done;      ///< the holder's body ended
  std::atomic<int> in_body;          ///< bodies (and gated submissions) running now
  std::atomic<int> overlaps;         ///< times two ran at once
  std::atomic<int> contender_ran;    ///< the contender's body or submission ran
  std::atomic<int> contender_failed; ///< its region threw krex::error
  std::atomic<int> release;          ///< the holder may leave its body
  std::atomic<int> joined;
  krex_test::flag stop;
  std::atomic<std::uint64_t> spins;
  std::atomic<std::uint64_t> holder_end_ns;
  std::atomic<std::uint64_t> contender_start_ns;
  char contender_error[512];

  void reset() noexcept {
    for (auto* a : {&holder_pid, &holding, &holder_done, &in_body, &overlaps, &contender_ran,
                    &contender_failed, &release, &joined})
      a->store(0);
    holder_end_ns.store(0);
    contender_start_ns.store(0);
    contender_error[0] = '\0';
  }
};

board* g_b = nullptr;

/// fork() without fork_child's catch-all: pthread_exit() unwinds with a
/// forced-unwind exception that a `catch (...)` must not swallow.
template <class F>
pid_t fork_plain(F&& fn) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(fn());
  return pid;
}

/// A body: counts itself in, checks nobody else is in, for about `ms`.
void body(board& b, std::chrono::milliseconds ms) {
  if (b.in_body.fetch_add(1) != 0) b.overlaps.fetch_add(1);
  const auto end = std::chrono::steady_clock::now() + ms;
  while (std::chrono::steady_clock::now() < end) {
    if (b.in_body.load() > 1) b.overlaps.fetch_add(1);
    std::this_thread::sleep_for(1ms);
  }
  b.in_body.fetch_sub(1);
}

// The fault the contender injects into its own /proc reads of the holder.
std::atomic<int> g_fault_pid{0};
std::atomic<int> g_fault_errno{0};
int inject(std::int64_t pid) noexcept {
  return pid == g_fault_pid.load() ? g_fault_errno.load() : 0;
}

/// Takes every file descriptor this process may open (its soft limit
/// lowered to 256): 0, or 3 if the limit could not be lowered, 4 if an open
/// failed otherwise than with EMFILE. A child's exit code.
int take_every_descriptor() {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = 256;
  if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) return 3;
  while (::open("/dev/null", O_RDONLY) >= 0) {
  }
  return errno == EMFILE ? 0 : 4;
}

/// The holder's part: join, hold a region for `hold`, leave.
int hold_region(const krex::options& o, board& b, std::chrono::milliseconds hold) {
  krex::tenant t{o};
  b.joined.fetch_add(1);
  {
    krex::region r{t};
    b.holding.store(1);
    body(b, hold);
    b.holder_end_ns.store(krex_test::now_ns());
    b.holder_done.store(1);
  }
  return 0;
}

enum class contend { region, submit };

/// The contender's part: join, wait until the holder is in its body, then
/// ask for a region (or make a gated submission).
int contend_with(const krex::options& o, board& b, contend how) {
  krex::tenant t{o};
  b.joined.fetch_add(1);
  if (!krex_test::wait_until([&] { return b.holding.load() == 1; }, 20s)) return 2;
  std::this_thread::sleep_for(100ms);  // well inside the holder's body
  try {
    if (how == contend::region) {
      krex::region r{t};
      b.contender_start_ns.store(krex_test::now_ns());
      b.contender_ran.store(1);
      body(b, 50ms);
    } else {
      t.submit([&] {
        b.contender_start_ns.store(krex_test::now_ns());
        b.contender_ran.store(1);
        body(b, 50ms);
      });
    }
  } catch (const krex::error& e) {
    std::snprintf(b.contender_error, sizeof b.contender_error, "%s", e.what());
    b.contender_failed.store(1);
  }
  return 0;
}

class liveness : public ::testing::Test {
 protected:
  void SetUp() override {
    krex_test::become_subreaper();
    g_b = &*m_b;
  }
  void TearDown() override {
    m_b->release.store(1);
    for (auto& k : m_kids) (void)k.wait(10s);
    m_kids.clear();
    krex_test::reap_orphans();
  }
  krex::options opts() const { return m_seg.opts().lock_wait(20s).lease(30s); }

  /// Neither ran inside the other; the contender ran after the holder's body.
  void expect_no_overlap() {
    EXPECT_EQ(m_b->overlaps.load(), 0) << "two region bodies overlapped";
    if (m_b->contender_ran.load() != 0) {
      EXPECT_EQ(m_b->holder_done.load(), 1);
      EXPECT_GE(m_b->contender_start_ns.load(), m_b->holder_end_ns.load())
          << "the contender's body started before the holder's ended";
    }
  }

  krex_test::scoped_segment m_seg;
  shared<board> m_b;
  std::vector<child> m_kids;
};

}  // namespace

// ---- the probe itself -----------------------------------------------------

TEST(probe_life, SelfIsAliveAndAReapedChildIsDead) {
  EXPECT_EQ(kd::probe_life(::getpid(), kd::self_start_time()).verdict, kd::liveness::alive);
  const pid_t c = krex_test::fork_child([] { return 0; });
  ASSERT_EQ(krex_test::exit_code(krex_test::wait_exit(c, 5s)), 0);
  EXPECT_EQ(kd::probe_life(c, 0).verdict, kd::liveness::dead);
  EXPECT_FALSE(kd::alive(c, 0));
}

TEST(probe_life, AnotherStartTimeIsAReusedPid) {
  const std::uint64_t mine = kd::self_start_time();
  ASSERT_NE(mine, 0U);
  EXPECT_EQ(kd::probe_life(::getpid(), mine + 1).verdict, kd::liveness::dead);
}

TEST(probe_life, AnUnreapedChildThatEndedIsDead) {
  const pid_t c = krex_test::fork_child([] { return 0; });
  ASSERT_TRUE(krex_test::wait_until([&] { return kd::read_proc_stat(c).state == 'Z'; }, 5s));
  EXPECT_EQ(kd::probe_life(c, 0).verdict, kd::liveness::dead);
  (void)krex_test::wait_exit(c, 5s);
}

// A process whose main thread called pthread_exit() shows its leader as 'Z'
// while its other threads run: alive.
TEST(probe_life, ZombieLeaderWithRunningThreadsIsAlive) {
  shared<std::atomic<int>> go;
  const pid_t c = fork_plain([&] {
    std::thread([&] {
      while (go->load() == 0) std::this_thread::sleep_for(1ms);
      ::_exit(0);
    }).detach();
    ::syscall(SYS_exit, 0);  // this thread only, without unwinding (gtest frames)
    return 0;
  });
  ASSERT_TRUE(krex_test::wait_until([&] { return kd::read_proc_stat(c).state == 'Z'; }, 5s));
  EXPECT_GE(kd::proc_threads(c), 2);
  EXPECT_EQ(kd::probe_life(c, 0).verdict, kd::liveness::alive);
  go->store(1);
  EXPECT_EQ(krex_test::exit_code(krex_test::wait_exit(c, 5s)), 0);
}

// Unreadable is unknown (treated as alive), whatever the errno; a pid that
// kill(2) says is gone is dead however /proc answers.
TEST(probe_life, UnreadableIsUnknownNotDead) {
  const pid_t c = krex_test::fork_child([] {
    ::pause();
    return 0;
  });
  child guard(c);
  g_fault_pid.store(c);
  kd::proc_fault_hook = inject;
  for (const int e : {EMFILE, ENFILE, EACCES, ENOENT}) {
    g_fault_errno.store(e);
    const kd::life l = kd::probe_life(c, 0);
    EXPECT_EQ(l.verdict, kd::liveness::unknown) << std::strerror(e);
    EXPECT_EQ(l.err, e);
    EXPECT_TRUE(kd::alive(c, 12345)) << "an unreadable start time proves nothing";
  }
  guard = child();  // killed and reaped
  g_fault_errno.store(EMFILE);
  EXPECT_EQ(kd::probe_life(c, 0).verdict, kd::liveness::dead);
  kd::proc_fault_hook = nullptr;
}

// ---- no takeover of a live holder -----------------------------------------

namespace {

struct injected {
  int err;
  contend how;
};

class liveness_injected : public liveness, public ::testing::WithParamInterface<injected> {};

std::string name_of(const ::testing::TestParamInfo<injected>& i) {
  const char* e = i.param.err == EMFILE   ? "EMFILE"
                  : i.param.err == EACCES ? "EACCES"
                  : i.param.err == ENOENT ? "hidepid"
                                          : "other";
  return std::string(e) + (i.param.how == contend::region ? "_waiter" : "_parked_submitter");
}

}  // namespace

// The contender cannot read the holder's /proc entry (injected): it waits
// for the holder's region to end instead of recovering it.
TEST_P(liveness_injected, ContenderThatCannotSeeTheHolderWaits) {
  const injected p = GetParam();
  m_kids.push_back(krex_test::spawn([&] { return hold_region(opts(), *m_b, 1500ms); }));
  m_b->holder_pid.store(m_kids.back().pid());
  m_kids.push_back(krex_test::spawn([&] {
    g_fault_pid.store(m_b->holder_pid.load());
    g_fault_errno.store(p.err);
    kd::proc_fault_hook = inject;
    return contend_with(opts(), *m_b, p.how);
  }));
  for (auto& k : m_kids) EXPECT_EQ(krex_test::exit_code(k.wait(30s)), 0);
  m_kids.clear();
  expect_no_overlap();
  EXPECT_EQ(m_b->contender_ran.load(), 1) << m_b->contender_error;
}

INSTANTIATE_TEST_SUITE_P(faults, liveness_injected,
                         ::testing::Values(injected{EMFILE, contend::region},
                                           injected{EMFILE, contend::submit},
                                           injected{EACCES, contend::region},
                                           injected{EACCES, contend::submit},
                                           injected{ENOENT, contend::region},
                                           injected{ENOENT, contend::submit}),
                         name_of);

// A lock waiter whose lock_wait ends while it cannot verify the holder says
// why it waited: the holder is treated as alive until its lease ends.
TEST_F(liveness, TimedOutWaiterSaysItCouldNotVerifyTheHolder) {
  m_kids.push_back(krex_test::spawn([&] { return hold_region(opts(), *m_b, 1500ms); }));
  m_b->holder_pid.store(m_kids.back().pid());
  m_kids.push_back(krex_test::spawn([&] {
    g_fault_pid.store(m_b->holder_pid.load());
    g_fault_errno.store(EACCES);
    kd::proc_fault_hook = inject;
    return contend_with(opts().lock_wait(300ms), *m_b, contend::region);
  }));
  for (auto& k : m_kids) EXPECT_EQ(krex_test::exit_code(k.wait(30s)), 0);
  m_kids.clear();
  expect_no_overlap();
  EXPECT_EQ(m_b->contender_failed.load(), 1);
  const std::string e = m_b->contender_error;
  EXPECT_NE(e.find("cannot be verified"), std::string::npos) << e;
  EXPECT_NE(e.find("Permission denied"), std::string::npos) << e;
  EXPECT_NE(e.find("until its lease ends"), std::string::npos) << e;
}

// A real EMFILE: the contender uses up its file descriptors before it asks.
TEST_F(liveness, ContenderAtItsFileDescriptorLimitWaits) {
  for (const contend how : {contend::region, contend::submit}) {
    SCOPED_TRACE(how == contend::region ? "waiter" : "parked submitter");
    m_b->reset();
    m_kids.push_back(krex_test::spawn([&] { return hold_region(opts(), *m_b, 1500ms); }));
    m_kids.push_back(krex_test::spawn([&] {
      const krex::options o = opts();
      krex::tenant t{o};
      m_b->joined.fetch_add(1);
      if (!krex_test::wait_until([&] { return m_b->holding.load() == 1; }, 20s)) return 2;
      // Every descriptor taken: /proc cannot be opened any more.
      if (const int failed = take_every_descriptor()) return failed;
      if (kd::probe_life(m_b->holder_pid.load(), 0).verdict != kd::liveness::unknown) return 5;
      try {
        if (how == contend::region) {
          krex::region r{t};
          m_b->contender_start_ns.store(krex_test::now_ns());
          m_b->contender_ran.store(1);
          body(*m_b, 50ms);
        } else {
          t.submit([&] {
            m_b->contender_start_ns.store(krex_test::now_ns());
            m_b->contender_ran.store(1);
            body(*m_b, 50ms);
          });
        }
      } catch (const krex::error& e) {
        std::snprintf(m_b->contender_error, sizeof m_b->contender_error, "%s", e.what());
        m_b->contender_failed.store(1);
      }
      return 0;
    }));
    m_b->holder_pid.store(m_kids.front().pid());
    for (auto& k : m_kids) EXPECT_EQ(krex_test::exit_code(k.wait(30s)), 0);
    m_kids.clear();
    expect_no_overlap();
    EXPECT_EQ(m_b->contender_ran.load(), 1) << m_b->contender_error;
  }
}

// The holder's main thread called pthread_exit(): /proc shows its leader as a
// zombie while the thread holding the region runs on.
TEST_F(liveness, HolderWhoseMainThreadExitedKeepsItsRegion) {
  m_kids.push_back(child(fork_plain([&] {
    std::thread([&] {
      const int rc = hold_region(opts(), *m_b, 1500ms);
      krex_test::wait_until([&] { return m_b->release.load() == 1; }, 20s);
      ::_exit(rc);
    }).detach();
    while (m_b->holding.load() == 0) std::this_thread::sleep_for(1ms);
    ::syscall(SYS_exit, 0);  // this thread only, without unwinding (gtest frames)
    return 0;
  })));
  const pid_t holder = m_kids.back().pid();
  m_b->holder_pid.store(holder);
  m_kids.push_back(krex_test::spawn([&] {
    if (!krex_test::wait_until([&] { return kd::read_proc_stat(holder).state == 'Z'; }, 20s))
      return 6;
    return contend_with(opts(), *m_b, contend::region);
  }));
  // The contender, then the holder (released once the contender is done).
  EXPECT_EQ(krex_test::exit_code(m_kids.back().wait(30s)), 0);
  m_b->release.store(1);
  EXPECT_EQ(krex_test::exit_code(m_kids.front().wait(10s)), 0);
  m_kids.clear();
  expect_no_overlap();
  EXPECT_EQ(m_b->contender_ran.load(), 1) << m_b->contender_error;
}

// A tenant of another pid namespace shares the segment (a container with the
// host's IPC but its own pids): whichever side holds the region, the other
// neither reaps it at join nor takes its region.
TEST_F(liveness, TenantsOfTwoPidNamespacesNeverOverlap) {
  if (::geteuid() != 0) GTEST_SKIP() << "a new pid namespace needs root";
  for (const bool holder_inside : {true, false}) {
    SCOPED_TRACE(holder_inside ? "holder in the new namespace" : "contender in the new namespace");
    m_b->reset();
    // Runs `fn` as pid 1 of a new pid namespace with its own /proc, as in a
    // container (through an intermediate child; the mount namespace is
    // private, so the host's /proc is untouched; /dev/shm is shared).
    const auto in_new_namespace = [&](auto fn) {
      return krex_test::spawn([fn] {
        if (::unshare(CLONE_NEWPID | CLONE_NEWNS) != 0) return 7;
        if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return 8;
        const pid_t inner = krex_test::fork_child([fn] {
          if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
            return 9;
          return fn();
        });
        return krex_test::exit_code(krex_test::wait_exit(inner, 30s));
      });
    };
    const auto holder = [&] { return hold_region(opts(), *m_b, 1500ms); };
    const auto contender = [&] { return contend_with(opts(), *m_b, contend::region); };
    if (holder_inside) {
      m_kids.push_back(in_new_namespace(holder));
      m_kids.push_back(krex_test::spawn(contender));
    } else {
      m_kids.push_back(krex_test::spawn(holder));
      m_kids.push_back(in_new_namespace(contender));
    }
    for (auto& k : m_kids) EXPECT_EQ(krex_test::exit_code(k.wait(30s)), 0);
    m_kids.clear();
    expect_no_overlap();
    EXPECT_EQ(m_b->contender_ran.load(), 1) << m_b->contender_error;
  }
}

// A tenant of a pid namespace that is gone is judged by its heartbeat: once
// stale, its slot is reaped (not kept forever, as a pid could never tell).
TEST_F(liveness, ForeignTenantWithAStaleHeartbeatIsReaped) {
  kd::segment seg{opts()};
  kd::node_state& n = seg.node();
  kd::tenant_slot& s = n.tenants[5];
  s.owner.store(1);  // pid 1 of some other namespace
  s.pidns.store(kd::as_safe::pid_namespace() + 1);
  s.state.store(kd::slot_active);
  s.heartbeat_ns.store(kd::now_ns());
  EXPECT_TRUE(kd::slot_alive(s)) << "a fresh heartbeat is a live foreign tenant";
  EXPECT_FALSE(kd::reap_if_dead(n, 5));
  s.heartbeat_ns.store(kd::now_ns() - kd::foreign_heartbeat_stale_ns - 1'000'000'000ULL);
  s.frozen.store(1);
  EXPECT_TRUE(kd::slot_alive(s)) << "a frozen tenant cannot beat";
  s.frozen.store(0);
  EXPECT_FALSE(kd::slot_alive(s));
  EXPECT_TRUE(kd::reap_if_dead(n, 5));
  EXPECT_EQ(s.owner.load(), 0);
}

// A tenant reaped while it lived (a foreign tenant stopped past its heartbeat,
// or an operator's recover --force) whose slot another tenant claimed since
// must not free that tenant's slot when it leaves.
TEST_F(liveness, ReapedTenantsLeaveDoesNotFreeTheNewOwner) {
  kd::segment seg{opts()};
  kd::node_state& n = seg.node();
  shared<std::atomic<int>> step;
  child a = krex_test::spawn([&] {
    krex::tenant t{opts()};
    step->store(1);
    krex_test::wait_until([&] { return step->load() == 3; }, 20s);
    return 0;  // leaves here
  });
  ASSERT_TRUE(krex_test::wait_until([&] { return step->load() == 1; }, 20s));
  std::uint32_t slot = kd::max_tenants;
  for (std::uint32_t i = 0; i < kd::max_tenants; ++i)
    if (n.tenants[i].owner.load() == a.pid()) slot = i;
  ASSERT_LT(slot, kd::max_tenants);
  // Reaped as if judged dead: the slot is free for the next joiner.
  ASSERT_TRUE(kd::reap_slot(n, slot, a.pid()));
  child b = krex_test::spawn([&] {
    krex::tenant t{opts()};
    step->store(2);
    krex_test::wait_until([&] { return step->load() == 4; }, 20s);
    return 0;
  });
  ASSERT_TRUE(krex_test::wait_until([&] { return step->load() == 2; }, 20s));
  ASSERT_EQ(n.tenants[slot].owner.load(), b.pid()) << "the joiner took the first free slot";
  step->store(3);
  EXPECT_EQ(krex_test::exit_code(a.wait(10s)), 0);
  EXPECT_EQ(n.tenants[slot].owner.load(), b.pid()) << "the reaped tenant's leave freed it";
  EXPECT_NE(n.tenants[slot].start_time.load(), 0U);
  step->store(4);
  EXPECT_EQ(krex_test::exit_code(b.wait(10s)), 0);
  EXPECT_EQ(n.tenants[slot].owner.load(), 0);
}

// A holder at its file-descriptor limit used to judge every sibling dead and
// freeze nobody, silently. Now its siblings are alive to it: it freezes them
// or fails the region with an error that names the cause, never a region
// that claims protection it does not have.
namespace {
class liveness_cgroup : public krex_test::cgroup2_test<board> {
 protected:
  liveness_cgroup() : cgroup2_test("krex-live") {}
};
}  // namespace

TEST_F(liveness_cgroup, HolderAtItsFileDescriptorLimitFreezesOrSaysWhy) {
  spawn_spinner(m_b->joined);
  ASSERT_TRUE(krex_test::wait_until([&] { return m_b->joined.load() == 1; }, 20s));
  child h = krex_test::spawn([&] {
    krex::tenant t{opts()};
    if (const int failed = take_every_descriptor()) return failed;
    try {
      krex::region r{t};
      const std::uint64_t before = m_b->spins.load();
      std::this_thread::sleep_for(200ms);
      const bool ran = m_b->spins.load() != before;
      r.exit();
      // Entered: the sibling must have been frozen, and not run.
      if (r.report().frozen_pids.size() != 1) return 5;
      return ran ? 6 : 0;
    } catch (const krex::error& e) {
      std::snprintf(m_b->contender_error, sizeof m_b->contender_error, "%s", e.what());
      const std::string w = e.what();
      return w.find("Too many open files") != std::string::npos &&
                     w.find("ulimit -n") != std::string::npos
                 ? 0
                 : 7;
    }
  });
  EXPECT_EQ(krex_test::exit_code(h.wait(30s)), 0) << m_b->contender_error;
  std::printf("[ emfile holder ] %s\n",
              m_b->contender_error[0] != '\0' ? m_b->contender_error : "entered, sibling frozen");
}
