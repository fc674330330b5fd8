// SPDX-License-Identifier: Apache-2.0
#pragma once

// The command-line parser krexctl, krex_demo and krex_eval share (tools and
// benches only: the library headers never include it).
//
// What every tool gets from it:
// - `--opt value` and `--opt=value`; a flag takes no value (`--json=1` is an error);
// - `--help` / `-h`: help on stdout, exit 0; per command (`krexctl status --help`,
//   also `krexctl help status`);
// - `--version`: "<program> (krex) <version>" on stdout, exit 0;
// - anything else is a usage error: an unknown option, an option the chosen
//   command does not use, a missing or invalid value, a stray argument. The
//   message names it, the usage follows on stderr, and the exit status is 64
//   (EX_USAGE, sysexits.h).

#include <krex/options.hpp>  // detail::edit_distance

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#ifndef KREX_VERSION
#error "KREX_VERSION is defined by the krex_tools CMake target (project(krex VERSION ...))"
#endif

namespace krex_tools::cli {

/// The exit status of a usage error (EX_USAGE).
inline constexpr int exit_usage = 64;

/// A wrong command line. Thrown by value setters; the parser prints it with
/// the usage and exits with exit_usage.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A number in [lo, hi] from `text`, or a usage_error naming `option`.
inline double parse_number(const std::string& option, const std::string& text, double lo,
                           double hi) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || !(x >= lo && x <= hi)) {
    char range[96];
    std::snprintf(range, sizeof range, "a number %g..%g", lo, hi);
    throw usage_error("invalid value '" + text + "' for " + option + ": " + range);
  }
  return x;
}

/// An integer in [lo, hi] from `text`, or a usage_error naming `option`.
inline long parse_integer(const std::string& option, const std::string& text, long lo, long hi) {
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || errno != 0 || x < lo || x > hi)
    throw usage_error("invalid value '" + text + "' for " + option + ": an integer " +
                      std::to_string(lo) + ".." + std::to_string(hi));
  return x;
}

/// One command's options: the program itself, or one of its subcommands.
class command {
 public:
  command(std::string name, std::string summary)
      : m_name(std::move(name)), m_summary(std::move(summary)) {}

  /// A flag: `--name` sets `out`; it takes no value.
  command& flag(const std::string& name, bool& out, const std::string& help) {
    bool* p = &out;
    m_options.push_back({name, "", help, [p](const std::string&) { *p = true; }});
    return *this;
  }
  /// A flag that runs `set`.
  command& flag(const std::string& name, std::function<void()> set, const std::string& help) {
    m_options.push_back({name, "", help, [set = std::move(set)](const std::string&) { set(); }});
    return *this;
  }
  /// An option with a value, handed to `set` (which may throw usage_error).
  command& value(const std::string& name, const std::string& metavar,
                 std::function<void(const std::string&)> set, const std::string& help) {
    m_options.push_back({name, metavar, help, std::move(set)});
    return *this;
  }
  /// An option whose value is stored as text.
  command& text(const std::string& name, const std::string& metavar, std::string& out,
                const std::string& help) {
    std::string* p = &out;
    return value(name, metavar, [p](const std::string& v) { *p = v; }, help);
  }
  /// An option whose value is a number in [lo, hi].
  command& number(const std::string& name, const std::string& metavar, double& out, double lo,
                  double hi, const std::string& help) {
    double* p = &out;
    return value(
        name, metavar, [=](const std::string& v) { *p = parse_number(name, v, lo, hi); }, help);
  }
  /// An option whose value is an integer in [lo, hi].
  template <class Int>
  command& integer(const std::string& name, const std::string& metavar, Int& out, long lo, long hi,
                   const std::string& help) {
    Int* p = &out;
    return value(
        name, metavar,
        [=](const std::string& v) { *p = static_cast<Int>(parse_integer(name, v, lo, hi)); },
        help);
  }
  /// Replaces the generated synopsis (the options after the command's name).
  command& synopsis(std::string s) {
    m_synopsis = std::move(s);
    return *this;
  }
  /// Text printed after the options in --help.
  command& epilog(std::string s) {
    m_epilog = std::move(s);
    return *this;
  }

  const std::string& name() const noexcept { return m_name; }
  const std::string& summary() const noexcept { return m_summary; }

  /// "[--segment NAME] [--json]": the options, as the usage line lists them.
  std::string synopsis() const {
    if (!m_synopsis.empty()) return m_synopsis;
    std::string s;
    for (const option& o : m_options)
      s += (s.empty() ? "[" : " [") + o.name + (o.metavar.empty() ? "" : " " + o.metavar) + "]";
    return s;
  }

