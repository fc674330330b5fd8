// SPDX-License-Identifier: Apache-2.0
// Signal freezing against a hostile segment (issue 10, finding 1): a pid read
// from the segment is signalled only once the process is verified as the
// tenant that joined, never pid or group <= 1, and a thaw (holder or
// guardian) continues exactly what was stopped, never a reused pid. Real
// processes, a real segment; signals are observed in /proc and through the
// sys() seam.

#include "krex_test.hpp"
#include "proc_util.hpp"

#include <krex/detail/freeze/freezer.hpp>
#include <krex/detail/guardian/guardian_recover.hpp>
#include <krex/detail/identity.hpp>
#include <krex/detail/segment/segment.hpp>
#include <krex/region.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using krex::freeze_method;
namespace kd = krex::detail;

char state_of(pid_t pid) { return kd::read_proc_stat(pid).state; }
std::uint64_t start_of(pid_t pid) { return kd::read_proc_stat(pid).start_time; }

bool stopped(pid_t pid) {
  return krex_test::wait_until([&] { return state_of(pid) == 'T'; }, 3000ms);
}

// Counter `k` still moves (a process that is not stopped).
bool moves(const krex_test::shared<krex_test::counters>& mem, int k) {
  const std::uint64_t a = mem->value[k].load();
  return krex_test::wait_until([&] { return mem->value[k].load() > a + 2; }, 3000ms);
}
// Counter `k` stays put over 200 ms (a stopped process).
bool holds(const krex_test::shared<krex_test::counters>& mem, int k) {
  const std::uint64_t a = mem->value[k].load();
  std::this_thread::sleep_for(200ms);
  return mem->value[k].load() == a;
}

// A process that knows nothing of krex: counts in `k` forever.
krex_test::child bystander(const krex_test::shared<krex_test::counters>& mem, int k,
                           bool own_group = false) {
  return krex_test::spawn([&mem, k, own_group] {
    if (own_group) ::setpgid(0, 0);
    for (;;) {
      mem->value[k]++;
      ::usleep(500);
    }
    return 0;
  });
}

// Writes a slot as a hostile process would: a live-looking tenant of
// `device` that owns `pid` with start time `start`. Returns its index.
std::uint32_t forge_slot(kd::node_state& n, std::uint32_t device, std::int32_t pid,
                         std::uint64_t start) {
  for (std::uint32_t i = 0; i < kd::max_tenants; ++i) {
    kd::tenant_slot& s = n.tenants[i];
    std::int32_t free = 0;
    if (!s.owner.compare_exchange_strong(free, -1)) continue;
    s.device.store(device);
    s.start_time.store(start);
    s.in_submit.store(0);
    s.dirty.store(0);
    s.syncing.store(0);
    s.ticket.store(kd::no_ticket);
    s.state.store(kd::slot_active);
    s.owner.store(pid);
    return i;
  }
  throw std::runtime_error("no free slot to forge");
}

// What a tenant of slot `slot` has: the segment mapped (`seg` opened) and
// a thread named as that slot's agent. For processes that play a member.
void name_as_agent(std::uint32_t slot) {
  char name[16];
  kd::as_safe::agent_thread_name(slot, name);
  ::prctl(PR_SET_NAME, name, 0, 0, 0);
}

std::uint32_t slot_of(const kd::node_state& n, pid_t pid) {
  for (std::uint32_t i = 0; i < kd::max_tenants; ++i)
    if (n.tenants[i].owner.load() == pid) return i;
  return kd::max_tenants;
}

void unforge(kd::node_state& n, std::uint32_t i) {
  n.tenants[i].state.store(kd::slot_free);
  n.tenants[i].stop_target.store(0);
  n.tenants[i].owner.store(0);
}

krex::options signal_opts(const krex_test::scoped_segment& seg) {
  return seg.opts().freeze(freeze_method::signal).drain_deadline(2s);
}

