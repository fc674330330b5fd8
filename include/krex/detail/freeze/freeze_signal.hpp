// SPDX-License-Identifier: Apache-2.0
#pragma once

// The fallback where no cgroup is writable: SIGSTOP / SIGCONT. It stops a
// sibling's process group when the sibling leads its own group (and that
// group is not the caller's), otherwise the sibling process alone; children
// that left the group, and processes that catch up with SIGCONT from
// elsewhere, escape it. That is why it ranks below both cgroup freezers.
//
// A pid comes from the shared segment, which other processes can write: it
// is signalled only once verified as the tenant that joined (identity.hpp),
// through a pidfd taken before the verification, so that a pid reused in
// between is never touched. A group is only ever the one the verified tenant
// leads: never the caller's, never <= 1. The thaw continues exactly what the
// freeze stopped, through the same pidfd.
//
// A sibling that is already stopped when the freeze comes (state T or t: an
// operator's SIGSTOP, a debugger, a harness) was stopped by someone else, and
// only they may continue it: it is neither signalled nor continued, only
// reported (region_report::stopped_pids). The check and the SIGSTOP are two
// steps: a stop that lands between them, or during the body, is continued at
// thaw, as signals cannot tell whose stop a process is in.

#include <krex/detail/freeze/cgroup.hpp>
#include <krex/detail/identity.hpp>
#include <krex/detail/layout.hpp>
#include <krex/detail/slots/sibling.hpp>
#include <krex/detail/sys.hpp>
#include <krex/options.hpp>

#include <dirent.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace krex::detail::freeze_signal {

/// What a freeze stopped for one sibling, kept until its thaw.
struct stop_record {
  sibling who;         ///< the sibling, as its slot recorded it at join
  unique_fd pidfd;     ///< the verified process (-1 only where the kernel has no pidfds)
  bool group = false;  ///< the group it leads is to be stopped too
  bool sent = false;   ///< a SIGSTOP went out: there is something to continue
  /// Found stopped by someone else (state T or t) before any signal: left as
  /// it was, never continued by krex.
  bool already_stopped = false;
  /// Where the stop is recorded in the segment for recoverers (may be null).
  tenant_slot* shared = nullptr;
  /// The signal target: -pid for its group, else pid.
  pid_t target() const noexcept { return group ? -who.pid : who.pid; }
};

/// Verdicts already reached, by pid and start time, so that a region does
/// not read every sibling's maps again. Only positive verdicts are kept: the
/// start time (re-read at every use) tells a reused pid.
class member_cache {
 public:
  identity_verdict check(const identity_domain& d, pid_t pid, std::uint64_t start_time,
                         std::uint32_t slot) {
    if (pid <= 1) return identity_bad_pid;
    for (const entry& e : m_ok)
      if (e.pid == pid && e.start_time == start_time && e.slot == slot && start_time != 0) {
        const proc_stat st = read_proc_stat(pid);
        if (!st.exists || st.state == 'Z' || st.state == 'X') return identity_gone;
        return st.start_time == start_time ? identity_ok : identity_start_time;
      }
    const identity_verdict v = as_safe::verify_member(d, pid, start_time, slot);
    if (v == identity_ok) {
      if (m_ok.size() >= 2 * std::size_t{max_tenants}) m_ok.erase(m_ok.begin());
      m_ok.push_back(entry{pid, start_time, slot});
    }
    return v;
  }
  void clear() noexcept { m_ok.clear(); }

 private:
  struct entry {
    pid_t pid;
    std::uint64_t start_time;
    std::uint32_t slot;
  };
  std::vector<entry> m_ok;
};

/// The process group `pid` leads, if it may be signalled as a whole: led by
/// `pid` itself (pgid == pid), not the caller's group, and > 1. Else 0.
inline pid_t led_group(pid_t pid) noexcept {
  if (pid <= 1) return 0;
  const pid_t group = ::getpgid(pid);
  return group == pid && group != ::getpgrp() ? group : 0;
}

