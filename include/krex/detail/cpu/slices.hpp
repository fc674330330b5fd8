// SPDX-License-Identifier: Apache-2.0
#pragma once

// The join's CPU slicing and the affinity it sets (docs/PIN.md explains the
// rules). At join the allowed physical cores are split into one slice per
// device (split); each slice reserves a few measuring cores, and every tenant
// thread is confined off all reserved cores (confine_process). The pin step
// (detail/steps/pin.hpp) pins the measuring thread to its device's reserved
// cores with a pin_guard.

#include <krex/detail/cpu/topology.hpp>
#include <krex/detail/sys.hpp>
#include <krex/error.hpp>

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <utility>
#include <vector>

namespace krex::detail {

/// One device's share of the node's CPUs. `reserved` ⊂ `cpus`, whole physical cores.
struct slice {
  std::vector<int> cpus;
  std::vector<int> reserved;
};

namespace pin_impl {
struct core {
  int id;  // cpu_info::core
  int node;
  std::vector<int> cpus;  // allowed SMT siblings, sorted
};

inline bool subset(const std::vector<int>& a, const std::vector<int>& sorted_b) {
  return std::all_of(a.begin(), a.end(), [&](int c) {
    return std::binary_search(sorted_b.begin(), sorted_b.end(), c);
  });
}

// Throws unless `cpus` is non-empty and within allowed_cpus().
inline void check_allowed(const std::vector<int>& cpus, const char* what) {
  const std::vector<int>& allowed = allowed_cpus();
  if (cpus.empty())
    throw error(step::pin, cat({what, ": empty CPU list"}), 0,
                cat({"pass at least one CPU from the allowed set ", format_cpulist(allowed)}));
  if (!subset(cpus, allowed))
    throw error(step::pin,
                cat({what, ": CPUs ", format_cpulist(cpus), " are not within the allowed set ",
                     format_cpulist(allowed)}),
                0, "widen the cpuset/taskset, or disable pinning with KREX_PIN=0");
}

inline pid_t gettid() noexcept { return static_cast<pid_t>(::syscall(SYS_gettid)); }

// Sets thread `tid` to `m`; returns 0 or the errno.
inline int set_affinity(pid_t tid, const cpu_mask& m) noexcept {
  return sys().sched_setaffinity(tid, m.size(), m.get()) == 0 ? 0 : errno;
}

inline std::vector<pid_t> list_tasks() {
  std::vector<pid_t> out;
  for (int t : numbered_entries("/proc/self/task", "")) out.push_back(static_cast<pid_t>(t));
  return out;
}
}  // namespace pin_impl

/// Splits the allowed physical cores of `topo` into `n_devices` disjoint
/// slices that together cover every CPU of `topo`. SMT siblings stay in one
/// slice. Each device gets ⌊cores/n⌋ cores (the first cores%n devices one
/// more), taken first from the cores that hold any of its `local_cpus[d]`
/// (missing or empty: no preference), then from cores on the same NUMA node
/// as its local cores, then from any core; devices with the fewest local
/// cores choose first. Each slice reserves `reserved_cores` whole physical
/// cores, local ones first and highest-numbered first (CPU 0 and its
/// neighbours carry most housekeeping). Deterministic: the same topology and
/// arguments give the same slices in every process.
/// Throws krex::error(step::pin) if n_devices < 1, reserved_cores < 0, or
/// there are fewer than n_devices*reserved_cores + 1 physical cores (one
/// unreserved core must remain for work outside regions).
KREX_DETAIL_COLD inline std::vector<slice> split(const topology& topo, int n_devices, int reserved_cores,
                                const std::vector<std::vector<int>>& local_cpus = {}) {
  using pin_impl::core;
  if (n_devices < 1)
    throw error(step::pin, cat({"split: ", n_devices, " devices"}), 0, "pass at least one device");
  if (reserved_cores < 0)
    throw error(step::pin, cat({"split: ", reserved_cores, " reserved cores"}), 0,
                "KREX_RESERVED_CORES must be at least 0");

  std::vector<core> cores;  // ordered by core id = lowest CPU: deterministic
  std::vector<int> all;
  for (const cpu_info& c : topo.cpus) {
    std::size_t k = 0;
    while (k < cores.size() && cores[k].id != c.core) ++k;
    if (k == cores.size()) cores.push_back(core{c.core, c.node, {}});
    cores[k].cpus.push_back(c.cpu);
    cores[k].node = std::min(cores[k].node, c.node);
    all.push_back(c.cpu);
  }
  insertion_sort(cores, [](const core& a, const core& b) { return a.id < b.id; });
  for (core& c : cores) std::sort(c.cpus.begin(), c.cpus.end());
  const int n_cores = static_cast<int>(cores.size());
  const long long needed = static_cast<long long>(n_devices) * reserved_cores + 1;
  if (n_cores < needed)
    throw error(step::pin,
                cat({"cannot reserve ", reserved_cores, " core(s) for each of ", n_devices,
                     " device(s): only ", n_cores, " physical core(s) allowed (CPUs ",
                     format_cpulist(all), "), ", needed, " needed"}),
                0,
                "lower KREX_RESERVED_CORES, widen the cpuset/taskset, or disable pinning "
                "with KREX_PIN=0");

  // Which cores are local to each device, and on which nodes they lie.
  std::vector<std::vector<bool>> local(n_devices, std::vector<bool>(cores.size(), false));
  std::vector<std::vector<int>> local_nodes(n_devices);  // each node once
  std::vector<int> n_local(n_devices, 0);
  for (int d = 0; d < n_devices && d < static_cast<int>(local_cpus.size()); ++d) {
    std::vector<int> l = local_cpus[d];
    std::sort(l.begin(), l.end());
    for (std::size_t k = 0; k < cores.size(); ++k)
      for (int c : cores[k].cpus)
        if (std::binary_search(l.begin(), l.end(), c)) {
          local[d][k] = true;
          if (std::find(local_nodes[d].begin(), local_nodes[d].end(), cores[k].node) ==
              local_nodes[d].end())
            local_nodes[d].push_back(cores[k].node);
          ++n_local[d];
          break;
        }
  }

  std::vector<int> quota(n_devices, n_cores / n_devices);
  for (int d = 0; d < n_cores % n_devices; ++d) ++quota[d];
  // The most constrained devices choose first; no preference chooses last.
  std::vector<int> order(n_devices);
  for (int d = 0; d < n_devices; ++d) order[d] = d;
  insertion_sort(order, [&](int a, int b) {
    const int la = n_local[a] == 0 ? n_cores + 1 : n_local[a];
    const int lb = n_local[b] == 0 ? n_cores + 1 : n_local[b];
    return la < lb;
  });

  std::vector<int> owner(cores.size(), -1);
  std::vector<std::vector<std::size_t>> mine(n_devices);
  const auto take = [&](int d, auto&& eligible) {
    for (std::size_t k = 0; k < cores.size() && static_cast<int>(mine[d].size()) < quota[d]; ++k)
      if (owner[k] < 0 && eligible(k)) {
        owner[k] = d;
        mine[d].push_back(k);
      }
  };
  for (int d : order) take(d, [&](std::size_t k) { return local[d][k]; });
  for (int d : order)
    take(d, [&](std::size_t k) {
      return std::find(local_nodes[d].begin(), local_nodes[d].end(), cores[k].node) !=
             local_nodes[d].end();
    });
  for (int d : order) take(d, [](std::size_t) { return true; });

  std::vector<slice> out(n_devices);
  for (int d = 0; d < n_devices; ++d) {
    std::vector<std::size_t> pick = mine[d];  // ascending core order
    insertion_sort(pick, [&](std::size_t a, std::size_t b) {
      if (local[d][a] != local[d][b]) return static_cast<bool>(local[d][a]);
      return a > b;
    });
    for (std::size_t i = 0; i < pick.size(); ++i) {
      const auto& cpus = cores[pick[i]].cpus;
      out[d].cpus.insert(out[d].cpus.end(), cpus.begin(), cpus.end());
      if (static_cast<int>(i) < reserved_cores)
        out[d].reserved.insert(out[d].reserved.end(), cpus.begin(), cpus.end());
    }
    std::sort(out[d].cpus.begin(), out[d].cpus.end());
    std::sort(out[d].reserved.begin(), out[d].reserved.end());
  }
  return out;
}

/// The union of every slice's CPUs that are not reserved, sorted: where
/// tenant threads run outside regions.
inline std::vector<int> unreserved(const std::vector<slice>& slices) {
  std::vector<int> out;
  for (const slice& s : slices)
    for (int c : s.cpus)
      if (!std::binary_search(s.reserved.begin(), s.reserved.end(), c)) out.push_back(c);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

/// The calling thread's affinity. Throws krex::error(step::pin) with the errno on failure.
inline std::vector<int> current_affinity() { return thread_affinity(0); }

/// Sets the affinity of every thread of this process (/proc/self/task) to
/// `cpus`; threads and children created later inherit it. Returns the
/// calling thread's previous mask. Throws krex::error(step::pin) if `cpus`
/// is empty or not within allowed_cpus() (naming both lists), or if a call
/// fails (with its errno); threads already moved are then moved back.
KREX_DETAIL_COLD inline std::vector<int> confine_process(const std::vector<int>& cpus) {
  pin_impl::check_allowed(cpus, "confine_process");
  std::vector<int> previous = current_affinity();
  const cpu_mask target = cpu_mask::of(cpus);
  std::vector<std::pair<pid_t, std::vector<int>>> moved;  // to undo a partial confinement
  std::vector<pid_t> done;
  // A thread not yet moved may start another one with the old mask: repeat
  // until a pass over /proc/self/task finds no thread it has not moved.
  for (bool again = true; again;) {
    again = false;
    for (pid_t tid : pin_impl::list_tasks()) {
      if (std::find(done.begin(), done.end(), tid) != done.end()) continue;
      again = true;
      std::vector<int> old;
      int err = 0;
      try {
        old = thread_affinity(tid);
        err = pin_impl::set_affinity(tid, target);
      } catch (const error& e) {
        err = e.code();
      }
      if (err == ESRCH) {  // the thread exited meanwhile
        done.push_back(tid);
        continue;
      }
      if (err != 0) {
        for (const auto& m : moved) pin_impl::set_affinity(m.first, cpu_mask::of(m.second));
        throw error(step::pin,
                    cat({"confine_process: cannot set the affinity of thread ", tid, " to CPUs ",
                         format_cpulist(cpus)}),
                    err, "disable confinement with KREX_CONFINE=0");
      }
      moved.emplace_back(tid, std::move(old));
      done.push_back(tid);
    }
  }
  return previous;
}

/// Pins the calling thread to `cpus` for its lifetime and restores the
/// thread's previous mask on destruction. Throws krex::error(step::pin) if
/// `cpus` is empty or not within allowed_cpus() (naming the mask and the
/// allowed set), or if the mask cannot be read or set (with the errno).
/// The guard restores the thread that constructed it, whichever thread
/// destroys it; it can be neither copied nor moved.
class pin_guard {
 public:
  explicit pin_guard(const std::vector<int>& cpus) : m_tid(pin_impl::gettid()) {
    pin_impl::check_allowed(cpus, "pin_guard");
    m_previous = current_affinity();
    m_restore = cpu_mask::of(m_previous);  // built here: the destructor must not allocate
    m_pinned = cpus;
    std::sort(m_pinned.begin(), m_pinned.end());
    m_pinned.erase(std::unique(m_pinned.begin(), m_pinned.end()), m_pinned.end());
    // Arm before acting: the previous mask is recorded, so a failure below
    // leaves nothing to undo and success is always undone by the destructor.
    if (const int err = pin_impl::set_affinity(m_tid, cpu_mask::of(m_pinned)))
      throw error(
          step::pin,
          cat({"cannot pin thread ", m_tid, " to CPUs ", format_cpulist(m_pinned)}),
          err, "disable pinning with KREX_PIN=0");
  }
  ~pin_guard() { pin_impl::set_affinity(m_tid, m_restore); }
  pin_guard(const pin_guard&) = delete;
  pin_guard& operator=(const pin_guard&) = delete;

  /// The mask applied (sorted).
  const std::vector<int>& pinned() const noexcept { return m_pinned; }
  /// The mask the thread had before, restored on destruction.
  const std::vector<int>& previous() const noexcept { return m_previous; }

 private:
  pid_t m_tid;
  std::vector<int> m_previous;
  std::vector<int> m_pinned;
  cpu_mask m_restore;
};

}  // namespace krex::detail
