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
//
// Owned, bounded, swept (issue 38):
//   - owned: an entry counts only if its file's owner is the uid it claims
//     (or root), and, where /proc shows it, its pid belongs to that uid: a
//     user cannot claim another user's process or uid;
//   - bounded: a scan reads at most registry_scan_cap names (a region's note
//     says when a directory holds more), and its answer is kept while the
//     directory is unchanged, for at most registry_recheck_ns: a flooded
//     directory costs one capped scan a second, never one per region;
//   - swept: a tenant removes its entry at leave; every scan, and the
//     guardian (sweep_segment_entries), remove entries whose tenant is dead
//     on positive evidence (kill(pid, 0) fails with ESRCH, or the pid's start
//     time differs). A tenant refreshes its entry's mtime every
//     registry_beat_ns (and writes it again if it was removed); an entry
//     whose liveness cannot be judged (another pid namespace, a /proc that
//     cannot be read, a zombie leader) counts only while that refresh is
//     younger than registry_stale_ns, and is removed once it is
//     registry_expire_ns old. Nothing here treats "cannot read /proc" as
//     dead.

#include <krex/detail/identity.hpp>
#include <krex/detail/layout.hpp>
#include <krex/detail/proc.hpp>
#include <krex/report.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace krex::detail {

inline constexpr const char* default_device_registry = "/dev/shm/krex-devices";

/// Names a scan (or a guardian sweep) reads at most in one device directory.
inline constexpr std::size_t registry_scan_cap = 1024;
/// How often a tenant refreshes its entry's mtime (its heartbeat).
inline constexpr std::uint64_t registry_beat_ns = 1'000'000'000ULL;
/// An entry whose liveness cannot be judged counts while its mtime is younger.
inline constexpr std::uint64_t registry_stale_ns = 10'000'000'000ULL;
/// ...and is removed (by whoever may) once its mtime is this old.
inline constexpr std::uint64_t registry_expire_ns = 120'000'000'000ULL;
/// A scan's answer is kept at most this long while the directory is unchanged.
inline constexpr std::uint64_t registry_recheck_ns = 1'000'000'000ULL;

/// Another segment that tenants on the same device use now.
struct other_segment {
  std::string path;       ///< its segment file, as its tenant named it
  std::vector<int> pids;  ///< its live tenants that registered (their pid namespace's pids)
  bool other_pidns = false;  ///< some entry is from another pid namespace: liveness unknown
};

/// Writes into `r` the segments of `others` it does not list yet, each with a
/// warning (`what`: "uses this device"): nothing drained or froze their tenants.
inline void describe_other_segments(std::vector<other_segment>&& others, const char* what,
                                    region_report& r) {
  const std::size_t known = r.other_segments.size();
  for (other_segment& o : others) {
    const auto end = r.other_segments.begin() + static_cast<std::ptrdiff_t>(known);
    if (std::find(r.other_segments.begin(), end, o.path) != end) continue;
    std::string pids;
    for (int p : o.pids) pids += cat({pids.empty() ? "" : ", ", p});
    r.warnings.push_back(
        cat({"another krex segment ", what, ": ", o.path, " (tenant pid ", pids,
             o.other_pidns ? ", in another pid namespace or not checkable here: its entry was "
                             "refreshed within the last 10 s"
                           : "",
             "): its tenants were not drained or frozen for this region, nor is this region "
             "visible to them; give every harness on a device the same KREX_SEGMENT, "
             "KREX_SEGMENT_ACCESS and KREX_SHM_DIR (and one user, or group mode)"}));
    r.other_segments.push_back(std::move(o.path));
  }
}

namespace registry_impl {

/// Opens directory `path` (making it, mode 1777, if missing) for entries.
/// Returns the descriptor, or -1 with the reason in `why`.
inline int open_dir(const std::string& path, std::string& why) {
  if (::mkdir(path.c_str(), 01777) == 0) ::chmod(path.c_str(), 01777);  // past the umask
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    why = cat({path, ": ", std::system_category().message(errno)});
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || (st.st_uid != 0 && st.st_uid != ::geteuid()) ||
      ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)) {
    why = cat({path, " belongs to uid ", st.st_uid,
               " or is writable by others without the sticky bit"});
    ::close(fd);
    return -1;
  }
  return fd;
}

