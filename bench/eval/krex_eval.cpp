// SPDX-License-Identifier: Apache-2.0
// krex_eval: the evaluation. Runs the same list of benchmark commands
// (bench/eval/candidates.hpp) under every sharing mode, side by side in one
// run, and reports throughput (shape for shape), accuracy by duration band
// (command medians and every sample), ranking fidelity and where the time
// goes. docs/EVAL.md has the method; lab/scripts/eval.sh runs it.
//
//   krex_eval [--config smoke|quick|full|issue11|ranks] [--out DIR] [--worker PATH]
//             [--configs LIST] [--reps N] [--filter S1,S2,...] [--sync S1,...]
//             [--loop S1,...] [--loop-pct P] [--min-per-worker N] [--plan]
//             [--timeout-s N] [--device N] [--devices all|N,M,...] [--seed N]
//             [--placements K] [--placement-budget-mb MB]
//
// A configuration is MODE:C[:persistent]; LIST is comma-separated. Modes:
//   serial        one command at a time (C must be 1), no krex
//   unprotected   C commands at once, no krex
//   lock          C at once, an exclusive flock(2) around each timed loop
//   krex          C at once, each timed loop in a krex region (library defaults)
//   krex-mps      krex with an MPS control daemon running (started here)
//   krex-all      krex, freeze scope "all"      (KREX_FREEZE_SCOPE=all)
//   krex-device   krex, freeze scope "device"   (KREX_FREEZE_SCOPE=device)
//   krex-active   krex, freeze scope "active"   (KREX_FREEZE_SCOPE=active)
//   krex-ctx      krex, contexts ungated        (KREX_GATE_CONTEXTS=0)
//   krex-nopin    krex without pinning          (KREX_PIN=0)
//   krex-nofreeze krex, gate+drain only         (KREX_FREEZE=none)
// Shape "process" (default) starts a worker process per command; shape
// "persistent" starts C workers that run commands one after another and
// keep their CUDA context (and krex tenant); their list is repeated so each
// worker runs --min-per-worker commands on average. The krex modes'
// persistent workers are a krex::pool (the product's pool: one
// `krex_eval_worker --pool C` process, bench/eval/pool_host.hpp); the other
// modes' persistent workers are the eval's own loop (a krex::pool worker is
// a krex tenant, which a lock-only or unprotected baseline must not be).
//
// Placements: every command times its candidate over --placements K copies
// of its inputs (default plan.hpp's default_placements), fewer when K copies
// would pass --placement-budget-mb per command; each result records its
// placements, their spread and their bytes.
//
// Commands: every selected candidate timed the default way (batched);
// candidates matching --sync also with a sample-synchronized loop
// (id@sync), and those matching --loop also with a loop of about --loop-pct
// percent of the command (id@loop<ms>).
//
// The first configuration of every preset is the uncontended reference (a
// serial pass); the last is a second serial pass, the native repeat.
//
// Output in DIR: eval.json (every command, every sample, its start times,
// the summary), summary.md (tables), workers.log (the workers' stderr).
// Exit status: 0 when every configuration ran and its commands passed their
// checks, 1 when any command failed, 2 when it cannot start (no worker, an
// --out directory it cannot write), 64 on bad usage (krex_eval --help).
//
// The file, top to bottom: modes, configurations and presets; the runner
// (worker processes, one configuration at a time); the summary of a
// configuration (summarize); the plan (parse_options: define_options,
// select_commands, resolve_devices; make_lists; write_plan); the reports
// (summarize_results, summary_markdown and its md_* sections, eval_json,
// write_report); the runs (run_one_device; run_devices and
// write_node_report for --devices); main(), which calls them in that order.

#include "candidates.hpp"
#include "json.hpp"
#include "plan.hpp"
#include "stats.hpp"

#if defined(KREX_WITH_CUDA)
#include <cuda_runtime.h>
#endif

#include <krex_tools/cli.hpp>
#include <krex_tools/json.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <thread>
#include <tuple>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;
double ms_between(clk::time_point a, clk::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

/// A wrong command line: main() prints it with the usage and exits 64.
[[noreturn]] void usage_error(const std::string& msg) { throw krex_tools::cli::usage_error(msg); }

/// What keeps the run from starting that is not the command line (no
/// worker, an --out directory that cannot be written): exit 2.
[[noreturn]] void cannot_start(const std::string& msg) {
  std::fprintf(stderr, "krex_eval: %s\n", msg.c_str());
  std::exit(2);
}

const std::set<std::string>& known_modes() {
  static const std::set<std::string> m = {"serial",      "unprotected", "lock",       "krex",
                                          "krex-mps",    "krex-all",    "krex-device", "krex-active",
                                          "krex-ctx",
                                          "krex-nopin",  "krex-nofreeze"};
  return m;
}
const char* const modes_text =
    "serial, unprotected, lock, krex, krex-mps, krex-all, krex-device, krex-active, krex-ctx, krex-nopin or "
    "krex-nofreeze";

/// The environment a mode gives its workers (the krex ablations and scopes).
std::vector<std::pair<std::string, std::string>> mode_env(const std::string& mode) {
  if (mode == "krex-all") return {{"KREX_FREEZE_SCOPE", "all"}};
  if (mode == "krex-device") return {{"KREX_FREEZE_SCOPE", "device"}};
  if (mode == "krex-active") return {{"KREX_FREEZE_SCOPE", "active"}};
  if (mode == "krex-ctx") return {{"KREX_GATE_CONTEXTS", "0"}};
  if (mode == "krex-nopin") return {{"KREX_PIN", "0"}};
  if (mode == "krex-nofreeze") return {{"KREX_FREEZE", "none"}};
  return {};
}

struct config {
  std::string mode;
  int c = 1;
  bool persistent = false;
  std::string role;  // "reference", "repeat" or ""
  long spacer_mb = 0;  // the native repeat's --native-spacer-mb (KREX_EVAL_SPACER_MB for its workers)
  /// The krex modes' persistent workers run on krex::pool.
  bool via_pool() const { return persistent && worker_mode() == "krex"; }
  /// How its commands run: "process per command", "krex::pool" or "own loop".
  std::string runner_name() const {
    return !persistent ? "process per command" : via_pool() ? "krex::pool" : "own loop";
  }
  std::string label() const {
    std::string l = role == "reference" ? "reference (serial)"
                    : role == "repeat"  ? (spacer_mb > 0 ? "native repeat (serial, spaced)" : "native repeat (serial)")
                                        : mode + " C=" + std::to_string(c);
    if (persistent) l += " persistent";
    return l;
  }
  std::string worker_mode() const {
    if (mode == "serial" || mode == "unprotected") return "none";
    if (mode == "lock") return "lock";
    return "krex";
  }
};

config parse_config(const std::string& s) {
  std::vector<std::string> f;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, ':');) f.push_back(x);
  if (f.size() < 2 || f.size() > 3)
    usage_error("bad configuration '" + s + "': expected MODE:C or MODE:C:persistent");
  config c;
  c.mode = f[0];
  if (known_modes().count(c.mode) == 0)
    usage_error("unknown mode '" + c.mode + "' in --configs: use " + modes_text);
  char* end = nullptr;
  const long v = std::strtol(f[1].c_str(), &end, 10);
  if (end == f[1].c_str() || *end != '\0' || v < 1 || v > 256)
    usage_error("bad concurrency '" + f[1] + "' in '" + s + "': an integer 1..256");
  c.c = static_cast<int>(v);
  if (c.mode == "serial" && c.c != 1) usage_error("mode serial runs one command at a time: use serial:1");
  if (f.size() == 3) {
    if (f[2] != "persistent" && f[2] != "process")
      usage_error("bad shape '" + f[2] + "' in '" + s + "': persistent or process");
    c.persistent = f[2] == "persistent";
  }
  return c;
}

std::vector<config> parse_configs(const std::string& list) {
  std::vector<config> v;
  std::stringstream ss(list);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) v.push_back(parse_config(x));
  if (v.empty()) usage_error("--configs is empty");
  return v;
}

/// A preset: its configurations, repetitions and command selection.
struct preset_t {
  std::string configs;
  int reps = 1;
  /// Candidates (as --filter); empty: every candidate outside the fine and wide rank sets.
  std::vector<std::string> filter, sync, loop;
  int min_per_slot = 0;  ///< process shape: repeat the list until each slot has this many
  int min_per_worker = 10;  ///< persistent shape: repeat the list until each worker has this many
  int native_copies = 1;    ///< the native repeat runs the list this many times
};

std::vector<std::string> split_list(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream ss(v);
  for (std::string x; std::getline(ss, x, ',');)
    if (!x.empty()) out.push_back(x);
  return out;
}

/// The presets. Each starts with the reference pass and ends with the native repeat.
preset_t preset(const std::string& name) {
  if (name == "smoke") return {"serial:1,unprotected:4,lock:4,krex:4,krex:4:persistent,serial:1", 1, {}, {}, {}};
  if (name == "quick")
    return {"serial:1,"
            "unprotected:2,unprotected:4,unprotected:8,unprotected:16,"
            "lock:2,lock:4,lock:8,lock:16,"
            "krex:2,krex:4,krex:8,krex:16,"
            "krex-mps:16,krex-active:16,krex-nopin:16,krex-nofreeze:16,"
            "serial:1:persistent,unprotected:16:persistent,lock:16:persistent,krex:16:persistent,"
            "serial:1",
            1, {}, {}, {}};
  if (name == "full")
    return {"serial:1,"
            "unprotected:2,unprotected:4,unprotected:8,unprotected:16,"
            "lock:2,lock:4,lock:8,lock:16,"
            "krex:1,krex:2,krex:4,krex:8,krex:16,"
            "krex-mps:1,krex-mps:2,krex-mps:4,krex-mps:8,krex-mps:16,"
            "krex-all:16,krex-device:16,krex-active:16,krex-nopin:16,krex-nofreeze:16,"
            "serial:1:persistent,unprotected:16:persistent,lock:16:persistent,krex:16:persistent,"
            "krex-mps:16:persistent,serial:1",
            3, {}, {}, {}};
  // Issue 11's comparisons in one call of about 8 minutes on an H200 (build
  // included): lock-only and krex (the library's defaults) shape for shape,
  // both freeze scopes explicitly; the fine rank sets in every band, the
  // short coarse set, the longest gemm; the sample-synchronized loop on the
  // short kernels and a CUB set; the loop workload on a CUB and a plain set
  // (docs/EVAL.md).
  if (name == "issue11")
    return {"serial:1,lock:8,krex:8,lock:16,krex:16,krex-all:16,krex-device:16,lock:16:persistent,"
            "krex:16:persistent,serial:1",
            1,
            split_list("reduce-384M-fine,axpby-448M-fine,gemm-4K-t16-fine,axpby-16M,gemm-t16m1-6144"),
            split_list("axpby-16M,reduce-384M-fine"),
            split_list("reduce-384M-fine,axpby-448M-fine"),
            5};
  // Issue 19's ranking run: flips by gap class on enough pairs to compare
  // (>= 100 per class in the native repeat and the persistent workers, the
  // > 5% class included), for the persistent workers (the pool's shape). Only
  // plain (non-CUB) kernels, so a command is short: the coarse axpby and gemm sets (1-5% apart), the
  // wide sets (> 5% apart), the ~1.5 ms fine set (0.1-0.5% apart), every set
  // also timed with a synchronize after each sample (docs/EVAL.md).
  if (name == "ranks") {
    const char* const sets = "axpby-16M,gemm-2K,gemm-4K,axpby-16M-wide,gemm-2K-wide,axpby-448M-fine";
    preset_t p{"serial:1,krex:16:persistent,serial:1", 1, split_list(sets), split_list(sets), {}, 5};
    p.min_per_worker = 20;
    p.native_copies = 6;
    return p;
  }
  usage_error("unknown --config '" + name + "': smoke, quick, full, issue11 or ranks");
}

// ------------------------------------------------------------ the processes
struct options_t {
  std::string out = "eval-out";
  std::string worker;
  std::string preset = "quick";
  std::string configs;
  int reps = -1;
  std::vector<std::string> filter, sync, loop;
  bool filter_set = false, sync_set = false, loop_set = false;
  double loop_pct = 12;
  int min_per_worker = -1;  // -1: the preset's
  int min_per_slot = -1;    // -1: the preset's
  int native_copies = -1;   // the native repeat runs the order this many times (more rank-set trials); -1: the preset's
  long native_spacer_mb = 0;  // the native repeat's inputs behind a random spacer of 0..N MB (KREX_EVAL_SPACER_MB)
  bool plan_only = false;
  double timeout_s = 300;
  int device = 0;
  std::string devices_arg;   // --devices as given ("" = not given: one device, --device)
  std::vector<int> devices;  // --devices resolved
  unsigned seed = 1;
  int placements = krex_eval::default_placements;  // copies of each command's inputs (sample i on i % K)
  long placement_budget_mb = krex_eval::default_placement_budget_mb;  // per command, all K copies; 0: none
};

/// --devices all: the GPUs the CUDA runtime sees (a CUDA build); the host
/// backend's virtual devices, KREX_HOST_DEVICES (default 1), otherwise.
int count_devices() {
#if defined(KREX_WITH_CUDA)
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
#else
  const char* v = std::getenv("KREX_HOST_DEVICES");  // NOLINT(concurrency-mt-unsafe)
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : 1;
#endif
}

struct command_record {
  std::string id;  // the command sent: candidate id [@sync][@loop<ms>]
  int rep = 0;
  double start_ms = NAN, end_ms = NAN;  // driver side, ms since the run started
  double t_total_ms = NAN;
  int exit_code = 0;     // process shape: the worker's exit status; -1 killed/timeout
  std::string raw;       // the worker's JSON line ("" if none)
  krex_eval::flat_record r;
  bool ok = false;
  std::string error;
};

struct config_result {
  config cfg;
  std::size_t copies = 1;  // persistent: how many copies of the command list it ran
  bool skipped = false;
  std::string skip_reason;
  double wall_s = 0;
  std::vector<command_record> cmds;
};

