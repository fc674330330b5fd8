// SPDX-License-Identifier: Apache-2.0
#pragma once

// Step 3b, quiet: after the siblings are drained and frozen, the region
// verifies that the device itself is quiet before its body starts.
//
// Why: exclusive is not quiet. After a large cudaFree (the holder's own or a
// sibling's, a context teardown) the driver keeps working on the device in
// the background for about 2.5 ms per GB freed, and every bandwidth-bound
// kernel runs ~10% slower meanwhile (bench/gpu/quiet.cu, docs/RESULTS.md
// "Quiet"). Neither the gate nor the drain sees that work: it is not a
// submission of any process. So the holder probes: a short device-to-device
// copy larger than L2, timed with events (the backend's `quiet_probe()`),
// best of a burst of three, compared with the device's idle figure (the
// fastest burst any tenant of the segment has seen on this device,
// `device_state::quiet_ref_ns`). Within `quiet_tolerance_pct` of it, the
// device is quiet; otherwise the holder waits (polling) up to
// options::quiet_deadline and reports what it waited for, or proceeds
// flagged busy (a warning, level "+quiet(busy)"): never silently.
//
// A backend without `quiet_probe()` (host, HIP) is not checked and its level
// never shows "+quiet". A CUDA process without a device context yet (nothing
// submitted) is not probed either, with a note: probing would create one.
// Before the probe, the step lists the processes outside the segment that
// hold a context on the device (the backend's `device_processes`).
//
// State: what it found (quiet_result, the foreign pids). Shared words: the
// device's idle figure and quiet counters. Report: the foreign pids, the quiet
// fields, a line for foreign processes, a busy device or a wait. Undo: none.

#include <krex/detail/clocks.hpp>
#include <krex/detail/device/device_ops.hpp>
#include <krex/detail/layout.hpp>
#include <krex/detail/slots/slots.hpp>
#include <krex/detail/slots/submit.hpp>
#include <krex/detail/steps/context.hpp>
#include <krex/options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace krex::detail {

/// What the quiet step did.
struct quiet_result {
  bool checked = false;         ///< a probe ran
  bool quiet = false;           ///< the last burst was within tolerance of the idle figure
  std::uint32_t bursts = 0;     ///< probe bursts taken
  std::uint64_t waited_ns = 0;  ///< from the first busy burst to the quiet one (0: quiet at once)
  double first_ratio = 0;       ///< first burst over the idle figure
  double last_ratio = 0;        ///< last burst over the idle figure
  std::uint64_t ref_ns = 0;     ///< the idle figure used
  std::string why_not;          ///< when !checked
};

/// Bursts whose minimum must stay within tolerance; and the bursts a device
/// needs before its idle figure is trusted (spaced so that a driver operation
/// running at the first one has ended by the last).
inline constexpr int quiet_burst = 3;
inline constexpr std::uint64_t quiet_calibration_bursts = 6;
inline constexpr auto quiet_calibration_gap = std::chrono::milliseconds(5);
inline constexpr auto quiet_poll_gap = std::chrono::microseconds(500);

/// Lowers the device's idle figure to `ns` if it is faster (CAS loop).
inline void lower_quiet_ref(device_state& dev, std::uint64_t ns) noexcept {
  std::uint64_t cur = dev.quiet_ref_ns.load();
  while ((cur == 0 || ns < cur) && !dev.quiet_ref_ns.compare_exchange_weak(cur, ns)) {
  }
}

/// The quiet step over a probe (a callable returning quiet_sample): bursts of
/// quiet_burst probes until the best is within tolerance of the idle figure
/// or `deadline_ns` (now_ns clock) passes. Records counters on the device.
template <class Probe>
quiet_result wait_device_quiet(member& m, Probe&& probe, std::uint64_t deadline_ns) {
  quiet_result r;
  device_state& dev = *m.dev;
  const double tol = 1.0 + static_cast<double>(m.opts.quiet_tolerance_pct()) / 100.0;
  const auto burst = [&]() -> std::pair<bool, std::uint64_t> {
    std::uint64_t best = ~0ULL;
    for (int i = 0; i < quiet_burst; ++i) {
      quiet_sample s = probe();
      if (!s.ok) {
        r.why_not = std::move(s.why_not);
        return {false, 0};
      }
      if (s.ns < best) best = s.ns;
    }
    ++r.bursts;
    return {true, best};
  };
  // A device seen too few times: spaced bursts first, so that the figure is
  // not taken while a driver operation was running.
  if (dev.quiet_calibrations.load() < quiet_calibration_bursts) {
    for (std::uint64_t i = 0; i < quiet_calibration_bursts; ++i) {
      const auto [ok, best] = burst();
      if (!ok) return r;
      lower_quiet_ref(dev, best);
      dev.quiet_calibrations.fetch_add(1);
      if (now_ns() >= deadline_ns) break;
      std::this_thread::sleep_for(quiet_calibration_gap);
    }
  }
  std::uint64_t busy_since = 0;
  for (;;) {
    const auto [ok, best] = burst();
    if (!ok) return r;
    r.checked = true;
    lower_quiet_ref(dev, best);
    r.ref_ns = dev.quiet_ref_ns.load();
    const double ratio =
        r.ref_ns != 0 ? static_cast<double>(best) / static_cast<double>(r.ref_ns) : 1.0;
    if (r.first_ratio == 0) r.first_ratio = ratio;
    r.last_ratio = ratio;
    const std::uint64_t now = now_ns();
    if (ratio <= tol) {
      r.quiet = true;
      if (busy_since != 0) r.waited_ns = now - busy_since;
      break;
    }
    if (busy_since == 0) busy_since = now;
    if (now >= deadline_ns) {
      r.waited_ns = now - busy_since;
      break;
    }
    std::this_thread::sleep_for(quiet_poll_gap);
  }
  dev.quiet_checks.fetch_add(1, std::memory_order_relaxed);
  if (r.waited_ns != 0) {
    dev.quiet_waits.fetch_add(1, std::memory_order_relaxed);
    dev.quiet_wait_ns.fetch_add(r.waited_ns, std::memory_order_relaxed);
  }
  if (!r.quiet) dev.quiet_busy.fetch_add(1, std::memory_order_relaxed);
  return r;
}

