// SPDX-License-Identifier: Apache-2.0
#pragma once

// nvbench integration: one krex region around each state.exec, and what the
// region did in the state's summaries, so that nvbench's own markdown, CSV
// and JSON output say how each measurement was protected.
//
//     #include <krex/nvbench.hpp>
//
//     void bm_copy(nvbench::state& state) {
//       ... allocate, fill inputs: runs beside the other processes ...
//       krex::nvbench::exec(state, [&](nvbench::launch& launch) {   // was: state.exec(...)
//         copy_kernel<<<256, 256, 0, launch.get_stream()>>>(in, out, n);
//       });
//     }
//     NVBENCH_BENCH(bm_copy);
//
// krex::nvbench::exec(state, [tags,] launcher) takes what state.exec takes
// (nvbench::exec_tag::sync, ::timer, ::no_batch, ::gpu, ::no_gpu, ...) and
// calls it inside a region of the process's tenant on the state's device: all
// of nvbench's measurements of that state (cold, batch, CPU-only; their
// warm-ups, L2 flushes and blocking kernel) run with the device and a quiet
// CPU to themselves. Everything before and after (inputs, checks, the next
// state's setup) runs beside the other processes.
//
// Summaries (tags under krex/; the first two are columns of nvbench's table,
// the others hidden there and written to its JSON, which nvbench's compare
// scripts read as before):
//   krex/level    "krex": the protection reached, e.g.
//                 "gate+drain+freeze(cgroup2)+pin", with " | WARNING (n): <first>"
//                 appended when the region saw something that may have
//                 disturbed it; "unprotected" under KREX_NVBENCH_REGIONS=0.
//   krex/wait     "krex Wait": how long the region took to begin (the FIFO lock,
//                 i.e. other processes' turns, then gate, drain, freeze, quiet, pin).
//   krex/lock, krex/drain, krex/freeze, krex/body   seconds (hint "duration")
//   krex/frozen, krex/warnings   counts; krex/warnings has "text" too
//   krex/reserved_foreign        other tasks' CPU time on the reserved CPUs (s)
//   krex/clocks/sm_entry, krex/clocks/sm_exit, krex/clocks/mem_entry  Hz
//                 (hint "frequency"; only where NVML reads the device)
//   krex/report   the whole region report as JSON (docs/REPORT.md)
//
// The tenants (one per device the program uses: nvbench's --devices) join
// with krex::options{} and release_on_leave on (default_options(): they leave
// at the program's exit, resetting the device inside the gate), or with what
// krex::nvbench::configure() set, and KREX_*
// overrides: under NVBENCH_MAIN, right after it has parsed its command line,
// before any benchmark touches a device (include this header before
// <nvbench/nvbench.cuh>; see join()); otherwise at each device's first exec.
//
// Errors: a krex error (the tenant cannot join, a bad KREX_* value, a lease
// lost before state.exec ended, exec twice on one state) is thrown; nvbench
// records it as the state's failure ("Unexpected error: krex: ...") and goes
// on with the next state. Strict mode (the default) then makes the program
// exit with status 1 at its end, so that a script cannot take a state krex
// did not protect for a good one; krex::nvbench::strict(false) turns that
// off. KREX_NVBENCH_REGIONS=0 turns krex off for a whole program (no tenant,
// no region, krex/level "unprotected"): the control for a concurrent run
// without krex, from the same binary.

#include <krex/adapters/bench_state.hpp>
#include <krex/error.hpp>
#include <krex/options.hpp>
#include <krex/region.hpp>
#include <krex/report.hpp>

#include <nvbench/exec_tag.cuh>
#include <nvbench/state.cuh>
#include <nvbench/summary.cuh>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

namespace krex::nvbench {
namespace detail {

/// The process's tenants (one per device) and its counts.
struct state : krex::detail::bench_state {
  std::map<int, std::unique_ptr<krex::tenant>> tenants;
  std::uint64_t regions = 0;  ///< regions entered

