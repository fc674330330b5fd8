// SPDX-License-Identifier: Apache-2.0
#pragma once

// Step 3 of the protocol: freezing the siblings' process trees while a region
// runs, and its undo. One cgroup freezer serves cgroup v2, cgroup v1 and none,
// driven by their entries in detail/freeze_table.hpp (the files and values the
// kernel uses; none is the empty entry); the signal method's operations live
// in detail/freeze_signal.hpp. Each tenant lives in its own leaf
// `<root>/t<slot>`; the region holder builds its siblings' leaves from its own
// root and their slot numbers and never opens any other path.

#include <krex/detail/cgroup.hpp>
#include <krex/detail/freeze_signal.hpp>
#include <krex/detail/freeze_table.hpp>
#include <krex/detail/identity.hpp>
#include <krex/detail/layout.hpp>
#include <krex/detail/slots.hpp>
#include <krex/error.hpp>
#include <krex/options.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace krex::detail {

class freezer {
 public:
  /// A sibling to freeze: its slot, and (signal method) the pid and start
  /// time its slot recorded at join, which are verified before any signal.
  struct target {
    std::uint32_t slot;
    pid_t pid;
    std::uint64_t start_time = 0;
  };

  /// A sibling the signal method refused to signal, and why.
  struct refusal {
    target who;
    identity_verdict why;
  };

  /// Resolves the method and the krex cgroup root. `requested`: options.freeze();
  /// `root_option`: options.cgroup_root() ("" = derive: a `krex` child of this
  /// process's cgroup, or the enclosing krex root, plus `/<domain>`, the
  /// segment name, so that segments sharing the derived root never share
  /// leaves). `automatic` takes the first
  /// of cgroup_v2, cgroup_v1, signal that works here, creating the root if it
  /// is missing; notes() says why stronger ones were passed over. Throws
  /// krex::error(step::freeze) when an explicit method cannot work, or when
  /// `root_option` is set and no cgroup method can use it (an explicit root is
  /// never silently replaced by signals), naming the path and what to do.
  static freezer open(freeze_method requested, const std::string& root_option,
                      const std::string& domain = {}) {
    if (requested == freeze_method::none || requested == freeze_method::signal)
      return {requested, {}, {}};
    if (!domain.empty() && (domain.find('/') != std::string::npos || domain == "." ||
                            domain == ".." || cgroup::is_leaf_name(domain)))
      cgroup::fail("invalid freeze domain name", domain, EINVAL,
                   "a domain is one path component (the segment name)");
    const cgroup::self_view view = cgroup::self_view::read();
    std::string notes;
    for (freeze_method m : {freeze_method::cgroup_v2, freeze_method::cgroup_v1}) {
      if (requested != freeze_method::automatic && requested != m) continue;
      const attempt a = resolve(freeze_table_of(m), root_option, domain, view);
      if (a.err == 0) {
        freezer f{m, a.root, notes};
        f.m_own_dir = root_option.empty() && !domain.empty();
        return f;
      }
      if (requested == m) cgroup::fail(a.what, a.path, a.err, a.hint);
      notes +=
          std::string(to_string(m)) + ": " + a.what + " " + a.path +
          (a.err > 0 ? std::string(": ") + std::system_category().message(a.err) : std::string()) +
          "; ";
    }
    // An operator who names a root wants cgroup freezing there: falling back
    // to signals would silently weaken every region of the job.
    if (!root_option.empty())
      cgroup::fail("KREX_CGROUP_ROOT is set but no cgroup freezer can use it (" + notes + ") root:",
                   root_option, EINVAL,
                   "fix the root (a writable directory in a cgroup v2 or v1 freezer hierarchy), "
                   "unset KREX_CGROUP_ROOT to derive one, or choose KREX_FREEZE=signal explicitly");
    return {freeze_method::signal, {}, notes};
  }

  /// The method in use; never `automatic`.
  freeze_method method() const noexcept { return m_method; }
  /// Its cgroup files and values (the empty entry for signal and none).
  const freeze_table& table() const noexcept { return freeze_table_of(m_method); }
  /// Absolute filesystem path of the krex root; "" for signal and none.
  const std::string& root() const noexcept { return m_root; }
  /// Why `automatic` passed over stronger methods ("" if it did not).
  const std::string& notes() const noexcept { return m_notes; }
  /// The last failure of a noexcept operation (leave, thaw); "" if none.
  const std::string& last_error() const noexcept { return m_last_error; }
  /// Whether root() is this segment's own directory under the derived root
  /// (made with the first leaf, removed with the last).
  bool owns_root() const noexcept { return m_own_dir; }
  /// The leaf of `slot`: root + "/t" + slot.
  std::string leaf(std::uint32_t slot) const { return m_root + "/t" + std::to_string(slot); }

