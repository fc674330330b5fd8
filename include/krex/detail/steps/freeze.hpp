// SPDX-License-Identifier: Apache-2.0
#pragma once

// Step 3, freeze: the siblings' process trees are frozen while the region
// runs, and thawed at its end. The method (cgroup v2, v1, signal, none) is
// the freezer's (detail/freeze/freezer.hpp), opened by the tenant at join.
//
// State: the siblings it froze, and the freezer's record of the freeze (its
// stops, those found stopped by someone else), handed back to thaw. Shared
// words: the siblings' frozen flags, the device's freeze counters. Report: the
// method, the pids frozen, unverified and stopped, a line for each left
// running. Undo (freeze_step's destructor): thaw each frozen sibling while the
// lease is ours; when a recoverer took the lease away, it has thawed them.

#include <krex/detail/freeze/freeze_signal.hpp>
#include <krex/detail/freeze/freezer.hpp>
#include <krex/detail/proc.hpp>
#include <krex/detail/slots/sibling.hpp>
#include <krex/detail/slots/slots.hpp>
#include <krex/detail/steps/context.hpp>
#include <krex/error.hpp>
#include <krex/options.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace krex::detail {

/// A sibling the freeze step may freeze (it acked the drain), and whether it
/// touches the device: its drain had work to sync, or it was inside a gated
/// call when the gate rose.
struct freeze_candidate {
  sibling who;
  bool touches_device = false;
};

/// What the freeze step did.
struct freeze_result {
  std::vector<sibling> frozen;           ///< frozen now: the region thaws them at exit
  std::vector<std::int32_t> unverified;  ///< refused (signal method, failed identity): running
  /// The freezer's record, handed back to thaw `frozen`; its `found_stopped`
  /// (signal method) were stopped by someone else: left stopped, not frozen.
  freezer::record record;
  std::uint32_t idle = 0;  ///< left running by scope `device` (they do not touch the device)
  std::uint32_t gone = 0;  ///< died between their drain and the freeze
  /// Slots whose leaf does not exist (cgroup methods): no tenant of this
  /// freeze domain, left running; `reaped` says whose slot was freed.
  std::vector<sibling> leafless;
  std::vector<bool> reaped;
};

/// How long a leafless slot's heartbeat must be still before its slot is
/// freed (a tenant's agent beats every 100 ms; the guardian frees such slots
/// too, guardian.hpp's reap_leafless_slots).
inline constexpr std::uint64_t leafless_reap_ns = 2'000'000'000ULL;

/// Holder side: freezes the candidates that m's scope selects, with
/// m's freeze deadline. A sibling that dies meanwhile is dropped and the rest
/// frozen again (at most three attempts); any other failure throws
/// krex::error(step::freeze) with nothing left frozen. `gone(sibling)` says
/// whether a sibling left or died; `check_lease()` throws if the region's
/// lease was lost, and is called before each attempt and after the freeze
/// (then what was frozen is thawed first: a recoverer's thaw may have come
/// before it, and nobody else would undo it). Marks the frozen slots and
/// counts the freeze in the device's statistics.
template <class Gone, class CheckLease>
freeze_result freeze_siblings(member& m, freezer& fz, const std::vector<freeze_candidate>& cands,
                              Gone&& gone, CheckLease&& check_lease) {
  const std::uint64_t t0 = now_ns();
  freeze_result r;
  r.unverified.reserve(cands.size());  // nothing below allocates once siblings are frozen
  for (const freeze_candidate& c : cands) {
    if (m.opts.scope() != freeze_scope::all && !c.touches_device) {
      ++r.idle;
      continue;
    }
    r.frozen.push_back(c.who);
  }
  for (int attempt = 0;; ++attempt) {
    check_lease();
    try {
      r.record = fz.freeze(r.frozen, std::chrono::steady_clock::now() + m.opts.freeze_deadline());
      break;
    } catch (const error&) {
      // A sibling that died since it drained loses its leaf when it is
      // reaped: drop the gone ones and freeze the rest (freeze() has
      // thawed what it had started). Anything else fails the region.
      const std::size_t before = r.frozen.size();
      r.frozen.erase(std::remove_if(r.frozen.begin(), r.frozen.end(), gone), r.frozen.end());
      if (attempt >= 2 || r.frozen.size() == before) throw;
      r.gone += static_cast<std::uint32_t>(before - r.frozen.size());
    }
  }
  try {
    check_lease();
  } catch (...) {
    fz.thaw(r.record, r.frozen);
    throw;
  }
  // Signal freezing signals only verified tenants: the others were not
  // stopped, and are reported, not counted as frozen.
  for (const auto& ref : r.record.refused) {
    r.unverified.push_back(ref.who.pid);
    r.frozen.erase(std::remove_if(r.frozen.begin(), r.frozen.end(),
                                  [&](const sibling& f) { return f.same(ref.who); }),
                   r.frozen.end());
  }
  // Nor are those someone else had stopped: the exit must not continue them.
  for (const sibling& s : r.record.found_stopped) {
    r.frozen.erase(std::remove_if(r.frozen.begin(), r.frozen.end(),
                                  [&](const sibling& f) { return f.same(s); }),
                   r.frozen.end());
  }
  for (const auto& f : r.frozen) m.slot_at(f.slot).frozen.store(1);
  m.dev->freezes.fetch_add(r.frozen.empty() ? 0 : 1, std::memory_order_relaxed);
  m.dev->freeze_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
  return r;
}

