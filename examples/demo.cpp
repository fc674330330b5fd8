// SPDX-License-Identifier: Apache-2.0
// krex_demo: what region-granular exclusivity buys, on the host backend.
//
// N synthetic benchmarking commands, each its own process like an optimizing
// agent's: a compile-like CPU phase, a check phase, then a timed CPU "kernel"
// (S samples). Three modes:
//   serial      one command at a time (command-granular exclusivity)
//   unprotected C commands at once, nothing protects the timed loop
//   krex        C commands at once, the timed loop inside a krex::region
//               (gate, drain, freeze siblings' cgroups, pin to reserved cores)
// and one table: commands/min, and the timed kernel's inflation against a solo
// run on the idle machine (median and p95 over every sample), then a one-line
// verdict, and a warning when non-krex work on the machine makes the numbers
// meaningless (the regions' reserved_foreign_ns: other tasks on the reserved CPUs).
//
// Freeze scope: the demo sets scope `all`. On the host backend the "device"
// is the CPU, and the commands' compile and check phases are CPU work that
// makes no gated call, so the default scope `device` would leave them running
// beside the timed kernel: exactly the interference the demo shows krex
// removing. The library's default stays `device` (on a GPU, CPU-only siblings
// do not disturb a device kernel); KREX_FREEZE_SCOPE still overrides.
//
//   krex_demo [--commands N] [--concurrency C] [--samples S] [--kernel-ms K]
//             [--compile-ms M] [--json FILE]      (krex_demo --help)
// krex options come from KREX_* variables (e.g. KREX_FREEZE=signal).
// Exit status: 0 every command ran, 1 one failed, 64 usage.

#include <krex/region.hpp>

#include <krex_tools/cli.hpp>
#include <krex_tools/json.hpp>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "cpu_kernel.hpp"

