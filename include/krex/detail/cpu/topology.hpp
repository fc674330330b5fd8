// SPDX-License-Identifier: Apache-2.0
#pragma once

// What the machine looks like, read from sysfs: which physical core, package
// and NUMA node each CPU belongs to, and which CPUs are local to a PCI device.
// Pure reading and parsing; deciding who gets which cores is slices.hpp's job.

#include <krex/detail/sys.hpp>
#include <krex/error.hpp>

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace krex::detail {

/// Highest CPU number krex accepts in a cpulist (Linux's NR_CPUS is at most 8192).
inline constexpr int max_cpu = 65535;

/// Parses a Linux cpulist ("0-3,8,10-11", surrounding whitespace allowed,
/// empty = no CPUs) into sorted, unique CPU numbers.
/// Throws krex::error(step::pin) on anything else, quoting the input.
KREX_DETAIL_COLD inline std::vector<int> parse_cpulist(const std::string& s) {
  const auto bad = [&](const char* why) -> error {
    return {step::pin, cat({"bad cpulist '", s, "': ", why}), 0,
            "expected comma-separated CPUs or ranges, e.g. 0-3,8,10-11"};
  };
  std::size_t b = 0;
  std::size_t e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  std::vector<int> out;
  if (b == e) return out;
  std::size_t i = b;
  const auto number = [&]() -> int {
    if (i >= e || !std::isdigit(static_cast<unsigned char>(s[i]))) throw bad("expected a number");
    long v = 0;
    while (i < e && std::isdigit(static_cast<unsigned char>(s[i]))) {
      v = v * 10 + (s[i++] - '0');
      if (v > max_cpu) throw bad("CPU number above 65535");
    }
    return static_cast<int>(v);
  };
  for (;;) {
    const int lo = number();
    int hi = lo;
    if (i < e && s[i] == '-') {
      ++i;
      hi = number();
      if (hi < lo) throw bad("descending range");
    }
    for (int c = lo; c <= hi; ++c) out.push_back(c);
    if (i == e) break;
    if (s[i] != ',') throw bad("unexpected character");
    ++i;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

/// The inverse of parse_cpulist: sorted, compact ranges ("0-3,8,10-11"); "" for none.
KREX_DETAIL_COLD inline std::string format_cpulist(const std::vector<int>& cpus) {
  std::vector<int> v = cpus;
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  std::string out;
  for (std::size_t i = 0; i < v.size();) {
    std::size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += cat({v[i]});
    if (j > i) out += cat({"-", v[j]});
    i = j + 1;
  }
  return out;
}

/// Sorts `v` stably by `less`: an insertion sort, for the few and mostly sorted
/// elements of the topology and the slicing (no std::stable_sort merge code).
template <class T, class Less>
void insertion_sort(std::vector<T>& v, Less less) {
  for (std::size_t i = 1; i < v.size(); ++i)
    for (std::size_t j = i; j > 0 && less(v[j], v[j - 1]); --j) std::swap(v[j], v[j - 1]);
}

/// Contents of a small (pseudo-)file through the syscall seam; nullopt if it
/// cannot be opened or read. Topology is advisory: a missing file degrades.
inline std::optional<std::string> read_small_file(const std::string& path) {
  std::string out;
  if (read_small_file(path, out) != 0) return std::nullopt;
  return out;
}

/// A cpulist file, or nullopt if absent. Garbage in it is an error naming the file.
inline std::optional<std::vector<int>> read_cpulist_file(const std::string& path) {
  const auto text = read_small_file(path);
  if (!text) return std::nullopt;
  try {
    return parse_cpulist(*text);
  } catch (const error& e) {
    throw error(step::pin, cat({path, ": ", e.what()}), 0, "is sysfs mounted normally?");
  }
}

/// A small non-negative integer file (core_id, physical_package_id); nullopt if absent or odd.
inline std::optional<int> read_int_file(const std::string& path) {
  const auto text = read_small_file(path);
  if (!text) return std::nullopt;
  std::size_t i = 0;
  while (i < text->size() && std::isspace(static_cast<unsigned char>((*text)[i]))) ++i;
  long v = 0;
  std::size_t digits = 0;
  for (; i < text->size() && std::isdigit(static_cast<unsigned char>((*text)[i])); ++i, ++digits) {
    v = v * 10 + ((*text)[i] - '0');
    if (v > 1'000'000'000L) return std::nullopt;
  }
  if (digits == 0) return std::nullopt;  // includes "-1", which some platforms report
  return static_cast<int>(v);
}

/// Numeric suffixes of the entries "<prefix>N" of a directory, sorted.
KREX_DETAIL_COLD inline std::vector<int> numbered_entries(const std::string& dir, const std::string& prefix) {
  std::vector<int> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  // readdir is safe on a DIR* no other thread uses.
  while (const dirent* ent = ::readdir(d)) {  // NOLINT(concurrency-mt-unsafe)
    const std::string name = ent->d_name;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string tail = name.substr(prefix.size());
    if (tail.size() > 6 || !std::all_of(tail.begin(), tail.end(), [](char c) {
          return std::isdigit(static_cast<unsigned char>(c));
        }))
      continue;
    out.push_back(std::stoi(tail));
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

/// One CPU. `core` identifies its physical core node-wide (the lowest CPU
/// number of that core), so SMT siblings share it even though sysfs core_id
/// repeats in every package.
struct cpu_info {
  int cpu;
  int core;
  int package;
  int node;
  friend bool operator==(const cpu_info& a, const cpu_info& b) noexcept {
    return a.cpu == b.cpu && a.core == b.core && a.package == b.package && a.node == b.node;
  }
};

/// A CPU mask for the sched_*affinity calls, sized for the CPUs it holds.
class cpu_mask {
 public:
  explicit cpu_mask(int ncpus = 1024) : m_words((std::max(ncpus, 1) + 63) / 64, 0) {}
  static cpu_mask of(const std::vector<int>& cpus) {
    cpu_mask m(cpus.empty() ? 1 : *std::max_element(cpus.begin(), cpus.end()) + 1);
    for (int c : cpus) CPU_SET_S(static_cast<std::size_t>(c), m.size(), m.get());
    return m;
  }
  std::vector<int> cpus() const {
    std::vector<int> out;
    for (std::size_t c = 0; c < m_words.size() * 64; ++c)
      if (CPU_ISSET_S(c, size(), get())) out.push_back(static_cast<int>(c));
    return out;
  }
  cpu_set_t* get() noexcept { return reinterpret_cast<cpu_set_t*>(m_words.data()); }
  const cpu_set_t* get() const noexcept {
    return reinterpret_cast<const cpu_set_t*>(m_words.data());
  }
  std::size_t size() const noexcept { return m_words.size() * sizeof(std::uint64_t); }

 private:
  std::vector<std::uint64_t> m_words;
};

/// The affinity of thread `tid` (0: the calling thread), through the seam.
/// Throws krex::error(step::pin) with the errno if it cannot be read.
inline std::vector<int> thread_affinity(pid_t tid) {
  // The kernel refuses (EINVAL) a mask smaller than its own; grow until it fits.
  for (int n = 1024; n <= max_cpu + 1; n *= 2) {
    cpu_mask m(n);
    if (sys().sched_getaffinity(tid, m.size(), m.get()) == 0) return m.cpus();
    if (errno != EINVAL) {
      const int err = errno;
      throw error(step::pin, cat({"sched_getaffinity(", tid, ") failed"}), err);
    }
  }
  throw error(step::pin, "sched_getaffinity: no mask size up to 65536 CPUs accepted", EINVAL);
}

/// The CPUs this process may be pinned to: the main thread's affinity at the
/// first call in the process, cached. krex later narrows tenant threads
/// (confine_process) and pins measuring threads (pin_guard), so the live mask
/// is not the allowed set; the first call comes before either, because both
/// call this before acting. The cache holds the cpuset/taskset/numactl limit
/// the process started with (a mask is always within its cpuset, so reading
/// the cgroup's cpuset could only widen it past a taskset). A process exec'd
/// by a confined tenant inherits the narrowed mask as its allowed set.
inline const std::vector<int>& allowed_cpus() {
  static const std::vector<int> cached = thread_affinity(::getpid());
  return cached;
}

struct topology {
  /// The CPUs this process may run on, sorted by CPU number.
  std::vector<cpu_info> cpus;

  /// Reads <sysfs_root>/devices/system/{cpu,node}. `allowed` defaults to
  /// allowed_cpus() (see slices.hpp); tests pass it with a fake root.
  /// Degrades instead of failing: without `online` every cpuN directory
  /// counts; without core_id a CPU is its own core; without
  /// physical_package_id its package is 0; without node directories every
  /// CPU is on node 0. Allowed CPUs that sysfs does not list are kept, each
  /// its own core on package 0, node 0.
  KREX_DETAIL_COLD static topology read(const std::string& sysfs_root = "/sys",
                       const std::optional<std::vector<int>>& allowed = std::nullopt) {
    const std::string cpu_dir = cat({sysfs_root, "/devices/system/cpu"});
    std::vector<int> present;
    if (auto online = read_cpulist_file(cat({cpu_dir, "/online"})))
      present = std::move(*online);
    else
      present = numbered_entries(cpu_dir, "cpu");

    std::vector<int> node_of;  // CPU, node, CPU, node, ...: the first node listing a CPU wins
    const std::string node_dir = cat({sysfs_root, "/devices/system/node"});
    for (int n : numbered_entries(node_dir, "node"))
      if (auto list = read_cpulist_file(cat({node_dir, "/node", n, "/cpulist"})))
        for (int c : *list) node_of.insert(node_of.end(), {c, n});

    // Physical cores are (package, core_id) pairs over all present CPUs, not
    // only allowed ones, so every process names a core the same way.
    struct raw {
      int cpu, core_id, package;
    };
    std::vector<raw> raws;  // in `present`'s order: sorted by CPU
    for (int c : present) {
      const std::string t = cat({cpu_dir, "/cpu", c, "/topology/"});
      const int pkg = read_int_file(cat({t, "physical_package_id"})).value_or(0);
      const auto cid = read_int_file(cat({t, "core_id"}));
      raws.push_back({c, cid ? *cid : -1, pkg});
    }

    const std::vector<int>& allow = allowed ? *allowed : allowed_cpus();
    topology topo;
    for (int c : allow) {
      cpu_info info{c, c, 0, 0};
      const auto r =
          std::find_if(raws.begin(), raws.end(), [c](const raw& x) { return x.cpu == c; });
      if (r != raws.end()) {
        info.package = r->package;
        if (r->core_id >= 0)  // the lowest CPU of its (package, core_id): the first in raws
          info.core = std::find_if(raws.begin(), r + 1, [r](const raw& x) {
                        return x.package == r->package && x.core_id == r->core_id;
                      })->cpu;
      }
      for (std::size_t k = 0; k < node_of.size(); k += 2)
        if (node_of[k] == c) {
          info.node = node_of[k + 1];
          break;
        }
      topo.cpus.push_back(info);
    }
    insertion_sort(topo.cpus, [](const cpu_info& a, const cpu_info& b) { return a.cpu < b.cpu; });
    return topo;
  }
};

/// The sysfs spelling of a PCI bus id: CUDA's "00000000:1B:00.0" becomes
/// "0000:1b:00.0".
inline std::string normalize_pci_bus_id(std::string id) {
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto colon = id.find(':');
  if (colon != std::string::npos && colon > 4 && id.find(':', colon + 1) != std::string::npos)
    id.erase(0, colon - 4);  // an 8-digit PCI domain with leading zeros
  return id;
}

/// local_cpulist of a PCI device ("0000:1b:00.0"; CUDA's spelling is accepted)
/// from <sysfs_root>/bus/pci/devices/<id>/local_cpulist; empty if unknown.
inline std::vector<int> pci_local_cpus(const std::string& pci_bus_id,
                                       const std::string& sysfs_root = "/sys") {
  const std::string id = normalize_pci_bus_id(pci_bus_id);
  if (id.empty() || id.find('/') != std::string::npos || id.find("..") != std::string::npos)
    return {};
  return read_cpulist_file(cat({sysfs_root, "/bus/pci/devices/", id, "/local_cpulist"}))
      .value_or(std::vector<int>{});
}

}  // namespace krex::detail
