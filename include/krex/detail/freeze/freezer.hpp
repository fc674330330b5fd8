// SPDX-License-Identifier: Apache-2.0
#pragma once

// The freezer: how a tenant's process tree is frozen and thawed, whatever the
// method. The tenant opens it at join (its own leaf cgroup); the freeze step
// (detail/steps/freeze.hpp) drives it on the siblings; krexctl and recovery
// open one too. Every method is one table of operations (freezer::ops: start
// a sibling's freeze, see it done, undo it, where it lives, and the tenant's
// own enter and leave): cgroup v2, cgroup v1 and none share the cgroup
// operations, driven by their entries in detail/as_safe.hpp (the files
// and values the kernel uses; none is the empty entry); signal has its own,
// over detail/freeze/freeze_signal.hpp. Each tenant lives in its own leaf
// `<root>/t<slot>`; the region holder builds its siblings' leaves from its own
// root and their slot numbers and never opens any other path.
// The freezer keeps only what lasts as long as the tenant; what one freeze did
// is the freezer::record that freeze() returns, which the freeze step keeps
// and hands back to thaw.

#include <krex/detail/as_safe.hpp>
#include <krex/detail/freeze/cgroup.hpp>
#include <krex/detail/freeze/freeze_signal.hpp>
#include <krex/detail/identity.hpp>
#include <krex/detail/layout.hpp>
#include <krex/detail/slots/sibling.hpp>
#include <krex/error.hpp>
#include <krex/options.hpp>

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace krex::detail {

class freezer {
 public:
  /// A sibling the signal method refused to signal, and why. (A sibling to
  /// freeze is its slot, and, signal method, the pid and start time its slot
  /// recorded at join, which are verified before any signal.)
  struct refusal {
    sibling who;
    identity_verdict why;
  };

  /// What one freeze() did (signal method), kept by its caller for thaw.
  struct record {
    std::vector<refusal> refused;        ///< not signalled: not verified as the tenant that joined
    std::vector<sibling> found_stopped;  ///< stopped by someone else: never continued
    std::vector<freeze_signal::stop_record> stopped;  ///< what it stopped, until thawed
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
  KREX_DETAIL_COLD static freezer open(freeze_method requested, const std::string& root_option,
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
      notes += cat({to_string(m), ": ", a.what, " ", a.path,
                    a.err > 0 ? cat({": ", std::system_category().message(a.err)}) : std::string(),
                    "; "});
    }
    // An operator who names a root wants cgroup freezing there: falling back
    // to signals would silently weaken every region of the job.
    if (!root_option.empty())
      cgroup::fail(cat({"KREX_CGROUP_ROOT is set but no cgroup freezer can use it (", notes,
                        ") root:"}),
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
  std::string leaf(std::uint32_t slot) const { return cat({m_root, "/t", slot}); }

  /// Who may be signalled (signal method): only processes verified as
  /// members of this domain (see detail/identity.hpp); without a domain,
  /// nobody. `node`: where stops are recorded for recoverers (may be null).
  /// Cgroup methods in group mode share each leaf with the domain's group.
  void bind(const identity_domain& d, node_state* node = nullptr) noexcept {
    m_identity = d;
    m_node = node;
    m_cache.clear();
  }

  /// Tenant side, at join: creates leaf t<slot> and moves this process (all
  /// its threads; children forked later follow) into it, remembering where it
  /// was. A stale leaf without live processes is thawed and recreated; one
  /// with live processes makes this throw. No-op for signal and none.
  void enter(std::uint32_t slot) { m_ops->enter(*this, slot); }

  /// Tenant side, at leave: moves this process back, thaws and removes the
  /// leaf. Best effort; a failure is kept in last_error(). Children still in
  /// the leaf keep it from being removed.
  void leave(std::uint32_t slot) noexcept { m_ops->leave(*this, slot); }

  /// Holder side: starts freezing every sibling, then waits for all of them
  /// to report frozen by `deadline`; returns what it did, for thaw(). On a
  /// failed write or a missed deadline it thaws everything it froze and
  /// throws krex::error(step::freeze).
  [[nodiscard]] record freeze(const std::vector<sibling>& siblings,
                              std::chrono::steady_clock::time_point deadline) {
    record r;
    if (!m_ops->freezes) return r;  // none: nothing to freeze
    std::vector<sibling> started;
    const auto give_up = [&](std::string_view what, std::string_view path, int err,
                             std::string_view hint) {
      thaw(r, started);
      cgroup::fail(what, path, err, hint);
    };
    for (const sibling& s : siblings) {
      if (s.pid == ::getpid() || (m_entered && s.slot == m_slot))
        give_up("refusing to freeze the caller's own slot", leaf_or_pid(s), EDEADLK,
                "the region holder must not be in its sibling list");
      const int e = start(r, s);
      started.push_back(s);  // a failed write or signal may still have taken effect
      if (e)
        give_up(cat({"cannot freeze sibling slot ", s.slot, " at"}), leaf_or_pid(s), e,
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
        if (const int e = is_frozen(r, siblings[i], ok))
          give_up("cannot read the freeze state of", status_path(siblings[i]), e, hint_text);
        done[i] = ok;
        all = all && ok;
      }
      if (all) return r;
      if (std::chrono::steady_clock::now() >= deadline) {
        std::string late;
        for (size_t i = 0; i < siblings.size(); ++i)
          if (!done[i]) late += cat({late.empty() ? "" : ", ", status_path(siblings[i])});
        give_up("siblings not frozen by the deadline (thawed again):", late, ETIMEDOUT,
                "a task in uninterruptible sleep (a driver call, I/O) cannot freeze; drain must "
                "finish first, or raise KREX_FREEZE_DEADLINE_MS");
      }
      wait.pause();
    }
  }

  /// Cgroup methods: true when sibling `s`'s leaf does not exist under this
  /// root. A tenant becomes slot_active only once it is in its leaf, and a
  /// leaf with a process in it cannot be removed, so such a slot names no
  /// tenant of this freeze domain: a slot written into the segment by hand
  /// (issue 38). False for the other methods, or when it cannot be told.
  bool leaf_missing(const sibling& s) const noexcept {
    if (m_method != freeze_method::cgroup_v2 && m_method != freeze_method::cgroup_v1) return false;
    try {
      struct stat st {};
      return ::stat(leaf(s.slot).c_str(), &st) != 0 && errno == ENOENT;
    } catch (...) {
      return false;
    }
  }

  /// False when sibling `s` (frozen by the freeze that returned `r`) is known to
  /// run again: its leaf no longer frozen, or (signal) its process not stopped.
  /// A sibling that is gone, or whose state cannot be read, does not count as thawed.
  bool still_frozen(const record& r, const sibling& s) const noexcept {
    bool ok = true;
    try {
      // Cgroup freezing freezes the leaf, not the process: a sibling moved
      // out of its leaf during the body ran there, unfrozen.
      if (table().cgroup() && left_its_leaf(s)) return false;
      return is_frozen(r, s, ok) != 0 || ok;
    } catch (...) {
      return true;
    }
  }

  /// Cgroup methods: the sibling's process runs, but not in its leaf any more
  /// (its leaf's process list is readable and lacks it).
  bool left_its_leaf(const sibling& s) const {
    std::string text;
    if (cgroup::read_file(file(leaf(s.slot), table().procs), text) != 0) return false;
    if (has_line(text, cat({s.pid}).c_str())) return false;
    return ::kill(s.pid, 0) == 0;  // gone is not escaped
  }

  /// Thaws these siblings: tries every one, returns false if any thaw failed
  /// (the failure is kept in last_error()). A sibling whose leaf or process is
  /// already gone counts as thawed. Signal method: continues exactly what the
  /// freeze that returned `r` stopped for them (the same processes, through
  /// the same pidfds), and nothing it did not stop.
  bool thaw(record& r, const std::vector<sibling>& siblings) noexcept {
    bool ok = true;
    for (const sibling& s : siblings) ok = thaw_one(r, s) && ok;
    return ok;
  }

  /// thaw() of one sibling.
  bool thaw_one(record& r, const sibling& s) noexcept {
    int e = 0;
    try {
      if ((e = undo(r, s)) != 0) note_error(cat({"cannot thaw ", leaf_or_pid(s)}), e);
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
      : m_method(m), m_ops(&ops_of(m)), m_root(std::move(root)), m_notes(std::move(notes)) {}

  KREX_DETAIL_COLD static attempt resolve(const freeze_table& t, const std::string& root_option,
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
      return no(ENOENT, cat({"no ", name, " is mounted:"}), "/proc/self/mountinfo");
    if (here.own.empty())
      return no(ENOENT, cat({"this process's cgroup is not visible in the ", name, " at"}),
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
        a.hint = cat({"KREX_CGROUP_ROOT must lie in the ", name, " (mounted at ", here.m->point,
                      "), or choose the KREX_FREEZE method that matches the root"});
        return no(err ? err : EINVAL,
                  cat({"KREX_CGROUP_ROOT is not in the ", name, " that KREX_FREEZE=",
                       to_string(t.method), " needs:"}),
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
    if (root_option.empty() && !domain.empty()) a.root += cat({"/", domain});
    // Moving back at leave needs write access to this process's cgroup.
    if (const int e = cgroup::probe_open(file(here.own, t.procs), O_WRONLY))
      return no(e, "cannot move processes out of this process's cgroup", file(here.own, t.procs));
    return a;
  }

  KREX_DETAIL_COLD void enter_as(std::uint32_t slot) {
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
      if (busy) {
        // This process claimed the slot. What runs there and, readably,
        // does not map the segment is no tenant: a child a tenant exec'd
        // inside a region that outlived it. Those are moved to this
        // process's own cgroup (the job's), off the reserved cores, instead
        // of failing every join; a process that maps the segment (or cannot
        // be read) stays, and the join fails as before.
        const std::string here = cgroup::self_view::read().locate(t.v2).own;
        const int moved =
            here.empty() || !m_identity.valid() ? 0 : evacuate(t, l, here, &m_identity);
        if (moved < 0)
          cgroup::fail(cat({"the leaf of slot ", slot,
                            " still has live processes, and they cannot be moved out:"}),
                       l, -moved,
                       "a crashed run left processes there: kill them (krexctl clean) and "
                       "join again");
        if (const int e = is_busy(t, l, busy))
          cgroup::fail("cannot inspect the stale leaf", l, e, hint_text);
        if (busy)
          cgroup::fail(cat({"the leaf of slot ", slot, " still has live processes:"}),
                       l, EBUSY,
                       "another tenant holds this slot, or a crashed run left processes "
                       "there: kill them (krexctl clean) and join again");
      }
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
    if (!e) e = cgroup::write_file(file(l, t.procs), cat({::getpid()}));
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
          cat({"cannot give the segment's group (gid ", g, ") write access to"}), path,
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

  KREX_DETAIL_COLD void leave_as(std::uint32_t slot) noexcept {
    const freeze_table& t = table();
    try {
      const std::string l = leaf(slot);
      if (m_entered && m_slot == slot) {
        if (const int e = cgroup::write_file(file(m_origin, t.procs), cat({::getpid()})))
          note_error(cat({"cannot move this process back to ", m_origin}), e);
        m_entered = false;
        // Processes this tenant started that outlive it (a child exec'd
        // inside a region) follow it back, off the reserved cores: a leaf
        // left busy would fail every later join of this slot.
        const int moved = evacuate(t, l, m_origin);
        if (moved < 0) note_error(cat({"cannot move this tenant's children out of ", l}), -moved);
      }
      if (const int e = request(t, l, false); e && e != ENOENT) note_error(cat({"cannot thaw ", l}), e);
      if (sys().rmdir(l.c_str()) != 0 && errno != ENOENT)
        note_error(cat({"cannot remove ", l, " (children still in it?)"}), errno);
      // The segment's own directory goes with its last leaf (EBUSY otherwise).
      if (m_own_dir) sys().rmdir(m_root.c_str());
    } catch (...) {
      // Only allocation can throw here; there is nothing left to record it with.
    }
  }

  // --- the methods: one table of operations each ------------------------
  /// What a method does to one sibling (start its freeze, see it done, undo
  /// it; where it lives and what is read, for messages) and to the tenant
  /// itself at join and leave. Errors are errno values (0: done).
  struct ops {
    bool freezes;  ///< false for none: freeze() does nothing at all
    int (*start)(freezer& f, record& r, const sibling& s);
    int (*is_frozen)(const freezer& f, const record& r, const sibling& s, bool& ok);
    int (*undo)(freezer& f, record& r, const sibling& s);
    std::string (*where)(const freezer& f, const sibling& s);
    std::string (*status)(const freezer& f, const sibling& s);
    void (*enter)(freezer& f, std::uint32_t slot);
    void (*leave)(freezer& f, std::uint32_t slot) noexcept;
  };

  // Cgroup methods (v2, v1; none is the empty table, which writes nothing):
  // every operation is the table's file and value on the sibling's leaf.
  static int cgroup_start(freezer& f, record&, const sibling& s) {
    return request(f.table(), f.leaf(s.slot), true);
  }
  /// `ok`: the leaf's status has the frozen line (the empty table: at once).
  static int cgroup_is_frozen(const freezer& f, const record&, const sibling& s, bool& ok) {
    ok = true;
    if (!f.table().cgroup()) return 0;
    std::string text;
    if (const int e = cgroup::read_file(file(f.leaf(s.slot), f.table().status), text)) return e;
    ok = has_line(text, f.table().frozen_line);
    return 0;
  }
  /// A leaf that is gone counts as thawed.
  static int cgroup_undo(freezer& f, record&, const sibling& s) {
    const int e = request(f.table(), f.leaf(s.slot), false);
    return e == ENOENT ? 0 : e;
  }
  static std::string cgroup_where(const freezer& f, const sibling& s) { return f.leaf(s.slot); }
  static std::string cgroup_status(const freezer& f, const sibling& s) {
    return file(f.leaf(s.slot), f.table().status);
  }
  static void cgroup_enter(freezer& f, std::uint32_t slot) {
    if (f.table().cgroup()) f.enter_as(slot);
  }
  static void cgroup_leave(freezer& f, std::uint32_t slot) noexcept {
    if (f.table().cgroup()) f.leave_as(slot);
  }

  // Signal: stops, watches and continues through freeze_signal.hpp. A
  // sibling that fails verification is not signalled but recorded in the
  // record's `refused`, one already stopped by someone else in its
  // `found_stopped`; one that is gone counts as frozen.
  static int signal_start(freezer& f, record& r, const sibling& s) {
    freeze_signal::stop_record st;
    st.who = s;
    st.shared = f.m_node != nullptr && s.slot < max_tenants ? &f.m_node->tenants[s.slot] : nullptr;
    identity_verdict v = identity_ok;
    const int e = freeze_signal::stop(f.m_identity, f.m_cache, st, v);
    if (v != identity_ok)
      r.refused.push_back(refusal{s, v});
    else if (st.already_stopped)
      r.found_stopped.push_back(s);
    else if (e != ESRCH)
      r.stopped.push_back(std::move(st));  // on error: what of it did stop
    return v != identity_ok || e == ESRCH ? 0 : e;
  }
  /// Only what freeze() really stopped, by the target it signalled (nothing
  /// stopped: nothing to wait for).
  static int signal_is_frozen(const freezer&, const record& r, const sibling& s, bool& ok) {
    ok = true;
    for (const freeze_signal::stop_record& st : r.stopped)
      if (st.who.same(s) && st.sent) return freeze_signal::is_stopped(st.target(), ok);
    return 0;
  }
  /// Continues what freeze() stopped for `s`, and forgets it.
  static int signal_undo(freezer&, record& r, const sibling& s) {
    int e = 0;
    for (auto it = r.stopped.begin(); it != r.stopped.end();) {
      if (!it->who.same(s)) {
        ++it;
        continue;
      }
      if (const int err = freeze_signal::resume(*it)) e = err;
      it = r.stopped.erase(it);
    }
    return e;
  }
  static std::string signal_where(const freezer&, const sibling& s) {
    return cat({"pid ", s.pid});
  }
  static std::string signal_status(const freezer&, const sibling& s) {
    return cat({"/proc/", s.pid, "/stat"});
  }
  static void no_enter(freezer&, std::uint32_t) {}
  static void no_leave(freezer&, std::uint32_t) noexcept {}

  /// The operations of method `m` (automatic never reaches a freezer).
  static const ops& ops_of(freeze_method m) noexcept {
    static constexpr ops cgroup_ops{true,          &cgroup_start, &cgroup_is_frozen,
                                    &cgroup_undo,  &cgroup_where, &cgroup_status,
                                    &cgroup_enter, &cgroup_leave};
    static constexpr ops none_ops{false,         &cgroup_start,  &cgroup_is_frozen, &cgroup_undo,
                                  &cgroup_where, &cgroup_status, &cgroup_enter,     &cgroup_leave};
    static constexpr ops signal_ops{true,          &signal_start,  &signal_is_frozen, &signal_undo,
                                    &signal_where, &signal_status, &no_enter,         &no_leave};
    return m == freeze_method::signal ? signal_ops
           : m == freeze_method::none ? none_ops
                                      : cgroup_ops;
  }

  int start(record& r, const sibling& s) { return m_ops->start(*this, r, s); }
  int is_frozen(const record& r, const sibling& s, bool& ok) const {
    return m_ops->is_frozen(*this, r, s, ok);
  }
  int undo(record& r, const sibling& s) { return m_ops->undo(*this, r, s); }
  std::string leaf_or_pid(const sibling& s) const { return m_ops->where(*this, s); }
  std::string status_path(const sibling& s) const { return m_ops->status(*this, s); }

  // --- the cgroup freezer: every operation is the table's file and value ---
  static std::string file(const std::string& dir, const char* name) { return cat({dir, "/", name}); }
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
  /// Moves every process left in leaf `l` to cgroup `to` and gives each of
  /// its threads this thread's CPU mask (off the reserved cores: a child
  /// forked by a pinned measuring thread inherited them). Returns how many
  /// processes it moved, or -errno when one could not be moved.
  KREX_DETAIL_COLD static int evacuate(const freeze_table& t, const std::string& l, const std::string& to,
                      const identity_domain* unmapped_only = nullptr) {
    std::string text;
    if (const int e = cgroup::read_file(file(l, t.procs), text)) return e == ENOENT ? 0 : -e;
    cpu_set_t mask;
    CPU_ZERO(&mask);
    const bool have_mask = ::sched_getaffinity(0, sizeof mask, &mask) == 0;
    int moved = 0;
    for (const std::string& pid : cgroup::split(text, '\n')) {
      if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
      if (unmapped_only != nullptr) {
        bool mapped = true;
        if (as_safe::maps_file(std::atoll(pid.c_str()), unmapped_only->shm_dev,
                               unmapped_only->shm_ino, mapped) != 0 ||
            mapped)
          continue;  // a tenant (or unreadable): not ours to move
      }
      if (const int e = cgroup::write_file(file(to, t.procs), pid)) {
        if (e == ESRCH) continue;  // it ended meanwhile
        return -e;
      }
      ++moved;
      if (!have_mask) continue;
      // Every thread of it (a task list read fails only if it ended).
      if (DIR* d = ::opendir(cat({"/proc/", pid, "/task"}).c_str())) {
        while (const dirent* e = ::readdir(d))  // NOLINT(concurrency-mt-unsafe): one reader
          if (e->d_name[0] >= '0' && e->d_name[0] <= '9')
            ::sched_setaffinity(static_cast<pid_t>(std::atoi(e->d_name)), sizeof mask, &mask);
        ::closedir(d);
      }
    }
    return moved;
  }

  static int is_busy(const freeze_table& t, const std::string& dir, bool& busy) {
    std::string text;
    if (const int e = cgroup::read_file(file(dir, t.busy_file), text)) return e;
    busy = t.busy_line != nullptr ? has_line(text, t.busy_line)
                                  : text.find_first_of("0123456789") != std::string::npos;
    return 0;
  }
  KREX_DETAIL_COLD void note_error(const std::string& what, int err) {
    m_last_error = cat({what, ": ", std::system_category().message(err)});
  }

  freeze_method m_method;
  const ops* m_ops;
  identity_domain m_identity;           // who may be signalled
  node_state* m_node = nullptr;         // where stops are recorded for recoverers
  freeze_signal::member_cache m_cache;  // verified (pid, start time)s
  std::string m_root;
  std::string m_notes;
  std::string m_last_error;
  std::string m_origin;  // filesystem path of the cgroup this process left at enter
  std::uint32_t m_slot = 0;
  bool m_entered = false;
};

}  // namespace krex::detail
