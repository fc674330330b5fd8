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
#include <utility>
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

  /// The quiet step (detail/steps/quiet.hpp): whether the device was probed, and whether
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

/// The one list of region_report's fields, in the order to_json() writes
/// them: f(name, field, line) for each, `line` true where operator<< starts
/// a new line. The name is the member's own (stringified), so JSON keys,
/// text names and Python keys cannot drift from the struct;
/// tests/test_tables.cpp checks that the list has every member.
template <class Report, class F>
void visit_report_fields(Report& r, F&& f) {
#define KREX_REPORT_FIELD(name, line) f(#name, r.name, line)
  KREX_REPORT_FIELD(epoch, true);
  KREX_REPORT_FIELD(ticket, false);
  KREX_REPORT_FIELD(siblings_seen, false);
  KREX_REPORT_FIELD(siblings_drained, false);
  KREX_REPORT_FIELD(siblings_gone, false);
  KREX_REPORT_FIELD(undrained_pids, true);
  KREX_REPORT_FIELD(frozen_pids, false);
  KREX_REPORT_FIELD(unverified_pids, false);
  KREX_REPORT_FIELD(lock_ns, true);
  KREX_REPORT_FIELD(gate_ns, false);
  KREX_REPORT_FIELD(drain_ns, false);
  KREX_REPORT_FIELD(freeze_ns, false);
  KREX_REPORT_FIELD(pin_ns, false);
  KREX_REPORT_FIELD(body_ns, false);
  KREX_REPORT_FIELD(exit_ns, false);
  KREX_REPORT_FIELD(gated, true);
  KREX_REPORT_FIELD(drained, false);
  KREX_REPORT_FIELD(contended, false);
  KREX_REPORT_FIELD(frozen, false);
  KREX_REPORT_FIELD(pinned, false);
  KREX_REPORT_FIELD(took_over_gate, true);
  KREX_REPORT_FIELD(lease_lost, false);
  KREX_REPORT_FIELD(thaw_failed, false);
  KREX_REPORT_FIELD(freeze_broken, false);
  KREX_REPORT_FIELD(freeze, true);
  KREX_REPORT_FIELD(scope, false);
  KREX_REPORT_FIELD(pinned_cpus, false);
  KREX_REPORT_FIELD(gating, false);
  KREX_REPORT_FIELD(notes, true);     // lists of lines: operator<< writes them last
  KREX_REPORT_FIELD(warnings, true);
  KREX_REPORT_FIELD(body_preemptions, true);
  KREX_REPORT_FIELD(reserved_foreign_ns, false);
  KREX_REPORT_FIELD(quiet_checked, true);
  KREX_REPORT_FIELD(quiet, false);
  KREX_REPORT_FIELD(quiet_ns, false);
  KREX_REPORT_FIELD(quiet_wait_ns, false);
  KREX_REPORT_FIELD(quiet_bursts, false);
  KREX_REPORT_FIELD(quiet_first_ratio, false);
  KREX_REPORT_FIELD(quiet_last_ratio, false);
  KREX_REPORT_FIELD(clocks_entry, true);
  KREX_REPORT_FIELD(clocks_exit, false);
  KREX_REPORT_FIELD(foreign_pids, true);
  KREX_REPORT_FIELD(foreign_checked, false);
  KREX_REPORT_FIELD(stopped_pids, true);
  KREX_REPORT_FIELD(other_segments, true);
#undef KREX_REPORT_FIELD
}

inline void append_int_list(std::string& out, const std::vector<int>& v) {
  out += '[';
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i != 0) out += ',';
    out += std::to_string(v[i]);
  }
  out += ']';
}