struct worker_proc {
  pid_t pid = -1;
  int pidfd = -1;  // readable when the worker exits (-1: kernel without pidfd_open)
  int in = -1, out = -1;
  std::string buf;
  int cmd = -1;  // index into the config's command list, -1 idle
  clk::time_point started;
  std::string line;  // process shape: the result line, kept until the worker exits
  bool have_line = false;
};

class runner {
 public:
  runner(options_t o, int log_fd, clk::time_point run0) : m_o(std::move(o)), m_log(log_fd), m_run0(run0) {}

  worker_proc spawn(const config& cfg, const std::vector<std::pair<std::string, std::string>>& env,
                    const std::vector<std::string>& extra = {}) {
    int pin[2], pout[2];
    if (::pipe2(pin, O_CLOEXEC) != 0 || ::pipe2(pout, O_CLOEXEC) != 0) {
      std::perror("krex_eval: pipe2");
      std::exit(1);
    }
    const std::string mode = cfg.worker_mode();
    const std::string dev = std::to_string(m_o.device);
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("krex_eval: fork");
      std::exit(1);
    }
    if (pid == 0) {
      ::dup2(pin[0], 0);
      ::dup2(pout[1], 1);
      ::dup2(m_log, 2);
      for (const auto& kv : env) ::setenv(kv.first.c_str(), kv.second.c_str(), 1);
      std::vector<std::string> args = {m_o.worker, "--mode", mode, "--device", dev};
      if (mode == "lock") args.insert(args.end(), {"--lock", m_lock_path});
      if (mode == "krex") args.insert(args.end(), {"--segment", m_segment});
      args.insert(args.end(), {"--placements", std::to_string(m_o.placements), "--placement-budget-mb",
                               std::to_string(m_o.placement_budget_mb)});
      args.insert(args.end(), extra.begin(), extra.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(m_o.worker.c_str(), argv.data());
      std::fprintf(stderr, "krex_eval: cannot run the worker %s: %s\n", m_o.worker.c_str(),
                   std::strerror(errno));
      ::_exit(127);
    }
    ::close(pin[0]);
    ::close(pout[1]);
    ::fcntl(pout[0], F_SETFL, O_NONBLOCK);
    worker_proc w;
    w.pid = pid;
    w.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
    w.in = pin[1];
    w.out = pout[0];
    w.started = clk::now();
    return w;
  }

  static void send(worker_proc& w, const std::string& id) {
    const std::string line = id + "\n";
    // A dead worker makes this fail (EPIPE, SIGPIPE ignored): its EOF reports it.
    if (::write(w.in, line.data(), line.size()) < 0) return;
  }
  static void close_in(worker_proc& w) {
    if (w.in >= 0) ::close(w.in);
    w.in = -1;
  }
  static int reap(worker_proc& w, bool kill_it) {
    if (w.pid < 0) return -1;
    if (kill_it) ::kill(w.pid, SIGKILL);
    int st = 0;
    // Bounded: a worker whose stdin is closed exits; give it 60 s, then kill.
    const auto t0 = clk::now();
    for (;;) {
      const pid_t r = ::waitpid(w.pid, &st, WNOHANG);
      if (r == w.pid) break;
      if (r < 0 && errno != EINTR) return -1;
      if (clk::now() - t0 > std::chrono::seconds(60)) ::kill(w.pid, SIGKILL);
      ::usleep(2000);
    }
    drain_output(w);
    release(w);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
  }
  /// The worker's exit status if it has exited (fds released), else nothing.
  static bool try_reap(worker_proc& w, int* code) {
    int st = 0;
    const pid_t r = ::waitpid(w.pid, &st, WNOHANG);
    if (r != w.pid) return false;
    drain_output(w);
    release(w);
    *code = WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
    return true;
  }
  /// Reads what the worker wrote and is still in the pipe (non-blocking).
  static void drain_output(worker_proc& w) {
    char b[65536];
    for (;;) {
      if (w.out < 0) return;
      const ssize_t k = ::read(w.out, b, sizeof b);
      if (k > 0) {
        w.buf.append(b, static_cast<std::size_t>(k));
        continue;
      }
      if (k < 0 && errno == EINTR) continue;
      if (k == 0) {  // EOF: stop polling it (the exit is seen through pidfd/waitpid)
        ::close(w.out);
        w.out = -1;
      }
      return;  // EOF, EAGAIN or an error
    }
  }
  static void release(worker_proc& w) {
    if (w.out >= 0) ::close(w.out);
    if (w.pidfd >= 0) ::close(w.pidfd);
    w.out = w.pidfd = -1;
    close_in(w);
    w.pid = -1;
  }
  /// Takes the first complete line out of w.buf.
  static bool take_line(worker_proc& w, std::string* line) {
    const auto nl = w.buf.find('\n');
    if (nl == std::string::npos) return false;
    *line = w.buf.substr(0, nl);
    w.buf.erase(0, nl + 1);
    return true;
  }

  config_result run(const config& cfg, const std::vector<std::string>& ids) {
    config_result res;
    res.cfg = cfg;
    std::vector<std::pair<std::string, std::string>> env = mode_env(cfg.mode);
    if (cfg.spacer_mb > 0) env.push_back({"KREX_EVAL_SPACER_MB", std::to_string(cfg.spacer_mb)});
    if (cfg.mode == "krex-mps") {
      std::string why;
      if (!start_mps(&why)) {
        res.skipped = true;
        res.skip_reason = why;
        return res;
      }
      env.push_back({"CUDA_MPS_PIPE_DIRECTORY", m_o.out + "/mps-pipe"});
      env.push_back({"CUDA_MPS_LOG_DIRECTORY", m_o.out + "/mps-log"});
    }
    res.cmds.resize(ids.size());
    std::map<std::string, int> seen;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      res.cmds[i].id = ids[i];
      res.cmds[i].rep = seen[ids[i]]++;
    }
    std::size_t done = 0;
    const auto finish_cmd = [&](std::size_t idx, clk::time_point started, const std::string& line, int code,
                                const std::string& no_line_error) {
      command_record& r = res.cmds[idx];
      const auto now = clk::now();
      r.t_total_ms = ms_between(started, now);
      r.start_ms = ms_between(m_run0, started);
      r.end_ms = ms_between(m_run0, now);
      r.exit_code = code;
      r.raw = line;
      std::string why;
      if (!line.empty() && krex_eval::parse_flat(line, &r.r, &why)) {
        r.ok = r.r.num("ok", 0) == 1;
        r.error = r.r.str("error");
      } else {
        r.raw.clear();
        r.ok = false;
        r.error = line.empty() ? no_line_error : "unreadable result line: " + why;
      }
      ++done;
      std::fprintf(stderr, "\r  %s: %zu/%zu", cfg.label().c_str(), done, ids.size());
    };
    const auto t0 = clk::now();
    if (cfg.via_pool())
      run_pool(cfg, env, ids, finish_cmd, done);
    else
      run_workers(cfg, env, ids, finish_cmd, done);
    res.wall_s = ms_between(t0, clk::now()) / 1000.0;
    std::fprintf(stderr, "\r  %s: %zu commands in %.1f s\n", cfg.label().c_str(), ids.size(), res.wall_s);
    if (cfg.mode == "krex-mps") stop_mps();
    return res;
  }

  /// The process shape (a worker per command) and the own persistent loop
  /// (C workers, each fed one command at a time over its stdin).
  template <class Finish>
  void run_workers(const config& cfg, const std::vector<std::pair<std::string, std::string>>& env,
                   const std::vector<std::string>& ids, const Finish& finish_cmd, const std::size_t& done) {
    std::vector<worker_proc> slots(static_cast<std::size_t>(cfg.c));
    std::size_t next = 0;
    const auto timeout = std::chrono::duration<double>(m_o.timeout_s);
    const auto finish = [&](worker_proc& w, const std::string& line, int code) {
      finish_cmd(static_cast<std::size_t>(w.cmd), w.started, line, code,
                 "the worker exited (status " + std::to_string(code) + ") without a result");
      w.cmd = -1;
    };
    while (done < ids.size()) {
      // Give idle slots work.
      for (auto& w : slots) {
        if (w.cmd >= 0 || next >= ids.size()) continue;
        if (!cfg.persistent || w.pid < 0) {
          if (w.pid >= 0) reap(w, false);
          w = spawn(cfg, env);
        }
        w.cmd = static_cast<int>(next);
        w.buf.clear();
        w.have_line = false;
        w.started = clk::now();
        send(w, ids[next]);
        if (!cfg.persistent) close_in(w);
        ++next;
      }
      // Wait for output or (process shape) an exit. A command of the process
      // shape ends when its worker has exited: the process is the command.
      std::vector<pollfd> pfd;
      bool need_tick = false;
      for (auto& w : slots) {
        if (w.cmd < 0) continue;
        if (w.out >= 0) pfd.push_back({w.out, POLLIN, 0});
        if (w.pidfd >= 0) pfd.push_back({w.pidfd, POLLIN, 0});
        else need_tick = true;  // no pidfd: look for the exit every 5 ms
      }
      if (::poll(pfd.data(), pfd.size(), need_tick ? 5 : 100) < 0 && errno != EINTR) {
        std::perror("krex_eval: poll");
        std::exit(1);
      }
      for (auto& w : slots) {
        if (w.cmd < 0) continue;
        drain_output(w);
        std::string line;
        int code = 0;
        if (cfg.persistent) {
          if (take_line(w, &line)) {
            finish(w, line, 0);
          } else if (try_reap(w, &code)) {  // died with a command outstanding
            finish(w, take_line(w, &line) ? line : "", code);
          }
        } else {
          if (!w.have_line && take_line(w, &line)) {
            w.line = line;
            w.have_line = true;
          }
          if (try_reap(w, &code)) {
            if (!w.have_line && take_line(w, &line)) w.line = line, w.have_line = true;
            finish(w, w.have_line ? w.line : "", code);
          }
        }
      }
      for (auto& w : slots)
        if (w.cmd >= 0 && clk::now() - w.started > timeout) {
          std::fprintf(stderr, "\nkrex_eval: %s: command %s passed --timeout-s %.0f: killed\n",
                       cfg.label().c_str(), ids[static_cast<std::size_t>(w.cmd)].c_str(), m_o.timeout_s);
          reap(w, true);
          finish(w, w.have_line ? w.line : "", -1);
        }
    }
    for (auto& w : slots) {
      close_in(w);
      if (w.pid >= 0) reap(w, false);
    }
  }

  /// The krex modes' persistent shape: one `krex_eval_worker --pool C`
  /// process (a krex::pool of C workers, bench/eval/pool_host.hpp), kept C
  /// commands busy. Its result lines come back in the order the commands
  /// end, each with its arrival number (pool_seq). The pool kills and
  /// replaces a worker past --timeout-s; if the pool process itself dies,
  /// its commands in flight fail and a new one takes the rest; one silent
  /// past --timeout-s + 60 s is killed.
  template <class Finish>
  void run_pool(const config& cfg, const std::vector<std::pair<std::string, std::string>>& env,
                const std::vector<std::string>& ids, const Finish& finish_cmd, const std::size_t& done) {
    const std::vector<std::string> extra = {"--pool", std::to_string(cfg.c), "--timeout-s",
                                            std::to_string(static_cast<long>(std::ceil(m_o.timeout_s)))};
    const auto backstop = std::chrono::duration<double>(m_o.timeout_s + 60);
    worker_proc host;
    std::map<long, std::pair<std::size_t, clk::time_point>> inflight;  // pool_seq -> (command, sent)
    long seq = 0;  // the next command's arrival number in this pool process
    std::size_t next = 0;
    const auto fail_inflight = [&](const std::string& why, int code) {
      for (const auto& kv : inflight) finish_cmd(kv.second.first, kv.second.second, "", code, why);
      inflight.clear();
    };
    while (done < ids.size()) {
      if (host.pid < 0) {
        host = spawn(cfg, env, extra);
        seq = 0;
      }
      while (inflight.size() < static_cast<std::size_t>(cfg.c) && next < ids.size()) {
        inflight[seq++] = {next, clk::now()};
        send(host, ids[next]);
        ++next;
      }
      std::vector<pollfd> pfd;
      if (host.out >= 0) pfd.push_back({host.out, POLLIN, 0});
      if (host.pidfd >= 0) pfd.push_back({host.pidfd, POLLIN, 0});
      if (::poll(pfd.data(), pfd.size(), host.pidfd >= 0 ? 100 : 5) < 0 && errno != EINTR) {
        std::perror("krex_eval: poll");
        std::exit(1);
      }
      drain_output(host);
      for (std::string line; take_line(host, &line);) {
        krex_eval::flat_record fr;
        std::string why;
        const double sq = krex_eval::parse_flat(line, &fr, &why) ? fr.num("pool_seq") : NAN;
        auto it = std::isfinite(sq) ? inflight.find(static_cast<long>(sq)) : inflight.end();
        if (it == inflight.end()) {
          std::fprintf(stderr, "\nkrex_eval: %s: a result line of no command in flight: %.200s\n",
                       cfg.label().c_str(), line.c_str());
          continue;
        }
        finish_cmd(it->second.first, it->second.second, line, 0, "");
        inflight.erase(it);
      }
      int code = 0;
      if (try_reap(host, &code)) {
        for (std::string line; take_line(host, &line);) {  // what it wrote before it ended
          krex_eval::flat_record fr;
          std::string why;
          const double sq = krex_eval::parse_flat(line, &fr, &why) ? fr.num("pool_seq") : NAN;
          auto it = std::isfinite(sq) ? inflight.find(static_cast<long>(sq)) : inflight.end();
          if (it == inflight.end()) continue;
          finish_cmd(it->second.first, it->second.second, line, 0, "");
          inflight.erase(it);
        }
        fail_inflight("the krex::pool process exited (status " + std::to_string(code) + ") without a result",
                      code);
        continue;
      }
      const auto now = clk::now();
      for (const auto& kv : inflight)
        if (now - kv.second.second > backstop) {
          std::fprintf(stderr, "\nkrex_eval: %s: command %s passed --timeout-s %.0f + 60 s in the krex::pool "
                       "process: killed\n", cfg.label().c_str(), ids[kv.second.first].c_str(), m_o.timeout_s);
          const int c = reap(host, true);
          fail_inflight("the krex::pool process passed --timeout-s + 60 s and was killed", c);
          break;
        }
    }
    close_in(host);
    if (host.pid >= 0) reap(host, false);
  }

  void set_names(std::string lock_path, std::string segment) {
    m_lock_path = std::move(lock_path);
    m_segment = std::move(segment);
  }
  void stop_mps_if_running() {
    if (m_mps) stop_mps();
  }

 private:
  bool start_mps(std::string* why) {
    if (m_mps) return true;
    const std::string pipe = m_o.out + "/mps-pipe", log = m_o.out + "/mps-log";
    ::mkdir(pipe.c_str(), 0700);
    ::mkdir(log.c_str(), 0700);
    const std::string cmd = "CUDA_MPS_PIPE_DIRECTORY='" + pipe + "' CUDA_MPS_LOG_DIRECTORY='" + log +
                            "' timeout 30 nvidia-cuda-mps-control -d >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0) {
      *why = "could not start an MPS control daemon (nvidia-cuda-mps-control -d)";
      return false;
    }
    m_mps = true;
    return true;
  }
  void stop_mps() {
    const std::string pipe = m_o.out + "/mps-pipe";
    const std::string cmd = "echo quit | CUDA_MPS_PIPE_DIRECTORY='" + pipe +
                            "' timeout 30 nvidia-cuda-mps-control >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0)
      std::fprintf(stderr, "krex_eval: stopping the MPS control daemon failed (see %s/mps-log)\n",
                   m_o.out.c_str());
    m_mps = false;
  }

  options_t m_o;
  int m_log;
  clk::time_point m_run0;  // the run's start: command start times count from it
  std::string m_lock_path, m_segment;
  bool m_mps = false;
};

