// SPDX-License-Identifier: Apache-2.0
// krexctl: a node's krex state, and recovering it by hand.
//
//   krexctl status  [--segment NAME] [--group] [--json]
//   krexctl recover [--segment NAME] [--group] [--device N] [--force]
//                   [--freeze METHOD] [--cgroup-root PATH]
//   krexctl clean   [--segment NAME | --all] [--group] [--freeze METHOD]
//                   [--cgroup-root PATH] [--kill] [--force] [--dry-run] [--any-owner]
//
// Exit codes: 0 healthy / done, 1 problems found or left, 2 no such segment,
// 3 the segment cannot be used (a file that is no complete segment of this
// build and domain, a corrupt node state, another freeze domain), 64 usage.
// krexctl reads a segment the way a joining tenant checks it (segment.hpp),
// status from a copy read with pread: a hostile or broken file can make it
// exit 3, never hang or crash it. See docs/KREXCTL.md.

#include <krex/detail/cgroup.hpp>
#include <krex/detail/guardian_recover.hpp>
#include <krex/detail/segment.hpp>
#include <krex/detail/status.hpp>
#include <krex/freeze.hpp>
#include <krex/options.hpp>
#include <krex/region_lock.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace kd = krex::detail;

enum exit_code { ok = 0, problems = 1, no_segment = 2, unusable = 3, usage = 64 };

struct args {
  std::string command;
  krex::options opts;
  bool json = false, force = false, all = false, kill = false, dry_run = false, any_owner = false;
  int device = -1;
};

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr,
               "krexctl: %s\n"
               "usage: krexctl status  [--segment NAME] [--group] [--json]\n"
               "       krexctl recover [--segment NAME] [--group] [--device N] [--force]\n"
               "                       [--freeze METHOD] [--cgroup-root PATH]\n"
               "       krexctl clean   [--segment NAME | --all] [--group] [--freeze METHOD]\n"
               "                       [--cgroup-root PATH] [--kill] [--force] [--dry-run]\n"
               "                       [--any-owner]\n",
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
    else if (f == "--any-owner")
      a.any_owner = true;
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
  if (a.any_owner && (a.command != "clean" || ::geteuid() != 0))
    usage_error("--any-owner is for `clean` run as root (only root may remove another user's file)");
  return a;
}

/// 0 and a copy of the segment's node state in `out` (read, never mapped:
/// see read_segment), or no_segment / unusable with the reason in `why`.
/// `brief`: the finding only, without the "krex: segment: " prefix and the hint.
int inspect(const kd::segment_id& id, std::unique_ptr<kd::node_state>& out, std::string& why,
            bool brief = false) {
  try {
    out = kd::read_segment(id);
    return ok;
  } catch (const krex::error& e) {
    why = e.what();
    if (brief) {
      const std::string prefix = "krex: segment: ", tail = " — " + e.hint();
      if (why.compare(0, prefix.size(), prefix) == 0) why.erase(0, prefix.size());
      if (!e.hint().empty() && why.size() >= tail.size() &&
          why.compare(why.size() - tail.size(), tail.size(), tail) == 0)
        why.erase(why.size() - tail.size());
    }
    return e.code() == ENOENT ? no_segment : unusable;
  }
}

kd::segment_id id_of(const args& a) { return kd::segment_id_of(a.opts); }

int cmd_status(const args& a) {
  const kd::segment_id id = id_of(a);
  std::unique_ptr<kd::node_state> node;
  std::string why;
  if (const int e = inspect(id, node, why)) {
    if (a.json)
      std::printf("{\"segment\":\"%s\",\"error\":\"%s\",\"healthy\":false}\n",
                  kd::json_escape(id.path()).c_str(), kd::json_escape(why).c_str());
    else
      std::fprintf(stderr, "krexctl: %s\n", why.c_str());
    return e;
  }
  const kd::node_view v = kd::read_status(*node, id.path());
  std::fputs((a.json ? kd::to_json(v) + "\n" : kd::to_text(v)).c_str(), stdout);
  const bool corrupt = !kd::validate(*node).empty();
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
  const kd::segment_id id = id_of(a);
  std::unique_ptr<kd::segment> seg;
  try {
    // The checks of a joining tenant, validate() included: recovery acts
    // only on a segment it can trust to be laid out as it expects.
    seg = std::make_unique<kd::segment>(id, false);
  } catch (const krex::error& e) {
    std::fprintf(stderr, "krexctl: %s\n", e.what());
    return e.code() == ENOENT ? no_segment : unusable;
  }
  kd::node_state& n = seg->node();
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
  const kd::node_view v = kd::read_status(n, id.path());
  for (const std::string& p : v.problems) std::printf("problem left: %s\n", p.c_str());
  return v.problems.empty() ? ok : problems;
}

