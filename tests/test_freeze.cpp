// SPDX-License-Identifier: Apache-2.0
// Step 3 (freeze) against real cgroups and real processes: one conformance
// suite run for every method this machine allows, plus injected failures.

#include "errors.hpp"
#include "proc_util.hpp"

#include <krex/detail/as_safe.hpp>
#include <krex/detail/guardian/guardian_sys.hpp>
#include <krex/detail/identity.hpp>
#include <krex/detail/steps/freeze.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace {

using krex::freeze_method;
using krex::detail::freezer;
namespace kd = krex::detail;
namespace cg = krex::detail::cgroup;
using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;

bool is_cgroup(freeze_method m) {
  return m == freeze_method::cgroup_v2 || m == freeze_method::cgroup_v1;
}

// This process's cgroup in the hierarchy that method `m` uses ("" if absent).
std::string own_cgroup(freeze_method m) {
  return cg::self_view::read().locate(m == freeze_method::cgroup_v2).own;
}

std::string read_text(const std::string& path) {
  std::string s;
  return cg::read_file(path, s) == 0 ? s : "<unreadable>";
}

std::string control_of(freeze_method m) {
  return m == freeze_method::cgroup_v2 ? "/cgroup.freeze" : "/freezer.state";
}

// --- failure injection through the sys() seam --------------------------------
// Plain functions (the table holds function pointers), steered by globals.
std::string g_prefix;       // inject only for paths that start with this
std::string g_fake_suffix;  // read-only opens of paths ending so get g_fake_file
std::string g_fake_file;
int g_calls = 0;

bool starts(const char* p, const std::string& pre) { return std::string(p).rfind(pre, 0) == 0; }
bool ends(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}
int mkdir_eacces(const char* p, mode_t m) {
  if (starts(p, g_prefix)) return errno = EACCES, -1;
  return ::mkdir(p, m);
}
int open_eacces(const char* p, int f, mode_t m) {
  if (starts(p, g_prefix)) return errno = EACCES, -1;
  return krex::detail::sys_impl::open(p, f, m);
}
int open_fake(const char* p, int f, mode_t m) {
  if ((f & O_ACCMODE) == O_RDONLY && ends(p, g_fake_suffix))
    return krex::detail::sys_impl::open(g_fake_file.c_str(), O_RDONLY, 0);
  return krex::detail::sys_impl::open(p, f, m);
}
ssize_t write_eio(int, const void*, size_t) { return ++g_calls, errno = EIO, -1; }
int pidfd_signal_eperm(int, int) { return ++g_calls, errno = EPERM, -1; }

// A sibling as a region names it: slot, pid and the pid's start time.
kd::sibling tg(std::uint32_t slot, pid_t pid) {
  return {slot, pid, krex::detail::read_proc_stat(pid).start_time};
}

// --- the fixture: a unique root per test, everything torn down ---------------
/// `e` is a krex::error with errno `code` that names the leaf `leaf`.
void expect_leaf_error(const std::optional<krex::error>& e, int code, const std::string& leaf) {
  ASSERT_TRUE(e);
  EXPECT_EQ(e->code(), code);
  EXPECT_NE(std::string(e->what()).find(leaf), std::string::npos) << e->what();
}

