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
// Input: one mode byte, then
//   mode even: raw bytes laid over the node state at a 16-bit offset;
//   mode odd:  (u32 offset, u32 value) pairs patched into a fresh node state,
//              so that deep fields are reachable with short inputs.
// The recovery config is `none`: nothing outside the buffer (no cgroup file,
// no signal) is touched whatever the image says.

#include <krex/detail/guardian_recover.hpp>
#include <krex/detail/segment.hpp>
#include <krex/detail/status.hpp>
#include <krex/drain.hpp>
#include <krex/region_lock.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

namespace {

namespace kd = krex::detail;

struct image {
  alignas(kd::node_object) unsigned char bytes[sizeof(kd::node_object)];
};

void exercise(kd::node_state& n) {
  (void)kd::validate(n);
  const kd::node_view v = kd::read_status(n, "fuzz");
  (void)kd::to_json(v);
  (void)kd::to_text(v);
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
  kd::skip_abandoned_tickets(m);
  std::vector<kd::sibling> sibs = kd::snapshot_siblings(m);
  for (const kd::sibling& sb : sibs) (void)kd::sibling_gone(m, sb);
  (void)kd::proxy_acks(m, sibs, m.dev->gate.load() | 1U);
  for (std::uint32_t i = 0; i < kd::max_tenants; ++i) (void)kd::reap_if_dead(n, i, &none);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  static std::unique_ptr<image> buf(new image);
  kd::node_object* fresh = new (buf->bytes) kd::node_object();
  (void)fresh;
  const std::uint8_t mode = data[0];
  ++data;
  --size;
  if ((mode & 1U) == 0) {
    if (size < 2) return 0;
    const std::size_t offset = (static_cast<std::size_t>(data[0]) << 8 | data[1]) % sizeof(image);
    data += 2;
    size -= 2;
    const std::size_t n = size < sizeof(image) - offset ? size : sizeof(image) - offset;
    std::memcpy(buf->bytes + offset, data, n);
  } else {
    for (; size >= 8; data += 8, size -= 8) {
      std::uint32_t off, val;
      std::memcpy(&off, data, 4);
      std::memcpy(&val, data + 4, 4);
      off = (off % (sizeof(kd::node_state) / 4)) * 4;
      std::memcpy(buf->bytes + off, &val, 4);
    }
  }
  exercise(*reinterpret_cast<kd::node_state*>(buf->bytes));
  return 0;
}
