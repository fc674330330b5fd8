// SPDX-License-Identifier: Apache-2.0
#pragma once

// The segment file as found on disk, before anything in it is believed. Any
// local process can create files in /dev/shm, so a file under a segment's
// name is input from a possible adversary: it is opened without following
// symlinks and without blocking, and used only if it is a regular file of
// this security domain (owner, or group in group mode) with exactly the
// domain's mode. Its bytes are checked next (segment.hpp).

#include <krex/detail/layout.hpp>
#include <krex/detail/proc.hpp>
#include <krex/detail/sys.hpp>
#include <krex/error.hpp>
#include <krex/options.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace krex::detail {

inline constexpr const char* default_shm_dir = "/dev/shm";

/// Who may use a segment: user mode, the owner uid and mode 0600; group mode,
/// the group gid and mode 0660 (any member may have created it).
struct segment_domain {
  bool group = false;
  uid_t uid = 0;
  gid_t gid = 0;
  mode_t mode() const noexcept { return group ? 0660 : 0600; }
  /// "u1000" or "g1000": the domain part of segment names.
  std::string tag() const {
    return group ? cat({"g", gid}) : cat({"u", uid});
  }
  static segment_domain of(segment_access a) noexcept {
    return {a == segment_access::group, ::geteuid(), ::getegid()};
  }
};

/// Where a segment's file is: `<dir>/krex-L<layout>-<domain>-<base>`.
struct segment_id {
  std::string dir;   ///< shm_dir()
  std::string base;  ///< options::segment()
  std::string name;  ///< full file name
  segment_domain domain;
  /// Set when the default directory's name was taken by a file of another
  /// owner and the segment moved to this domain's private directory (see
  /// segment_id_of): what was found there, for the tenant's notes.
  std::string moved_because;
  std::string path() const { return cat({dir, "/", name}); }
  /// The `krexctl clean` command that removes this segment.
  std::string clean_command() const {
    return cat({"krexctl clean --segment ", base, domain.group ? " --group" : ""});
  }
};

/// "krex-L5-u1000-krex": layout version, security domain, base name.
inline std::string segment_file_name(const std::string& base, const segment_domain& d) {
  return cat({"krex-L", layout_version, "-", d.tag(), "-", base});
}

/// The directory segment files live in: KREX_SHM_DIR, else /dev/shm. A
/// directory others can write to must be sticky (else they could rename
/// our files away); it must be owned by root or by this user. Throws
/// krex::error(step::segment) naming the directory and what is wrong.
KREX_DETAIL_COLD inline std::string shm_dir() {
  // getenv races only with setenv, which a harness does not call while joining.
  const char* env = std::getenv("KREX_SHM_DIR");  // NOLINT(concurrency-mt-unsafe)
  std::string d = env != nullptr && *env != '\0' ? env : default_shm_dir;
  const std::string what = env != nullptr && *env != '\0' ? "KREX_SHM_DIR " : "";
  const auto fail = [&](const std::string& why, int err) {
    throw error(step::segment, cat({"segment directory ", what, d, " ", why}), err,
                "set KREX_SHM_DIR to an absolute path of a tmpfs directory owned by root or "
                "by you, sticky if others can write to it (like /dev/shm), or unset it");
  };
  if (d[0] != '/' || d.find("/../") != std::string::npos ||
      d.compare(d.size() >= 3 ? d.size() - 3 : 0, 3, "/..") == 0)
    fail("is not an absolute path without '..'", 0);
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  struct stat st {};
  if (::stat(d.c_str(), &st) != 0) fail("cannot be used", errno);
  if (!S_ISDIR(st.st_mode)) fail("is not a directory", ENOTDIR);
  if (st.st_uid != 0 && st.st_uid != ::geteuid())
    fail(cat({"belongs to uid ", st.st_uid, ", not to root or you"}), EPERM);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)
    fail("is writable by others but not sticky (others could replace segment files)", EPERM);
  return d;
}

inline std::string user_text(uid_t u);
inline const char* file_type_text(mode_t m);
inline bool owned_by(const struct stat& st, const segment_domain& d);

/// A directory only this user (root: only root) can create files in, on a
/// tmpfs where the system provides one: /run/user/<uid> (systemd-logind's,
/// mode 0700) for a user, /run/krex (made here, mode 0755, under a root-owned
/// /run) for root. Empty where there is none, and for group mode (several
/// users must reach the file: KREX_SHM_DIR names a shared directory then).
KREX_DETAIL_COLD inline std::string private_segment_dir(const segment_domain& d) {
  if (d.group) return {};
  const uid_t me = ::geteuid();
  const auto owned_private = [me](const std::string& p, mode_t others_mask) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == me &&
           (st.st_mode & others_mask) == 0;
  };
  if (me != 0) {
    const std::string p = cat({"/run/user/", me});
    return owned_private(p, 0077) ? p : std::string();
  }
  if (!owned_private("/run", S_IWGRP | S_IWOTH)) return {};
  if (::mkdir("/run/krex", 0755) != 0 && errno != EEXIST) return {};
  return owned_private("/run/krex", S_IWGRP | S_IWOTH) ? "/run/krex" : std::string();
}