/// Live tenants and guardian of a segment.
std::uint32_t live_members(const kd::node_state& n) {
  std::uint32_t live = 0;
  for (std::uint32_t i = 0; i < kd::max_tenants; ++i)
    if (n.tenants[i].owner.load() > 0 && kd::slot_alive(n.tenants[i])) ++live;
  if (n.guardian_pid.load() > 0 &&
      kd::as_safe::alive(n.guardian_pid.load(), n.guardian_start_time.load()))
    ++live;
  return live;
}

/// A directory entry that is a segment file of domain `tag`:
/// "krex-L<layout>-<tag>-<base>" (or layout 1 and 2's "krex-L<layout>-B<boost>-<tag>-<base>").
struct segment_entry {
  std::string base;
  unsigned long layout = 0;
};
bool parse_segment_entry(const std::string& e, const std::string& tag, segment_entry& out) {
  const auto digits = [&](size_t& i) {
    const size_t from = i;
    while (i < e.size() && e[i] >= '0' && e[i] <= '9') ++i;
    return i > from && i - from <= 9;
  };
  if (e.compare(0, 6, "krex-L") != 0) return false;
  size_t i = 6;
  const size_t layout_at = i;
  if (!digits(i) || i >= e.size() || e[i] != '-') return false;
  out.layout = std::strtoul(e.c_str() + layout_at, nullptr, 10);
  ++i;
  if (i < e.size() && e[i] == 'B') {
    ++i;
    if (!digits(i) || i >= e.size() || e[i] != '-') return false;
    ++i;
  }
  if (e.compare(i, tag.size() + 1, tag + "-") != 0) return false;
  out.base = e.substr(i + tag.size() + 1);
  return kd::valid_segment_name(out.base);
}

/// Removes a directory entry, or says it would; counts into removed / left.
void remove_entry(const args& a, const std::string& path, int& removed, int& left) {
  if (a.dry_run) {
    std::printf(", would be removed\n");
  } else if (::unlink(path.c_str()) == 0 || errno == ENOENT) {
    std::printf(", removed\n");
    ++removed;
  } else {
    std::printf(", cannot be removed: %s\n", std::strerror(errno));  // NOLINT(concurrency-mt-unsafe)
    ++left;
  }
}

/// Segment files named exactly for --segment (every base with --all) in
/// this user's (or group's) domain, and the temporary files their dead
/// creators left. A file that does not belong to the domain (another
/// owner, or another group in group mode) is never removed, except by root
/// with --any-owner; one that is no usable segment is removed (nobody can
/// have joined it); a segment with a live tenant or guardian is kept.
int clean_segments(const args& a, int& left) {
  const kd::segment_id mine = id_of(a);
  const std::string tag = mine.domain.tag();
  DIR* dir = ::opendir(mine.dir.c_str());
  if (dir == nullptr) return 0;
  std::vector<std::pair<std::string, segment_entry>> names;
  std::vector<std::string> temps;
  while (const dirent* e = ::readdir(dir)) {  // NOLINT(concurrency-mt-unsafe)
    const std::string name = e->d_name;
    const size_t plus = name.find("+tmp-");
    segment_entry s;
    if (!parse_segment_entry(plus == std::string::npos ? name : name.substr(0, plus), tag, s))
      continue;
    if (!a.all && s.base != a.opts.segment()) continue;
    if (plus == std::string::npos)
      names.emplace_back(name, s);
    else
      temps.push_back(name.substr(0, plus));
  }
  ::closedir(dir);
  int removed = 0;
  for (const auto& [name, entry] : names) {
    kd::segment_id id = mine;
    id.name = name;
    id.base = entry.base;
    const std::string path = id.path();
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (!kd::owned_by(st, id.domain) && !a.any_owner) {
      std::printf("segment %s %s; not yours: skipped (it blocks this segment name: have its owner "
                  "or root remove it, root with --any-owner)\n",
                  path.c_str(), kd::file_problem(st, id.domain).c_str());
      ++left;
      continue;
    }
    if (entry.layout != kd::layout_version) {
      if (!a.force) {
        std::printf("segment %s: layout %lu, which this krexctl cannot judge; kept (--force "
                    "removes it)\n",
                    path.c_str(), entry.layout);
        ++left;
        continue;
      }
      std::printf("segment %s: layout %lu; --force", path.c_str(), entry.layout);
      remove_entry(a, path, removed, left);
      continue;
    }
    std::unique_ptr<kd::node_state> node;
    std::string why;
    if (inspect(id, node, why, true) == ok) {
      const std::uint32_t live = live_members(*node);
      if (live != 0) {
        std::printf("segment %s: in use (%u live member(s)), kept\n", path.c_str(), live);
        continue;
      }
      std::printf("segment %s: no live member", path.c_str());
    } else {
      // No process of this build can have joined it: nothing to judge.
      std::printf("%s: unusable", why.c_str());
    }
    remove_entry(a, path, removed, left);
  }
  for (const std::string& name : temps) {
    kd::segment_id id = mine;
    id.name = name;
    if (a.dry_run) continue;
    for (const std::string& t : kd::remove_dead_temp_files(id)) {
      std::printf("temporary file %s/%s of a dead creator: removed\n", id.dir.c_str(), t.c_str());
      ++removed;
    }
  }
  return removed;
}