// A member (joined with signal_opts): counts in `k` forever, `ready` bumped
// once it has joined.
krex_test::child joined_member(const krex_test::scoped_segment& seg,
                               const krex_test::shared<krex_test::counters>& mem, int k) {
  return krex_test::spawn([&seg, &mem, k] {
    krex::tenant m{signal_opts(seg)};
    mem->ready++;
    for (;;) {
      mem->value[k]++;
      ::usleep(500);
    }
    return 0;
  });
}

// A member joined (counting in mem's slot 0) and this process a tenant t
// beside it (signal_opts); the member's slot i in the node n.
struct beside_a_member {
  krex_test::scoped_segment seg;
  krex_test::shared<krex_test::counters> mem;
  krex_test::child member;
  std::optional<krex::tenant> t;
  kd::node_state* n = nullptr;
  std::uint32_t i = kd::max_tenants;
};

void join_beside_a_member(beside_a_member& b) {
  b.member = joined_member(b.seg, b.mem, 0);
  ASSERT_TRUE(krex_test::wait_until([&] { return b.mem->ready.load() == 1; }, 5000ms));
  b.t.emplace(signal_opts(b.seg));
  b.n = krex::detail::member_of(*b.t).node;
  b.i = slot_of(*b.n, b.member.pid());
  ASSERT_LT(b.i, kd::max_tenants);
}

// --- the holder: regions -------------------------------------------------------

TEST(trust_signal, region_does_not_stop_a_process_a_forged_slot_names) {
  krex_test::scoped_segment seg;
  krex_test::shared<krex_test::counters> mem;
  auto victim = bystander(mem, 0);
  auto leader = bystander(mem, 1, /*own_group=*/true);  // kill(-pgid) would reach it
  ASSERT_TRUE(moves(mem, 0) && moves(mem, 1));
  krex::tenant t{signal_opts(seg)};
  kd::node_state& n = *krex::detail::member_of(t).node;
  const std::uint32_t d = krex::detail::member_of(t).device;
  // Real pids with their real start times: everything a slot can say.
  const std::uint32_t a = forge_slot(n, d, victim.pid(), start_of(victim.pid()));
  const std::uint32_t b = forge_slot(n, d, leader.pid(), start_of(leader.pid()));
  // The guardian maps the segment (it was forked from a member): the
  // mapping alone must not make it signallable.
  ASSERT_TRUE(krex_test::wait_until([&] { return kd::guardian_alive(n); }, 3000ms));
  const pid_t guardian = krex_test::wait_guardian_pid(n);
  ASSERT_GT(guardian, 0);
  const std::uint32_t g = forge_slot(n, d, guardian, n.guardian_start_time.load());
  {
    krex::region r{t};
    EXPECT_TRUE(moves(mem, 0)) << "a process named by a forged slot was stopped";
    EXPECT_TRUE(moves(mem, 1)) << "the group of a process named by a forged slot was stopped";
    EXPECT_NE(state_of(guardian), 'T') << "the guardian was stopped";
    const auto& rep = r.report();
    EXPECT_TRUE(rep.frozen_pids.empty());
    std::vector<int> unverified = rep.unverified_pids;
    std::sort(unverified.begin(), unverified.end());
    std::vector<int> want{victim.pid(), leader.pid(), guardian};
    std::sort(want.begin(), want.end());
    EXPECT_EQ(unverified, want);
  }
  EXPECT_NE(state_of(victim.pid()), 'T');
  ::kill(guardian, SIGCONT);  // had a regression stopped it, do not leave it so
  unforge(n, a);
  unforge(n, b);
  unforge(n, g);
}

// The sys() seam records every signal the holder attempts; a signal to a
// pid or group <= 1 is recorded and swallowed (on code that would send it,
// kill(-1, SIGSTOP) would stop every process this user may signal).
struct attempt {
  char what;  // 'k' kill, 'o' pidfd_open
  int pid;
  int sig;
};
std::mutex g_mu;
std::vector<attempt> g_attempts;
int record_kill(pid_t pid, int sig) {
  {
    std::lock_guard<std::mutex> l(g_mu);
    g_attempts.push_back({'k', pid, sig});
  }
  if (pid >= -1 && pid <= 1) return 0;
  return ::kill(pid, sig);
}
int record_pidfd_open(pid_t pid) {
  {
    std::lock_guard<std::mutex> l(g_mu);
    g_attempts.push_back({'o', pid, 0});
  }
  if (pid <= 1) return errno = EPERM, -1;
  return kd::sys_impl::pidfd_open(pid);
}

