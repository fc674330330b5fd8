// SPDX-License-Identifier: Apache-2.0
// krex::pool with real worker processes on the host backend: commands and
// results, tenants that persist across commands, regions of different
// workers mutually exclusive, a throwing handler, a crashing worker, a
// hanging command, a region holder killed by the timeout (its siblings must
// not stay frozen), shutdown with commands in flight, and every user error.

#include "cgroup_util.hpp"
#include "errors.hpp"
#include "krex_test.hpp"

#include <krex/pool.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <future>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using krex::pool_status;
using krex_test::shared;

namespace {

struct board {
  std::atomic<int> in_region;      ///< workers inside a region right now
  std::atomic<int> max_in_region;  ///< the most ever seen at once
  std::atomic<int> regions;        ///< regions completed
  std::atomic<int> holding;        ///< a worker holds a region and hangs
  krex_test::flag stop;            ///< cgroup2_test's teardown flag
};

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + ",";
  return s;
}

/// "pid:slot:calls": who ran a command, and how many commands this process's
/// tenant has run so far (a function-local static lives per process).
std::string whoami(krex::tenant& t) {
  static int calls = 0;
  ++calls;
  return std::to_string(::getpid()) + ":" + std::to_string(t.slot()) + ":" +
         std::to_string(calls) + ":" + (t.joined() ? "joined" : "left");
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ':') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

bool process_gone(int pid) {
  krex_test::reap_orphans();
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

/// start() of `p` (given a no-op "x" handler here) must throw at the pool
/// step, its message containing `what` and its hint `hint`.
void expect_start_refused(krex::pool& p, const std::string& what, const std::string& hint) {
  p.handle("x", [](krex::tenant&, const std::vector<std::string>&) { return std::string(); });
  const auto e = krex_test::error_of([&] { p.start(); }, "start() must fail: " + what);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->where(), krex::step::pool);
  EXPECT_NE(std::string(e->what()).find(what), std::string::npos) << e->what();
  EXPECT_NE(e->hint().find(hint), std::string::npos) << e->hint();
}

class pool_test : public ::testing::Test {
 protected:
  krex::pool_options popts(int workers) const {
    return krex::pool_options{}.workers(workers).tenant(m_seg.opts()).shutdown_grace(2s);
  }
  krex_test::scoped_segment m_seg;
};

TEST_F(pool_test, RunsCommandsOnPersistentTenantsFromSeveralThreads) {
  krex::pool p{popts(3)};
  p.handle("add", [](krex::tenant& t, const std::vector<std::string>& a) {
    long sum = 0;
    for (const auto& x : a) sum += std::atol(x.c_str());
    return std::to_string(sum) + "|" + whoami(t);
  });
  p.start();
  const std::vector<krex::pool_worker_stats> before = p.workers();
  ASSERT_EQ(before.size(), 3U);
  std::set<int> started_pids;
  for (const auto& w : before) {
    EXPECT_TRUE(w.alive);
    EXPECT_GT(w.pid, 0);
    started_pids.insert(w.pid);
  }
  EXPECT_EQ(started_pids.size(), 3U);

  // 3 harness threads submit 10 commands each; results come back by future.
  constexpr int per_thread = 10;
  std::vector<std::future<krex::pool_result>> futures[3];
  std::vector<std::thread> threads;
  for (int th = 0; th < 3; ++th)
    threads.emplace_back([&, th] {
      for (int i = 0; i < per_thread; ++i)
        futures[th].push_back(p.submit("add", {std::to_string(th * 100 + i), "1000"}));
    });
  for (auto& t : threads) t.join();

  std::map<int, std::vector<int>> calls_by_pid;  // pid -> its tenant's call counts
  std::map<int, std::set<std::string>> slots_by_pid;
  for (int th = 0; th < 3; ++th)
    for (int i = 0; i < per_thread; ++i) {
      const krex::pool_result r = futures[th][static_cast<std::size_t>(i)].get();
      ASSERT_TRUE(r.ok()) << r.error;
      const std::string v = r.get();
      const std::size_t bar = v.find('|');
      EXPECT_EQ(v.substr(0, bar), std::to_string(th * 100 + i + 1000));
      const std::vector<std::string> f = split(v.substr(bar + 1));
      ASSERT_EQ(f.size(), 4U) << v;
      EXPECT_EQ(std::atoi(f[0].c_str()), r.pid) << "the result names the worker that ran it";
      EXPECT_EQ(f[1], std::to_string(r.slot));
      EXPECT_EQ(f[3], "joined");
      EXPECT_TRUE(started_pids.count(r.pid)) << "no worker was replaced";
      EXPECT_GE(r.queue_ms, 0);
      EXPECT_GE(r.wall_ms, r.handler_ms);
      EXPECT_EQ(r.command, "add");
      calls_by_pid[r.pid].push_back(std::atoi(f[2].c_str()));
      slots_by_pid[r.pid].insert(f[1]);
    }
  // Each worker's tenant persisted: one slot per process, and its call count
  // ran 1..k across the commands it served.
  std::size_t total = 0;
  for (auto& [pid, calls] : calls_by_pid) {
    std::sort(calls.begin(), calls.end());
    for (std::size_t i = 0; i < calls.size(); ++i) EXPECT_EQ(calls[i], static_cast<int>(i + 1));
    EXPECT_EQ(slots_by_pid[pid].size(), 1U);
    total += calls.size();
  }
  EXPECT_EQ(total, 30U);
  EXPECT_GE(calls_by_pid.size(), 2U) << "commands were spread over the workers";
  std::uint64_t counted = 0;
  for (const auto& w : p.workers()) {
    counted += w.commands;
    EXPECT_EQ(w.commands, calls_by_pid[w.pid].size());
    EXPECT_EQ(w.failures, 0U);
    EXPECT_EQ(w.respawns, 0);
  }
  EXPECT_EQ(counted, 30U);
  p.shutdown();
  for (int pid : started_pids)
    EXPECT_TRUE(krex_test::wait_until([&] { return process_gone(pid); }, 5s)) << pid;
}

