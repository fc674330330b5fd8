// SPDX-License-Identifier: Apache-2.0
#pragma once

// A sibling tenant that keeps wanting the device, for the tests of the
// benchmark integrations (gbench, nvbench): forked before the test's own
// tenant starts any thread, it submits every 100 us until stopped, and logs
// each submission's times, so that the test can show that none ran inside a
// measured window and that the sibling wanted the device during it.
//
//   krex_test::shared<krex_test::sibling_log<100000>> log;
//   krex_test::child sib = krex_test::spawn_submitter(opts, *log);
//   ASSERT_EQ(log->ready.load(), 1) << "sibling did not join";
//   ...  log->stop.store(1);  wait_exit(sib.pid(), 10s);  log->failed == 0

#include <krex/region.hpp>

#include "proc_util.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>

namespace krex_test {

/// What the sibling did, in shared memory: at most N submissions.
template <std::uint32_t N>
struct sibling_log {
  std::atomic<int> ready{0};   ///< joined
  std::atomic<int> stop{0};    ///< set by the test: stop submitting
  std::atomic<int> failed{0};  ///< the sibling caught an exception
  std::atomic<std::uint32_t> n{0};
  std::uint64_t tried_ns[N];  ///< before submit(): the sibling wants the device
  std::uint64_t at_ns[N];     ///< inside the gated call
};

/// Forks the sibling: a tenant of `o` that submits (logging into `log`)
/// until log.stop; waits at most 10 s for it to join or fail (log.ready says
/// which).
template <std::uint32_t N>
child spawn_submitter(const krex::options& o, sibling_log<N>& log) {
  child sib = spawn([&] {
    try {
      krex::tenant t{o};
      log.ready.store(1);
      while (log.stop.load() == 0) {
        const std::uint32_t i = log.n.load();
        if (i >= N) break;
        log.tried_ns[i] = krex::detail::now_ns();
        t.submit([&] { log.at_ns[i] = krex::detail::now_ns(); });
        log.n.store(i + 1);
        ::usleep(100);
      }
    } catch (...) {
      log.failed.store(1);
    }
    return 0;
  });
  wait_until([&] { return log.ready.load() != 0 || log.failed.load() != 0; },
             std::chrono::seconds(10));
  return sib;
}

}  // namespace krex_test
