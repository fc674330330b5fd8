// SPDX-License-Identifier: Apache-2.0
#pragma once

// The node segment's layout. Everything here is shared between processes of
// possibly different builds, so: only lock-free, address-free std::atomic
// (never a pointer, never a path), fixed sizes, and a header that a process
// of another layout refuses to attach to. Bump `layout_version` on any change.
// The segment file holds exactly one node_state at offset 0 (segment.hpp).
// The hashes it holds (a device's key, the freeze domain of its tenants)
// are fnv1a's, below: a change of the hash is a change of the layout.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace krex::detail {

inline constexpr std::uint64_t segment_magic = 0x6b7265782e6e6f64ULL;  // "krex.nod"
inline constexpr std::uint32_t layout_version = 7;
/// node_state::ready once its creator has initialized every byte (stored last, release).
inline constexpr std::uint32_t segment_ready = 0x5245'4459U;  // "REDY"
inline constexpr std::uint32_t max_tenants = 256;
inline constexpr std::uint32_t max_devices = 16;

/// `tenant_slot::ticket` values that are not tickets.
inline constexpr std::uint64_t no_ticket = ~0ULL;
inline constexpr std::uint64_t taking_ticket = ~0ULL - 1;

// The one hash of krex: 64-bit FNV-1a, mapped off 0. Device keys (a GPU's
// UUID, or its PCI address) and the freeze domain (method and cgroup root)
// are stored in the segment with it, where 0 means "none".
inline constexpr std::uint64_t fnv1a_offset_basis = 14695981039346656037ULL;
inline constexpr std::uint64_t fnv1a_prime = 1099511628211ULL;

/// 64-bit FNV-1a over `n` bytes at `p`; never 0 (a hash of 0 becomes 1).
inline std::uint64_t fnv1a(const void* p, std::size_t n) noexcept {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t h = fnv1a_offset_basis;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * fnv1a_prime;
  return h == 0 ? 1 : h;
}

/// 64-bit FNV-1a of the bytes of `s`; never 0.
inline std::uint64_t fnv1a(std::string_view s) noexcept { return fnv1a(s.data(), s.size()); }

static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::int32_t>::is_always_lock_free);

/// Flags on device_state::lease_slot (slot + 1 in the low bits): the holder
/// is ending its region, or a recoverer took the lease away. Whoever moves
/// lease_slot off the plain holder value by CAS owns the thaw, the gate and
/// the lock; the other side keeps its hands off them.
inline constexpr std::uint32_t lease_exiting = 0x8000'0000U;
inline constexpr std::uint32_t lease_recovering = 0x4000'0000U;
inline constexpr std::uint32_t lease_slot_mask = 0x0000'ffffU;

/// Keeps what follows off the previous words' cache line: 64 bytes of padding
/// separate the hot words whatever the base address.
struct line_pad {
  unsigned char bytes[64];
};

/// Tenant slot states.
enum : std::uint32_t {
  slot_free = 0,
  slot_claiming = 1,
  slot_active = 2,
  slot_reaping = 3,
  slot_leaving = 4,  ///< passed the gate to leave: not a sibling of new regions
};

/// Region phases (device_state::phase), for status and fault handling.
enum : std::uint32_t {
  phase_idle = 0,
  phase_locked = 1,
  phase_gated = 2,
  phase_draining = 3,
  phase_freezing = 4,
  phase_frozen = 5,
  phase_pinned = 6,
  phase_body = 7,
  phase_exiting = 8,
};