/// What the freeze step's exit did.
struct thaw_result {
  bool freeze_broken = false;  ///< a sibling ran again before the exit (thawed behind our back)
  bool thaw_failed = false;    ///< a thaw failed (the freezer's last_error() says why)
  bool lease_lost = false;     ///< the lease was gone: the rest is the recoverer's to thaw
};

/// The freeze step's exit, holder side: checks that every sibling in `frozen`
/// (by the freeze that wrote `rec`) is still frozen, then thaws them one by
/// one, each only while `ours()` says the region's lease is still ours (once it
/// is not, a recoverer has thawed them and a new holder may have frozen them
/// again: nothing more is touched), and clears each thawed slot's flag.
template <class LeaseCheck>
thaw_result thaw_siblings(member& m, freezer& fz, freezer::record& rec,
                          std::vector<sibling>& frozen, LeaseCheck&& ours) noexcept {
  thaw_result r;
  // Something thawed a sibling during the body (a late thaw, a SIGCONT, an
  // operator): the body was not protected throughout.
  for (const sibling& f : frozen)
    if (!fz.still_frozen(rec, f)) r.freeze_broken = true;
  for (const sibling& f : frozen) {
    if (!ours()) {
      r.lease_lost = true;
      break;
    }
    if (!fz.thaw_one(rec, f)) r.thaw_failed = true;
    m.slot_at(f.slot).frozen.store(0);
  }
  frozen.clear();
  return r;
}

/// Step 3 as an object: moves the phase to freezing, freezes (with `fz`;
/// null or method none: nothing) the siblings that acked the drain and m's
/// scope selects (freeze_siblings), and moves the phase to frozen. When it
/// throws, nothing is left frozen. Its destructor is the undo: thaw what it
/// froze while the lease is ours (thaw_siblings), and see whether a sibling
/// someone else had stopped ran during the body.
class freeze_step {
 public:
  freeze_step(region_context& c, freezer* fz, const std::vector<sibling>& sibs) : m_c(c), m_fz(fz) {
    member& m = c.m;
    set_phase(*m.dev, phase_freezing);
    if (fz != nullptr && fz->method() != freeze_method::none) {
      std::vector<sibling> leafless;
      m_result = freeze_siblings(
          m, *fz, candidates(m, sibs),
          [&](const sibling& f) {
            if (sibling_gone(m, f)) return true;
            if (!fz->leaf_missing(f)) return false;
            leafless.push_back(f);
            return true;
          },
          [&] { c.check_lease("freezing the siblings"); });
      // A slot naming a live process that never entered a leaf: not frozen
      // (it cannot be), reported, and freed once its heartbeat is still.
      for (const sibling& f : leafless) {
        tenant_slot& s = m.slot_at(f.slot);
        const std::uint64_t hb = s.heartbeat_ns.load();
        const std::uint64_t now = now_ns();
        const bool reap = s.owner.load() == f.pid &&
                          (hb > now ? 0 : now - hb) >= leafless_reap_ns &&
                          reap_slot(*m.node, f.slot, f.pid, m.recovery);
        if (reap) m.node->reaped.fetch_add(1, std::memory_order_relaxed);
        m_result.leafless.push_back(f);
        m_result.reaped.push_back(reap);
        if (m_result.gone > 0) --m_result.gone;
      }
      m_ran = true;
    }
    set_phase(*m.dev, phase_frozen);
  }
  freeze_step(const freeze_step&) = delete;
  freeze_step& operator=(const freeze_step&) = delete;

