// SPDX-License-Identifier: Apache-2.0
// region_report is printable: operator<< for people and to_json for tools,
// each with every field, and JSON that parses whatever the notes hold.

#include "proc_util.hpp"

#include <krex/report.hpp>

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

// Every field set, each to a value no other field has, so that finding
// "name=value" proves that this field was written.
krex::region_report full_report() {
  krex::region_report r;
  r.epoch = 11;
  r.ticket = 12;
  r.siblings_seen = 13;
  r.siblings_drained = 14;
  r.siblings_gone = 15;
  r.undrained_pids = {101, 102};
  r.frozen_pids = {103};
  r.unverified_pids = {104, 105, 106};
  r.lock_ns = 1001;
  r.gate_ns = 1002;
  r.drain_ns = 1003;
  r.freeze_ns = 1004;
  r.pin_ns = 1005;
  r.body_ns = 18446744073709551615ULL;  // the largest, written in full
  r.exit_ns = 1007;
  r.gated = true;
  r.drained = false;
  r.contended = true;
  r.frozen = true;
  r.pinned = true;
  r.took_over_gate = true;
  r.lease_lost = false;
  r.thaw_failed = true;
  r.freeze_broken = true;
  r.freeze = krex::freeze_method::cgroup_v2;
  r.scope = krex::freeze_scope::active;
  r.pinned_cpus = {7, 9};
  r.gating = "auto";
  r.notes = {"freeze: auto chose signal: \"quoted\" C:\\path", "tab\there\nnewline \x01 \xc2\xb5s"};
  r.warnings = {"bad byte \xff end"};
  r.body_preemptions = 21;
  r.reserved_foreign_ns = -22;
  r.quiet_checked = true;
  r.quiet = false;
  r.quiet_ns = 1008;
  r.quiet_wait_ns = 1009;
  r.quiet_bursts = 23;
  r.quiet_first_ratio = 1.25;
  r.quiet_last_ratio = 1.125;
  r.clocks_entry = {true, 1980, 2619, 650000, 61, 4};
  r.foreign_pids = {107};
  r.foreign_checked = true;
  r.stopped_pids = {108};
  return r;
}

// name=value for every field, as operator<< writes them.
const std::vector<std::string> text_fields = {"epoch=11",
                                              "ticket=12",
                                              "siblings_seen=13",
                                              "siblings_drained=14",
                                              "siblings_gone=15",
                                              "undrained_pids=[101,102]",
                                              "frozen_pids=[103]",
                                              "unverified_pids=[104,105,106]",
                                              "lock_ns=1001",
                                              "gate_ns=1002",
                                              "drain_ns=1003",
                                              "freeze_ns=1004",
                                              "pin_ns=1005",
                                              "body_ns=18446744073709551615",
                                              "exit_ns=1007",
                                              "gated=true",
                                              "drained=false",
                                              "contended=true",
                                              "frozen=true",
                                              "pinned=true",
                                              "took_over_gate=true",
                                              "lease_lost=false",
                                              "thaw_failed=true",
                                              "freeze_broken=true",
                                              "freeze=cgroup2",
                                              "scope=active",
                                              "pinned_cpus=[7,9]",
                                              "gating=auto",
                                              "body_preemptions=21",
                                              "reserved_foreign_ns=-22",
                                              "quiet_checked=true",
                                              "quiet=false",
                                              "quiet_ns=1008",
                                              "quiet_wait_ns=1009",
                                              "quiet_bursts=23",
                                              "quiet_first_ratio=1.25",
                                              "quiet_last_ratio=1.125",
                                              "foreign_pids=[107]",
                                              "foreign_checked=true",
                                              "stopped_pids=[108]"};

std::string printed(const krex::region_report& r) {
  std::ostringstream os;
  os << r;
  return os.str();
}

TEST(report_print, operator_writes_the_level_and_every_field) {
  const krex::region_report r = full_report();
  const std::string s = printed(r);
  EXPECT_EQ(s.rfind("krex region: " + r.level() + "\n", 0), 0U) << s;
  EXPECT_EQ(r.level(), "gate+drain(contended)+freeze(cgroup2,broken)+quiet(busy)+pin-shared(1 foreign)");
  EXPECT_NE(s.find(" clocks_entry=1980/2619MHz,650W,61C,reasons=4"), std::string::npos) << s;
  EXPECT_NE(s.find(" clocks_exit=n/a"), std::string::npos) << s;
  for (const std::string& f : text_fields)
    EXPECT_NE(s.find(" " + f), std::string::npos) << "missing " << f << " in:\n" << s;
  EXPECT_NE(s.find("\n  notes:\n    - freeze: auto chose signal:"), std::string::npos) << s;
  EXPECT_NE(s.find("\n  warnings:\n    - bad byte"), std::string::npos) << s;
  EXPECT_NE(s.back(), '\n') << "no trailing newline, as for any other value";
}

TEST(report_print, an_empty_report_says_none) {
  const std::string s = printed(krex::region_report{});
  EXPECT_EQ(s.rfind("krex region: none\n", 0), 0U) << s;
  EXPECT_NE(s.find("undrained_pids=[]"), std::string::npos) << s;
  EXPECT_NE(s.find("\n  notes: none\n  warnings: none"), std::string::npos) << s;
}