  static constexpr const char* name = "nvbench";
  static constexpr const char* failed =
      "state(s) had a krex error (nvbench printed each as a failure)";
  /// strict(); unset: on.
  bool strict_on() const { return strict != 0; }
  void leave() { tenants.clear(); }
};

inline state& global() { return krex::detail::process_state<state>(); }

/// KREX_NVBENCH_REGIONS: unset or 1 = regions, 0 = off; anything else is an
/// error, thrown by every exec. Read once.
using switch_state = krex::detail::env_switch;
inline const switch_state& regions_switch() {
  static const switch_state s = krex::detail::read_env_switch("KREX_NVBENCH_REGIONS", "0, 1");
  return s;
}

/// Counts a failed exec and, in strict mode, makes sure the program will
/// exit 1. Called with s.lock held.
inline void count_failure(state& s) {
  ++s.failures;
  krex::detail::arm_strict_exit(s);
}

inline void count_failure() {
  std::lock_guard<std::mutex> g(global().lock);
  count_failure(global());
}

/// The state's device (nvbench's ordinal), or -1 for a CPU-only state.
inline int device_of(const ::nvbench::state& st) {
  const auto& dev = st.get_device();
  return dev ? dev->get_id() : -1;
}

/// The tenants' options when configure() was not called: options{} with
/// release_on_leave on. The tenants leave at the program's exit, when it is
/// done with the GPU; the reset inside the gate then keeps the teardown of its
/// CUDA context from running beside other processes' regions (where it shows
/// as a foreign process, "-shared"). KREX_RELEASE_ON_LEAVE=0 turns it off;
/// options given to configure() are used as given.
inline options default_options() { return options{}.release_on_leave(true); }

/// The options a tenant of `s` joins with: configure()'s, or default_options().
inline options tenant_options(const state& s) { return s.opts ? *s.opts : default_options(); }

/// The tenant for `device` (-1: the configured device), joined on first use.
/// Throws krex::error.
inline krex::tenant& tenant_on(int device) {
  state& s = global();
  std::lock_guard<std::mutex> g(s.lock);
  options o = tenant_options(s);
  const int key = device >= 0 ? device : o.device();
  auto it = s.tenants.find(key);
  if (it == s.tenants.end()) {
    if (device >= 0) o.device(device);
    it = s.tenants.emplace(key, std::make_unique<krex::tenant>(o)).first;
  }
  krex::tenant& t = *it->second;
  if (device >= 0 && t.device() != device)
    throw error(step::options,
                "nvbench runs on device " + std::to_string(device) +
                    " but the krex tenant is on device " + std::to_string(t.device()) +
                    " (KREX_DEVICE)",
                0, "unset KREX_DEVICE: krex::nvbench follows nvbench's --devices");
  return t;
}

/// NVBENCH_MAIN's hook after the command line is parsed, before any
/// benchmark runs (see join()): joins the tenant of every device a
/// benchmark will run on.
template <class OptionParser>
void join_parsed(OptionParser& parser) {
  const switch_state& sw = regions_switch();
  if (!sw.on || !sw.error.empty()) return;  // off, or the error every exec reports
  std::set<int> devices;
  for (const auto& bench : parser.get_benchmarks())
    for (const auto& d : bench->get_devices()) devices.insert(d.get_id());
  for (int d : devices) (void)tenant_on(d);
}

/// Whether `st` already has krex's summaries (exec ran on it before).
inline bool described(const ::nvbench::state& st) {
  for (const ::nvbench::summary& s : st.get_summaries())
    if (s.get_tag() == "krex/level") return true;
  return false;
}

inline ::nvbench::summary& add(::nvbench::state& st, const char* tag, const char* description) {
  ::nvbench::summary& s = st.add_summary(tag);
  s.set_string("description", description);
  return s;
}

inline void add_seconds(::nvbench::state& st, const char* tag, const char* description,
                        double seconds) {
  ::nvbench::summary& s = add(st, tag, description);
  s.set_string("hint", "duration");
  s.set_string("hide", "krex detail");
  s.set_float64("value", seconds);
}

inline void add_hz(::nvbench::state& st, const char* tag, const char* description, unsigned mhz) {
  ::nvbench::summary& s = add(st, tag, description);
  s.set_string("hint", "frequency");
  s.set_string("hide", "krex detail");
  s.set_float64("value", static_cast<double>(mhz) * 1e6);
}

/// The label: the level, and the first warning when there is any.
inline std::string label(const region_report& r) {
  std::string l = r.level();
  if (!r.warnings.empty())
    l += " | WARNING (" + std::to_string(r.warnings.size()) + "): " + r.warnings.front();
  return l;
}

/// Adds the region's summaries to `st`.
inline void describe(::nvbench::state& st, const region_report& r) {
  const auto sec = [](std::uint64_t ns) { return static_cast<double>(ns) / 1e9; };
  ::nvbench::summary& level = add(st, "krex/level",
                                  "The protection krex's region gave this state's measurements");
  level.set_string("name", "krex");
  level.set_string("value", label(r));

  ::nvbench::summary& wait =
      add(st, "krex/wait",
          "Time the krex region took to begin: the FIFO lock (other processes' turns), gate, "
          "drain, freeze, quiet and pin");
  wait.set_string("name", "krex Wait");
  wait.set_string("hint", "duration");
  wait.set_float64("value", sec(r.lock_ns + r.gate_ns + r.drain_ns + r.freeze_ns + r.quiet_ns +
                                r.pin_ns));

  add_seconds(st, "krex/lock", "Waiting for the device's FIFO region lock", sec(r.lock_ns));
  add_seconds(st, "krex/drain", "Raising the gate and draining the other processes' device work",
              sec(r.gate_ns + r.drain_ns));
  add_seconds(st, "krex/freeze", "Freezing the other processes", sec(r.freeze_ns));
  add_seconds(st, "krex/body", "The region's body: state.exec", sec(r.body_ns));
  if (r.reserved_foreign_ns >= 0)
    add_seconds(st, "krex/reserved_foreign",
                "Other tasks' CPU time on the reserved CPUs during the body",
                static_cast<double>(r.reserved_foreign_ns) / 1e9);

  ::nvbench::summary& frozen = add(st, "krex/frozen", "Processes frozen for the body");
  frozen.set_string("hide", "krex detail");
  frozen.set_int64("value", static_cast<std::int64_t>(r.frozen_pids.size()));

  ::nvbench::summary& warnings =
      add(st, "krex/warnings", "What the region saw that may have disturbed the body");
  warnings.set_string("hide", "krex detail");
  warnings.set_int64("value", static_cast<std::int64_t>(r.warnings.size()));
  std::string text;
  for (const std::string& w : r.warnings) text += (text.empty() ? "" : "\n") + w;
  warnings.set_string("text", text);

  if (r.clocks_entry.valid) {
    add_hz(st, "krex/clocks/sm_entry", "SM clock when the body began (NVML)",
           r.clocks_entry.sm_mhz);
    add_hz(st, "krex/clocks/mem_entry", "Memory clock when the body began (NVML)",
           r.clocks_entry.mem_mhz);
  }
  if (r.clocks_exit.valid)
    add_hz(st, "krex/clocks/sm_exit", "SM clock when the body ended (NVML)", r.clocks_exit.sm_mhz);

  ::nvbench::summary& report = add(st, "krex/report", "The krex region report (JSON)");
  report.set_string("hide", "krex detail");
  report.set_string("value", to_json(r));
}

inline void describe_unprotected(::nvbench::state& st) {
  ::nvbench::summary& level =
      add(st, "krex/level", "krex was switched off for this program (KREX_NVBENCH_REGIONS=0)");
  level.set_string("name", "krex");
  level.set_string("value", "unprotected");
}

}  // namespace detail

/// Strict mode (the default) on or off for this process: with it, a krex
/// error in any exec makes the program exit with status 1 at its end.
inline void strict(bool on) {
  detail::state& s = detail::global();
  std::lock_guard<std::mutex> g(s.lock);
  s.strict = on ? 1 : 0;
  krex::detail::arm_strict_exit(s);
}

/// Execs that threw a krex error so far (each one a failed state in nvbench's output).
inline std::uint64_t failures() {
  std::lock_guard<std::mutex> g(detail::global().lock);
  return detail::global().failures;
}

/// Regions entered so far.
inline std::uint64_t regions() {
  std::lock_guard<std::mutex> g(detail::global().lock);
  return detail::global().regions;
}

/// The report of the last region that ended.
inline region_report last_report() {
  std::lock_guard<std::mutex> g(detail::global().lock);
  return detail::global().last;
}

/// Options for the tenants (KREX_* variables still override them; the device
/// is the state's). Call before the benchmarks run (before NVBENCH_MAIN's
/// body, i.e. from a custom main); throws krex::error(step::join) once a
/// tenant has joined.
inline void configure(const options& o) {
  detail::state& s = detail::global();
  std::lock_guard<std::mutex> g(s.lock);
  if (!s.tenants.empty())
    throw error(step::join, "krex::nvbench::configure() after the benchmark tenant joined", 0,
                "call configure() before the benchmarks run (in main, before NVBENCH_MAIN_BODY)");
  s.opts = o;
}

/// Joins the tenant of `device` now (-1: the configured device, default_options(): 0),
/// if it has not joined yet. A process that joins before its first CUDA call
/// on a device is a member from the start: its setup work there (contexts,
/// allocations, inputs) is gated and drained like any sibling's, instead of
/// being a foreign process that lowers the others' protection ("-shared").
/// NVBENCH_MAIN does this for every device in its --devices when this header
/// is included before <nvbench/nvbench.cuh> (or nvbench/main.cuh); without
/// it, a tenant joins at its device's first exec. Throws krex::error.
inline void join(int device = -1) {
  const detail::switch_state& sw = detail::regions_switch();
  if (!sw.on) return;
  (void)detail::tenant_on(device);
}

/// state.exec(tags, launcher) inside a krex region on the state's device,
/// then the region's summaries added to the state. Throws krex::error when
/// krex cannot protect the measurement (see the top of this file); nvbench
/// then reports the state as failed.
template <class ExecTags, class KernelLauncher>
void exec(::nvbench::state& st, ExecTags tags, KernelLauncher&& launcher) {
  static_assert(::nvbench::exec_tag::impl::is_exec_tag_v<ExecTags>,
                "krex::nvbench::exec(state, tags, launcher): `tags` must be nvbench::exec_tag "
                "members (or nvbench::exec_tag::none)");
  const detail::switch_state& sw = detail::regions_switch();
  if (!sw.error.empty()) {
    detail::count_failure();
    throw error(step::options, sw.error, 0,
                "set KREX_NVBENCH_REGIONS=1 (regions, the default) or 0 (krex off: a control run)");
  }
  if (detail::described(st)) {
    detail::count_failure();
    throw error(step::options, "krex::nvbench::exec called twice for one nvbench state", 0,
                "call exec once per benchmark state, as with nvbench's state.exec");
  }
  if (st.is_skipped()) {  // nvbench's exec does nothing then: no region either
    st.exec(tags, std::forward<KernelLauncher>(launcher));
    return;
  }
  if (!sw.on) {
    st.exec(tags, std::forward<KernelLauncher>(launcher));
    detail::describe_unprotected(st);
    return;
  }
  std::optional<krex::region> r;
  try {
    krex::tenant& t = detail::tenant_on(detail::device_of(st));
    r.emplace(t);
  } catch (...) {
    detail::count_failure();
    throw;
  }
  {
    std::lock_guard<std::mutex> g(detail::global().lock);
    ++detail::global().regions;
  }
  st.exec(tags, std::forward<KernelLauncher>(launcher));  // a throw ends the region (its destructor)
  std::string lost;
  try {
    r->exit();
  } catch (const error& e) {
    lost = e.what();
  }
  const region_report rep = r->report();
  {
    std::lock_guard<std::mutex> g(detail::global().lock);
    detail::global().last = rep;
  }
  if (!lost.empty() || rep.lease_lost) {
    detail::count_failure();
    throw error(step::release,
                "the region's lease expired before state.exec ended: the measurement was not "
                "protected to its end" + (lost.empty() ? std::string() : " (" + lost + ")"),
                0,
                "raise KREX_LEASE_MS (krex::options::lease) above the state's longest "
                "measurement (nvbench's --timeout, twice for cold and batch)");
  }
  detail::describe(st, rep);
}

/// state.exec(launcher) inside a krex region: exec(st, nvbench::exec_tag::none, launcher).
template <class KernelLauncher>
void exec(::nvbench::state& st, KernelLauncher&& launcher) {
  exec(st, ::nvbench::exec_tag::none, std::forward<KernelLauncher>(launcher));
}

}  // namespace krex::nvbench

// NVBENCH_MAIN (nvbench/main.cuh) calls this after parsing its command line:
// the tenants join before the benchmarks' first CUDA work (see join()).
#if defined(NVBENCH_MAIN) && !defined(KREX_NVBENCH_LATE_JOIN)
#pragma message(                                                                            \
    "krex/nvbench.hpp is included after nvbench/main.cuh (nvbench/nvbench.cuh): NVBENCH_MAIN " \
    "will not join krex before the benchmarks run, and a process is foreign to the others' "   \
    "regions until its first exec; include krex/nvbench.hpp first (or define "                \
    "KREX_NVBENCH_LATE_JOIN to keep this order)")
#endif
#ifndef NVBENCH_MAIN_PARSE_CUSTOM_POST
#define NVBENCH_MAIN_PARSE_CUSTOM_POST(parser) ::krex::nvbench::detail::join_parsed(parser)
#endif
