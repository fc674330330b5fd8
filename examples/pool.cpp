// SPDX-License-Identifier: Apache-2.0
// krex_pool: a benchmarking harness with a worker pool. Persistent worker
// processes each join the node once (their krex::tenant, and on a GPU their
// context, are kept) and run the commands the harness sends: check a
// candidate kernel against a reference, then time it with krex::measure
// inside a region. Here the "kernels" are two loop orders of a CPU matrix
// multiply (host backend, no GPU needed). krex options come from KREX_*
// variables (e.g. KREX_FREEZE=signal, KREX_SEGMENT=mine).
//
//     build/examples/krex_pool --workers 4 --commands 16

#include <krex/measure.hpp>
#include <krex/pool.hpp>
#include <krex/region.hpp>
#include <krex_tools/cli.hpp>
#include <krex_tools/json.hpp>

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct config {
  int workers = 4;
  int commands = 16;
  int samples = 10;
  int size = 96;
};

config parse(int argc, char** argv) {
  config c;
  krex_tools::cli::program prog(
      "krex_pool",
      "A harness that sends benchmarking commands to persistent krex worker processes\n"
      "(krex::pool): each worker joins once and times candidates inside regions.\n"
      "krex options come from KREX_* variables.");
  prog.root()
      .integer("--workers", "N", c.workers, 1, 64, "worker processes (default 4)")
      .integer("--commands", "M", c.commands, 1, 10000, "commands to send (default 16)")
      .integer("--samples", "S", c.samples, 1, 1000, "timed samples per command (default 10)")
      .integer("--size", "N", c.size, 8, 1024, "matrix size of the CPU kernel (default 96)");
  prog.parse(argc, argv);
  return c;
}

// The candidate "kernels": C = A x B in two loop orders.
void matmul(const std::string& variant, int n, const std::vector<float>& a,
            const std::vector<float>& b, std::vector<float>& c) {
  const auto at = [n](int i, int j) { return static_cast<std::size_t>(i) * n + j; };
  std::fill(c.begin(), c.end(), 0.0f);
  if (variant == "ijk") {
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) {
        float s = 0;
        for (int k = 0; k < n; ++k) s += a[at(i, k)] * b[at(k, j)];
        c[at(i, j)] = s;
      }
  } else if (variant == "ikj") {
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < n; ++k) {
        const float x = a[at(i, k)];
        for (int j = 0; j < n; ++j) c[at(i, j)] += x * b[at(k, j)];
      }
  } else {
    throw std::invalid_argument("unknown candidate '" + variant + "' (ijk or ikj)");
  }
}

// One command, run in a worker: args = {candidate, size, samples}.
std::string bench(krex::tenant& t, const std::vector<std::string>& args) {
  const std::string& variant = args.at(0);
  const int n = std::stoi(args.at(1));
  krex::measure_options mo;
  mo.samples = std::stoi(args.at(2));
  // Outside the region, concurrent with the other workers: inputs and the check.
  const auto cells = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  std::vector<float> a(cells), b(cells), c(cells), ref(cells);
  for (std::size_t i = 0; i < cells; ++i) {
    a[i] = static_cast<float>(i % 7) - 3.0f;
    b[i] = static_cast<float>(i % 5) * 0.5f;
  }
  matmul("ijk", n, a, b, ref);
  matmul(variant, n, a, b, c);
  for (std::size_t i = 0; i < cells; ++i)
    if (std::fabs(c[i] - ref[i]) > 1e-3f * (1.0f + std::fabs(ref[i])))
      throw std::runtime_error(variant + " is wrong at element " + std::to_string(i));
  // The timed loop, and only it, inside the region.
  krex::region r{t};
  const krex::measure_result m =
      krex::measure(r, [&] { t.submit([&] { matmul(variant, n, a, b, c); }); }, mo);
  r.exit();
  krex_tools::json::writer j;
  j.begin_object()
      .field("candidate", variant)
      .field("pid", static_cast<long>(::getpid()))
      .field("slot", static_cast<long>(t.slot()))
      .field("median_ms", m.median_ms, 4)
      .field("p95_ms", m.p95_ms, 4)
      .field("level", r.report().level())
      .end_object();
  return j.str();
}

}  // namespace

int main(int argc, char** argv) try {
  const config cfg = parse(argc, argv);
  krex::pool p{krex::pool_options{}.workers(cfg.workers).timeout(std::chrono::minutes(1))};
  p.handle("bench", bench);
  p.start();  // forks the workers: before this process touches a GPU
  std::printf("krex_pool: %d workers, %d commands, %d x %d matmul, %d samples each\n",
              cfg.workers, cfg.commands, cfg.size, cfg.size, cfg.samples);

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::future<krex::pool_result>> results;
  for (int i = 0; i < cfg.commands; ++i)
    results.push_back(p.submit("bench", {i % 2 == 0 ? "ijk" : "ikj", std::to_string(cfg.size),
                                         std::to_string(cfg.samples)}));
  int failed = 0;
  for (auto& f : results) {
    const krex::pool_result r = f.get();
    std::printf("#%-3llu worker %d (pid %d): queue %7.2f ms, wall %7.2f ms  %s%s\n",
                static_cast<unsigned long long>(r.id), r.worker, r.pid, r.queue_ms, r.wall_ms,
                r.ok() ? "" : "failed: ", r.ok() ? r.value.c_str() : r.error.c_str());
    failed += r.ok() ? 0 : 1;
  }
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - t0;
  std::printf("%d commands in %.2f s (%.1f/s); %d not ok\n", cfg.commands, took.count(),
              cfg.commands / took.count(), failed);
  for (const krex::pool_worker_stats& w : p.workers())
    std::printf("worker %d: pid %d, slot %u, %llu commands, %d respawns\n", w.index, w.pid, w.slot,
                static_cast<unsigned long long>(w.commands), w.respawns);
  return failed == 0 ? 0 : 1;
} catch (const krex::error& e) {
  std::fprintf(stderr, "krex_pool: %s\n", e.what());
  return 1;
}
