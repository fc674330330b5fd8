// SPDX-License-Identifier: Apache-2.0
// Split segments (issue 20): two harnesses on one device whose segments
// differ (another KREX_SEGMENT, another KREX_SHM_DIR) do not drain or freeze
// each other. They find each other through the node-wide device registry
// (detail/device/device_registry.hpp), whatever their segment settings, and a
// region reports the other segment as a warning and a "-split(...)" level.
// Real processes, real segments, a registry directory of this test's own.

#include "krex_test.hpp"

#include <krex/detail/device/device_registry.hpp>
#include <krex/region.hpp>
#include <krex/report.hpp>

#include <gtest/gtest.h>

#include <sched.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
using krex_test::child;
using krex_test::scoped_segment;
using krex_test::shared;

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

struct board {
  std::atomic<int> joined;
  std::atomic<int> stop;
};

// A registry of this test's own (set before any tenant of the test exists;
// children inherit it), removed with everything in it at the end.
class split : public ::testing::Test {
 protected:
  /// The board of the test's children (joined counts, stop).
  shared<board> b;

  void SetUp() override {
    m_registry = "/dev/shm/" + krex_test::unique_name("krex-registry");
    ::setenv("KREX_DEVICE_REGISTRY", m_registry.c_str(), 1);  // no tenant threads run yet
  }
  void TearDown() override {
    ::unsetenv("KREX_DEVICE_REGISTRY");
    (void)std::system(("rm -rf '" + m_registry + "'").c_str());
  }
  /// A tenant of `o` in a child process, until told to stop.
  child tenant_in_child(const krex::options& o, shared<board>& bd, const char* shm_dir = nullptr) {
    return krex_test::spawn([&bd, o, shm_dir] {
      if (shm_dir != nullptr) ::setenv("KREX_SHM_DIR", shm_dir, 1);
      krex::tenant t{o};
      bd->joined++;
      while (bd->stop.load() == 0) std::this_thread::sleep_for(1ms);
      return 0;
    });
  }
  /// A tenant_in_child of segment `first` and one of segment `second`, in that order.
  std::pair<child, child> one_tenant_in_each(const scoped_segment& first,
                                             const scoped_segment& second, shared<board>& bd) {
    child c = tenant_in_child(first.opts(), bd);
    return {std::move(c), tenant_in_child(second.opts(), bd)};
  }
  /// The names in directory `dir` (not "." and "..").
  static std::vector<std::string> names_in(const std::string& dir) {
    std::vector<std::string> out;
    if (DIR* d = ::opendir(dir.c_str())) {
      while (const dirent* e = ::readdir(d))
        if (e->d_name[0] != '.') out.emplace_back(e->d_name);
      ::closedir(d);
    }
    return out;
  }
  /// The device's directory in this test's registry (there is one device key).
  std::string device_dir() const {
    const std::vector<std::string> keys = names_in(m_registry);
    return keys.size() == 1 ? m_registry + "/" + keys[0] : std::string();
  }
  /// Entries in the device's directory whose name ends in "-<pid>".
  std::size_t entries_of(int pid) const {
    const std::string tail = "-" + std::to_string(pid);
    std::size_t k = 0;
    for (const std::string& n : names_in(device_dir()))
      if (n.size() > tail.size() && n.compare(n.size() - tail.size(), tail.size(), tail) == 0) ++k;
    return k;
  }
  /// Plants entry `name` with `text` in the device's directory, its mtime
  /// `age_s` seconds in the past. Its file owner: `owner` (-1: ours).
  bool plant(const std::string& name, const std::string& text, int age_s, int owner = -1) const {
    const std::string path = device_dir() + "/" + name;
    {
      std::ofstream f(path);
      f << text;
      if (!f) return false;
    }
    if (owner >= 0 && ::chown(path.c_str(), static_cast<uid_t>(owner), static_cast<gid_t>(-1)) != 0)
      return false;
    timespec t[2];
    ::clock_gettime(CLOCK_REALTIME, &t[0]);
    t[0].tv_sec -= age_s;
    t[1] = t[0];
    return ::utimensat(AT_FDCWD, path.c_str(), t, 0) == 0;
  }
  std::string m_registry;
};

}  // namespace

