// SPDX-License-Identifier: Apache-2.0
#pragma once

// krexctl's views of a node snapshot (krex::detail::read_status): JSON and
// text for a terminal. Tools only, like the snapshot it shows
// (krex_tools/status.hpp); how it is shown is krexctl's business.

#include <cmath>
#include <cstdio>
#include <krex_tools/json.hpp>
#include <krex_tools/status.hpp>
#include <string>

namespace krex_tools::status {

using krex::detail::device_view;
using krex::detail::lease_exiting;
using krex::detail::lease_recovering;
using krex::detail::lease_slot_mask;
using krex::detail::node_view;
using krex::detail::phase_name;
using krex::detail::slot_state_name;
using krex::detail::tenant_view;

inline std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}
/// A JSON number with a fixed format (null when not finite: JSON has no NaN).
inline std::string fixed(const char* f, double x) { return std::isfinite(x) ? fmt(f, x) : "null"; }

/// The snapshot as one JSON object.
inline std::string to_json(const node_view& v) {
  krex_tools::json::writer j;
  j.begin_object().field("segment", v.segment).field("freeze_domain", v.freeze_domain);
  j.key("guardian")
      .begin_object()
      .field("pid", v.guardian_pid)
      .field("alive", v.guardian_alive)
      .field("state", v.guardian_state)
      .field("starts", v.guardian_starts)
      .end_object();
  j.field("reaped", v.reaped).key("devices").begin_array();
  for (const device_view& d : v.devices) {
    j.begin_object().field("index", d.index).field("key", d.key).field("gate", d.gate);
    j.field("gate_raised", d.raised).field("phase", phase_name(d.phase));
    if (d.lease_slot != 0) {
      j.key("holder")
          .begin_object()
          .field("slot", (d.lease_slot & lease_slot_mask) - 1)
          .field("pid", d.lease_pid)
          .field("alive", d.lease_holder_alive)
          .field("verified", d.lease_holder_verified)
          .field("stopped", d.lease_holder_stopped)
          .key("region_age_ms")
          .raw(fixed("%.1f", d.region_age_ms))
          .key("lease_left_ms")
          .raw(fixed("%.1f", d.lease_left_ms))
          .field("exiting", (d.lease_slot & lease_exiting) != 0)
          .field("recovering", (d.lease_slot & lease_recovering) != 0)
          .end_object();
    } else {
      j.key("holder").null();
    }
    j.field("now_serving", d.now_serving)
        .field("next_ticket", d.next_ticket)
        .field("tenants", d.tenants);
    j.key("counters")
        .begin_object()
        .field("regions", d.regions)
        .field("region_ns", d.region_ns)
        .field("lock_wait_ns", d.lock_wait_ns)
        .field("gate_parks", d.gate_parks)
        .field("drains", d.drains)
        .field("drain_ns", d.drain_ns)
        .field("freezes", d.freezes)
        .field("freeze_ns", d.freeze_ns)
        .field("contended", d.contended)
        .field("recoveries", d.recoveries)
        .field("lease_expiries", d.lease_expiries)
        .field("handoff_skips", d.handoff_skips)
        .field("quiet_ref_ns", d.quiet_ref_ns)
        .field("quiet_checks", d.quiet_checks)
        .field("quiet_waits", d.quiet_waits)
        .field("quiet_wait_ns", d.quiet_wait_ns)
        .field("quiet_busy", d.quiet_busy)
        .end_object();
    if (d.served_age_ms >= 0)
      j.key("served")
          .begin_object()
          .field("ticket", d.now_serving)
          .key("age_ms")
          .raw(fixed("%.1f", d.served_age_ms))
          .field("claimed", d.served_claimed)
          .end_object();
    else
      j.key("served").null();
    if (d.recoverer_pid != 0)
      j.key("recovery")
          .begin_object()
          .field("pid", d.recoverer_pid)
          .field("alive", d.recoverer_alive)
          .key("age_ms")
          .raw(fixed("%.1f", d.recovery_age_ms))
          .end_object();
    else
      j.key("recovery").null();
    j.end_object();
  }
  j.end_array().key("tenants").begin_array();
  for (const tenant_view& t : v.tenants) {
    j.begin_object()
        .field("slot", t.slot)
        .field("pid", t.pid)
        .field("alive", t.alive)
        .field("verified", t.verified)
        .field("stopped", t.stopped)
        .field("state", slot_state_name(t.state))
        .field("device", t.device)
        .field("in_submit", t.in_submit)
        .field("frozen", t.frozen)
        .field("waiting", t.waiting)
        .key("joined_s")
        .raw(fixed("%.3f", t.joined_s))
        .key("heartbeat_age_ms")
        .raw(fixed("%.1f", t.heartbeat_age_ms))
        .field("submits", t.submits)
        .field("drains", t.drains)
        .end_object();
  }
  j.end_array().key("problems").begin_array();
  for (const std::string& p : v.problems) j.value(p);
  j.end_array().key("unverified").begin_array();
  for (const std::string& u : v.unverified) j.value(u);
  // Healthy only when nothing is wrong and everything could be checked.
  j.end_array().field("healthy", v.problems.empty() && v.unverified.empty()).end_object();
  return j.str();
}

