// SPDX-License-Identifier: Apache-2.0
// Protocol overhead on the host backend:
//   - the uncontended submit_guard (target: under 50 ns);
//   - region enter + exit versus the number of idle sibling processes
//     (0, 1, 4, 16; target with 16: under 200 us), gate + drain only and with
//     the freeze and pin steps the machine allows;
//   - the same with siblings that keep submitting (each region must wake
//     their agents to drain).
//
//   build/bench/bench_protocol --benchmark_out=protocol.json --benchmark_out_format=json

#include <krex/region.hpp>

#include <benchmark/benchmark.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace {

krex::options base_options(const std::string& segment) {
  return krex::options{}
      .segment(segment)
      .freeze(krex::freeze_method::none)
      .pin(false)
      .confine(false);
}

std::string unique_segment(const char* what) {
  static int n = 0;
  return std::string("bench-") + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(n++);
}

struct control {
  std::atomic<int> ready;
  std::atomic<int> stop;
};

/// `n` idle sibling processes joined to `opts`' segment and device, killed at scope end.
class siblings {
 public:
  /// `submitting`: each sibling submits a short piece of work every ~1 ms, so
  /// a region finds it dirty and must wake its agent to drain.
  siblings(int n, const krex::options& opts, bool submitting = false) {
    void* p = ::mmap(nullptr, sizeof(control), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                     -1, 0);
    m_ctl = new (p) control();
    for (int i = 0; i < n; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        // Never outlive the benchmark (a sibling waits for a stop flag that a
        // dead parent would never set).
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() == 1) ::_exit(1);
        {
          krex::tenant t{opts};
          m_ctl->ready.fetch_add(1);
          while (m_ctl->stop.load() == 0) {
            if (submitting) t.submit([] { benchmark::DoNotOptimize(::getpid()); });
            std::this_thread::sleep_for(std::chrono::milliseconds(submitting ? 1 : 5));
          }
        }
        ::_exit(0);
      }
      m_pids.push_back(pid);
    }
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (m_ctl->ready.load() < n && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~siblings() {
    m_ctl->stop.store(1);
    for (pid_t pid : m_pids) {
      int status = 0;
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > end) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    ::munmap(m_ctl, sizeof(control));
  }
  siblings(const siblings&) = delete;
  siblings& operator=(const siblings&) = delete;

 private:
  control* m_ctl;
  std::vector<pid_t> m_pids;
};

void BM_submit_guard_uncontended(benchmark::State& state) {
  const std::string seg = unique_segment("guard");
  {
    krex::tenant t{base_options(seg)};
    for (auto _ : state) {
      krex::submit_guard g{t};
      benchmark::ClobberMemory();
    }
  }
  krex::remove_segment(krex::options{}.segment(seg));
}
BENCHMARK(BM_submit_guard_uncontended);

void region_enter_exit(benchmark::State& state, const krex::options& opts,
                       bool submitting = false) {
  const int n = static_cast<int>(state.range(0));
  double gate = 0, drain = 0, freeze = 0, pin = 0;
  std::string level;
  {
    siblings sibs(n, opts, submitting);  // forked before this process starts its agent thread
    krex::tenant t{opts};
    for (auto _ : state) {
      krex::region r{t};
      state.PauseTiming();  // the body is not part of the overhead
      gate += static_cast<double>(r.report().gate_ns);
      drain += static_cast<double>(r.report().drain_ns);
      freeze += static_cast<double>(r.report().freeze_ns);
      pin += static_cast<double>(r.report().pin_ns);
      level = r.report().level();
      state.ResumeTiming();
    }
  }
  const double it = static_cast<double>(state.iterations());
  state.counters["gate_us"] = gate / it / 1e3;
  state.counters["drain_us"] = drain / it / 1e3;
  state.counters["freeze_us"] = freeze / it / 1e3;
  state.counters["pin_us"] = pin / it / 1e3;
  state.SetLabel(level);
  krex::remove_segment(opts);
}

void BM_region_gate_drain(benchmark::State& state) {
  region_enter_exit(state, base_options(unique_segment("region")));
}
BENCHMARK(BM_region_gate_drain)->Arg(0)->Arg(1)->Arg(4)->Arg(16)->Unit(benchmark::kMicrosecond)->UseRealTime();

// Siblings that submitted since the last region: their agents must wake and drain.
void BM_region_submitting_siblings(benchmark::State& state) {
  region_enter_exit(state, base_options(unique_segment("busy")), true);
}
BENCHMARK(BM_region_submitting_siblings)->Arg(1)->Arg(4)->Arg(16)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_region_full(benchmark::State& state) {
  region_enter_exit(state, krex::options{}.segment(unique_segment("full")));
}
BENCHMARK(BM_region_full)->Arg(0)->Arg(1)->Arg(4)->Arg(16)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
