// SPDX-License-Identifier: Apache-2.0
#pragma once

// The fallback where no cgroup is writable: SIGSTOP / SIGCONT. It stops a
// sibling's process group when the sibling leads its own group (and that
// group is not the caller's), otherwise the sibling process alone; children
// that left the group, and processes that catch up with SIGCONT from
// elsewhere, escape it. That is why it ranks below both cgroup freezers.

#include <krex/detail/cgroup.hpp>
#include <krex/options.hpp>

#include <dirent.h>

#include <cstdlib>
#include <string>

namespace krex::detail::freeze_signal {

/// What a signal goes to for sibling `pid`: -pgid for its own group, else pid.
inline pid_t target_of(pid_t pid) noexcept {
  const pid_t group = ::getpgid(pid);
  return group == pid && group != ::getpgrp() ? -group : pid;
}

/// Sends `sig` to `target` (see target_of). Returns 0 or an errno value.
inline int send(pid_t target, int sig) { return sys().kill(target, sig) == 0 ? 0 : errno; }

/// State letter and process group of /proc/<pid>/stat; 0 if the process is gone.
/// Returns 0 or an errno value other than ENOENT/ESRCH.
inline int stat_of(pid_t pid, char& state, pid_t& group) {
  state = 0;
  std::string text;
  const int e = cgroup::read_file("/proc/" + std::to_string(pid) + "/stat", text);
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