class freeze_test : public ::testing::TestWithParam<freeze_method> {
 protected:
  void SetUp() override {
    m_saved = krex::detail::sys();
    m_method = GetParam();
    if (is_cgroup(m_method)) {
      const std::string base = own_cgroup(m_method);
      if (base.empty())
        GTEST_SKIP() << krex::to_string(m_method) << " hierarchy is not mounted here";
      // Root, or a user inside a delegated subtree (systemd-run --user -p Delegate=yes).
      if (cg::probe_open(base + "/cgroup.procs", O_WRONLY) != 0)
        GTEST_SKIP() << "not root, and " << base << " is not delegated to this user";
      m_root = base + "/" + krex_test::unique_name("krex-test");
    }
    krex_test::become_subreaper();  // grandchildren come back to us to be reaped
    // Signal freezing only stops verified members: processes that have the
    // segment mapped. The tenants here map this file, as joined tenants do.
    m_shm = krex_test::unique_name("krex-test-shm");
    const int fd = ::open(("/dev/shm/" + m_shm).c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, 4096), 0);
    ::close(fd);
  }

  void TearDown() override {
    krex::detail::sys() = m_saved;
    if (!m_shm.empty()) ::unlink(("/dev/shm/" + m_shm).c_str());
    if (!m_root.empty())
      for (std::uint32_t s = 0; s < 16; ++s) {  // thaw first: a v1-frozen task cannot die
        const std::string l = m_root + "/t" + std::to_string(s);
        if (::access(l.c_str(), F_OK) != 0) continue;
        cg::write_file(l + control_of(m_method),
                       m_method == freeze_method::cgroup_v2 ? "0" : "THAWED");
        for (const std::string& pid : cg::split(read_text(l + "/cgroup.procs"), '\n'))
          if (!pid.empty() && pid[0] != '<') ::kill(std::atoi(pid.c_str()), SIGKILL);
      }
    for (auto& p : m_mem->pid)
      if (const int pid = p.load(); pid > 0) krex_test::kill_and_reap(pid);
    m_kids.clear();
    krex_test::reap_orphans();
    if (m_root.empty()) return;
    krex_test::wait_until(
        [&] {
          krex_test::reap_orphans();
          for (std::uint32_t s = 0; s < 16; ++s)
            ::rmdir((m_root + "/t" + std::to_string(s)).c_str());
          return ::rmdir(m_root.c_str()) == 0 || errno == ENOENT;
        },
        3000ms);
    EXPECT_NE(::access(m_root.c_str(), F_OK), 0) << "test root left behind: " << m_root;
  }

  // A tenant in slot `slot`: enters its leaf, forks a grandchild, and both
  // count in shared memory forever. Counters 2*slot and 2*slot+1.
  pid_t start_tenant(std::uint32_t slot) {
    const int before = m_mem->ready.load();
    m_kids.push_back(krex_test::spawn([this, slot] {
      if (m_method == freeze_method::signal) ::setpgid(0, 0);  // a group of its own to stop
      const int fd = ::open(("/dev/shm/" + m_shm).c_str(), O_RDWR | O_CLOEXEC);
      if (fd < 0 || ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED)
        return 9;
      char name[16];  // and run the agent thread of their slot
      krex::detail::as_safe::agent_thread_name(slot, name);
      ::prctl(PR_SET_NAME, name, 0, 0, 0);
      freezer f = freezer::open(m_method, m_root);
      f.enter(slot);
      const pid_t g = ::fork();
      if (g == 0)
        for (;;) m_mem->value[(2 * std::size_t{slot}) + 1]++;
      m_mem->pid[(2 * std::size_t{slot}) + 1] = g;
      m_mem->ready++;
      for (;;) m_mem->value[2 * std::size_t{slot}]++;
      return 0;
    }));
    EXPECT_TRUE(krex_test::wait_until([&] { return m_mem->ready.load() > before; }, 5000ms));
    m_mem->pid[2 * std::size_t{slot}] = m_kids.back().pid();
    return m_kids.back().pid();
  }

  std::pair<std::uint64_t, std::uint64_t> sample(std::uint32_t slot) const {
    return {m_mem->value[2 * std::size_t{slot}].load(),
            m_mem->value[(2 * std::size_t{slot}) + 1].load()};
  }
  // The counters of `slot` stand still for 200 ms.
  bool both_still(std::uint32_t slot) const {
    const auto a = sample(slot);
    std::this_thread::sleep_for(200ms);
    return sample(slot) == a;
  }
  bool both_move(std::uint32_t slot) const {
    const auto a = sample(slot);
    return krex_test::wait_until(
        [&] {
          const auto b = sample(slot);
          return b.first > a.first && b.second > a.second;
        },
        3000ms);
  }
  // Holder side: the test process never enters a leaf itself.
  freezer holder() {
    freezer f = freezer::open(m_method, m_root);
    f.bind(krex::detail::make_identity_domain(krex::segment_access::user, ("/dev/shm/" + m_shm).c_str()));
    return f;
  }

  freeze_method m_method{};
  std::string m_root;
  std::string m_shm;  // name of the /dev/shm file the tenants map
  krex_test::shared<krex_test::counters> m_mem;
  std::vector<krex_test::child> m_kids;
  krex::detail::sys_table m_saved{};
};

