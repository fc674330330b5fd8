// SPDX-License-Identifier: Apache-2.0
#pragma once

// The evaluation's persistent krex configurations on krex::pool (the
// product's pool, docs/POOL.md): `krex_eval_worker --pool C` is one process
// that starts a krex::pool of C workers and feeds it the driver's commands.
// Each pool worker is a tenant of the node, joined once; its handler runs
// one benchmark command, the same code a process-per-command worker runs
// (bench/eval/worker.cu's runner), on that tenant.
//
// The line protocol is the worker's: a command per line on stdin, a flat
// JSON result line per command on stdout, here in the order they end, each
// with the command's arrival number (pool_seq, from 0) and the pool's view of
// it (pool_status, pool_worker, pool_queue_ms, pool_wall_ms,
// pool_handler_ms). A command the pool could not complete (its worker died,
// ran past --timeout-s, or the pool shut down) gets a result line with ok
// false and the pool's reason. Shared by worker.cu and the GPU-free stand-in
// of the tests (bench/eval/tests/helper_eval_worker.cpp), so that the tests run the
// driver through a real krex::pool.

#include "json.hpp"

#include <krex/options.hpp>
#include <krex/pool.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <iostream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace krex_eval {

/// The options every krex worker of the eval joins with, its own tenant (a
/// process per command, or the eval's own persistent loop) or a pool
/// worker's: the device, the driver's segment, a long drain deadline and
/// lock wait (16 workers take turns), and release_on_leave (the worker
/// leaves when its last command is done, and its context's teardown then
/// runs inside the gate). KREX_* variables still apply at join.
inline krex::options worker_tenant_options(int device, const std::string& segment) {
  using namespace std::chrono_literals;
  krex::options o = krex::options{}.device(device).drain_deadline(30s).lock_wait(600s).release_on_leave(true);
  if (!segment.empty()) o.segment(segment);
  return o;
}

/// Thrown by a pool command whose worker cannot go on (a sticky CUDA error
/// poisons its context): what() is the command's result line. The pool host
/// reports that line, and the pool replaces the worker (recycle_on_error).
struct worker_broken : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// `line` (a flat JSON object) with the fields of `extra` added at its end.
inline std::string append_fields(const std::string& line, const json_object& extra) {
  const std::string e = extra.text();  // "{...}"
  const std::string inner = e.substr(1, e.size() - 2);
  const auto close = line.find_last_of('}');
  if (close == std::string::npos || inner.empty()) return line;
  const auto open = line.find('{');
  const bool empty = line.find_first_not_of(" \t", open + 1) == close;
  return line.substr(0, close) + (empty ? "" : ",") + inner + line.substr(close);
}

/// The result line of a command the pool ran (or could not run).
inline std::string pool_result_line(const std::string& cmd, long seq, const krex::pool_result& r) {
  json_object extra;
  extra.integer("pool_seq", seq).str("pool_status", krex::to_string(r.status)).num("pool_worker", r.worker);
  extra.num("pool_queue_ms", r.queue_ms).num("pool_wall_ms", r.wall_ms).num("pool_handler_ms", r.handler_ms);
  if (r.status == krex::pool_status::ok) return append_fields(r.value, extra);
  // A broken worker's own result line (worker_broken), its worker replaced.
  if (r.status == krex::pool_status::failed && !r.error.empty() && r.error.front() == '{')
    return append_fields(r.error, extra);
  json_object o;
  o.str("id", cmd).boolean("ok", false);
  if (r.pid > 0) o.num("pid", r.pid);
  std::string why = r.error;
  if (r.status == krex::pool_status::crashed)
    why = "the pool worker died without a result (" + r.error + ")";
  else if (r.status == krex::pool_status::timed_out)
    why = "the pool worker passed --timeout-s and was killed (" + r.error + ")";
  else
    why = std::string(krex::to_string(r.status)) + ": " + r.error;
  o.str("error", why);
  return append_fields(o.text(), extra);
}

struct pool_host_options {
  int workers = 1;
  krex::options tenant;
  double timeout_s = 300;  ///< per command, from when a worker gets it (krex::pool_options::timeout)
};

/// A command in a pool worker: the tenant the worker joined with and the
/// command line; returns the result line (or throws worker_broken).
using pool_command = std::function<std::string(krex::tenant&, const std::string&)>;

/// Runs the pool host until `in` ends: starts the pool (before anything in
/// this process touches the GPU: workers are forked), submits each command
/// line as it arrives, and writes each result line to `out` as it ends.
/// Returns 0, or 1 when the pool cannot start (its error on stderr).
inline int pool_host_main(const pool_host_options& o, pool_command run, std::istream& in, std::ostream& out) {
  using namespace std::chrono;
  krex::pool p{krex::pool_options{}
                   .workers(o.workers)
                   .tenant(o.tenant)
                   .timeout(milliseconds(static_cast<long long>(o.timeout_s * 1000)))
                   .recycle_on_error(true)
                   .start_timeout(seconds(120))};
  // A worker's stdout is the driver's pipe: nothing but result lines may go
  // there, so a worker's own output goes to stderr (workers.log).
  p.on_worker_start([](krex::tenant&) {
    const int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null >= 0) {
      ::dup2(null, 0);
      ::close(null);
    }
    ::dup2(2, 1);
  });
  p.handle("command", [run](krex::tenant& t, const std::vector<std::string>& a) { return run(t, a.at(0)); });
  try {
    p.start();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "krex_eval_worker --pool: %s\n", e.what());
    return 1;
  }
  std::mutex mu;
  std::vector<std::thread> waiters;
  long seq = 0;
  for (std::string cmd; std::getline(in, cmd);) {
    if (cmd.empty()) continue;
    const long s = seq++;
    std::future<krex::pool_result> f;
    try {
      f = p.submit("command", {cmd});
    } catch (const std::exception& e) {  // no worker left
      krex::pool_result r;
      r.status = krex::pool_status::cancelled;
      r.error = e.what();
      std::lock_guard<std::mutex> lk(mu);
      out << pool_result_line(cmd, s, r) << std::endl;
      continue;
    }
    waiters.emplace_back([&mu, &out, cmd, s, f = std::move(f)]() mutable {
      const krex::pool_result r = f.get();
      const std::string line = pool_result_line(cmd, s, r);
      std::lock_guard<std::mutex> lk(mu);
      out << line << std::endl;  // one line per command, flushed
    });
  }
  for (auto& w : waiters) w.join();
  p.shutdown();
  return 0;
}

}  // namespace krex_eval
