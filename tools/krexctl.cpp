// SPDX-License-Identifier: Apache-2.0
// krexctl: a node's krex state, and recovering it by hand.
//
//   krexctl status  [--segment NAME] [--group] [--json]
//   krexctl recover [--segment NAME] [--group] [--device N] [--force]
//                   [--freeze METHOD] [--cgroup-root PATH] [--json]
//   krexctl clean   [--segment NAME | --all] [--group] [--freeze METHOD]
//                   [--cgroup-root PATH] [--kill] [--force] [--dry-run] [--any-owner]
//                   [--json]
//   krexctl list    [--json]
//   krexctl options [--markdown | --write DIR]
//   krexctl --help | -V | --version | COMMAND --help
//
// Exit codes: 0 healthy / done, 1 problems found or left, 2 no such segment,
// 3 the segment cannot be used (a file that is no complete segment of this
// build and domain, a corrupt node state, another freeze domain), 64 usage.
// krexctl reads a segment the way a joining tenant checks it (segment.hpp),
// status from a copy read with pread: a hostile or broken file can make it
// exit 3, never hang or crash it. See docs/KREXCTL.md.

#include <krex/detail/freeze/cgroup.hpp>
#include <krex/detail/freeze/freezer.hpp>
#include <krex/detail/guardian/guardian_recover.hpp>
#include <krex/detail/segment/segment.hpp>
#include <krex/detail/steps/lock.hpp>
#include <krex/options.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <krex_tools/cli.hpp>
#include <krex_tools/json.hpp>
#include <krex_tools/option_docs.hpp>
#include <krex_tools/status.hpp>
#include <krex_tools/status_view.hpp>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace kd = krex::detail;

enum exit_code { ok = 0, problems = 1, no_segment = 2, unusable = 3, usage = 64 };

namespace cli = krex_tools::cli;
namespace json = krex_tools::json;

struct args {
  std::string command;
  krex::options opts;
  bool json = false, force = false, all = false, kill = false, dry_run = false, any_owner = false;
  bool markdown = false;
  std::string write_dir;  // options --write: the source tree to regenerate
  bool segment_named = false;  // --segment or KREX_SEGMENT: not the default name
  int device = -1;
};

/// A KREX_* variable krexctl uses (it names the segment or its freeze
/// domain), and the command-line option that overrides it.
struct env_var {
  const char* name;
  const char* option;
  void (*apply)(krex::options&, const char*);
};
const env_var used_env[] = {
    {"KREX_SEGMENT", "--segment", [](krex::options& o, const char* v) { o.segment(v); }},
    {"KREX_SEGMENT_ACCESS", "--group",
     [](krex::options& o, const char* v) {
       o.access(kd::parse_choice<krex::segment_access>("KREX_SEGMENT_ACCESS", v));
     }},
    {"KREX_FREEZE", "--freeze",
     [](krex::options& o, const char* v) {
       o.freeze(kd::parse_choice<krex::freeze_method>("KREX_FREEZE", v));
     }},
    {"KREX_CGROUP_ROOT", "--cgroup-root",
     [](krex::options& o, const char* v) { o.cgroup_root(v); }},
};

/// Applies the KREX_* variables krexctl uses to `o`; an invalid one is
/// returned as (variable, message), for parse() to judge once it knows which
/// options the command line set. krexctl reads nothing else: an operator's
/// environment with, say, a broken KREX_LEASE_MS must not keep `recover`
/// from running, when a wedged node needs it.
std::vector<std::pair<const env_var*, std::string>> apply_used_env(krex::options& o) {
  std::vector<std::pair<const env_var*, std::string>> bad;
  for (const env_var& v : used_env) {
    const char* value = std::getenv(v.name);  // NOLINT(concurrency-mt-unsafe): one thread
    if (value == nullptr) continue;
    try {
      v.apply(o, value);
    } catch (const krex::error& e) {
      std::string why = e.what();
      // The setters name the option, not the variable: say which one it was.
      if (why.find(v.name) == std::string::npos) why = std::string(v.name) + ": " + why;
      bad.emplace_back(&v, why);
    }
  }
  return bad;
}

/// A setter that turns a krex::error (an invalid value) into a usage error.
std::function<void(const std::string&)> checked(std::function<void(const std::string&)> set) {
  return [set = std::move(set)](const std::string& v) {
    try {
      set(v);
    } catch (const krex::error& e) {
      throw cli::usage_error(e.what());
    }
  };
}