/// Builds `{"key":value,...}` in one line, a value per field type.
class report_json {
 public:
  std::string& key(const char* k) {
    m_s += m_s.empty() ? '{' : ',';
    append_json_string(m_s, k);
    m_s += ':';
    return m_s;
  }
  template <class T>
  void operator()(const char* k, const T& v, bool /*line*/) {
    key(k) += std::to_string(v);
  }
  void operator()(const char* k, bool v, bool /*line*/) { key(k) += v ? "true" : "false"; }
  void operator()(const char* k, double v, bool /*line*/) {
    char b[32];
    std::snprintf(b, sizeof b, "%.6g", v);
    key(k) += b;
  }
  void operator()(const char* k, const device_clocks& c, bool /*line*/) {
    std::string& s = key(k);
    if (!c.valid) {
      s += "null";
      return;
    }
    s += "{\"sm_mhz\":" + std::to_string(c.sm_mhz) + ",\"mem_mhz\":" + std::to_string(c.mem_mhz) +
         ",\"power_mw\":" + std::to_string(c.power_mw) + ",\"temp_c\":" + std::to_string(c.temp_c) +
         ",\"reasons\":" + std::to_string(c.reasons) + "}";
  }
  void operator()(const char* k, const std::string& v, bool /*line*/) {
    append_json_string(key(k), v);
  }
  void operator()(const char* k, freeze_method v, bool line) {
    (*this)(k, std::string(to_string(v)), line);
  }
  void operator()(const char* k, freeze_scope v, bool line) {
    (*this)(k, std::string(to_string(v)), line);
  }
  void operator()(const char* k, const std::vector<int>& v, bool /*line*/) {
    append_int_list(key(k), v);
  }
  void operator()(const char* k, const std::vector<std::string>& v, bool /*line*/) {
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

/// Writes `name=value` for operator<<, a few to a line; lists of lines
/// (notes, warnings, other_segments) are kept for the end.
class report_text {
 public:
  explicit report_text(std::ostream& os) : m_os(os) {}
  template <class T>
  void operator()(const char* k, const T& v, bool line) {
    start(k, line) << v;
  }
  void operator()(const char* k, bool v, bool line) { start(k, line) << (v ? "true" : "false"); }
  void operator()(const char* k, freeze_method v, bool line) { start(k, line) << to_string(v); }
  void operator()(const char* k, freeze_scope v, bool line) { start(k, line) << to_string(v); }
  void operator()(const char* k, const std::vector<int>& v, bool line) {
    std::string s;
    append_int_list(s, v);
    start(k, line) << s;
  }
  void operator()(const char* k, const device_clocks& c, bool line) {
    std::ostream& os = start(k, line);
    if (!c.valid) {
      os << "n/a";
      return;
    }
    os << c.sm_mhz << "/" << c.mem_mhz << "MHz," << c.power_mw / 1000 << "W," << c.temp_c
       << "C,reasons=" << c.reasons;
  }
  void operator()(const char* k, const std::vector<std::string>& v, bool /*line*/) {
    m_lists.emplace_back(k, &v);
  }
  /// The lists of lines, one item per line.
  void done() {
    for (const auto& [name, v] : m_lists) {
      m_os << "\n  " << name << ':';
      if (v->empty()) m_os << " none";
      for (const std::string& l : *v) m_os << "\n    - " << l;
    }
  }

 private:
  std::ostream& start(const char* k, bool line) {
    return m_os << (line ? "\n  " : " ") << k << '=';
  }
  std::ostream& m_os;
  std::vector<std::pair<const char*, const std::vector<std::string>*>> m_lists;
};

}  // namespace detail

/// The report as one JSON object on one line: "level" (see level()) and every
/// field under its member name (detail::visit_report_fields' order); pid and
/// CPU lists are arrays, freeze and scope their option names ("cgroup2",
/// "all"). Strings are escaped, and bytes that are not UTF-8 become U+FFFD,
/// so the result always parses.
inline std::string to_json(const region_report& r) {
  detail::report_json j;
  j("level", r.level(), false);
  detail::visit_report_fields(r, j);
  return j.done();
}

/// Writes the report for a person: a first line with the level, then every
/// field as `name=value`, a few to a line, then the notes, warnings and other
/// segments one per line. No trailing newline, as for any other value.
inline std::ostream& operator<<(std::ostream& os, const region_report& r) {
  os << "krex region: " << r.level();
  detail::report_text t(os);
  detail::visit_report_fields(r, t);
  t.done();
  return os;
}

}  // namespace krex
