// SPDX-License-Identifier: Apache-2.0
#pragma once

// Common pieces of the protocol tests: per-test segments that are removed at
// the end, and options that keep the protocol steps under test in isolation.

#include <krex/options.hpp>
#include <krex/tenant.hpp>

#include "proc_util.hpp"

#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace krex_test {

/// A segment name unique to this test run; the segment is removed at scope end.
class scoped_segment {
 public:
  scoped_segment() : m_name(unique_name("t")) { remove(); }
  ~scoped_segment() { remove(); }
  scoped_segment(const scoped_segment&) = delete;
  scoped_segment& operator=(const scoped_segment&) = delete;
  const std::string& name() const noexcept { return m_name; }
  /// Options for the gate/drain/lock tests: no freezing, no pinning, bounded
  /// waits. Tests that turn freezing on freeze every sibling (scope `all`),
  /// whether or not it submitted; scope `device` is tested where it is named.
  krex::options opts() const {
    using namespace std::chrono_literals;
    return krex::options{}
        .segment(m_name)
        .freeze(krex::freeze_method::none)
        .scope(krex::freeze_scope::all)
        .pin(false)
        .confine(false)
        .lock_wait(60s)
        .drain_deadline(10s)
        .gate_park(20ms);
  }
  void remove() const { krex::remove_segment(krex::options{}.segment(m_name)); }

 private:
  std::string m_name;
};

/// The segment's guardian pid once one runs (> 0), or 0 after `timeout`.
/// guardian_pid is negative while a tenant is starting a guardian: never
/// pass that to kill(2), it would signal a whole process group.
inline int wait_guardian_pid(const krex::detail::node_state& n,
                             std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const int g = n.guardian_pid.load();
    if (g > 0) return g;
    if (std::chrono::steady_clock::now() >= end) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

inline std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

/// Busy-waits about `ns` nanoseconds (a CPU "kernel").
inline void spin_for(std::uint64_t ns) {
  const std::uint64_t end = now_ns() + ns;
  while (now_ns() < end) {
  }
}

/// Non-krex load: one child pinned to each online CPU, busy for `ns` (or until
/// the handles go out of scope: they are killed and reaped then).
inline std::vector<child> spin_on_every_cpu(std::uint64_t ns) {
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  std::vector<child> spinners;
  for (long c = 0; c < cpus; ++c)
    spinners.push_back(spawn([c, ns] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(static_cast<int>(c), &set);
      ::sched_setaffinity(0, sizeof set, &set);
      spin_for(ns);
      return 0;
    }));
  return spinners;
}

}  // namespace krex_test