  ~freeze_step() {
    if (m_c.exit != region_context::exit_kind::ours) return;  // lost or forked: not ours to thaw
    if (!m_result.frozen.empty()) {  // only a freezer can have frozen anything
      const thaw_result t =
          thaw_siblings(m_c.m, *m_fz, m_result.record, m_result.frozen, [&] { return m_c.ours(); });
      region_report& r = m_c.report;
      r.freeze_broken = r.freeze_broken || t.freeze_broken;
      r.thaw_failed = r.thaw_failed || t.thaw_failed;
      r.lease_lost = r.lease_lost || t.lease_lost;
    }
    // A sibling someone else had stopped and that runs again now ran
    // during (part of) the body, unfrozen.
    for (const sibling& f : m_result.record.found_stopped) {
      const proc_stat st = read_proc_stat(f.pid);
      if (st.exists && st.start_time == f.start_time && !freeze_signal::is_halted(st.state))
        m_c.report.freeze_broken = true;
    }
  }

  /// Writes into `r` the method and, if a freezer ran, the siblings frozen,
  /// left running (unverified, leafless, idle) and found stopped.
  void describe(region_report& r) const {
    r.freeze = m_fz != nullptr ? m_fz->method() : freeze_method::none;
    if (!m_ran) return;
    const freeze_result& f = m_result;
    r.siblings_gone += f.gone;
    r.unverified_pids = f.unverified;
    for (std::size_t i = 0; i < f.leafless.size(); ++i) {
      const sibling& l = f.leafless[i];
      r.unverified_pids.push_back(l.pid);
      r.warnings.push_back(
          cat({"freeze: sibling slot ", l.slot, " (pid ", l.pid,
               ") has no leaf under the krex cgroup root, so its process is no tenant of this "
               "freeze domain (a slot written into the segment by hand?): it ran unfrozen beside "
               "this region",
               f.reaped[i] ? "; its slot was freed"
                           : "; its slot is kept while its heartbeat is fresh (`krexctl status`)"}));
    }
    for (const sibling& t : f.record.found_stopped) {
      r.stopped_pids.push_back(t.pid);
      r.notes.push_back(cat({"freeze: sibling pid ", t.pid,
                             " was already stopped by someone else: left stopped, krex will not "
                             "continue it"}));
    }
    for (const sibling& t : f.frozen) r.frozen_pids.push_back(t.pid);
    r.frozen = true;
    if (f.idle > 0)
      r.notes.push_back(cat({"freeze: scope ", to_string(m_c.m.opts.scope()), " left ", f.idle,
                             " sibling(s) with no device work unfrozen (KREX_FREEZE_SCOPE=all "
                             "freezes them too)"}));
  }

 private:
  // The drained siblings, each marked whether it touches the device (never
  // one that missed the drain: it may be inside a driver call, where
  // freezing can stall).
  static std::vector<freeze_candidate> candidates(member& m, const std::vector<sibling>& sibs) {
    std::vector<freeze_candidate> c;
    for (const sibling& sb : sibs)
      if (!sb.gone && sb.acked)
        c.push_back({sb, sb.submitting || m.slot_at(sb.slot).active.load() != 0});
    return c;
  }

  region_context& m_c;
  freezer* m_fz;
  bool m_ran = false;  // a freezer ran (false: no freezer, or method none)
  freeze_result m_result;
};

}  // namespace krex::detail