// ------------------------------------------------------------------ summary
/// Field `k` of every successful command: the driver's t_total_ms, else the worker's.
std::vector<double> field(const config_result& r, const std::string& k) {
  const bool total = k == "t_total_ms";
  std::vector<double> v;
  for (const auto& c : r.cmds)
    if (c.ok) {
      const double x = total ? c.t_total_ms : c.r.num(k);
      if (std::isfinite(x)) v.push_back(x);
    }
  return v;
}

double mean(const std::vector<double>& v) {
  if (v.empty()) return NAN;
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

std::string fmt(double v, const char* f = "%.2f") {
  if (!std::isfinite(v)) return "–";
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

/// A command of a configuration with its candidate (nullptr: an unknown
/// id) and timing.
struct command_view {
  const command_record* rec = nullptr;
  const krex_eval::candidate* cand = nullptr;
  krex_eval::timing t;
};

std::vector<command_view> views_of(const config_result& r, const std::vector<krex_eval::candidate>& all) {
  std::vector<command_view> v;
  for (const auto& c : r.cmds) {
    command_view cv;
    cv.rec = &c;
    std::string id, why;
    if (krex_eval::parse_command(c.id, &id, &cv.t, &why)) cv.cand = krex_eval::find_candidate(all, id);
    v.push_back(cv);
  }
  return v;
}

/// One band's inflation: the per-command view (each command's median
/// sample) and the sample-level view (every timed sample), both against the
/// reference median of the same command.
struct band_accuracy {
  krex_eval::tail_stats commands, samples;
};
using accuracy_t = std::map<std::string, band_accuracy>;  // band name -> accuracy

struct fraction_t {
  std::size_t n = 0;
  double median = NAN, p95 = NAN;
};

struct summary_row {
  double cpm = NAN, speedup = NAN, bound = NAN, busy_cpm = NAN;
  std::map<std::string, std::pair<double, double>> band;  // name -> (median, p95) inflation %, all commands
  std::map<std::string, std::size_t> band_n;
  krex_eval::rank_agreement rank;  // every set trial, against the reference
  std::size_t rank_sets = 0;
  double tau_mean = NAN;
  std::size_t ok = 0, failed = 0;
  /// "all", then one per timing ("batched", "sync", "loop"...): band -> accuracy.
  std::map<std::string, accuracy_t> acc;
  /// "coarse, batched", "fine, sync", ...: the rank sets' agreement.
  std::map<std::string, krex_eval::rank_totals> ranking;
  /// The same, each command's time its samples' krex_eval::rank_low_q quantile.
  std::map<std::string, krex_eval::rank_totals> ranking_low;
  /// "all", then one per timing: the timed loop's share of the command.
  std::map<std::string, fraction_t> critical;
  std::vector<std::size_t> per_worker;  // commands each worker process ran, sorted
  /// The successful commands' placements (the worker's result fields).
  struct placement_summary {
    std::size_t commands = 0;     // with a placements field
    std::size_t below_asked = 0;  // used fewer than asked (the budget, or fewer samples)
    std::size_t reused = 0;       // timed on the worker's kept copies (placements_reused)
    double k_min = NAN, k_med = NAN, k_max = NAN;
    double bytes_med = NAN, bytes_max = NAN;  // all K copies of one command
    double spread_med = NAN, spread_p95 = NAN;
  } placements;
};

struct reference_t {
  std::map<std::string, double> median;  // command id -> reference median (ms)
  std::map<std::string, double> low;     // command id -> the median of its commands' low quantiles (ms)
  double cmd_ms = NAN, critical_ms = NAN, cpm = NAN;
};

/// A command's samples' krex_eval::rank_low_q quantile (ms); NaN without samples.
double low_quantile_of(const command_record& c) {
  auto sa = c.r.arrays.find("samples_ms");
  return sa == c.r.arrays.end() ? NAN : krex_eval::quantile(sa->second, krex_eval::rank_low_q);
}

reference_t make_reference(const config_result& ref) {
  reference_t r;
  std::map<std::string, std::vector<double>> per, low;
  for (const auto& c : ref.cmds)
    if (c.ok) {
      per[c.id].push_back(c.r.num("median_ms"));
      const double q = low_quantile_of(c);
      if (std::isfinite(q)) low[c.id].push_back(q);
    }
  for (auto& kv : per) r.median[kv.first] = krex_eval::quantile(kv.second, 0.5);
  for (auto& kv : low) r.low[kv.first] = krex_eval::quantile(kv.second, 0.5);
  r.cmd_ms = mean(field(ref, "t_total_ms"));
  r.critical_ms = mean(field(ref, "t_critical_ms"));
  return r;
}

fraction_t fraction_of(const std::vector<double>& v) {
  return {v.size(), krex_eval::quantile(v, 0.5), krex_eval::quantile(v, 0.95)};
}

summary_row summarize(const config_result& r, const reference_t& ref, double serial_cpm,
                      const std::vector<krex_eval::candidate>& all) {
  summary_row s;
  for (const auto& c : r.cmds) (c.ok ? s.ok : s.failed)++;
  if (r.wall_s > 0) s.cpm = static_cast<double>(s.ok) / r.wall_s * 60.0;
  s.speedup = s.cpm / serial_cpm;
  s.bound = krex_eval::bound_speedup(r.cfg.c, ref.cmd_ms, ref.critical_ms);
  const std::vector<command_view> views = views_of(r, all);

  std::vector<std::pair<double, double>> spans;
  std::map<std::string, std::map<std::string, std::pair<std::vector<double>, std::vector<double>>>> infl;
  std::map<std::string, std::vector<double>> frac;
  std::map<double, std::size_t> per_pid;
  for (const auto& cv : views) {
    const command_record& c = *cv.rec;
    const double pid = c.r.num("pid");
    if (std::isfinite(pid)) ++per_pid[pid];
    if (!c.ok) continue;
    spans.push_back({c.start_ms, c.end_ms});
    const std::string tn = cv.t.name();
    if (c.t_total_ms > 0) {
      const double f = c.r.num("t_critical_ms") / c.t_total_ms;
      if (std::isfinite(f)) {
        frac["all"].push_back(f);
        frac[tn].push_back(f);
      }
    }
    auto it = ref.median.find(c.id);
    if (it == ref.median.end()) continue;
    const double x = krex_eval::inflation_pct(c.r.num("median_ms"), it->second);
    std::vector<double> xs;
    auto sa = c.r.arrays.find("samples_ms");
    if (sa != c.r.arrays.end()) krex_eval::append_inflations(sa->second, it->second, &xs);
    for (const auto& b : krex_eval::bands())
      if (b.contains(it->second))
        for (const std::string& view : {std::string("all"), tn}) {
          auto& slot = infl[view][b.name];
          slot.first.push_back(x);
          slot.second.insert(slot.second.end(), xs.begin(), xs.end());
        }
  }
  s.busy_cpm = krex_eval::busy_cpm(spans);
  for (const auto& vk : infl)
    for (const auto& b : krex_eval::bands()) {
      auto f = vk.second.find(b.name);
      band_accuracy& a = s.acc[vk.first][b.name];
      if (f != vk.second.end()) a = {krex_eval::tails(f->second.first), krex_eval::tails(f->second.second)};
    }
  for (const auto& b : krex_eval::bands()) {  // the old per-command fields: all commands
    std::vector<double> v;
    auto vi = infl.find("all");
    if (vi != infl.end() && vi->second.count(b.name)) v = vi->second.at(b.name).first;
    s.band[b.name] = {krex_eval::quantile(v, 0.5), krex_eval::quantile(v, 0.95)};
    s.band_n[b.name] = v.size();
  }
  for (const auto& kv : frac) s.critical[kv.first] = fraction_of(kv.second);
  {
    std::vector<double> k, bytes, spread;
    for (const auto& c : r.cmds) {
      const double kk = c.r.num("placements");
      if (!c.ok || !std::isfinite(kk)) continue;
      k.push_back(kk);
      if (c.r.num("placements_asked") > kk) ++s.placements.below_asked;
      if (c.r.num("placements_reused", 0) == 1) ++s.placements.reused;
      if (std::isfinite(c.r.num("placement_bytes"))) bytes.push_back(c.r.num("placement_bytes"));
      if (std::isfinite(c.r.num("placement_spread"))) spread.push_back(c.r.num("placement_spread"));
    }
    auto& ps = s.placements;
    ps.commands = k.size();
    if (!k.empty()) {
      ps.k_min = *std::min_element(k.begin(), k.end());
      ps.k_max = *std::max_element(k.begin(), k.end());
      ps.k_med = krex_eval::quantile(k, 0.5);
    }
    if (!bytes.empty()) {
      ps.bytes_med = krex_eval::quantile(bytes, 0.5);
      ps.bytes_max = *std::max_element(bytes.begin(), bytes.end());
    }
    ps.spread_med = krex_eval::quantile(spread, 0.5);
    ps.spread_p95 = krex_eval::quantile(spread, 0.95);
  }
  for (const auto& kv : per_pid) s.per_worker.push_back(kv.second);
  std::sort(s.per_worker.begin(), s.per_worker.end());

  // Ranking: per set, timing and repetition, this config's order against
  // the reference's and against the construction order.
  // The same with every time a low quantile: the reference's gap classes
  // then come from its low quantiles too.
  std::map<std::tuple<std::string, std::string, int>, std::vector<krex_eval::rank_member>> trials, trials_low;
  for (const auto& cv : views) {
    const command_record& c = *cv.rec;
    if (!c.ok || cv.cand == nullptr || cv.cand->set.empty()) continue;
    auto it = ref.median.find(c.id);
    if (it == ref.median.end()) continue;
    const std::string group =
        std::string(krex_eval::set_kind(cv.cand->set)) + ", " + cv.t.name();
    trials[{group, cv.cand->set, c.rep}].push_back({it->second, c.r.num("median_ms"), cv.cand->set_pos});
    auto lo = ref.low.find(c.id);
    const double q = low_quantile_of(c);
    if (lo != ref.low.end() && std::isfinite(q))
      trials_low[{group, cv.cand->set, c.rep}].push_back({lo->second, q, cv.cand->set_pos});
  }
  for (const auto& kv : trials) s.ranking[std::get<0>(kv.first)].add_trial(kv.second);
  for (const auto& kv : trials_low) s.ranking_low[std::get<0>(kv.first)].add_trial(kv.second);
  double tau_sum = 0;
  for (const auto& kv : s.ranking) {
    s.rank += kv.second.vs_reference;
    s.rank_sets += kv.second.trials;
    tau_sum += kv.second.tau_sum;
  }
  if (s.rank_sets > 0) s.tau_mean = tau_sum / static_cast<double>(s.rank_sets);
  return s;
}

/// CLOCK_MONOTONIC in ns: the workers stamp their commands with the same clock.
long long mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

bool krex_family(const std::string& mode) { return mode.compare(0, 4, "krex") == 0; }

/// The configuration of `mode` at the same C and shape as `like`, or nullptr.
const config_result* same_shape(const std::vector<config_result>& results, const config& like,
                                const std::string& mode) {
  for (const auto& r : results)
    if (!r.skipped && r.cfg.role.empty() && r.cfg.mode == mode && r.cfg.c == like.c &&
        r.cfg.persistent == like.persistent)
      return &r;
  return nullptr;
}

std::string now_utc() {
  const std::time_t t = std::time(nullptr);
  char b[64];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return b;
}

std::string self_dir() {
  char b[4096];
  const ssize_t n = ::readlink("/proc/self/exe", b, sizeof b - 1);
  if (n <= 0) return ".";
  std::string p(b, static_cast<std::size_t>(n));
  return p.substr(0, p.find_last_of('/'));
}


/// The JSON of one tail_stats (percent).
void put_tails(krex_tools::json::writer& j, const char* k, const krex_eval::tail_stats& t) {
  constexpr int digits = krex_eval::json_digits;
  j.key(k).begin_object();
  j.field("n", t.n).field("p50_pct", t.p50, digits).field("p95_pct", t.p95, digits);
  j.field("p99_pct", t.p99, digits).field("over_1pct_frac", t.over_1pct, digits);
  j.end_object();
}

std::string cell(const krex_eval::target_check& c, const char* f = "%.2f") {
  return std::string(krex_eval::to_string(c.outcome)) +
         (std::isfinite(c.value) ? " " + fmt(c.value, f) : std::string());
}

// ------------------------------------------------------------------- the plan
/// What the run is, decided before anything runs: the options, the
/// configurations, the commands and each configuration's list of them.
struct eval_plan {
  options_t o;
  std::string cmdline;
  clk::time_point run0;        // the run's start: command start times count from it
  long long run0_mono_ns = 0;  // the same instant on CLOCK_MONOTONIC (the workers' clock)
  std::vector<krex_eval::candidate> all = krex_eval::all_candidates();
  std::vector<config> cfgs;
  std::vector<std::string> ids;  // the commands: candidate id [@sync][@loop<ms>]
  std::size_t n_candidates = 0;
  std::vector<std::string> order;               // one pass: ids x reps, shuffled
  std::vector<std::vector<std::string>> lists;  // each configuration's commands
  std::vector<std::size_t> copies;              // how many copies of the order each list holds
  std::set<std::string> timings_present;
  double est_total = 0;  // s, plan.hpp's estimate
  std::string text;      // the plan as printed
};

/// The command line's options, their help and their defaults.
void define_options(krex_tools::cli::program& prog, options_t& o) {
  // A list option: its value split at commas, and marked given (else the preset's).
  const auto list = [](std::vector<std::string>& to, bool& given) {
    return [&to, &given](const std::string& v) {
      to = split_list(v);
      given = true;
    };
  };
  prog.root()
      .text("--config", "smoke|quick|full|issue11|ranks", o.preset, "the preset (default quick)")
      .text("--out", "DIR", o.out, "where eval.json, summary.md and workers.log go (default eval-out)")
      .text("--worker", "PATH", o.worker, "the benchmark command (default: krex_eval_worker beside krex_eval)")
      .text("--configs", "LIST", o.configs, "MODE:C[:persistent],... instead of the preset's")
      .integer("--reps", "N", o.reps, 1, 100, "repetitions of each command")
      .value("--filter", "S1,S2,...", list(o.filter, o.filter_set),
             "candidates whose id contains one of S, or whose set is S (default: the preset's; smoke, "
             "quick, full: every candidate outside the fine and wide rank sets)")
      .value("--sync", "S1,S2,...", list(o.sync, o.sync_set),
             "selected candidates (as --filter) that also run with a loop synchronized after every "
             "sample, id@sync (default: the preset's; '' for none)")
      .value("--loop", "S1,S2,...", list(o.loop, o.loop_set),
             "selected candidates (as --filter) that also run with a timed loop of about --loop-pct "
             "of the command, id@loop<ms> (default: the preset's; '' for none)")
      .number("--loop-pct", "P", o.loop_pct, 1, 90,
              "the loop workload's timed loop as a percent of a command (default 12, the KREX study's median)")
      .integer("--min-per-worker", "N", o.min_per_worker, 0, 1000,
               "persistent configurations repeat the command list until each worker has N commands "
               "on average (default: ranks 20, else 10; 0: run the list once)")
      .integer("--min-per-slot", "N", o.min_per_slot, 0, 1000,
               "process-shape configurations repeat the command list until each of their C slots has "
               "N commands on average, for steadier throughput at high C (default: issue11 and ranks 5, else 0)")
      .integer("--native-copies", "N", o.native_copies, 1, 100,
               "the native repeat (the last serial pass) runs the command list N times, each copy "
               "reshuffled, so its flips by gap class rest on as many pairs as the other configurations' "
               "(default: ranks 6, else 1)")
      .integer("--native-spacer-mb", "MB", o.native_spacer_mb, 0, 1L << 20,
               "the native repeat's commands allocate their inputs behind a spacer of a random size, "
               "0 to MB MB, so that their buffers land in different places, as a long-lived or "
               "concurrent worker's do, where fresh processes on an idle GPU get the same memory every "
               "time; the reference pass does not (KREX_EVAL_SPACER_MB, docs/EVAL.md; default 0: none)")
      .flag("--plan", o.plan_only, "print the configurations, their commands and the estimated duration, and exit")
      .number("--timeout-s", "N", o.timeout_s, 1, 86400, "kill a command after N s (default 300)")
      .integer("--device", "N", o.device, 0, 15, "the GPU (default 0)")
      .text("--devices", "all|N,M,...", o.devices_arg,
            "run every configuration on these GPUs at once (the reference: on each GPU in turn, "
            "the node otherwise idle); per-GPU reports in DIR/gpu<N>/, the node's in "
            "DIR/node.md and DIR/node.json (docs/EVAL.md)")
      .integer("--seed", "N", o.seed, 0, 1000000000, "the command order's seed (default 1)")
      .integer("--placements", "K", o.placements, 1, 256,
               "time every command over K copies of its inputs, sample i on copy i % K, so that where "
               "one copy lies in device memory moves its samples less (krex::measure's placements; "
               "default " + std::to_string(krex_eval::default_placements) + "; 1: the inputs once)")
      .integer("--placement-budget-mb", "MB", o.placement_budget_mb, 0, 1L << 24,
               "the most device memory one command's K copies may take; a command whose K copies "
               "would take more uses the largest K that fits (default " +
                   std::to_string(krex_eval::default_placement_budget_mb) + "; 0: no budget)")
      .epilog(std::string("Modes: ") + modes_text +
              ".\nExit status: 0 all passed, 1 a command failed, 2 cannot start "
              "(no worker, --out not writable), 64 usage.");
}

/// What select_commands() found that is an error only after --devices is
/// checked: a --sync or --loop that matches none of the selected candidates.
struct unmatched_timings {
  bool sync = false, loop = false;
};

/// The commands of the run: the preset's or --filter's candidates, each with
/// its extra timings (--sync, --loop); usage_error() on a selection that
/// names nothing.
unmatched_timings select_commands(eval_plan& p) {
  std::vector<std::string> filter, sync, loop;
  const preset_t pre = preset(p.o.preset);
  p.cfgs = parse_configs(p.o.configs.empty() ? pre.configs : p.o.configs);
  if (p.o.reps < 0) p.o.reps = pre.reps;
  if (p.o.min_per_slot < 0) p.o.min_per_slot = pre.min_per_slot;
  if (p.o.min_per_worker < 0) p.o.min_per_worker = pre.min_per_worker;
  if (p.o.native_copies < 0) p.o.native_copies = pre.native_copies;
  // The first configuration is the reference and the last the native
  // repeat; both must be serial.
  if (p.cfgs.size() < 2 || p.cfgs.front().mode != "serial" || p.cfgs.front().persistent ||
      p.cfgs.back().mode != "serial" || p.cfgs.back().persistent)
    usage_error("--configs must start and end with serial:1 (the reference and the native repeat)");
  filter = p.o.filter_set ? p.o.filter : pre.filter;
  sync = p.o.sync_set ? p.o.sync : pre.sync;
  loop = p.o.loop_set ? p.o.loop : pre.loop;
  if (p.o.filter_set && filter.empty()) usage_error("--filter is empty");
  bool any_sync = false, any_loop = false;
  for (const auto& c : p.all) {
    const bool keep = filter.empty() ? krex_eval::in_default_selection(c) : krex_eval::matches(c, filter);
    if (!keep) continue;
    ++p.n_candidates;
    p.ids.push_back(krex_eval::command_id(c.id, {}));
    if (!sync.empty() && krex_eval::matches(c, sync)) {
      p.ids.push_back(krex_eval::command_id(c.id, {true, 0}));
      any_sync = true;
    }
    if (!loop.empty() && krex_eval::matches(c, loop)) {
      p.ids.push_back(krex_eval::command_id(c.id, {false, krex_eval::loop_ms_for(c, p.o.loop_pct)}));
      any_loop = true;
    }
  }
  if (p.ids.empty()) usage_error("--filter matches no candidate");
  unmatched_timings u;
  u.sync = p.o.sync_set && !sync.empty() && !any_sync;
  u.loop = p.o.loop_set && !loop.empty() && !any_loop;
  return u;
}

/// --devices as given: all, or a list of device numbers.
void resolve_devices(options_t& o) {
  if (!o.devices_arg.empty()) {
    if (o.devices_arg == "all") {
      const int n = count_devices();
      if (n < 1) usage_error("--devices all: no GPU is visible (driver, CUDA_VISIBLE_DEVICES?)");
      for (int d = 0; d < n && d < 16; ++d) o.devices.push_back(d);
    } else {
      for (const std::string& t : split_list(o.devices_arg)) {
        char* end = nullptr;
        const long d = std::strtol(t.c_str(), &end, 10);
        if (t.empty() || *end != '\0' || d < 0 || d > 15)
          usage_error("--devices: '" + t + "' is not a device 0..15 (use all or N,M,...)");
        if (std::find(o.devices.begin(), o.devices.end(), static_cast<int>(d)) != o.devices.end())
          usage_error("--devices: device " + t + " is listed twice");
        o.devices.push_back(static_cast<int>(d));
      }
      if (o.devices.empty()) usage_error("--devices is empty");
    }
  }
}

/// Option parsing: the command line, then what the options say together
/// (a wrong one exits 64 with the usage).
eval_plan parse_options(int argc, char** argv) {
  eval_plan p;
  for (int i = 0; i < argc; ++i) p.cmdline += (i ? " " : "") + std::string(argv[i]);
  namespace cli = krex_tools::cli;
  cli::program prog("krex_eval",
                    "The evaluation: the same benchmark commands under every sharing mode "
                    "(docs/EVAL.md).");
  define_options(prog, p.o);
  prog.parse(argc, argv);
  try {  // what the options say together; usage_error() throws
    const unmatched_timings unmatched = select_commands(p);
    resolve_devices(p.o);
    if (unmatched.sync) usage_error("--sync matches none of the selected candidates");
    if (unmatched.loop) usage_error("--loop matches none of the selected candidates");
  } catch (const cli::usage_error& e) {
    prog.fail(e.what());
  }
  return p;
}

/// Planning: the roles, the shuffled order and each configuration's list.
void make_lists(eval_plan& p) {
  p.cfgs.front().role = "reference";
  p.cfgs.back().role = "repeat";
  p.cfgs.back().spacer_mb = p.o.native_spacer_mb;
  for (int r = 0; r < p.o.reps; ++r) p.order.insert(p.order.end(), p.ids.begin(), p.ids.end());
  std::mt19937 rng(p.o.seed);
  std::shuffle(p.order.begin(), p.order.end(), rng);  // the same order for every configuration
  // Each configuration's list: the order, repeated so each persistent
  // worker (--min-per-worker) or process-shape slot (--min-per-slot) has
  // enough commands; the same list for every configuration of one C and
  // shape. The serial passes run the order once.
  for (const auto& c : p.cfgs) {
    const int min_each = c.role == "repeat"
                             ? (p.o.native_copies > 1 ? p.o.native_copies * static_cast<int>(p.order.size()) : 0)
                         : c.role.empty() || c.persistent ? (c.persistent ? p.o.min_per_worker : p.o.min_per_slot)
                                                          : 0;
    std::mt19937 r2(p.o.seed * 1000003u + static_cast<unsigned>(c.c) * 2u + (c.persistent ? 1u : 0u));
    p.lists.push_back(krex_eval::repeat_for_workers(p.order, c.c, min_each, r2));
    p.copies.push_back(p.lists.back().size() / p.order.size());
  }
  for (const auto& id : p.ids) {
    std::string cand, why;
    krex_eval::timing t;
    if (krex_eval::parse_command(id, &cand, &t, &why)) p.timings_present.insert(t.name());
  }
}

/// The plan as printed (--plan, and before a run): commands and a rough
/// duration per configuration (plan.hpp).
void write_plan(eval_plan& p) {
  // The plan: commands and a rough duration per configuration (plan.hpp).
  p.est_total = 0;
  std::ostringstream plan;
  plan << "krex_eval: " << p.cfgs.size() << " configurations; " << p.ids.size() << " commands ("
       << p.ids.size() << " per repetition x " << p.o.reps << " reps = " << p.order.size()
       << " per pass); timings:";
  for (const auto& t : p.timings_present) plan << " " << t;
  plan << "\n";
  for (std::size_t i = 0; i < p.cfgs.size(); ++i) {
    double serial_s = 0;
    for (const auto& id : p.lists[i]) {
      std::string cand, why;
      krex_eval::timing t;
      krex_eval::parse_command(id, &cand, &t, &why);
      if (const auto* k = krex_eval::find_candidate(p.all, cand)) serial_s += krex_eval::est_command_s(*k, t);
    }
    const double est = krex_eval::est_config_s(serial_s, p.cfgs[i].mode, p.cfgs[i].c, p.cfgs[i].persistent);
    p.est_total += est;
    plan << "  " << p.cfgs[i].label() << ": " << p.lists[i].size() << " commands"
         << (p.copies[i] > 1 ? " (" + std::to_string(p.copies[i]) + " copies of the list)" : std::string())
         << ", ~" << fmt(est, "%.0f") << " s\n";
  }
  if (!p.o.devices.empty()) {
    plan << "krex_eval: on " << p.o.devices.size() << " GPU(s) (--devices";
    for (int d : p.o.devices) plan << " " << d;
    plan << "): every configuration on all at once, the reference on each in turn";
    if (p.o.devices.size() > 1 && !p.lists.empty()) {
      double ref_s = 0;  // the reference's extra passes
      for (const auto& id : p.lists.front()) {
        std::string cand, why;
        krex_eval::timing t;
        krex_eval::parse_command(id, &cand, &t, &why);
        if (const auto* k = krex_eval::find_candidate(p.all, cand)) ref_s += krex_eval::est_command_s(*k, t);
      }
      const double extra = ref_s * static_cast<double>(p.o.devices.size() - 1);
      p.est_total += extra;
      plan << " (+~" << fmt(extra, "%.0f") << " s)";
    }
    plan << "\n";
  }
  plan << "krex_eval: every command timed over " << p.o.placements << " placement(s) of its inputs (--placements), "
       << (p.o.placement_budget_mb > 0 ? "at most " + std::to_string(p.o.placement_budget_mb) + " MiB of them per command"
                                       : std::string("no memory budget"))
       << " (--placement-budget-mb); persistent krex configurations on krex::pool\n";
  plan << "krex_eval: estimated duration " << fmt(p.est_total, "%.0f") << " s (~" << fmt(p.est_total / 60, "%.1f")
       << " min, the build not included; rough H200 figures, bench/eval/plan.hpp)\n";
  p.text = plan.str();
}

/// The worker's path checked, --out created, workers.log opened: exits 2
/// when any of them fails.
int open_run(options_t& o, const std::string& log_path) {
  if (o.worker.empty()) o.worker = self_dir() + "/krex_eval_worker";
  if (::access(o.worker.c_str(), X_OK) != 0)
    cannot_start("the worker '" + o.worker + "' is not an executable: build krex_eval_worker "
                 "(cmake --preset cuda && cmake --build build-cuda --target krex_eval_worker) or pass --worker");
  if (::mkdir(o.out.c_str(), 0755) != 0 && errno != EEXIST)
    cannot_start("cannot create --out directory '" + o.out + "': " + std::strerror(errno));
  const int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (log_fd < 0) cannot_start("cannot write " + log_path + ": " + std::strerror(errno));
  ::signal(SIGPIPE, SIG_IGN);
  return log_fd;
}

// ------------------------------------------------------------- the reports
/// One device's results summarized: the rows of every table and the checks
/// against the targets.
struct report_data {
  reference_t ref;
  double serial_cpm = NAN;
  std::vector<summary_row> rows;
  std::string gpu, host;
  long cores = 0;
  std::vector<double> frac;  // critical fractions of the reference pass
  double frac_med = NAN, frac_under25 = NAN;
  std::vector<std::string> views;  // "all" and, with more than one, each timing
  std::vector<std::vector<krex_eval::target_check>> tput;  // throughput targets (krex family)
  std::vector<std::vector<std::pair<std::string, krex_eval::target_check>>> acc_checks;  // p95 targets
  std::vector<std::string> failures;
};

/// The nested bands the accuracy targets are checked on.
const std::vector<std::string>& nested_bands() {
  static const std::vector<std::string> nested = {">0.1ms", ">1ms", ">10ms"};
  return nested;
}

/// Summarizing: every configuration against the reference and the native repeat.
report_data summarize_results(const eval_plan& p, const std::vector<config_result>& results) {
  report_data d;
  d.ref = make_reference(results.front());
  const config_result& repeat = results.back();
  d.serial_cpm =
      repeat.wall_s > 0 ? static_cast<double>(std::count_if(repeat.cmds.begin(), repeat.cmds.end(),
                                                           [](const command_record& c) { return c.ok; })) /
                              repeat.wall_s * 60
                        : NAN;
  for (const auto& r : results) d.rows.push_back(summarize(r, d.ref, d.serial_cpm, p.all));

  for (const auto& r : results)
    for (const auto& c : r.cmds)
      if (d.gpu.empty() && !c.r.str("gpu").empty()) d.gpu = c.r.str("gpu");
  utsname u{};
  if (::uname(&u) == 0) d.host = std::string(u.nodename) + " " + u.sysname + " " + u.release;
  d.cores = ::sysconf(_SC_NPROCESSORS_ONLN);

  // Critical-region fraction (reference pass: uncontended command composition).
  for (const auto& c : results.front().cmds)
    if (c.ok && c.t_total_ms > 0) d.frac.push_back(c.r.num("t_critical_ms") / c.t_total_ms);
  d.frac_med = krex_eval::quantile(d.frac, 0.5);
  d.frac_under25 =
      d.frac.empty()
          ? NAN
          : static_cast<double>(std::count_if(d.frac.begin(), d.frac.end(), [](double f) { return f < 0.25; })) /
                static_cast<double>(d.frac.size());
  d.views = {"all"};
  if (p.timings_present.size() > 1)
    d.views.insert(d.views.end(), p.timings_present.begin(), p.timings_present.end());
  // Shape for shape: every krex-family configuration against lock-only at
  // the same C and shape, with issue 11's throughput targets.
  d.tput.resize(results.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    if (r.skipped || !r.cfg.role.empty() || !krex_family(r.cfg.mode)) continue;
    const config_result* lock = same_shape(results, r.cfg, "lock");
    const double lock_cpm = lock ? d.rows[static_cast<std::size_t>(lock - results.data())].cpm : NAN;
    d.tput[i] = krex_eval::throughput_targets(d.rows[i].cpm, lock_cpm, d.serial_cpm, r.cfg.persistent);
  }
  // The p95 targets as pass/fail, all commands of each configuration.
  d.acc_checks.resize(results.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].skipped) continue;
    const accuracy_t* a = d.rows[i].acc.count("all") ? &d.rows[i].acc.at("all") : nullptr;
    for (const auto& b : nested_bands()) {
      const double lim = krex_eval::issue11_p95_target(b);
      band_accuracy ba;
      if (a != nullptr && a->count(b)) ba = a->at(b);
      const krex_eval::target_check cc{b + " commands", ba.commands.p95, lim, krex_eval::at_most(ba.commands.p95, lim)};
      const krex_eval::target_check cs{b + " samples", ba.samples.p95, lim, krex_eval::at_most(ba.samples.p95, lim)};
      d.acc_checks[i].push_back({"commands", cc});
      d.acc_checks[i].push_back({"samples", cs});
    }
  }
  for (const auto& r : results)
    for (const auto& c : r.cmds)
      if (!c.ok) d.failures.push_back(r.cfg.label() + ": " + c.id + ": " + c.error);
  return d;
}


