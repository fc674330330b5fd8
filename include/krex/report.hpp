// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <krex/detail/clocks.hpp>
#include <krex/detail/json.hpp>
#include <krex/options.hpp>

#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace krex {

/// What a region did to protect its body, so a harness can record how each
/// number was obtained. Filled as the region enters; the exit fields when it ends.
struct region_report {
  std::uint32_t epoch = 0;   ///< the gate epoch of this region (odd)
  std::uint32_t ticket = 0;  ///< its place in the device's FIFO
  std::uint32_t siblings_seen = 0;     ///< live siblings on the device when the gate rose
  std::uint32_t siblings_drained = 0;  ///< siblings that acked the drain
  std::uint32_t siblings_gone = 0;     ///< siblings that left or died while being drained
  std::vector<int> undrained_pids;     ///< siblings that missed the drain deadline (contended)
  std::vector<int> frozen_pids;        ///< siblings frozen for the body
  /// Signal freezing: siblings not signalled, because the process at their
  /// recorded pid is not verifiably the tenant that joined (a forged or stale
  /// slot, pid <= 1, another pid namespace or user; see docs/FAULTS.md).
  std::vector<int> unverified_pids;

  std::uint64_t lock_ns = 0;    ///< waiting for the region lock
  std::uint64_t gate_ns = 0;    ///< raising the gate, waiting for in-flight submissions
  std::uint64_t drain_ns = 0;   ///< waiting for siblings' drain acks
  std::uint64_t freeze_ns = 0;  ///< freezing siblings
  std::uint64_t pin_ns = 0;     ///< pinning the measuring thread
  std::uint64_t body_ns = 0;    ///< from entry complete to exit start
  std::uint64_t exit_ns = 0;    ///< unpin + thaw + lower gate + release

  bool gated = false;      ///< step 1 reached
  bool drained = false;    ///< step 2 completed for every sibling
  bool contended = false;  ///< a sibling missed the drain deadline and allow_contended let the region proceed
  bool frozen = false;     ///< step 3: siblings frozen (or there were none to freeze)
  bool pinned = false;     ///< step 4: measuring thread pinned to reserved cores
  bool took_over_gate = false;  ///< a dead holder's raised gate was taken over
  bool lease_lost = false;      ///< the lock was taken away before exit (lease expired)
  bool thaw_failed = false;     ///< a sibling could not be thawed at exit (see krexctl recover)
  bool freeze_broken = false;   ///< a frozen sibling ran again before the region ended (thawed by someone else)

  freeze_method freeze = freeze_method::none;  ///< method used ("none" if not frozen)
  freeze_scope scope = freeze_scope::all;
  std::vector<int> pinned_cpus;
  std::string gating = "explicit";  ///< how the holder's siblings' submissions are gated in this process

  /// Why a step is weaker than the strongest krex offers here, one line each:
  /// a fallback the tenant took at join ("freeze: auto chose signal: ..."), an
  /// option that turned a step off, siblings left unfrozen by the scope.
  std::vector<std::string> notes;
  /// What was seen during the body that may have disturbed it, one line each
  /// (non-krex work on the reserved CPUs, the body thread preempted). Empty
  /// when nothing was seen; see docs/PIN.md for what is and is not isolated.
  std::vector<std::string> warnings;
  /// Involuntary context switches of the measuring thread during the body
  /// (-1: not measured, e.g. the region ended on another thread).
  long body_preemptions = -1;
  /// Estimated CPU time other tasks spent on the pinned CPUs during the body,
  /// in /proc/stat tick resolution (-1: not measured, e.g. not pinned).
  long long reserved_foreign_ns = -1;
  /// Signal freezing: siblings found already stopped by someone else (an
  /// operator, a debugger: state T or t) when the region froze. krex neither
  /// stopped nor continues them; they stay stopped after the region.
  std::vector<int> stopped_pids;
  /// Other krex segments whose tenants use this device now (another
  /// KREX_SEGMENT, KREX_SEGMENT_ACCESS, KREX_SHM_DIR or user): their
  /// tenants were neither drained nor frozen. Found through the node-wide
  /// device registry (see docs/FAULTS.md); each also has a warning, and
  /// level() ends in "-split(N other segment[s])".
  std::vector<std::string> other_segments;

  /// The quiet step (quiet.hpp): whether the device was probed, and whether
  /// it was verified quiet (within quiet_tolerance_pct of its idle figure)
  /// before the body; a note says why it was not probed.
  bool quiet_checked = false;
  bool quiet = false;
  std::uint64_t quiet_ns = 0;       ///< the quiet step, probes and waiting included
  std::uint64_t quiet_wait_ns = 0;  ///< of which waiting for a busy device to become quiet
  std::uint32_t quiet_bursts = 0;   ///< probe bursts (3 probes each)
  double quiet_first_ratio = 0;     ///< the first burst over the idle figure (1.10 = 10% slow)
  double quiet_last_ratio = 0;      ///< the last burst over the idle figure