TEST_F(pool_test, RegionsOfDifferentWorkersAreMutuallyExclusive) {
  shared<board> b;
  krex::pool p{popts(4)};
  p.handle("timed", [&b](krex::tenant& t, const std::vector<std::string>&) {
    krex::region r{t};
    const int now = ++b->in_region;
    int seen = b->max_in_region.load();
    while (now > seen && !b->max_in_region.compare_exchange_weak(seen, now)) {
    }
    krex_test::spin_for(2'000'000);
    --b->in_region;
    ++b->regions;
    return std::string("ok");
  });
  p.start();
  std::vector<std::future<krex::pool_result>> fs;
  for (int i = 0; i < 24; ++i) fs.push_back(p.submit("timed"));
  std::set<int> pids;
  for (auto& f : fs) {
    const krex::pool_result r = f.get();
    EXPECT_TRUE(r.ok()) << r.error;
    pids.insert(r.pid);
  }
  EXPECT_EQ(b->regions.load(), 24);
  EXPECT_EQ(b->max_in_region.load(), 1) << "two workers were inside a region at once";
  EXPECT_GE(pids.size(), 2U) << "the regions came from several workers";
}

TEST_F(pool_test, ThrowingHandlerFailsItsCommandAndTheWorkerGoesOn) {
  krex::pool p{popts(1)};
  p.handle("throw", [](krex::tenant&, const std::vector<std::string>& a) -> std::string {
    throw std::runtime_error("bad candidate " + join(a));
  });
  p.handle("pid", [](krex::tenant&, const std::vector<std::string>&) {
    return std::to_string(::getpid());
  });
  p.start();
  const krex::pool_result ok1 = p.run("pid");
  const krex::pool_result bad = p.run("throw", {"x7"});
  EXPECT_EQ(bad.status, pool_status::failed);
  EXPECT_NE(bad.error.find("bad candidate x7,"), std::string::npos) << bad.error;
  EXPECT_EQ(bad.pid, ok1.pid);
  try {
    (void)bad.get();
    ADD_FAILURE() << "get() of a failed command must throw";
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), krex::step::pool);
    EXPECT_NE(std::string(e.what()).find("bad candidate"), std::string::npos) << e.what();
  }
  const krex::pool_result ok2 = p.run("pid");
  ASSERT_TRUE(ok2.ok()) << ok2.error;
  EXPECT_EQ(ok2.get(), ok1.get()) << "the same worker process ran on";
  EXPECT_EQ(p.workers()[0].respawns, 0);
  EXPECT_EQ(p.workers()[0].failures, 1U);
}

TEST_F(pool_test, RecycleOnErrorReplacesTheWorkerAfterAFailure) {
  krex::pool p{popts(1).recycle_on_error(true)};
  p.handle("throw", [](krex::tenant&, const std::vector<std::string>&) -> std::string {
    throw std::runtime_error("sticky device error");
  });
  p.handle("pid", [](krex::tenant&, const std::vector<std::string>&) {
    return std::to_string(::getpid());
  });
  p.start();
  const std::string first = p.run("pid").get();
  EXPECT_EQ(p.run("throw").status, pool_status::failed);
  const krex::pool_result next = p.run("pid");
  ASSERT_TRUE(next.ok()) << next.error;
  EXPECT_NE(next.get(), first) << "a fresh process runs after a failed command";
  EXPECT_EQ(p.workers()[0].respawns, 1);
}