  /// Who may be signalled (signal method): only processes verified as
  /// members of this domain (see detail/identity.hpp); without a domain,
  /// nobody. `node`: where stops are recorded for recoverers (may be null).
  /// Cgroup methods in group mode share each leaf with the domain's group.
  void bind(const identity_domain& d, node_state* node = nullptr) noexcept {
    m_identity = d;
    m_node = node;
    m_cache.clear();
  }
  const identity_domain& identity() const noexcept { return m_identity; }
  /// Siblings the last freeze() did not signal because they were not
  /// verified as the tenants that joined (signal method).
  const std::vector<refusal>& refused() const noexcept { return m_refused; }
  /// Siblings the last freeze() found stopped by someone else (signal
  /// method): neither signalled nor to be continued; they are not frozen().
  const std::vector<target>& found_stopped() const noexcept { return m_found_stopped; }

  /// Tenant side, at join: creates leaf t<slot> and moves this process (all
  /// its threads; children forked later follow) into it, remembering where it
  /// was. A stale leaf without live processes is thawed and recreated; one
  /// with live processes makes this throw. No-op for signal and none.
  void enter(std::uint32_t slot) {
    if (table().cgroup()) enter_as(slot);
  }

  /// Tenant side, at leave: moves this process back, thaws and removes the
  /// leaf. Best effort; a failure is kept in last_error(). Children still in
  /// the leaf keep it from being removed.
  void leave(std::uint32_t slot) noexcept {
    if (table().cgroup()) leave_as(slot);
  }