/// One tenant (one `krex::tenant` object of one process). Written by its
/// owner, read by siblings; cleared by whoever reaps a dead owner.
struct tenant_slot {
  std::atomic<std::int32_t> owner;        ///< owner pid; 0 = free
  std::atomic<std::uint32_t> state;       ///< slot_* above
  std::atomic<std::uint64_t> start_time;  ///< owner's /proc start time (pid reuse check)
  std::atomic<std::uint32_t> device;      ///< index into node_state::devices
  std::atomic<std::uint64_t> heartbeat_ns;
  std::atomic<std::uint64_t> joined_ns;
  /// Recorded at join, for messages and join-time checks only: nobody
  /// signals on their word (see detail/identity.hpp for what is re-checked).
  std::atomic<std::uint64_t> pidns;  ///< inode of the owner's pid namespace
  std::atomic<std::uint32_t> uid;    ///< owner's real uid
  std::atomic<std::uint32_t> gid;    ///< owner's real gid
  /// Signal freezing: what the region holder SIGSTOPped for this slot, so a
  /// recoverer can SIGCONT exactly that after the holder died: the owner pid
  /// (> 0) or minus the process group it leads (< 0); 0 = nothing. Written
  /// before the signal, cleared after the thaw; verified again (identity.hpp)
  /// before any SIGCONT.
  std::atomic<std::int32_t> stop_target;
  std::atomic<std::uint64_t> stop_start_time;  ///< start time of the stopped owner
  /// The freeze domain (freeze_domain_hash) this tenant joins under,
  /// published by check_freeze_domain before it may re-record the segment's;
  /// 0 until then. Tenants of a run that changed KREX_FREEZE or
  /// KREX_CGROUP_ROOT conflict only with live tenants of another domain.
  std::atomic<std::uint64_t> domain_hash;

  // Written by every submission of the owner: a line of its own.
  line_pad pad1;
  std::atomic<std::uint32_t> in_submit;
  std::atomic<std::uint32_t> dirty;  ///< submitted since the last drain
  std::atomic<std::uint64_t> submits;
  /// Threads of the owner parked at a raised gate: a holder that lowers the
  /// gate lets them through before handing the lock on (steps/gate.hpp).
  std::atomic<std::uint32_t> parked;

  line_pad pad2;
  std::atomic<std::uint32_t> in_submit_waiters;
  std::atomic<std::uint32_t> ack_epoch;     ///< last gate epoch this tenant drained for
  std::atomic<std::uint32_t> syncing;  ///< the agent is between taking `dirty` and finishing sync()
  std::atomic<std::uint32_t> frozen;        ///< frozen by the current holder
  std::atomic<std::uint32_t> active;  ///< its last drain had device work to sync (freeze scope `active`)
  std::atomic<std::uint64_t> ticket;        ///< region-lock ticket, no_ticket, taking_ticket
  std::atomic<std::uint64_t> drains;        ///< drains this tenant performed
  std::atomic<std::uint64_t> syncs;         ///< drains that touched the backend
};

/// Per device: the gate, the FIFO region lock, the lease, counters.
struct device_state {
  std::atomic<std::uint64_t> key;  ///< node-wide device identity; 0 = unused

  // Step 1. Odd epoch = raised. The futex word parked submitters and agents sleep on.
  line_pad pad3;
  std::atomic<std::uint32_t> gate;
  std::atomic<std::uint32_t> holder;  ///< slot index + 1 of the gate holder; 0 = none
  std::atomic<std::uint32_t> phase;

  // Ticket lock: regions are granted in arrival order.
  line_pad pad4;
  std::atomic<std::uint32_t> next_ticket;
  line_pad pad5;
  std::atomic<std::uint32_t> now_serving;  ///< futex word for lock waiters
  line_pad pad6;
  std::atomic<std::uint32_t> acks;         ///< bumped by each drain ack (futex)
  std::atomic<std::uint32_t> ack_wake_at;  ///< agents wake the holder once acks reach this
  /// Bumped when a gate rises: the futex word agents sleep on. Separate from
  /// the gate word so lowering the gate wakes only parked submitters.
  line_pad pad7;
  std::atomic<std::uint32_t> agent_bell;

  // The lease of the current region holder.
  line_pad pad8;
  std::atomic<std::int32_t> lease_pid;
  std::atomic<std::uint32_t> lease_slot;    ///< slot + 1, | lease_exiting / lease_recovering
  std::atomic<std::uint32_t> lease_ticket;  ///< the holder's region-lock ticket
  std::atomic<std::uint64_t> lease_start_time;
  std::atomic<std::uint64_t> lease_acquired_ns;
  std::atomic<std::uint64_t> lease_deadline_ns;
  /// The hand-off of the served ticket (steps/lock.hpp): ticket << 32, then
  /// served_claimed / served_skipped, then the ms clock (30 bits) at which it
  /// was served. Its waiter claims it, or a skipper skips it, by one CAS.
  std::atomic<std::uint64_t> served_mark;
  /// Who holds lease_recovering: claim ms clock (32 bits) << 32 | recoverer
  /// pid. A stale recoverer's steps check it before acting (guardian_recover.hpp).
  std::atomic<std::uint64_t> recover_claim;
  std::atomic<std::uint64_t> recover_start_time;  ///< the claimant's /proc start time

