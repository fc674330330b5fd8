// SPDX-License-Identifier: Apache-2.0
// krexctl: a node's krex state, and recovering it by hand.
//
//   krexctl status  [--segment NAME] [--group] [--json]
//   krexctl recover [--segment NAME] [--group] [--device N] [--force]
//                   [--freeze METHOD] [--cgroup-root PATH]
//   krexctl clean   [--segment NAME | --all] [--group] [--freeze METHOD]
//                   [--cgroup-root PATH] [--kill] [--force] [--dry-run]
//
// Exit codes: 0 healthy / done, 1 problems found or left, 2 no such segment,
// 3 the segment cannot be used (corrupt, another layout, another freeze
// domain), 64 usage. See docs/KREXCTL.md.

#include <krex/detail/cgroup.hpp>
#include <krex/detail/guardian_recover.hpp>
#include <krex/detail/segment.hpp>
#include <krex/detail/status.hpp>
#include <krex/freeze.hpp>
#include <krex/options.hpp>
#include <krex/region_lock.hpp>

#include <boost/interprocess/managed_shared_memory.hpp>
#include <boost/version.hpp>

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace bip = boost::interprocess;
namespace kd = krex::detail;

enum exit_code { ok = 0, problems = 1, no_segment = 2, unusable = 3, usage = 64 };

struct args {
  std::string command;
  krex::options opts;
  bool json = false, force = false, all = false, kill = false, dry_run = false;
  int device = -1;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr,
               "krexctl: %s\n"
               "usage: krexctl status  [--segment NAME] [--group] [--json]\n"
               "       krexctl recover [--segment NAME] [--group] [--device N] [--force]\n"
               "                       [--freeze METHOD] [--cgroup-root PATH]\n"
               "       krexctl clean   [--segment NAME | --all] [--group] [--freeze METHOD]\n"
               "                       [--cgroup-root PATH] [--kill] [--force] [--dry-run]\n",
               what.c_str());
  std::exit(usage);
}

args parse(int argc, char** argv) {
  args a;
  a.opts = krex::options{}.with_env();
  if (argc < 2) usage_error("no command");
  a.command = argv[1];
  if (a.command == "-h" || a.command == "--help") usage_error("help");
  if (a.command != "status" && a.command != "recover" && a.command != "clean")
    usage_error("unknown command '" + a.command + "'");
  for (int i = 2; i < argc; ++i) {
    const std::string f = argv[i];
    const auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(f + " needs a value");
      return argv[++i];
    };
    if (f == "--segment")
      a.opts.segment(value());
    else if (f == "--group")
      a.opts.access(krex::segment_access::group);
    else if (f == "--json")
      a.json = true;
    else if (f == "--force")
      a.force = true;
    else if (f == "--all")
      a.all = true;
    else if (f == "--kill")
      a.kill = true;
    else if (f == "--dry-run")
      a.dry_run = true;
    else if (f == "--device")
      a.device =
          static_cast<int>(kd::parse_int("--device", value(), 0, kd::max_devices - 1, "0..15"));
    else if (f == "--freeze")
      a.opts.freeze(kd::parse_freeze_method("--freeze", value()));
    else if (f == "--cgroup-root")
      a.opts.cgroup_root(value());
    else
      usage_error("unknown option '" + f + "'");
  }
  return a;
}

/// An existing segment, mapped without creating it and read without taking
/// any lock a dead process could hold (find_no_lock).
struct attached {
  bip::managed_shared_memory shm;
  kd::node_state* node = nullptr;
};

/// 0 and `out` set, or no_segment / unusable with the reason in `why`.
int attach(const std::string& full, std::optional<attached>& out, std::string& why) {
  attached a;
  try {
    a.shm = bip::managed_shared_memory(bip::open_only, full.c_str());
  } catch (const bip::interprocess_exception& e) {
    why = "no segment /dev/shm/" + full + " (" + e.what() + ")";
    return e.get_error_code() == bip::not_found_error ? no_segment : unusable;
  }
  const auto h = a.shm.find_no_lock<kd::segment_header>(kd::header_object_name).first;
  const auto n = a.shm.find_no_lock<kd::node_object>(kd::node_object_name).first;
  if (h == nullptr || n == nullptr) {
    why = "segment /dev/shm/" + full + " holds no krex node state";
    return unusable;
  }
  if (h->magic.load() != kd::segment_magic || h->layout.load() != kd::layout_version ||
      h->boost_version.load() != BOOST_VERSION || h->node_size.load() != sizeof(kd::node_state)) {
    why = "segment /dev/shm/" + full + " has layout " + std::to_string(h->layout.load()) +
          ", Boost " + std::to_string(h->boost_version.load()) + "; this krexctl reads layout " +
          std::to_string(kd::layout_version) + ", Boost " + std::to_string(BOOST_VERSION);
    return unusable;
  }
  a.node = n;
  out.emplace(std::move(a));
  return ok;
}