TEST(trust_signal, pid_one_and_group_one_are_never_signalled) {
  krex_test::scoped_segment seg;
  krex_test::shared<krex_test::counters> mem;
  auto sleeper = bystander(mem, 0);
  ASSERT_TRUE(moves(mem, 0));
  const kd::sys_table saved = kd::sys();
  g_attempts.clear();
  kd::sys().kill = record_kill;
  kd::sys().pidfd_open = record_pidfd_open;
  {
    krex::tenant t{signal_opts(seg)};
    kd::node_state& n = *krex::detail::member_of(t).node;
    // What a tenant that is pid 1 of its own pid namespace records; init's
    // real start time, as the /proc of any namespace shows it.
    const std::uint32_t i = forge_slot(n, krex::detail::member_of(t).device, 1, start_of(1));
    {
      krex::region r{t};
      EXPECT_TRUE(moves(mem, 0)) << "an unrelated process stopped during the region";
      EXPECT_EQ(r.report().unverified_pids, std::vector<int>{1});
      EXPECT_TRUE(r.report().frozen_pids.empty());
    }
    unforge(n, i);
  }
  kd::sys() = saved;
  for (const attempt& a : g_attempts) {
    EXPECT_FALSE(a.what == 'k' && a.pid >= -1 && a.pid <= 1)
        << "kill(" << a.pid << ", " << a.sig << ") attempted";
    EXPECT_FALSE(a.what == 'o' && a.pid <= 1) << "pidfd_open(" << a.pid << ") attempted";
  }
  EXPECT_TRUE(moves(mem, 0));
}

// A member (it has the segment mapped, as every joined tenant has) that a
// region verified and stopped is continued; the verification is not a
// refusal of everybody.
TEST(trust_signal, verified_member_is_stopped_and_continued) {
  beside_a_member b;
  ASSERT_NO_FATAL_FAILURE(join_beside_a_member(b));
  {
    krex::region r{*b.t};
    EXPECT_TRUE(holds(b.mem, 0)) << "a verified member was not stopped";
    EXPECT_EQ(r.report().frozen_pids, std::vector<int>{b.member.pid()});
    EXPECT_TRUE(r.report().unverified_pids.empty());
    EXPECT_EQ(b.n->tenants[b.i].stop_target.load(), b.member.pid())
        << "stop not recorded for recoverers";
  }
  EXPECT_TRUE(moves(b.mem, 0)) << "not continued after the region";
  EXPECT_EQ(b.n->tenants[b.i].stop_target.load(), 0);
}

// --- membership: the mapping is the segment file, not a look-alike path --------

