// SPDX-License-Identifier: Apache-2.0
#pragma once

// Where the cgroup hierarchies are mounted, which cgroup this process is in,
// where the krex root goes, and the small file helpers the freezer uses.
// Every file access goes through krex::detail::sys() so tests can inject
// failures.

#include <krex/detail/sys.hpp>
#include <krex/error.hpp>

#include <linux/magic.h>
#include <sys/statfs.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace krex::detail::cgroup {

/// Reads a whole (small) control file into `out`. Returns 0 or an errno value.
inline int read_file(const std::string& path, std::string& out) { return read_small_file(path, out); }

/// Writes `data` to an existing control file in one write(2), as cgroupfs
/// requires. Returns 0 or an errno value.
inline int write_file(const std::string& path, const std::string& data) {
  const int fd = sys().open(path.c_str(), O_WRONLY, 0);
  if (fd < 0) return errno;
  ssize_t n;
  do n = sys().write(fd, data.data(), data.size());
  while (n < 0 && errno == EINTR);
  const int e = n < 0 ? errno : (static_cast<size_t>(n) != data.size() ? EIO : 0);
  // cgroupfs may report a failed write at close.
  if (sys().close(fd) < 0 && e == 0) return errno;
  return e;
}

/// Opens `path` with `flags` only to learn whether it is there and permitted.
inline int probe_open(const std::string& path, int flags) {
  const int fd = sys().open(path.c_str(), flags, 0);
  if (fd < 0) return errno;
  sys().close(fd);
  return 0;
}

/// mkdir that accepts an existing directory. Returns 0 or an errno value.
inline int make_dir(const std::string& path) {
  if (sys().mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return 0;
  return errno;
}

/// One line of /proc/self/mountinfo that is a cgroup mount.
struct mount {
  std::string root;        ///< the hierarchy path mounted ("/" normally)
  std::string point;       ///< where it is mounted
  bool v2 = false;         ///< cgroup2 (else cgroup v1)
  std::string super_opts;  ///< v1: the controllers, e.g. "rw,freezer"
};

/// One line of /proc/self/cgroup: "<id>:<controllers>:<path>".
struct membership {
  std::string controllers;  ///< empty for the v2 line "0::"
  std::string path;         ///< relative to the hierarchy (or cgroup namespace) root
};

// mountinfo escapes ' ', '\t', '\n' and '\\' as \ooo.
inline std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto oct = [&](size_t k, char hi) { return s[k] >= '0' && s[k] <= hi; };
    if (s[i] == '\\' && i + 3 < s.size() && oct(i + 1, '3') && oct(i + 2, '7') && oct(i + 3, '7')) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

inline std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(b, i - b));
      b = i + 1;
    }
  return out;
}

/// The cgroup mounts listed in a mountinfo text.
KREX_DETAIL_COLD inline std::vector<mount> parse_mountinfo(const std::string& text) {
  std::vector<mount> out;
  for (const std::string& line : split(text, '\n')) {
    const std::vector<std::string> f = split(line, ' ');
    size_t dash = 0;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash < 6 || dash + 1 >= f.size()) continue;
    const std::string& type = f[dash + 1];
    if (type != "cgroup" && type != "cgroup2") continue;
    mount m;
    m.root = unescape(f[3]);
    m.point = unescape(f[4]);
    m.v2 = type == "cgroup2";
    m.super_opts = dash + 3 < f.size() ? f[dash + 3] : "";
    out.push_back(m);
  }
  return out;
}

KREX_DETAIL_COLD inline std::vector<membership> parse_proc_cgroup(const std::string& text) {
  std::vector<membership> out;
  for (const std::string& line : split(text, '\n')) {
    const size_t a = line.find(':');
    if (a == std::string::npos) continue;
    const size_t b = line.find(':', a + 1);
    if (b == std::string::npos) continue;
    out.push_back({line.substr(a + 1, b - a - 1), line.substr(b + 1)});
  }
  return out;
}

inline bool has_option(const std::string& opts, const std::string& name) {
  const std::vector<std::string> all = split(opts, ',');
  return std::find(all.begin(), all.end(), name) != all.end();
}

/// The mount of the v2 hierarchy, or of the v1 hierarchy carrying `freezer`.
inline const mount* find_mount(const std::vector<mount>& ms, bool v2) {
  for (const mount& m : ms)
    if (m.v2 == v2 && (v2 || has_option(m.super_opts, "freezer"))) return &m;
  return nullptr;
}

/// The membership line of that hierarchy ("0::" for v2, "…freezer…" for v1).
inline const membership* find_membership(const std::vector<membership>& cs, bool v2) {
  for (const membership& c : cs)
    if (v2 ? (c.controllers.empty()) : has_option(c.controllers, "freezer")) return &c;
  return nullptr;
}