int cmd_status(const args& a) {
  const std::string full = kd::segment_name(a.opts);
  std::optional<attached> seg;
  std::string why;
  if (const int e = attach(full, seg, why)) {
    if (a.json)
      std::printf("{\"segment\":\"%s\",\"error\":\"%s\",\"healthy\":false}\n",
                  kd::json_escape(full).c_str(), kd::json_escape(why).c_str());
    else
      std::fprintf(stderr, "krexctl: %s\n", why.c_str());
    return e;
  }
  const kd::node_view v = kd::read_status(*seg->node, full);
  std::fputs((a.json ? kd::to_json(v) + "\n" : kd::to_text(v)).c_str(), stdout);
  const bool corrupt = !kd::validate(*seg->node).empty();
  return corrupt ? unusable : v.problems.empty() ? ok : problems;
}

/// The recovery config krexctl thaws by: its own freeze options, never the segment's.
int own_recovery(const args& a, const kd::node_state* n, kd::recovery_config& c, kd::freezer*& fz,
                 std::optional<kd::freezer>& holder) {
  try {
    holder.emplace(
        kd::freezer::open(a.opts.freeze(), a.opts.cgroup_root(), kd::segment_name(a.opts)));
  } catch (const krex::error& e) {
    std::fprintf(stderr, "krexctl: %s\n", e.what());
    return unusable;
  }
  fz = &*holder;
  c.method = fz->method();
  kd::as_safe::copy_text(c.root, sizeof c.root, fz->root().c_str());
  c.domain_hash = kd::freeze_domain_hash(fz->method(), fz->root());
  const std::uint64_t recorded = n != nullptr ? n->cgroup_root_hash.load() : 0;
  if (recorded != 0 && recorded != c.domain_hash) {
    std::fprintf(stderr,
                 "krexctl: this segment's tenants freeze by %s, but krexctl resolved %s:%s — "
                 "pass --freeze and --cgroup-root (or KREX_FREEZE / KREX_CGROUP_ROOT) as the "
                 "tenants set them\n",
                 kd::load_text(n->cgroup_root_text).c_str(), krex::to_string(c.method),
                 fz->root().empty() ? "-" : fz->root().c_str());
    return unusable;
  }
  return ok;
}