std::string method_name(const ::testing::TestParamInfo<freeze_method>& i) {
  return i.param == freeze_method::cgroup_v2   ? "cgroup_v2"
         : i.param == freeze_method::cgroup_v1 ? "cgroup_v1"
                                               : "signal";
}

INSTANTIATE_TEST_SUITE_P(methods, freeze_test,
                         ::testing::Values(freeze_method::cgroup_v2, freeze_method::cgroup_v1,
                                           freeze_method::signal),
                         method_name);

TEST_P(freeze_test, open_resolves_method_and_root) {
  const freezer h = holder();
  EXPECT_EQ(h.method(), m_method);
  EXPECT_EQ(h.root(), m_root);
  if (is_cgroup(m_method)) {
    EXPECT_EQ(h.leaf(7), m_root + "/t7");
  }
}

TEST_P(freeze_test, freezes_child_and_grandchild_then_thaws) {
  freezer h = holder();
  const pid_t pid = start_tenant(3);
  ASSERT_TRUE(both_move(3)) << "tenant never ran";
  freezer::record r = h.freeze({tg(3, pid)}, clock_type::now() + 2s);
  EXPECT_TRUE(r.refused.empty());
  const auto a = sample(3);
  std::this_thread::sleep_for(200ms);
  const auto b = sample(3);
  EXPECT_EQ(a, b) << "a counter moved while frozen";
  if (is_cgroup(m_method)) {
    EXPECT_EQ(read_text(h.leaf(3) + control_of(m_method)),
              m_method == freeze_method::cgroup_v2 ? "1\n" : "FROZEN\n");
  }
  EXPECT_TRUE(h.thaw(r, {tg(3, pid)})) << h.last_error();
  EXPECT_TRUE(both_move(3)) << "a counter did not move after thaw";
}

// The table names what the kernel uses (spelled here independently of it), and
// the table-driven freezer freezes and thaws a real leaf with real processes:
// the kernel's own status file says so.
TEST_P(freeze_test, table_names_the_kernel_files_and_values) {
  if (!is_cgroup(m_method)) GTEST_SKIP() << "only the cgroup methods have files";
  const bool v2 = m_method == freeze_method::cgroup_v2;
  const kd::freeze_table& t = kd::freeze_table_of(m_method);
  EXPECT_EQ(t.method, m_method);
  EXPECT_TRUE(t.cgroup());
  EXPECT_EQ(t.v2, v2);
  EXPECT_STREQ(t.control, v2 ? "cgroup.freeze" : "freezer.state");
  EXPECT_STREQ(t.freeze_value, v2 ? "1" : "FROZEN");
  EXPECT_STREQ(t.thaw_value, v2 ? "0" : "THAWED");
  EXPECT_STREQ(t.status, v2 ? "cgroup.events" : "freezer.state");
  EXPECT_STREQ(t.frozen_line, v2 ? "frozen 1" : "FROZEN");
  EXPECT_STREQ(t.procs, "cgroup.procs");
  freezer h = holder();
  EXPECT_EQ(&h.table(), &t);
  const pid_t pid = start_tenant(2);
  ASSERT_TRUE(both_move(2)) << "tenant never ran";
  // enter() moved the tenant in through the table's procs file.
  const std::vector<std::string> procs = cg::split(read_text(h.leaf(2) + "/cgroup.procs"), '\n');
  EXPECT_NE(std::find(procs.begin(), procs.end(), std::to_string(pid)), procs.end());
  const std::string status = h.leaf(2) + (v2 ? "/cgroup.events" : "/freezer.state");
  const auto frozen_by_kernel = [&] {
    const std::string st = read_text(status);
    return v2 ? st.find("frozen 1\n") != std::string::npos : st == "FROZEN\n";
  };
  EXPECT_FALSE(frozen_by_kernel()) << read_text(status);
  freezer::record r = h.freeze({tg(2, pid)}, clock_type::now() + 2s);
  EXPECT_TRUE(frozen_by_kernel()) << read_text(status);
  EXPECT_TRUE(h.still_frozen(r, tg(2, pid)));
  EXPECT_TRUE(both_still(2)) << "a counter moved while frozen";
  EXPECT_TRUE(h.thaw_one(r, tg(2, pid))) << h.last_error();
  const std::string thawed = read_text(status);
  EXPECT_TRUE(v2 ? thawed.find("frozen 0\n") != std::string::npos : thawed == "THAWED\n") << thawed;
  EXPECT_FALSE(h.still_frozen(r, tg(2, pid)));
  EXPECT_TRUE(both_move(2)) << "a counter did not move after thaw";
}