/// Where the segment's file for options `o` is named: KREX_SHM_DIR, else
/// /dev/shm (what krexctl and the checks of a found file look at).
KREX_DETAIL_COLD inline segment_id segment_id_of(const options& o) {
  segment_id id;
  id.dir = shm_dir();
  id.base = o.segment();
  id.domain = segment_domain::of(o.access());
  id.name = segment_file_name(id.base, id.domain);
  return id;
}

/// Where a tenant of options `o` joins: segment_id_of(o), except that in the
/// default /dev/shm a name already taken by something this domain would
/// refuse (another user's file, a link, a FIFO: anyone can create names
/// there) moves the segment to the domain's private directory
/// (private_segment_dir). Every process of the domain sees the same squatter
/// and makes the same move, so one local user cannot deny krex to another;
/// the tenant notes it (protection notes), and krexctl still reports the
/// squatter at the default name. Without a private directory the squatter
/// is refused as before, with the error that says what to do.
KREX_DETAIL_COLD inline segment_id joined_segment_id(const options& o) {
  segment_id id = segment_id_of(o);
  const char* env = std::getenv("KREX_SHM_DIR");  // NOLINT(concurrency-mt-unsafe): see shm_dir
  if (env != nullptr && *env != '\0') return id;
  struct stat st {};
  if (::lstat(id.path().c_str(), &st) != 0) return id;
  if (S_ISREG(st.st_mode) && owned_by(st, id.domain)) return id;
  const std::string priv = private_segment_dir(id.domain);
  if (priv.empty()) return id;
  id.moved_because =
      cat({id.path(), " is taken by a ", file_type_text(st.st_mode), " of ", user_text(st.st_uid)});
  id.dir = priv;
  return id;
}

/// "uid 65534 (nobody)", "gid 0 (root)".
inline std::string user_text(uid_t u) {
  passwd pw{};
  passwd* r = nullptr;
  char buf[1024];
  std::string s = cat({"uid ", u});
  if (::getpwuid_r(u, &pw, buf, sizeof buf, &r) == 0 && r != nullptr)
    s += cat({" (", r->pw_name, ")"});
  return s;
}
KREX_DETAIL_COLD inline std::string group_text(gid_t g) {
  group gr{};
  group* r = nullptr;
  char buf[1024];
  std::string s = cat({"gid ", g});
  if (::getgrgid_r(g, &gr, buf, sizeof buf, &r) == 0 && r != nullptr)
    s += cat({" (", r->gr_name, ")"});
  return s;
}
KREX_DETAIL_COLD inline std::string mode_text(mode_t m) {
  char b[8];
  std::snprintf(b, sizeof b, "0%03o", static_cast<unsigned>(m & 07777));
  return b;
}
inline const char* file_type_text(mode_t m) {
  if (S_ISREG(m)) return "regular file";
  if (S_ISDIR(m)) return "directory";
  if (S_ISLNK(m)) return "symbolic link";
  if (S_ISFIFO(m)) return "FIFO";
  if (S_ISSOCK(m)) return "socket";
  return "device";
}

/// True when the file belongs to domain `d` (its uid in user mode, its gid in
/// group mode): the files krexctl clean may remove without --any-owner.
inline bool owned_by(const struct stat& st, const segment_domain& d) {
  return d.group ? st.st_gid == d.gid : st.st_uid == d.uid;
}

/// Why the file described by `st` cannot be a segment of domain `d` ("" if it can).
KREX_DETAIL_COLD inline std::string file_problem(const struct stat& st, const segment_domain& d) {
  if (S_ISREG(st.st_mode) && owned_by(st, d) && (st.st_mode & 07777) == d.mode()) return {};
  return cat({"is a ", file_type_text(st.st_mode), " owned by ", user_text(st.st_uid), ", ",
              group_text(st.st_gid), ", mode ", mode_text(st.st_mode),
              "; a krex segment of this domain must be ",
              d.group ? cat({"a regular file of ", group_text(d.gid), " with mode 0660"})
                      : cat({"a regular file owned by ", user_text(d.uid), " with mode 0600"})});
}

/// What to do about a file that is not a usable segment.
KREX_DETAIL_COLD inline std::string remove_hint(const segment_id& id, bool ours) {
  if (!ours)
    return cat({"krex never uses a file someone else made: find out who made it (ls -l ", id.path(),
                "), then have them or root remove it (root: `", id.clean_command(),
                " --any-owner`), or choose another KREX_SEGMENT"});
  return cat({"once no process uses it, remove it (`", id.clean_command(), "` or rm ", id.path(),
              "), or choose another KREX_SEGMENT"});
}

/// An existing segment file, opened and checked as a file (not yet its bytes).
struct found_file {
  unique_fd fd;
  struct stat st {};
};

