// SPDX-License-Identifier: Apache-2.0
// Tools behave like tools (issue 14): krexctl, krex_demo and krex_eval, the
// real binaries, share one argument parser and one JSON writer
// (tools/krex_tools/): --help on stdout and exit 0 (per command too),
// --version, --opt=value, unknown and unused options rejected with exit 64
// naming them; --json for every krexctl command (one JSON document on
// stdout); clean --dry-run says what would be removed and removes nothing;
// the guardian's process title is krex-guardian.

#include "cgroup_util.hpp"
#include "errors.hpp"
#include "holder.hpp"
#include "krex_test.hpp"
#include "segment_util.hpp"

#include <krex/region.hpp>
#include <krex_tools/json.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#ifndef KREX_KREXCTL_PATH
#error "tests/CMakeLists.txt passes KREX_KREXCTL_PATH when the krexctl target exists"
#endif

using namespace std::chrono_literals;
using krex_test::read_text;
using krex_test::scoped_segment;

namespace {

struct result {
  int rc = -1;
  std::string out, err;
};

/// Runs `cmd` (a shell command line), stdout and stderr apart, bounded by 60 s.
result run(const std::string& cmd) {
  static int n = 0;
  const std::string err_path =
      "/tmp/krex-test-tools-" + std::to_string(::getpid()) + "-" + std::to_string(++n) + ".err";
  result r;
  FILE* p = ::popen(("timeout 60 " + cmd + " 2>" + err_path).c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t got;
  while ((got = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, got);
  const int st = ::pclose(p);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.err = krex_test::file_text(err_path);
  ::unlink(err_path.c_str());
  return r;
}

result krexctl(const std::string& args) { return run(KREX_KREXCTL_PATH " " + args); }

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

/// A strict JSON checker (RFC 8259 grammar, no extensions): true when `s`
/// is exactly one JSON value, surrounding whitespace and one final newline
/// allowed.
class json_check {
 public:
  static bool one_document(const std::string& s) {
    json_check c{s};
    c.ws();
    if (!c.value()) return false;
    c.ws();
    return c.m_i == s.size();
  }

 private:
  explicit json_check(const std::string& s) : m_s(s) {}
  bool value() {
    if (m_i >= m_s.size()) return false;
    switch (m_s[m_i]) {
      case '{': return sequence('}', true);
      case '[': return sequence(']', false);
      case '"': return string();
      case 't': return word("true");
      case 'f': return word("false");
      case 'n': return word("null");
      default: return number();
    }
  }
  // An object or an array: its members (a key, ':' and a value) or values,
  // separated by ',', up to `close`.
  bool sequence(char close, bool keyed) {
    ++m_i;
    ws();
    if (eat(close)) return true;
    for (;;) {
      ws();
      if (keyed) {
        if (m_i >= m_s.size() || m_s[m_i] != '"' || !string()) return false;
        ws();
        if (!eat(':')) return false;
        ws();
      }
      if (!value()) return false;
      ws();
      if (eat(close)) return true;
      if (!eat(',')) return false;
    }
  }
  bool string() {
    ++m_i;
    while (m_i < m_s.size()) {
      const auto c = static_cast<unsigned char>(m_s[m_i++]);
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c != '\\') continue;
      if (m_i >= m_s.size()) return false;
      const char e = m_s[m_i++];
      if (e == 'u') {
        for (int k = 0; k < 4; ++k, ++m_i)
          if (m_i >= m_s.size() || !std::isxdigit(static_cast<unsigned char>(m_s[m_i]))) return false;
      } else if (std::string("\"\\/bfnrt").find(e) == std::string::npos) {
        return false;
      }
    }
    return false;
  }
  bool number() {
    const size_t from = m_i;
    eat('-');
    if (eat('0')) {
    } else if (!digits()) {
      return false;
    }
    if (eat('.') && !digits()) return false;
    if (m_i < m_s.size() && (m_s[m_i] == 'e' || m_s[m_i] == 'E')) {
      ++m_i;
      if (!eat('+')) eat('-');
      if (!digits()) return false;
    }
    return m_i > from;
  }
  bool digits() {
    const size_t from = m_i;
    while (m_i < m_s.size() && m_s[m_i] >= '0' && m_s[m_i] <= '9') ++m_i;
    return m_i > from;
  }
  bool word(const char* w) {
    const std::string x = w;
    if (m_s.compare(m_i, x.size(), x) != 0) return false;
    m_i += x.size();
    return true;
  }
  bool eat(char c) {
    if (m_i < m_s.size() && m_s[m_i] == c) {
      ++m_i;
      return true;
    }
    return false;
  }
  void ws() {
    while (m_i < m_s.size() && (m_s[m_i] == ' ' || m_s[m_i] == '\t' || m_s[m_i] == '\n' ||
                                m_s[m_i] == '\r'))
      ++m_i;
  }
  const std::string& m_s;
  size_t m_i = 0;
};

/// The version in CMakeLists.txt's project(krex VERSION x.y.z).
std::string project_version() {
  const std::string s = krex_test::file_text(KREX_SOURCE_DIR "/CMakeLists.txt");
  const std::string key = "project(krex VERSION ";
  const size_t at = s.find(key);
  if (at == std::string::npos) return "";
  const size_t from = at + key.size();
  return s.substr(from, s.find_first_of(" )", from) - from);
}

/// Every tool the test can run: krexctl always, the demo and the eval where built.
std::vector<std::string> tools() {
  std::vector<std::string> t = {KREX_KREXCTL_PATH};
#ifdef KREX_DEMO_PATH
  t.emplace_back(KREX_DEMO_PATH);
#endif
#ifdef KREX_EVAL_PATH
  t.emplace_back(KREX_EVAL_PATH);
#endif
  return t;
}

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

/// The segment's guardian pid (0 if none started within 5 s).
int guardian_of(const scoped_segment& seg) {
  krex::detail::segment s{seg.opts()};
  return krex_test::wait_guardian_pid(s.node());
}

/// Waits for `pid` to be gone (a guardian leaves about 0.5 s after its
/// last tenant); SIGKILLs it after 10 s.
void wait_gone(int pid) {
  if (pid > 0 && !krex_test::wait_until([&] { return ::kill(pid, 0) != 0; }, 10s))
    ::kill(pid, SIGKILL);
}

}  // namespace

// The shared writer: nesting, escaping and numbers make one valid document.
TEST(ToolsJson, WriterMakesValidDocuments) {
  krex_tools::json::writer j;
  j.begin_object().field("text", std::string("a\"b\\c\n\t\x01 ü")).field("n", -3);
  j.field("x", 0.1).field("nan", std::nan("")).field("big", std::uint64_t{18446744073709551615ULL});
  j.key("list").begin_array().value(1.5).value(true).null().begin_object().end_object();
  j.begin_array().end_array().end_array().key("raw").raw("{\"k\":[1,2]}").end_object();
  EXPECT_TRUE(j.done());
  EXPECT_TRUE(json_check::one_document(j.str())) << j.str();
  EXPECT_EQ(j.str(),
            "{\"text\":\"a\\\"b\\\\c\\n\\t\\u0001 ü\",\"n\":-3,\"x\":0.1,\"nan\":null,"
            "\"big\":18446744073709551615,\"list\":[1.5,true,null,{},[]],\"raw\":{\"k\":[1,2]}}");
  EXPECT_EQ(krex_tools::json::number(0.1 + 0.2), "0.30000000000000004");  // reads back exactly
  EXPECT_EQ(krex_tools::json::number(1234.5678, 6), "1234.57");
  // Misuse is a bug in the tool, caught at once rather than written.
  krex_tools::json::writer bad;
  bad.begin_object();
  EXPECT_THROW(bad.value(1), std::logic_error);  // a value without a key
  EXPECT_THROW(bad.end_array(), std::logic_error);
  EXPECT_FALSE(json_check::one_document("{\"a\":1,}"));  // the checker is strict
  EXPECT_FALSE(json_check::one_document("{\"a\":1}{}"));
}

// --help and -h print the usage on stdout and exit 0, for each tool and
// each krexctl command (`krexctl status --help`, `krexctl help status`).
TEST(Tools, HelpGoesToStdoutAndExitsZero) {
  for (const std::string& t : tools()) {
    for (const char* flag : {" --help", " -h"}) {
      const result r = run(t + flag);
      EXPECT_EQ(r.rc, 0) << t << flag << "\n" << r.out << r.err;
      EXPECT_TRUE(contains(r.out, "usage: " + base_name(t))) << t << "\n" << r.out;
      EXPECT_TRUE(contains(r.out, "--version")) << r.out;
      EXPECT_EQ(r.err, "") << t;
    }
  }
  for (const std::string cmd : {"status", "recover", "clean"}) {
    for (const std::string& args : {cmd + " --help", "help " + cmd, cmd + " --segment x --help"}) {
      const result r = krexctl(args);
      EXPECT_EQ(r.rc, 0) << args << "\n" << r.out << r.err;
      EXPECT_TRUE(contains(r.out, "usage: krexctl " + cmd + " [--segment NAME")) << args << r.out;
      EXPECT_EQ(r.err, "") << args;
    }
  }
  // Per-command help lists that command's options only.
  const result status = krexctl("status --help");
  EXPECT_TRUE(contains(status.out, "--json")) << status.out;
  EXPECT_FALSE(contains(status.out, "--dry-run")) << status.out;
  EXPECT_TRUE(contains(krexctl("clean --help").out, "--dry-run"));
  const result all = krexctl("--help");
  for (const char* cmd : {"status", "recover", "clean"})
    EXPECT_TRUE(contains(all.out, std::string("krexctl ") + cmd)) << all.out;
}

// --version: the project's version (CMakeLists.txt), on stdout, exit 0.
TEST(Tools, VersionIsTheProjectVersion) {
  const std::string v = project_version();
  ASSERT_FALSE(v.empty());
  for (const std::string& t : tools()) {
    const result r = run(t + " --version");
    EXPECT_EQ(r.rc, 0) << t << r.err;
    EXPECT_EQ(r.out, base_name(t) + " (krex) " + v + "\n");
  }
  const result r = krexctl("status --version");
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out, "krexctl (krex) " + v + "\n");
}