// The guardian's async-signal-safe thaw writes the same table: it thaws a
// leaf the freezer froze. With method none (the empty table) it writes nothing.
TEST_P(freeze_test, guardian_thaw_slot_thaws_what_the_freezer_froze) {
  if (!is_cgroup(m_method))
    GTEST_SKIP() << "signal has no table: test_trust_signal.cpp (guardian_thaw.*)";
  freezer h = holder();
  const pid_t pid = start_tenant(6);
  ASSERT_TRUE(both_move(6)) << "tenant never ran";
  const freezer::record r = h.freeze({tg(6, pid)}, clock_type::now() + 2s);
  kd::recovery_config c;
  ASSERT_TRUE(kd::as_safe::copy_text(c.root, sizeof c.root, m_root.c_str()));
  c.method = freeze_method::none;
  EXPECT_EQ(kd::as_safe::thaw_slot(c, 6, 0, 0), 0);
  EXPECT_TRUE(h.still_frozen(r, tg(6, pid)));
  EXPECT_TRUE(both_still(6)) << "method none thawed a leaf";
  c.method = m_method;
  EXPECT_EQ(kd::as_safe::thaw_slot(c, 6, 0, 0), 0);
  EXPECT_EQ(read_text(h.leaf(6) + control_of(m_method)),
            m_method == freeze_method::cgroup_v2 ? "0\n" : "THAWED\n");
  EXPECT_FALSE(h.still_frozen(r, tg(6, pid)));
  EXPECT_TRUE(both_move(6)) << "the guardian's thaw did not thaw the leaf";
  EXPECT_EQ(kd::as_safe::thaw_slot(c, 9, 0, 0), 0) << "a missing leaf counts as thawed";
}

// The freeze step's exit: a sibling thawed behind the region's back is
// reported as a broken freeze; every sibling is thawed and its flag cleared.
TEST_P(freeze_test, thaw_siblings_reports_a_sibling_thawed_behind_its_back) {
  freezer h = holder();
  const pid_t p1 = start_tenant(1);
  const pid_t p2 = start_tenant(2);
  ASSERT_TRUE(both_move(1) && both_move(2)) << "tenants never ran";
  auto node = std::make_unique<kd::node_state>();
  kd::member m;
  m.node = node.get();
  std::vector<kd::sibling> frozen{tg(1, p1), tg(2, p2)};
  const auto ours = [] { return true; };

  freezer::record rec = h.freeze(frozen, clock_type::now() + 2s);  // untouched: not broken
  for (const auto& f : frozen) m.slot_at(f.slot).frozen.store(1);
  kd::thaw_result r = kd::thaw_siblings(m, h, rec, frozen, ours);
  EXPECT_FALSE(r.freeze_broken);
  EXPECT_FALSE(r.thaw_failed);
  EXPECT_FALSE(r.lease_lost);
  EXPECT_TRUE(frozen.empty());
  EXPECT_TRUE(both_move(1) && both_move(2));

  frozen = {tg(1, p1), tg(2, p2)};
  rec = h.freeze(frozen, clock_type::now() + 2s);
  for (const auto& f : frozen) m.slot_at(f.slot).frozen.store(1);
  // An operator (or a late recoverer) thaws slot 2 behind the region's back.
  if (is_cgroup(m_method))
    ASSERT_EQ(cg::write_file(h.leaf(2) + control_of(m_method),
                             m_method == freeze_method::cgroup_v2 ? "0" : "THAWED"),
              0);
  else
    ASSERT_EQ(::kill(-p2, SIGCONT), 0);
  ASSERT_TRUE(both_move(2));
  EXPECT_TRUE(both_still(1));
  r = kd::thaw_siblings(m, h, rec, frozen, ours);
  EXPECT_TRUE(r.freeze_broken);
  EXPECT_FALSE(r.thaw_failed) << h.last_error();
  EXPECT_FALSE(r.lease_lost);
  EXPECT_TRUE(frozen.empty());
  EXPECT_EQ(m.slot_at(1).frozen.load(), 0u);
  EXPECT_EQ(m.slot_at(2).frozen.load(), 0u);
  EXPECT_TRUE(both_move(1)) << "slot 1 was not thawed";
}