TEST_F(pool_test, CrashingWorkerIsRespawnedAndOnlyItsCommandFails) {
  shared<board> b;
  krex::pool p{popts(2)};
  p.handle("abort", [&b](krex::tenant&, const std::vector<std::string>&) -> std::string {
    // Crash only once the slow command runs in the other worker.
    krex_test::wait_until([&] { return b->holding.load() == 1; }, 5s);
    std::abort();
  });
  p.handle("slow", [&b](krex::tenant&, const std::vector<std::string>&) {
    b->holding.store(1);
    std::this_thread::sleep_for(300ms);
    return std::to_string(::getpid());
  });
  p.start();
  auto slow = p.submit("slow");
  auto crash = p.submit("abort");
  const krex::pool_result c = crash.get();
  EXPECT_EQ(c.status, pool_status::crashed);
  EXPECT_NE(c.error.find("SIGABRT"), std::string::npos) << c.error;
  EXPECT_NE(c.error.find(std::to_string(c.pid)), std::string::npos) << c.error;
  const krex::pool_result s = slow.get();
  ASSERT_TRUE(s.ok()) << s.error;
  EXPECT_NE(s.pid, c.pid);
  // The crashed place comes back with a new process; both run commands.
  ASSERT_TRUE(krex_test::wait_until(
      [&] {
        const auto ws = p.workers();
        return std::all_of(ws.begin(), ws.end(), [](const auto& w) { return w.alive; });
      },
      10s));
  int respawns = 0;
  for (const auto& w : p.workers()) {
    respawns += w.respawns;
    EXPECT_NE(w.pid, c.pid);
    if (w.respawns == 1) {
      EXPECT_NE(w.last_error.find("SIGABRT"), std::string::npos) << w.last_error;
    }
  }
  EXPECT_EQ(respawns, 1);
  EXPECT_TRUE(process_gone(c.pid));
  std::vector<std::future<krex::pool_result>> fs;
  for (int i = 0; i < 6; ++i) fs.push_back(p.submit("slow"));
  for (auto& f : fs) EXPECT_TRUE(f.get().ok());
}

TEST_F(pool_test, HangingCommandTimesOutAndItsWorkerIsReplaced) {
  krex::pool p{popts(1).timeout(300ms)};
  p.handle("hang", [](krex::tenant&, const std::vector<std::string>&) -> std::string {
    for (;;) ::pause();
  });
  p.handle("pid", [](krex::tenant&, const std::vector<std::string>&) {
    return std::to_string(::getpid());
  });
  p.start();
  const krex::pool_result h = p.run("hang");
  EXPECT_EQ(h.status, pool_status::timed_out);
  EXPECT_NE(h.error.find("300 ms"), std::string::npos) << h.error;
  EXPECT_GE(h.wall_ms, 300);
  const krex::pool_result next = p.run("pid");
  ASSERT_TRUE(next.ok()) << next.error;
  EXPECT_NE(next.pid, h.pid);
  EXPECT_TRUE(krex_test::wait_until([&] { return process_gone(h.pid); }, 5s));
  EXPECT_EQ(p.workers()[0].respawns, 1);
}

TEST_F(pool_test, ShutdownWithCommandsInFlightIsBoundedAndLeavesNoProcess) {
  std::vector<int> pids;
  std::vector<std::future<krex::pool_result>> fs;
  shared<board> b;
  {
    krex::pool p{popts(2).shutdown_grace(200ms)};
    p.handle("hang", [&b](krex::tenant&, const std::vector<std::string>&) -> std::string {
      ++b->regions;  // started
      for (;;) ::pause();
    });
    p.start();
    for (const auto& w : p.workers()) pids.push_back(w.pid);
    for (int i = 0; i < 5; ++i) fs.push_back(p.submit("hang"));
    // Two in flight, three queued.
    ASSERT_TRUE(krex_test::wait_until([&] { return b->regions.load() == 2; }, 5s));
  }  // the destructor shuts down: grace, close, kill
  int cancelled_in_flight = 0, cancelled_queued = 0;
  for (auto& f : fs) {
    ASSERT_EQ(f.wait_for(0s), std::future_status::ready);
    const krex::pool_result r = f.get();
    EXPECT_EQ(r.status, pool_status::cancelled);
    (r.worker >= 0 ? cancelled_in_flight : cancelled_queued)++;
  }
  EXPECT_EQ(cancelled_in_flight, 2);
  EXPECT_EQ(cancelled_queued, 3);
  for (int pid : pids)
    EXPECT_TRUE(krex_test::wait_until([&] { return process_gone(pid); }, 5s)) << pid;
}

