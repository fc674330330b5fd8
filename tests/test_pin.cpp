// SPDX-License-Identifier: Apache-2.0
// Step 4: cpulists, topology from fake sysfs trees, slicing, and pinning on
// the real machine (with failures injected through the syscall seam).
#include <krex/detail/cpu/slices.hpp>

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace kd = krex::detail;
using cpus_t = std::vector<int>;

namespace {

std::string data_dir() {
  std::string f = __FILE__;
  return f.substr(0, f.find_last_of('/') + 1) + "data";
}

// A fake sysfs tree in a fresh temporary directory, removed at destruction.
struct fake_sysfs {
  std::string root;
  fake_sysfs() {
    char tmpl[] = "/tmp/krex-sysfs-XXXXXX";
    root = ::mkdtemp(tmpl);
  }
  ~fake_sysfs() { std::system(("rm -rf '" + root + "'").c_str()); }
  void write(const std::string& rel, const std::string& text) const {
    const std::string path = root + "/" + rel;
    for (auto i = path.find('/', root.size() + 1); i != std::string::npos;
         i = path.find('/', i + 1))
      ::mkdir(path.substr(0, i).c_str(), 0755);
    std::ofstream(path) << text << "\n";
  }
  // `sockets` x `cores` x `smt`, one NUMA node per socket, Intel numbering:
  // CPU c + k*sockets*cores is the k-th SMT sibling of CPU c.
  void box(int sockets, int cores, int smt) const {
    const int n = sockets * cores;
    write("devices/system/cpu/online", "0-" + std::to_string(n * smt - 1));
    for (int c = 0; c < n * smt; ++c) {
      const std::string t = "devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
      write(t + "core_id", std::to_string((c % n) % cores));
      write(t + "physical_package_id", std::to_string((c % n) / cores));
    }
    for (int s = 0; s < sockets; ++s) {
      cpus_t l;
      for (int c = 0; c < n * smt; ++c)
        if ((c % n) / cores == s) l.push_back(c);
      write("devices/system/node/node" + std::to_string(s) + "/cpulist", kd::format_cpulist(l));
    }
  }
};

cpus_t range(int lo, int hi) {
  cpus_t v;
  for (int c = lo; c <= hi; ++c) v.push_back(c);
  return v;
}

// The invariants every split must keep.
void check_slices(const kd::topology& topo, const std::vector<kd::slice>& s, int reserved) {
  std::map<int, int> core_of;
  for (const auto& c : topo.cpus) core_of[c.cpu] = c.core;
  std::multiset<int> seen;
  for (const auto& sl : s) {
    seen.insert(sl.cpus.begin(), sl.cpus.end());
    EXPECT_TRUE(
        std::includes(sl.cpus.begin(), sl.cpus.end(), sl.reserved.begin(), sl.reserved.end()));
    std::set<int> cores, rcores;
    for (int c : sl.cpus) cores.insert(core_of.at(c));
    for (int c : sl.reserved) rcores.insert(core_of.at(c));
    EXPECT_EQ(static_cast<int>(rcores.size()), reserved);
    for (const auto& c : topo.cpus) {  // whole cores: every sibling is in or out together
      EXPECT_EQ(cores.count(c.core) > 0, std::count(sl.cpus.begin(), sl.cpus.end(), c.cpu) > 0);
      EXPECT_EQ(rcores.count(c.core) > 0,
                std::count(sl.reserved.begin(), sl.reserved.end(), c.cpu) > 0);
    }
  }
  std::vector<int> all;
  for (const auto& c : topo.cpus) all.push_back(c.cpu);
  EXPECT_EQ(cpus_t(seen.begin(), seen.end()), all);  // disjoint and covering
}

// Replaces one seam entry for the lifetime of the object.
template <class Fn>
struct seam_swap {
  Fn& slot;
  Fn saved;
  seam_swap(Fn& s, Fn replacement) : slot(s), saved(s) { slot = replacement; }
  ~seam_swap() { slot = saved; }
};

pid_t this_tid() { return static_cast<pid_t>(::syscall(SYS_gettid)); }

}  // namespace