// Once the lease is not ours, the exit touches nothing: the recoverer thaws.
TEST_P(freeze_test, thaw_siblings_touches_nothing_once_the_lease_is_lost) {
  freezer h = holder();
  const pid_t pid = start_tenant(3);
  ASSERT_TRUE(both_move(3)) << "tenant never ran";
  auto node = std::make_unique<kd::node_state>();
  kd::member m;
  m.node = node.get();
  std::vector<kd::sibling> frozen{tg(3, pid)};
  freezer::record rec = h.freeze(frozen, clock_type::now() + 2s);
  m.slot_at(3).frozen.store(1);
  const kd::thaw_result r = kd::thaw_siblings(m, h, rec, frozen, [] { return false; });
  EXPECT_TRUE(r.lease_lost);
  EXPECT_FALSE(r.freeze_broken);
  EXPECT_FALSE(r.thaw_failed);
  EXPECT_TRUE(frozen.empty());
  EXPECT_EQ(m.slot_at(3).frozen.load(), 1u) << "the recoverer clears it, not this exit";
  EXPECT_TRUE(both_still(3)) << "thawed after the lease was lost";
  EXPECT_TRUE(h.thaw(rec, {tg(3, pid)})) << h.last_error();
  EXPECT_TRUE(both_move(3));
}

TEST_P(freeze_test, freezes_several_siblings_with_one_deadline) {
  freezer h = holder();
  const pid_t p1 = start_tenant(1);
  const pid_t p2 = start_tenant(2);
  freezer::record r = h.freeze({tg(1, p1), tg(2, p2)}, clock_type::now() + 2s);
  const auto a1 = sample(1);
  const auto a2 = sample(2);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(a1, sample(1));
  EXPECT_EQ(a2, sample(2));
  EXPECT_TRUE(h.thaw(r, {tg(1, p1), tg(2, p2)}));
  EXPECT_TRUE(both_move(1));
  EXPECT_TRUE(both_move(2));
}

TEST_P(freeze_test, missed_deadline_throws_and_leaves_nothing_frozen) {
  freezer h = holder();
  const pid_t pid = start_tenant(4);
  // The freeze state never reports completion.
  g_fake_file = "/tmp/" + krex_test::unique_name("krex-fake");
  // signal: every process of the tenant's group seems to keep running.
  const std::string fake = m_method == freeze_method::cgroup_v2 ? "populated 1\nfrozen 0\n"
                           : m_method == freeze_method::cgroup_v1
                               ? "FREEZING\n"
                               : "9 (a) R 1 " + std::to_string(pid) + " 0\n";
  FILE* out = std::fopen(g_fake_file.c_str(), "w");
  ASSERT_NE(out, nullptr);
  std::fputs(fake.c_str(), out);
  std::fclose(out);
  g_fake_suffix = m_method == freeze_method::cgroup_v2   ? "/cgroup.events"
                  : m_method == freeze_method::cgroup_v1 ? "/freezer.state"
                                                         : "/stat";
  krex::detail::sys().open = open_fake;
  const auto t0 = clock_type::now();
  try {
    (void)h.freeze({tg(4, pid)}, t0 + 100ms);
    ADD_FAILURE() << "freeze did not throw";
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), krex::step::freeze);
    EXPECT_EQ(e.code(), ETIMEDOUT);
    EXPECT_NE(std::string(e.what()).find("KREX_FREEZE_DEADLINE_MS"), std::string::npos) << e.what();
  }
  EXPECT_LT(clock_type::now() - t0, 1s);
  krex::detail::sys() = m_saved;
  std::remove(g_fake_file.c_str());
  if (is_cgroup(m_method)) {
    EXPECT_EQ(read_text(h.leaf(4) + control_of(m_method)),
              m_method == freeze_method::cgroup_v2 ? "0\n" : "THAWED\n");
  }
  EXPECT_TRUE(both_move(4)) << "left frozen after a failed freeze";
}