/// `key` as 16 hex digits into `out[17]`. Async-signal-safe.
inline void key_hex(std::uint64_t key, char* out) noexcept {
  for (int i = 15; i >= 0; --i) {
    const unsigned v = static_cast<unsigned>(key & 0xfU);
    out[i] = static_cast<char>(v < 10 ? '0' + v : 'a' + (v - 10));
    key >>= 4;
  }
  out[16] = '\0';
}

inline std::string key_text(std::uint64_t key) {
  char s[17];
  key_hex(key, s);
  return s;
}

inline std::string entry_prefix(std::uint64_t dev, std::uint64_t ino) {
  char s[48];
  std::snprintf(s, sizeof s, "%llx-%llu-", static_cast<unsigned long long>(dev),
                static_cast<unsigned long long>(ino));
  return s;
}

/// Parses an entry name "<dev hex>-<ino>-<pid>". Async-signal-safe.
inline bool parse_name(const char* name, std::uint64_t& dev, std::uint64_t& ino,
                       std::int64_t& pid) noexcept {
  const char* q = name;
  dev = ino = 0;
  pid = 0;
  int n = 0;
  for (; (*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f'); ++q, ++n) {
    if (n >= 16) return false;
    dev = dev * 16 + static_cast<std::uint64_t>(*q <= '9' ? *q - '0' : *q - 'a' + 10);
  }
  if (n == 0 || *q++ != '-') return false;
  for (n = 0; *q >= '0' && *q <= '9'; ++q, ++n) {
    if (n >= 20) return false;
    ino = ino * 10 + static_cast<std::uint64_t>(*q - '0');
  }
  if (n == 0 || *q++ != '-') return false;
  for (n = 0; *q >= '0' && *q <= '9'; ++q, ++n) {
    if (n >= 10) return false;
    pid = pid * 10 + (*q - '0');
  }
  return n != 0 && *q == '\0' && pid > 0 && pid <= INT_MAX;
}

/// An entry's text: "<pid> <start time> <uid> <pid namespace>\n<segment path>\n".
struct entry_fields {
  std::int64_t pid = 0;
  std::uint64_t start = 0;
  std::uint64_t uid = 0;
  std::uint64_t ns = 0;
  const char* path = nullptr;  ///< into the parsed buffer
  std::size_t path_len = 0;
};

/// Parses `buf[0..n)`. Async-signal-safe.
inline bool parse_fields(const char* buf, std::size_t n, entry_fields& f) noexcept {
  std::size_t i = 0;
  std::uint64_t v[4] = {0, 0, 0, 0};
  for (int k = 0; k < 4; ++k) {
    const std::size_t at = i;
    while (i < n && buf[i] >= '0' && buf[i] <= '9' && i - at < 20)
      v[k] = v[k] * 10 + static_cast<std::uint64_t>(buf[i++] - '0');
    if (i == at || i >= n || buf[i] != (k < 3 ? ' ' : '\n')) return false;
    ++i;
  }
  std::size_t e = i;
  while (e < n && buf[e] != '\n' && buf[e] != '\0') ++e;
  if (e == i || v[0] == 0 || v[0] > INT_MAX) return false;
  f.pid = static_cast<std::int64_t>(v[0]);
  f.start = v[1];
  f.uid = v[2];
  f.ns = v[3];
  f.path = buf + i;
  f.path_len = e - i;
  return true;
}

/// Regular file `name` in `dir` (never a FIFO, device or symlink, whoever
/// planted it), under 4 KiB: its text into `buf` (NUL-terminated, length in
/// `n`) and its fstat. False if it cannot be read. Async-signal-safe.
inline bool read_entry(int dir, const char* name, char (&buf)[4096], std::size_t& n,
                       struct stat& st) noexcept {
  const int fd = ::openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < 4096;
  ssize_t r = 0;
  if (ok) {
    do r = ::read(fd, buf, sizeof buf - 1);
    while (r < 0 && errno == EINTR);
    ok = r > 0;
  }
  ::close(fd);
  n = ok ? static_cast<std::size_t>(r) : 0;
  buf[n] = '\0';
  return ok;
}

/// Liveness on positive evidence only: dead when kill(pid, 0) says ESRCH or
/// the pid's start time differs from the recorded one; live when /proc shows
/// the same process running; unknown otherwise (unreadable /proc, a zombie
/// leader whose threads may run on). Async-signal-safe.
enum class liveness { live, dead, unknown };
inline liveness judge(std::int64_t pid, std::uint64_t start) noexcept {
  if (pid <= 0 || pid > INT_MAX) return liveness::dead;
  const proc_stat st = read_proc_stat(pid);
  if (st.exists && start != 0 && st.start_time != 0 && st.start_time != start)
    return liveness::dead;  // the pid was reused
  if (st.exists && st.state != 'Z' && st.state != 'X') return liveness::live;
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return liveness::dead;
  return liveness::unknown;
}

/// True when /proc shows `pid` owned by a user other than `uid` (and not
/// root, which a non-dumpable process shows): an entry that claims another
/// user's process. Unreadable: false. Async-signal-safe.
inline bool pid_of_other_user(std::int64_t pid, std::uint64_t uid) noexcept {
  char path[32];
  struct stat st {};
  if (!proc_path(path, sizeof path, pid, "") || ::stat(path, &st) != 0) return false;
  return st.st_uid != 0 && st.st_uid != uid;
}

inline std::int64_t realtime_ns() noexcept {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

inline std::int64_t mtime_ns(const struct stat& st) noexcept {
  return static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

/// What an entry is worth.
enum class verdict {
  live,     ///< its tenant runs (pid verified, or its entry refreshed recently)
  dead,     ///< dead on positive evidence, or unjudged and expired: to be removed
  ignored,  ///< forged (another user's uid or process), or unjudged and stale
};

/// Judges entry `f`, a file with fstat `st`, read by a process in pid
/// namespace `pidns` (0: unknown) at realtime `now`. Async-signal-safe.
inline verdict classify(const entry_fields& f, const struct stat& st, std::uint64_t pidns,
                        std::int64_t now) noexcept {
  if (st.st_uid != 0 && static_cast<std::uint64_t>(st.st_uid) != f.uid) return verdict::ignored;
  if (pidns != 0 && f.ns == pidns) {
    const liveness l = judge(f.pid, f.start);
    if (l == liveness::dead) return verdict::dead;
    if (l == liveness::live)
      return pid_of_other_user(f.pid, f.uid) ? verdict::ignored : verdict::live;
  }
  // Not judged by its pid: by its tenant's refresh of the entry.
  const std::int64_t age = now - mtime_ns(st);
  if (age < static_cast<std::int64_t>(registry_stale_ns)) return verdict::live;
  return age >= static_cast<std::int64_t>(registry_expire_ns) ? verdict::dead : verdict::ignored;
}

/// Removes `name` from `dir` if it is still the file with inode `ino` (a
/// tenant that reused the pid may have written a new one). Permission errors
/// (another user's entry in a sticky directory) are ignored. Async-signal-safe.
inline void remove_if_same(int dir, const char* name, ino_t ino) noexcept {
  struct stat now {};
  if (::fstatat(dir, name, &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_ino == ino)
    ::unlinkat(dir, name, 0);
}

/// Where the guardian of a segment finds its registry entries: filled by
/// each device_entry before a guardian can be forked, read by the guardian
/// (a fork: plain memory, no lock). Keyed by the segment's mapping.
struct link {
  std::atomic<const void*> node{nullptr};
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  char root[512] = {};
};
inline link links[8];
inline std::atomic<unsigned> next_link{0};

inline void add_link(const void* node, std::uint64_t dev, std::uint64_t ino,
                     const std::string& root) noexcept {
  if (node == nullptr || root.size() >= sizeof links[0].root) return;
  link* l = nullptr;
  for (link& x : links)
    if (x.node.load() == node) l = &x;
  if (l == nullptr) l = &links[next_link.fetch_add(1) % (sizeof links / sizeof links[0])];
  l->node.store(nullptr);
  l->dev = dev;
  l->ino = ino;
  std::memcpy(l->root, root.c_str(), root.size() + 1);
  l->node.store(node);
}

/// Calls f(name, segment dev, segment ino, fields, fstat) for each well-formed
/// entry of directory `dir` (its name's pid the one its text names), at most
/// registry_scan_cap names. Returns false if there were more. Async-signal-safe
/// (getdents64 into a fixed buffer) when `f` is.
template <class F>
bool visit_entries(int dir,
                   F&& f) noexcept(noexcept(f("", 0, 0, std::declval<const entry_fields&>(),
                                              std::declval<const struct stat&>()))) {
  struct dirent64_head {
    std::uint64_t d_ino;
    std::int64_t d_off;
    unsigned short d_reclen;
    unsigned char d_type;
  };
  alignas(8) char dents[8192];
  char buf[4096];
  std::size_t seen = 0;
  for (long got; (got = ::syscall(SYS_getdents64, dir, dents, sizeof dents)) > 0;) {
    for (long at = 0; at < got;) {
      const char* name = dents + at + offsetof(dirent64_head, d_type) + 1;
      at += reinterpret_cast<const dirent64_head*>(dents + at)->d_reclen;
      if (name[0] == '.') continue;
      if (++seen > registry_scan_cap) return false;
      std::uint64_t dev = 0, ino = 0;
      std::int64_t pid = 0;
      std::size_t nb = 0;
      struct stat st {};
      entry_fields fl;
      if (parse_name(name, dev, ino, pid) && read_entry(dir, name, buf, nb, st) &&
          parse_fields(buf, nb, fl) && fl.pid == pid)
        f(name, dev, ino, fl, st);
    }
  }
  return true;
}

}  // namespace registry_impl

/// The registry directory: KREX_DEVICE_REGISTRY (an absolute path without
/// '..'), else default_device_registry. "" (with `why`) if the variable is invalid.
KREX_DETAIL_COLD inline std::string device_registry_dir(std::string& why) {
  const char* env = std::getenv("KREX_DEVICE_REGISTRY");  // NOLINT(concurrency-mt-unsafe)
  std::string d = env != nullptr && *env != '\0' ? env : default_device_registry;
  if (d[0] != '/' || d.find("/..") != std::string::npos) {
    why = cat({"KREX_DEVICE_REGISTRY ", d, " is not an absolute path without '..'"});
    return {};
  }
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d;
}

/// The guardian's sweep: removes the registry entries of segment `n`'s
/// tenants that are dead (positive evidence) or unjudged and expired, in the
/// directory of every device `n` tracks, at most registry_scan_cap names
/// each. Needs the link a tenant of this process made (device_entry);
/// nothing without one. Returns the entries removed. Async-signal-safe.
KREX_DETAIL_COLD inline unsigned sweep_segment_entries(const node_state& n) noexcept {
  const registry_impl::link* l = nullptr;
  for (const registry_impl::link& x : registry_impl::links)
    if (x.node.load() == static_cast<const void*>(&n)) l = &x;
  if (l == nullptr) return 0;
  const std::uint64_t pidns = as_safe::pid_namespace();
  const std::int64_t now = registry_impl::realtime_ns();
  unsigned removed = 0;
  for (const device_state& dev : n.devices) {
    const std::uint64_t key = dev.key.load();
    if (key == 0) continue;
    char path[sizeof l->root + 24];
    std::size_t len = 0;
    for (; l->root[len] != '\0'; ++len) path[len] = l->root[len];
    path[len++] = '/';
    registry_impl::key_hex(key, path + len);
    const int dir = ::open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0) continue;
    registry_impl::visit_entries(
        dir, [&](const char* name, std::uint64_t sdev, std::uint64_t sino,
                 const registry_impl::entry_fields& f, const struct stat& st) noexcept {
          if (sdev != l->dev || sino != l->ino ||
              registry_impl::classify(f, st, pidns, now) != registry_impl::verdict::dead)
            return;
          registry_impl::remove_if_same(dir, name, st.st_ino);
          ++removed;
        });
    ::close(dir);
  }
  return removed;
}

/// This tenant's entry under its device's key: made at join, removed at
/// leave. Never throws: where the registry cannot be used, available() is
/// false and why() says why (the split check is off for this tenant).
class device_entry {
 public:
  device_entry() = default;
  /// Registers this process as a tenant of the segment file `segment`
  /// (its fstat: device and inode) at `path`, on the device with `key`.
  /// `node`: the segment's mapping, for its guardian's sweep (may be null).
  KREX_DETAIL_COLD device_entry(std::uint64_t key, const struct stat& segment, const std::string& path,
               const void* node = nullptr) {
    try {
      const std::string root = device_registry_dir(m_why);
      if (root.empty()) return;
      const int top = registry_impl::open_dir(root, m_why);
      if (top < 0) return;
      ::close(top);
      m_dir = cat({root, "/", registry_impl::key_text(key)});
      const int dir = registry_impl::open_dir(m_dir, m_why);
      if (dir < 0) return;
      m_dir_fd = dir;
      m_dev = static_cast<std::uint64_t>(segment.st_dev);
      m_ino = static_cast<std::uint64_t>(segment.st_ino);
      m_name = cat({registry_impl::entry_prefix(m_dev, m_ino), ::getpid()});
      m_text = cat({::getpid(), " ", self_start_time(), " ", ::geteuid(), " ",
                    as_safe::pid_namespace(), "\n", path, "\n"});
      // A file under this name is a dead process's of the same pid (ours to replace).
      ::unlinkat(dir, m_name.c_str(), 0);
      m_registered.store(write_entry());
      if (!m_registered.load()) {
        ::close(m_dir_fd);
        m_dir_fd = -1;
        return;
      }
      m_last_beat.store(now_ns());
      registry_impl::add_link(node, m_dev, m_ino, root);
    } catch (...) {
      m_registered.store(false);  // allocation only; the check is off
    }
  }
  device_entry(const device_entry&) = delete;
  device_entry& operator=(const device_entry&) = delete;
  ~device_entry() {
    remove();
    if (m_dir_fd >= 0) ::close(m_dir_fd);
  }

  bool available() const noexcept { return m_registered.load(); }
  const std::string& why() const noexcept { return m_why; }

  /// Removes the entry (leave). Idempotent.
  void remove() noexcept {
    if (!m_registered.load()) return;  // never locks in a forked child (forget())
    std::lock_guard<std::mutex> hold(m_mu);
    if (!m_registered.exchange(false)) return;
    ::unlinkat(m_dir_fd, m_name.c_str(), 0);
  }
  /// A forked child's copy: the entry is the parent's, left alone.
  void forget() noexcept { m_registered.store(false); }

  /// The tenant's heartbeat (its agent thread, often): every
  /// registry_beat_ns, refreshes the entry's mtime, which is how readers
  /// that cannot judge this pid (another pid namespace) know it is alive;
  /// writes the entry again if a sweep removed it.
  void beat(std::uint64_t now) noexcept {
    if (!m_registered.load() || now - m_last_beat.load() < registry_beat_ns) return;
    m_last_beat.store(now);
    std::lock_guard<std::mutex> hold(m_mu);
    if (!m_registered.load()) return;
    if (::utimensat(m_dir_fd, m_name.c_str(), nullptr, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT)
      (void)write_entry();
  }

  /// The other segments with live tenants on this device, each once. Entries
  /// of this segment file, of dead tenants, forged and unreadable ones are
  /// skipped; dead ones are removed where this user may. A scan costs ~10 us
  /// (at most registry_scan_cap entries are read), so its answer is kept
  /// while the directory is unchanged (one fstat), for at most
  /// registry_recheck_ns, judged only once the directory's last change is
  /// older than file times' resolution (a tick).
  std::vector<other_segment> others() const {
    if (!m_registered.load()) return {};
    struct stat st {};
    const bool listed = ::fstat(m_dir_fd, &st) == 0;
    const std::int64_t now = registry_impl::realtime_ns();
    const std::uint64_t mono = now_ns();
    const std::int64_t changed = registry_impl::mtime_ns(st);
    const bool settled = listed && now - changed > 20'000'000;
    if (settled && m_cache_at != 0 && m_cache_mtime == changed && m_cache_size == st.st_size &&
        mono - m_cache_at < registry_recheck_ns)
      return m_cache;
    m_cache = scan();
    m_cache_at = settled ? mono : 0;
    m_cache_mtime = changed;
    m_cache_size = st.st_size;
    return m_cache;
  }

  /// What the last scan could not do ("" when it read every entry).
  const std::string& note() const noexcept { return m_note; }

 private:
  bool write_entry() noexcept {
    const int fd = ::openat(m_dir_fd, m_name.c_str(),
                            O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
      try {
        m_why = cat({m_dir, "/", m_name, ": ", std::system_category().message(errno)});
      } catch (...) {
      }
      return false;
    }
    ::fchmod(fd, 0644);
    const bool written =
        ::write(fd, m_text.data(), m_text.size()) == static_cast<ssize_t>(m_text.size());
    ::close(fd);
    if (!written) ::unlinkat(m_dir_fd, m_name.c_str(), 0);
    return written;
  }

  std::vector<other_segment> scan() const {
    std::vector<other_segment> out;
    std::vector<std::string> seen;  // the segment (entry prefix) of each out[i]
    const int dir = ::openat(m_dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return out;
    const std::uint64_t pidns = as_safe::pid_namespace();
    const std::int64_t now = registry_impl::realtime_ns();
    const std::int64_t self = ::getpid();
    // This segment's entries (siblings) are read only to sweep, every 5 s.
    const std::uint64_t mono = now_ns();
    const bool own_too = mono >= m_own_sweep_at;
    if (own_too) m_own_sweep_at = mono + 5 * registry_recheck_ns;
    const bool all = registry_impl::visit_entries(
        dir, [&](const char* name, std::uint64_t dev, std::uint64_t ino,
                 const registry_impl::entry_fields& f, const struct stat& st) {
          const bool own = dev == m_dev && ino == m_ino;
          if ((own && !own_too) || (own && f.pid == self)) return;
          const registry_impl::verdict v = registry_impl::classify(f, st, pidns, now);
          if (v == registry_impl::verdict::dead)
            registry_impl::remove_if_same(dir, name, st.st_ino);
          if (v != registry_impl::verdict::live || own) return;
          // One segment file is named by its device and inode: the prefix.
          const std::string seg(name, static_cast<std::size_t>(std::strrchr(name, '-') - name));
          other_segment* o = nullptr;
          for (std::size_t i = 0; i < out.size() && o == nullptr; ++i)
            if (seen[i] == seg) o = &out[i];
          if (o == nullptr) {
            out.push_back({std::string(f.path, f.path_len), {}, false});
            seen.push_back(seg);
            o = &out.back();
          }
          o->pids.push_back(static_cast<int>(f.pid));
          o->other_pidns = o->other_pidns || pidns == 0 || f.ns != pidns;
        });
    ::close(dir);
    m_note = all ? std::string()
                 : cat({"split segments: the device registry ", m_dir, " holds more than ",
                        registry_scan_cap,
                        " entries; only that many were read, so another segment on this device "
                        "may have gone unreported (entries of live tenants, or planted ones: their "
                        "owner or root can remove them)"});
    return out;
  }

  std::string m_dir;
  std::string m_name;
  std::string m_text;  // the entry's content (written again by beat() if removed)
  std::string m_why;
  std::uint64_t m_dev = 0;
  std::uint64_t m_ino = 0;
  std::atomic<bool> m_registered{false};
  std::atomic<std::uint64_t> m_last_beat{0};
  std::mutex m_mu;    // remove() against beat()'s rewrite
  int m_dir_fd = -1;  // the device's directory
  // others(): the last answer, when it was taken (now_ns; 0: not kept) and
  // the directory's mtime and size then; the last scan's note.
  mutable std::vector<other_segment> m_cache;
  mutable std::uint64_t m_cache_at = 0;
  mutable std::int64_t m_cache_mtime = 0;
  mutable off_t m_cache_size = 0;
  mutable std::string m_note;
  mutable std::uint64_t m_own_sweep_at = 0;  // now_ns of the next sweep of this segment's entries
};

}  // namespace krex::detail
