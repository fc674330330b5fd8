// SPDX-License-Identifier: Apache-2.0
#pragma once

// Helpers for tests of the segment file: images of a real segment, files
// planted under a segment's name, and joins run in a child process with a
// deadline (a join that hangs is a finding, not a hung test run).

#include <krex/region.hpp>

#include "krex_test.hpp"
#include "proc_util.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

namespace krex_test {

/// The bytes of a freshly created segment, made by the real creator (in
/// /dev/shm under a unique name, removed again).
inline std::string valid_image() {
  const std::string base = unique_name("img");
  const krex::options o = krex::options{}.segment(base);
  std::string out;
  {
    krex::detail::segment s{o};
    out.assign(reinterpret_cast<const char*>(&s.node()), krex::detail::segment_size);
  }
  krex::remove_segment(o);
  return out;
}

/// Writes `bytes` to a new file `path` with exactly `mode`; false on failure.
inline bool plant_file(const std::string& path, const std::string& bytes, mode_t mode) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
  if (fd < 0) return false;
  bool ok = ::fchmod(fd, mode) == 0;
  std::size_t done = 0;
  while (ok && done < bytes.size()) {
    const ssize_t r = ::write(fd, bytes.data() + done, bytes.size() - done);
    ok = r > 0;
    if (ok) done += static_cast<std::size_t>(r);
  }
  ::close(fd);
  return ok;
}

/// Patches `value` (sizeof(T) bytes) at `offset` into `image`.
template <class T>
void patch(std::string& image, std::size_t offset, T value) {
  std::memcpy(&image[offset], &value, sizeof value);
}

/// How a join in a child process ended.
struct join_result {
  enum kind { joined, krex_error, other_error, crashed, timed_out } how = timed_out;
  int step = -1;    ///< krex::step of the error
  int code = 0;     ///< its errno
  std::string what;  ///< its message
};

struct join_board {
  std::atomic<int> how;
  std::atomic<int> step;
  std::atomic<int> code;
  char what[2048];
};

inline const char* to_string(join_result::kind k) {
  switch (k) {
    case join_result::joined: return "joined";
    case join_result::krex_error: return "krex::error";
    case join_result::other_error: return "other exception";
    case join_result::crashed: return "crashed (signal)";
    case join_result::timed_out: return "timed out";
  }
  return "?";
}

/// Joins (constructs a krex::tenant with `o`, then leaves) in a forked child,
/// with KREX_SHM_DIR set to `shm_dir` there if not empty; waits `deadline`.
inline join_result try_join(const krex::options& o, std::chrono::milliseconds deadline,
                            const std::string& shm_dir = {}) {
  shared<join_board> b;
  b->how.store(-1);
  child c = spawn([&] {
    if (!shm_dir.empty()) ::setenv("KREX_SHM_DIR", shm_dir.c_str(), 1);
    try {
      krex::tenant t{o};
      b->how.store(join_result::joined);
    } catch (const krex::error& e) {
      b->step.store(static_cast<int>(e.where()));
      b->code.store(e.code());
      std::strncpy(b->what, e.what(), sizeof b->what - 1);
      b->how.store(join_result::krex_error);
    } catch (const std::exception& e) {
      std::strncpy(b->what, e.what(), sizeof b->what - 1);
      b->how.store(join_result::other_error);
    }
    return 0;
  });
  const auto status = c.wait(deadline);
  join_result r;
  if (!status) return r;  // killed at the deadline
  if (!WIFEXITED(*status) || b->how.load() < 0) {
    r.how = join_result::crashed;
    r.what = WIFSIGNALED(*status) ? "signal " + std::to_string(WTERMSIG(*status)) : "no result";
    return r;
  }
  r.how = static_cast<join_result::kind>(b->how.load());
  r.step = b->step.load();
  r.code = b->code.load();
  r.what = b->what;
  return r;
}

}  // namespace krex_test
