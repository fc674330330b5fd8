// SPDX-License-Identifier: Apache-2.0
#pragma once

// Is the process at pid P the tenant that joined this segment? The segment is
// written by other local processes, so a slot's pid and start time prove
// nothing: anyone who can write the segment can name any pid with its real
// start time. Before a pid is signalled (signal freezing, and the thaw that
// undoes it) it must pass every check here, each read from /proc, none from
// the segment:
//
//   - pid > 1 (0 and -1 are broadcasts to kill(2); 1 is an init);
//   - its start time is the one recorded at join (a reused pid differs);
//   - it belongs to this segment's security domain: user mode, real uid =
//     the domain's uid; group mode, real gid = the domain's gid;
//   - it lives in the verifier's pid namespace (a pid recorded in another
//     namespace names some other process here);
//   - it has this segment mapped: a line of /proc/<pid>/maps names the
//     segment file's device and inode, as fstat gave them at join (not its
//     path: any file can be named to end like the segment's path);
//   - it runs the agent thread of that very slot: a thread named
//     "krex:t<slot>" (agent_thread_name). Only a process can name its own
//     threads, so this ties the pid to the slot: the mapping alone would
//     also pass the guardian and any child forked from a member.
//
// Callers take a pidfd before verifying and signal through it, so a pid
// reused between the check and the signal is never touched.
//
// Everything here is async-signal-safe (raw system calls, fixed buffers): the
// guardian verifies with it after fork.

#include <krex/detail/proc.hpp>
#include <krex/detail/sys.hpp>
#include <krex/options.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>