TEST_F(pool_test, UserErrorsAreClearKrexErrors) {
  const auto expect_error = [](auto&& fn, krex::step s, const std::string& text) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected one containing: " << text;
    } catch (const krex::error& e) {
      EXPECT_EQ(e.where(), s) << e.what();
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
      EXPECT_FALSE(e.hint().empty()) << e.what();
    }
  };
  expect_error([] { krex::pool_options{}.workers(0); }, krex::step::options, "1..256");
  expect_error([] { krex::pool_options{}.timeout(-1ms); }, krex::step::options, "timeout");
  expect_error([] { krex::pool_options{}.start_retries(-1); }, krex::step::options, "start_retries");

  krex::pool empty{popts(1)};
  expect_error([&] { empty.start(); }, krex::step::pool, "no handler registered");
  expect_error([&] { (void)empty.submit("x"); }, krex::step::pool, "before start()");

  krex::pool p{popts(1)};
  p.handle("echo", [](krex::tenant&, const std::vector<std::string>& a) { return join(a); });
  expect_error([&] { p.handle("null", nullptr); }, krex::step::pool, "\"null\" is empty");
  expect_error([&] { p.handle("", [](krex::tenant&, const std::vector<std::string>&) {
                       return std::string();
                     }); },
               krex::step::pool, "empty name");
  expect_error([&] { p.handle("echo", [](krex::tenant&, const std::vector<std::string>&) {
                       return std::string();
                     }); },
               krex::step::pool, "registered twice");
  p.start();
  expect_error([&] { (void)p.submit("ech0"); }, krex::step::pool, "registered: echo");
  expect_error([&] { p.handle("late", [](krex::tenant&, const std::vector<std::string>&) {
                       return std::string();
                     }); },
               krex::step::pool, "after start()");
  expect_error([&] { p.start(); }, krex::step::pool, "twice");
  EXPECT_EQ(p.run("echo", {"a", "b"}).get(), "a,b,");
  p.shutdown();
  expect_error([&] { (void)p.submit("echo"); }, krex::step::pool, "after shutdown()");
}

TEST_F(pool_test, AWorkerThatCannotJoinFailsStartWithItsError) {
  // Device 3 of a host backend with one device: every worker's join fails.
  krex::pool p{krex::pool_options{}.workers(2).tenant(m_seg.opts().device(3))};
  expect_start_refused(p, "out of range", "CUDA");
}

TEST_F(pool_test, OnWorkerStartRunsOnceInEveryWorkerBeforeItsCommands) {
  static int prepared = 0;  // per process: set by the hook, read by the handler
  krex::pool p{popts(2)};
  p.on_worker_start([](krex::tenant& t) { (void)t.slot();
    ++prepared; });
  p.handle("prepared", [](krex::tenant&, const std::vector<std::string>&) {
    return std::to_string(prepared);
  });
  p.start();
  std::vector<std::future<krex::pool_result>> fs;
  for (int i = 0; i < 6; ++i) fs.push_back(p.submit("prepared"));
  for (auto& f : fs) EXPECT_EQ(f.get().get(), "1") << "the hook ran exactly once in this worker";
  EXPECT_EQ(prepared, 0) << "the hook runs in the workers, not in the harness";

  krex::pool bad{popts(1)};
  bad.on_worker_start([](krex::tenant&) { throw std::runtime_error("no such module: k.cubin"); });
  bad.handle("x", [](krex::tenant&, const std::vector<std::string>&) { return std::string(); });
  const auto e = krex_test::error_of([&] { bad.start(); }, "start() must fail");
  ASSERT_TRUE(e);
  EXPECT_NE(std::string(e->what()).find("no such module: k.cubin"), std::string::npos) << e->what();
}

// Last of the host-only tests: this process joins a tenant (and keeps its agent thread).
TEST_F(pool_test, StartInAProcessThatHoldsATenantIsRefused) {
  krex::tenant t{m_seg.opts()};
  krex::pool p{popts(1)};
  expect_start_refused(p, "already joined", "does not survive fork");
}