// Issue 20: "maps the segment" was a suffix match on the maps line's path. A
// process that maps its own file at "/tmp/<x> <segment path>" (a directory
// whose name ends in a space) ends its maps line in " <segment path>", and,
// with an agent-named thread and a forged slot, was verified and stopped.
TEST(trust_signal, look_alike_path_is_not_the_segment) {
  krex_test::scoped_segment seg;
  krex_test::shared<krex_test::counters> mem;
  const std::string real = kd::segment_id_of(signal_opts(seg)).path();
  const std::string top = "/tmp/" + krex_test::unique_name("lookalike") + " ";
  const std::string fake = top + real;
  ASSERT_EQ(std::system(("mkdir -p '" + fake.substr(0, fake.rfind('/')) + "'").c_str()), 0);
  struct cleanup {
    std::string dir;
    ~cleanup() { (void)std::system(("rm -rf '" + dir + "'").c_str()); }
  } rm{top};
  auto impostor = krex_test::spawn([&] {
    const int fd = ::open(fake.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0 || ::ftruncate(fd, 4096) != 0) return 1;
    if (::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED) return 2;
    while (mem->value[2].load() == 0) ::usleep(100);  // its slot is forged
    name_as_agent(static_cast<std::uint32_t>(mem->value[1].load()));
    mem->ready++;
    for (;;) {
      mem->value[0]++;
      ::usleep(500);
    }
    return 0;
  });
  // Joined only now: a child forked from a member inherits its mapping.
  krex::tenant t{signal_opts(seg)};
  kd::node_state& n = *krex::detail::member_of(t).node;
  // The impostor names its thread for the slot forged for it.
  const std::uint32_t d = krex::detail::member_of(t).device;
  const std::uint32_t i = forge_slot(n, d, impostor.pid(), 0);
  mem->value[1] = i;
  mem->value[2] = 1;
  ASSERT_TRUE(krex_test::wait_until([&] { return mem->ready.load() == 1; }, 5000ms));
  n.tenants[i].start_time.store(start_of(impostor.pid()));
  // Its maps line ends in " <segment path>": the old proof's whole test.
  {
    std::ifstream maps("/proc/" + std::to_string(impostor.pid()) + "/maps");
    bool ends_alike = false;
    for (std::string line; std::getline(maps, line);)
      ends_alike = ends_alike || (line.size() > real.size() &&
                                  line.compare(line.size() - real.size() - 1, std::string::npos,
                                               " " + real) == 0);
    ASSERT_TRUE(ends_alike) << "the look-alike does not look alike";
  }
  const kd::identity_domain id = kd::make_identity_domain(
      krex::segment_access::user, real.c_str());
  EXPECT_EQ(kd::as_safe::verify_member(id, impostor.pid(), start_of(impostor.pid()), i),
            kd::identity_not_mapped);
  {
    krex::region r{t};
    EXPECT_TRUE(moves(mem, 0)) << "a process mapping a look-alike path was stopped";
    EXPECT_EQ(r.report().unverified_pids, std::vector<int>{impostor.pid()});
    EXPECT_TRUE(r.report().frozen_pids.empty());
  }
  unforge(n, i);
}

// A member whose segment file was removed (and replaced by another file at
// the same path) still maps the file it joined: the device and inode it
// joined with prove it, the path no longer does either way.
TEST(trust_signal, membership_follows_the_file_not_its_name) {
  beside_a_member b;
  ASSERT_NO_FATAL_FAILURE(join_beside_a_member(b));
  const std::string path = kd::segment_id_of(signal_opts(b.seg)).path();
  const kd::identity_domain joined =
      kd::make_identity_domain(krex::segment_access::user, path.c_str());
  const std::uint64_t start = start_of(b.member.pid());
  ASSERT_EQ(kd::as_safe::verify_member(joined, b.member.pid(), start, b.i), kd::identity_ok);
  // Replaced: a new file under the segment's name is not what members map.
  const std::string aside = path + ".aside";
  ASSERT_EQ(::rename(path.c_str(), aside.c_str()), 0);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  ASSERT_GE(fd, 0);
  ::close(fd);
  const kd::identity_domain replaced =
      kd::make_identity_domain(krex::segment_access::user, path.c_str());
  EXPECT_EQ(kd::as_safe::verify_member(replaced, b.member.pid(), start, b.i),
            kd::identity_not_mapped);
  EXPECT_EQ(kd::as_safe::verify_member(joined, b.member.pid(), start, b.i), kd::identity_ok)
      << "the member's mapping is the file it joined, whatever its name now";
  ::unlink(path.c_str());
  ASSERT_EQ(::rename(aside.c_str(), path.c_str()), 0);
}

// --- the holder: a sibling someone else stopped ---------------------------------