/// summary.md, the run, the reference, and one row per configuration.
void md_overview(std::ostream& md, const eval_plan& p, const report_data& d,
                 const std::vector<config_result>& results, int device, double took_s) {
  const auto& bands = krex_eval::bands();
  md << "# krex evaluation: " << p.o.preset << " configuration";
  if (device >= 0)
    md << ", GPU " << device << " of " << p.o.devices.size() << " run at once (node summary: ../node.md)";
  md << "\n\n";
  md << "- date " << now_utc() << "; GPU " << (d.gpu.empty() ? "?" : d.gpu) << "; host " << d.host << ", "
     << d.cores << " cores\n";
  md << "- command: `" << p.cmdline << "`\n";
  md << "- " << p.n_candidates << " candidates, " << p.ids.size() << " commands with their timings x " << p.o.reps
     << " reps = " << p.order.size() << " commands per pass (timings:";
  for (const auto& t : p.timings_present) md << " " << t;
  md << "); reference = the first serial pass\n";
  std::size_t max_copies = 1;
  for (auto c : p.copies) max_copies = std::max(max_copies, c);
  if (max_copies > 1)
    md << "- some configurations run the list more than once, so each persistent worker has at least "
       << p.o.min_per_worker << " commands and each process-shape slot " << p.o.min_per_slot
       << " on average (\"list copies\" in \"Commands per worker\")\n";
  if (p.o.native_spacer_mb > 0)
    md << "- the native repeat's commands allocate their inputs behind a random spacer of 0-" << p.o.native_spacer_mb
       << " MB (--native-spacer-mb; the reference pass does not)\n";
  md << "- every command timed over " << p.o.placements << " placement(s) of its inputs (--placements), "
     << (p.o.placement_budget_mb > 0 ? "at most " + std::to_string(p.o.placement_budget_mb) + " MiB of them per command"
                                     : std::string("no memory budget"))
     << " (--placement-budget-mb; \"Placements and their memory\"); persistent krex configurations ran on "
        "krex::pool; fresh-process reference: the "
     << results.back().cfg.label() << " pass\n";
  md << "- took " << fmt(took_s, "%.0f") << " s; estimated " << fmt(p.est_total, "%.0f")
     << " s (bench/eval/plan.hpp)\n";
  md << "- serial throughput " << fmt(d.serial_cpm, "%.1f") << " commands/min (native repeat pass)\n";
  md << "- critical-region fraction (reference pass, timed loop / whole command): median "
     << fmt(d.frac_med * 100, "%.1f") << "%, " << fmt(d.frac_under25 * 100, "%.0f")
     << "% of commands under 25% (KREX study: median 12%, 73% under 25%)";
  if (p.timings_present.size() > 1) {
    md << "; by timing:";
    for (const auto& t : p.timings_present) {
      auto it = d.rows.front().critical.find(t);
      if (it != d.rows.front().critical.end())
        md << " " << t << " " << fmt(it->second.median * 100, "%.1f") << "% (" << it->second.n << ")";
    }
  }
  md << "\n";
  md << "- reference command " << fmt(d.ref.cmd_ms, "%.0f") << " ms mean, timed loop "
     << fmt(d.ref.critical_ms, "%.0f") << " ms mean: toy bound " << fmt(d.ref.cmd_ms / d.ref.critical_ms, "%.1f")
     << "x serial\n\n";
  md << "Targets (KREX paper, H20): 3.4x serial at C=16; p95 inflation 3.90% (>0.1 ms), 1.58% (>1 ms), "
        "0.30% (>10 ms); flip rate within 3 points of native repeat, tau at least native repeat's.\n\n";
  md << "| configuration | ok | failed | wall s | cmd/min | x serial | bound x | "
        "<=0.1ms med/p95 % | >0.1ms med/p95 % | >1ms med/p95 % | >10ms med/p95 % | "
        "flip % | tau |\n";
  md << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const auto& s = d.rows[i];
    if (r.skipped) {
      md << "| " << r.cfg.label() << " | skipped: " << r.skip_reason << " |||||||||||||\n";
      continue;
    }
    md << "| " << r.cfg.label() << " | " << s.ok << " | " << s.failed << " | " << fmt(r.wall_s, "%.1f")
       << " | " << fmt(s.cpm, "%.1f") << " | " << fmt(s.speedup) << " | " << fmt(s.bound, "%.1f");
    for (const auto& b : bands) {
      const auto mp = s.band.at(b.name);
      md << " | " << fmt(mp.first) << " / " << fmt(mp.second);
    }
    md << " | " << fmt(s.rank.flip_rate() * 100, "%.1f") << " | " << fmt(s.tau_mean, "%.3f") << " |\n";
  }
  md << "\nBand sizes (commands): ";
  for (const auto& b : bands) md << b.name << " " << d.rows.back().band_n.at(b.name) << "; ";
  md << "ranking: " << d.rows.back().rank_sets << " set trials, " << d.rows.back().rank.pairs
     << " pairs per configuration (process shape).\n\n";
}