args parse(int argc, char** argv) {
  args a;
  cli::program prog("krexctl", "A node's krex state, and recovering it by hand (docs/KREXCTL.md).");
  prog.epilog(
      "exit status: 0 healthy / done, 1 problems found or left, 2 no such segment,\n"
      "3 the segment cannot be used, 64 usage. `krexctl options` lists every KREX_*\n"
      "variable.");
  const auto bad_env = apply_used_env(a.opts);
  if (const char* v = std::getenv("KREX_SEGMENT"); v != nullptr && *v != '\0') a.segment_named = true;
  std::vector<std::string> given;  // the options the command line set
  const auto segment = [&](cli::command& c) -> cli::command& {
    return c
        .value("--segment", "NAME", checked([&](const std::string& v) {
                 a.opts.segment(v);
                 a.segment_named = true;
                 given.emplace_back("--segment");
               }),
               "the tenants' segment base name (KREX_SEGMENT, default krex)")
        .flag(
            "--group",
            [&] {
              a.opts.access(krex::segment_access::group);
              given.emplace_back("--group");
            },
            "the group's segment (segment_access::group), not this user's");
  };
  const auto freeze = [&](cli::command& c, const std::string& note) -> cli::command& {
    return c
        .value("--freeze", "METHOD", checked([&](const std::string& v) {
                 a.opts.freeze(kd::parse_choice<krex::freeze_method>("--freeze", v));
                 given.emplace_back("--freeze");
               }),
               "how the tenants freeze (KREX_FREEZE): " +
                   kd::choice_list(kd::choices_of<krex::freeze_method>) + note)
        .value("--cgroup-root", "PATH", checked([&](const std::string& v) {
                 a.opts.cgroup_root(v);
                 given.emplace_back("--cgroup-root");
               }),
               "the tenants' krex cgroup root (KREX_CGROUP_ROOT; default: derived)" + note);
  };
  const std::string json_help = "one JSON document on stdout";
  // status takes the freeze options too, so that one command line serves
  // status, recover and clean; it shows the domain the tenants recorded.
  freeze(segment(prog.add("status", "Show the segment: guardian, devices, tenants, problems.")),
         " (status shows the domain the tenants recorded)")
      .flag("--json", a.json, json_help)
      .synopsis("[--segment NAME] [--group] [--json]");
  prog.add("list", "List every krex segment in the segment directory (KREX_SHM_DIR, /dev/shm).")
      .flag("--json", a.json, json_help)
      .synopsis("[--json]");
  prog.add("options",
           "List every KREX_* variable: the krex::options each one sets, its default and "
           "meaning (detail::option_table), then the other variables krex reads.")
      .flag("--markdown", a.markdown, "README.md's options table (Markdown)")
      .text("--write", "DIR", a.write_dir,
            "rewrite what is generated from the option tables in the source tree DIR "
            "(README.md, docs/PYTHON.md, docs/POOL.md, python/krex/_krex.pyi)")
      .synopsis("[--markdown | --write DIR]");
  cli::command& recover =
      prog.add("recover", "Recover wedged devices: thaw, lower the gate, release the lock, reap.");
  segment(recover).value(
      "--device", "N", checked([&](const std::string& v) {
        a.device = static_cast<int>(kd::parse_int("--device", v, 0, kd::max_devices - 1,
                                                  "0.." + std::to_string(kd::max_devices - 1)));
      }),
      "only device N");
  freeze(recover, "")
      .flag("--force", a.force, "also take the lease from a live holder, a stalled recovery over")
      .flag("--json", a.json, json_help);
  cli::command& clean =
      prog.add("clean", "Remove what crashed runs left: stale leaves, segments, temporary files.");
  segment(clean).flag("--all", a.all, "every segment base name of this domain");
  freeze(clean, "")
      .flag("--kill", a.kill, "end processes still running in a stale leaf")
      .flag("--force", a.force, "also remove segments of another layout")
      .flag("--dry-run", a.dry_run, "say what would be removed; remove nothing")
      .flag("--any-owner", a.any_owner, "root only: also remove another owner's file")
      .flag("--json", a.json, json_help)
      .synopsis(
          "[--segment NAME | --all] [--group] [--freeze METHOD] [--cgroup-root PATH] "
          "[--kill] [--force] [--dry-run] [--any-owner] [--json]");
  a.command = prog.parse(argc, argv);
  if (a.command == "options") return a;  // a listing: the environment does not matter
  // `clean --segment X --all` once removed every other segment: one or the other.
  if (a.all && std::find(given.begin(), given.end(), "--segment") != given.end())
    prog.fail(
        "--segment and --all do not go together: --all cleans every segment of this domain, "
        "--segment NAME only NAME's; pass one of them (--dry-run shows what either would remove)",
        a.command);
  // An invalid variable krexctl uses would point it at another segment or
  // freeze domain: an error, unless the command line replaces it.
  for (const auto& b : bad_env) {
    if (std::find(given.begin(), given.end(), b.first->option) == given.end())
      prog.fail(b.second + " — fix or unset " + b.first->name + ", or pass " + b.first->option,
                a.command);
    std::fprintf(stderr, "krexctl: warning: %s (ignored: %s replaces it)\n", b.second.c_str(),
                 b.first->option);
  }
  // The rest of the tenants' settings are not krexctl's, but a broken one
  // is worth saying: tenants started with this environment refuse to join.
  if (bad_env.empty()) {
    try {
      (void)krex::options{}.with_env();
    } catch (const krex::error& e) {
      std::fprintf(stderr,
                   "krexctl: warning: %s (krexctl does not use it; a tenant started with this "
                   "environment refuses to join)\n",
                   e.what());
    }
  }
  if (a.any_owner && ::geteuid() != 0)
    prog.fail("--any-owner is for `clean` run as root (only root may remove another user's file)",
              a.command);
  return a;
}

