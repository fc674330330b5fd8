// SPDX-License-Identifier: Apache-2.0
#pragma once

// What ran beside the measuring thread during a region's body. krex keeps its
// own tenants off the reserved cores (confinement) and freezes its siblings,
// but a process that is not a krex tenant (a compiler started by hand, a
// monitoring agent, a kernel thread) may still run on a reserved core. This
// cannot be prevented by a library without root-only tools (isolcpus,
// cpusets of other jobs), so it is measured instead, and reported:
//
// - the body thread's involuntary context switches (getrusage RUSAGE_THREAD):
//   each one is a moment something else took its CPU;
// - the busy time of the pinned CPUs (/proc/stat, in clock ticks) minus the
//   body thread's own CPU time: time other tasks spent on the reserved cores.
//   /proc/stat counts in USER_HZ ticks (10 ms on most kernels), so this is an
//   estimate with one tick per CPU of resolution.

#include <krex/detail/cpu/topology.hpp>
#include <krex/report.hpp>

#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace krex::detail {

/// Busy and total time of each CPU in /proc/stat (clock ticks).
struct cpu_times {
  std::vector<std::uint64_t> busy;  ///< index = CPU number; user+nice+system+irq+softirq+steal
  bool ok = false;
};

/// Reads the per-CPU lines of /proc/stat (or `path`, for tests).
inline cpu_times read_cpu_times(const char* path = "/proc/stat") {
  cpu_times out;
  std::FILE* f = std::fopen(path, "re");
  if (f == nullptr) return out;
  char line[512];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (line[0] != 'c' || line[1] != 'p' || line[2] != 'u' || line[3] < '0' || line[3] > '9')
      continue;
    char* p = line + 3;
    const long cpu = std::strtol(p, &p, 10);
    std::uint64_t v[8] = {};
    for (auto& x : v) x = std::strtoull(p, &p, 10);
    // user nice system idle iowait irq softirq steal
    const std::uint64_t busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    if (cpu < 0 || cpu > 65535) continue;
    if (out.busy.size() <= static_cast<std::size_t>(cpu))
      out.busy.resize(static_cast<std::size_t>(cpu) + 1, 0);
    out.busy[static_cast<std::size_t>(cpu)] = busy;
  }
  std::fclose(f);
  out.ok = !out.busy.empty();
  return out;
}

/// What ran beside the body thread, between start() and stop().
struct cpu_activity {
  bool measured = false;          ///< stop() ran on the thread that called start()
  long involuntary_switches = 0;  ///< of the body thread
  bool foreign_measured = false;  ///< the pinned CPUs' busy time could be read
  std::uint64_t foreign_ns = 0;   ///< other tasks' time on the pinned CPUs (estimate)
  std::uint64_t tick_ns = 10'000'000;  ///< resolution of foreign_ns per CPU

  /// Writes it into `r` (body_ns, pinned_cpus, other_segments set). A few
  /// preemptions by kernel threads are normal; more than one per 100 ms of
  /// body, or foreign time over 1% of the body (and over the /proc/stat
  /// resolution), is worth a warning.
  void describe(region_report& r) const {
    if (!measured) return;
    r.body_preemptions = involuntary_switches;
    const double body_ms = static_cast<double>(r.body_ns) / 1e6;
    if (foreign_measured) {
      r.reserved_foreign_ns = static_cast<long long>(foreign_ns);
      const std::uint64_t floor_ns = 2 * tick_ns * std::max<std::size_t>(1, r.pinned_cpus.size());
      if (foreign_ns > floor_ns && foreign_ns * 100 > r.body_ns)
        r.warnings.push_back(
            cat({"other tasks ran about ", foreign_ns / 1'000'000, " ms on the reserved CPUs ",
                 format_cpulist(r.pinned_cpus), " during the ", static_cast<long long>(body_ms),
                 " ms body: ",
                 r.other_segments.empty()
                     ? std::string("a non-krex process or kernel work")
                     : cat({"another krex segment's tenants (", r.other_segments.front(),
                            ", see its warning), a non-krex process or kernel work"}),
                 " shares the measuring cores"}));
    }
    if (static_cast<double>(involuntary_switches) > 2.0 + body_ms / 100.0)
      r.warnings.push_back(cat({"the measuring thread was preempted ", involuntary_switches,
                                " times during the ", static_cast<long long>(body_ms),
                                " ms body"}));
  }
};

/// Measures a region body's CPU neighbours: start() when the body begins,
/// stop() when it ends, on the same (measuring) thread.
class cpu_watch {
 public:
  /// `cpus`: the CPUs the body thread is pinned to (empty: only context switches).
  void start(const std::vector<int>& cpus) {
    m_cpus = cpus;
    m_tid = static_cast<long>(::syscall(SYS_gettid));
    m_switches = involuntary_switches();
    m_thread_ns = thread_cpu_ns();
    if (!m_cpus.empty()) m_busy = busy_of(read_cpu_times());
    m_started = true;
  }

  /// The activity since start(); `measured` is false if called from another thread.
  cpu_activity stop() const {
    cpu_activity a;
    if (!m_started || static_cast<long>(::syscall(SYS_gettid)) != m_tid) return a;
    a.measured = true;
    a.involuntary_switches = involuntary_switches() - m_switches;
    const long hz = ::sysconf(_SC_CLK_TCK);
    a.tick_ns = hz > 0 ? 1'000'000'000ULL / static_cast<std::uint64_t>(hz) : 10'000'000ULL;
    if (m_cpus.empty() || m_busy < 0) return a;
    const long long busy = busy_of(read_cpu_times());
    if (busy < 0) return a;
    a.foreign_measured = true;
    const long long busy_ns = (busy - m_busy) * static_cast<long long>(a.tick_ns);
    const auto own = static_cast<long long>(thread_cpu_ns() - m_thread_ns);
    a.foreign_ns = busy_ns > own ? static_cast<std::uint64_t>(busy_ns - own) : 0;
    return a;
  }

 private:
  static long involuntary_switches() noexcept {
    rusage ru{};
    return ::getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_nivcsw : 0;
  }
  static std::uint64_t thread_cpu_ns() noexcept {
    timespec ts{};
    ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL +
           static_cast<std::uint64_t>(ts.tv_nsec);
  }
  // Busy ticks of the watched CPUs; -1 if /proc/stat lacks one of them.
  long long busy_of(const cpu_times& t) const {
    if (!t.ok) return -1;
    long long sum = 0;
    for (int c : m_cpus) {
      if (c < 0 || static_cast<std::size_t>(c) >= t.busy.size()) return -1;
      sum += static_cast<long long>(t.busy[static_cast<std::size_t>(c)]);
    }
    return sum;
  }

  std::vector<int> m_cpus;
  long m_tid = 0;
  long m_switches = 0;
  std::uint64_t m_thread_ns = 0;
  long long m_busy = -1;
  bool m_started = false;
};

}  // namespace krex::detail