/// summary.md, shape for shape: every krex-family configuration beside lock-only and unprotected at
/// the same C and shape, with issue 11's throughput targets.
void md_throughput(std::ostream& md, const report_data& d, const std::vector<config_result>& results) {
  md << "## Shape for shape: throughput (issue 11 targets)\n\n";
  md << "Throughput over the configuration's wall time (first start to last exit), as in the table "
        "above; \"busy\" counts only the commands that ended while every slot was busy (first end to "
        "last start: no ramp-up, no drain). Targets use the wall-time throughput: krex >= lock-only, "
        ">= 4x serial, persistent >= 1.15x lock-only.\n\n";
  md << "| configuration | commands | cmd/min | busy cmd/min | x serial | lock-only cmd/min | krex / lock | "
        "unprotected cmd/min | >= lock-only | >= 4x serial | persistent >= 1.15x lock |\n";
  md << "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    if (r.skipped || !r.cfg.role.empty() || !krex_family(r.cfg.mode)) continue;
    const config_result* lock = same_shape(results, r.cfg, "lock");
    const config_result* unp = same_shape(results, r.cfg, "unprotected");
    const double lock_cpm = lock ? d.rows[static_cast<std::size_t>(lock - results.data())].cpm : NAN;
    const double unp_cpm = unp ? d.rows[static_cast<std::size_t>(unp - results.data())].cpm : NAN;
    const auto& s = d.rows[i];
    md << "| " << r.cfg.label() << " | " << s.ok << " | " << fmt(s.cpm, "%.1f") << " | " << fmt(s.busy_cpm, "%.1f")
       << " | " << fmt(s.speedup) << " | " << fmt(lock_cpm, "%.1f") << " | " << fmt(s.cpm / lock_cpm) << " | "
       << fmt(unp_cpm, "%.1f") << " | " << cell(d.tput[i][0]) << " | " << cell(d.tput[i][1]) << " | "
       << (r.cfg.persistent ? cell(d.tput[i][2]) : "–") << " |\n";
  }
  md << "\n";
}

/// summary.md, accuracy: command medians and every sample, per band.
void md_accuracy(std::ostream& md, const report_data& d, const std::vector<config_result>& results) {
  const auto& bands = krex_eval::bands();
  md << "## Accuracy: command medians and every sample\n\n";
  md << "Inflation against the reference median of the same command (kernel and timing), in percent. "
        "\"cmd\": each command's median sample; \"samples\": every timed sample. Targets (issue 11): p95 "
        "<= 2.5% (>0.1 ms), 1.0% (>1 ms), 0.2% (>10 ms) at both levels.\n\n";
  for (const auto& b : bands) {
    md << "### " << b.name << " (reference duration)\n\n";
    md << "| configuration | timing | commands | cmd p50 | cmd p95 | samples | sample p50 | sample p95 | "
          "sample p99 | samples > 1% slow |\n";
    md << "|---|---|---|---|---|---|---|---|---|---|\n";
    for (std::size_t i = 0; i < results.size(); ++i) {
      if (results[i].skipped) continue;
      for (const auto& v : d.views) {
        auto it = d.rows[i].acc.find(v);
        if (it == d.rows[i].acc.end() || it->second.count(b.name) == 0) continue;
        const band_accuracy& a = it->second.at(b.name);
        if (a.commands.n == 0) continue;
        md << "| " << results[i].cfg.label() << " | " << v << " | " << a.commands.n << " | " << fmt(a.commands.p50)
           << " | " << fmt(a.commands.p95) << " | " << a.samples.n << " | " << fmt(a.samples.p50) << " | "
           << fmt(a.samples.p95) << " | " << fmt(a.samples.p99) << " | " << fmt(a.samples.over_1pct * 100, "%.1f%%")
           << " |\n";
      }
    }
    md << "\n";
  }
}