/// Stops `r.who.pid` (and the group it leads) after verifying it against `d`:
/// pidfd first, then the checks, then SIGSTOP through the pidfd. The stop is
/// recorded in `r.shared` (if set) before it is sent. `verdict` says whether
/// it was verified; if not, nothing was signalled and 0 is returned. A
/// verified process that is already stopped is not signalled either:
/// `r.already_stopped` is set and 0 returned. Returns 0, ESRCH (gone:
/// nothing stopped) or an errno value.
inline int stop(const identity_domain& d, member_cache& cache, stop_record& r,
                identity_verdict& verdict) {
  verdict = r.who.pid <= 1 ? identity_bad_pid : identity_ok;
  if (verdict != identity_ok) return 0;
  const int fd = sys().pidfd_open(r.who.pid);
  if (fd < 0 && errno == ESRCH) return ESRCH;
  if (fd < 0 && errno != ENOSYS) return errno;
  r.pidfd = unique_fd(fd);
  verdict = cache.check(d, r.who.pid, r.who.start_time, r.who.slot);
  if (verdict == identity_gone) return ESRCH;
  if (verdict != identity_ok) return 0;
  // Someone else's stop: ours would add nothing, and the SIGCONT at thaw
  // would continue what they meant to keep stopped.
  const proc_stat st = read_proc_stat(r.who.pid);
  if (!st.exists || st.state == 'Z' || st.state == 'X' || st.start_time != r.who.start_time)
    return ESRCH;
  if (st.state == 'T' || st.state == 't') {
    r.already_stopped = true;
    return 0;
  }
  r.group = led_group(r.who.pid) != 0;
  if (r.shared != nullptr) {
    r.shared->stop_start_time.store(r.who.start_time);
    r.shared->stop_target.store(r.target());
  }
  // Without pidfds (kernel < 5.3) the pid is signalled right after the
  // checks; with them, only the verified process can be reached.
  r.sent = true;  // a failed send may still have reached it: thaw it either way
  const int rc = fd >= 0 ? sys().pidfd_send_signal(fd, SIGSTOP) : sys().kill(r.who.pid, SIGSTOP);
  if (rc != 0) return errno;
  // The leader is alive (the pidfd reaches it), so its pid, and with it the
  // group id, cannot have been reused.
  if (r.group && led_group(r.who.pid) == r.who.pid &&
      (fd < 0 || sys().pidfd_send_signal(fd, 0) == 0) && sys().kill(-r.who.pid, SIGSTOP) != 0 &&
      errno != ESRCH)
    return errno;
  return 0;
}

/// Continues what `r` stopped: the process through its pidfd; the group it
/// leads only while the leader still lives (else its group id may be
/// anybody's). Clears the segment's record. Returns 0 or an errno value; a
/// process that is gone counts as continued.
inline int resume(stop_record& r) {
  if (!r.sent) return 0;
  int e = 0;
  const int fd = r.pidfd.get();
  const int rc = fd >= 0 ? sys().pidfd_send_signal(fd, SIGCONT)
                         : (as_safe::verify_member_start(r.who.pid, r.who.start_time)
                                ? sys().kill(r.who.pid, SIGCONT)
                                : (errno = ESRCH, -1));
  if (rc != 0) e = errno;
  if (rc == 0 && r.group && led_group(r.who.pid) == r.who.pid && sys().kill(-r.who.pid, SIGCONT) != 0)
    e = errno;
  if (e == ESRCH) e = 0;
  if (e == 0 && r.shared != nullptr) {
    std::int32_t t = r.target();
    r.shared->stop_target.compare_exchange_strong(t, 0);
  }
  return e;
}

/// State letter and process group of /proc/<pid>/stat; 0 if the process is gone.
/// Returns 0 or an errno value other than ENOENT/ESRCH.
inline int stat_of(pid_t pid, char& state, pid_t& group) {
  state = 0;
  std::string text;
  const int e = cgroup::read_file(cat({"/proc/", pid, "/stat"}), text);
  if (e == ENOENT || e == ESRCH) return 0;
  if (e) return e;
  // "pid (comm) S ppid pgrp ...": comm may itself hold ") ".
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return EPROTO;
  state = text[close + 2];
  const char* p = text.c_str() + close + 3;
  char* end = nullptr;
  std::strtol(p, &end, 10);  // ppid
  group = static_cast<pid_t>(std::strtol(end, nullptr, 10));
  return 0;
}

// Stopped ('T'), traced-stopped ('t'), or no longer running at all.
inline bool is_halted(char state) {
  return state == 0 || state == 'T' || state == 't' || state == 'Z' || state == 'X';
}

/// `stopped`: `target` (a pid, or -pgid for every process of that group) no
/// longer runs. Returns 0 or an errno value.
inline int is_stopped(pid_t target, bool& stopped) {
  char state;
  pid_t group;
  if (target > 0) {
    const int e = stat_of(target, state, group);
    stopped = is_halted(state);
    return e;
  }
  DIR* proc = ::opendir("/proc");
  if (!proc) return errno;
  stopped = true;
  int err = 0;
  // readdir is only unsafe on a DIR shared between threads; this one is not.
  while (const dirent* d = ::readdir(proc)) {  // NOLINT(concurrency-mt-unsafe)
    char* end = nullptr;
    const long pid = std::strtol(d->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    if ((err = stat_of(static_cast<pid_t>(pid), state, group)) != 0) break;
    if (state != 0 && group == -target && !is_halted(state)) {
      stopped = false;
      break;
    }
  }
  ::closedir(proc);
  return err;
}

}  // namespace krex::detail::freeze_signal