  /// The device's clock state when the body started and when it ended (NVML;
  /// invalid on the host backend or without NVML). A slowdown reason at
  /// either end is also a warning.
  device_clocks clocks_entry;
  device_clocks clocks_exit;

  /// Processes with a context on the device that are not members of this
  /// device's segment (NVML), seen at entry: work krex neither gates nor
  /// freezes. Non-empty lowers the level ("-shared(N foreign)").
  std::vector<int> foreign_pids;
  bool foreign_checked = false;  ///< the device's processes could be listed

  /// The protection reached, e.g. "gate+drain+freeze(cgroup2)+quiet+pin",
  /// "gate+drain(contended)", "gate+drain+freeze(cgroup2)+quiet(busy)+pin" (the
  /// device was still busy at the quiet deadline), "...+pin-shared(2 foreign)"
  /// (processes outside krex hold a context on the device),
  /// "gate+drain+freeze(cgroup2,broken)" (a sibling ran again during the body),
  /// "gate+drain-split(1 other segment)" (another segment's tenants use the device), "none".
  std::string level() const {
    if (!gated) return "none";
    std::string s = "gate";
    if (drained) s += "+drain";
    else if (contended) s += "+drain(contended)";
    if (frozen && freeze != freeze_method::none)
      s += std::string("+freeze(") + to_string(freeze) + (freeze_broken ? ",broken)" : ")");
    if (quiet_checked) s += quiet ? "+quiet" : "+quiet(busy)";
    if (pinned) s += "+pin";
    if (!foreign_pids.empty()) s += "-shared(" + std::to_string(foreign_pids.size()) + " foreign)";
    if (!other_segments.empty())
      s += "-split(" + std::to_string(other_segments.size()) + " other segment" +
           (other_segments.size() == 1 ? ")" : "s)");
    return s;
  }
};

namespace detail {

inline void append_int_list(std::string& out, const std::vector<int>& v) {
  out += '[';
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i != 0) out += ',';
    out += std::to_string(v[i]);
  }
  out += ']';
}

/// Builds `{"key":value,...}` in one line; values are appended by the caller.
class report_json {
 public:
  std::string& key(const char* k) {
    m_s += m_s.empty() ? '{' : ',';
    append_json_string(m_s, k);
    m_s += ':';
    return m_s;
  }
  template <class T>
  void num(const char* k, T v) {
    key(k) += std::to_string(v);
  }
  void flag(const char* k, bool v) { key(k) += v ? "true" : "false"; }
  void real(const char* k, double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.6g", v);
    key(k) += b;
  }
  void clocks(const char* k, const device_clocks& c) {
    std::string& s = key(k);
    if (!c.valid) {
      s += "null";
      return;
    }
    s += "{\"sm_mhz\":" + std::to_string(c.sm_mhz) + ",\"mem_mhz\":" + std::to_string(c.mem_mhz) +
         ",\"power_mw\":" + std::to_string(c.power_mw) + ",\"temp_c\":" + std::to_string(c.temp_c) +
         ",\"reasons\":" + std::to_string(c.reasons) + "}";
  }
  void str(const char* k, const std::string& v) { append_json_string(key(k), v); }
  void ints(const char* k, const std::vector<int>& v) { append_int_list(key(k), v); }
  void strs(const char* k, const std::vector<std::string>& v) {
    std::string& s = key(k);
    s += '[';
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (i != 0) s += ',';
      append_json_string(s, v[i]);
    }
    s += ']';
  }
  std::string done() { return m_s.empty() ? "{}" : m_s + '}'; }

 private:
  std::string m_s;
};

}  // namespace detail