 private:
  friend class program;
  struct option {
    std::string name, metavar, help;  // metavar: "" for a flag
    std::function<void(const std::string&)> set;
  };
  const option* find(const std::string& name) const {
    for (const option& o : m_options)
      if (o.name == name) return &o;
    return nullptr;
  }
  std::string m_name, m_summary, m_synopsis, m_epilog;
  std::vector<option> m_options;
};

/// A program: its own options (`root()`), or subcommands (`add()`), not both.
class program {
 public:
  program(std::string name, std::string summary) : m_root(std::move(name), std::move(summary)) {}

  /// The options of a program without subcommands.
  command& root() noexcept { return m_root; }
  /// A subcommand, `<program> <name> [options]`.
  command& add(std::string name, std::string summary) {
    m_commands.emplace_back(std::move(name), std::move(summary));
    return m_commands.back();
  }
  /// Text printed after the command list in the program's --help.
  program& epilog(std::string s) {
    m_root.epilog(std::move(s));
    return *this;
  }

  /// Parses argv and runs the setters. Returns the subcommand's name (""
  /// for a program without subcommands). --help and --version print to
  /// stdout and exit 0; a usage error prints to stderr and exits 64.
  std::string parse(int argc, char** argv) {
    int i = 1;
    const command* c = &m_root;
    if (!m_commands.empty()) {
      if (argc < 2) fail("no command");
      const std::string first = argv[1];
      if (first == "--help" || first == "-h") exit_with(help(nullptr));
      if (first == "--version" || first == "-V") exit_with(version());
      if (first == "help") {
        if (argc == 2) exit_with(help(nullptr));
        const command* h = find_command(argv[2]);
        if (h == nullptr || argc > 3) fail("help: unknown command '" + std::string(argv[2]) + "'");
        exit_with(help(h));
      }
      c = find_command(first);
      if (c == nullptr) {
        std::vector<std::string> names;
        for (const command& k : m_commands) names.push_back(k.name());
        fail("unknown command '" + first + "'" + did_you_mean(first, names));
      }
      i = 2;
    }
    // Help first: `status --segment --help` still prints status's help.
    for (int k = i; k < argc; ++k) {
      const std::string a = argv[k];
      if (a == "--help" || a == "-h") exit_with(help(c == &m_root ? nullptr : c));
      if (a == "--version" || a == "-V") exit_with(version());
    }
    for (; i < argc; ++i) {
      const std::string a = argv[i];
      if (a.size() < 2 || a[0] != '-')
        fail("unexpected argument '" + a + "'", c);
      const std::size_t eq = a.find('=');
      const std::string name = a.substr(0, eq);
      const command::option* o = c->find(name);
      if (o == nullptr) {
        const bool elsewhere = c != &m_root && used_elsewhere(name);
        std::vector<std::string> names = {"--help", "--version"};
        for (const command::option& k : c->m_options) names.push_back(k.name);
        fail(elsewhere ? "option " + name + " is not used by `" + full_name(c) + "`"
                       : "unknown option '" + name + "'" + did_you_mean(name, names),
             c);
      }
      std::string v;
      if (o->metavar.empty()) {
        if (eq != std::string::npos) fail(name + " takes no value", c);
      } else if (eq != std::string::npos) {
        v = a.substr(eq + 1);
      } else {
        if (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0)
          fail(name + " needs a value (" + o->metavar + ")", c);
        v = argv[++i];
      }
      try {
        o->set(v);
      } catch (const usage_error& e) {
        fail(e.what(), c);
      }
    }
    return c == &m_root ? std::string() : c->name();
  }

  /// A usage error found after parsing (options that do not go together):
  /// the message and the usage (of `cmd`, if named) on stderr, exit 64.
  [[noreturn]] void fail(const std::string& what, const std::string& cmd) const {
    fail(what, cmd.empty() ? nullptr : find_command(cmd));
  }
  [[noreturn]] void fail(const std::string& what, const command* c = nullptr) const {
    std::fprintf(stderr, "%s: %s\n%s", m_root.name().c_str(), what.c_str(), usage(c).c_str());
    const std::string more = c != nullptr && c != &m_root ? m_root.name() + " " + c->name() + " --help"
                                                          : m_root.name() + " --help";
    std::fprintf(stderr, "(%s says more)\n", more.c_str());
    std::fflush(stderr);
    std::exit(exit_usage);
  }