// Usage errors: exit 64, nothing on stdout, a message naming the option and
// the usage on stderr. An option a command does not use is one of them
// (krexctl accepted `status --kill` and ignored it).
TEST(Tools, UnknownAndUnusedOptionsAreRejected) {
  const krex_test::usage_case cases[] = {
      {"status --bogus", "unknown option '--bogus'"},
      {"status --kill", "option --kill is not used by `krexctl status`"},
      {"status --force", "option --force is not used by `krexctl status`"},
      {"status --device 0", "option --device is not used by `krexctl status`"},
      {"status --dry-run", "option --dry-run is not used by `krexctl status`"},
      {"recover --dry-run", "option --dry-run is not used by `krexctl recover`"},
      {"recover --all", "option --all is not used by `krexctl recover`"},
      {"clean --device 0", "option --device is not used by `krexctl clean`"},
      {"status --json=yes", "--json takes no value"},
      {"status --segment", "--segment needs a value"},
      {"status --segment --json", "--segment needs a value"},
      {"status extra", "unexpected argument 'extra'"},
      {"recover --device=16", "invalid value '16' for --device"},
      {"frobnicate", "unknown command 'frobnicate'"},
      {"", "no command"},
  };
  for (const auto& c : cases) {
    const result r = krexctl(c.args);
    EXPECT_EQ(r.rc, 64) << c.args << "\n" << r.out << r.err;
    EXPECT_EQ(r.out, "") << c.args;
    EXPECT_TRUE(contains(r.err, c.says)) << c.args << "\n" << r.err;
    EXPECT_TRUE(contains(r.err, "usage: krexctl")) << c.args << "\n" << r.err;
  }
#ifdef KREX_DEMO_PATH
  for (const std::string args : {"--bogus 1", "--samples", "--commands=0", "--json", "extra"}) {
    const result r = run(KREX_DEMO_PATH " " + args);
    EXPECT_EQ(r.rc, 64) << args << "\n" << r.out << r.err;
    EXPECT_TRUE(contains(r.err, "usage: krex_demo")) << args << "\n" << r.err;
  }
  EXPECT_TRUE(contains(run(KREX_DEMO_PATH " --bogus 1").err, "unknown option '--bogus'"));
  EXPECT_TRUE(contains(run(KREX_DEMO_PATH " --commands=0").err,
                       "invalid value '0' for --commands: an integer 1..512"));
#endif
}