// Issue 20: an operator or debugger stopped a sibling before the region. The
// freeze must not stop it "again" and then continue it at thaw: it stays
// stopped, is reported, and a member that was running is frozen as before.
TEST(trust_signal, sibling_stopped_by_someone_else_is_never_continued) {
  krex_test::scoped_segment seg;
  krex_test::shared<krex_test::counters> mem;
  auto parked = joined_member(seg, mem, 0);
  auto running = joined_member(seg, mem, 1);
  ASSERT_TRUE(krex_test::wait_until([&] { return mem->ready.load() == 2; }, 5000ms));
  ASSERT_EQ(::kill(parked.pid(), SIGSTOP), 0);  // the operator's stop
  ASSERT_TRUE(stopped(parked.pid()));
  krex::tenant t{signal_opts(seg)};
  kd::node_state& n = *krex::detail::member_of(t).node;
  const std::uint32_t i = slot_of(n, parked.pid());
  ASSERT_LT(i, kd::max_tenants);
  {
    krex::region r{t};
    const auto& rep = r.report();
    EXPECT_TRUE(holds(mem, 1)) << "the running member was not frozen";
    EXPECT_EQ(rep.frozen_pids, std::vector<int>{running.pid()});
    EXPECT_EQ(rep.stopped_pids, std::vector<int>{parked.pid()});
    EXPECT_EQ(n.tenants[i].stop_target.load(), 0) << "a stop krex did not send was recorded";
    EXPECT_TRUE(std::any_of(rep.notes.begin(), rep.notes.end(), [](const std::string& l) {
      return l.find("already stopped by someone else") != std::string::npos;
    }));
  }
  EXPECT_TRUE(moves(mem, 1)) << "the member krex froze was not continued";
  EXPECT_EQ(state_of(parked.pid()), 'T') << "krex continued a stop it did not send";
  EXPECT_TRUE(holds(mem, 0));

  // Continued by its owner during the body: the region ran beside it.
  {
    krex::region r{t};
    EXPECT_EQ(r.report().stopped_pids, std::vector<int>{parked.pid()});
    ASSERT_EQ(::kill(parked.pid(), SIGCONT), 0);
    ASSERT_TRUE(moves(mem, 0));
    r.exit();
    EXPECT_TRUE(r.report().freeze_broken) << "a sibling ran during the body unreported";
  }
}

// --- the holder: a pid reused between freeze and thaw --------------------------

// Forks until a child gets pid `want` (steered through ns_last_pid); the
// child runs `body`. Returns an empty handle if the pid could not be had.
template <class F>
krex_test::child fork_at_pid(pid_t want, F body) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    FILE* f = std::fopen("/proc/sys/kernel/ns_last_pid", "w");
    if (f == nullptr) return {};
    std::fprintf(f, "%d", static_cast<int>(want - 1));
    std::fclose(f);
    auto c = krex_test::spawn([&] { return ::getpid() == want ? body() : 0; });
    if (c.pid() == want) return c;
    (void)c.wait(5000ms);
  }
  return {};
}

TEST(trust_signal, holder_thaw_never_touches_a_reused_pid) {
  if (::geteuid() != 0) GTEST_SKIP() << "steering pid reuse (ns_last_pid) needs root";
  krex_test::scoped_segment seg;
  krex_test::shared<krex_test::counters> mem;
  auto tenant = krex_test::spawn([&] {
    kd::segment s{signal_opts(seg)};
    name_as_agent(0);
    mem->ready++;
    for (;;) ::usleep(1000);
    return 0;
  });
  ASSERT_TRUE(krex_test::wait_until([&] { return mem->ready.load() == 1; }, 5000ms));
  const pid_t pid = tenant.pid();
  const std::uint64_t start = start_of(pid);
  kd::freezer h = kd::freezer::open(freeze_method::signal, "");
  h.bind(kd::make_identity_domain(krex::segment_access::user,
                                  kd::segment_id_of(signal_opts(seg)).path().c_str()));
  kd::freezer::record r = h.freeze({{0, pid, start}}, std::chrono::steady_clock::now() + 2s);
  ASSERT_TRUE(r.refused.empty()) << kd::to_string(r.refused[0].why);
  ASSERT_TRUE(stopped(pid));
  (void)tenant.wait(0ms);  // SIGKILLed and reaped: the pid is free
  auto reused = fork_at_pid(pid, [&] {
    for (;;) {
      mem->value[0]++;
      ::usleep(500);
    }
    return 0;
  });
  if (reused.pid() != pid) GTEST_SKIP() << "could not get pid " << pid << " again";
  ::kill(pid, SIGSTOP);  // stopped by someone else, for its own reasons
  ASSERT_TRUE(stopped(pid));
  EXPECT_TRUE(h.thaw(r, {{0, pid, start}})) << h.last_error();
  EXPECT_TRUE(holds(mem, 0)) << "the thaw continued the process that reused the pid";
  EXPECT_EQ(state_of(pid), 'T');
}

