// SPDX-License-Identifier: Apache-2.0
#pragma once

// The node segment: one file per node, layout version and security domain
// (`/dev/shm/krex-L5-u1000-krex`), holding exactly one node_state at offset
// 0 and nothing else — no allocator, no named objects, no lock a dead process
// could hold.
//
// Creation is crash-safe: the creator builds the whole segment under a
// temporary name (O_EXCL, exact mode whatever the umask, space reserved with
// posix_fallocate so a full /dev/shm is an error and never a SIGBUS, every
// byte initialized, `ready` stored last), then publishes it with link(2). A
// file under the final name is therefore complete or not a krex segment at
// all: nobody ever waits for another process's initialization. A creator
// killed at any point leaves at most a temporary file, which the next
// creator (or krexctl clean) removes.
//
// Joining trusts nothing it finds: the file checks of segment_file.hpp, then
// its size, every header field and validate() of the node state, before the
// first use. Every problem is a krex::error(step::segment) naming the path,
// what was found and what to do.

#include <krex/detail/layout.hpp>
#include <krex/detail/segment/segment_file.hpp>
#include <krex/detail/segment/validate.hpp>
#include <krex/error.hpp>
#include <krex/options.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

namespace krex::detail {

static_assert(offsetof(node_state, magic) == 0 && offsetof(node_state, layout) == 8,
              "magic and layout open every layout: any build must be able to read them");
inline constexpr std::size_t segment_size = sizeof(node_state);

/// Full segment file name for `o`: layout version, security domain, base
/// name, e.g. "krex-L5-u1000-krex".
inline std::string segment_name(const options& o) {
  return segment_file_name(o.segment(), segment_domain::of(o.access()));
}

/// Why `n` (a file of `file_size` bytes, at least segment_size) is not a
/// complete node state of this build: the header fields, then validate().
/// Empty when it can be used.
KREX_DETAIL_COLD inline std::vector<std::string> header_problems(const node_state& n, std::uint64_t file_size) {
  std::vector<std::string> out;
  const auto bad = [&](const std::string& what, std::uint64_t v, std::uint64_t want) {
    out.push_back(cat({what, " = ", v, " (expected ", want, ")"}));
  };
  if (n.ready.load(std::memory_order_acquire) != segment_ready)
    out.push_back(cat({"it was never completely initialized (ready = ", n.ready.load(), ")"}));
  if (n.size.load() != file_size) bad("header size", n.size.load(), file_size);
  return out;
}

/// Checks the first bytes of a found file (its size from fstat): empty, too
/// short, not a krex segment, another layout, another size. Throws
/// krex::error(step::segment). `head` holds min(size, 12) bytes.
KREX_DETAIL_COLD inline void check_head(const segment_id& id, const unsigned char* head, std::uint64_t size) {
  const std::string path = id.path();
  const std::string hint = remove_hint(id, true);
  if (size == 0)
    throw error(step::segment,
                cat({"segment ", path,
                     " is an empty file (0 bytes): not a krex segment (a krex "
                     "creator publishes its segment only once complete)"}),
                0, hint);
  std::uint64_t magic = 0;
  std::uint32_t layout = 0;
  if (size >= 8) std::memcpy(&magic, head, 8);
  if (size < 12 || magic != segment_magic)
    throw error(step::segment,
                cat({"segment ", path, " is not a krex segment (", size, " bytes, ",
                     size < 12 ? "too short" : "no krex magic number", ")"}),
                0, hint);
  std::memcpy(&layout, head + 8, 4);
  if (layout != layout_version)
    throw error(step::segment,
                cat({"segment ", path, " has layout version ", layout,
                     " but this build of krex uses ", layout_version}),
                0,
                cat({"processes built against different krex versions cannot share a segment; "
                     "rebuild them against one version, or ",
                     hint}));
  if (size != segment_size)
    throw error(step::segment,
                cat({"segment ", path, " is ", size, " bytes, but a layout ", layout_version,
                     " segment is ", segment_size, " bytes"}),
                0, hint);
}

/// Throws krex::error(step::segment) for the first problems of a full image.
KREX_DETAIL_COLD inline void check_image(const segment_id& id, const node_state& n, std::uint64_t size) {
  std::vector<std::string> p = header_problems(n, size);
  const bool header = !p.empty();
  if (!header) p = validate(n);
  if (p.empty()) return;
  throw error(step::segment,
              cat({"segment ", id.path(), header ? " is unusable (" : " holds a corrupt node state (",
                   p[0],
                   p.size() > 1 ? cat({", and ", p.size() - 1, " more problem(s)"}) : std::string(),
                   ")"}),
              0, remove_hint(id, true));
}

/// The first bytes of an open file, whatever its size.
inline std::uint64_t read_head(int fd, unsigned char (&head)[12]) {
  std::memset(head, 0, sizeof head);
  const ssize_t r = ::pread(fd, head, sizeof head, 0);
  return r < 0 ? 0 : static_cast<std::uint64_t>(r);
}

/// A copy of an existing segment's node state, read with pread: nothing is
/// mapped, so a hostile, truncated or sparse file can neither SIGBUS the
/// reader nor change under it. Runs every check a joining tenant runs, except
/// validate() (krexctl reports its findings itself). Throws like segment.
inline std::unique_ptr<node_state> read_segment(const segment_id& id) {
  const found_file f = open_segment_file(id, false);
  unsigned char head[12];
  (void)read_head(f.fd.get(), head);
  check_head(id, head, static_cast<std::uint64_t>(f.st.st_size));
  std::unique_ptr<node_state> n(new node_state());
  std::size_t done = 0;
  auto* bytes = reinterpret_cast<unsigned char*>(n.get());
  while (done < segment_size) {
    const ssize_t r = ::pread(f.fd.get(), bytes + done, segment_size - done,
                              static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0)
      throw error(step::segment, cat({"cannot read segment ", id.path()}), r < 0 ? errno : EIO,
                  "it shrank while being read");
    done += static_cast<std::size_t>(r);
  }
  const std::vector<std::string> p = header_problems(*n, segment_size);
  if (!p.empty())
    throw error(step::segment, cat({"segment ", id.path(), " is unusable (", p[0], ")"}), 0,
                remove_hint(id, true));
  return n;
}

class segment {
 public:
  /// Joins the node segment named by `o`, creating it if there is none.
  /// Throws krex::error(step::segment) if the file found is not a complete
  /// segment of this build and domain, or if it cannot be created (a full
  /// /dev/shm: ENOSPC).
  explicit segment(const options& o) : segment(joined_segment_id(o), true) {}

