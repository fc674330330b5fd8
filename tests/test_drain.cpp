// SPDX-License-Identifier: Apache-2.0
// Drain details with a backend whose sync is slow and counted: the dirty flag,
// drain deadlines, contended regions, lock timeouts and a dead holder.

#include <krex/region.hpp>

#include <gtest/gtest.h>

#include "errors.hpp"
#include "holder.hpp"
#include "krex_test.hpp"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

using namespace std::chrono_literals;
using krex_test::child;
using krex_test::scoped_segment;
using krex_test::shared;

namespace {

struct sync_log {
  std::atomic<int> syncs;
  std::atomic<int> ready;
  krex_test::flag stop;
  krex_test::flag busy;
  krex_test::flag go;
  std::atomic<std::uint64_t> progress;
};

// Set in each process before its tenant joins (children inherit the pointer).
sync_log* g_log = nullptr;

/// The host backend, but sync() takes 300 ms and is counted in shared memory.
struct slow_sync_backend : krex::backend::host {
  using host::host;
  void sync() {
    std::this_thread::sleep_for(300ms);
    g_log->syncs.fetch_add(1);
  }
};
using slow_tenant = krex::basic_tenant<slow_sync_backend>;
using slow_region = krex::basic_region<slow_sync_backend>;

/// The message of the drain-step error that a region of `t` must fail with;
/// "" and a test failure if it does not fail.
std::string drain_failure(krex::tenant& t) {
  const auto e = krex_test::error_of([&] { krex::region r{t}; }, "region did not fail");
  if (!e) return {};
  EXPECT_EQ(e->where(), krex::step::drain);
  return e->what();
}

}  // namespace

// A sibling that only computes on the CPU (never submitted) acks at once and
// never touches its backend; one that submitted syncs exactly once.
TEST(Drain, CpuOnlySiblingAcksWithoutSync) {
  scoped_segment seg;
  shared<sync_log> log;
  g_log = &*log;
  // Both children are forked before this process starts any thread.
  child cpu_only = krex_test::spawn([&] {
    slow_tenant t{seg.opts()};
    log->ready.fetch_add(1);
    while (!log->stop.up()) log->progress.fetch_add(1);  // "compiling"
    return 0;
  });
  child submitter = krex_test::spawn([&] {
    slow_tenant t2{seg.opts()};
    log->ready.fetch_add(1);
    log->go.child_wait();
    t2.submit([] {});
    log->ready.fetch_add(1);
    log->stop.child_wait();
    return 0;
  });
  ASSERT_TRUE(krex_test::wait_until([&] { return log->ready.load() == 2; }, 30s));
  slow_tenant t{seg.opts()};
  {
    slow_region r{t};
    EXPECT_EQ(r.report().siblings_seen, 2U);
    EXPECT_EQ(r.report().siblings_drained, 2U);
    EXPECT_LT(r.report().drain_ns, 300'000'000U) << "a sibling that submitted nothing synced";
  }
  EXPECT_EQ(log->syncs.load(), 0);
  log->go.raise();
  ASSERT_TRUE(krex_test::wait_until([&] { return log->ready.load() == 3; }, 30s));
  {
    slow_region r{t};
    EXPECT_EQ(r.report().siblings_drained, 2U);
    EXPECT_GE(r.report().drain_ns, 300'000'000U) << "the drain did not wait for the sync";
  }
  EXPECT_EQ(log->syncs.load(), 1);
  {
    slow_region r{t};  // nothing submitted since: no second sync
  }
  EXPECT_EQ(log->syncs.load(), 1);
  log->stop.raise();
  EXPECT_EQ(krex_test::exit_code(cpu_only.wait(30s)), 0);
  EXPECT_EQ(krex_test::exit_code(submitter.wait(30s)), 0);
}

