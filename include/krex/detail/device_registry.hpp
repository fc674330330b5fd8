// SPDX-License-Identifier: Apache-2.0
#pragma once

// Split segments. Two harnesses on one device whose segments differ (another
// KREX_SEGMENT, KREX_SEGMENT_ACCESS or KREX_SHM_DIR, or two users in user
// mode, whose segments differ by uid) neither drain nor freeze each other,
// and each would report full protection. No segment name can find the other
// segment, so every tenant also registers under its device's node-wide key,
// in a directory that does not depend on any segment setting:
//
//   <registry>/<device key: 16 hex digits>/<segment dev>-<segment ino>-<pid>
//
// registry: KREX_DEVICE_REGISTRY, default /dev/shm/krex-devices. Both
// directories are made world-writable and sticky (mode 1777, like /tmp): any
// user adds entries, only an entry's owner removes it. An entry (mode 0644)
// holds its tenant's pid, start time, uid, pid namespace and segment path; it
// is removed when the tenant leaves. A region lists the live entries of its
// device that name another segment file (region_report::other_segments).
//
// Entries are claims, like the segment's words: a local user can write a
// fake one (a false warning, never a lost region) or, owning the registry
// directory before anyone else, remove others' entries (a missed warning).
// A directory that is a symlink, not a directory, owned by another user than
// root or the caller, or writable by others without the sticky bit is not
// used: the check is then off, and the tenant's notes say why.

#include <krex/detail/identity.hpp>
#include <krex/detail/proc.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <system_error>
#include <vector>

namespace krex::detail {

inline constexpr const char* default_device_registry = "/dev/shm/krex-devices";

/// Another segment that tenants on the same device use now.
struct other_segment {
  std::string path;       ///< its segment file, as its tenant named it
  std::vector<int> pids;  ///< its live tenants that registered (their pid namespace's pids)
  bool other_pidns = false;  ///< some entry is from another pid namespace: liveness unknown
};

namespace registry_impl {

/// Opens directory `path` (making it, mode 1777, if missing) for entries.
/// Returns the descriptor, or -1 with the reason in `why`.
inline int open_dir(const std::string& path, std::string& why) {
  if (::mkdir(path.c_str(), 01777) == 0) ::chmod(path.c_str(), 01777);  // past the umask
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    why = path + ": " + std::system_category().message(errno);
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || (st.st_uid != 0 && st.st_uid != ::geteuid()) ||
      ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)) {
    why = path + " belongs to uid " + std::to_string(st.st_uid) +
          " or is writable by others without the sticky bit";
    ::close(fd);
    return -1;
  }
  return fd;
}

inline std::string key_text(std::uint64_t key) {
  char s[17];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(key));
  return s;
}

inline std::string entry_prefix(std::uint64_t dev, std::uint64_t ino) {
  char s[48];
  std::snprintf(s, sizeof s, "%llx-%llu-", static_cast<unsigned long long>(dev),
                static_cast<unsigned long long>(ino));
  return s;
}

/// The text of regular file `name` in `dir` (at most 4 KiB; never a FIFO,
/// device or symlink, whoever planted it). False if it cannot be read.
inline bool read_entry(int dir, const char* name, std::string& out) {
  const int fd = ::openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < 4096;
  char buf[4096];
  ssize_t n = 0;
  if (ok) {
    do n = ::read(fd, buf, sizeof buf - 1);
    while (n < 0 && errno == EINTR);
    ok = n > 0;
  }
  ::close(fd);
  if (ok) out.assign(buf, static_cast<std::size_t>(n));
  return ok;
}

}  // namespace registry_impl

/// The registry directory: KREX_DEVICE_REGISTRY (an absolute path without
/// '..'), else default_device_registry. "" (with `why`) if the variable is invalid.
inline std::string device_registry_dir(std::string& why) {
  const char* env = std::getenv("KREX_DEVICE_REGISTRY");  // NOLINT(concurrency-mt-unsafe)
  std::string d = env != nullptr && *env != '\0' ? env : default_device_registry;
  if (d[0] != '/' || d.find("/..") != std::string::npos) {
    why = "KREX_DEVICE_REGISTRY " + d + " is not an absolute path without '..'";
    return {};
  }
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d;
}

