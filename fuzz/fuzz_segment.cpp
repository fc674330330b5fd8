// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: hostile or corrupt node segment images through everything
// that reads the segment outside a tenant's own slot — validate() (what a
// joining tenant checks at attach), the krexctl snapshot and its text/JSON,
// and the recovery paths a tenant or the guardian runs on whatever the
// segment holds (dead-holder recovery, reaping, ticket skipping, sibling
// snapshots). Built only with clang and -DKREX_BUILD_FUZZ=ON (see
// fuzz/CMakeLists.txt); AddressSanitizer and UBSan turn any out-of-bounds
// index into a crash.
//
// Input: one mode byte, then, by mode % 4:
//   0: raw bytes laid over a node state in memory at a 16-bit offset;
//   1: (u32 offset, u32 value) pairs patched into a fresh node state, so that
//      deep fields are reachable with short inputs;
//   2: the bytes are a whole segment file (any length);
//   3: a valid segment file with (u32 offset, u32 value) patches and a
//      length change (first two bytes: signed 16-bit delta).
// Modes 2 and 3 write the file (mode 0600, or 0644 when bit 2 of the mode
// byte is set) into a private directory and open it through the paths
// krexctl and tenants use: read_segment() (krexctl's pread copy) and
// segment(id, false) (a tenant's checked mapping); whatever they accept is
// then exercised like an in-memory image.
// The recovery config is `none`: nothing outside the buffer or the file (no
// cgroup file, no signal) is touched whatever the image says.

#include <krex/detail/guardian/guardian_recover.hpp>
#include <krex/detail/segment/segment.hpp>
#include <krex/detail/steps/drain.hpp>
#include <krex/detail/steps/gate.hpp>
#include <krex/detail/steps/lock.hpp>
#include <krex_tools/status.hpp>

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <krex_tools/status_view.hpp>
#include <memory>
#include <new>
#include <string>

namespace {

namespace kd = krex::detail;

struct image {
  alignas(kd::node_state) unsigned char bytes[sizeof(kd::node_state)];
};

/// A fresh node state as its creator initializes it (segment.hpp).
void init_fresh(unsigned char* bytes) {
  auto* n = new (bytes) kd::node_state();
  n->magic.store(kd::segment_magic);
  n->layout.store(kd::layout_version);
  n->size.store(kd::segment_size);
  n->n_devices.store(kd::max_devices);
  n->n_tenants.store(kd::max_tenants);
  n->device_size.store(sizeof(kd::device_state));
  n->tenant_size.store(sizeof(kd::tenant_slot));
  n->ready.store(kd::segment_ready);
}

void exercise(kd::node_state& n) {
  (void)kd::validate(n);
  const kd::node_view v = kd::read_status(n, "fuzz");
  (void)krex_tools::status::to_json(v);
  (void)krex_tools::status::to_text(v);
  const kd::recovery_config none{};
  for (std::uint32_t d = 0; d < kd::max_devices; ++d) {
    (void)kd::recover_device(n, d, none, false);
    (void)kd::recover_device(n, d, none, true);
  }
  (void)kd::reap_dead_tenants(n, none);
  (void)kd::clean_stale_leaves(n, none, 0);
  // A tenant's view: slot 0 on device 0 (its own indices are always valid;
  // every other one comes from the image).
  kd::member m;
  m.node = &n;
  m.dev = &n.devices[0];
  m.slot = &n.tenants[0];
  m.index = 0;
  m.device = 0;
  m.recovery = &none;
  m.recover = kd::recover_dead_holder;
  kd::skip_abandoned_tickets(m);
  std::vector<kd::sibling> sibs;
  kd::snapshot_siblings(m, sibs);
  for (const kd::sibling& sb : sibs) (void)kd::sibling_gone(m, sb);
  (void)kd::proxy_acks(m, sibs, m.dev->gate.load() | 1U);
  for (std::uint32_t i = 0; i < kd::max_tenants; ++i) (void)kd::reap_if_dead(n, i, &none);
}

void patch_pairs(unsigned char* bytes, std::size_t limit, const std::uint8_t* data,
                 std::size_t size) {
  for (; size >= 8; data += 8, size -= 8) {
    std::uint32_t off, val;
    std::memcpy(&off, data, 4);
    std::memcpy(&val, data + 4, 4);
    off = (off % (limit / 4)) * 4;
    std::memcpy(bytes + off, &val, 4);
  }
}

/// The segment of the file-image modes, in a private directory (removed at
/// exit; never destroyed, so the exit handler can still use it).
const kd::segment_id& file_id() {
  static const kd::segment_id* const id = [] {
    const char* tmp = std::getenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe): one thread
    std::string dir =
        std::string(tmp != nullptr && *tmp == '/' ? tmp : "/tmp") + "/krex-fuzz-XXXXXX";
    if (::mkdtemp(&dir[0]) == nullptr) std::abort();
    auto* i = new kd::segment_id;
    i->dir = dir;
    i->base = "fuzz";
    i->domain = kd::segment_domain::of(krex::segment_access::user);
    i->name = kd::segment_file_name(i->base, i->domain);
    return i;
  }();
  static const int cleanup = std::atexit([] {
    ::unlink(file_id().path().c_str());
    ::rmdir(file_id().dir.c_str());
  });
  (void)cleanup;
  return *id;
}

void through_file(const unsigned char* bytes, std::size_t size, mode_t mode) {
  const kd::segment_id& id = file_id();
  const std::string path = id.path();
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) std::abort();
  if (::fchmod(fd, mode) != 0 || ::write(fd, bytes, size) != static_cast<ssize_t>(size))
    std::abort();
  ::close(fd);
  try {
    const std::unique_ptr<kd::node_state> copy = kd::read_segment(id);
    const kd::node_view v = kd::read_status(*copy, path);
    (void)krex_tools::status::to_json(v);
    (void)krex_tools::status::to_text(v);
  } catch (const krex::error&) {
  }
  try {
    kd::segment s(id, false);
    exercise(s.node());
  } catch (const krex::error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  static std::unique_ptr<image> buf(new image);
  init_fresh(buf->bytes);
  const std::uint8_t mode = data[0];
  ++data;
  --size;
  switch (mode % 4) {
    case 0: {
      if (size < 2) return 0;
      const std::size_t offset = (static_cast<std::size_t>(data[0]) << 8 | data[1]) % sizeof(image);
      data += 2;
      size -= 2;
      const std::size_t n = size < sizeof(image) - offset ? size : sizeof(image) - offset;
      std::memcpy(buf->bytes + offset, data, n);
      exercise(*reinterpret_cast<kd::node_state*>(buf->bytes));
      return 0;
    }
    case 1:
      patch_pairs(buf->bytes, sizeof(kd::node_state), data, size);
      exercise(*reinterpret_cast<kd::node_state*>(buf->bytes));
      return 0;
    case 2: through_file(data, size, (mode & 4U) != 0 ? 0644 : 0600); return 0;
    default: {
      if (size < 2) return 0;
      const auto delta = static_cast<std::int16_t>(data[0] << 8 | data[1]);
      patch_pairs(buf->bytes, sizeof(kd::node_state), data + 2, size - 2);
      std::size_t len = sizeof(image);
      if (delta < 0) len -= static_cast<std::size_t>(-delta) % (len + 1);
      std::string bytes(reinterpret_cast<const char*>(buf->bytes), len);
      if (delta > 0) bytes.append(static_cast<std::size_t>(delta) % 64, '\0');
      through_file(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
                   (mode & 4U) != 0 ? 0644 : 0600);
      return 0;
    }
  }
}