/// What a command did: lines of text on stdout, or (--json) the items of
/// one JSON document, each {kind, ..., message} with the same line as message.
class actions {
 public:
  explicit actions(bool as_json) : m_json(as_json) { m_j.begin_array(); }
  bool json() const noexcept { return m_json; }
  void add(const std::string& text, const std::function<void(json::writer&)>& fields) {
    if (!m_json) {
      std::printf("%s\n", text.c_str());
      return;
    }
    m_j.begin_object();
    fields(m_j);
    m_j.field("message", text).end_object();
  }
  /// The items as one JSON array.
  std::string items() {
    m_j.end_array();
    return m_j.str();
  }

 private:
  bool m_json;
  json::writer m_j;
};

/// An error as the command's one JSON document (--json) or a line on stderr.
void report_error(const args& a, const std::string& segment, const std::string& why_found) {
  // A name squatted in the default directory does not stop tenants: they
  // moved (kd::joined_segment_id). Say where, so the operator looks there too.
  std::string why = why_found;
  try {
    const kd::segment_id moved = kd::joined_segment_id(a.opts);
    if (!moved.moved_because.empty())
      why += "\n  (tenants of this user join " + moved.path() + " while this name is taken; "
             "KREX_SHM_DIR=" + moved.dir + " krexctl ... shows it)";
  } catch (const krex::error&) {
  }
  if (!a.json) {
    std::fprintf(stderr, "krexctl: %s\n", why.c_str());
    return;
  }
  json::writer j;
  j.begin_object().field("command", a.command);
  if (!segment.empty()) j.field("segment", segment);
  j.field("error", why).field("healthy", false).end_object();
  std::printf("%s\n", j.str().c_str());
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

/// A segment file's name taken apart: "krex-L<layout>-[B<n>-]<tag>-<base>".
struct listed_segment {
  std::string file, tag, base;
  unsigned long layout = 0;
};
bool parse_any_segment(const std::string& e, listed_segment& out) {
  if (e.compare(0, 6, "krex-L") != 0 || e.find("+tmp-") != std::string::npos) return false;
  char* end = nullptr;
  out.layout = std::strtoul(e.c_str() + 6, &end, 10);
  std::size_t i = static_cast<std::size_t>(end - e.c_str());
  if (i == 6 || i >= e.size() || e[i] != '-') return false;
  ++i;
  if (e[i] == 'B') {  // layouts 1 and 2
    const std::size_t dash = e.find('-', i);
    if (dash == std::string::npos) return false;
    i = dash + 1;
  }
  const std::size_t dash = e.find('-', i);
  if (dash == std::string::npos || dash == i || (e[i] != 'u' && e[i] != 'g')) return false;
  out.file = e;
  out.tag = e.substr(i, dash - i);
  out.base = e.substr(dash + 1);
  return !out.base.empty();
}

/// Every segment file in the segment directory, sorted by name.
std::vector<listed_segment> list_segments(const std::string& dir_path) {
  std::vector<listed_segment> out;
  DIR* dir = ::opendir(dir_path.c_str());
  if (dir == nullptr) return out;
  while (const dirent* e = ::readdir(dir)) {  // NOLINT(concurrency-mt-unsafe)
    listed_segment s;
    if (parse_any_segment(e->d_name, s)) out.push_back(s);
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end(),
            [](const listed_segment& x, const listed_segment& y) { return x.file < y.file; });
  return out;
}

std::uint32_t live_members(const kd::node_state& n);

/// What to try when the segment `a` names does not exist: the segments
/// there are (this domain's by --segment name), or that there are none.
std::string no_segment_hint(const args& a) {
  const kd::segment_id id = id_of(a);
  std::string mine, others;
  int n = 0;
  for (const listed_segment& s : list_segments(id.dir)) {
    ++n;
    if (s.tag == id.domain.tag() && s.layout == kd::layout_version)
      mine += (mine.empty() ? "" : ", ") + s.base;
  }
  if (n == 0)
    return "no krex segment exists in " + id.dir +
           ": no tenant has joined on this node yet (or its tenants use another KREX_SHM_DIR)";
  if (!mine.empty())
    return "this user's segments here: " + mine + " — pass --segment NAME (`krexctl list` shows " +
           "every segment)";
  return std::to_string(n) + " segment(s) of other users, groups or layouts are here" +
         (a.opts.access() == krex::segment_access::user ? " (--group for the group's)" : "") +
         " — `krexctl list` shows them";
}

int cmd_list(const args& a) {
  std::string dir;
  try {
    dir = kd::shm_dir();
  } catch (const krex::error& e) {
    report_error(a, "", e.what());
    return unusable;
  }
  const kd::segment_id me = id_of(a);
  const kd::segment_id mine_group = kd::segment_id_of(
      krex::options{a.opts}.access(krex::segment_access::group));
  const std::vector<listed_segment> all = list_segments(dir);
  json::writer j;
  j.begin_object().field("command", "list").field("dir", dir).key("segments").begin_array();
  if (!a.json) std::printf("%zu krex segment(s) in %s\n", all.size(), dir.c_str());
  for (const listed_segment& s : all) {
    const bool ours = s.tag == me.domain.tag() || s.tag == mine_group.domain.tag();
    std::string state;
    long live = -1;
    if (s.layout != kd::layout_version) {
      state = "layout " + std::to_string(s.layout) + ": another krex version";
    } else if (!ours) {
      state = "another user's or group's";
    } else {
      kd::segment_id id = s.tag == me.domain.tag() ? me : mine_group;
      id.name = s.file;
      id.base = s.base;
      std::unique_ptr<kd::node_state> node;
      std::string why;
      if (inspect(id, node, why, true) == ok) {
        live = live_members(*node);
        state = std::to_string(live) + " live member(s)" + (live == 0 ? " (krexctl clean removes it)" : "");
      } else {
        state = "unusable: " + why;
      }
    }
    if (a.json) {
      j.begin_object().field("file", dir + "/" + s.file).field("segment", s.base);
      j.field("domain", s.tag).field("layout", s.layout).field("yours", ours);
      if (live >= 0) j.field("live_members", live);
      j.field("state", state).end_object();
    } else {
      std::printf("  %-24s %-8s %s  (%s/%s)\n", s.base.c_str(), s.tag.c_str(), state.c_str(),
                  dir.c_str(), s.file.c_str());
    }
  }
  j.end_array().end_object();
  if (a.json) std::printf("%s\n", j.str().c_str());
  return ok;
}

int cmd_status(const args& a) {
  const kd::segment_id id = id_of(a);
  std::unique_ptr<kd::node_state> node;
  std::string why;
  if (const int e = inspect(id, node, why)) {
    // No segment named and none by the default name: the node's segments,
    // as `krexctl list` shows them, where there are any.
    if (e == no_segment && !a.segment_named && !list_segments(id.dir).empty()) {
      if (!a.json)
        std::printf("no segment named %s here (pass --segment NAME for one); every krex segment "
                    "on this node:\n",
                    id.base.c_str());
      return cmd_list(a);
    }
    report_error(a, id.path(), e == no_segment ? why + "\n  hint: " + no_segment_hint(a) : why);
    return e;
  }
  const kd::node_view v = kd::read_status(*node, id.path());
  std::fputs(
      (a.json ? krex_tools::status::to_json(v) + "\n" : krex_tools::status::to_text(v)).c_str(),
      stdout);
  if (!a.json && !a.segment_named) {  // the default segment: name the node's others too
    std::string others;
    for (const listed_segment& s : list_segments(id.dir))
      if (s.file != id.name) others += (others.empty() ? "" : ", ") + s.base + " (" + s.tag + ")";
    if (!others.empty())
      std::printf("other krex segments on this node: %s (`krexctl list`; --segment NAME for one)\n",
                  others.c_str());
  }
  const bool corrupt = !kd::validate(*node).empty();
  return corrupt ? unusable : v.problems.empty() ? ok : problems;
}

/// The recovery config krexctl thaws by: its own freeze options, never the segment's.
int own_recovery(const args& a, const kd::node_state* n, kd::recovery_config& c, kd::freezer*& fz,
                 std::optional<kd::freezer>& holder) {
  const std::string path = id_of(a).path();
  try {
    holder.emplace(
        kd::freezer::open(a.opts.freeze(), a.opts.cgroup_root(), kd::segment_name(a.opts)));
    c = kd::make_recovery_config(holder->method(), holder->root());
  } catch (const krex::error& e) {
    report_error(a, path, e.what());
    return unusable;
  }
  fz = &*holder;
  const std::uint64_t recorded = n != nullptr ? n->cgroup_root_hash.load() : 0;
  if (recorded != 0 && recorded != c.domain_hash) {
    report_error(a, path,
                 "this segment's tenants freeze by " + kd::load_text(n->cgroup_root_text) +
                     ", but krexctl resolved " + krex::to_string(c.method) + ":" +
                     (fz->root().empty() ? "-" : fz->root()) +
                     " — pass --freeze and --cgroup-root (or KREX_FREEZE / KREX_CGROUP_ROOT) "
                     "as the tenants set them");
    return unusable;
  }
  return ok;
}

/// "0..2, 5": device numbers, runs of consecutive ones as ranges.
std::string device_ranges(const std::vector<std::uint32_t>& ds) {
  std::string s;
  for (std::size_t i = 0; i < ds.size();) {
    std::size_t j = i;
    while (j + 1 < ds.size() && ds[j + 1] == ds[j] + 1) ++j;
    s += (s.empty() ? "" : ", ") + std::to_string(ds[i]) +
         (j > i ? ".." + std::to_string(ds[j]) : std::string());
    i = j + 1;
  }
  return s;
}

int cmd_recover(const args& a) {
  const kd::segment_id id = id_of(a);
  std::unique_ptr<kd::segment> seg;
  try {
    // The checks of a joining tenant, validate() included: recovery acts
    // only on a segment it can trust to be laid out as it expects.
    seg = std::make_unique<kd::segment>(id, false);
  } catch (const krex::error& e) {
    report_error(a, id.path(),
                 e.code() == ENOENT ? e.what() + std::string("\n  hint: ") + no_segment_hint(a)
                                    : e.what());
    return e.code() == ENOENT ? no_segment : unusable;
  }
  kd::node_state& n = seg->node();
  kd::recovery_config c;
  kd::freezer* fz = nullptr;
  std::optional<kd::freezer> fz_holder;
  if (const int e = own_recovery(a, &n, c, fz, fz_holder)) return e;
  const auto in_use = [&](std::uint32_t d) {
    const kd::device_state& dev = n.devices[d];
    return dev.key.load() != 0 || dev.lease_slot.load() != 0 || (dev.gate.load() & 1U) != 0;
  };
  if (a.device >= 0 && !in_use(static_cast<std::uint32_t>(a.device))) {
    // Devices are the segment's entries, numbered in the order tenants
    // first used them; device 0 of a segment nobody used yet is just idle.
    std::vector<std::uint32_t> used;
    for (std::uint32_t d = 0; d < kd::max_devices; ++d)
      if (in_use(d)) used.push_back(d);
    if (a.device != 0 || !used.empty()) {
      report_error(a, id.path(),
                   "--device " + std::to_string(a.device) + ": segment " + id.path() +
                       (used.empty() ? std::string(" tracks no device yet")
                                     : " tracks device(s) " + device_ranges(used)) +
                       " — pass one of those (numbered as `krexctl status` lists them), or "
                       "leave out --device to recover every device");
      return usage;
    }
  }
  actions out(a.json);
  char line[512];
  for (std::uint32_t d = 0; d < kd::max_devices; ++d) {
    if (a.device >= 0 && d != static_cast<std::uint32_t>(a.device)) continue;
    if (!in_use(d)) continue;
    kd::device_state& dev = n.devices[d];
    std::uint32_t serving = 0, next = 0;
    if (kd::repair_queue(dev, serving, next)) {
      std::snprintf(line, sizeof line,
                    "device %u: repaired its corrupt region-lock queue (now_serving %u was ahead "
                    "of next_ticket %u): next_ticket set to %u, waiters queue anew",
                    d, serving, next, serving);
      out.add(line, [&](json::writer& j) {
        j.field("kind", "queue").field("device", d).field("result", "repaired");
        j.field("now_serving", serving).field("next_ticket", next);
      });
    }
    const std::int32_t holder = dev.lease_pid.load();
    const kd::recovery r = kd::recover_device(n, d, c, a.force);
    const auto device = [&](const char* result, const char* reason) {
      out.add(line, [&](json::writer& j) {
        j.field("kind", "device").field("device", d).field("result", result);
        if (reason != nullptr) j.field("reason", reason).field("holder_pid", holder);
      });
    };
    switch (r) {
      case kd::recovery::holder_dead:
        std::snprintf(
            line, sizeof line,
            "device %u: recovered (holder pid %d was dead): thawed, gate lowered, lock released", d,
            holder);
        device("recovered", "holder_dead");
        break;
      case kd::recovery::holder_alive:
        std::snprintf(line, sizeof line,
                      "device %u: recovered by force (holder pid %d was alive, within its lease): "
                      "thawed, gate lowered, lock released; its region reports lease_lost",
                      d, holder);
        device("recovered", "forced");
        break;
      case kd::recovery::lease_expired:
        std::snprintf(line, sizeof line, "device %u: recovered (holder pid %d outlived its lease)",
                      d, holder);
        device("recovered", "lease_expired");
        break;
      case kd::recovery::in_progress: {
        const std::uint64_t claim = dev.recover_claim.load();
        const bool live = claim != 0 && kd::claimant_alive(dev, claim, kd::now_ns());
        std::snprintf(line, sizeof line,
                      "device %u: a recovery is already in progress (pid %d, %s)%s", d,
                      kd::claim_pid(claim), live ? "alive" : "gone",
                      live && !a.force ? ": --force takes it over if it is stalled" : "");
        out.add(line, [&](json::writer& j) {
          j.field("kind", "device").field("device", d).field("result", "in_progress");
          j.field("recoverer_pid", kd::claim_pid(claim)).field("recoverer_alive", live);
        });
        break;
      }
      case kd::recovery::nothing:
        if (a.force && dev.lease_slot.load() == 0) {
          // No holder: thaw whatever is still frozen, as a wedged device needs.
          const int failed = kd::thaw_device(n, d, c);
          std::snprintf(line, sizeof line, "device %u: no region holder; thawed its tenants%s", d,
                        failed ? " (some thaws failed)" : "");
          out.add(line, [&](json::writer& j) {
            j.field("kind", "device").field("device", d).field("result", "thawed");
            j.field("failed_thaws", failed);
          });
        } else {
          const bool live_holder = dev.lease_slot.load() != 0;
          std::snprintf(line, sizeof line, "device %u: nothing to recover%s", d,
                        live_holder ? " (a live holder: --force takes its lease away)" : "");
          out.add(line, [&](json::writer& j) {
            j.field("kind", "device").field("device", d).field("result", "nothing");
            j.field("live_holder", live_holder);
          });
        }
        break;
    }
  }
  const std::uint32_t reaped = kd::reap_dead_tenants(n, c);
  if (reaped != 0) {
    std::snprintf(line, sizeof line, "reaped %u dead tenant slot(s)", reaped);
    out.add(line, [&](json::writer& j) { j.field("kind", "reap").field("slots", reaped); });
  }
  // Move each lock queue past served tickets nobody takes: dead waiters, and
  // live ones past the hand-off deadline (--force: at once; they queue anew).
  for (std::uint32_t d = 0; d < kd::max_devices; ++d) {
    if (a.device >= 0 && d != static_cast<std::uint32_t>(a.device)) continue;
    kd::device_state& dev = n.devices[d];
    if (dev.key.load() == 0) continue;
    const std::uint32_t skipped = kd::advance_queue(n, d, c, kd::recover_dead_holder, a.force);
    if (skipped != 0) {
      std::snprintf(line, sizeof line, "device %u: skipped %u served ticket(s) nobody took", d,
                    skipped);
      out.add(line, [&](json::writer& j) {
        j.field("kind", "queue").field("device", d).field("skipped_tickets", skipped);
      });
    }
  }
  const kd::node_view v = kd::read_status(n, id.path());
  if (a.json) {
    json::writer j;
    j.begin_object().field("command", "recover").field("segment", id.path());
    j.key("actions").raw(out.items()).key("problems").begin_array();
    for (const std::string& p : v.problems) j.value(p);
    j.end_array().key("unverified").begin_array();
    for (const std::string& u : v.unverified) j.value(u);
    j.end_array().field("healthy", v.problems.empty() && v.unverified.empty()).end_object();
    std::printf("%s\n", j.str().c_str());
  } else {
    for (const std::string& u : v.unverified) std::printf("unverified: %s\n", u.c_str());
    for (const std::string& p : v.problems) std::printf("problem left: %s\n", p.c_str());
  }
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

/// What clean found and did (or, --dry-run, would do).
struct cleaner {
  const args& a;
  actions out;
  int segments = 0;  // segment and temporary files removed (--dry-run: to remove)
  int cgroups = 0;   // leaves and segment directories removed (--dry-run: to remove)
  int left = 0;      // stale items left

  /// One line of the report: `<text>` and, in JSON, {kind, path, action, reason?}.
  void say(const std::string& text, const char* kind, const std::string& path, const char* action,
           const std::string& reason = "") {
    out.add(text, [&](json::writer& j) {
      j.field("kind", kind).field("path", path).field("action", action);
      if (!reason.empty()) j.field("reason", reason);
    });
  }
  /// Removes a segment's directory entry (`what`: why it may go), or says it would.
  void remove_file(const std::string& path, const std::string& what) {
    if (a.dry_run) {
      say(what + ", would be removed", "segment", path, "would be removed", what);
      ++segments;
    } else if (::unlink(path.c_str()) == 0 || errno == ENOENT) {
      say(what + ", removed", "segment", path, "removed", what);
      ++segments;
    } else {
      const std::string err = std::strerror(errno);  // NOLINT(concurrency-mt-unsafe)
      say(what + ", cannot be removed: " + err, "segment", path, "cannot be removed", err);
      ++left;
    }
  }
};

/// Temporary files of segment `id` that remove_dead_temp_files() would
/// remove: a dead creator's, a regular file, the caller's.
std::vector<std::string> dead_temp_files(const kd::segment_id& id) {
  std::vector<std::string> found;
  DIR* dir = ::opendir(id.dir.c_str());
  if (dir == nullptr) return found;
  while (const dirent* e = ::readdir(dir)) {  // NOLINT(concurrency-mt-unsafe)
    std::int64_t pid = 0;
    std::uint64_t start = 0;
    struct stat st {};
    if (kd::parse_temp_name(e->d_name, id.name, pid, start) && !kd::alive(pid, start) &&
        ::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
        st.st_uid == ::geteuid())
      found.emplace_back(e->d_name);
  }
  ::closedir(dir);
  return found;
}

/// Segment files named exactly for --segment (every base with --all) in
/// this user's (or group's) domain, and the temporary files their dead
/// creators left. A file that does not belong to the domain (another
/// owner, or another group in group mode) is never removed, except by root
/// with --any-owner; one that is no usable segment is removed (nobody can
/// have joined it); a segment with a live tenant or guardian is kept.
void clean_segments(cleaner& k) {
  const args& a = k.a;
  const kd::segment_id mine = id_of(a);
  const std::string tag = mine.domain.tag();
  DIR* dir = ::opendir(mine.dir.c_str());
  if (dir == nullptr) return;
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
    else if (std::find(temps.begin(), temps.end(), name.substr(0, plus)) == temps.end())
      temps.push_back(name.substr(0, plus));
  }
  ::closedir(dir);
  for (const auto& [name, entry] : names) {
    kd::segment_id id = mine;
    id.name = name;
    id.base = entry.base;
    const std::string path = id.path();
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) continue;
    if (!kd::owned_by(st, id.domain) && !a.any_owner) {
      const std::string problem = kd::file_problem(st, id.domain);
      k.say("segment " + path + " " + problem +
                "; not yours: skipped (it blocks this segment name: have its owner or root "
                "remove it, root with --any-owner)",
            "segment", path, "skipped", problem);
      ++k.left;
      continue;
    }
    const std::string layout = "layout " + std::to_string(entry.layout);
    if (entry.layout != kd::layout_version) {
      if (!a.force) {
        k.say("segment " + path + ": " + layout +
                  ", which this krexctl cannot judge; kept (--force removes it)",
              "segment", path, "kept", layout);
        ++k.left;
        continue;
      }
      k.remove_file(path, "segment " + path + ": " + layout + "; --force");
      continue;
    }
    std::unique_ptr<kd::node_state> node;
    std::string why;
    if (inspect(id, node, why, true) == ok) {
      const std::uint32_t live = live_members(*node);
      if (live != 0) {
        k.say("segment " + path + ": in use (" + std::to_string(live) + " live member(s)), kept",
              "segment", path, "kept", "in use");
        continue;
      }
      k.remove_file(path, "segment " + path + ": no live member");
    } else {
      // No process of this build can have joined it: nothing to judge.
      k.remove_file(path, why + ": unusable");
    }
  }
  for (const std::string& name : temps) {
    kd::segment_id id = mine;
    id.name = name;
    const std::vector<std::string> files =
        a.dry_run ? dead_temp_files(id) : kd::remove_dead_temp_files(id);
    for (const std::string& t : files) {
      const std::string path = id.dir + "/" + t;
      const char* action = a.dry_run ? "would be removed" : "removed";
      k.say("temporary file " + path + " of a dead creator: " + action, "temporary file", path,
            action);
      ++k.segments;
    }
  }
}