int cmd_recover(const args& a) {
  const std::string full = kd::segment_name(a.opts);
  std::optional<attached> seg;
  std::string why;
  if (const int e = attach(full, seg, why)) {
    std::fprintf(stderr, "krexctl: %s\n", why.c_str());
    return e;
  }
  kd::node_state& n = *seg->node;
  if (const auto p = kd::validate(n); !p.empty()) {
    std::fprintf(stderr,
                 "krexctl: segment /dev/shm/%s is corrupt (%s); remove it with "
                 "`krexctl clean --force` once its processes are gone\n",
                 full.c_str(), p[0].c_str());
    return unusable;
  }
  kd::recovery_config c;
  kd::freezer* fz = nullptr;
  std::optional<kd::freezer> fz_holder;
  if (const int e = own_recovery(a, &n, c, fz, fz_holder)) return e;
  for (std::uint32_t d = 0; d < kd::max_devices; ++d) {
    if (a.device >= 0 && d != static_cast<std::uint32_t>(a.device)) continue;
    kd::device_state& dev = n.devices[d];
    if (dev.key.load() == 0 && dev.lease_slot.load() == 0 && (dev.gate.load() & 1U) == 0) continue;
    const std::int32_t holder = dev.lease_pid.load();
    const kd::recovery r = kd::recover_device(n, d, c, a.force);
    switch (r) {
      case kd::recovery::holder_dead:
        std::printf(
            "device %u: recovered (holder pid %d was dead): thawed, gate lowered, lock released\n",
            d, holder);
        break;
      case kd::recovery::lease_expired:
        std::printf("device %u: recovered (holder pid %d outlived its lease)\n", d, holder);
        break;
      case kd::recovery::in_progress: {
        const std::uint64_t claim = dev.recover_claim.load();
        const bool live = claim != 0 && kd::claimant_alive(dev, claim, kd::now_ns());
        std::printf("device %u: a recovery is already in progress (pid %d, %s)%s\n", d,
                    kd::claim_pid(claim), live ? "alive" : "gone",
                    live && !a.force ? ": --force takes it over if it is stalled" : "");
        break;
      }
      case kd::recovery::nothing:
        if (a.force && dev.lease_slot.load() == 0) {
          // No holder: thaw whatever is still frozen, as a wedged device needs.
          const int failed = kd::thaw_device(n, d, c);
          std::printf("device %u: no region holder; thawed its tenants%s\n", d,
                      failed ? " (some thaws failed)" : "");
        } else {
          std::printf(
              "device %u: nothing to recover%s\n", d,
              dev.lease_slot.load() != 0 ? " (a live holder: --force takes its lease away)" : "");
        }
        break;
    }
  }
  const std::uint32_t reaped = kd::reap_dead_tenants(n, c);
  if (reaped != 0) std::printf("reaped %u dead tenant slot(s)\n", reaped);
  // Move each lock queue past served tickets nobody takes: dead waiters, and
  // live ones past the hand-off deadline (--force: at once; they queue anew).
  for (std::uint32_t d = 0; d < kd::max_devices; ++d) {
    if (a.device >= 0 && d != static_cast<std::uint32_t>(a.device)) continue;
    kd::device_state& dev = n.devices[d];
    if (dev.key.load() == 0) continue;
    const std::uint32_t skipped = kd::advance_queue(n, d, c, a.force);
    if (skipped != 0)
      std::printf("device %u: skipped %u served ticket(s) nobody took\n", d, skipped);
  }
  const kd::node_view v = kd::read_status(n, full);
  for (const std::string& p : v.problems) std::printf("problem left: %s\n", p.c_str());
  return v.problems.empty() ? ok : problems;
}

/// Live tenants and guardian of an attached segment.
std::uint32_t live_members(const kd::node_state& n) {
  std::uint32_t live = 0;
  for (std::uint32_t i = 0; i < kd::max_tenants; ++i)
    if (n.tenants[i].owner.load() > 0 && kd::slot_alive(n.tenants[i])) ++live;
  if (n.guardian_pid.load() > 0 &&
      kd::as_safe::alive(n.guardian_pid.load(), n.guardian_start_time.load()))
    ++live;
  return live;
}

int clean_segments(const args& a, int& left) {
  const std::string mine = kd::segment_name(a.opts);
  // "krex-L<layout>-B<boost>-<domain>-<base>": this user's (or group's) domain.
  const std::string domain = mine.substr(0, mine.size() - a.opts.segment().size());
  const std::string domain_tail = domain.substr(domain.find("-", domain.find("-B") + 1));
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir)) {  // NOLINT(concurrency-mt-unsafe)
    const std::string name = e->d_name;
    if (name.compare(0, 6, "krex-L") != 0) continue;
    const size_t at = name.find(domain_tail);
    if (at == std::string::npos) continue;
    if (!a.all && name.substr(at + domain_tail.size()) != a.opts.segment()) continue;
    names.push_back(name);
  }
  ::closedir(dir);
  int removed = 0;
  for (const std::string& name : names) {
    std::optional<attached> seg;
    std::string why;
    bool remove = false;
    if (attach(name, seg, why) == ok) {
      const std::uint32_t live = live_members(*seg->node);
      if (live == 0) {
        remove = true;
        std::printf("segment /dev/shm/%s: no live member", name.c_str());
      } else {
        std::printf("segment /dev/shm/%s: in use (%u live member(s)), kept\n", name.c_str(), live);
      }
    } else if (a.force) {
      remove = true;
      std::printf("%s; --force", why.c_str());
    } else {
      std::printf("%s; kept (--force removes it)\n", why.c_str());
      ++left;
    }
    seg.reset();
    if (!remove) continue;
    if (a.dry_run) {
      std::printf(", would be removed\n");
    } else if (bip::shared_memory_object::remove(name.c_str())) {
      std::printf(", removed\n");
      ++removed;
    } else {
      std::printf(", cannot be removed\n");
      ++left;
    }
  }
  return removed;
}