TEST(cpulist, parse_and_format_round_trip) {
  EXPECT_EQ(kd::parse_cpulist("0-3,8,10-11"), (cpus_t{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(kd::parse_cpulist(" 5,1-2,2\n"), (cpus_t{1, 2, 5}));
  EXPECT_EQ(kd::parse_cpulist("\n"), cpus_t{});
  EXPECT_EQ(kd::format_cpulist({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_EQ(kd::format_cpulist({11, 3, 3, 10}), "3,10-11");
  EXPECT_EQ(kd::format_cpulist({}), "");
  for (const char* s : {"0", "0-63", "1,3,5-7,100-101", "0-1,4095"})
    EXPECT_EQ(kd::format_cpulist(kd::parse_cpulist(s)), s);
}

TEST(cpulist, garbage_is_a_pin_error) {
  for (const char* s : {"a", "1-", "-1", "3-1", "1,,2", "1,", "1 2", "0x3", "1-2-3", "99999999"}) {
    try {
      kd::parse_cpulist(s);
      ADD_FAILURE() << "accepted '" << s << "'";
    } catch (const krex::error& e) {
      EXPECT_EQ(e.where(), krex::step::pin);
      EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what();
    }
  }
}

TEST(topology, two_sockets_smt2_from_data_tree) {
  const std::string root = data_dir() + "/sysfs-2s-smt2";
  const auto topo = kd::topology::read(root, range(0, 15));
  ASSERT_EQ(topo.cpus.size(), 16u);
  // core_id repeats per socket (0,1,4,6); `core` must not.
  EXPECT_EQ(topo.cpus[0], (kd::cpu_info{0, 0, 0, 0}));
  EXPECT_EQ(topo.cpus[4], (kd::cpu_info{4, 4, 1, 1}));
  EXPECT_EQ(topo.cpus[8], (kd::cpu_info{8, 0, 0, 0}));
  EXPECT_EQ(topo.cpus[15], (kd::cpu_info{15, 7, 1, 1}));

  const auto g0 = kd::pci_local_cpus("0000:1b:00.0", root);
  const auto g1 = kd::pci_local_cpus("00000000:9A:00.0", root);  // CUDA's spelling
  EXPECT_EQ(kd::format_cpulist(g0), "0-3,8-11");
  EXPECT_EQ(kd::format_cpulist(g1), "4-7,12-15");
  EXPECT_TRUE(kd::pci_local_cpus("0000:ff:00.0", root).empty());
  EXPECT_TRUE(kd::pci_local_cpus("../../etc", root).empty());

  // GPUs listed in the opposite order from their sockets: locality wins.
  const auto s = kd::split(topo, 2, 1, {g1, g0});
  check_slices(topo, s, 1);
  EXPECT_EQ(kd::format_cpulist(s[0].cpus), "4-7,12-15");
  EXPECT_EQ(kd::format_cpulist(s[1].cpus), "0-3,8-11");
  EXPECT_EQ(kd::format_cpulist(s[0].reserved), "7,15");  // highest core, with its sibling
  EXPECT_EQ(kd::format_cpulist(s[1].reserved), "3,11");
  EXPECT_EQ(kd::format_cpulist(kd::unreserved(s)), "0-2,4-6,8-10,12-14");
  EXPECT_EQ(kd::split(topo, 2, 1, {g1, g0})[0].cpus, s[0].cpus);  // deterministic

  const auto s3 = kd::split(topo, 2, 3, {g0, g1});
  check_slices(topo, s3, 3);
  EXPECT_EQ(kd::format_cpulist(s3[0].reserved), "1-3,9-11");

  // A taskset that splits an SMT pair: the lone CPU is still a core.
  const auto narrow = kd::topology::read(root, {{0, 1, 2, 9}});
  const auto sn = kd::split(narrow, 1, 1, {g0});
  check_slices(narrow, sn, 1);
  EXPECT_EQ(kd::format_cpulist(sn[0].reserved), "2");
}

TEST(topology, eight_gpus_on_32_cores) {
  fake_sysfs fs;
  fs.box(2, 16, 2);  // 64 CPUs, node 0 = cores 0-15 (CPUs 0-15,32-47)
  const auto topo = kd::topology::read(fs.root, range(0, 63));
  std::vector<cpus_t> local;
  for (int d = 0; d < 8; ++d)
    local.push_back(d < 4 ? kd::parse_cpulist("0-15,32-47") : kd::parse_cpulist("16-31,48-63"));
  for (int r : {1, 2, 3}) {
    const auto s = kd::split(topo, 8, r, local);
    ASSERT_EQ(s.size(), 8u);
    check_slices(topo, s, r);
    for (int d = 0; d < 8; ++d) {
      EXPECT_EQ(s[d].cpus.size(), 8u);
      for (int c : s[d].cpus) EXPECT_EQ(topo.cpus[c].node, d < 4 ? 0 : 1) << "GPU " << d;
    }
  }
  EXPECT_EQ(kd::format_cpulist(kd::split(topo, 8, 1, local)[5].cpus), "20-23,52-55");
  // No locality known: still 8 disjoint slices of whole cores.
  check_slices(topo, kd::split(topo, 8, 1), 1);
  // Uneven: 32 cores over 3 devices, one of them without preference.
  check_slices(topo, kd::split(topo, 3, 2, {local[0], {}, local[7]}), 2);
}

TEST(topology, one_device_on_two_cores_like_this_machine) {
  fake_sysfs fs;
  fs.box(1, 2, 1);
  const auto topo = kd::topology::read(fs.root, {{0, 1}});
  const auto s = kd::split(topo, 1, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].cpus, (cpus_t{0, 1}));
  EXPECT_EQ(s[0].reserved, (cpus_t{1}));
  EXPECT_EQ(kd::unreserved(s), (cpus_t{0}));
}

TEST(topology, missing_files_degrade) {
  fake_sysfs fs;
  fs.write("devices/system/cpu/cpu0/uevent", "");
  fs.write("devices/system/cpu/cpu1/uevent", "");
  fs.write("devices/system/cpu/cpu2/topology/core_id", "-1");
  const auto topo = kd::topology::read(fs.root, {{0, 1, 2, 3}});
  ASSERT_EQ(topo.cpus.size(), 4u);
  for (const auto& c : topo.cpus) EXPECT_EQ(c, (kd::cpu_info{c.cpu, c.cpu, 0, 0}));
  fs.write("devices/system/node/node0/cpulist", "0-1,zz");
  EXPECT_THROW(kd::topology::read(fs.root, {{0}}), krex::error);
}

TEST(topology, too_few_cores_is_a_clear_error) {
  fake_sysfs fs;
  fs.box(1, 4, 2);
  const auto topo = kd::topology::read(fs.root, range(0, 7));
  EXPECT_NO_THROW(kd::split(topo, 3, 1));
  try {
    kd::split(topo, 4, 1);  // 4 cores, 5 needed
    FAIL() << "split accepted 4 devices on 4 cores";
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), krex::step::pin);
    const std::string w = e.what();
    EXPECT_NE(w.find("only 4 physical core(s)"), std::string::npos) << w;
    EXPECT_NE(w.find("KREX_RESERVED_CORES"), std::string::npos) << w;
    EXPECT_NE(w.find("KREX_PIN=0"), std::string::npos) << w;
  }
  EXPECT_THROW(kd::split(topo, 0, 1), krex::error);
}

TEST(pin, guard_pins_to_reserved_cores_and_restores) {
  const auto topo = kd::topology::read();
  ASSERT_EQ(topo.cpus.size(), kd::allowed_cpus().size());
  if (topo.cpus.size() < 2) GTEST_SKIP() << "needs 2 allowed CPUs, have " << topo.cpus.size();
  const auto s = kd::split(topo, 1, 1);
  std::thread([&] {
    const cpus_t before = kd::current_affinity();
    {
      kd::pin_guard g(s[0].reserved);
      EXPECT_EQ(kd::current_affinity(), s[0].reserved);
      EXPECT_EQ(g.pinned(), s[0].reserved);
      EXPECT_EQ(g.previous(), before);
    }
    EXPECT_EQ(kd::current_affinity(), before);
  }).join();
}

TEST(pin, outside_allowed_set_is_an_error) {
  const cpus_t allowed = kd::allowed_cpus();
  const int outside = allowed.back() + 1;
  const cpus_t before = kd::current_affinity();
  try {
    kd::pin_guard g({outside});
    FAIL() << "pinned outside the allowed set";
  } catch (const krex::error& e) {
    EXPECT_EQ(e.where(), krex::step::pin);
    const std::string w = e.what();
    EXPECT_NE(w.find(std::to_string(outside)), std::string::npos) << w;
    EXPECT_NE(w.find("allowed set " + kd::format_cpulist(allowed)), std::string::npos) << w;
  }
  EXPECT_THROW(kd::pin_guard g(cpus_t{}), krex::error);
  EXPECT_THROW(kd::confine_process({outside}), krex::error);
  EXPECT_EQ(kd::current_affinity(), before);
}

TEST(pin, injected_eperm_is_reported_with_errno) {
  const cpus_t allowed = kd::allowed_cpus();  // cache before the seam lies
  const cpus_t before = kd::current_affinity();
  auto& slot = kd::sys().sched_setaffinity;
  {
    seam_swap<decltype(kd::sys().sched_setaffinity)> s(slot, [](pid_t, size_t, const cpu_set_t*) {
      errno = EPERM;
      return -1;
    });
    try {
      kd::pin_guard g({allowed.front()});
      FAIL() << "pin_guard ignored EPERM";
    } catch (const krex::error& e) {
      EXPECT_EQ(e.where(), krex::step::pin);
      EXPECT_EQ(e.code(), EPERM);
      EXPECT_NE(std::string(e.what()).find(std::strerror(EPERM)), std::string::npos);
    }
    try {
      kd::confine_process({allowed.front()});
      FAIL() << "confine_process ignored EPERM";
    } catch (const krex::error& e) {
      EXPECT_EQ(e.code(), EPERM);
    }
  }
  {
    seam_swap<decltype(kd::sys().sched_getaffinity)> s(kd::sys().sched_getaffinity,
                                                       [](pid_t, size_t, cpu_set_t*) {
                                                         errno = EPERM;
                                                         return -1;
                                                       });
    try {
      kd::current_affinity();
      FAIL() << "current_affinity ignored EPERM";
    } catch (const krex::error& e) {
      EXPECT_EQ(e.code(), EPERM);
    }
  }
  EXPECT_EQ(kd::current_affinity(), before);
}

TEST(pin, confine_process_moves_every_thread) {
  const cpus_t allowed = kd::allowed_cpus();
  if (allowed.size() < 2) GTEST_SKIP() << "needs 2 allowed CPUs";
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  std::vector<std::atomic<pid_t>> tids(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] {
      tids[i] = this_tid();
      ++started;
      while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  while (started < 2) std::this_thread::yield();

  const cpus_t target{allowed.front()};
  const cpus_t previous = kd::confine_process(target);
  EXPECT_EQ(previous, allowed);
  for (pid_t tid : {this_tid(), tids[0].load(), tids[1].load()})
    EXPECT_EQ(kd::thread_affinity(tid), target) << "thread " << tid;
  cpus_t inherited;
  std::thread([&] { inherited = kd::current_affinity(); }).join();
  EXPECT_EQ(inherited, target);
  // A narrowed process may still pin to any allowed CPU.
  std::thread([&] {
    kd::pin_guard g({allowed.back()});
    EXPECT_EQ(kd::current_affinity(), cpus_t{allowed.back()});
  }).join();

  EXPECT_EQ(kd::confine_process(previous), target);
  for (pid_t tid : {this_tid(), tids[0].load(), tids[1].load()})
    EXPECT_EQ(kd::thread_affinity(tid), allowed);
  stop = true;
  for (auto& t : threads) t.join();
}