TEST_P(freeze_test, failed_write_thaws_what_it_froze) {
  if (!is_cgroup(m_method)) GTEST_SKIP() << "a missing leaf only exists for cgroup methods";
  freezer h = holder();
  const pid_t pid = start_tenant(5);
  // Slot 6 has no leaf: the freeze of slot 5 must be undone.
  const auto e = krex_test::error_of(
      [&] { (void)h.freeze({tg(5, pid), {6, pid + 100000}}, clock_type::now() + 2s); },
      "freeze did not throw");
  expect_leaf_error(e, ENOENT, h.leaf(6));
  EXPECT_TRUE(both_move(5));
}

TEST_P(freeze_test, thaw_tries_every_sibling_and_reports_failure) {
  freezer h = holder();
  const pid_t p1 = start_tenant(1);
  const pid_t p2 = start_tenant(2);
  g_calls = 0;
  freezer::record r;
  if (m_method == freeze_method::signal) {
    // The signal method continues only what it stopped: stop them first.
    r = h.freeze({tg(1, p1), tg(2, p2)}, clock_type::now() + 2s);
    krex::detail::sys().pidfd_send_signal = pidfd_signal_eperm;
  } else {
    krex::detail::sys().write = write_eio;
  }
  EXPECT_FALSE(h.thaw(r, {tg(1, p1), tg(2, p2)}));
  EXPECT_EQ(g_calls, 2);
  EXPECT_FALSE(h.last_error().empty());
}

TEST_P(freeze_test, leave_moves_back_and_removes_leaf) {
  if (!is_cgroup(m_method)) GTEST_SKIP() << "signal and none have no leaf";
  holder();  // creates the root
  auto kid = krex_test::spawn([this] {
    const std::string before = own_cgroup(m_method);
    freezer f = freezer::open(m_method, m_root);
    f.enter(5);
    if (own_cgroup(m_method) != f.leaf(5)) return 2;
    f.leave(5);
    if (own_cgroup(m_method) != before) return 3;
    if (::access(f.leaf(5).c_str(), F_OK) == 0) return 4;
    return f.last_error().empty() ? 0 : 5;
  });
  EXPECT_EQ(krex_test::exit_code(kid.wait(5000ms)), 0);
}

TEST_P(freeze_test, stale_empty_leaf_is_thawed_and_recreated) {
  if (!is_cgroup(m_method)) GTEST_SKIP() << "signal and none have no leaf";
  freezer h = holder();
  ASSERT_EQ(::mkdir(h.leaf(7).c_str(), 0755), 0);
  ASSERT_EQ(cg::write_file(h.leaf(7) + control_of(m_method),
                           m_method == freeze_method::cgroup_v2 ? "1" : "FROZEN"),
            0);
  auto kid = krex_test::spawn([this] {
    freezer f = freezer::open(m_method, m_root);
    f.enter(7);  // would stop here for good if the stale leaf stayed frozen
    f.leave(7);
    return 0;
  });
  EXPECT_EQ(krex_test::exit_code(kid.wait(5000ms)), 0);
}

TEST_P(freeze_test, leaf_with_live_processes_is_refused) {
  if (!is_cgroup(m_method)) GTEST_SKIP() << "signal and none have no leaf";
  freezer h = holder();
  start_tenant(8);
  const auto e = krex_test::error_of(
      [&] {
        h.enter(8);
        h.leave(8);
      },
      "entered a busy leaf");
  expect_leaf_error(e, EBUSY, h.leaf(8));
  EXPECT_TRUE(both_move(8));
}