TEST_F(split, another_segment_name_on_the_device_is_reported) {
  scoped_segment mine, theirs;
  child other = tenant_in_child(theirs.opts(), b);
  ASSERT_TRUE(krex_test::wait_until([&] { return b->joined.load() == 1; }, 20s));
  krex::tenant t{mine.opts()};
  const std::string their_path = krex::detail::segment_id_of(theirs.opts()).path();
  {
    krex::region r{t};
    const krex::region_report& rep = r.report();
    EXPECT_EQ(rep.other_segments, std::vector<std::string>{their_path});
    EXPECT_EQ(rep.level(), "gate+drain-split(1 other segment)") << "the level must say so";
    EXPECT_EQ(rep.siblings_seen, 0U) << "the other segment's tenant is no sibling";
    ASSERT_EQ(rep.warnings.size(), 1U) << rep;
    EXPECT_TRUE(contains(rep.warnings[0], their_path)) << rep.warnings[0];
    EXPECT_TRUE(contains(rep.warnings[0], "pid " + std::to_string(other.pid()))) << rep.warnings[0];
    EXPECT_TRUE(contains(rep.warnings[0], "KREX_SEGMENT")) << rep.warnings[0];
    EXPECT_TRUE(contains(krex::to_json(rep), "\"other_segments\":[\"" + their_path + "\"]"));
    EXPECT_TRUE(contains(krex::to_json(rep), "\"level\":\"gate+drain-split(1 other segment)\""));
  }
  // Gone (left normally): no longer reported.
  b->stop.store(1);
  EXPECT_EQ(krex_test::exit_code(other.wait(10s)), 0);
  {
    krex::region r{t};
    EXPECT_TRUE(r.report().other_segments.empty());
    EXPECT_EQ(r.report().level(), "gate+drain");
    EXPECT_TRUE(r.report().warnings.empty());
  }
}

// A sibling of the same segment is a sibling, not a split; a tenant killed
// without leaving is not reported (its entry names a dead process).
TEST_F(split, siblings_and_dead_tenants_are_not_splits) {
  scoped_segment mine, theirs;
  auto [sibling, killed] = one_tenant_in_each(mine, theirs, b);
  ASSERT_TRUE(krex_test::wait_until([&] { return b->joined.load() == 2; }, 20s));
  ::kill(killed.pid(), SIGKILL);
  ASSERT_TRUE(killed.wait(5s).has_value());
  krex::tenant t{mine.opts()};
  {
    krex::region r{t};
    EXPECT_EQ(r.report().siblings_seen, 1U);
    EXPECT_TRUE(r.report().other_segments.empty())
        << "reported: " << (r.report().other_segments.empty() ? "" : r.report().other_segments[0]);
    EXPECT_EQ(r.report().level(), "gate+drain");
  }
  b->stop.store(1);
  EXPECT_EQ(krex_test::exit_code(sibling.wait(10s)), 0);
}

// The same KREX_SEGMENT in another KREX_SHM_DIR: another segment file, found
// by device all the same.
TEST_F(split, same_name_in_another_shm_dir_is_reported) {
  scoped_segment mine;
  const std::string dir = "/dev/shm/" + krex_test::unique_name("krex-shmdir");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  child other = tenant_in_child(mine.opts(), b, dir.c_str());
  ASSERT_TRUE(krex_test::wait_until([&] { return b->joined.load() == 1; }, 20s));
  krex::tenant t{mine.opts()};
  {
    krex::region r{t};
    ASSERT_EQ(r.report().other_segments.size(), 1U);
    EXPECT_EQ(r.report().other_segments[0].rfind(dir + "/", 0), 0U) << r.report().other_segments[0];
    EXPECT_EQ(r.report().level(), "gate+drain-split(1 other segment)");
  }
  b->stop.store(1);
  EXPECT_EQ(krex_test::exit_code(other.wait(10s)), 0);
  (void)std::system(("rm -rf '" + dir + "'").c_str());
}

// A registry directory that another user could have planted (writable by
// others, not sticky) is not used: the tenant says the check is off.
TEST_F(split, an_unsafe_registry_turns_the_check_off_with_a_note) {
  ASSERT_EQ(::mkdir(m_registry.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(m_registry.c_str(), 0777), 0);  // no sticky bit
  scoped_segment mine;
  krex::tenant t{mine.opts()};
  const auto& notes = t.protection_notes();
  EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [&](const std::string& n) {
    return contains(n, "split segments: not checked") && contains(n, m_registry);
  }));
}