#ifdef KREX_DEMO_PATH
// The demo freezes its CPU-only siblings (it sets scope `all`: on the host
// backend the device is the CPU), which the default scope `device` would
// leave running, and ends with a one-line verdict (issue 21).
TEST(Tools, DemoFreezesCpuSiblingsAndGivesAVerdict) {
  const std::string json = "/tmp/krex-test-demo-" + std::to_string(::getpid()) + ".json";
  const std::string args = " --commands 6 --concurrency 3 --samples 3 --kernel-ms 2 "
                           "--compile-ms 40 --json " + json;
  const result r = run(std::string(KREX_DEMO_PATH) + args);
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const bool cut = contains(r.out, "\nkrex cut p95 inflation from ");
  const bool not_here = contains(r.out, "\nkrex did not help here because ");
  EXPECT_TRUE(cut != not_here) << r.out;
  const std::string j = read_text(json);
  EXPECT_TRUE(contains(j, "\"verdict\":\"krex ")) << j;
  EXPECT_TRUE(contains(j, "\"reserved_foreign_ns\":")) << j;
  // Three at once: while one command's timed loop runs, its two siblings are
  // in their CPU phases or waiting for the region; scope `all` freezes them.
  const std::size_t k = j.find("\"mode\":\"krex\"");
  ASSERT_NE(k, std::string::npos) << j;
  EXPECT_FALSE(contains(j.substr(k), "\"frozen_siblings\":0,")) << j;
  std::remove(json.c_str());
  // The library default, scope `device`, leaves the CPU-only siblings running:
  // the reason the demo sets `all` (the variable overrides what code sets).
  const result d = run("env KREX_FREEZE_SCOPE=device " + std::string(KREX_DEMO_PATH) + args);
  ASSERT_EQ(d.rc, 0) << d.out << d.err;
  const std::string jd = read_text(json);
  const std::size_t kd = jd.find("\"mode\":\"krex\"");
  ASSERT_NE(kd, std::string::npos) << jd;
  EXPECT_TRUE(contains(jd.substr(kd), "\"frozen_siblings\":0,")) << jd;
  std::remove(json.c_str());
}