// A sibling stuck in a submission past the drain deadline fails the region
// clearly, or with allow_contended makes it proceed flagged. Either way the
// gate is lowered and the lock released afterwards.
TEST(Drain, DeadlineFailsOrFlagsContended) {
  scoped_segment seg;
  shared<sync_log> log;
  g_log = &*log;
  child stuck = krex_test::spawn([&] {
    krex::tenant t{seg.opts()};
    t.submit([&] {
      log->busy.raise();
      log->stop.child_wait();
    });
    log->go.child_wait();
    t.submit([&] { log->progress.fetch_add(1); });  // must pass: no gate left raised
    return 0;
  });
  ASSERT_TRUE(log->busy.wait(30s));
  krex::tenant strict{seg.opts().drain_deadline(100ms)};
  const auto contended_before = krex::detail::member_of(strict).dev->contended.load();
  {
    const std::string what = drain_failure(strict);
    ASSERT_FALSE(what.empty());
    EXPECT_NE(what.find(std::to_string(stuck.pid())), std::string::npos) << what;
    EXPECT_NE(what.find("KREX_DRAIN_DEADLINE_MS"), std::string::npos) << what;
    // What the laggard was doing: inside its submission.
    EXPECT_NE(what.find("pid " + std::to_string(stuck.pid()) +
                        ": inside a gated call (1 open); process state "),
              std::string::npos)
        << what;
  }
  EXPECT_EQ(krex::detail::member_of(strict).dev->gate.load() % 2, 0U) << "gate left raised";
  // The drain step counts a contended region, not a refused one.
  EXPECT_EQ(krex::detail::member_of(strict).dev->contended.load(), contended_before);
  strict.leave();
  krex::tenant lenient{seg.opts().drain_deadline(100ms).allow_contended(true)};
  EXPECT_EQ(krex::detail::member_of(lenient).dev->contended.load(), contended_before);
  {
    krex::region r{lenient};
    EXPECT_TRUE(r.report().contended);
    EXPECT_FALSE(r.report().drained);
    ASSERT_EQ(r.report().undrained_pids.size(), 1U);
    EXPECT_EQ(r.report().undrained_pids[0], stuck.pid());
    EXPECT_EQ(r.report().level(), "gate+drain(contended)");
    const auto& notes = r.report().notes;
    EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [&](const std::string& n) {
      return n.rfind("drain: did not drain in time (pid " + std::to_string(stuck.pid()) +
                         ": inside a gated call",
                     0) == 0;
    })) << "no drain note";
    EXPECT_EQ(krex::detail::member_of(lenient).dev->contended.load(), contended_before + 1);
  }
  log->stop.raise();
  log->go.raise();
  EXPECT_EQ(krex_test::exit_code(stuck.wait(30s)), 0);
  EXPECT_EQ(log->progress.load(), 1U);
}

// A drain that misses its deadline says what the laggard was doing: here a
// sibling stopped (SIGSTOP, as a debugger or ^Z would) after it submitted, so
// its agent never synchronizes that work.
TEST(Drain, DeadlineSaysWhatTheSiblingWasDoing) {
  scoped_segment seg;
  shared<sync_log> log;
  g_log = &*log;
  krex_test::member stopped{seg.opts(), [&](krex::tenant& t) {
    t.submit([&] { log->progress.fetch_add(1); });  // device work since its last drain: dirty
  }};
  ASSERT_TRUE(stopped.ready(30s));
  ASSERT_EQ(::kill(stopped.pid(), SIGSTOP), 0);
  ASSERT_TRUE(krex_test::wait_until(
      [&] { return krex::detail::read_proc_stat(stopped.pid()).state == 'T'; }, 10s));
  {
    krex::tenant h{seg.opts().drain_deadline(200ms)};
    const std::string what = drain_failure(h);
    EXPECT_NE(what.find("(pid " + std::to_string(stopped.pid()) +
                        ": device work its agent has not synchronized; process state T) did not "
                        "drain within 200 ms"),
              std::string::npos)
        << what;
  }
  ASSERT_EQ(::kill(stopped.pid(), SIGCONT), 0);
  EXPECT_EQ(stopped.finish(30s), 0);
}

// Waiting longer than lock_wait for the region lock throws; the abandoned
// ticket does not block the queue afterwards.
TEST(Drain, LockWaitTimesOutAndQueueMovesOn) {
  scoped_segment seg;
  krex_test::holder holder{seg.opts()};
  ASSERT_TRUE(holder.ready(30s));
  krex::tenant impatient{seg.opts().lock_wait(100ms)};
  try {
    krex::region r{impatient};
    FAIL() << "region lock did not time out";
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), krex::step::lock);
    EXPECT_NE(std::string(e.what()).find(std::to_string(holder.pid())), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(holder.finish(30s), 0);
  krex::tenant next{seg.opts().lock_wait(5s)};
  krex::region r{next};  // must not wait behind the abandoned ticket
  EXPECT_LT(r.report().lock_ns, 1'000'000'000U);
}

// A holder killed inside its region: parked submitters recover the gate and
// the next region is granted (the dead ticket is skipped).
TEST(Drain, DeadHolderIsRecovered) {
  scoped_segment seg;
  shared<sync_log> log;
  krex_test::holder holder{seg.opts()};  // killed inside its region
  ASSERT_TRUE(holder.ready(30s));
  ::kill(holder.pid(), SIGKILL);
  (void)holder.wait(5s);
  krex::tenant t{seg.opts().lock_wait(5s)};
  t.submit([&] { log->progress.fetch_add(1); });  // parks, then finds the holder dead
  EXPECT_EQ(log->progress.load(), 1U);
  krex::region r{t};
  EXPECT_TRUE(r.report().drained);
  EXPECT_GE(krex::detail::member_of(t).dev->recoveries.load(), 1U);
}