/// The snapshot as text for a terminal.
inline std::string to_text(const node_view& v) {
  std::string o = "segment   " + v.segment + "\n";
  o += "freeze    " + (v.freeze_domain.empty() ? std::string("-") : v.freeze_domain) + "\n";
  o += "guardian  " +
       (v.guardian_pid > 0 ? "pid " + std::to_string(v.guardian_pid) + " (" + v.guardian_state + ")"
                           : std::string("none")) +
       ", " + std::to_string(v.guardian_starts) + " started, " + std::to_string(v.reaped) +
       " dead tenant(s) reaped\n";
  for (const device_view& d : v.devices) {
    o += "device " + std::to_string(d.index) + "  gate " + (d.raised ? "RAISED" : "down") +
         " (epoch " + std::to_string(d.gate) + "), phase " + phase_name(d.phase) + ", " +
         std::to_string(d.tenants) + " tenant(s), queue " + std::to_string(d.now_serving) + "/" +
         std::to_string(d.next_ticket) + "\n";
    if (d.lease_slot != 0)
      o += "  holder  slot " + std::to_string((d.lease_slot & lease_slot_mask) - 1) + " pid " +
           std::to_string(d.lease_pid) +
           (!d.lease_holder_alive      ? " (DEAD)"
            : !d.lease_holder_verified ? " (unverified)"
            : d.lease_holder_stopped   ? " (stopped)"
                                       : "") +
           ", region age " + fmt("%.1f", d.region_age_ms) + " ms, lease left " +
           fmt("%.1f", d.lease_left_ms) + " ms" +
           ((d.lease_slot & lease_exiting) ? ", exiting" : "") +
           ((d.lease_slot & lease_recovering) ? ", being recovered" : "") + "\n";
    o += "  counters regions " + std::to_string(d.regions) + ", drains " +
         std::to_string(d.drains) + ", freezes " + std::to_string(d.freezes) + ", gate parks " +
         std::to_string(d.gate_parks) + ", contended " + std::to_string(d.contended) +
         ", recoveries " + std::to_string(d.recoveries) + " (" + std::to_string(d.lease_expiries) +
         " lease expiries), hand-off skips " + std::to_string(d.handoff_skips) + "\n";
    if (d.quiet_checks != 0)
      o += "  quiet   " + std::to_string(d.quiet_checks) + " regions probed, " +
           std::to_string(d.quiet_waits) + " waited (" + fmt("%.1f", static_cast<double>(d.quiet_wait_ns) / 1e6) +
           " ms in all), " + std::to_string(d.quiet_busy) + " still busy at the deadline; idle probe " +
           fmt("%.1f", static_cast<double>(d.quiet_ref_ns) / 1e3) + " us\n";
    if (d.served_age_ms >= 0)
      o += "  served  ticket " + std::to_string(d.now_serving) + " " +
           fmt("%.1f", d.served_age_ms) + " ms ago, " + (d.served_claimed ? "taken" : "NOT TAKEN") +
           "\n";
    if (d.recoverer_pid != 0)
      o += "  recovery by pid " + std::to_string(d.recoverer_pid) +
           (d.recoverer_alive ? "" : " (DEAD)") + ", " + fmt("%.1f", d.recovery_age_ms) + " ms\n";
  }
  if (!v.tenants.empty())
    o += "slot  pid       device  state     alive  frozen  in_submit  joined\n";
  for (const tenant_view& t : v.tenants) {
    char b[160];
    std::snprintf(b, sizeof b, "%-5u %-9d %-7u %-9s %-6s %-7s %-10u %.1f s\n", t.slot, t.pid,
                  t.device, slot_state_name(t.state),
                  !t.alive      ? "NO"
                  : !t.verified ? "?"
                  : t.stopped   ? "stop"
                                : "yes",
                  t.frozen ? "yes" : "no", t.in_submit, t.joined_s);
    o += b;
  }
  for (const std::string& u : v.unverified) o += "unverified: " + u + "\n";
  if (v.problems.empty() && v.unverified.empty()) {
    o += "healthy\n";
  } else if (v.problems.empty()) {
    o += "no problem found, but " + std::to_string(v.unverified.size()) +
         " process(es) could not be verified (see unverified above)\n";
  } else {
    for (const std::string& p : v.problems) o += "problem: " + p + "\n";
  }
  return o;
}

}  // namespace krex_tools::status