  /// Holder side: starts freezing every sibling, then waits for all of them
  /// to report frozen by `deadline`. On a failed write or a missed deadline
  /// it thaws everything it froze and throws krex::error(step::freeze).
  void freeze(const std::vector<target>& siblings, std::chrono::steady_clock::time_point deadline) {
    m_refused.clear();
    m_found_stopped.clear();
    if (m_method == freeze_method::none) return;  // the empty table: nothing to freeze
    // Stops a lost lease left behind are not ours to continue any more.
    m_stopped.clear();
    std::vector<target> started;
    const auto give_up = [&](const std::string& what, const std::string& path, int err,
                             const std::string& hint) {
      thaw(started);
      cgroup::fail(what, path, err, hint);
    };
    for (const target& s : siblings) {
      if (s.pid == ::getpid() || (m_entered && s.slot == m_slot))
        give_up("refusing to freeze the caller's own slot", leaf_or_pid(s), EDEADLK,
                "the region holder must not be in its sibling list");
      const int e = start(s);
      started.push_back(s);  // a failed write or signal may still have taken effect
      if (e)
        give_up("cannot freeze sibling slot " + std::to_string(s.slot) + " at", leaf_or_pid(s), e,
                e == ENOENT ? "the sibling has no leaf under this process's root: all tenants "
                              "must use the same KREX_CGROUP_ROOT"
                            : hint_text);
    }
    std::vector<bool> done(siblings.size(), false);
    cgroup::backoff wait;
    for (;;) {
      bool all = true;
      for (size_t i = 0; i < siblings.size(); ++i) {
        if (done[i]) continue;
        bool ok = false;
        if (const int e = is_frozen(siblings[i], ok))
          give_up("cannot read the freeze state of", status_path(siblings[i]), e, hint_text);
        done[i] = ok;
        all = all && ok;
      }
      if (all) return;
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string late;
        for (size_t i = 0; i < siblings.size(); ++i)
          if (!done[i]) late += (late.empty() ? "" : ", ") + status_path(siblings[i]);
        give_up("siblings not frozen by the deadline (thawed again):", late, ETIMEDOUT,
                "a task in uninterruptible sleep (a driver call, I/O) cannot freeze; drain must "
                "finish first, or raise KREX_FREEZE_DEADLINE_MS");
      }
      wait.pause();
    }
  }

  /// False when sibling `s` is known to run again: its leaf no longer frozen,
  /// or (signal) its process not stopped. A sibling that is gone, or whose
  /// state cannot be read, does not count as thawed.
  bool still_frozen(const target& s) const noexcept {
    bool ok = true;
    try {
      return is_frozen(s, ok) != 0 || ok;
    } catch (...) {
      return true;
    }
  }

  /// Thaws these siblings: tries every one, returns false if any thaw failed
  /// (the failure is kept in last_error()). A sibling whose leaf or process is
  /// already gone counts as thawed. Signal method: continues exactly what
  /// freeze() stopped for them (the same processes, through the same pidfds),
  /// and nothing it did not stop.
  bool thaw(const std::vector<target>& siblings) noexcept {
    bool ok = true;
    for (const target& s : siblings) ok = thaw_one(s) && ok;
    return ok;
  }

  /// thaw() of one sibling.
  bool thaw_one(const target& s) noexcept {
    int e = 0;
    try {
      if ((e = undo(s)) != 0) note_error("cannot thaw " + leaf_or_pid(s), e);
    } catch (...) {
      e = ENOMEM;
    }
    return e == 0;
  }

 private:
  static constexpr const char* hint_text =
      "run as root, set KREX_CGROUP_ROOT to a writable delegated cgroup (systemd-run --user "
      "-p Delegate=yes), or choose KREX_FREEZE=signal";

  struct attempt {
    int err = 0;
    std::string root, what, path, hint;
  };

  bool m_own_dir = false;  // m_root is this segment's directory under a derived root

  freezer(freeze_method m, std::string root, std::string notes)
      : m_method(m), m_root(std::move(root)), m_notes(std::move(notes)) {}

  static attempt resolve(const freeze_table& t, const std::string& root_option,
                         const std::string& domain, const cgroup::self_view& view) {
    attempt a;
    a.hint = hint_text;
    const auto no = [&](int err, std::string what, std::string path) {
      a.err = err;
      a.what = std::move(what);
      a.path = std::move(path);
      return a;
    };
    if (view.err) return no(view.err, "cannot read", view.failed);
    const char* name = t.hierarchy;
    const cgroup::location here = view.locate(t.v2);
    if (!here.m)
      return no(ENOENT, std::string("no ") + name + " is mounted:", "/proc/self/mountinfo");
    if (here.own.empty())
      return no(ENOENT, std::string("this process's cgroup is not visible in the ") + name + " at",
                here.m->point);
    if (root_option.empty()) {
      a.root = cgroup::derive_root(here.own);
    } else {
      a.root = root_option;
      while (a.root.size() > 1 && a.root.back() == '/') a.root.pop_back();
      int err = 0;
      const long magic = cgroup::fs_magic(a.root, err);
      if (magic != t.magic ||
          (!t.v2 && a.root.compare(0, here.m->point.size() + 1, here.m->point + "/") != 0)) {
        a.hint = std::string("KREX_CGROUP_ROOT must lie in the ") + name + " (mounted at " +
                 here.m->point + "), or choose the KREX_FREEZE method that matches the root";
        return no(err ? err : EINVAL,
                  std::string("KREX_CGROUP_ROOT is not in the ") + name +
                      " that KREX_FREEZE=" + to_string(t.method) + " needs:",
                  a.root);
      }
    }
    if (const int e = cgroup::make_dir(a.root))
      return no(e, "cannot create the krex cgroup root (KREX_CGROUP_ROOT)", a.root);
    // Leaves can be made below the root, and they carry the control file.
    if (const int e = cgroup::probe_open(file(a.root, t.procs), O_WRONLY))
      return no(e, "cannot use the krex cgroup root (KREX_CGROUP_ROOT)", file(a.root, t.procs));
    if (const int e = cgroup::probe_open(file(a.root, t.control), O_RDONLY))
      return no(e, "cannot use the krex cgroup root (KREX_CGROUP_ROOT)", file(a.root, t.control));
    // Leaves are numbered by slot, and slots by segment: under the derived
    // default root, which every segment of the job shares, each segment gets
    // a directory of its own (an explicit root is the operator's, per segment).
    // enter() creates it with the first leaf; leave() removes it with the last,
    // so opening a freezer (krexctl status) leaves nothing behind.
    if (root_option.empty() && !domain.empty()) a.root += "/" + domain;
    // Moving back at leave needs write access to this process's cgroup.
    if (const int e = cgroup::probe_open(file(here.own, t.procs), O_WRONLY))
      return no(e, "cannot move processes out of this process's cgroup", file(here.own, t.procs));
    return a;
  }

  void enter_as(std::uint32_t slot) {
    const freeze_table& t = table();
    const std::string l = leaf(slot);
    int made = -1;
    // A segment directory can vanish between the two mkdirs when its last
    // tenant leaves (leave_as removes it): make it again and retry.
    for (int tries = 0; tries < 3 && made != 0; ++tries) {
      if (const int e = cgroup::make_dir(m_root))
        cgroup::fail("cannot create the krex cgroup root (KREX_CGROUP_ROOT)", m_root, e, hint_text);
      made = sys().mkdir(l.c_str(), 0755) == 0 ? 0 : errno;
      if (made != ENOENT) break;
    }
    if (made != 0) {
      errno = made;
      if (errno != EEXIST) cgroup::fail("cannot create the tenant leaf", l, errno, hint_text);
      bool busy = false;
      if (const int e = is_busy(t, l, busy))
        cgroup::fail("cannot inspect the stale leaf", l, e, hint_text);
      if (busy)
        cgroup::fail("the leaf of slot " + std::to_string(slot) + " still has live processes:", l,
                     EBUSY,
                     "another tenant holds this slot, or a crashed run left processes "
                     "there: kill them (krexctl clean) and join again");
      // Left by a crashed run: thaw it, so nothing that enters it stays frozen.
      if (const int e = request(t, l, false))
        cgroup::fail("cannot thaw the stale leaf", l, e, hint_text);
      if (sys().rmdir(l.c_str()) != 0 || sys().mkdir(l.c_str(), 0755) != 0)
        cgroup::fail("cannot recreate the stale leaf", l, errno,
                     "it may hold child cgroups: remove them (krexctl clean)");
    }
    share_with_group(l);
    const std::string origin = cgroup::self_view::read().locate(t.v2).own;
    int e = origin.empty() ? ENOENT : 0;
    if (!e) e = cgroup::write_file(file(l, t.procs), std::to_string(::getpid()));
    if (e) {
      sys().rmdir(l.c_str());
      cgroup::fail("cannot move this process into its leaf", file(l, t.procs), e, hint_text);
    }
    m_origin = origin;
    m_slot = slot;
    m_entered = true;
  }

  // Group mode (segment_access::group): a sibling of another user freezes,
  // thaws and removes this leaf, and creates its own next to it. The leaf,
  // the freeze file a holder or recoverer writes, and the segment's own
  // directory (if this process made it) go to the domain's group,
  // group-writable; mkdir's 0755 would lock every other user out.
  void share_with_group(const std::string& l) {
    const freeze_table& t = table();
    if (m_identity.access != segment_access::group || !m_identity.valid()) return;
    const auto g = static_cast<gid_t>(m_identity.id);
    const auto share = [&](const std::string& path, mode_t mode) {
      if (::chown(path.c_str(), static_cast<uid_t>(-1), g) == 0 && ::chmod(path.c_str(), mode) == 0)
        return;
      const int e = errno;
      sys().rmdir(l.c_str());
      cgroup::fail(
          "cannot give the segment's group (gid " + std::to_string(g) + ") write access to", path,
          e,
          "group mode (KREX_SEGMENT_ACCESS=group) with cgroup freezing makes every leaf "
          "writable by the segment's group: run every tenant with that group as its "
          "primary group and KREX_CGROUP_ROOT a directory that group may write, or use "
          "KREX_SEGMENT_ACCESS=user");
    };
    struct stat st {};
    if (m_own_dir && ::stat(m_root.c_str(), &st) == 0 && st.st_uid == ::geteuid() &&
        (st.st_gid != g || (st.st_mode & 0070) != 0070))
      share(m_root, 0775);
    share(l, 0775);
    share(file(l, t.control), 0664);
  }

  void leave_as(std::uint32_t slot) noexcept {
    const freeze_table& t = table();
    try {
      const std::string l = leaf(slot);
      if (m_entered && m_slot == slot) {
        if (const int e = cgroup::write_file(file(m_origin, t.procs), std::to_string(::getpid())))
          note_error("cannot move this process back to " + m_origin, e);
        m_entered = false;
      }
      if (const int e = request(t, l, false); e && e != ENOENT) note_error("cannot thaw " + l, e);
      if (sys().rmdir(l.c_str()) != 0 && errno != ENOENT)
        note_error("cannot remove " + l + " (children still in it?)", errno);
      // The segment's own directory goes with its last leaf (EBUSY otherwise).
      if (m_own_dir) sys().rmdir(m_root.c_str());
    } catch (...) {
      // Only allocation can throw here; there is nothing left to record it with.
    }
  }

  // --- one sibling, by method: start its freeze, see it done, undo it ------
  // Cgroup methods (none: the empty table) write and read the table's files;
  // signal stops, watches and continues through freeze_signal.hpp.

  /// Starts freezing `s`. Signal: a sibling that fails verification is not
  /// signalled but recorded in m_refused, one already stopped by someone
  /// else in m_found_stopped; one that is gone counts as frozen.
  int start(const target& s) {
    if (m_method != freeze_method::signal) return request(table(), leaf(s.slot), true);
    freeze_signal::stop_record r;
    r.slot = s.slot;
    r.pid = s.pid;
    r.start_time = s.start_time;
    r.shared = m_node != nullptr && s.slot < max_tenants ? &m_node->tenants[s.slot] : nullptr;
    identity_verdict v = identity_ok;
    const int e = freeze_signal::stop(m_identity, m_cache, r, v);
    if (v != identity_ok)
      m_refused.push_back(refusal{s, v});
    else if (r.already_stopped)
      m_found_stopped.push_back(s);
    else if (e != ESRCH)
      m_stopped.push_back(std::move(r));  // on error: what of it did stop
    return v != identity_ok || e == ESRCH ? 0 : e;
  }

  /// `ok`: the freeze of `s` has completed: its leaf's status has the frozen
  /// line (the empty table: at once). Signal: only what freeze() really
  /// stopped, by the target it signalled (nothing stopped: nothing to wait for).
  int is_frozen(const target& s, bool& ok) const {
    ok = true;
    if (m_method != freeze_method::signal) {
      std::string text;
      if (!table().cgroup()) return 0;
      if (const int e = cgroup::read_file(file(leaf(s.slot), table().status), text)) return e;
      ok = has_line(text, table().frozen_line);
      return 0;
    }
    for (const freeze_signal::stop_record& r : m_stopped)
      if (r.slot == s.slot && r.pid == s.pid && r.sent)
        return freeze_signal::is_stopped(r.target(), ok);
    return 0;
  }

  /// Thaws `s`; a leaf that is gone counts as thawed. Signal: continues what
  /// freeze() stopped for it, and forgets it.
  int undo(const target& s) {
    int e = 0;
    if (m_method != freeze_method::signal)
      return (e = request(table(), leaf(s.slot), false)) == ENOENT ? 0 : e;
    for (auto it = m_stopped.begin(); it != m_stopped.end();) {
      if (it->slot != s.slot || it->pid != s.pid) {
        ++it;
        continue;
      }
      if (const int r = freeze_signal::resume(*it)) e = r;
      it = m_stopped.erase(it);
    }
    return e;
  }

  // --- the cgroup freezer: every operation is the table's file and value ---
  static std::string file(const std::string& dir, const char* name) { return dir + "/" + name; }
  static bool has_line(const std::string& text, const char* line) {
    const std::vector<std::string> lines = cgroup::split(text, '\n');
    return std::find(lines.begin(), lines.end(), line) != lines.end();
  }
  /// Asks the kernel to freeze (or thaw) every task below `leaf`; nothing
  /// for the empty table. Returns 0 or an errno value.
  static int request(const freeze_table& t, const std::string& dir, bool frozen) {
    if (!t.cgroup()) return 0;
    return cgroup::write_file(file(dir, t.control), frozen ? t.freeze_value : t.thaw_value);
  }
  /// `busy`: some live process is in `leaf` (v2: or below it; v1 has no
  /// "populated" flag, and a child cgroup makes the leaf's rmdir fail instead).
  static int is_busy(const freeze_table& t, const std::string& dir, bool& busy) {
    std::string text;
    if (const int e = cgroup::read_file(file(dir, t.busy_file), text)) return e;
    busy = t.busy_line != nullptr ? has_line(text, t.busy_line)
                                  : text.find_first_of("0123456789") != std::string::npos;
    return 0;
  }
  std::string leaf_or_pid(const target& s) const {
    if (m_method == freeze_method::signal) return "pid " + std::to_string(s.pid);
    return leaf(s.slot);
  }
  std::string status_path(const target& s) const {
    if (m_method == freeze_method::signal) return "/proc/" + std::to_string(s.pid) + "/stat";
    return file(leaf(s.slot), table().status);
  }
  void note_error(const std::string& what, int err) {
    m_last_error = what + ": " + std::system_category().message(err);
  }

  freeze_method m_method;
  identity_domain m_identity;           // who may be signalled
  node_state* m_node = nullptr;         // where stops are recorded for recoverers
  freeze_signal::member_cache m_cache;  // verified (pid, start time)s
  std::vector<freeze_signal::stop_record> m_stopped;  // what freeze() stopped, until thawed
  std::vector<refusal> m_refused;
  std::vector<target> m_found_stopped;  // stopped by someone else: never continued
  std::string m_root;
  std::string m_notes;
  std::string m_last_error;
  std::string m_origin;  // filesystem path of the cgroup this process left at enter
  std::uint32_t m_slot = 0;
  bool m_entered = false;
};