/// Stale leaves `t<N>` of one krex root: a leaf whose slot in `node` (the
/// segment's copy; nullptr when there is none) is not held by a live tenant.
/// `own_dir`: `root` is a segment's directory under the derived root,
/// removed once its last leaf is gone.
void clean_root(cleaner& k, const std::string& root, const kd::node_state* node,
                const kd::recovery_config& c, bool own_dir) {
  const args& a = k.a;
  const bool have = node != nullptr;
  const bool v2 = c.method == krex::freeze_method::cgroup_v2;
  DIR* dir = ::opendir(root.c_str());
  if (dir == nullptr) return;
  std::vector<std::string> leaves;
  int others = 0;  // subdirectories that are no leaf: they keep the directory
  while (const dirent* e = ::readdir(dir)) {  // NOLINT(concurrency-mt-unsafe)
    if (e->d_type != DT_DIR) continue;
    if (kd::cgroup::is_leaf_name(e->d_name))
      leaves.push_back(e->d_name);
    else if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
      ++others;
  }
  ::closedir(dir);
  int kept = 0;  // leaves that stay: live tenants', busy ones without --kill
  for (const std::string& name : leaves) {
    const unsigned long slot = std::strtoul(name.c_str() + 1, nullptr, 10);
    const std::string leaf = root + "/" + name;
    if (have && slot < kd::max_tenants && node->tenants[slot].owner.load() > 0 &&
        kd::slot_alive(node->tenants[slot])) {
      ++kept;
      continue;  // a live tenant's leaf
    }
    std::string procs;
    kd::cgroup::read_file(leaf + "/cgroup.procs", procs);
    const bool busy = procs.find_first_of("0123456789") != std::string::npos;
    if (busy && !a.kill) {
      for (char& ch : procs)
        if (ch == '\n') ch = ' ';
      k.say("cgroup " + leaf + ": stale, but processes " + procs +
                "still run in it; kept (--kill ends them)",
            "cgroup", leaf, "kept", "processes run in it");
      ++k.left;
      ++kept;
      continue;
    }
    if (a.dry_run) {
      const char* action = busy ? "would be killed and removed" : "would be removed";
      k.say("cgroup " + leaf + ": stale, " + action, "cgroup", leaf, action, "stale");
      ++k.cgroups;
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
    const char* action = gone ? "removed" : "cannot be removed";
    k.say("cgroup " + leaf + ": " + action, "cgroup", leaf, action, "stale");
    if (gone)
      ++k.cgroups;
    else
      ++k.left;
  }
  // Under the derived root each segment has a directory of its own: it
  // goes with its last leaf (rmdir fails while a leaf is left).
  if (!own_dir) return;
  if (a.dry_run) {
    if (kept == 0 && others == 0) {
      k.say("cgroup " + root + ": segment directory would be removed", "cgroup directory", root,
            "would be removed");
      ++k.cgroups;
    }
  } else if (::rmdir(root.c_str()) == 0) {
    k.say("cgroup " + root + ": segment directory removed", "cgroup directory", root, "removed");
    ++k.cgroups;
  }
}

/// Stale leaves and segment directories; false when krexctl's freeze
/// domain cannot be used (the exit status is then in `rc`).
bool clean_leaves(cleaner& k, int& rc) {
  const args& a = k.a;
  const kd::segment_id mine = id_of(a);
  std::unique_ptr<kd::node_state> node;
  std::string why;
  const bool have = inspect(mine, node, why) == ok;
  kd::recovery_config c;
  kd::freezer* fz = nullptr;
  std::optional<kd::freezer> fz_holder;
  if (const int e = own_recovery(a, have ? node.get() : nullptr, c, fz, fz_holder)) {
    rc = e;
    return false;
  }
  if (c.method != krex::freeze_method::cgroup_v2 && c.method != krex::freeze_method::cgroup_v1) {
    k.say(std::string("cgroups: freeze method ") + krex::to_string(c.method) + " uses none",
          "cgroups", "", "none");
    return true;
  }
  const bool derived = a.opts.cgroup_root().empty();
  clean_root(k, fz->root(), have ? node.get() : nullptr, c, derived);
  if (!derived || !a.all) return true;
  // --all: every segment directory of this domain under the derived root,
  // also of segments whose file is gone. Each is judged by its own segment
  // (if readable) and thawed by its own root, never by a path from a segment.
  const std::string base = fz->root().substr(0, fz->root().rfind('/'));
  DIR* dir = ::opendir(base.c_str());
  if (dir == nullptr) return true;
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
    const std::string root = base + "/" + name;
    kd::recovery_config rc_other;
    try {
      rc_other = kd::make_recovery_config(c.method, root);
    } catch (const krex::error&) {
      continue;  // a root too long to thaw by
    }
    const std::uint64_t recorded = readable ? other->cgroup_root_hash.load() : 0;
    if (recorded != 0 && recorded != rc_other.domain_hash) {
      const std::string theirs = kd::load_text(other->cgroup_root_text);
      k.say("cgroup " + root + ": its segment's tenants freeze by " + theirs + "; skipped",
            "cgroup directory", root, "skipped", "another freeze domain: " + theirs);
      ++k.left;
      continue;
    }
    clean_root(k, root, readable ? other.get() : nullptr, rc_other, true);
  }
  return true;
}