/// summary.md, the p95 targets as pass/fail, all commands of each configuration.
void md_accuracy_targets(std::ostream& md, const report_data& d, const std::vector<config_result>& results) {
  const auto& bands = krex_eval::bands();
  const std::vector<std::string>& nested = nested_bands();
  md << "## Accuracy targets (issue 11): p95 inflation, command medians and samples\n\n";
  md << "| configuration | commands | samples |";
  for (const auto& b : nested) md << " " << b << " cmd p95 | " << b << " sample p95 |";
  md << "\n|---|---|---|";
  for (std::size_t k = 0; k < nested.size(); ++k) md << "---|---|";
  md << "\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].skipped) continue;
    const accuracy_t* a = d.rows[i].acc.count("all") ? &d.rows[i].acc.at("all") : nullptr;
    std::size_t ncmd = 0, nsmp = 0;
    if (a != nullptr)
      for (const auto& b : bands)
        if (b.up_to_ms > 0 || b.above_ms == 0.1)  // disjoint: <=0.1ms and >0.1ms cover every command once
          if (a->count(b.name)) ncmd += a->at(b.name).commands.n, nsmp += a->at(b.name).samples.n;
    md << "| " << results[i].cfg.label() << " | " << ncmd << " | " << nsmp << " |";
    for (std::size_t k = 0; k < nested.size(); ++k) {
      const std::string& b = nested[k];
      band_accuracy ba;
      if (a != nullptr && a->count(b)) ba = a->at(b);
      const krex_eval::target_check& cc = d.acc_checks[i][2 * k].second;
      const krex_eval::target_check& cs = d.acc_checks[i][2 * k + 1].second;
      md << " " << cell(cc) << " (" << ba.commands.n << ") | " << cell(cs) << " (" << ba.samples.n << ") |";
    }
    md << "\n";
  }
  md << "\n";
}

/// summary.md, ranking by set kind and timing.
void md_ranking(std::ostream& md, const report_data& d, const std::vector<config_result>& results) {
  md << "## Ranking: rank sets by kind and timing\n\n";
  md << "Coarse sets: members 1-5% apart; fine sets: 0.1-0.5% apart. Flips are discordant pairs, against "
        "the reference pass's order and against the construction order (more work is slower); tau is "
        "Kendall tau-a against the reference, averaged over set trials (a set in one repetition).\n\n";
  md << "| configuration | sets | trials | pairs | flips vs reference % | flips vs construction % | tau |\n";
  md << "|---|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].skipped) continue;
    for (const auto& kv : d.rows[i].ranking) {
      const auto& t = kv.second;
      md << "| " << results[i].cfg.label() << " | " << kv.first << " | " << t.trials << " | "
         << t.vs_reference.pairs << " | " << fmt(t.vs_reference.flip_rate() * 100, "%.1f") << " (" << t.vs_reference.flips
         << ") | " << fmt(t.vs_construction.flip_rate() * 100, "%.1f") << " (" << t.vs_construction.flips << ") | "
         << fmt(t.tau_mean(), "%.3f") << " |\n";
    }
  }
  md << "\n";
}

/// Per timing ("all", then each): a ranking map's pairs and flips by gap
/// class, against the reference (first) and against the construction order.
using gap_row = std::array<krex_eval::rank_agreement, krex_eval::gap_classes>;
std::map<std::string, std::pair<gap_row, gap_row>> gaps_by_timing(
    const std::map<std::string, krex_eval::rank_totals>& ranking) {
  std::map<std::string, std::pair<gap_row, gap_row>> out;
  for (const auto& kv : ranking) {
    const auto comma = kv.first.find(", ");
    const std::string timing = kv.first.substr(comma == std::string::npos ? 0 : comma + 2);
    for (const std::string& v : {std::string("all"), timing})
      for (std::size_t k = 0; k < krex_eval::gap_classes; ++k) {
        out[v].first[k] += kv.second.by_gap[k];
        out[v].second[k] += kv.second.by_gap_construction[k];
      }
  }
  return out;
}

/// A gap-class cell of summary.md: ` flips/pairs (%) |`, starred under 30 pairs.
void md_gap_cell(std::ostream& md, const krex_eval::rank_agreement& g) {
  md << " " << g.flips << "/" << g.pairs << " (" << fmt(g.flip_rate() * 100, "%.1f") << ")"
     << (g.pairs < 30 ? "*" : "") << " |";
}

/// summary.md, flips by gap class (the study's classes), every rank set and timing together.
void md_gap_classes(std::ostream& md, const report_data& d, const std::vector<config_result>& results) {
  md << "## Ranking by gap class\n\n";
  md << "Pairs of rank-set members classed by how far apart the reference puts them; flips against the "
        "reference order, `flips/pairs (%)`. With fewer than 30 pairs in a class one flip moves the rate by "
        "more than 3 points: compare such cells by their counts, not their rates.\n\n";
  md << "| configuration | timing |";
  for (std::size_t k = 0; k < krex_eval::gap_classes; ++k) md << " " << krex_eval::gap_class_name(k) << " |";
  md << "\n|---|---|";
  for (std::size_t k = 0; k < krex_eval::gap_classes; ++k) md << "---|";
  md << "\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].skipped) continue;
    for (const auto& kv : gaps_by_timing(d.rows[i].ranking)) {
      md << "| " << results[i].cfg.label() << " | " << kv.first << " |";
      for (const auto& g : kv.second.first) md_gap_cell(md, g);
      md << "\n";
    }
  }
  md << "\n\\* fewer than 30 pairs.\n\n";
}

/// summary.md, flips by gap class with each command's median and with its
/// samples' low quantile, against the reference and against the known
/// construction order (docs/EVAL.md, "Which statistic ranks").
void md_gap_classes_by_statistic(std::ostream& md, const report_data& d, const std::vector<config_result>& results) {
  const int q = krex_eval::rank_low_pct;
  md << "## Ranking by gap class: median or p" << q << ", against the reference and the construction order\n\n";
  md << "The same pairs ranked by each command's median (as above) and by its samples' " << q
     << "th percentile (the reference's gap classes and order then from its own " << q
     << "th percentiles); flips against the reference order and against the construction order (more work "
        "is slower: the known order, whatever the reference measured), classed by the reference's gap. "
        "`flips/pairs (%)`, \\* fewer than 30 pairs. Short bandwidth-bound kernels' samples sit on two "
        "levels whose shares follow the buffers' placement: the median jumps between them, a low quantile "
        "does not (docs/EVAL.md).\n\n";
  md << "| configuration | timing | statistic |";
  for (const char* what : {"vs reference", "vs construction"})
    for (std::size_t k = 0; k < krex_eval::gap_classes; ++k)
      md << " " << krex_eval::gap_class_name(k) << " " << what << " |";
  md << "\n|---|---|---|";
  for (std::size_t k = 0; k < 2 * krex_eval::gap_classes; ++k) md << "---|";
  md << "\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].skipped) continue;
    const auto med = gaps_by_timing(d.rows[i].ranking), low = gaps_by_timing(d.rows[i].ranking_low);
    for (const auto& kv : med)
      for (const auto* stat : {&med, &low}) {
        auto it = stat->find(kv.first);
        if (it == stat->end()) continue;
        md << "| " << results[i].cfg.label() << " | " << kv.first << " | "
           << (stat == &med ? std::string("median") : "p" + std::to_string(q)) << " |";
        for (const auto& g : it->second.first) md_gap_cell(md, g);
        for (const auto& g : it->second.second) md_gap_cell(md, g);
        md << "\n";
      }
  }
  md << "\n";
}

/// One timing and statistic of a configuration's flips by gap class beside
/// the fresh-process reference's: against the construction order and
/// against the reference pass's order.
struct vs_fresh_row {
  std::string timing, statistic;
  std::array<krex_eval::beside_fresh, krex_eval::gap_classes> construction{}, reference{};
};

/// Every timing ("all", then each) of `row`, ranked by the median and by the
/// low quantile, beside the same of `fresh` (the fresh-process reference).
std::vector<vs_fresh_row> vs_fresh(const summary_row& row, const summary_row& fresh) {
  std::vector<vs_fresh_row> out;
  const auto med = gaps_by_timing(row.ranking), low = gaps_by_timing(row.ranking_low);
  const auto fmed = gaps_by_timing(fresh.ranking), flow = gaps_by_timing(fresh.ranking_low);
  const std::string low_name = "p" + std::to_string(krex_eval::rank_low_pct);
  for (const auto& kv : med)
    for (const bool is_low : {false, true}) {
      const auto& mine = is_low ? low : med;
      const auto& theirs = is_low ? flow : fmed;
      auto m = mine.find(kv.first);
      if (m == mine.end()) continue;
      std::pair<gap_row, gap_row> f{};
      auto t = theirs.find(kv.first);
      if (t != theirs.end()) f = t->second;
      out.push_back({kv.first, is_low ? low_name : std::string("median"),
                     krex_eval::against_fresh(m->second.second, f.second),
                     krex_eval::against_fresh(m->second.first, f.first)});
    }
  return out;
}

/// The targets against the fresh-process reference, in points: flips against
/// construction at most 1 point above its rate in every gap class, against
/// the reference at most 3.
constexpr double fresh_construction_points = 1.0, fresh_reference_points = 3.0;

/// summary.md, flips by gap class beside the fresh-process reference's.
void md_vs_fresh(std::ostream& md, const report_data& d, const std::vector<config_result>& results) {
  const std::size_t fi = results.size() - 1;  // the native repeat
  md << "## Flips beside the fresh-process reference\n\n";
  md << "The fresh-process reference is the " << results[fi].cfg.label()
     << " pass: every command in a fresh process, one at a time. Each configuration's flips by gap class (the "
        "reference's gap), against the construction order (more work is slower) and against the reference "
        "pass's order, ranked by each command's median and by its samples' "
     << krex_eval::rank_low_pct
     << "th percentile: `flips/pairs (%)` and, after it, how many points above the fresh-process reference's "
        "rate (negative: below). \\* fewer than 30 pairs. Targets: against construction at most "
     << fmt(fresh_construction_points, "%g") << " point above it in every class, against the reference at most "
     << fmt(fresh_reference_points, "%g") << ".\n\n";
  md << "| configuration | timing | statistic |";
  for (const char* what : {"vs construction", "vs reference"})
    for (std::size_t k = 0; k < krex_eval::gap_classes; ++k)
      md << " " << krex_eval::gap_class_name(k) << " " << what << " |";
  md << " construction <= fresh + " << fmt(fresh_construction_points, "%g") << " | reference <= fresh + "
     << fmt(fresh_reference_points, "%g") << " |\n|---|---|---|";
  for (std::size_t k = 0; k < 2 * krex_eval::gap_classes + 2; ++k) md << "---|";
  md << "\n";
  const auto cell = [&](const krex_eval::beside_fresh& b, bool self) {
    md << " " << b.config.flips << "/" << b.config.pairs << " (" << fmt(b.config.flip_rate() * 100, "%.1f") << ")"
       << (b.config.pairs < 30 ? "*" : "");
    if (!self) md << " " << fmt(b.delta_pts(), "%+.1f");
    md << " |";
  };
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].skipped) continue;
    const bool self = i == fi;
    for (const auto& v : vs_fresh(d.rows[i], d.rows[fi])) {
      md << "| " << results[i].cfg.label() << " | " << v.timing << " | " << v.statistic << " |";
      for (const auto& b : v.construction) cell(b, self);
      for (const auto& b : v.reference) cell(b, self);
      if (self) {
        md << " (the fresh-process reference) | |\n";
        continue;
      }
      md << " " << krex_eval::to_string(krex_eval::within_points(v.construction, fresh_construction_points))
         << " | " << krex_eval::to_string(krex_eval::within_points(v.reference, fresh_reference_points)) << " |\n";
    }
  }
  md << "\n";
}

/// summary.md, the placements every configuration timed over and the memory they cost.
void md_placements(std::ostream& md, const eval_plan& p, const report_data& d,
                   const std::vector<config_result>& results) {
  md << "## Placements and their memory\n\n";
  md << "Each command timed its candidate over K copies of its inputs, sample i on copy i % K (--placements "
     << p.o.placements << "; --placement-budget-mb "
     << (p.o.placement_budget_mb > 0 ? std::to_string(p.o.placement_budget_mb) + " per command" : std::string("0: none"))
     << "; a command whose K copies would not fit used the largest K that does; samples round up to a multiple "
        "of K where that adds at most 5%). Memory: all K copies of one "
        "command; at once: C x the largest, the most one configuration's commands hold together. Spread: (max - "
        "min) / median of a command's per-copy medians, how much placement moved it. Reused: commands "
        "timed on copies their worker kept from an earlier command (K > 1).\n\n";
  md << "| configuration | commands | K used min / median / max | fewer than asked | reused | MiB per command "
        "median / max | GiB at once (C x max) | spread median / p95 % |\n|---|---|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& ps = d.rows[i].placements;
    if (results[i].skipped || ps.commands == 0) continue;
    md << "| " << results[i].cfg.label() << " | " << ps.commands << " | " << fmt(ps.k_min, "%.0f") << " / "
       << fmt(ps.k_med, "%.0f") << " / " << fmt(ps.k_max, "%.0f") << " | " << ps.below_asked << " | " << ps.reused << " | "
       << fmt(ps.bytes_med / 1048576.0, "%.0f") << " / " << fmt(ps.bytes_max / 1048576.0, "%.0f") << " | "
       << fmt(ps.bytes_max * results[i].cfg.c / 1073741824.0, "%.1f") << " | " << fmt(ps.spread_med * 100, "%.2f")
       << " / " << fmt(ps.spread_p95 * 100, "%.2f") << " |\n";
  }
  md << "\n";
}