/// A sibling the freeze step may freeze (it acked the drain), and whether it
/// touches the device: its drain had work to sync, or it was inside a gated
/// call when the gate rose.
struct freeze_candidate {
  freezer::target who;
  bool touches_device = false;
};

/// What the freeze step did.
struct freeze_result {
  std::vector<freezer::target> frozen;  ///< frozen now: the region thaws them at exit
  std::vector<std::int32_t> unverified;  ///< refused (signal method, failed identity): running
  /// Found stopped by someone else (signal method): left stopped, not frozen by krex.
  std::vector<freezer::target> found_stopped;
  std::uint32_t idle = 0;  ///< left running by scope `device` (they do not touch the device)
  std::uint32_t gone = 0;  ///< died between their drain and the freeze
};

/// Step 3, holder side: freezes the candidates that m's scope selects, with
/// m's freeze deadline. A sibling that dies meanwhile is dropped and the rest
/// frozen again (at most three attempts); any other failure throws
/// krex::error(step::freeze) with nothing left frozen. `gone(target)` says
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
  r.found_stopped.reserve(cands.size());
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
      fz.freeze(r.frozen, std::chrono::steady_clock::now() + m.opts.freeze_deadline());
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
    fz.thaw(r.frozen);
    throw;
  }
  // Signal freezing signals only verified tenants: the others were not
  // stopped, and are reported, not counted as frozen.
  for (const auto& ref : fz.refused()) {
    r.unverified.push_back(ref.who.pid);
    r.frozen.erase(std::remove_if(r.frozen.begin(), r.frozen.end(),
                                  [&](const freezer::target& f) {
                                    return f.slot == ref.who.slot && f.pid == ref.who.pid;
                                  }),
                   r.frozen.end());
  }
  // Nor are those someone else had stopped: the exit must not continue them.
  for (const freezer::target& s : fz.found_stopped()) {
    r.found_stopped.push_back(s);
    r.frozen.erase(std::remove_if(r.frozen.begin(), r.frozen.end(),
                                  [&](const freezer::target& f) {
                                    return f.slot == s.slot && f.pid == s.pid;
                                  }),
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

/// Step 3's exit, holder side: checks that every sibling in `frozen` is still
/// frozen, then thaws them one by one, each only while `ours()` says the
/// region's lease is still ours (once it is not, a recoverer has thawed them
/// and a new holder may have frozen them again: nothing more is touched), and
/// clears each thawed slot's frozen flag. `frozen` is emptied.
template <class LeaseCheck>
thaw_result thaw_siblings(member& m, freezer& fz, std::vector<freezer::target>& frozen,
                          LeaseCheck&& ours) noexcept {
  thaw_result r;
  // Something thawed a sibling during the body (a late thaw, a SIGCONT, an
  // operator): the body was not protected throughout.
  for (const freezer::target& f : frozen)
    if (!fz.still_frozen(f)) r.freeze_broken = true;
  for (const freezer::target& f : frozen) {
    if (!ours()) {
      r.lease_lost = true;
      break;
    }
    if (!fz.thaw_one(f)) r.thaw_failed = true;
    m.slot_at(f.slot).frozen.store(0);
  }
  frozen.clear();
  return r;
}

}  // namespace krex::detail