// Issue 38 (a new user's findings): the earlier holder of a split segment
// (in its body when the other segment's tenant came) saw that tenant's load
// on its reserved CPUs and blamed "a non-krex process". At exit it lists the
// registry again: the other segment is named (warning, other_segments,
// level), and so is it in the reserved-CPU warning.
TEST_F(split, a_segment_that_comes_during_the_body_is_named_at_exit) {
  scoped_segment mine, theirs;
  krex::tenant t{mine.opts().pin(true).confine(true)};
  const std::string their_path = krex::detail::segment_id_of(theirs.opts()).path();
  krex::region_report rep;
  {
    krex::region r{t};
    ASSERT_TRUE(r.report().other_segments.empty()) << "nobody else was there at entry";
    // Joins during the body, then spins where the body's thread is pinned.
    child other = krex_test::spawn([&] {
      krex::tenant o{theirs.opts()};
      b->joined++;
      while (b->stop.load() == 0) {
      }
      return 0;
    });
    ASSERT_TRUE(krex_test::wait_until([&] { return b->joined.load() == 1; }, 20s));
    if (!t.reserved_cpus().empty()) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(t.reserved_cpus().front(), &set);
      EXPECT_EQ(::sched_setaffinity(other.pid(), sizeof set, &set), 0);
    }
    krex_test::spin_for(400'000'000);
    r.exit();
    rep = r.report();
    b->stop.store(1);
    EXPECT_EQ(krex_test::exit_code(other.wait(10s)), 0);
  }
  EXPECT_EQ(rep.other_segments, std::vector<std::string>{their_path}) << rep;
  EXPECT_EQ(rep.level().find("-split(1 other segment)"), rep.level().size() - 23) << rep.level();
  const auto named = std::find_if(rep.warnings.begin(), rep.warnings.end(), [&](const auto& w) {
    return contains(w, "another krex segment came to this device during the body: " + their_path);
  });
  EXPECT_NE(named, rep.warnings.end()) << rep;
  // Its load on the reserved CPU: blamed on it, not on "a non-krex process".
  if (rep.pinned && rep.reserved_foreign_ns > 50'000'000LL) {
    EXPECT_TRUE(std::any_of(rep.warnings.begin(), rep.warnings.end(),
                            [](const std::string& w) { return contains(w, "reserved CPUs"); }))
        << rep;
  }
  for (const std::string& w : rep.warnings)
    if (contains(w, "reserved CPUs")) {
      EXPECT_TRUE(contains(w, "another krex segment's tenants (" + their_path)) << w;
      EXPECT_FALSE(contains(w, "body: a non-krex process")) << w;
    }
}

// Issue 38: entries of killed tenants are removed, whichever segment they
// name (the soak left 273-509 behind): by the next scan of a tenant of the
// same user, whatever segment it is in.
TEST_F(split, entries_of_killed_tenants_are_swept_by_the_next_scan) {
  scoped_segment mine, theirs;
  auto [same, other] = one_tenant_in_each(mine, theirs, b);
  ASSERT_TRUE(krex_test::wait_until([&] { return b->joined.load() == 2; }, 20s));
  const int same_pid = same.pid(), other_pid = other.pid();
  ASSERT_EQ(entries_of(same_pid), 1U);
  ASSERT_EQ(entries_of(other_pid), 1U);
  ::kill(same_pid, SIGKILL);
  ::kill(other_pid, SIGKILL);
  ASSERT_TRUE(same.wait(5s).has_value());
  ASSERT_TRUE(other.wait(5s).has_value());
  krex::tenant t{mine.opts()};
  {
    krex::region r{t};
    EXPECT_TRUE(r.report().other_segments.empty()) << r.report();
  }
  EXPECT_EQ(entries_of(same_pid), 0U) << "a killed sibling's entry (same segment) is left behind";
  EXPECT_EQ(entries_of(other_pid), 0U) << "a killed tenant's entry (other segment) is left behind";
}

// Issue 38: the guardian removes its segment's dead tenants' entries, so a
// node whose last tenant was killed keeps none.
TEST_F(split, the_guardian_sweeps_entries_of_its_killed_tenants) {
  scoped_segment mine;
  child killed = tenant_in_child(mine.opts(), b);
  ASSERT_TRUE(krex_test::wait_until([&] { return b->joined.load() == 1; }, 20s));
  const int pid = killed.pid();
  ASSERT_EQ(entries_of(pid), 1U);
  ::kill(pid, SIGKILL);
  ASSERT_TRUE(killed.wait(5s).has_value());
  // Nobody scans: only the guardian (it reaps, then leaves, sweeping).
  EXPECT_TRUE(krex_test::wait_until([&] { return entries_of(pid) == 0; }, 15s))
      << "the killed tenant's registry entry is still there";
}

// Issue 38: an entry whose liveness cannot be judged (another pid namespace)
// counts only while its tenant refreshes it: one from a pid namespace that
// is gone no longer splits every later region.
TEST_F(split, an_unjudgeable_entry_counts_only_while_it_is_refreshed) {
  scoped_segment mine;
  krex::tenant t{mine.opts()};
  const std::string uid = std::to_string(::geteuid());
  // ns 1 is no pid namespace of this node; pid 999999 means nothing there.
  ASSERT_TRUE(plant("1-11-999999", "999999 5 " + uid + " 1\n/dev/shm/gone-segment\n", 60));
  ASSERT_TRUE(plant("1-12-999998", "999998 5 " + uid + " 1\n/dev/shm/live-segment\n", 0));
  krex::region r{t};
  EXPECT_EQ(r.report().other_segments, std::vector<std::string>{"/dev/shm/live-segment"})
      << r.report();
}