  // Counters (relaxed).
  line_pad pad9;
  std::atomic<std::uint64_t> regions;
  std::atomic<std::uint64_t> region_ns;
  std::atomic<std::uint64_t> lock_wait_ns;
  std::atomic<std::uint64_t> gate_parks;
  std::atomic<std::uint64_t> drains;
  std::atomic<std::uint64_t> drain_ns;
  std::atomic<std::uint64_t> freezes;
  std::atomic<std::uint64_t> freeze_ns;
  std::atomic<std::uint64_t> contended;
  std::atomic<std::uint64_t> recoveries;       ///< holders recovered (death or lease expiry)
  std::atomic<std::uint64_t> lease_expiries;   ///< of those, lease expiries
  std::atomic<std::uint64_t> handoff_skips;    ///< served tickets skipped: not taken within the hand-off

  // The quiet step (steps/quiet.hpp). quiet_ref_ns is the fastest probe burst any
  // tenant saw on this device (its idle figure; 0 = none yet); a member can
  // forge it, which only makes regions wait (too low) or skip the wait (too
  // high): what any member holding the lock could do anyway.
  line_pad pad10;
  std::atomic<std::uint64_t> quiet_ref_ns;
  std::atomic<std::uint64_t> quiet_calibrations;  ///< calibration bursts taken
  std::atomic<std::uint64_t> quiet_checks;        ///< regions whose device was probed
  std::atomic<std::uint64_t> quiet_waits;         ///< ...that found it busy and waited
  std::atomic<std::uint64_t> quiet_wait_ns;       ///< ...for this long in all
  std::atomic<std::uint64_t> quiet_busy;          ///< ...that were still busy at the deadline
};

/// The node segment's one object: the whole segment file.
struct node_state {
  // Header: checked before anything else is touched. `magic` and `layout`
  // stay the first 12 bytes in every layout, so any build can tell a segment
  // of another layout from a file that is no segment at all.
  std::atomic<std::uint64_t> magic;
  std::atomic<std::uint32_t> layout;
  std::atomic<std::uint32_t> ready;        ///< segment_ready once initialized (release)
  std::atomic<std::uint64_t> size;         ///< sizeof(node_state) = the file's size
  std::atomic<std::uint32_t> n_devices;    ///< max_devices
  std::atomic<std::uint32_t> n_tenants;    ///< max_tenants
  std::atomic<std::uint32_t> device_size;  ///< sizeof(device_state)
  std::atomic<std::uint32_t> tenant_size;  ///< sizeof(tenant_slot)
  std::atomic<std::int32_t> creator_pid;   ///< who initialized it (messages only)

  /// Hash of the freeze method and krex cgroup root the first tenant
  /// recorded (0 = none yet). The text is for messages only: no path is ever
  /// read from the segment and opened.
  std::atomic<std::uint64_t> cgroup_root_hash;
  std::atomic<std::uint64_t> cgroup_root_text[32];

  /// The guardian (see krex/detail/guardian/guardian.hpp): > 0 its pid, < 0 minus the pid
  /// of a tenant that is starting one, 0 none.
  std::atomic<std::int32_t> guardian_pid;
  std::atomic<std::uint32_t> guardian_starts;  ///< guardians started on this segment
  std::atomic<std::uint64_t> guardian_start_time;
  std::atomic<std::uint64_t> guardian_claim_ns;    ///< when guardian_pid went negative
  std::atomic<std::uint64_t> guardian_heartbeat_ns;
  std::atomic<std::uint64_t> reaped;  ///< dead tenants' slots freed

  device_state devices[max_devices];
  tenant_slot tenants[max_tenants];
};

}  // namespace krex::detail