/// summary.md, the device's state per configuration: the quiet step and the clocks.
void md_device_state(std::ostream& md, const std::vector<config_result>& results) {
  md << "## Device state (quiet step, clocks, throttling)\n\n";
  md << "krex configurations: regions that found the device busy after freezing their siblings (the "
        "driver's work after large frees) and waited for it, and for how long; every configuration: the SM "
        "clock and power at region entry (NVML, krex only) and samples marked throttled by krex::measure "
        "(a power or thermal slowdown reason was active).\n\n";
  md << "| configuration | commands | quiet waits | wait median / max ms | still busy | SM MHz median / min | "
        "power W median / max | throttled samples |\n|---|---|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].skipped) continue;
    const std::vector<double> waits = field(results[i], "quiet_wait_ms");
    std::vector<double> waited;
    for (double w : waits)
      if (w > 0) waited.push_back(w);
    const std::vector<double> busy = field(results[i], "quiet_busy");
    const std::vector<double> sm = field(results[i], "sm_mhz");
    const std::vector<double> pw = field(results[i], "power_w");
    const std::vector<double> thr = field(results[i], "throttled_samples");
    double busy_n = 0, thr_n = 0;
    for (double b : busy) busy_n += b;
    for (double t : thr) thr_n += t;
    md << "| " << results[i].cfg.label() << " | " << results[i].cmds.size() << " | "
       << (waits.empty() ? std::string("-") : std::to_string(waited.size()) + "/" + std::to_string(waits.size()))
       << " | " << (waited.empty() ? std::string("-") : fmt(krex_eval::quantile(waited, 0.5), "%.2f") + " / " +
                                                        fmt(*std::max_element(waited.begin(), waited.end()), "%.2f"))
       << " | " << (waits.empty() ? std::string("-") : fmt(busy_n, "%.0f")) << " | "
       << (sm.empty() ? std::string("-") : fmt(krex_eval::quantile(sm, 0.5), "%.0f") + " / " +
                                               fmt(*std::min_element(sm.begin(), sm.end()), "%.0f"))
       << " | " << (pw.empty() ? std::string("-") : fmt(krex_eval::quantile(pw, 0.5), "%.0f") + " / " +
                                                        fmt(*std::max_element(pw.begin(), pw.end()), "%.0f"))
       << " | " << fmt(thr_n, "%.0f") << " |\n";
  }
  md << "\n";
}

/// summary.md, the timed loop's share of a command, per configuration and timing.
void md_critical_fraction(std::ostream& md, double loop_pct, const report_data& d,
                          const std::vector<config_result>& results) {
  md << "## Critical fraction (timed loop / command)\n\n";
  md << "The KREX study's workload: median ~12%, 73% under 25%. The loop timing sizes its loop for about "
     << fmt(loop_pct, "%g") << "%.\n\n";
  md << "| configuration | timing | commands | median % | p95 % |\n|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (results[i].skipped) continue;
    for (const auto& v : d.views) {
      auto it = d.rows[i].critical.find(v);
      if (it == d.rows[i].critical.end()) continue;
      md << "| " << results[i].cfg.label() << " | " << v << " | " << it->second.n << " | "
         << fmt(it->second.median * 100, "%.1f") << " | " << fmt(it->second.p95 * 100, "%.1f") << " |\n";
    }
  }
  md << "\n";
}

/// summary.md, worker processes and the commands each ran.
void md_workers(std::ostream& md, const report_data& d, const std::vector<config_result>& results) {
  md << "## Commands per worker\n\n";
  md << "Worker processes and the commands each ran (a process per command: 1 each); how the commands ran: a "
        "process per command, a krex::pool (the krex modes' persistent workers) or the eval's own loop (the "
        "other modes' persistent workers).\n\n";
  md << "| configuration | commands | list copies | workers | min | median | max | runner |\n"
        "|---|---|---|---|---|---|---|---|\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& pw = d.rows[i].per_worker;
    if (results[i].skipped || pw.empty()) continue;
    md << "| " << results[i].cfg.label() << " | " << results[i].cmds.size() << " | " << results[i].copies << " | "
       << pw.size() << " | " << pw.front() << " | " << pw[pw.size() / 2] << " | " << pw.back() << " | "
       << results[i].cfg.runner_name() << " |\n";
  }
  md << "\n";
}

/// summary.md, where the time goes, and the failed commands.
void md_time(std::ostream& md, const report_data& d, const std::vector<config_result>& results) {
  md << "## Where the time goes (medians, ms)\n\n";
  md << "| configuration | commands | command | context | join | compile | inputs | check | wait | lock | gate | "
        "drain | freeze | pin | critical | critical share |\n";
  md << "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : results) {
    if (r.skipped) continue;
    const auto med = [&](const char* k) { return fmt(krex_eval::quantile(field(r, k), 0.5), "%.1f"); };
    const auto med3 = [&](const char* k) { return fmt(krex_eval::quantile(field(r, k), 0.5), "%.3f"); };
    std::vector<double> fr;
    for (const auto& c : r.cmds)
      if (c.ok && c.t_total_ms > 0) fr.push_back(c.r.num("t_critical_ms") / c.t_total_ms * 100);
    md << "| " << r.cfg.label() << " | " << field(r, "t_total_ms").size() << " | " << med("t_total_ms") << " | "
       << med("t_context_ms") << " | "
       << med("t_join_ms") << " | " << med("t_compile_ms") << " | " << med("t_inputs_ms") << " | "
       << med("t_check_ms") << " | " << med("t_wait_ms") << " | " << med("lock_ms") << " | " << med3("gate_ms")
       << " | " << med3("drain_ms") << " | " << med3("freeze_ms") << " | " << med3("pin_ms") << " | "
       << med("t_critical_ms") << " | " << fmt(krex_eval::quantile(fr, 0.5), "%.0f%%") << " |\n";
  }
  if (!d.failures.empty()) {
    md << "\n## Failed commands (" << d.failures.size() << ")\n\n";
    for (std::size_t i = 0; i < d.failures.size() && i < 50; ++i) md << "- " << d.failures[i] << "\n";
  }
}

/// summary.md of one device's results, section by section; `device` -1: the
/// run without --devices.
std::string summary_markdown(const eval_plan& p, const report_data& d, const std::vector<config_result>& results,
                             int device, double took_s) {
  std::ostringstream md;
  md_overview(md, p, d, results, device, took_s);
  md_throughput(md, d, results);
  md_accuracy(md, d, results);
  md_accuracy_targets(md, d, results);
  md_ranking(md, d, results);
  md_gap_classes(md, d, results);
  md_gap_classes_by_statistic(md, d, results);
  md_vs_fresh(md, d, results);
  md_placements(md, p, d, results);
  md_device_state(md, results);
  md_critical_fraction(md, p.o.loop_pct, d, results);
  md_workers(md, d, results);
  md_time(md, d, results);
  return md.str();
}

/// eval.json of one device's results: every command with its samples and
/// start times, and the summary rows.
std::string eval_json(const eval_plan& p, const report_data& d, const std::vector<config_result>& results,
                      int device, double took_s) {
  const auto& bands = krex_eval::bands();
  constexpr int digits = krex_eval::json_digits;
  constexpr int time_digits = 12;  // ms since the run started: keep the microseconds
  krex_tools::json::writer j;
  j.begin_object().key("meta").begin_object();
  j.field("date", now_utc()).field("gpu", d.gpu).field("host", d.host);
  j.field("cores", d.cores).field("preset", p.o.preset);
  if (device >= 0) j.field("device", device).field("node_devices", p.o.devices.size());
  j.field("command", p.cmdline).field("reps", p.o.reps);
  j.field("candidates", p.n_candidates);
  j.field("commands_per_rep", p.ids.size());  // the candidates and their extra timings
  j.field("commands_per_pass", p.order.size());
  j.key("timings").begin_array();
  for (const auto& t : p.timings_present) j.value(t);
  j.end_array();
  j.field("loop_pct", p.o.loop_pct, digits).field("min_per_worker", p.o.min_per_worker);
  j.field("native_copies", p.o.native_copies).field("native_spacer_mb", p.o.native_spacer_mb);
  j.field("placements", p.o.placements).field("placement_budget_mb", p.o.placement_budget_mb);
  j.field("fresh_reference", results.back().cfg.label());
  j.field("run_start_mono_ns", p.run0_mono_ns);
  j.field("estimated_s", p.est_total, digits).field("took_s", took_s, digits);
  j.field("serial_cpm", d.serial_cpm, digits).field("reference_cmd_ms", d.ref.cmd_ms, digits);
  j.field("reference_critical_ms", d.ref.critical_ms, digits);
  j.field("critical_fraction_median", d.frac_med, digits);
  j.field("critical_fraction_under_25", d.frac_under25, digits);
  j.key("critical_fractions").values(d.frac, digits);
  j.end_object().key("reference").begin_object();
  for (const auto& kv : d.ref.median) j.field(kv.first, kv.second, digits);
  j.end_object().key("configs").begin_array();
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    const auto& s = d.rows[i];
    j.begin_object();
    j.field("label", r.cfg.label()).field("mode", r.cfg.mode).field("c", r.cfg.c);
    j.field("shape", r.cfg.persistent ? "persistent" : "process").field("role", r.cfg.role);
    j.field("skipped", r.skipped).field("skip_reason", r.skip_reason).field("wall_s", r.wall_s, digits);
    j.field("ok", s.ok).field("failed", s.failed);
    j.field("commands", r.cmds.size()).field("list_copies", r.copies).field("runner", r.cfg.runner_name());
    {
      const auto& ps = s.placements;
      j.key("placements").begin_object();
      j.field("commands", ps.commands).field("fewer_than_asked", ps.below_asked).field("reused", ps.reused);
      j.field("k_min", ps.k_min, digits).field("k_median", ps.k_med, digits).field("k_max", ps.k_max, digits);
      j.field("bytes_median", ps.bytes_med, 15).field("bytes_max", ps.bytes_max, 15);
      j.field("bytes_at_once", ps.bytes_max * r.cfg.c, 15);
      j.field("spread_median", ps.spread_med, digits).field("spread_p95", ps.spread_p95, digits);
      j.end_object();
    }
    // Flips by gap class beside the fresh-process reference (the native repeat).
    j.key("vs_fresh_reference").begin_object();
    for (const auto& v : vs_fresh(s, d.rows.back())) {
      j.key(v.timing + ", " + v.statistic).begin_object();
      for (const auto* g : {&v.construction, &v.reference}) {
        j.key(g == &v.construction ? "by_gap_construction" : "by_gap").begin_object();
        for (std::size_t k = 0; k < krex_eval::gap_classes; ++k) {
          const auto& b = (*g)[k];
          j.key(krex_eval::gap_class_name(k)).begin_object();
          j.field("pairs", b.config.pairs).field("flips", b.config.flips);
          j.field("fresh_pairs", b.fresh.pairs).field("fresh_flips", b.fresh.flips);
          j.field("delta_pts", b.delta_pts(), digits).end_object();
        }
        j.end_object();
      }
      j.field("construction_within_1pt",
              krex_eval::to_string(krex_eval::within_points(v.construction, fresh_construction_points)));
      j.field("reference_within_3pt",
              krex_eval::to_string(krex_eval::within_points(v.reference, fresh_reference_points)));
      j.end_object();
    }
    j.end_object();
    j.field("throughput_cpm", s.cpm, digits).field("speedup_vs_serial", s.speedup, digits);
    j.field("busy_cpm", s.busy_cpm, digits);
    j.field("bound_speedup", s.bound, digits);
    j.key("inflation").begin_object();  // per command (median sample), all commands
    for (const auto& b : bands) {
      j.key(b.name).begin_object();
      j.field("median_pct", s.band.at(b.name).first, digits).field("p95_pct", s.band.at(b.name).second, digits);
      j.field("n", s.band_n.at(b.name));
      j.field("paper_p95_pct", krex_eval::paper_p95_target(b.name), digits);
      j.field("issue11_p95_pct", krex_eval::issue11_p95_target(b.name), digits);
      j.end_object();
    }
    j.end_object();
    // Both views, for all commands ("all") and per timing.
    j.key("accuracy").begin_object();
    for (const auto& vk : s.acc) {
      j.key(vk.first).begin_object();
      for (const auto& b : bands) {
        auto it = vk.second.find(b.name);
        if (it == vk.second.end()) continue;
        j.key(b.name).begin_object();
        put_tails(j, "commands", it->second.commands);
        put_tails(j, "samples", it->second.samples);
        j.end_object();
      }
      j.end_object();
    }
    j.end_object();
    j.key("targets").begin_array();
    for (const auto& t : d.tput[i]) {
      j.begin_object().field("target", t.what).field("level", "throughput");
      j.field("value", t.value, digits).field("limit", t.limit, digits).field("outcome", krex_eval::to_string(t.outcome));
      j.end_object();
    }
    for (const auto& lt : d.acc_checks[i]) {
      j.begin_object().field("target", "p95 inflation " + lt.second.what).field("level", lt.first);
      j.field("value", lt.second.value, digits).field("limit", lt.second.limit, digits);
      j.field("outcome", krex_eval::to_string(lt.second.outcome));
      j.end_object();
    }
    j.end_array();
    j.field("rank_pairs", s.rank.pairs);
    j.field("rank_flips", s.rank.flips);
    j.field("flip_rate", s.rank.flip_rate(), digits).field("kendall_tau", s.tau_mean, digits);
    // "ranking": each command's median; "ranking_p10": its samples' low quantile.
    for (const auto* ranking : {&s.ranking, &s.ranking_low}) {
      j.key(ranking == &s.ranking ? std::string("ranking") : "ranking_p" + std::to_string(krex_eval::rank_low_pct))
          .begin_object();
      for (const auto& kv : *ranking) {
        const auto& t = kv.second;
        j.key(kv.first).begin_object();
        j.field("trials", t.trials).field("pairs", t.vs_reference.pairs);
        j.field("flips_vs_reference", t.vs_reference.flips);
        j.field("flip_rate_vs_reference", t.vs_reference.flip_rate(), digits);
        j.field("flips_vs_construction", t.vs_construction.flips);
        j.field("flip_rate_vs_construction", t.vs_construction.flip_rate(), digits);
        j.field("kendall_tau", t.tau_mean(), digits);
        for (const auto* by : {&t.by_gap, &t.by_gap_construction}) {
          j.key(by == &t.by_gap ? "by_gap" : "by_gap_construction").begin_object();
          for (std::size_t k = 0; k < krex_eval::gap_classes; ++k)
            j.key(krex_eval::gap_class_name(k)).begin_object().field("pairs", (*by)[k].pairs)
                .field("flips", (*by)[k].flips).end_object();
          j.end_object();
        }
        j.end_object();
      }
      j.end_object();
    }
    j.key("critical_fraction").begin_object();
    for (const auto& kv : s.critical) {
      j.key(kv.first).begin_object();
      j.field("n", kv.second.n).field("median", kv.second.median, digits).field("p95", kv.second.p95, digits);
      j.end_object();
    }
    j.end_object();
    j.key("commands_per_worker").begin_array();
    for (auto n : s.per_worker) j.value(n);
    j.end_array();
    j.key("commands").begin_array();
    for (const auto& c : r.cmds) {
      j.begin_object();
      j.field("id", c.id).field("rep", c.rep);
      std::string cand, why;
      krex_eval::timing t;
      if (krex_eval::parse_command(c.id, &cand, &t, &why)) j.field("candidate", cand).field("timing", t.name());
      j.field("start_ms", c.start_ms, time_digits).field("end_ms", c.end_ms, time_digits);
      const double ws = c.r.num("mono_start_ns");
      j.field("worker_start_ms", std::isfinite(ws) ? (ws - static_cast<double>(p.run0_mono_ns)) / 1e6 : NAN,
              time_digits);
      j.field("t_total_ms", c.t_total_ms, digits).field("exit", c.exit_code);
      j.field("ok", c.ok).field("error", c.error);
      auto it = d.ref.median.find(c.id);
      if (c.ok && it != d.ref.median.end()) {
        j.field("reference_ms", it->second, digits);
        j.field("inflation_pct", krex_eval::inflation_pct(c.r.num("median_ms"), it->second), digits);
      }
      if (c.raw.empty())
        j.key("result").null();
      else
        j.key("result").raw(c.raw);  // the worker's line, parsed (parse_flat) before it was kept
      j.end_object();
    }
    j.end_array().end_object();
  }
  j.end_array().end_object();
  return j.str();
}