int clean_leaves(const args& a, int& left) {
  std::optional<attached> seg;
  std::string why;
  const bool have = attach(kd::segment_name(a.opts), seg, why) == ok;
  kd::recovery_config c;
  kd::freezer* fz = nullptr;
  std::optional<kd::freezer> fz_holder;
  if (const int e = own_recovery(a, have ? seg->node : nullptr, c, fz, fz_holder)) {
    ++left;
    return -e;
  }
  if (c.method != krex::freeze_method::cgroup_v2 && c.method != krex::freeze_method::cgroup_v1) {
    std::printf("cgroups: freeze method %s uses none\n", krex::to_string(c.method));
    return 0;
  }
  const bool v2 = c.method == krex::freeze_method::cgroup_v2;
  DIR* dir = ::opendir(fz->root().c_str());
  if (dir == nullptr) return 0;
  std::vector<std::string> leaves;
  while (const dirent* e = ::readdir(dir))  // NOLINT(concurrency-mt-unsafe)
    if (e->d_type == DT_DIR && kd::cgroup::is_leaf_name(e->d_name)) leaves.push_back(e->d_name);
  ::closedir(dir);
  int removed = 0;
  for (const std::string& name : leaves) {
    const unsigned long slot = std::strtoul(name.c_str() + 1, nullptr, 10);
    const std::string leaf = fz->root() + "/" + name;
    if (have && slot < kd::max_tenants && seg->node->tenants[slot].owner.load() > 0 &&
        kd::slot_alive(seg->node->tenants[slot])) {
      continue;  // a live tenant's leaf
    }
    std::string procs;
    kd::cgroup::read_file(leaf + "/cgroup.procs", procs);
    const bool busy = procs.find_first_of("0123456789") != std::string::npos;
    if (busy && !a.kill) {
      for (char& ch : procs)
        if (ch == '\n') ch = ' ';
      std::printf("cgroup %s: stale, but processes %sstill run in it; kept (--kill ends them)\n",
                  leaf.c_str(), procs.c_str());
      ++left;
      continue;
    }
    if (a.dry_run) {
      std::printf("cgroup %s: stale, would be %s\n", leaf.c_str(),
                  busy ? "killed and removed" : "removed");
      continue;
    }
    if (slot < kd::max_tenants) kd::as_safe::thaw_slot(c, static_cast<std::uint32_t>(slot), 0, 0);
    if (busy) {
      // A frozen v1 task cannot die: thawed above. Then SIGKILL every process.
      if (v2 && kd::cgroup::write_file(leaf + "/cgroup.kill", "1") == 0) {
      } else {
        for (const std::string& p : kd::cgroup::split(procs, '\n'))
          if (!p.empty()) ::kill(static_cast<pid_t>(std::strtol(p.c_str(), nullptr, 10)), SIGKILL);
      }
    }
    bool gone = false;
    for (int i = 0; i < 200 && !gone; ++i) {
      gone = ::rmdir(leaf.c_str()) == 0 || errno == ENOENT;
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::printf("cgroup %s: %s\n", leaf.c_str(), gone ? "removed" : "cannot be removed");
    if (gone)
      ++removed;
    else
      ++left;
  }
  return removed;
}

int cmd_clean(const args& a) {
  int left = 0;
  // Leaves first: deciding which leaf is stale needs the segment.
  const int leaves = clean_leaves(a, left);
  if (leaves < 0) return -leaves;
  const int segments = clean_segments(a, left);
  std::printf("clean: %d segment(s) and %d cgroup(s) %s, %d stale item(s) left\n", segments, leaves,
              a.dry_run ? "to remove" : "removed", left);
  return left == 0 ? ok : problems;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const args a = parse(argc, argv);
    if (a.command == "status") return cmd_status(a);
    if (a.command == "recover") return cmd_recover(a);
    return cmd_clean(a);
  } catch (const krex::error& e) {
    std::fprintf(stderr, "krexctl: %s\n", e.what());
    return e.where() == krex::step::options ? usage : unusable;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "krexctl: %s\n", e.what());
    return unusable;
  }
}