/// Filesystem path of hierarchy path `rel` under mount `m`; "" if `rel` lies
/// outside what is mounted there (another cgroup namespace, a bind mount of a
/// subtree that does not contain it).
inline std::string to_fs_path(const mount& m, const std::string& rel) {
  if (rel.empty() || rel.front() != '/' || rel.compare(0, 4, "/../") == 0 || rel == "/..")
    return {};
  std::string tail;
  if (m.root == "/") {
    tail = rel;
  } else if (rel == m.root) {
    tail = "/";
  } else if (rel.compare(0, m.root.size(), m.root) == 0 && rel[m.root.size()] == '/') {
    tail = rel.substr(m.root.size());
  } else {
    return {};
  }
  std::string out = m.point;
  if (tail != "/") out += tail;
  return out;
}

/// True if the last component of `p` is "t<digits>" (a krex leaf name).
inline bool is_leaf_name(const std::string& p) {
  const size_t s = p.rfind('/');
  const std::string last = s == std::string::npos ? p : p.substr(s + 1);
  if (last.size() < 2 || last.size() > 11 || last[0] != 't') return false;
  for (size_t i = 1; i < last.size(); ++i)
    if (last[i] < '0' || last[i] > '9') return false;
  return true;
}

/// The default krex root for a process whose cgroup is at filesystem path
/// `own`: the enclosing krex root if `own` is ".../krex/t<N>" or
/// ".../krex/<segment>/t<N>", else own + "/krex".
KREX_DETAIL_COLD inline std::string derive_root(const std::string& own) {
  if (is_leaf_name(own)) {
    const auto named_krex = [](const std::string& p) {
      const size_t s = p.rfind('/');
      return s != std::string::npos && p.compare(s + 1, std::string::npos, "krex") == 0;
    };
    std::string parent = own.substr(0, own.rfind('/'));
    if (named_krex(parent)) return parent;
    const size_t s = parent.rfind('/');
    if (s != std::string::npos && s > 0) {
      std::string grandparent = parent.substr(0, s);
      if (named_krex(grandparent)) return grandparent;
    }
  }
  return own == "/" ? "/krex" : cat({own, "/krex"});
}

/// The filesystem magic of `path`, or of its nearest existing ancestor.
/// Returns 0 and sets `err` when even "/" cannot be examined.
inline long fs_magic(std::string path, int& err) {
  struct statfs st {};
  for (;;) {
    if (::statfs(path.c_str(), &st) == 0) return static_cast<long>(st.f_type);
    if (errno != ENOENT || path.empty() || path == "/") break;
    const size_t s = path.rfind('/');
    path = s == 0 ? "/" : path.substr(0, s);
  }
  err = errno;
  return 0;
}

/// Where this process stands in one hierarchy.
struct location {
  const mount* m = nullptr;  ///< null: the hierarchy is not mounted
  std::string own;           ///< filesystem path of this process's cgroup ("" if not visible)
};

/// This process's mounts and memberships, read once.
struct self_view {
  std::vector<mount> mounts;
  std::vector<membership> groups;
  int err = 0;  ///< errno from reading /proc/self/{mountinfo,cgroup}
  const char* failed = nullptr;

  KREX_DETAIL_COLD static self_view read() {
    self_view v;
    std::string text;
    if ((v.err = read_file("/proc/self/mountinfo", text)) != 0) {
      v.failed = "/proc/self/mountinfo";
      return v;
    }
    v.mounts = parse_mountinfo(text);
    if ((v.err = read_file("/proc/self/cgroup", text)) != 0) {
      v.failed = "/proc/self/cgroup";
      return v;
    }
    v.groups = parse_proc_cgroup(text);
    return v;
  }

  KREX_DETAIL_COLD location locate(bool v2) const {
    location l;
    l.m = find_mount(mounts, v2);
    const membership* c = find_membership(groups, v2);
    if (l.m && c) l.own = to_fs_path(*l.m, c->path);
    return l;
  }
};

/// Sleeps for a polling interval that grows from 100 µs to 1 ms.
class backoff {
 public:
  void pause() {
    std::this_thread::sleep_for(m_step);
    if (m_step < std::chrono::microseconds(1000)) m_step *= 2;
  }

 private:
  std::chrono::microseconds m_step{100};
};

/// "<what> <path>" with errno and hint, as a freeze-step error.
[[noreturn]] KREX_DETAIL_COLD inline void fail(std::string_view what, std::string_view path,
                                               int err, std::string_view hint) {
  // Out of descriptors is this process's limit, not a permission problem.
  if (err == EMFILE || err == ENFILE)
    throw krex::error(krex::step::freeze, cat({what, " ", path}), err,
                      err == EMFILE ? "this process is at its open-file limit: close descriptors "
                                      "it no longer needs, or raise it (ulimit -n)"
                                    : "the system is out of open files (fs.file-max)");
  throw krex::error(krex::step::freeze, cat({what, " ", path}), err, std::string(hint));
}

}  // namespace krex::detail::cgroup