// --- the guardian / recoverers: thaw_device ------------------------------------

struct guardian_thaw : ::testing::Test {
  krex_test::scoped_segment seg;
  krex_test::shared<krex_test::counters> mem;
  std::optional<kd::segment> shm;
  kd::recovery_config c;
  void SetUp() override {
    shm.emplace(signal_opts(seg));
    c.method = freeze_method::signal;
    c.identity = kd::make_identity_domain(krex::segment_access::user, shm->path().c_str());
  }
  kd::node_state& node() { return shm->node(); }
  // A slot that says the holder stopped `pid` (started at `start`) for it.
  std::uint32_t recorded_stop(std::int32_t pid, std::uint64_t start, std::int32_t target) {
    const std::uint32_t i = forge_slot(node(), 0, pid, start);
    node().tenants[i].frozen.store(1);
    node().tenants[i].stop_start_time.store(start);
    node().tenants[i].stop_target.store(target);
    return i;
  }
};

TEST_F(guardian_thaw, forged_stop_record_continues_nothing) {
  auto victim = bystander(mem, 0);
  ASSERT_TRUE(moves(mem, 0));
  ::kill(victim.pid(), SIGSTOP);  // stopped by its owner, not by krex
  ASSERT_TRUE(stopped(victim.pid()));
  const std::uint32_t i = recorded_stop(victim.pid(), start_of(victim.pid()), victim.pid());
  kd::thaw_device(node(), 0, c);
  EXPECT_TRUE(holds(mem, 0)) << "the recoverer continued a process that is no member";
  unforge(node(), i);
}

TEST_F(guardian_thaw, unrecorded_start_time_continues_nothing) {
  auto victim = bystander(mem, 0);
  ASSERT_TRUE(moves(mem, 0));
  ::kill(victim.pid(), SIGSTOP);
  ASSERT_TRUE(stopped(victim.pid()));
  // Start time 0 used to mean "exists is enough".
  const std::uint32_t i = recorded_stop(victim.pid(), 0, victim.pid());
  kd::thaw_device(node(), 0, c);
  EXPECT_TRUE(holds(mem, 0)) << "a pid without a recorded start time was continued";
  unforge(node(), i);
}

TEST_F(guardian_thaw, continues_the_member_its_holder_stopped) {
  auto member = joined_member(seg, mem, 0);
  ASSERT_TRUE(krex_test::wait_until([&] { return mem->ready.load() == 1; }, 5000ms));
  const std::uint32_t i = slot_of(node(), member.pid());
  ASSERT_LT(i, kd::max_tenants);
  const std::uint32_t d = node().tenants[i].device.load();
  // A holder stops it, then "dies" (its freezer and the freeze's record are
  // dropped without a thaw).
  {
    kd::freezer h = kd::freezer::open(freeze_method::signal, "");
    h.bind(c.identity, &node());
    (void)h.freeze({{i, member.pid(), start_of(member.pid())}},
                   std::chrono::steady_clock::now() + 2s);
  }
  ASSERT_TRUE(stopped(member.pid()));
  ASSERT_EQ(node().tenants[i].stop_target.load(), member.pid());
  EXPECT_EQ(kd::thaw_device(node(), d, c), 0);
  EXPECT_TRUE(moves(mem, 0)) << "the recoverer did not continue a verified member";
  EXPECT_EQ(node().tenants[i].stop_target.load(), 0);
}