/// This tenant's entry under its device's key: made at join, removed at
/// leave. Never throws: where the registry cannot be used, available() is
/// false and why() says why (the split check is off for this tenant).
class device_entry {
 public:
  device_entry() = default;
  /// Registers this process as a tenant of the segment file `segment`
  /// (its fstat: device and inode) at `path`, on the device with `key`.
  device_entry(std::uint64_t key, const struct stat& segment, const std::string& path) {
    try {
      const std::string root = device_registry_dir(m_why);
      if (root.empty()) return;
      const int top = registry_impl::open_dir(root, m_why);
      if (top < 0) return;
      ::close(top);
      m_dir = root + "/" + registry_impl::key_text(key);
      const int dir = registry_impl::open_dir(m_dir, m_why);
      if (dir < 0) return;
      m_dev = static_cast<std::uint64_t>(segment.st_dev);
      m_ino = static_cast<std::uint64_t>(segment.st_ino);
      m_name = registry_impl::entry_prefix(m_dev, m_ino) + std::to_string(::getpid());
      const std::string text = std::to_string(::getpid()) + " " +
                               std::to_string(self_start_time()) + " " +
                               std::to_string(::geteuid()) + " " +
                               std::to_string(as_safe::pid_namespace()) + "\n" + path + "\n";
      // A file under this name is a dead process's of the same pid (ours to replace).
      ::unlinkat(dir, m_name.c_str(), 0);
      const int fd =
          ::openat(dir, m_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
      if (fd < 0) {
        m_why = m_dir + "/" + m_name + ": " + std::system_category().message(errno);
      } else {
        ::fchmod(fd, 0644);
        const bool written = ::write(fd, text.data(), text.size()) ==
                             static_cast<ssize_t>(text.size());
        ::close(fd);
        if (written) m_registered = true;
        else ::unlinkat(dir, m_name.c_str(), 0);
      }
      if (m_registered) m_dir_fd = dir;  // kept: others() fstats it at every region
      else ::close(dir);
    } catch (...) {
      m_registered = false;  // allocation only; the check is off
    }
  }
  device_entry(const device_entry&) = delete;
  device_entry& operator=(const device_entry&) = delete;
  ~device_entry() {
    remove();
    if (m_dir_fd >= 0) ::close(m_dir_fd);
  }

  bool available() const noexcept { return m_registered; }
  const std::string& why() const noexcept { return m_why; }

  /// Removes the entry (leave). Idempotent.
  void remove() noexcept {
    if (!m_registered) return;
    m_registered = false;
    ::unlink((m_dir + "/" + m_name).c_str());
  }
  /// A forked child's copy: the entry is the parent's, left alone.
  void forget() noexcept { m_registered = false; }

  /// The other segments with live tenants on this device, each once. Entries
  /// of this segment file, of dead tenants and unreadable ones are skipped;
  /// this process's own dead entries (a killed earlier run) are removed.
  /// Every region asks: a scan costs ~10 us, so an empty answer is kept
  /// while the directory is unchanged (one stat), judged only once its last
  /// change is older than file times' resolution (a tick).
  std::vector<other_segment> others() const {
    std::vector<other_segment> out;
    if (!m_registered) return out;
    struct stat st {};
    const bool listed = ::fstat(m_dir_fd, &st) == 0;
    timespec now{};
    ::clock_gettime(CLOCK_REALTIME, &now);
    const auto ns = [](const timespec& t) {
      return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
    };
    const bool settled = listed && ns(now) - ns(st.st_mtim) > 20'000'000;
    if (settled && m_none_at == ns(st.st_mtim) && m_none_size == st.st_size) return out;
    out = scan();
    m_none_at = settled && out.empty() ? ns(st.st_mtim) : -1;
    m_none_size = st.st_size;
    return out;
  }

 private:
  std::vector<other_segment> scan() const {
    std::vector<other_segment> out;
    std::vector<std::string> seen;  // the segment (entry prefix) of each out[i]
    DIR* d = ::opendir(m_dir.c_str());
    if (d == nullptr) return out;
    const std::string own = registry_impl::entry_prefix(m_dev, m_ino);
    const std::uint64_t pidns = as_safe::pid_namespace();
    // readdir is only unsafe on a DIR shared between threads; this one is not.
    while (const dirent* e = ::readdir(d)) {  // NOLINT(concurrency-mt-unsafe)
      const char* name = e->d_name;
      if (name[0] == '.' || std::strncmp(name, own.c_str(), own.size()) == 0) continue;
      std::string text;
      if (!registry_impl::read_entry(::dirfd(d), name, text)) continue;
      long long pid = 0;
      unsigned long long start = 0, uid = 0, ns = 0;
      const std::size_t eol = text.find('\n');
      if (eol == std::string::npos || text.size() < eol + 2 ||
          std::sscanf(text.c_str(), "%lld %llu %llu %llu", &pid, &start, &uid, &ns) != 4)
        continue;
      std::string path = text.substr(eol + 1);
      if (!path.empty() && path.back() == '\n') path.pop_back();
      const bool here = ns == pidns;
      if (here && !alive(pid, start)) {
        if (uid == ::geteuid()) ::unlinkat(::dirfd(d), name, 0);  // a dead run's, ours
        continue;
      }
      // One segment file is named by its device and inode: the prefix.
      const char* dash = std::strrchr(name, '-');
      if (dash == nullptr) continue;
      const std::string seg(name, static_cast<std::size_t>(dash - name));
      other_segment* o = nullptr;
      for (std::size_t i = 0; i < out.size() && o == nullptr; ++i)
        if (seen[i] == seg) o = &out[i];
      if (o == nullptr) {
        out.push_back({path, {}, false});
        seen.push_back(seg);
        o = &out.back();
      }
      o->pids.push_back(static_cast<int>(pid));
      o->other_pidns = o->other_pidns || !here;
    }
    ::closedir(d);
    return out;
  }

  std::string m_dir;
  std::string m_name;
  std::string m_why;
  std::uint64_t m_dev = 0;
  std::uint64_t m_ino = 0;
  bool m_registered = false;
  int m_dir_fd = -1;  // the device's directory
  // others(): the directory's mtime and size when a scan found nobody (-1: none kept).
  mutable std::int64_t m_none_at = -1;
  mutable off_t m_none_size = 0;
};

}  // namespace krex::detail