/// The report as one JSON object on one line: "level" (see level()) and every
/// field under its member name; pid and CPU lists are arrays, freeze and
/// scope their option names ("cgroup2", "all"). Strings are escaped, and bytes
/// that are not UTF-8 become U+FFFD, so the result always parses.
inline std::string to_json(const region_report& r) {
  detail::report_json j;
  j.str("level", r.level());
  j.num("epoch", r.epoch);
  j.num("ticket", r.ticket);
  j.num("siblings_seen", r.siblings_seen);
  j.num("siblings_drained", r.siblings_drained);
  j.num("siblings_gone", r.siblings_gone);
  j.ints("undrained_pids", r.undrained_pids);
  j.ints("frozen_pids", r.frozen_pids);
  j.ints("unverified_pids", r.unverified_pids);
  j.num("lock_ns", r.lock_ns);
  j.num("gate_ns", r.gate_ns);
  j.num("drain_ns", r.drain_ns);
  j.num("freeze_ns", r.freeze_ns);
  j.num("pin_ns", r.pin_ns);
  j.num("body_ns", r.body_ns);
  j.num("exit_ns", r.exit_ns);
  j.flag("gated", r.gated);
  j.flag("drained", r.drained);
  j.flag("contended", r.contended);
  j.flag("frozen", r.frozen);
  j.flag("pinned", r.pinned);
  j.flag("took_over_gate", r.took_over_gate);
  j.flag("lease_lost", r.lease_lost);
  j.flag("thaw_failed", r.thaw_failed);
  j.flag("freeze_broken", r.freeze_broken);
  j.str("freeze", to_string(r.freeze));
  j.str("scope", to_string(r.scope));
  j.ints("pinned_cpus", r.pinned_cpus);
  j.str("gating", r.gating);
  j.strs("notes", r.notes);
  j.strs("warnings", r.warnings);
  j.num("body_preemptions", r.body_preemptions);
  j.num("reserved_foreign_ns", r.reserved_foreign_ns);
  j.flag("quiet_checked", r.quiet_checked);
  j.flag("quiet", r.quiet);
  j.num("quiet_ns", r.quiet_ns);
  j.num("quiet_wait_ns", r.quiet_wait_ns);
  j.num("quiet_bursts", r.quiet_bursts);
  j.real("quiet_first_ratio", r.quiet_first_ratio);
  j.real("quiet_last_ratio", r.quiet_last_ratio);
  j.clocks("clocks_entry", r.clocks_entry);
  j.clocks("clocks_exit", r.clocks_exit);
  j.ints("foreign_pids", r.foreign_pids);
  j.flag("foreign_checked", r.foreign_checked);
  j.ints("stopped_pids", r.stopped_pids);
  j.strs("other_segments", r.other_segments);
  return j.done();
}

/// Writes the report for a person: a first line with the level, then every
/// field as `name=value`, a few to a line, then the notes and warnings one per
/// line. No trailing newline, as for any other value.
inline std::ostream& operator<<(std::ostream& os, const region_report& r) {
  const auto b = [](bool v) { return v ? "true" : "false"; };
  const auto ints = [](const std::vector<int>& v) {
    std::string s;
    detail::append_int_list(s, v);
    return s;
  };
  const auto clocks = [](const device_clocks& c) -> std::string {
    if (!c.valid) return "n/a";
    return std::to_string(c.sm_mhz) + "/" + std::to_string(c.mem_mhz) + "MHz," +
           std::to_string(c.power_mw / 1000) + "W," + std::to_string(c.temp_c) + "C,reasons=" +
           std::to_string(c.reasons);
  };
  const auto lines = [&os](const char* name, const std::vector<std::string>& v) {
    os << "\n  " << name << ':';
    if (v.empty()) os << " none";
    for (const std::string& l : v) os << "\n    - " << l;
  };
  os << "krex region: " << r.level() << "\n  epoch=" << r.epoch << " ticket=" << r.ticket
     << " siblings_seen=" << r.siblings_seen << " siblings_drained=" << r.siblings_drained
     << " siblings_gone=" << r.siblings_gone << "\n  undrained_pids=" << ints(r.undrained_pids)
     << " frozen_pids=" << ints(r.frozen_pids) << " unverified_pids=" << ints(r.unverified_pids)
     << "\n  lock_ns=" << r.lock_ns << " gate_ns=" << r.gate_ns << " drain_ns=" << r.drain_ns
     << " freeze_ns=" << r.freeze_ns << " pin_ns=" << r.pin_ns << " body_ns=" << r.body_ns
     << " exit_ns=" << r.exit_ns << "\n  gated=" << b(r.gated) << " drained=" << b(r.drained)
     << " contended=" << b(r.contended) << " frozen=" << b(r.frozen) << " pinned=" << b(r.pinned)
     << "\n  took_over_gate=" << b(r.took_over_gate) << " lease_lost=" << b(r.lease_lost)
     << " thaw_failed=" << b(r.thaw_failed) << " freeze_broken=" << b(r.freeze_broken)
     << "\n  freeze=" << to_string(r.freeze) << " scope=" << to_string(r.scope)
     << " pinned_cpus=" << ints(r.pinned_cpus) << " gating=" << r.gating
     << "\n  body_preemptions=" << r.body_preemptions
     << " reserved_foreign_ns=" << r.reserved_foreign_ns << "\n  quiet_checked=" << b(r.quiet_checked)
     << " quiet=" << b(r.quiet) << " quiet_ns=" << r.quiet_ns << " quiet_wait_ns=" << r.quiet_wait_ns
     << " quiet_bursts=" << r.quiet_bursts << " quiet_first_ratio=" << r.quiet_first_ratio
     << " quiet_last_ratio=" << r.quiet_last_ratio << "\n  clocks_entry=" << clocks(r.clocks_entry)
     << " clocks_exit=" << clocks(r.clocks_exit) << "\n  foreign_pids=" << ints(r.foreign_pids)
     << " foreign_checked=" << b(r.foreign_checked)
     << "\n  stopped_pids=" << ints(r.stopped_pids);
  lines("notes", r.notes);
  lines("warnings", r.warnings);
  lines("other_segments", r.other_segments);
  return os;
}

}  // namespace krex
