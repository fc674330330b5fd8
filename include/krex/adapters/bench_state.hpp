// SPDX-License-Identifier: Apache-2.0
#pragma once

// What the benchmark adapters (krex::gbench, krex::nvbench) share: the part
// of their process-wide state that is alike (the lock, the options, the last
// region's report, the failure count, strict mode), the one state of the
// process, and strict mode's exit: a program that ran to its end with krex
// errors exits with status 1.
//
// An adapter's state derives from bench_state and adds its tenants and
// counts, `bool strict_on() const`, `void leave()` (drops its regions and
// tenants: leaves the node), and the texts of its exit message, `name` and
// `failed` ("krex: <name>: strict mode: <n> <failed>; exit status 1").
//
// And their on/off environment switches (KREX_GBENCH, KREX_GBENCH_STRICT,
// KREX_NVBENCH_REGIONS): unset or "1" is on, "0" is off, anything else is
// an error the adapter reports on every use.

#include <krex/options.hpp>
#include <krex/report.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <optional>
#include <string>

namespace krex::detail {

struct env_switch {
  bool on = true;
  std::string error;  ///< non-empty: the value was neither 0 nor 1
};

/// Reads variable `name`; `accepted` ends the error message, e.g. "0, 1".
inline env_switch read_env_switch(const char* name, const char* accepted) {
  env_switch r;
  const char* v = std::getenv(name);
  if (v == nullptr || std::string(v) == "1") return r;
  if (std::string(v) == "0") {
    r.on = false;
    return r;
  }
  r.error = std::string("invalid value '") + v + "' for " + name + " (accepted: " + accepted + ")";
  return r;
}

struct bench_state {
  std::mutex lock;
  std::optional<options> opts;  ///< set by configure(); unset: options{}
  region_report last;           ///< the report of the last region that ended
  std::uint64_t failures = 0;   ///< runs (execs) that had a krex error
  int strict = -1;              ///< strict(): 1 on, 0 off, -1 unset (the adapter decides)
  bool exit_hook = false;       ///< strict mode's exit hook is registered
};

/// The process's one `S`.
template <class S>
S& process_state() {
  static S s;
  return s;
}

/// Strict mode's exit hook: the program ran to its end (main returned or
/// called exit) with failures, so its status becomes 1. Registered after
/// the state exists, so it runs before the state's destructor: it leaves the
/// node itself, flushes the output and ends the process with _exit(1).
template <class S>
void strict_exit_hook() {
  S& s = process_state<S>();
  std::uint64_t n = 0;
  {
    std::lock_guard<std::mutex> g(s.lock);
    if (!s.strict_on()) return;  // strict(false) since: a normal exit
    n = s.failures;
    s.leave();
  }
  std::cout.flush();
  std::fprintf(stderr, "krex: %s: strict mode: %llu %s; exit status 1\n", S::name,
               static_cast<unsigned long long>(n), S::failed);
  std::fflush(nullptr);
  ::_exit(1);
}

/// In strict mode with failures: makes sure the program will exit 1.
/// Called with s.lock held.
template <class S>
void arm_strict_exit(S& s) {
  if (s.failures > 0 && s.strict_on() && !s.exit_hook) {
    s.exit_hook = true;
    std::atexit(strict_exit_hook<S>);
  }
}

}  // namespace krex::detail