  /// The usage lines: of `c`, or of every command.
  std::string usage(const command* c = nullptr) const {
    if (c == &m_root) c = nullptr;
    if (m_commands.empty() || c != nullptr) {
      const command& k = c != nullptr ? *c : m_root;
      return wrap("usage: " + full_name(&k) + " ", k.synopsis());
    }
    std::string s;
    std::size_t width = 0;
    for (const command& k : m_commands) width = std::max(width, k.name().size());
    for (const command& k : m_commands) {
      s += wrap((s.empty() ? "usage: " : "       ") + m_root.name() + " " + k.name() +
                    std::string(width - k.name().size() + 1, ' '),
                k.synopsis());
    }
    return s;
  }

  /// The --help text: of the program (nullptr) or of one command.
  std::string help(const command* c) const {
    const command& k = c != nullptr ? *c : m_root;
    std::string s = usage(c) + "\n" + k.summary() + "\n";
    if (c == nullptr && !m_commands.empty()) {
      s += "\ncommands:\n";
      for (const command& x : m_commands) s += pad("  " + x.name(), 18) + x.summary() + "\n";
    }
    s += "\noptions:\n";
    for (const command::option& o : k.m_options)
      s += pad("  " + o.name + (o.metavar.empty() ? "" : " " + o.metavar), 26) + o.help + "\n";
    s += pad("  -h, --help", 26) +
         (c == nullptr && !m_commands.empty() ? "this help; `" + m_root.name() +
                                                    " COMMAND --help` for a command's"
                                              : std::string("this help")) +
         "\n";
    s += pad("  -V, --version", 26) + "the krex version\n";
    if (!k.m_epilog.empty()) s += "\n" + k.m_epilog + (k.m_epilog.back() == '\n' ? "" : "\n");
    return s;
  }

  std::string version() const { return m_root.name() + " (krex) " KREX_VERSION "\n"; }

 private:
  [[noreturn]] static void exit_with(const std::string& text) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    std::exit(0);
  }
  /// `head` then the synopsis' bracketed groups, wrapped at 80 columns
  /// under the first group.
  static std::string wrap(const std::string& head, const std::string& synopsis) {
    std::vector<std::string> groups;
    int depth = 0;
    std::string g;
    for (const char ch : synopsis) {
      if (ch == ' ' && depth == 0) {
        if (!g.empty()) groups.push_back(g);
        g.clear();
        continue;
      }
      depth += ch == '[' ? 1 : ch == ']' ? -1 : 0;
      g += ch;
    }
    if (!g.empty()) groups.push_back(g);
    std::string s = head, line = head;
    for (std::size_t i = 0; i < groups.size(); ++i) {
      if (i > 0 && line.size() + 1 + groups[i].size() > 80) {
        s += "\n" + std::string(head.size(), ' ');
        line = std::string(head.size(), ' ');
      } else if (i > 0) {
        s += ' ';
        line += ' ';
      }
      s += groups[i];
      line += groups[i];
    }
    return s + "\n";
  }
  /// "; did you mean X?" for the name in `names` at most 2 edits from
  /// `given` (1 for names of up to 2 letters), else "".
  static std::string did_you_mean(const std::string& given, const std::vector<std::string>& names) {
    std::string best;
    std::size_t best_d = ~std::size_t{0};
    for (const std::string& n : names) {
      const std::size_t d = krex::detail::edit_distance(given, n);
      if (d < best_d) {
        best_d = d;
        best = n;
      }
    }
    const std::size_t letters = best.size() - std::min(best.find_first_not_of('-'), best.size());
    const std::size_t most = letters <= 2 ? 1 : 2;  // a hint to an error: a swap is 2
    return !best.empty() && best_d <= most ? "; did you mean " + best + "?" : "";
  }
  static std::string pad(std::string s, std::size_t width) {
    s += s.size() + 1 < width ? std::string(width - s.size(), ' ') : std::string("  ");
    return s;
  }
  std::string full_name(const command* c) const {
    return c == nullptr || c == &m_root ? m_root.name() : m_root.name() + " " + c->name();
  }
  const command* find_command(const std::string& name) const {
    for (const command& k : m_commands)
      if (k.name() == name) return &k;
    return nullptr;
  }
  bool used_elsewhere(const std::string& name) const {
    for (const command& k : m_commands)
      if (k.find(name) != nullptr) return true;
    return false;
  }

  command m_root;
  std::deque<command> m_commands;  // add() hands out references: no reallocation
};

}  // namespace krex_tools::cli