TEST_P(freeze_test, explicit_method_with_unwritable_root_throws) {
  if (!is_cgroup(m_method)) GTEST_SKIP() << "signal needs no root";
  g_prefix = m_root;
  krex::detail::sys().mkdir = mkdir_eacces;
  try {
    holder();
    ADD_FAILURE() << "open did not throw";
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), krex::step::freeze);
    EXPECT_EQ(e.code(), EACCES);
    const std::string w = e.what();
    EXPECT_NE(w.find(m_root), std::string::npos) << w;
    EXPECT_NE(w.find("KREX_CGROUP_ROOT"), std::string::npos) << w;
    EXPECT_NE(w.find("KREX_FREEZE=signal"), std::string::npos) << w;
  }
}

// An explicit root that no cgroup method can use is an error under `auto`
// too: silently freezing by signals instead would weaken every region.
TEST_P(freeze_test, automatic_with_uncreatable_explicit_root_throws) {
  if (!is_cgroup(m_method)) GTEST_SKIP() << "signal needs no root";
  const std::string bad = m_root + "/missing/krex";
  try {
    freezer::open(freeze_method::automatic, bad);
    ADD_FAILURE() << "open fell back instead of throwing";
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), krex::step::freeze);
    const std::string w = e.what();
    EXPECT_NE(w.find(bad), std::string::npos) << w;
    EXPECT_NE(w.find("KREX_CGROUP_ROOT is set"), std::string::npos) << w;
    EXPECT_NE(w.find("KREX_FREEZE=signal"), std::string::npos) << w;
  }
  EXPECT_THROW(freezer::open(freeze_method::automatic, "/tmp/krex-not-a-cgroup"), krex::error);
}

TEST(freeze_open, automatic_skips_unwritable_v2) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  const std::string v2 = own_cgroup(freeze_method::cgroup_v2);
  if (v2.empty()) GTEST_SKIP() << "no cgroup v2 hierarchy";
  const auto saved = krex::detail::sys();
  g_prefix = v2 + "/";
  krex::detail::sys().mkdir = mkdir_eacces;
  krex::detail::sys().open = open_eacces;
  const std::string v1 = own_cgroup(freeze_method::cgroup_v1);
  const bool had_v1_root = !v1.empty() && ::access((v1 + "/krex").c_str(), F_OK) == 0;
  const freezer f = freezer::open(freeze_method::automatic, "");
  krex::detail::sys() = saved;
  EXPECT_EQ(f.method(), v1.empty() ? freeze_method::signal : freeze_method::cgroup_v1);
  EXPECT_NE(f.notes().find("cgroup2"), std::string::npos) << f.notes();
  if (!v1.empty()) {
    EXPECT_EQ(f.root(), v1 + "/krex");
  }
  if (!v1.empty() && !had_v1_root) ::rmdir((v1 + "/krex").c_str());
}

TEST(freeze_open, method_and_root_must_agree) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  const std::string v2 = own_cgroup(freeze_method::cgroup_v2);
  const std::string v1 = own_cgroup(freeze_method::cgroup_v1);
  if (v2.empty() || v1.empty()) GTEST_SKIP() << "needs both a v2 and a v1 freezer hierarchy";
  const std::string r = v2 + "/" + krex_test::unique_name("krex-test");
  try {
    freezer::open(freeze_method::cgroup_v1, r);
    ADD_FAILURE() << "open did not throw";
  } catch (const krex::error& e) {
    const std::string w = e.what();
    EXPECT_NE(w.find(r), std::string::npos) << w;
    EXPECT_NE(w.find("cgroup v1 freezer hierarchy"), std::string::npos) << w;
  }
  EXPECT_NE(::access(r.c_str(), F_OK), 0) << "created a root it then refused";
  EXPECT_THROW(freezer::open(freeze_method::cgroup_v2, "/tmp/krex-not-a-cgroup"), krex::error);
}