  /// Opens segment `id`, creating it if `create`; without `create`, a missing
  /// segment throws krex::error with code ENOENT.
  KREX_DETAIL_COLD segment(segment_id id, bool create) : m_id(std::move(id)) {
    // A creator killed between publishing and removing its temporary name
    // leaves a temporary file behind a complete segment: any joiner removes it.
    if (create) (void)remove_dead_temp_files(m_id);
    // Each round either maps a file or sees the name change under it (a
    // creator that won the race, a file removed meanwhile); only a process
    // removing and recreating the segment in a loop can exhaust the rounds.
    for (int round = 0; round < 8; ++round) {
      try {
        map_existing(open_segment_file(m_id, true));
        return;
      } catch (const error& e) {
        if (e.code() != ENOENT || !create) throw;
      }
      create_and_publish();
    }
    throw error(step::segment,
                cat({"segment ", m_id.path(), " kept appearing and disappearing while joining"}), 0,
                "something removes it in a loop: stop it, or choose another KREX_SEGMENT");
  }

  segment(const segment&) = delete;
  segment& operator=(const segment&) = delete;
  ~segment() {
    if (m_node != nullptr) ::munmap(m_node, segment_size);
  }

  node_state& node() const noexcept { return *m_node; }
  /// The file name (in its directory, /dev/shm unless KREX_SHM_DIR).
  const std::string& name() const noexcept { return m_id.name; }
  /// Why the segment is not in /dev/shm (empty: it is where it was asked to be).
  const std::string& moved_because() const noexcept { return m_id.moved_because; }
  std::string path() const { return m_id.path(); }
  /// fstat of the file this process mapped (its device and inode are what
  /// members' /proc/<pid>/maps show: detail/identity.hpp).
  const struct stat& file_stat() const noexcept { return m_stat; }

 private:
  KREX_DETAIL_COLD void map_existing(found_file f) {
    unsigned char head[12];
    (void)read_head(f.fd.get(), head);
    check_head(m_id, head, static_cast<std::uint64_t>(f.st.st_size));
    // Pages never allocated (a sparse file) would be a SIGBUS on first touch
    // in a full tmpfs: allocate them now, where a failure is an error.
    if (static_cast<std::uint64_t>(f.st.st_blocks) * 512 < segment_size)
      if (const int e = ::posix_fallocate(f.fd.get(), 0, static_cast<off_t>(segment_size)))
        throw error(step::segment, cat({"cannot allocate the sparse segment ", m_id.path()}), e,
                    space_hint());
    void* p = ::mmap(nullptr, segment_size, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd.get(), 0);
    if (p == MAP_FAILED)
      throw error(step::segment, cat({"cannot map segment ", m_id.path()}), errno);
    auto* n = static_cast<node_state*>(p);
    try {
      check_image(m_id, *n, segment_size);
    } catch (...) {
      ::munmap(p, segment_size);
      throw;
    }
    m_node = n;
    m_stat = f.st;
  }