namespace krex::detail {

/// Who may be signalled: the segment's security domain, as this process
/// knows it (never as the segment says). Plain data: copied into the
/// guardian by fork.
struct identity_domain {
  segment_access access = segment_access::user;
  std::uint32_t id = 0;      ///< user mode: uid; group mode: gid
  std::uint64_t pidns = 0;   ///< inode of this process's pid namespace
  char shm_path[1024] = {};  ///< the segment file's path (for messages)
  /// The segment file members map: its device and inode (fstat at join).
  std::uint64_t shm_dev = 0;
  std::uint64_t shm_ino = 0;
  bool valid() const noexcept { return shm_path[0] != '\0' && pidns != 0 && shm_ino != 0; }
};

/// Why a pid is not verified as a member (0: it is).
enum identity_verdict : int {
  identity_ok = 0,
  identity_bad_pid,      ///< pid <= 1
  identity_gone,         ///< no such process (or a zombie)
  identity_start_time,   ///< another process (start time differs or none recorded)
  identity_domain_id,    ///< uid / gid outside the segment's domain
  identity_namespace,    ///< another pid namespace
  identity_not_mapped,   ///< does not have the segment mapped
  identity_unreadable,   ///< its /proc entries cannot be read (another user's process)
  identity_no_agent,     ///< has no agent thread of the slot (not that slot's tenant)
  identity_no_domain,    ///< the verifier has no domain configured
};

inline const char* to_string(identity_verdict v) noexcept {
  switch (v) {
    case identity_ok: return "verified";
    case identity_bad_pid: return "pid <= 1 is never signalled";
    case identity_gone: return "no such process";
    case identity_start_time: return "start time differs from the one recorded at join (pid reused?)";
    case identity_domain_id: return "owned by a user or group outside the segment's domain";
    case identity_namespace: return "in another pid namespace";
    case identity_not_mapped: return "does not have this segment mapped (not a member)";
    case identity_unreadable: return "its /proc entries cannot be read (another user's process?)";
    case identity_no_domain: return "no identity domain configured";
    case identity_no_agent: return "runs no krex agent thread for this slot (not its tenant)";
  }
  return "?";
}

namespace as_safe {

// /proc/<pid>/... paths: one builder in proc.hpp serves tenants and recoverers.
using detail::proc_path;

/// Inode of the pid namespace of `pid` (0 for this process); 0 if unreadable.
inline std::uint64_t pid_namespace(std::int64_t pid = 0) noexcept {
  char path[48];
  if (pid == 0) {
    const char* self = "/proc/self/ns/pid";
    std::size_t i = 0;
    for (; self[i] != '\0'; ++i) path[i] = self[i];
    path[i] = '\0';
  } else if (!proc_path(path, sizeof path, pid, "/ns/pid")) {
    return 0;
  }
  struct stat st {};
  if (::stat(path, &st) != 0) return 0;
  return static_cast<std::uint64_t>(st.st_ino);
}

/// Real uid and gid of `pid` from /proc/<pid>/status. Returns 0 or errno.
inline int real_ids(std::int64_t pid, std::uint32_t& uid, std::uint32_t& gid) noexcept {
  char path[48];
  if (!proc_path(path, sizeof path, pid, "/status")) return ENAMETOOLONG;
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  char buf[4096];
  std::size_t len = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf + len, sizeof buf - 1 - len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    len += static_cast<std::size_t>(n);
    if (len + 1 >= sizeof buf) break;
  }
  ::close(fd);
  buf[len] = '\0';
  // "Uid:\t<real>\t<effective>..." and "Gid:\t<real>..." at line starts.
  const auto field = [&](const char* key, std::uint32_t& out) {
    for (std::size_t i = 0; i + 4 < len; ++i) {
      if ((i != 0 && buf[i - 1] != '\n') || buf[i] != key[0] || buf[i + 1] != key[1] ||
          buf[i + 2] != key[2] || buf[i + 3] != ':')
        continue;
      std::size_t j = i + 4;
      while (buf[j] == '\t' || buf[j] == ' ') ++j;
      if (buf[j] < '0' || buf[j] > '9') return false;
      std::uint64_t v = 0;
      while (buf[j] >= '0' && buf[j] <= '9') v = v * 10 + static_cast<std::uint64_t>(buf[j++] - '0');
      out = static_cast<std::uint32_t>(v);
      return true;
    }
    return false;
  };
  return field("Uid", uid) && field("Gid", gid) ? 0 : EPROTO;
}

/// Whether /proc/<pid>/maps has a mapping of the file with device `dev`
/// (an st_dev) and inode `ino`: the fourth and fifth fields of a line,
/// "start-end perms offset major:minor inode path", major and minor in hex.
/// The path is not read: it is whatever the mapper's file was named, and a
/// removed segment still matches. Returns 0 (and `found`) or errno. Reads in
/// fixed chunks: a CUDA process maps thousands of regions.
inline int maps_file(std::int64_t pid, std::uint64_t dev, std::uint64_t ino, bool& found) noexcept {
  found = false;
  if (ino == 0) return EINVAL;
  const auto want_major = static_cast<std::uint64_t>(major(static_cast<dev_t>(dev)));
  const auto want_minor = static_cast<std::uint64_t>(minor(static_cast<dev_t>(dev)));
  char mpath[48];
  if (!proc_path(mpath, sizeof mpath, pid, "/maps")) return ENAMETOOLONG;
  const int fd = ::open(mpath, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  // Per line: which field we are in (0: range, 1: perms, 2: offset, 3:
  // device, 4: inode, 5: the rest) and the numbers read so far.
  int field = 0;
  bool after_colon = false;
  bool inode_digits = false;
  std::uint64_t maj = 0;
  std::uint64_t min = 0;
  std::uint64_t inode = 0;
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  char chunk[4096];
  int err = 0;
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    for (ssize_t k = 0; k < n && !found; ++k) {
      const char c = chunk[k];
      if (c == '\n') {
        found = inode_digits && maj == want_major && min == want_minor && inode == ino;
        field = 0;
        after_colon = inode_digits = false;
        maj = min = inode = 0;
        continue;
      }
      if (field >= 5) continue;
      if (c == ' ') {
        if (field < 4 || inode_digits) ++field;  // the inode ends at its first space
        continue;
      }
      if (field == 3) {
        if (c == ':') after_colon = true;
        else if (hex(c) >= 0)
          (after_colon ? min : maj) = (after_colon ? min : maj) * 16 + static_cast<std::uint64_t>(hex(c));
      } else if (field == 4 && c >= '0' && c <= '9') {
        inode = inode * 10 + static_cast<std::uint64_t>(c - '0');
        inode_digits = true;
      }
    }
    if (found) break;
  }
  ::close(fd);
  return found ? 0 : err;
}

/// The name of the agent thread of the tenant in slot `slot`: "krex:t<slot>"
/// (at most 15 characters, the kernel's limit).
inline void agent_thread_name(std::uint32_t slot, char (&out)[16]) noexcept {
  const char* head = "krex:t";
  std::size_t i = 0;
  for (; head[i] != '\0'; ++i) out[i] = head[i];
  char digits[20];
  const int nd = decimal_digits(slot, digits);
  for (int k = nd > 9 ? nd - 9 : 0; k < nd; ++k) out[i++] = digits[k];  // 6 + 9 + NUL
  out[i] = '\0';
}

/// Whether some thread of `pid` is named `name` (/proc/<pid>/task/*/comm).
/// Returns 0 (and `found`) or errno.
inline int has_thread_named(std::int64_t pid, const char* name, bool& found) noexcept {
  found = false;
  char dpath[48];
  if (!proc_path(dpath, sizeof dpath, pid, "/task")) return ENAMETOOLONG;
  const int dfd = ::open(dpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return errno;
  alignas(8) char buf[4096];
  int err = 0;
  while (!found) {
    const long n = ::syscall(SYS_getdents64, dfd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) err = errno;
    if (n <= 0) break;
    // struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, name.
    for (long off = 0; off + 19 < n && !found;) {
      const auto* rec = reinterpret_cast<const unsigned char*>(buf + off);
      const std::size_t reclen = static_cast<std::size_t>(rec[16]) |
                                 (static_cast<std::size_t>(rec[17]) << 8);
      if (reclen == 0) break;
      const char* tid = buf + off + 19;
      if (*tid >= '0' && *tid <= '9') {
        char rel[40];
        std::size_t k = 0;
        for (; tid[k] != '\0' && k < 20; ++k) rel[k] = tid[k];
        for (const char* t = "/comm"; *t != '\0'; ++t) rel[k++] = *t;
        rel[k] = '\0';
        const int fd = ::openat(dfd, rel, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
          char comm[32];
          ssize_t m;
          do m = ::read(fd, comm, sizeof comm - 1);
          while (m < 0 && errno == EINTR);
          ::close(fd);
          if (m > 0) {
            std::size_t len = static_cast<std::size_t>(m);
            if (comm[len - 1] == '\n') --len;
            std::size_t q = 0;
            while (q < len && name[q] != '\0' && comm[q] == name[q]) ++q;
            found = q == len && name[q] == '\0';
          }
        }
      }
      off += static_cast<long>(reclen);
    }
  }
  ::close(dfd);
  return found ? 0 : err;
}

/// Checks that the process at `pid` is the member that joined slot `slot`
/// with `start_time` (see the top of this file). Async-signal-safe.
inline identity_verdict verify_member(const identity_domain& d, std::int64_t pid,
                                      std::uint64_t start_time, std::uint32_t slot) noexcept {
  if (pid <= 1 || pid > INT32_MAX) return identity_bad_pid;
  if (!d.valid()) return identity_no_domain;
  const proc_stat st = read_proc_stat(pid);
  if (!st.exists || st.state == 'Z' || st.state == 'X') return identity_gone;
  if (start_time == 0 || st.start_time != start_time) return identity_start_time;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  int e = real_ids(pid, uid, gid);
  if (e == ENOENT || e == ESRCH) return identity_gone;
  if (e != 0) return identity_unreadable;
  if ((d.access == segment_access::user ? uid : gid) != d.id) return identity_domain_id;
  const std::uint64_t ns = pid_namespace(pid);
  if (ns == 0) return identity_unreadable;
  if (ns != d.pidns) return identity_namespace;
  bool mapped = false;
  e = maps_file(pid, d.shm_dev, d.shm_ino, mapped);
  if (e == ENOENT || e == ESRCH) return identity_gone;
  if (e != 0) return identity_unreadable;
  if (!mapped) return identity_not_mapped;
  char agent[16];
  agent_thread_name(slot, agent);
  bool has_agent = false;
  e = has_thread_named(pid, agent, has_agent);
  if (e == ENOENT || e == ESRCH) return identity_gone;
  if (e != 0) return identity_unreadable;
  if (!has_agent) return identity_no_agent;
  // The start time again: the process we read /proc of is still the same one.
  const proc_stat again = read_proc_stat(pid);
  if (!again.exists || again.start_time != start_time) return identity_gone;
  return identity_ok;
}

/// Only the pid and start-time checks of verify_member: what the no-pidfd
/// fallback re-checks right before a SIGCONT.
inline bool verify_member_start(std::int64_t pid, std::uint64_t start_time) noexcept {
  if (pid <= 1 || pid > INT32_MAX || start_time == 0) return false;
  const proc_stat st = read_proc_stat(pid);
  return st.exists && st.state != 'Z' && st.state != 'X' && st.start_time == start_time;
}

/// pidfd_open(2), or -1 where the kernel lacks it (ENOSYS; then liveness is
/// polled). The raw system call of sys.hpp, not the sys() table (which
/// recoverers after fork must not use).
inline int pidfd_open(std::int32_t pid) noexcept { return sys_impl::pidfd_open(pid); }

/// pidfd_send_signal(2). Returns 0 or -1 with errno.
inline int pidfd_signal(int pidfd, int sig) noexcept {
  return sys_impl::pidfd_send_signal(pidfd, sig);
}

}  // namespace as_safe

/// The domain of a process that joined the segment file `segment_path`
/// (absolute, as detail::segment::path() gives it) with access `a`: its own
/// uid or gid (as in the segment's name) and pid namespace. `file`: the
/// fstat of the file it mapped (the tenant's); without it the path is
/// stat()ed, which names whatever file is there now (tests, tools).
KREX_DETAIL_COLD inline identity_domain make_identity_domain(segment_access a, const char* segment_path,
                                            const struct stat* file = nullptr) noexcept {
  identity_domain d;
  d.access = a;
  d.id = a == segment_access::user ? static_cast<std::uint32_t>(::getuid())
                                   : static_cast<std::uint32_t>(::getgid());
  d.pidns = as_safe::pid_namespace();
  std::size_t i = 0;
  for (const char* s = segment_path; *s != '\0'; ++s) {
    if (i + 1 >= sizeof d.shm_path) {
      d.shm_path[0] = '\0';  // invalid: verifies nothing
      return d;
    }
    d.shm_path[i++] = *s;
  }
  d.shm_path[i] = '\0';
  if (d.shm_path[0] != '/') d.shm_path[0] = '\0';  // a relative path verifies nothing
  struct stat st {};
  if (file == nullptr && ::stat(d.shm_path, &st) == 0) file = &st;
  if (file != nullptr) {
    d.shm_dev = static_cast<std::uint64_t>(file->st_dev);
    d.shm_ino = static_cast<std::uint64_t>(file->st_ino);
  }
  return d;
}

}  // namespace krex::detail