/// Writing one device's report (eval.json, summary.md) in `dir`; 1 when a
/// command failed.
int write_report(const eval_plan& p, const std::string& dir, const std::vector<config_result>& results, int device,
                 double took_s, const std::string& log_path) {
  const report_data d = summarize_results(p, results);
  const std::string md = summary_markdown(p, d, results, device, took_s);
  std::ofstream js(dir + "/eval.json");
  js << eval_json(p, d, results, device, took_s) << "\n";
  js.close();
  std::ofstream(dir + "/summary.md") << md;
  std::printf("%s", md.c_str());
  std::printf("\nwrote %s/eval.json, %s/summary.md, %s\n", dir.c_str(), dir.c_str(), log_path.c_str());
  return d.failures.empty() ? 0 : 1;
}

// ------------------------------------------------------------------ the runs
/// Running a configuration list on one device (--device), in turn.
int run_one_device(const eval_plan& p, int log_fd, const std::string& tag, const std::string& log_path) {
  runner run(p.o, log_fd, p.run0);
  run.set_names(p.o.out + "/lock-only.lock", "krex-eval-" + tag);
  std::fprintf(stderr, "%sout %s\n", p.text.c_str(), p.o.out.c_str());
  std::vector<config_result> results;
  for (std::size_t i = 0; i < p.cfgs.size(); ++i) {
    results.push_back(run.run(p.cfgs[i], p.lists[i]));
    results.back().copies = p.copies[i];
  }
  run.stop_mps_if_running();
  const double took_s = ms_between(p.run0, clk::now()) / 1000.0;
  return write_report(p, p.o.out, results, -1, took_s, log_path);
}

/// The node's report (--devices): throughput of all GPUs together, accuracy
/// per GPU (each against its own reference), context and join cost by GPUs
/// at once, in node.md and node.json.
void write_node_report(const eval_plan& p, const std::vector<std::vector<config_result>>& per,
                       const std::vector<double>& node_wall, double took_s) {
  const std::size_t nd = p.o.devices.size();
  constexpr int digits = krex_eval::json_digits;
  const auto& bands = krex_eval::bands();
  std::vector<std::vector<summary_row>> rows(nd);
  for (std::size_t k = 0; k < nd; ++k) {
    const reference_t ref = make_reference(per[k].front());
    const config_result& repeat = per[k].back();
    std::size_t ok = 0;
    for (const auto& c : repeat.cmds) ok += c.ok ? 1 : 0;
    const double serial_cpm = repeat.wall_s > 0 ? static_cast<double>(ok) / repeat.wall_s * 60 : NAN;
    for (const auto& r : per[k]) rows[k].push_back(summarize(r, ref, serial_cpm, p.all));
  }
  const auto median_of = [](const config_result& r, const char* key) {
    std::vector<double> v;
    for (const auto& c : r.cmds) {
      const double x = c.r.num(key);
      if (c.ok && std::isfinite(x)) v.push_back(x);
    }
    return krex_eval::quantile(v, 0.5);
  };
  std::ostringstream md;
  md << "# krex evaluation on " << nd << " GPU(s) at once: " << p.o.preset << " configuration\n\n";
  md << "- date " << now_utc() << "; GPUs";
  for (int d : p.o.devices) md << " " << d;
  md << "; command: `" << p.cmdline << "`\n";
  md << "- each configuration ran on every GPU at once (one runner and its workers per GPU); the "
        "reference pass ran on each GPU in turn with the node otherwise idle, and every GPU's "
        "accuracy is against its own reference; per-GPU reports: gpu<N>/summary.md\n";
  md << "- took " << fmt(took_s, "%.0f") << " s\n\n";
  md << "## Node throughput\n\n| configuration | GPUs at once | node wall s | ok | failed | node commands/min | "
        "per-GPU commands/min | context ms (median) | join ms (median) |\n|---|---|---|---|---|---|---|---|---|\n";
  krex_tools::json::writer j;
  j.begin_object().key("meta").begin_object();
  j.field("date", now_utc()).field("preset", p.o.preset).field("command", p.cmdline);
  j.key("devices").begin_array();
  for (int d : p.o.devices) j.value(d);
  j.end_array();
  j.field("took_s", took_s, digits).end_object().key("configs").begin_array();
  for (std::size_t i = 0; i < p.cfgs.size(); ++i) {
    const bool in_turn = i == 0 || nd == 1;
    std::size_t ok = 0, failed = 0;
    std::string per_cpm;
    std::vector<double> ctx, join;
    bool skipped = false;
    for (std::size_t k = 0; k < nd; ++k) {
      ok += rows[k][i].ok;
      failed += rows[k][i].failed;
      skipped = skipped || per[k][i].skipped;
      per_cpm += (k ? " / " : "") + fmt(rows[k][i].cpm, "%.1f");
      ctx.push_back(median_of(per[k][i], "t_context_ms"));
      join.push_back(median_of(per[k][i], "t_join_ms"));
    }
    const double cpm = node_wall[i] > 0 ? static_cast<double>(ok) / node_wall[i] * 60 : NAN;
    const std::size_t at_once = in_turn ? 1 : nd;
    md << "| " << p.cfgs[i].label() << " | "
       << at_once << (in_turn && nd > 1 ? " (in turn)" : "") << " | " << fmt(node_wall[i], "%.1f") << " | "
       << ok << " | " << failed << " | " << (skipped ? "skipped" : fmt(cpm, "%.1f")) << " | " << per_cpm
       << " | " << fmt(krex_eval::quantile(ctx, 0.5), "%.0f") << " | "
       << fmt(krex_eval::quantile(join, 0.5), "%.0f") << " |\n";
    j.begin_object().field("label", p.cfgs[i].label()).field("role", p.cfgs[i].role);
    j.field("gpus_at_once", at_once).field("skipped", skipped);
    j.field("node_wall_s", node_wall[i], digits).field("ok", ok).field("failed", failed);
    j.field("node_throughput_cpm", cpm, digits);
    j.key("gpus").begin_array();
    for (std::size_t k = 0; k < nd; ++k) {
      const summary_row& s = rows[k][i];
      j.begin_object().field("device", p.o.devices[k]).field("wall_s", per[k][i].wall_s, digits);
      j.field("ok", s.ok).field("failed", s.failed).field("throughput_cpm", s.cpm, digits);
      j.field("context_ms_median", ctx[k], digits).field("join_ms_median", join[k], digits);
      j.key("inflation").begin_object();
      for (const auto& b : bands)
        j.key(b.name).begin_object().field("median_pct", s.band.at(b.name).first, digits)
            .field("p95_pct", s.band.at(b.name).second, digits).field("n", s.band_n.at(b.name)).end_object();
      j.end_object();
      std::array<krex_eval::rank_agreement, krex_eval::gap_classes> gap{};
      for (const auto& kv : s.ranking)
        for (std::size_t g = 0; g < krex_eval::gap_classes; ++g) gap[g] += kv.second.by_gap[g];
      j.field("rank_pairs", s.rank.pairs).field("rank_flips", s.rank.flips);
      j.key("flips_by_gap").begin_object();
      for (std::size_t g = 0; g < krex_eval::gap_classes; ++g)
        j.key(krex_eval::gap_class_name(g)).begin_object().field("pairs", gap[g].pairs)
            .field("flips", gap[g].flips).end_object();
      j.end_object().end_object();
    }
    j.end_array().end_object();
  }
  j.end_array().end_object();
  md << "\n## Accuracy per GPU (p95 command inflation %, against each GPU's own reference)\n\n"
        "| configuration | GPU |";
  for (const auto& b : bands) md << " " << b.name << " |";
  md << " rank flips / pairs |";
  for (std::size_t g = 0; g < krex_eval::gap_classes; ++g) md << " flips " << krex_eval::gap_class_name(g) << " |";
  md << "\n|---|---|";
  for (std::size_t b = 0; b < bands.size() + 1 + krex_eval::gap_classes; ++b) md << "---|";
  md << "\n";
  for (std::size_t i = 1; i < p.cfgs.size(); ++i)
    for (std::size_t k = 0; k < nd; ++k) {
      const summary_row& s = rows[k][i];
      md << "| " << p.cfgs[i].label() << " | " << p.o.devices[k] << " |";
      for (const auto& b : bands) md << " " << fmt(s.band.at(b.name).second) << " |";
      md << " " << s.rank.flips << " / " << s.rank.pairs << " |";
      std::array<krex_eval::rank_agreement, krex_eval::gap_classes> gap{};
      for (const auto& kv : s.ranking)
        for (std::size_t g = 0; g < krex_eval::gap_classes; ++g) gap[g] += kv.second.by_gap[g];
      for (std::size_t g = 0; g < krex_eval::gap_classes; ++g) md << " " << gap[g].flips << "/" << gap[g].pairs << " |";
      md << "\n";
    }
  std::ofstream(p.o.out + "/node.json") << j.str() << "\n";
  std::ofstream(p.o.out + "/node.md") << md.str();
  std::printf("%s", md.str().c_str());
  std::printf("\nwrote %s/node.md, %s/node.json and gpu<N>/ per GPU\n", p.o.out.c_str(), p.o.out.c_str());
}

/// The --devices node run: every configuration on every listed GPU at once,
/// one runner (its own worker processes) per GPU; the reference pass on each
/// GPU in turn, the node otherwise idle. The krex workers of all GPUs share
/// the node's segment (one gate per device); lock-only mode takes a lock
/// file per GPU.
int run_devices(const eval_plan& p, int log_fd, const std::string& tag, const std::string& log_path) {
  std::fprintf(stderr, "%sout %s\n", p.text.c_str(), p.o.out.c_str());
  const std::size_t nd = p.o.devices.size();
  std::vector<std::unique_ptr<runner>> runners;
  for (int d : p.o.devices) {
    options_t od = p.o;
    od.device = d;
    runners.push_back(std::make_unique<runner>(od, log_fd, p.run0));
    runners.back()->set_names(p.o.out + "/lock-only-gpu" + std::to_string(d) + ".lock", "krex-eval-" + tag);
  }
  std::vector<std::vector<config_result>> per(nd);
  std::vector<double> node_wall;  // s: the configuration on all GPUs (the reference: in turn)
  for (std::size_t i = 0; i < p.cfgs.size(); ++i) {
    std::vector<config_result> got(nd);
    const auto t0 = clk::now();
    if (i == 0 || nd == 1) {
      for (std::size_t k = 0; k < nd; ++k) got[k] = runners[k]->run(p.cfgs[i], p.lists[i]);
    } else if (p.cfgs[i].mode == "krex-mps") {
      for (auto& g : got) {
        g.cfg = p.cfgs[i];
        g.skipped = true;
        g.skip_reason = "krex-mps is not run with --devices on several GPUs (one MPS daemon per node)";
      }
    } else {
      std::vector<std::thread> threads;
      for (std::size_t k = 0; k < nd; ++k)
        threads.emplace_back([&, k] { got[k] = runners[k]->run(p.cfgs[i], p.lists[i]); });
      for (auto& t : threads) t.join();
    }
    node_wall.push_back(ms_between(t0, clk::now()) / 1000.0);
    for (std::size_t k = 0; k < nd; ++k) {
      got[k].copies = p.copies[i];
      per[k].push_back(std::move(got[k]));
    }
  }
  for (auto& r : runners) r->stop_mps_if_running();
  const double took_s = ms_between(p.run0, clk::now()) / 1000.0;
  int rc = 0;
  for (std::size_t k = 0; k < nd; ++k) {
    const std::string dir = p.o.out + "/gpu" + std::to_string(p.o.devices[k]);
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
      cannot_start("cannot create " + dir + ": " + std::strerror(errno));
    rc = std::max(rc, write_report(p, dir, per[k], p.o.devices[k], took_s, log_path));
  }
  write_node_report(p, per, node_wall, took_s);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const auto run0 = clk::now();
  const long long run0_mono_ns = mono_ns();
  eval_plan p = parse_options(argc, argv);
  p.run0 = run0;
  p.run0_mono_ns = run0_mono_ns;
  make_lists(p);
  write_plan(p);
  if (p.o.plan_only) {
    std::printf("%s", p.text.c_str());
    for (const auto& id : p.ids) std::printf("  %s\n", id.c_str());
    return 0;
  }
  const std::string log_path = p.o.out + "/workers.log";
  const int log_fd = open_run(p.o, log_path);
  const std::string tag = std::to_string(::getpid());
  if (p.o.devices.empty()) return run_one_device(p, log_fd, tag, log_path);  // one device (--device)
  return run_devices(p, log_fd, tag, log_path);
}