  // Builds the segment under a temporary name and links it to the final one.
  // Whether it published or found the final name taken (or its temporary
  // file removed), the caller's next round maps the file by its final name.
  KREX_DETAIL_COLD void create_and_publish() {
    std::string tmp = cat({m_id.dir, "/", temp_file_name(m_id.name)});
    ::unlink(tmp.c_str());  // this very process's, from an earlier round
    unique_fd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    // The name is predictable: another user may have planted a file there
    // that this process cannot remove. Then a name with a random nonce.
    std::string planted;
    for (int tries = 0; fd.get() < 0 && errno == EEXIST && tries < 8; ++tries) {
      if (planted.empty()) planted = tmp;
      std::uint32_t nonce = 0;
      if (::getrandom(&nonce, sizeof nonce, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof nonce))
        nonce = static_cast<std::uint32_t>(now_ns());
      tmp = cat({m_id.dir, "/", temp_file_name(m_id.name, nonce | 1U)});
      fd = unique_fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    }
    if (fd.get() < 0) {
      const int e = errno;
      throw error(step::segment, cat({"cannot create segment ", tmp}), e,
                  e == ENOSPC || e == EDQUOT ? space_hint()
                  : e == EEXIST
                      ? cat({"temporary names in ", m_id.dir,
                             " are taken by files this user cannot "
                             "remove (",
                             planted,
                             " and 8 more): remove them as root, or set "
                             "KREX_SHM_DIR to a directory only this user can write"})
                      : cat({"check that ", m_id.dir, " is writable"}));
    }
    struct unlink_guard {
      const std::string& path;
      ~unlink_guard() { ::unlink(path.c_str()); }
    } guard{tmp};
    // Exact mode and group whatever the umask and the directory.
    if ((m_id.domain.group && ::fchown(fd.get(), static_cast<uid_t>(-1), m_id.domain.gid) != 0) ||
        ::fchmod(fd.get(), m_id.domain.mode()) != 0)
      throw error(step::segment, cat({"cannot set the mode of segment ", tmp}), errno);
    if (const int e = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(segment_size)))
      throw error(step::segment,
                  cat({"cannot reserve ", segment_size, " bytes for segment ", m_id.path()}),
                  e, space_hint());
    void* p = ::mmap(nullptr, segment_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    if (p == MAP_FAILED) throw error(step::segment, cat({"cannot map segment ", tmp}), errno);
    auto* n = new (p) node_state();  // value-initialized: every byte zero
    n->magic.store(segment_magic, std::memory_order_relaxed);
    n->layout.store(layout_version, std::memory_order_relaxed);
    n->size.store(segment_size, std::memory_order_relaxed);
    n->n_devices.store(max_devices, std::memory_order_relaxed);
    n->n_tenants.store(max_tenants, std::memory_order_relaxed);
    n->device_size.store(sizeof(device_state), std::memory_order_relaxed);
    n->tenant_size.store(sizeof(tenant_slot), std::memory_order_relaxed);
    n->creator_pid.store(static_cast<std::int32_t>(::getpid()), std::memory_order_relaxed);
    n->ready.store(segment_ready, std::memory_order_release);
    // Publish: link(2) fails with EEXIST if another creator won, and never
    // replaces a file (rename would).
    if (::link(tmp.c_str(), m_id.path().c_str()) != 0) {
      const int e = errno;
      ::munmap(p, segment_size);
      if (e == EEXIST || e == ENOENT) return;  // theirs won / our temp was removed
      throw error(step::segment, cat({"cannot publish segment ", m_id.path()}), e,
                  cat({"check that ", m_id.dir, " is writable and supports hard links"}));
    }
    // Published. The mapping goes, and the caller maps the file again by its
    // final name: /proc/<pid>/maps must name the segment as every other
    // member's does (signal freezing verifies members by it), not the
    // temporary name that is about to be unlinked.
    ::munmap(p, segment_size);
  }

  std::string space_hint() const {
    return cat({"free space in ", m_id.dir, " (df -h ", m_id.dir,
                "; krexctl clean --all removes stale segments), or set KREX_SHM_DIR to another tmpfs "
                "directory"});
  }

  segment_id m_id;
  node_state* m_node = nullptr;
  struct stat m_stat {};  // of the mapped file
};

}  // namespace krex::detail