/// Stale leaves `t<N>` of one krex root: a leaf whose slot in `node` (the
/// segment's copy; nullptr when there is none) is not held by a live tenant.
/// `own_dir`: `root` is a segment's directory under the derived root,
/// removed once its last leaf is gone.
int clean_root(const args& a, const std::string& root, const kd::node_state* node,
               const kd::recovery_config& c, bool own_dir, int& left) {
  const bool have = node != nullptr;
  const bool v2 = c.method == krex::freeze_method::cgroup_v2;
  DIR* dir = ::opendir(root.c_str());
  if (dir == nullptr) return 0;
  std::vector<std::string> leaves;
  while (const dirent* e = ::readdir(dir))  // NOLINT(concurrency-mt-unsafe)
    if (e->d_type == DT_DIR && kd::cgroup::is_leaf_name(e->d_name)) leaves.push_back(e->d_name);
  ::closedir(dir);
  int removed = 0;
  for (const std::string& name : leaves) {
    const unsigned long slot = std::strtoul(name.c_str() + 1, nullptr, 10);
    const std::string leaf = root + "/" + name;
    if (have && slot < kd::max_tenants && node->tenants[slot].owner.load() > 0 &&
        kd::slot_alive(node->tenants[slot])) {
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
  // Under the derived root each segment has a directory of its own: it
  // goes with its last leaf (rmdir fails while a leaf is left).
  if (own_dir && !a.dry_run && ::rmdir(root.c_str()) == 0) {
    std::printf("cgroup %s: segment directory removed\n", root.c_str());
    ++removed;
  }
  return removed;
}


int clean_leaves(const args& a, int& left) {
  const kd::segment_id mine = id_of(a);
  std::unique_ptr<kd::node_state> node;
  std::string why;
  const bool have = inspect(mine, node, why) == ok;
  kd::recovery_config c;
  kd::freezer* fz = nullptr;
  std::optional<kd::freezer> fz_holder;
  if (const int e = own_recovery(a, have ? node.get() : nullptr, c, fz, fz_holder)) {
    ++left;
    return -e;
  }
  if (c.method != krex::freeze_method::cgroup_v2 && c.method != krex::freeze_method::cgroup_v1) {
    std::printf("cgroups: freeze method %s uses none\n", krex::to_string(c.method));
    return 0;
  }
  const bool derived = a.opts.cgroup_root().empty();
  int removed = clean_root(a, fz->root(), have ? node.get() : nullptr, c, derived, left);
  if (!derived || !a.all) return removed;
  // --all: every segment directory of this domain under the derived root,
  // also of segments whose file is gone. Each is judged by its own segment
  // (if readable) and thawed by its own root, never by a path from a segment.
  const std::string base = fz->root().substr(0, fz->root().rfind('/'));
  DIR* dir = ::opendir(base.c_str());
  if (dir == nullptr) return removed;
  std::vector<std::pair<std::string, segment_entry>> dirs;
  while (const dirent* e = ::readdir(dir)) {  // NOLINT(concurrency-mt-unsafe)
    segment_entry s;
    if (e->d_type == DT_DIR && e->d_name != mine.name &&
        parse_segment_entry(e->d_name, mine.domain.tag(), s))
      dirs.emplace_back(e->d_name, s);
  }
  ::closedir(dir);
  for (const auto& [name, entry] : dirs) {
    kd::segment_id id = mine;
    id.name = name;
    id.base = entry.base;
    std::unique_ptr<kd::node_state> other;
    const bool readable = entry.layout == kd::layout_version && inspect(id, other, why) == ok;
    kd::recovery_config rc = c;
    const std::string root = base + "/" + name;
    if (!kd::as_safe::copy_text(rc.root, sizeof rc.root, root.c_str())) continue;
    rc.domain_hash = kd::freeze_domain_hash(c.method, root);
    const std::uint64_t recorded = readable ? other->cgroup_root_hash.load() : 0;
    if (recorded != 0 && recorded != rc.domain_hash) {
      std::printf("cgroup %s: its segment's tenants freeze by %s; skipped\n", root.c_str(),
                  kd::load_text(other->cgroup_root_text).c_str());
      ++left;
      continue;
    }
    removed += clean_root(a, root, readable ? other.get() : nullptr, rc, true, left);
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