// none is the empty table: no file, so freezing does nothing; signal has no
// files either. The table is plain constexpr data (the guardian uses it).
TEST(freeze_table, none_and_signal_have_no_files) {
  static_assert(kd::freeze_table_of(freeze_method::cgroup_v2).cgroup());
  static_assert(!kd::freeze_table_of(freeze_method::none).cgroup());
  for (freeze_method m : {freeze_method::none, freeze_method::signal, freeze_method::automatic}) {
    const kd::freeze_table& t = kd::freeze_table_of(m);
    EXPECT_FALSE(t.cgroup());
    EXPECT_EQ(t.control, nullptr);
    EXPECT_EQ(t.status, nullptr);
  }
  EXPECT_EQ(&freezer::open(freeze_method::none, "").table(), &kd::freeze_none);
}

TEST(freeze_open, none_and_signal_need_nothing) {
  freezer f = freezer::open(freeze_method::none, "/ignored");
  EXPECT_EQ(f.method(), freeze_method::none);
  EXPECT_EQ(f.root(), "");
  f.enter(1);
  freezer::record r = f.freeze({{1, 1}}, clock_type::now());
  EXPECT_TRUE(f.thaw(r, {{1, 1}}));
  f.leave(1);
  EXPECT_EQ(freezer::open(freeze_method::signal, "").method(), freeze_method::signal);
}

TEST(freeze_open, refuses_to_freeze_itself) {
  freezer f = freezer::open(freeze_method::signal, "");
  EXPECT_THROW((void)f.freeze({{0, ::getpid()}}, clock_type::now() + 1s), krex::error);
}

// --- pure parsing and derivation ---------------------------------------------
TEST(cgroup_paths, parses_mountinfo_and_proc_cgroup) {
  const auto ms = cg::parse_mountinfo(
      "30 22 0:27 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
      "36 30 0:33 / /sys/fs/cgroup/freezer rw,relatime shared:9 - cgroup cgroup rw,freezer\n"
      "40 30 0:37 /docker/ab /sys/fs/cgroup/my\\040dir rw - cgroup2 cgroup2 rw\n");
  ASSERT_EQ(ms.size(), 2u);
  EXPECT_FALSE(ms[0].v2);
  EXPECT_TRUE(ms[1].v2);
  EXPECT_EQ(ms[1].point, "/sys/fs/cgroup/my dir");
  EXPECT_EQ(cg::find_mount(ms, false), ms.data());
  EXPECT_EQ(cg::to_fs_path(ms[1], "/docker/ab/x"), "/sys/fs/cgroup/my dir/x");
  EXPECT_EQ(cg::to_fs_path(ms[1], "/docker/ab"), "/sys/fs/cgroup/my dir");
  EXPECT_EQ(cg::to_fs_path(ms[1], "/docker/abc"), "");
  EXPECT_EQ(cg::to_fs_path(ms[0], "/"), "/sys/fs/cgroup/freezer");
  EXPECT_EQ(cg::to_fs_path(ms[0], "/../x"), "");
  const auto cs = cg::parse_proc_cgroup("6:freezer:/a\n4:memory:/m/n\n0::/u/v\n");
  EXPECT_EQ(cg::find_membership(cs, true)->path, "/u/v");
  EXPECT_EQ(cg::find_membership(cs, false)->path, "/a");
}

TEST(cgroup_paths, derives_root) {
  EXPECT_EQ(cg::derive_root("/sys/fs/cgroup"), "/sys/fs/cgroup/krex");
  EXPECT_EQ(cg::derive_root("/sys/fs/cgroup/a.scope"), "/sys/fs/cgroup/a.scope/krex");
  EXPECT_EQ(cg::derive_root("/sys/fs/cgroup/job/krex/t12"), "/sys/fs/cgroup/job/krex");
  EXPECT_EQ(cg::derive_root("/sys/fs/cgroup/job/other/t12"), "/sys/fs/cgroup/job/other/t12/krex");
  EXPECT_EQ(cg::derive_root("/sys/fs/cgroup/krex/tx"), "/sys/fs/cgroup/krex/tx/krex");
  EXPECT_EQ(cg::derive_root("/sys/fs/cgroup/job/krex/krex-L2-B107400-u0-krex/t3"),
            "/sys/fs/cgroup/job/krex");
}

}  // namespace