TEST_F(guardian_thaw, reused_pid_is_never_continued) {
  if (::geteuid() != 0) GTEST_SKIP() << "steering pid reuse (ns_last_pid) needs root";
  auto tenant = krex_test::spawn([&] {
    for (;;) ::usleep(1000);
    return 0;
  });
  const pid_t pid = tenant.pid();
  const std::uint64_t start = start_of(pid);
  // A slot that recorded a stop of that process; then it dies. (Start
  // times count clock ticks: the pid comes back at least a tick later.)
  const std::uint32_t i = recorded_stop(pid, start, pid);
  std::this_thread::sleep_for(30ms);
  (void)tenant.wait(0ms);
  // The pid comes back as a process that is a member of that very slot by
  // every other sign (segment mapped, the slot's agent thread): still not
  // the one that was stopped.
  auto reused = fork_at_pid(pid, [&] {
    kd::segment s{signal_opts(seg)};
    name_as_agent(i);
    for (;;) {
      mem->value[0]++;
      ::usleep(500);
    }
    return 0;
  });
  if (reused.pid() != pid) GTEST_SKIP() << "could not get pid " << pid << " again";
  ASSERT_TRUE(moves(mem, 0));
  ::kill(pid, SIGSTOP);
  ASSERT_TRUE(stopped(pid));
  kd::thaw_device(node(), 0, c);
  EXPECT_TRUE(holds(mem, 0)) << "the recoverer continued the process that reused the pid";
  unforge(node(), i);
}

// --- pid namespaces -------------------------------------------------------------

// A child in a new pid namespace (it is pid 1 there) tries to join a
// signal-freezing segment; `first`: it joins before the test process does.
// Returns what happened there: 0 joined, 1 refused naming pid namespaces, 2
// another error, 3 no new pid namespace could be made.
struct ns_board {
  std::atomic<int> go;
  std::atomic<int> result;
  std::atomic<int> done;
};

TEST(trust_signal, tenants_of_two_pid_namespaces_cannot_share_signal_freezing) {
  krex_test::scoped_segment seg;
  for (const bool ns_first : {false, true}) {
    SCOPED_TRACE(ns_first ? "namespaced tenant first" : "namespaced tenant second");
    krex_test::shared<ns_board> b;
    b->result = -1;
    auto outer = krex_test::spawn([&] {
      if (::unshare(CLONE_NEWPID) != 0) {
        b->result = 3;
        return 0;
      }
      const pid_t inner = ::fork();
      if (inner == 0) {
        if (!ns_first)
          while (b->go.load() == 0) ::usleep(1000);
        try {
          krex::tenant t{signal_opts(seg)};
          b->result = 0;
          b->done = 1;
          while (b->go.load() < 2) ::usleep(1000);  // stay joined while the test joins
        } catch (const krex::error& e) {
          b->result = std::string(e.what()).find("pid namespace") != std::string::npos ? 1 : 2;
          std::fprintf(stderr, "%s\n", e.what());
          b->done = 1;
        }
        ::_exit(0);
      }
      int st = 0;
      ::waitpid(inner, &st, 0);
      return 0;
    });
    if (ns_first) {
      ASSERT_TRUE(krex_test::wait_until([&] { return b->done.load() == 1 || b->result == 3; }, 10s));
      if (b->result == 3) GTEST_SKIP() << "cannot create a pid namespace here (needs CAP_SYS_ADMIN)";
      ASSERT_EQ(b->result.load(), 0);
      try {
        krex::tenant t{signal_opts(seg)};
        ADD_FAILURE() << "joined a segment whose tenant is in another pid namespace";
      } catch (const krex::error& e) {
        EXPECT_EQ(e.where(), krex::step::join);
        EXPECT_NE(std::string(e.what()).find("pid namespace"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("KREX_FREEZE=cgroup2"), std::string::npos) << e.what();
      }
      b->go = 2;
    } else {
      krex::tenant t{signal_opts(seg)};
      b->go = 1;
      ASSERT_TRUE(krex_test::wait_until([&] { return b->done.load() == 1 || b->result == 3; }, 10s));
      if (b->result == 3) GTEST_SKIP() << "cannot create a pid namespace here (needs CAP_SYS_ADMIN)";
      EXPECT_EQ(b->result.load(), 1) << "a tenant in another pid namespace joined (0) or failed otherwise (2)";
      b->go = 2;
    }
    EXPECT_EQ(krex_test::exit_code(outer.wait(10s)), 0);
  }
}

}  // namespace