// Issue 38: entries are owned: one whose file owner is not the uid it claims
// (nor root), or that claims another user's process, is ignored.
TEST_F(split, forged_entries_are_ignored) {
  scoped_segment mine;
  krex::tenant t{mine.opts()};
  const bool root = ::geteuid() == 0;
  // Claims uid 0 (root's tenant) in a file owned by uid 4242 (or by us).
  ASSERT_TRUE(plant("1-21-" + std::to_string(::getppid()),
                    std::to_string(::getppid()) + " 0 0 1\n/dev/shm/forged-uid\n", 0,
                    root ? 4242 : -1));
  krex::region r{t};
  EXPECT_TRUE(r.report().other_segments.empty()) << r.report();
}

// Issue 38: another user's flood of entries costs a region one capped scan a
// second, never a full scan per region, and the note says the check was cut.
TEST_F(split, a_flooded_registry_is_read_in_bounded_time) {
  scoped_segment mine;
  krex::tenant t{mine.opts()};
  const std::string uid = std::to_string(::geteuid());
  const int flood = 20000;
  for (int i = 0; i < flood; ++i) {
    const std::string pid = std::to_string(100000 + i);
    // Unjudgeable (another pid namespace), refreshed now: each counts.
    ASSERT_TRUE(plant("2-" + std::to_string(i) + "-" + pid,
                      pid + " 5 " + uid + " 1\n/dev/shm/flood-" + std::to_string(i) + "\n", 0));
  }
  std::uint64_t worst_later = 0;
  for (int k = 0; k < 6; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    krex::region r{t};
    const auto ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
            .count());
    if (k > 0) worst_later = std::max(worst_later, ns);
    EXPECT_LE(r.report().other_segments.size(), 1024U);
    const auto& notes = r.report().notes;
    EXPECT_TRUE(std::any_of(notes.begin(), notes.end(), [](const std::string& n) {
      return contains(n, "holds more than") && contains(n, "may have gone unreported");
    })) << r.report();
  }
  EXPECT_LT(worst_later, 100'000'000U) << "a region entry read the whole flooded registry again";
}

// Issue 38: a tenant refreshes its entry (its heartbeat for readers that
// cannot judge its pid), and writes it again if a sweep removed it.
TEST_F(split, a_tenant_refreshes_its_entry_and_restores_it) {
  scoped_segment mine;
  child c = tenant_in_child(mine.opts(), b);
  ASSERT_TRUE(krex_test::wait_until([&] { return b->joined.load() == 1; }, 20s));
  const int pid = c.pid();
  const std::string tail = "-" + std::to_string(pid);
  std::string entry;
  for (const std::string& n : names_in(device_dir()))
    if (n.size() > tail.size() && n.compare(n.size() - tail.size(), tail.size(), tail) == 0)
      entry = device_dir() + "/" + n;
  ASSERT_FALSE(entry.empty());
  struct stat before {};
  ASSERT_EQ(::stat(entry.c_str(), &before), 0);
  EXPECT_TRUE(krex_test::wait_until(
      [&] {
        struct stat now {};
        return ::stat(entry.c_str(), &now) == 0 && (now.st_mtim.tv_sec != before.st_mtim.tv_sec ||
                                                    now.st_mtim.tv_nsec != before.st_mtim.tv_nsec);
      },
      5s))
      << "the entry's mtime was not refreshed";
  ASSERT_EQ(::unlink(entry.c_str()), 0);
  EXPECT_TRUE(krex_test::wait_until([&] { return ::access(entry.c_str(), F_OK) == 0; }, 5s))
      << "a removed entry of a live tenant was not written again";
  b->stop.store(1);
  EXPECT_EQ(krex_test::exit_code(c.wait(10s)), 0);
  EXPECT_EQ(entries_of(pid), 0U) << "the entry outlived its tenant's leave";
}

// The print: every other segment on a line of its own.
TEST(split_report, print_lists_other_segments) {
  krex::region_report r;
  r.gated = true;
  r.drained = true;
  r.other_segments = {"/dev/shm/krex-L5-u0-a", "/dev/shm/krex-L5-u0-b"};
  std::ostringstream os;
  os << r;
  EXPECT_TRUE(contains(os.str(), "krex region: gate+drain-split(2 other segments)\n")) << os.str();
  EXPECT_TRUE(contains(os.str(),
                       "\n  other_segments:\n    - /dev/shm/krex-L5-u0-a\n    - /dev/shm/krex-L5-u0-b"))
      << os.str();
  EXPECT_TRUE(contains(krex::to_json(krex::region_report{}), "\"other_segments\":[]"));
}