// With real cgroup v2 freezing: a worker that holds a region (its sibling
// frozen) and hangs is killed by the timeout; the guardian thaws the
// sibling, which then runs regions; a pool destroyed while a worker holds a
// region leaves no leaf frozen and no process in the tree.
class pool_cgroup : public krex_test::cgroup2_test<board> {
 protected:
  pool_cgroup() : cgroup2_test("krex-pool") {}
  krex::pool_options popts(int workers) const {
    return krex::pool_options{}.workers(workers).tenant(opts()).shutdown_grace(500ms);
  }
  bool leaf_frozen(std::uint32_t slot) const {
    return krex_test::read_text(leaf(slot) + "/cgroup.events").find("frozen 1") !=
           std::string::npos;
  }
  bool tree_quiet() const {
    for (int s = 0; s < 64; ++s) {
      const std::string l = leaf(static_cast<std::uint32_t>(s));
      if (krex_test::read_text(l + "/cgroup.events").find("frozen 1") != std::string::npos)
        return false;
      if (!krex_test::read_text(l + "/cgroup.procs").empty()) return false;
    }
    return true;
  }
  void add_handlers(krex::pool& p) {
    board* b = &*m_b;
    p.handle("hold", [b](krex::tenant& t, const std::vector<std::string>&) -> std::string {
      krex::region r{t};
      b->holding.store(1);
      for (;;) ::pause();
    });
    p.handle("region", [b](krex::tenant& t, const std::vector<std::string>&) {
      krex::region r{t};
      ++b->regions;
      return r.report().level();
    });
  }
};

TEST_F(pool_cgroup, KilledRegionHolderDoesNotLeaveItsSiblingFrozen) {
  krex::pool p{popts(2).timeout(1500ms)};
  add_handlers(p);
  p.start();
  auto hold = p.submit("hold");
  ASSERT_TRUE(krex_test::wait_until([&] { return m_b->holding.load() == 1; }, 5s));
  // The idle sibling is frozen while the holder is in its region.
  const auto ws = p.workers();
  std::uint32_t holder_slot = 0, sibling_slot = 0;
  ASSERT_TRUE(krex_test::wait_until(
      [&] {
        for (const auto& w : p.workers())
          if (leaf_frozen(w.slot)) {
            sibling_slot = w.slot;
            return true;
          }
        return false;
      },
      5s))
      << "the holder's sibling was never frozen: the test would prove nothing";
  for (const auto& w : ws)
    if (w.slot != sibling_slot) holder_slot = w.slot;
  EXPECT_FALSE(leaf_frozen(holder_slot));

  const krex::pool_result h = hold.get();
  EXPECT_EQ(h.status, pool_status::timed_out) << h.error;
  EXPECT_EQ(h.slot, holder_slot);
  EXPECT_TRUE(krex_test::wait_until([&] { return !leaf_frozen(sibling_slot); }, 5s))
      << "the killed holder's sibling stayed frozen";
  // Both places run regions again: the thawed sibling and the replacement.
  std::vector<std::future<krex::pool_result>> fs;
  for (int i = 0; i < 4; ++i) fs.push_back(p.submit("region"));
  for (auto& f : fs) {
    const krex::pool_result r = f.get();
    ASSERT_TRUE(r.ok()) << r.error;
    EXPECT_NE(r.value.find("freeze(cgroup2)"), std::string::npos) << r.value;
  }
  EXPECT_EQ(m_b->regions.load(), 4);
}

TEST_F(pool_cgroup, DestroyedWhileAWorkerHoldsARegionLeavesNothingFrozenOrRunning) {
  std::vector<int> pids;
  {
    krex::pool p{popts(3)};
    add_handlers(p);
    p.start();
    for (const auto& w : p.workers()) pids.push_back(w.pid);
    auto hold = p.submit("hold");
    for (int i = 0; i < 3; ++i) (void)p.submit("region");  // one waits for the lock, two queue
    ASSERT_TRUE(krex_test::wait_until([&] { return m_b->holding.load() == 1; }, 5s));
    ASSERT_TRUE(krex_test::wait_until(
        [&] {
          for (const auto& w : p.workers())
            if (leaf_frozen(w.slot)) return true;
          return false;
        },
        5s));
  }
  for (int pid : pids)
    EXPECT_TRUE(krex_test::wait_until([&] { return process_gone(pid); }, 5s)) << pid;
  EXPECT_TRUE(krex_test::wait_until([&] { return tree_quiet(); }, 5s))
      << "a leaf stayed frozen or a process stayed in the tree";
}

}  // namespace
