// SPDX-License-Identifier: Apache-2.0
#pragma once

// Validation of a node state: every header field and every index and
// enumerated value a tenant reads from the segment, bounds-checked. Used by
// the segment at attach (segment.hpp) and by krexctl; it depends on the
// layout alone, so the segment does not pull in krexctl's status view.

#include <krex/detail/layout.hpp>
#include <krex/error.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace krex::detail {

/// The region-lock queue of `dev` (a ticket lock): now_serving never passes
/// next_ticket (it moves only to a ticket taken). Read in that order, both
/// only growing, a consistent queue always passes, whatever runs meanwhile;
/// a corrupted word (now_serving ahead, or next_ticket behind) fails. Its
/// words are returned in `serving` and `next`.
inline bool queue_consistent(const device_state& dev, std::uint32_t& serving,
                             std::uint32_t& next) noexcept {
  serving = dev.now_serving.load();
  next = dev.next_ticket.load();
  return static_cast<std::int32_t>(serving - next) <= 0;
}

/// The line naming device `d`'s corrupt queue (see queue_consistent).
KREX_DETAIL_COLD inline std::string queue_problem(std::uint32_t d, std::uint32_t serving, std::uint32_t next) {
  return cat({"device ", d, " region-lock queue is corrupt: now_serving ", serving,
              " is ahead of next_ticket ", next,
              " (a word of the segment was overwritten); `krexctl recover` repairs it"});
}

/// The queue words checked against each other, device by device: one line
/// per corrupt queue. Kept out of validate(): `krexctl recover` must be able
/// to open a segment whose queue it is to repair.
inline std::vector<std::string> queue_problems(const node_state& n) {
  std::vector<std::string> out;
  for (std::uint32_t d = 0; d < max_devices; ++d) {
    std::uint32_t serving = 0, next = 0;
    if (!queue_consistent(n.devices[d], serving, next))
      out.push_back(queue_problem(d, serving, next));
  }
  return out;
}

/// Every problem found in `n`, as one line each; empty when it is a node state
/// this build can use. Checks every header field (magic, layout, ready, sizes,
/// counts; segment.hpp checked the file's size) and that every index and enumerated
/// value a tenant reads from the segment is in range (a tenant bounds-checks
/// them again where it uses them: the segment may change after this).
KREX_DETAIL_COLD inline std::vector<std::string> validate(const node_state& n) {
  std::vector<std::string> out;
  const auto bad_at = [&](std::string_view at, const char* what, std::uint64_t v) {
    out.push_back(cat({at, what, " = ", v}));  // `at`: "device 3 ", "tenant slot 7 " or ""
  };
  const auto bad = [&](const char* what, std::uint64_t v) { bad_at({}, what, v); };
  if (n.magic.load() != segment_magic) bad("node magic", n.magic.load());
  if (n.layout.load() != layout_version) bad("node layout version", n.layout.load());
  if (n.ready.load(std::memory_order_acquire) != segment_ready) bad("ready word", n.ready.load());
  if (n.size.load() != sizeof(node_state)) bad("node size", n.size.load());
  if (n.n_devices.load() != max_devices) bad("device count", n.n_devices.load());
  if (n.n_tenants.load() != max_tenants) bad("tenant count", n.n_tenants.load());
  if (n.device_size.load() != sizeof(device_state)) bad("device size", n.device_size.load());
  if (n.tenant_size.load() != sizeof(tenant_slot)) bad("tenant slot size", n.tenant_size.load());
  for (std::uint32_t d = 0; d < max_devices; ++d) {
    const device_state& dev = n.devices[d];
    const std::string at = cat({"device ", d, " "});
    if (dev.holder.load() > max_tenants) bad_at(at, "gate holder", dev.holder.load());
    const std::uint32_t ls = dev.lease_slot.load();
    if ((ls & ~(lease_slot_mask | lease_exiting | lease_recovering)) != 0 ||
        (ls & lease_slot_mask) > max_tenants || (ls != 0 && (ls & lease_slot_mask) == 0))
      bad_at(at, "lease slot", ls);
    if (dev.phase.load() > phase_exiting) bad_at(at, "phase", dev.phase.load());
    if (dev.lease_pid.load() < 0)
      bad_at(at, "lease pid", static_cast<std::uint32_t>(dev.lease_pid.load()));
    if (dev.key.load() == 0 && (ls != 0 || (dev.gate.load() & 1U) != 0))
      out.push_back(cat({at, "is unused (key 0) but holds a lease or a raised gate"}));
  }
  for (std::uint32_t i = 0; i < max_tenants; ++i) {
    const tenant_slot& s = n.tenants[i];
    const std::string at = cat({"tenant slot ", i, " "});
    if (s.state.load() > slot_leaving) bad_at(at, "state", s.state.load());
    if (s.owner.load() != 0 && s.device.load() >= max_devices) bad_at(at, "device", s.device.load());
  }
  return out;
}

}  // namespace krex::detail