/// Step 3b as an object: checks the lease, lists the processes outside the
/// segment that hold a context on the device, then (unless quiet_deadline
/// is 0) waits for the device to be quiet, until the quiet deadline or
/// half-way to the lease's. No undo.
template <class Backend>
class quiet_step {
 public:
  quiet_step(region_context& c, Backend& b) {
    member& m = c.m;
    const std::uint64_t since = now_ns();
    c.check_lease("verifying the device is quiet");
    std::vector<int> pids;
    if (backend_device_processes(b, pids, 0)) {
      m_foreign_checked = true;
      for (int pid : pids)
        if (!member_pid(m, pid)) m_foreign.push_back(pid);
    }
    if (m.opts.quiet_deadline().count() == 0) return;
    m_probed = true;
    std::uint64_t deadline = since + to_ns(m.opts.quiet_deadline());
    const std::uint64_t lease_end = m.dev->lease_deadline_ns.load();
    if (lease_end > since) deadline = std::min(deadline, since + (lease_end - since) / 2);
    // The probe is the holder's own device work inside its region: it must
    // never park at the gate, also where automatic gating routes this
    // process's calls to another tenant of it (two tenants in one process).
    // An open submission on this thread lets nested calls straight through.
    m_result = wait_device_quiet(
        m,
        [&] {
          pass_gate pass;
          return backend_quiet_probe(b, 0);
        },
        deadline);
  }

  /// Writes what it found into the report: the processes outside the
  /// segment on the device, then the probe.
  void describe(region_report& r) const {
    if (m_foreign_checked) {
      r.foreign_checked = true;
      r.foreign_pids = m_foreign;
      if (!m_foreign.empty()) {
        std::string l;
        append_int_list(l, m_foreign);
        r.warnings.push_back(
            cat({"device: ", m_foreign.size(),
                 " process(es) outside this krex segment hold a context on the device (pids ", l,
                 "): krex neither gates nor freezes them; run them under krex (the same segment) "
                 "or elsewhere"}));
      }
    }
    if (!m_probed) {
      r.notes.push_back("quiet: off (quiet_deadline 0): the device was not probed");
      return;
    }
    const quiet_result& q = m_result;
    r.quiet_checked = q.checked;
    r.quiet = q.quiet;
    r.quiet_wait_ns = q.waited_ns;
    r.quiet_bursts = q.bursts;
    r.quiet_first_ratio = q.first_ratio;
    r.quiet_last_ratio = q.last_ratio;
    const auto pct = [](double ratio) {
      char b[32];
      std::snprintf(b, sizeof b, "%.1f%%", (ratio - 1.0) * 100.0);
      return std::string(b);
    };
    if (!q.checked) {
      if (!q.why_not.empty()) r.notes.push_back(cat({"quiet: not probed: ", q.why_not}));
    } else if (!q.quiet)
      r.warnings.push_back(
          cat({"quiet: the device was still busy after ", q.waited_ns / 1'000'000, " ms (probe ",
               pct(q.last_ratio),
               " slower than idle): a process outside krex or a "
               "long driver operation shares it; raise quiet_deadline / KREX_QUIET_DEADLINE_MS"}));
    else if (q.waited_ns != 0)
      r.notes.push_back(cat({"quiet: waited ", q.waited_ns / 1000,
                             " us for the device to become quiet (probe ", pct(q.first_ratio),
                             " slower than idle at entry: the driver's work after a large "
                             "free, or a context teardown)"}));
  }

 private:
  // Whether `pid` owns a live slot of this device in the segment.
  static bool member_pid(const member& m, int pid) noexcept {
    for (std::uint32_t i = 0; i < max_tenants; ++i) {
      const tenant_slot& s = m.slot_at(i);
      if (s.owner.load() == pid && s.device.load() == m.device && s.state.load() == slot_active)
        return true;
    }
    return false;
  }

  bool m_foreign_checked = false;  // the device's processes could be listed
  bool m_probed = false;           // false when quiet_deadline is 0
  std::vector<int> m_foreign;
  quiet_result m_result;
};

}  // namespace krex::detail