int cmd_clean(const args& a) {
  cleaner k{a, actions(a.json)};
  int rc = ok;
  // Leaves first: deciding which leaf is stale needs the segment.
  if (!clean_leaves(k, rc)) return rc;
  clean_segments(k);
  const int status = k.left == 0 ? ok : problems;
  if (a.json) {
    json::writer j;
    j.begin_object().field("command", "clean").field("segment", id_of(a).path());
    j.field("dry_run", a.dry_run).key("actions").raw(k.out.items());
    j.key(a.dry_run ? "to_remove" : "removed").begin_object();
    j.field("segments", k.segments).field("cgroups", k.cgroups).end_object();
    j.field("left", k.left).field("healthy", status == ok).end_object();
    std::printf("%s\n", j.str().c_str());
  } else if (a.dry_run) {
    std::printf(
        "clean --dry-run: %d segment(s) and %d cgroup(s) would be removed, %d stale "
        "item(s) would be left; nothing was removed\n",
        k.segments, k.cgroups, k.left);
  } else {
    std::printf("clean: %d segment(s) and %d cgroup(s) removed, %d stale item(s) left\n",
                k.segments, k.cgroups, k.left);
  }
  return status;
}

/// `krexctl options`: detail::option_table and the other variables.
int cmd_options(const args& a) {
  if (a.markdown) {
    std::printf("%s", krex_tools::options_markdown().c_str());
    return ok;
  }
  if (!a.write_dir.empty()) {
    const std::string failed = krex_tools::write_generated(a.write_dir);
    std::fprintf(stderr, "%s", failed.c_str());
    return failed.empty() ? ok : problems;
  }
  std::printf(
      "KREX_* variables override a tenant's krex::options when it joins (options::with_env()):\n");
  for (const kd::option_spec& s : kd::option_table) {
    std::printf("  %-26s %-20s default %s\n", s.env, s.name,
                krex_tools::option_default_text(s).c_str());
    std::printf("      %s\n", krex_tools::option_doc(s).c_str());
  }
  std::printf("Other KREX_* variables krex reads:\n");
  for (const kd::env_variable& e : kd::other_env_table)
    std::printf("  %-26s %s\n", e.name, e.doc);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  const args a = parse(argc, argv);  // usage errors, --help and --version exit here
  try {
    if (a.command == "status") return cmd_status(a);
    if (a.command == "recover") return cmd_recover(a);
    if (a.command == "list") return cmd_list(a);
    if (a.command == "options") return cmd_options(a);
    return cmd_clean(a);
  } catch (const krex::error& e) {
    report_error(a, "", e.what());
    return e.where() == krex::step::options ? usage : unusable;
  } catch (const std::exception& e) {
    report_error(a, "", e.what());
    return unusable;
  }
}