// On a machine busy with non-krex work the demo says its numbers mean little
// (issue 21): spinners (not krex tenants) on every CPU put foreign load on
// the reserved CPU during krex's timed loops (the regions'
// reserved_foreign_ns) and keep the CPUs busy before it starts.
TEST(Tools, DemoWarnsWhenNonKrexWorkSharesTheMachine) {
  std::vector<krex_test::child> spinners = krex_test::spin_on_every_cpu(120'000'000'000ULL);  // killed at the end
  const std::string json = "/tmp/krex-test-demo-busy-" + std::to_string(::getpid()) + ".json";
  // Bodies of 60 ms per region: /proc/stat counts in 10 ms ticks, so regions
  // of a few ms (the first version of this test: 2 ms kernels) can read 0
  // foreign ticks beside a spinner (seen once in a loaded CI run).
  const result r = run(std::string(KREX_DEMO_PATH) +
                       " --commands 6 --concurrency 3 --samples 3 --kernel-ms 20 --compile-ms 40"
                       " --json " + json);
  spinners.clear();
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  const std::string all = r.out + r.err;
  EXPECT_TRUE(contains(all, "the regions' reserved_foreign_ns): non-krex work shares this "
                            "machine"))
      << all;
  EXPECT_TRUE(contains(all, "the numbers above say little about krex: rerun on a quiet machine"))
      << all;
  const std::string j = read_text(json);
  EXPECT_TRUE(contains(j, "\"warnings\":[\"")) << j;
  EXPECT_FALSE(contains(j, "\"reserved_foreign_ns\":0,")) << j;
  std::remove(json.c_str());
}
#endif  // KREX_DEMO_PATH

// --opt=value is --opt value.
TEST(Tools, OptionEqualsValue) {
  scoped_segment seg;
  const result a = krexctl("status --segment=" + seg.name());
  const result b = krexctl("status --segment " + seg.name());
  EXPECT_EQ(a.rc, 2) << a.out << a.err;
  EXPECT_TRUE(contains(a.err, seg.name())) << a.err;
  // The same error either way. Only its first line: the hint after it lists
  // the segments that exist, which other processes on the node may change
  // between the two calls.
  const auto first_line = [](const std::string& t) { return t.substr(0, t.find('\n')); };
  EXPECT_EQ(first_line(a.err), first_line(b.err));
  EXPECT_FALSE(first_line(a.err).empty()) << a.err;
  { krex::detail::segment s{seg.opts()}; }  // a segment without members
  const result c = krexctl("status --json --segment=" + seg.name());
  EXPECT_EQ(c.rc, 0) << c.out << c.err;
  EXPECT_TRUE(contains(c.out, "\"segment\":\"/dev/shm/krex-")) << c.out;
  const result d = krexctl("recover --freeze=none --device=0 --segment=" + seg.name());
  EXPECT_EQ(d.rc, 0) << d.out << d.err;
}

// --json for every command: one JSON document on stdout, nothing else, on
// success and on failure.
TEST(Tools, EveryKrexctlCommandPrintsOneJsonDocument) {
  scoped_segment seg;
  const std::string s = " --json --segment " + seg.name();
  // No segment: each command's document names the error.
  for (const std::string cmd : {"status", "recover --freeze none"}) {
    const result r = krexctl(cmd + s);
    EXPECT_EQ(r.rc, 2) << cmd << "\n" << r.out << r.err;
    EXPECT_TRUE(json_check::one_document(r.out)) << cmd << "\n" << r.out;
    EXPECT_TRUE(contains(r.out, "\"error\":\"krex: segment: no segment")) << r.out;
    EXPECT_TRUE(contains(r.out, "\"healthy\":false")) << r.out;
  }
  result r = krexctl("clean --freeze none" + s);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(json_check::one_document(r.out)) << r.out;
  EXPECT_TRUE(contains(r.out, "\"command\":\"clean\"")) << r.out;

  // A live tenant: recover finds nothing to do; clean keeps the segment.
  krex_test::member tenant{seg.opts(), [](krex::tenant& t) { krex::region reg{t}; }};
  ASSERT_TRUE(tenant.ready(20s));
  // The guardian is forked on demand: on a busy machine it may still be starting.
  ASSERT_TRUE(krex_test::wait_until([&] { return krexctl("status" + s).rc == 0; }, 10s));
  r = krexctl("status" + s);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(json_check::one_document(r.out)) << r.out;
  r = krexctl("recover --freeze none" + s);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(json_check::one_document(r.out)) << r.out;
  EXPECT_TRUE(contains(r.out, "\"command\":\"recover\",\"segment\":\"/dev/shm/krex-")) << r.out;
  EXPECT_TRUE(contains(r.out, "\"kind\":\"device\",\"device\":0,\"result\":\"nothing\"")) << r.out;
  EXPECT_TRUE(contains(r.out, "\"healthy\":true")) << r.out;
  r = krexctl("clean --freeze none" + s);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(json_check::one_document(r.out)) << r.out;
  EXPECT_TRUE(contains(r.out, "\"action\":\"kept\",\"reason\":\"in use\"")) << r.out;
  // Another freeze domain than the tenants': exit 3, still one document.
  r = krexctl("recover --freeze signal" + s);
  const int guardian = guardian_of(seg);
  EXPECT_EQ(tenant.finish(10s), 0);
  wait_gone(guardian);
  if (r.rc == 3) {  // only where the tenants recorded a domain
    EXPECT_TRUE(json_check::one_document(r.out)) << r.out;
    EXPECT_TRUE(contains(r.out, "\"error\":")) << r.out;
  }

  // Dead members: clean --json removes the segment.
  r = krexctl("clean --freeze none" + s);
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(json_check::one_document(r.out)) << r.out;
  EXPECT_TRUE(contains(r.out, "\"action\":\"removed\"")) << r.out;
  EXPECT_TRUE(contains(r.out, "\"removed\":{\"segments\":1,")) << r.out;
}

// clean --dry-run tells the truth: it lists what would be removed (the
// segment, a dead creator's temporary file), counts it as "would be
// removed" and removes nothing. Today's main summed "0 segment(s) ... to
// remove" and never mentioned temporary files.
TEST(Tools, CleanDryRunSaysWhatWouldBeRemoved) {
  scoped_segment seg;
  { krex::detail::segment s{seg.opts()}; }  // a segment nobody is in
  const std::string path = "/dev/shm/" + krex::detail::segment_name(seg.opts());
  // A temporary file of a creator that is gone (a pid past pid_max).
  const std::string temp = path + "+tmp-999999999-12345";
  ASSERT_TRUE(krex_test::plant_file(temp, "partial", 0600));
  ASSERT_EQ(::access(path.c_str(), F_OK), 0);

  result r = krexctl("clean --dry-run --freeze none --segment " + seg.name());
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "segment " + path + ": no live member, would be removed")) << r.out;
  EXPECT_TRUE(contains(r.out, "temporary file " + temp + " of a dead creator: would be removed"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "clean --dry-run: 2 segment(s) and 0 cgroup(s) would be removed, "
                              "0 stale item(s) would be left; nothing was removed"))
      << r.out;
  EXPECT_FALSE(contains(r.out, ", removed")) << r.out;
  EXPECT_EQ(::access(path.c_str(), F_OK), 0) << "--dry-run removed the segment";
  EXPECT_EQ(::access(temp.c_str(), F_OK), 0) << "--dry-run removed the temporary file";

  r = krexctl("clean --dry-run --json --freeze none --segment " + seg.name());
  EXPECT_TRUE(json_check::one_document(r.out)) << r.out;
  EXPECT_TRUE(contains(r.out, "\"dry_run\":true")) << r.out;
  EXPECT_TRUE(contains(r.out, "\"to_remove\":{\"segments\":2,\"cgroups\":0}")) << r.out;
  EXPECT_FALSE(contains(r.out, "\"action\":\"removed\"")) << r.out;

  r = krexctl("clean --freeze none --segment " + seg.name());
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "temporary file " + temp + " of a dead creator: removed")) << r.out;
  EXPECT_TRUE(contains(r.out, "clean: 2 segment(s) and 0 cgroup(s) removed, 0 stale item(s) left"))
      << r.out;
  EXPECT_NE(::access(path.c_str(), F_OK), 0);
  EXPECT_NE(::access(temp.c_str(), F_OK), 0);
}

// The guardian's process title says what it is: `ps`, `top` and
// /proc/<pid>/comm show krex-guardian, not the tenant's program name.
TEST(Tools, GuardianProcessTitleIsKrexGuardian) {
  scoped_segment seg;
  krex_test::member tenant{seg.opts(), [](krex::tenant& t) { krex::region reg{t}; }};
  ASSERT_TRUE(tenant.ready(20s));
  const int guardian = guardian_of(seg);
  ASSERT_GT(guardian, 0);
  std::string comm = read_text("/proc/" + std::to_string(guardian) + "/comm");
  EXPECT_EQ(comm, "krex-guardian\n");
  // And the tenant keeps its own name.
  EXPECT_NE(read_text("/proc/" + std::to_string(tenant.pid()) + "/comm"),
            "krex-guardian\n");
  EXPECT_EQ(tenant.finish(10s), 0);
  wait_gone(guardian);
}