TEST(report_json, has_every_field_under_its_name) {
  const std::string j = krex::to_json(full_report());
  EXPECT_EQ(j.front(), '{');
  EXPECT_EQ(j.back(), '}');
  EXPECT_EQ(j.find('\n'), std::string::npos) << "one line: " << j;
  for (std::string f : text_fields) {
    const auto eq = f.find('=');
    std::string value = f.substr(eq + 1);
    if (f.rfind("freeze=", 0) == 0 || f.rfind("scope=", 0) == 0 || f.rfind("gating=", 0) == 0)
      value = '"' + value + '"';
    const std::string kv = '"' + f.substr(0, eq) + "\":" + value;
    EXPECT_NE(j.find(kv), std::string::npos) << "missing " << kv << " in " << j;
  }
  EXPECT_NE(j.find("\"level\":\"gate+drain(contended)+freeze(cgroup2,broken)+quiet(busy)+pin-shared(1 foreign)\""),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"notes\":[\"freeze: auto chose signal: \\\"quoted\\\" C:\\\\path\","
                   "\"tab\\there\\nnewline \\u0001 \xc2\xb5s\"]"),
            std::string::npos)
      << j;
  EXPECT_NE(j.find("\"warnings\":[\"bad byte \\ufffd end\"]"), std::string::npos) << j;
}

TEST(report_json, strings_are_escaped_and_always_utf8) {
  const auto lit = [](const std::string& s) {
    std::string o;
    krex::detail::append_json_string(o, s);
    return o;
  };
  EXPECT_EQ(lit(""), "\"\"");
  EXPECT_EQ(lit("a\"b\\c/d"), "\"a\\\"b\\\\c/d\"");
  EXPECT_EQ(lit("\b\f\n\r\t\x1f\x7f"), "\"\\b\\f\\n\\r\\t\\u001f\x7f\"");
  EXPECT_EQ(lit(std::string("nul\0in", 6)), "\"nul\\u0000in\"");
  // Well-formed UTF-8 passes: 2, 3 and 4 bytes.
  EXPECT_EQ(lit("\xc2\xb5 \xe2\x82\xac \xf0\x9f\x98\x80"),
            "\"\xc2\xb5 \xe2\x82\xac \xf0\x9f\x98\x80\"");
  // Not UTF-8: a lone continuation byte, a truncated sequence, an overlong
  // '/', a surrogate, above U+10FFFF, 0xff.
  EXPECT_EQ(lit("\x80"), "\"\\ufffd\"");
  EXPECT_EQ(lit("x\xe2\x82"), "\"x\\ufffd\\ufffd\"");
  EXPECT_EQ(lit("\xc0\xaf"), "\"\\ufffd\\ufffd\"");
  EXPECT_EQ(lit("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");
  EXPECT_EQ(lit("\xf4\x90\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");
  EXPECT_EQ(lit("\xff"), "\"\\ufffd\"");
}

// The JSON parses with a real parser (Python's json module) and every value
// comes back as it was set.
TEST(report_json, parses_and_round_trips_in_python) {
  if (std::system("python3 -c 'import json' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "no python3 with the json module";
  const std::string base = "/tmp/" + krex_test::unique_name("report_json");
  const std::string in = base + ".json";
  const std::string out = base + ".out";
  {
    std::ofstream f(in, std::ios::binary);
    f << krex::to_json(full_report());
  }
  const std::string cmd =
      "python3 -c 'import json,sys; d=json.load(open(sys.argv[1], encoding=\"utf-8\")); "
      "print(json.dumps(d, sort_keys=True))' " +
      in + " > " + out;
  const int rc = std::system(cmd.c_str());
  std::ifstream f(out);
  std::string parsed((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ::unlink(in.c_str());
  ::unlink(out.c_str());
  ASSERT_EQ(rc, 0) << "python3 could not parse " << krex::to_json(full_report());
  EXPECT_EQ(parsed,
            "{\"body_ns\": 18446744073709551615, \"body_preemptions\": 21, "
            "\"clocks_entry\": {\"mem_mhz\": 2619, \"power_mw\": 650000, \"reasons\": 4, "
            "\"sm_mhz\": 1980, \"temp_c\": 61}, \"clocks_exit\": null, \"contended\": true, "
            "\"drain_ns\": 1003, \"drained\": false, \"epoch\": 11, \"exit_ns\": 1007, "
            "\"foreign_checked\": true, \"foreign_pids\": [107], "
            "\"freeze\": \"cgroup2\", \"freeze_broken\": true, \"freeze_ns\": 1004, "
            "\"frozen\": true, \"frozen_pids\": [103], \"gate_ns\": 1002, \"gated\": true, "
            "\"gating\": \"auto\", \"lease_lost\": false, "
            "\"level\": \"gate+drain(contended)+freeze(cgroup2,broken)+quiet(busy)+pin-shared(1 "
            "foreign)\", "
            "\"lock_ns\": 1001, \"notes\": [\"freeze: auto chose signal: \\\"quoted\\\" "
            "C:\\\\path\", \"tab\\there\\nnewline \\u0001 \\u00b5s\"], \"other_segments\": [], "
            "\"pin_ns\": 1005, "
            "\"pinned\": true, \"pinned_cpus\": [7, 9], \"quiet\": false, \"quiet_bursts\": 23, "
            "\"quiet_checked\": true, \"quiet_first_ratio\": 1.25, \"quiet_last_ratio\": 1.125, "
            "\"quiet_ns\": 1008, \"quiet_wait_ns\": 1009, \"reserved_foreign_ns\": -22, "
            "\"scope\": \"active\", \"siblings_drained\": 14, \"siblings_gone\": 15, "
            "\"siblings_seen\": 13, \"stopped_pids\": [108], \"thaw_failed\": true, \"ticket\": 12, "
            "\"took_over_gate\": true, \"undrained_pids\": [101, 102], "
            "\"unverified_pids\": [104, 105, 106], \"warnings\": [\"bad byte \\ufffd end\"]}\n");
}

}  // namespace