namespace {

constexpr int max_commands = 512;
constexpr int max_samples = 64;

struct config {
  int commands = 24;
  int concurrency = 4;
  int samples = 10;
  double kernel_ms = 2.0;
  double compile_ms = 200.0;
  std::string json;
};

struct command_result {
  double samples_ms[max_samples];
  int n;
  int ok;
  char level[96];
  char warning[256];  // the region report's first warning ("" if none)
  char note[256];     // its first note: why protection is below full ("" if none)
  char error[256];
  long long foreign_ns;     // the report's reserved_foreign_ns (-1: not measured)
  std::uint64_t body_ns;    // the region's body
  int frozen;               // siblings the region froze
};

struct board {
  command_result cmd[max_commands];
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A CPU "kernel": a fixed amount of dependent integer work.
std::uint64_t g_sink = 0;
void kernel(std::uint64_t iters) {
  const std::uint64_t x = krex_example::xorshift_chain(iters);
  g_sink += x;
  __asm__ volatile("" : : "r"(x) : "memory");
}

std::uint64_t calibrate(double ms) {
  std::uint64_t iters = 1'000'000;
  for (;;) {
    const double t0 = now_s();
    kernel(iters);
    const double dt = (now_s() - t0) * 1e3;
    if (dt > 20.0) return static_cast<std::uint64_t>(static_cast<double>(iters) * ms / dt);
    iters *= 4;
  }
}

enum class mode { solo, serial, unprotected, krex };
const char* name(mode m) {
  switch (m) {
    case mode::solo: return "solo";
    case mode::serial: return "serial";
    case mode::unprotected: return "unprotected";
    case mode::krex: return "krex";
  }
  return "?";
}

struct workload {
  std::uint64_t kernel_iters;
  std::uint64_t compile_iters;
  std::uint64_t check_iters;
};

// One command, in its own process.
int run_command(const config& cfg, const workload& w, mode m, const std::string& segment,
                command_result& out) {
  try {
    std::unique_ptr<krex::tenant> t;
    if (m == mode::krex)
      t = std::make_unique<krex::tenant>(
          krex::options{}.segment(segment).scope(krex::freeze_scope::all));
    kernel(w.compile_iters);  // "compile": runs concurrently with siblings
    kernel(w.check_iters);    // "check correctness"
    const auto timed_loop = [&] {
      kernel(w.kernel_iters);  // warm-up
      for (int s = 0; s < cfg.samples; ++s) {
        const double t0 = now_s();
        kernel(w.kernel_iters);
        out.samples_ms[s] = (now_s() - t0) * 1e3;
      }
      out.n = cfg.samples;
    };
    if (t) {
      krex::region r{*t};
      timed_loop();
      r.exit();  // the report's body warnings are complete once the region ended
      const krex::region_report& rep = r.report();
      std::snprintf(out.level, sizeof out.level, "%s", rep.level().c_str());
      if (!rep.warnings.empty())
        std::snprintf(out.warning, sizeof out.warning, "%s", rep.warnings.front().c_str());
      if (!rep.notes.empty())
        std::snprintf(out.note, sizeof out.note, "%s", rep.notes.front().c_str());
      out.foreign_ns = rep.reserved_foreign_ns;
      out.body_ns = rep.body_ns;
      out.frozen = static_cast<int>(rep.frozen_pids.size());
    } else {
      timed_loop();
      std::snprintf(out.level, sizeof out.level, "none");
    }
    out.ok = 1;
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(out.error, sizeof out.error, "%s", e.what());
    return 1;
  }
}

struct mode_result {
  mode m;
  double seconds = 0;
  int failed = 0;
  std::vector<double> samples_ms;
  std::string level;
  std::string first_error;
  int warned = 0;  // regions whose report carried a warning
  std::string first_warning;
  std::string first_note;
  long long foreign_ns = 0;    // other tasks' time on the reserved CPUs, summed over regions
  std::uint64_t body_ns = 0;   // the regions' bodies (where foreign_ns was measured), summed
  int frozen = 0;              // siblings frozen, summed over regions
};

mode_result run_mode(const config& cfg, const workload& w, mode m, board& b) {
  const int n = m == mode::solo ? 1 : cfg.commands;
  const int c = (m == mode::solo || m == mode::serial) ? 1 : cfg.concurrency;
  const std::string segment = "demo-" + std::to_string(::getpid()) + "-" + name(m);
  std::memset(&b, 0, sizeof b);
  mode_result r;
  r.m = m;
  const double t0 = now_s();
  int next = 0, running = 0, done = 0;
  while (done < n) {
    while (running < c && next < n) {
      std::fflush(nullptr);
      const pid_t pid = ::fork();
      if (pid < 0) {
        std::perror("fork");
        std::exit(1);
      }
      if (pid == 0) ::_exit(run_command(cfg, w, m, segment, b.cmd[next]));
      ++next;
      ++running;
    }
    int status = 0;
    if (::waitpid(-1, &status, 0) > 0) {
      --running;
      ++done;
    }
  }
  r.seconds = now_s() - t0;
  krex::remove_segment(krex::options{}.segment(segment));
  for (int i = 0; i < n; ++i) {
    const command_result& cr = b.cmd[i];
    if (!cr.ok) {
      ++r.failed;
      if (r.first_error.empty()) r.first_error = cr.error;
      continue;
    }
    r.level = cr.level;
    if (cr.warning[0] != '\0' && r.warned++ == 0) r.first_warning = cr.warning;
    if (cr.note[0] != '\0' && r.first_note.empty()) r.first_note = cr.note;
    r.samples_ms.insert(r.samples_ms.end(), cr.samples_ms, cr.samples_ms + cr.n);
    r.frozen += cr.frozen;
    if (m == mode::krex && cr.foreign_ns >= 0) {
      r.foreign_ns += cr.foreign_ns;
      r.body_ns += cr.body_ns;
    }
  }
  return r;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

// The share of all CPUs' time that was busy (not idle, not waiting for I/O)
// during the next `ms` milliseconds, from /proc/stat; -1 if unreadable. Run
// before the demo starts anything, it is other work's share of the machine
// (unlike the load average, which still counts a run that just ended).
double busy_share(int ms) {
  const auto read = [](std::uint64_t& busy, std::uint64_t& total) {
    std::ifstream f("/proc/stat");
    std::string cpu;
    std::uint64_t v[8] = {};
    f >> cpu;
    for (std::uint64_t& x : v) f >> x;
    total = 0;
    for (std::uint64_t x : v) total += x;
    busy = total - v[3] - v[4];  // idle, iowait
    return f && cpu == "cpu";
  };
  std::uint64_t b0 = 0, t0 = 0, b1 = 0, t1 = 0;
  if (!read(b0, t0)) return -1;
  ::usleep(static_cast<useconds_t>(ms) * 1000);
  if (!read(b1, t1) || t1 <= t0) return -1;
  return static_cast<double>(b1 - b0) / static_cast<double>(t1 - t0);
}

struct verdict {
  std::string line;                   // "krex cut p95 inflation from X to Y" or why not
  std::vector<std::string> warnings;  // why the numbers may mean little
};

// What the three modes' numbers say, in one line, and whether the machine was
// too busy with non-krex work for them to mean anything.
verdict judge(const config& cfg, const mode_result& solo, const std::vector<mode_result>& results,
              double busy_before, long cpus) {
  verdict v;
  const mode_result& unprot = results[1];
  const mode_result& krx = results[2];
  char buf[512];
  const double ref = quantile(solo.samples_ms, 0.5);
  const auto p95 = [&](const mode_result& r) {
    std::vector<double> infl;
    for (double x : r.samples_ms) infl.push_back(x / ref);
    return quantile(infl, 0.95);
  };
  const double solo_spread = quantile(solo.samples_ms, 0.95) / ref;
  if (busy_before > 0.25) {
    std::snprintf(buf, sizeof buf,
                  "other work kept %.0f%% of the %ld CPUs busy in the second before the demo "
                  "started: it shares this machine",
                  100.0 * busy_before, cpus);
    v.warnings.emplace_back(buf);
  }
  if (solo_spread > 1.3) {
    std::snprintf(buf, sizeof buf,
                  "the solo reference itself varies (p95 %.2fx its median): the machine was not "
                  "quiet while it ran",
                  solo_spread);
    v.warnings.emplace_back(buf);
  }
  const bool busy = krx.body_ns > 0 && krx.foreign_ns * 20 > static_cast<long long>(krx.body_ns);
  if (busy) {
    std::snprintf(buf, sizeof buf,
                  "other tasks ran %.0f ms on the reserved CPUs during the %.0f ms of krex's timed "
                  "loops (%.0f%%, the regions' reserved_foreign_ns): non-krex work shares this "
                  "machine, and krex can freeze only its own tenants",
                  static_cast<double>(krx.foreign_ns) / 1e6, static_cast<double>(krx.body_ns) / 1e6,
                  100.0 * static_cast<double>(krx.foreign_ns) / static_cast<double>(krx.body_ns));
    v.warnings.emplace_back(buf);
  }
  if (!v.warnings.empty())
    v.warnings.emplace_back("the numbers above say little about krex: rerun on a quiet machine");
  const double u95 = p95(unprot), k95 = p95(krx);
  const double u_rate = 60.0 * (cfg.commands - unprot.failed) / unprot.seconds;
  const double k_rate = 60.0 * (cfg.commands - krx.failed) / krx.seconds;
  const double s_rate = 60.0 * cfg.commands / results[0].seconds;
  if (krx.failed > 0) {
    std::snprintf(buf, sizeof buf, "krex did not help here because %d of %d commands failed: %s",
                  krx.failed, cfg.commands, krx.first_error.c_str());
  } else if (u95 < 1.1) {
    std::snprintf(buf, sizeof buf,
                  "krex did not help here because unprotected commands were not slowed (p95 "
                  "inflation %.2fx, krex %.2fx): this machine has room for %d commands at once",
                  u95, k95, cfg.concurrency);
  } else if (k95 < 0.8 * u95) {
    std::snprintf(buf, sizeof buf,
                  "krex cut p95 inflation from %.2fx (unprotected) to %.2fx (solo: 1.00x), at "
                  "%.2fx serial's throughput (unprotected %.2fx)%s",
                  u95, k95, k_rate / s_rate, u_rate / s_rate,
                  v.warnings.empty() ? "" : "; but see the warnings below");
  } else if (busy) {
    std::snprintf(buf, sizeof buf,
                  "krex did not help here because non-krex work ran on its reserved CPUs (p95 "
                  "inflation %.2fx unprotected, %.2fx krex): see the warnings below",
                  u95, k95);
  } else if (!krx.first_note.empty()) {
    std::snprintf(buf, sizeof buf,
                  "krex did not help here because its protection was only %s (p95 inflation %.2fx "
                  "unprotected, %.2fx krex): %s",
                  krx.level.c_str(), u95, k95, krx.first_note.c_str());
  } else {
    std::snprintf(buf, sizeof buf,
                  "krex did not help here because its p95 inflation (%.2fx) is not clearly below "
                  "unprotected's (%.2fx)%s",
                  k95, u95, v.warnings.empty() ? "" : ": see the warnings below");
  }
  v.line = buf;
  return v;
}

config parse(int argc, char** argv) {
  config c;
  krex_tools::cli::program prog(
      "krex_demo",
      "What region-granular exclusivity buys, on the host backend: N synthetic benchmarking\n"
      "commands run serial, unprotected and under krex; one table of commands/min and the\n"
      "timed kernel's inflation. krex options come from KREX_* variables (KREX_FREEZE=signal).");
  prog.root()
      .integer("--commands", "N", c.commands, 1, max_commands, "commands per mode (default 24)")
      .integer("--concurrency", "C", c.concurrency, 1, 64, "commands at once (default 4)")
      .integer("--samples", "S", c.samples, 1, max_samples, "timed kernel samples per command (default 10)")
      .number("--kernel-ms", "K", c.kernel_ms, 0.05, 1000, "the timed kernel's length (default 2)")
      .number("--compile-ms", "M", c.compile_ms, 0, 10000, "the compile-like phase (default 200)")
      .text("--json", "FILE", c.json, "also write the results as JSON to FILE");
  prog.parse(argc, argv);
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  const config cfg = parse(argc, argv);
  const std::uint64_t per_ms = calibrate(1.0);
  const workload w{static_cast<std::uint64_t>(static_cast<double>(per_ms) * cfg.kernel_ms),
                   static_cast<std::uint64_t>(static_cast<double>(per_ms) * cfg.compile_ms),
                   static_cast<std::uint64_t>(static_cast<double>(per_ms) * cfg.compile_ms / 4)};
  void* mem = ::mmap(nullptr, sizeof(board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                     -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  board& b = *static_cast<board*>(mem);
  const double busy_before = busy_share(1000);
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  std::printf("krex_demo: %d commands (compile %.0f ms, check %.0f ms, %d x %.2f ms timed kernel), "
              "concurrency %d, %ld CPUs\n",
              cfg.commands, cfg.compile_ms, cfg.compile_ms / 4, cfg.samples, cfg.kernel_ms,
              cfg.concurrency, cpus);
  // The solo reference: the same kernel, alone on the idle machine, 4 commands' worth.
  config solo_cfg = cfg;
  solo_cfg.samples = std::min(max_samples, cfg.samples * 4);
  const mode_result solo = run_mode(solo_cfg, w, mode::solo, b);
  const double ref = quantile(solo.samples_ms, 0.5);
  std::vector<mode_result> results;
  for (mode m : {mode::serial, mode::unprotected, mode::krex}) results.push_back(run_mode(cfg, w, m, b));
  std::printf("\nsolo kernel: median %.3f ms, p95 %.3f ms over %zu samples\n\n", ref,
              quantile(solo.samples_ms, 0.95), solo.samples_ms.size());
  std::printf("| mode        | C  | commands/min | vs serial | inflation median | inflation p95 | protection |\n");
  std::printf("|-------------|----|--------------|-----------|------------------|---------------|------------|\n");
  const double serial_rate = 60.0 * cfg.commands / results[0].seconds;
  int rc = 0;
  krex_tools::json::writer json;
  json.begin_object().field("commands", cfg.commands).field("concurrency", cfg.concurrency);
  json.field("kernel_ms", cfg.kernel_ms).field("solo_median_ms", ref);
  json.key("modes").begin_array();
  for (const mode_result& r : results) {
    const double rate = 60.0 * (cfg.commands - r.failed) / r.seconds;
    std::vector<double> infl;
    for (double s : r.samples_ms) infl.push_back(s / ref);
    const double med = quantile(infl, 0.5), p95 = quantile(infl, 0.95);
    std::printf("| %-11s | %-2d | %12.1f | %8.2fx | %15.3fx | %12.3fx | %s\n", name(r.m),
                r.m == mode::serial ? 1 : cfg.concurrency, rate, rate / serial_rate, med, p95,
                r.level.c_str());
    if (!r.first_note.empty()) std::printf("  %s note: %s\n", name(r.m), r.first_note.c_str());
    if (r.warned > 0)
      std::printf("  %s warning (%d of %d regions): %s\n", name(r.m), r.warned,
                  cfg.commands - r.failed, r.first_warning.c_str());
    if (r.failed) {
      std::fprintf(stderr, "%s: %d command(s) failed; first error: %s\n", name(r.m), r.failed,
                   r.first_error.c_str());
      rc = 1;
    }
    json.begin_object().field("mode", name(r.m)).field("seconds", r.seconds);
    json.field("commands_per_min", rate).field("failed", r.failed);
    json.field("regions_warned", r.warned).field("inflation_median", med);
    json.field("inflation_p95", p95).field("protection", r.level);
    json.field("frozen_siblings", r.frozen);
    json.key("samples_ms").values(r.samples_ms).end_object();
  }
  json.end_array();
  const verdict v = judge(cfg, solo, results, busy_before, cpus);
  std::printf("\n%s\n", v.line.c_str());
  for (const std::string& w : v.warnings) std::printf("warning: %s\n", w.c_str());
  json.field("verdict", v.line).key("warnings").begin_array();
  for (const std::string& w : v.warnings) json.value(w);
  json.end_array();
  json.field("busy_share_before", busy_before);
  json.field("reserved_foreign_ns", results[2].foreign_ns);
  json.field("krex_body_ns", static_cast<long long>(results[2].body_ns));
  json.end_object();
  if (!cfg.json.empty()) {
    std::ofstream f(cfg.json);
    f << json.str() << "\n";
    if (!f) {
      std::fprintf(stderr, "krex_demo: cannot write %s\n", cfg.json.c_str());
      rc = 1;
    }
  }
  return rc;
}