/// Opens the segment file of `id` without following a symlink, without
/// blocking (a FIFO cannot hang it) and without creating it, and checks that
/// it is a regular file of the domain with exactly the domain's mode. Throws
/// krex::error(step::segment): code ENOENT when there is no such file (the
/// only case a caller may create it), else naming the path, what was found
/// and what to do.
KREX_DETAIL_COLD inline found_file open_segment_file(const segment_id& id, bool writable) {
  found_file f;
  const std::string path = id.path();
  f.fd = unique_fd(::open(path.c_str(),
                          (writable ? O_RDWR : O_RDONLY) | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
                              O_CLOEXEC));
  if (f.fd.get() < 0) {
    const int e = errno;
    if (e == ENOENT) throw error(step::segment, cat({"no segment ", path}), ENOENT);
    struct stat lst {};
    const bool have = ::lstat(path.c_str(), &lst) == 0;
    if (e == ELOOP && have && S_ISLNK(lst.st_mode))
      throw error(step::segment,
                  cat({"segment ", path, " is a symbolic link (owned by ", user_text(lst.st_uid),
                       "); krex never follows one"}),
                  ELOOP, remove_hint(id, owned_by(lst, id.domain)));
    if (have && !file_problem(lst, id.domain).empty())
      throw error(step::segment, cat({"segment ", path, " ", file_problem(lst, id.domain)}), e,
                  remove_hint(id, owned_by(lst, id.domain)));
    throw error(step::segment, cat({"cannot open segment ", path}), e,
                cat({"check the permissions of ", id.dir, " and of the file"}));
  }
  if (::fstat(f.fd.get(), &f.st) != 0)
    throw error(step::segment, cat({"cannot stat segment ", path}), errno);
  const std::string problem = file_problem(f.st, id.domain);
  if (!problem.empty())
    throw error(step::segment, cat({"segment ", path, " ", problem}), 0,
                remove_hint(id, owned_by(f.st, id.domain)));
  return f;
}

/// Temporary file names of creators: `<name>+tmp-<pid>-<start time>`, or,
/// when that name is taken by a file this process cannot remove (planted by
/// another user: the name is predictable), `...-<start time>-<nonce>` with a
/// random nonce (no segment base name contains a `+`, so no segment is ever
/// taken for one).
inline std::string temp_file_name(const std::string& name, std::uint32_t nonce = 0) {
  return cat({name, "+tmp-", ::getpid(), "-", self_start_time(),
              nonce != 0 ? cat({"-", nonce}) : std::string()});
}

/// If `entry` is a temporary file of segment `name`, its creator's pid and
/// start time.
inline bool parse_temp_name(const std::string& entry, const std::string& name, std::int64_t& pid,
                            std::uint64_t& start) {
  const std::string prefix = cat({name, "+tmp-"});
  if (entry.compare(0, prefix.size(), prefix) != 0) return false;
  std::string rest = entry.substr(prefix.size());
  // An optional third field: the nonce (digits).
  const size_t last = rest.rfind('-');
  if (last != std::string::npos && rest.find('-') != last) {
    const std::string nonce = rest.substr(last + 1);
    if (nonce.empty() || nonce.size() > 10 ||
        nonce.find_first_not_of("0123456789") != std::string::npos)
      return false;
    rest.resize(last);
  }
  const size_t dash = rest.find('-');
  if (dash == 0 || dash == std::string::npos || dash + 1 == rest.size()) return false;
  for (size_t i = 0; i < rest.size(); ++i)
    if (i != dash && (rest[i] < '0' || rest[i] > '9')) return false;
  if (dash > 9 || rest.size() - dash - 1 > 19) return false;
  pid = std::strtoll(rest.c_str(), nullptr, 10);
  start = std::strtoull(rest.c_str() + dash + 1, nullptr, 10);
  return true;
}

/// Removes temporary files that creators of segment `id` left when they
/// died: only regular files of this domain's owner (uid, whatever the mode)
/// whose creating process is gone. Returns the names removed.
KREX_DETAIL_COLD inline std::vector<std::string> remove_dead_temp_files(const segment_id& id) {
  std::vector<std::string> removed;
  DIR* dir = ::opendir(id.dir.c_str());
  if (dir == nullptr) return removed;
  std::vector<std::string> found;
  while (const dirent* e = ::readdir(dir)) {  // NOLINT(concurrency-mt-unsafe): one thread reads
    std::int64_t pid = 0;
    std::uint64_t start = 0;
    if (parse_temp_name(e->d_name, id.name, pid, start) && !alive(pid, start))
      found.emplace_back(e->d_name);
  }
  for (const std::string& n : found) {
    struct stat st {};
    if (::fstatat(::dirfd(dir), n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) continue;
    if (::unlinkat(::dirfd(dir), n.c_str(), 0) == 0) removed.push_back(n);
  }
  ::closedir(dir);
  return removed;
}

}  // namespace krex::detail
