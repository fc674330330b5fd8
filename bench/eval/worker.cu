// SPDX-License-Identifier: Apache-2.0
// krex_eval_worker: runs benchmark commands the way an optimizing agent's
// harness does, one JSON line of results per command. Started by krex_eval
// (the driver); a person does not normally run it.
//
//   krex_eval_worker --mode none|lock|krex [--lock PATH] [--segment NAME] [--device N]
//                    [--placements K] [--placement-budget-mb MB] [--pool C [--timeout-s N]]
//   krex_eval_worker --compile-only SM      compile every candidate for sm_SM (e.g. 90)
//                                           with NVRTC, no GPU needed; exit 1 on an error
//
// Reads commands, one per line, from stdin until EOF: a candidate id
// (bench/eval/candidates.hpp) with an optional timing, id[@sync][@loop<ms>]
// (@sync: synchronize after every sample; @loop: a timed loop of about <ms>).
// Per command: compile the candidate with NVRTC, generate inputs on
// the GPU, check its output against a reference (cuBLAS for GEMM, a trusted
// kernel otherwise), then time it with krex::measure inside
//   none: nothing (unprotected sharing)
//   lock: an exclusive flock(2) on PATH (lock-only sharing)
//   krex: a krex::region of a tenant joined once per process (automatic
//         gating: every launch of this process, cuBLAS's included, is gated).
// The CUDA context and (krex) the tenant are created at the first command and
// reused for the next ones: a process per command is a worker given one id.
// Each phase is timed, and the command's start and its timed loop's start are
// stamped with CLOCK_MONOTONIC (mono_start_ns, mono_critical_ns: the driver's
// clock too); the result line goes to stdout, diagnostics to stderr.
//
// Placements (--placements K, default 1; --placement-budget-mb MB, default 0:
// none): every command has K copies of its inputs
// (krex::cuda::placement_buffers, each copy its own allocations). With K > 1
// a worker keeps its copies from command to command and reuses them when the
// next command asks as many copies of as many buffers, each at least as
// large, within its budget (else frees them, then allocates anew): allocating
// them afresh cost every command ~330 ms on the H200. KREX_EVAL_FRESH_PLACEMENTS=1
// allocates them afresh for every command. It fills
// every copy alike, checks copy 0, and times the candidate with krex::measure
// over them, sample i on copy i % K (measure_options::placements), with the
// plan's warm-up calls only (measure_options::warm_placements off: the fill
// has touched every copy, and K warm-up calls of a 5 ms gemm were most of
// what K = 8 added to a region; KREX_EVAL_WARM_PLACEMENTS=1 warms every
// copy), its
// samples rounded up to a multiple of K where that adds at most 5%. K is the largest that fits the
// budget and the samples (bench/eval/plan.hpp's placements_within); the
// result line has placements, placements_asked, placement_bytes (all K
// copies, kept ones as allocated), placements_reused, placement_budget_bytes,
// placement_spread, placement_median_ms and each sample's copy (sample_placement).
//
// --pool C (mode krex): the persistent shape on krex::pool
// (bench/eval/pool_host.hpp): this process starts a pool of C workers, each a
// tenant joined once, and feeds them the commands from stdin; each worker
// runs them with the code below on its pool tenant, and a result line per
// command comes back on stdout as it ends (with pool_seq, the command's
// arrival number). A worker whose context broke is replaced by the pool;
// --timeout-s is the pool's per-command timeout.
//
// Where the buffers lie (issue 19's placement question), every mode: the
// device address (an integer) of each buffer the command allocates, named by
// its role in the kernel (axpby x_addr, y_addr, z_addr; gemm a_addr, b_addr,
// c_addr; reduce x_addr, out_addr; softmax x_addr, y_addr; the check's
// reference ref_addr), and of krex::measure's L2 flush buffer (flush_addr,
// flush_bytes; read from krex's per-process measure scratch, a detail of
// krex/gpu/measure.hpp). The device state, krex mode only (the region
// report, NVML): at entry sm_mhz, mem_mhz, power_w, temp_c, clock_reasons
// (NVML clocks-event reason bits), at exit the same with an exit_ prefix;
// the quiet step's first and last probe ratios (quiet_ratio,
// quiet_last_ratio). The line stays flat: krex_eval keeps it as it is.
//
// KREX_EVAL_SPACER_MB=M (in krex_eval's environment, every worker inherits it): before a
// command allocates its inputs it allocates a spacer of a random size, 0 to
// M MB in 2 MB steps, and frees it when the command ends, so that the inputs
// land elsewhere in device memory than a fresh process's first allocations
// would (spacer_mb in the result line). Unset or 0: no spacer.

#include "candidates.hpp"
#include "json.hpp"
#include "plan.hpp"
#include "pool_host.hpp"
#include "rtc_kernels.hpp"

#include <krex/measure.hpp>
#include <krex/region.hpp>

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvrtc.h>

#include <fcntl.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;
double ms_since(clk::time_point t) {
  return std::chrono::duration<double, std::milli>(clk::now() - t).count();
}

/// CLOCK_MONOTONIC in ns, the clock the driver stamps its run start with.
long long mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

struct failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw failure(std::string(what) + ": " + cudaGetErrorString(e));
}
void ck(CUresult e, const char* what) {
  if (e != CUDA_SUCCESS) {
    const char* s = nullptr;
    cuGetErrorString(e, &s);
    throw failure(std::string(what) + ": " + (s ? s : "CUresult " + std::to_string(e)));
  }
}
void ck(nvrtcResult e, const char* what) {
  if (e != NVRTC_SUCCESS) throw failure(std::string(what) + ": " + nvrtcGetErrorString(e));
}
void ck(cublasStatus_t e, const char* what) {
  if (e != CUBLAS_STATUS_SUCCESS) throw failure(std::string(what) + ": cublas status " + std::to_string(e));
}

// ------------------------------------------------------------ trusted kernels
__global__ void fill_uniform(float* p, long long n, unsigned seed, float lo, float hi) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    unsigned long long h = (unsigned long long)i * 0x9E3779B97F4A7C15ull + seed;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    p[i] = lo + (hi - lo) * (float)(h >> 40) * (1.0f / 16777216.0f);
  }
}

__global__ void reduce_ref(const float* x, long long n, double* sum, double* abs_sum) {
  double s = 0, a = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    s += x[i];
    a += fabs((double)x[i]);
  }
  atomicAdd(sum, s);
  atomicAdd(abs_sum, a);
}

__global__ void axpby_ref(const float* x, const float* y, float* z, float a, float b, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    z[i] = a * x[i] + b * y[i];
}

__global__ void softmax_ref(const float* x, float* y, int rows, int cols) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  const float* xr = x + (long long)r * cols;
  double m = -1e300, s = 0;
  for (int c = 0; c < cols; ++c) m = fmax(m, (double)xr[c]);
  for (int c = 0; c < cols; ++c) s += exp((double)xr[c] - m);
  for (int c = 0; c < cols; ++c) y[(long long)r * cols + c] = (float)(exp((double)xr[c] - m) / s);
}

/// out[0] = max |a - b|, out[1] = max |b| (non-negative floats compare as ints).
__global__ void max_diff(const float* a, const float* b, long long n, unsigned* out) {
  float d = 0, m = 0;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const float e = fabsf(a[i] - b[i]);
    if (!(e <= d)) d = (e == e) ? e : 3.0e38f;  // NaN counts as a huge error
    m = fmaxf(m, fabsf(b[i]));
  }
  atomicMax(&out[0], __float_as_uint(d));
  atomicMax(&out[1], __float_as_uint(m));
}

// ------------------------------------------------------------------- helpers
struct module {
  CUmodule m = nullptr;
  CUfunction f = nullptr;
  ~module() {
    if (m != nullptr) cuModuleUnload(m);
  }
};

/// NVRTC: compile `src` with `defines` to a cubin for sm_<cc_major><cc_minor>.
std::vector<char> compile_cubin(const char* src, const std::vector<std::string>& defines,
                                int cc_major, int cc_minor) {
  nvrtcProgram prog = nullptr;
  ck(nvrtcCreateProgram(&prog, src, "candidate.cu", 0, nullptr, nullptr), "nvrtcCreateProgram");
  std::vector<std::string> opts = defines;
  opts.push_back("--gpu-architecture=sm_" + std::to_string(cc_major) + std::to_string(cc_minor));
  opts.push_back("-std=c++17");
  opts.push_back("-default-device");
#ifdef KREX_EVAL_CUDA_INCLUDE  // the toolkit's headers (CUB) for candidates that include them
  opts.push_back("--include-path=" KREX_EVAL_CUDA_INCLUDE "/cccl");
  opts.push_back("--include-path=" KREX_EVAL_CUDA_INCLUDE);
#endif
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  const nvrtcResult r = nvrtcCompileProgram(prog, static_cast<int>(argv.size()), argv.data());
  if (r != NVRTC_SUCCESS) {
    std::size_t n = 0;
    nvrtcGetProgramLogSize(prog, &n);
    std::string log(n, '\0');
    nvrtcGetProgramLog(prog, log.data());
    nvrtcDestroyProgram(&prog);
    throw failure(std::string("nvrtcCompileProgram: ") + nvrtcGetErrorString(r) + "\n" + log);
  }
  std::size_t n = 0;
  ck(nvrtcGetCUBINSize(prog, &n), "nvrtcGetCUBINSize");
  std::vector<char> cubin(n);
  ck(nvrtcGetCUBIN(prog, cubin.data()), "nvrtcGetCUBIN");
  nvrtcDestroyProgram(&prog);
  return cubin;
}

/// The source and -D options of a candidate.
std::pair<const char*, std::vector<std::string>> source_of(const krex_eval::candidate& c) {
  using krex_eval::family;
  const std::string a = std::to_string(c.p0), b = std::to_string(c.p1);
  switch (c.fam) {
    case family::gemm: return {krex_eval::gemm_src, {"-DKX_T=" + a, "-DKX_TM=" + b}};
    case family::reduce: return {krex_eval::reduce_src, {"-DKX_BS=" + a, "-DKX_VEC=" + b}};
    case family::axpby: return {krex_eval::axpby_src, {"-DKX_VEC=" + a}};
    case family::softmax: return {krex_eval::softmax_src, {"-DKX_BPR=" + a}};
  }
  throw failure("unknown family");
}

struct lock_file {  // the lock-only baseline: flock(2) around the timed loop
  int fd = -1;
  explicit lock_file(const std::string& path) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) throw failure("open " + path + " failed");
    while (::flock(fd, LOCK_EX) != 0)
      if (errno != EINTR) throw failure("flock failed");
  }
  ~lock_file() {
    if (fd >= 0) ::close(fd);  // releases the lock
  }
};

struct worker_args {
  std::string mode = "none";
  std::string lock_path;
  std::string segment;
  int device = 0;
  int placements = 1;           // --placements: copies of each command's inputs
  long placement_budget_mb = 0;  // --placement-budget-mb: all K copies of one command; 0: none
  int pool = 0;                 // --pool C: a krex::pool of C workers (mode krex)
  double timeout_s = 300;       // --timeout-s: the pool's per-command timeout
};

/// One prepared command: buffers, module, launch closure and checker.
struct prepared {
  std::vector<std::unique_ptr<krex::detail::device_buffer>> bufs;  // the check's reference
  std::unique_ptr<krex::cuda::placement_buffers> owned;  // K copies allocated for this command
  krex::cuda::placement_buffers* in = nullptr;            // K copies of the inputs (owned or kept)
  bool reused = false;                                    // `in` is the worker's kept copies
  std::vector<std::array<CUdeviceptr, 3>> place;                   // each copy's kernel pointers
  std::vector<std::pair<std::string, unsigned long long>> addrs;  // (role, device address)
  module mod;
  std::vector<void*> params;
  // parameter storage (kernel params point here)
  CUdeviceptr pa = 0, pb = 0, pc = 0;
  long long n = 0;
  int m32 = 0, n32 = 0, k32 = 0;
  float a = 0.75f, b = -0.5f;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  void launch(cudaStream_t s) {
    ck(cuLaunchKernel(mod.f, grid[0], grid[1], grid[2], block[0], block[1], block[2], 0,
                      reinterpret_cast<CUstream>(s), params.data(), nullptr),
       "cuLaunchKernel");
  }
  /// The kernel's pointers to copy k of the inputs (params point at pa, pb, pc).
  void use(int k) {
    const auto& q = place[static_cast<std::size_t>(k)];
    pa = q[0], pb = q[1], pc = q[2];
  }
  void launch_on(cudaStream_t s, int k) {
    use(k);
    launch(s);
  }
};

/// KREX_EVAL_SPACER_MB's spacer: device memory of a random size held for
/// one command (see the header).
class spacer {
 public:
  spacer() {
    const char* v = std::getenv("KREX_EVAL_SPACER_MB");
    if (v == nullptr || *v == '\0') return;
    char* end = nullptr;
    const long max_mb = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || max_mb < 0 || max_mb > (1L << 20))
      throw failure(std::string("KREX_EVAL_SPACER_MB='") + v + "': expected an integer 0..1048576 (MB)");
    static std::mt19937_64 rng(static_cast<std::uint64_t>(mono_ns()) ^ static_cast<std::uint64_t>(::getpid()));
    m_mb = 2 * static_cast<long>(rng() % static_cast<std::uint64_t>(max_mb / 2 + 1));
    if (m_mb > 0) ck(cudaMalloc(&m_p, static_cast<std::size_t>(m_mb) << 20), "cudaMalloc (spacer)");
  }
  ~spacer() {
    if (m_p != nullptr) (void)cudaFree(m_p);
  }
  spacer(const spacer&) = delete;
  spacer& operator=(const spacer&) = delete;
  long mb() const noexcept { return m_mb; }

 private:
  void* m_p = nullptr;
  long m_mb = 0;
};

class runner {
 public:
  explicit runner(worker_args a) : m_args(std::move(a)), m_all(krex_eval::all_candidates()) {}
  ~runner() {
    if (m_cublas != nullptr) cublasDestroy(m_cublas);
    if (m_stream != nullptr) cudaStreamDestroy(m_stream);
  }
  runner(const runner&) = delete;
  runner& operator=(const runner&) = delete;

  /// Runs one command; `pool_tenant`: the krex::pool worker's tenant (--pool),
  /// which the command's region uses instead of a tenant of this runner's own.
  std::string run(const std::string& cmd, krex::tenant* pool_tenant = nullptr) {
    if (pool_tenant != nullptr) m_pool_tenant = pool_tenant;
    krex_eval::json_object o;
    o.str("id", cmd).str("mode", m_args.mode).num("pid", ::getpid());
    o.integer("mono_start_ns", mono_ns());
    const auto t_cmd = clk::now();
    try {
      std::string id, why;
      krex_eval::timing timing;
      if (!krex_eval::parse_command(cmd, &id, &timing, &why)) throw failure(why);
      o.str("candidate", id).str("timing", timing.name());
      const krex_eval::candidate* c = krex_eval::find_candidate(m_all, id);
      if (c == nullptr) throw failure("unknown candidate id '" + id + "'");
      o.str("family", krex_eval::to_string(c->fam)).str("variant", c->variant).str("set", c->set);
      o.num("set_pos", c->set_pos);
      o.boolean("first_in_process", m_first);
      start(o);  // join (krex) and create the context: first command only
      m_first = false;

      prepared p;
      auto t = clk::now();
      compile_candidate(*c, &p);
      o.num("t_compile_ms", ms_since(t));

      const krex_eval::measure_plan plan = krex_eval::plan_for(*c, timing);
      // Placements: as many copies as asked that fit the budget and the samples.
      const long long budget = static_cast<long long>(m_args.placement_budget_mb) << 20;
      const int k = krex_eval::placements_within(m_args.placements, krex_eval::input_bytes(*c), budget, plan.samples);
      o.num("placements", k).num("placements_asked", m_args.placements).integer("placement_budget_bytes", budget);

      const spacer sp;  // held until the command ends
      o.num("spacer_mb", static_cast<double>(sp.mb()));
      t = clk::now();
      make_inputs(*c, &p, k, budget);
      ck(cudaStreamSynchronize(m_stream), "inputs");
      o.num("t_inputs_ms", ms_since(t)).boolean("placements_reused", p.reused);

      t = clk::now();
      double err = 0, tol = 0;
      check(*c, &p, &err, &tol);
      o.num("t_check_ms", ms_since(t)).num("max_err", err).num("tol", tol);
      if (!(err <= tol)) throw failure("wrong result: error " + std::to_string(err) + " > " + std::to_string(tol));

      krex::measure_options mo;
      mo.samples = krex_eval::samples_for_placements(plan.samples, k);
      p.in->configure(mo);  // mo.placements = k, mo.placement_bytes = all k copies
      mo.warmup = plan.warmup;
      mo.warm_placements = m_warm_placements;
      mo.warmup_time = std::chrono::microseconds(static_cast<long long>(plan.warmup_ms * 1000));
      mo.sync_each = plan.sync_each;
      o.num("warmup_ms", plan.warmup_ms).boolean("sync_each", plan.sync_each);
      o.num("warmup_calls", krex::detail::warmup_calls(mo));
      const auto fn = [&](krex::placement pl) { p.launch_on(m_stream, pl.index); };
      // The flush buffer and events, outside the region / lock (every mode alike).
      t = clk::now();
      krex::prepare_measure(mo);
      o.num("t_prepare_ms", ms_since(t));
      for (const auto& a : p.addrs) o.integer(a.first + "_addr", static_cast<long long>(a.second));
      record_flush(o, mo);
      krex::measure_result res;
      t = clk::now();
      if (m_args.mode == "krex") {
        krex::region r{tenant()};
        const double wait = ms_since(t);
        o.integer("mono_critical_ns", mono_ns());
        const auto tb = clk::now();
        res = krex::measure(r, m_stream, fn, mo);
        const double body = ms_since(tb);
        const auto te = clk::now();
        r.exit();
        const krex::region_report& rep = r.report();
        o.num("t_wait_ms", wait).num("t_critical_ms", body).num("t_exit_ms", ms_since(te));
        o.num("lock_ms", rep.lock_ns / 1e6).num("gate_ms", rep.gate_ns / 1e6);
        o.num("drain_ms", rep.drain_ns / 1e6).num("freeze_ms", rep.freeze_ns / 1e6);
        o.num("pin_ms", rep.pin_ns / 1e6).num("region_exit_ms", rep.exit_ns / 1e6);
        o.num("siblings", rep.siblings_seen).num("frozen", rep.frozen_pids.size());
        o.str("level", rep.level()).str("gating", rep.gating);
        o.num("quiet_ms", rep.quiet_ns / 1e6).num("quiet_wait_ms", rep.quiet_wait_ns / 1e6);
        o.num("quiet_busy", rep.quiet_checked && !rep.quiet ? 1 : 0).num("quiet_ratio", rep.quiet_first_ratio);
        o.num("quiet_last_ratio", rep.quiet_last_ratio);
        record_clocks(o, "", rep.clocks_entry);
        record_clocks(o, "exit_", rep.clocks_exit);
        if (rep.level().find("drain") == std::string::npos || rep.contended || rep.lease_lost)
          o.boolean("degraded", true);
      } else if (m_args.mode == "lock") {
        lock_file l{m_args.lock_path};
        const double wait = ms_since(t);
        o.integer("mono_critical_ns", mono_ns());
        const auto tb = clk::now();
        res = krex::measure(krex::unprotected, m_stream, fn, mo);  // protected by `l` alone
        o.num("t_wait_ms", wait).num("t_critical_ms", ms_since(tb)).num("lock_ms", wait);
        o.str("level", "flock");
      } else {
        o.integer("mono_critical_ns", mono_ns());
        res = krex::measure(krex::unprotected, m_stream, fn, mo);
        o.num("t_wait_ms", 0).num("t_critical_ms", ms_since(t)).str("level", "none");
      }
      ck(cudaGetLastError(), "candidate launch");
      o.num("median_ms", res.median_ms).num("p95_ms", res.p95_ms).num("min_ms", res.min_ms);
      o.num("throttled_samples", static_cast<double>(res.throttled.size()));
      o.num("samples", static_cast<double>(res.samples_ms.size())).str("method", res.method);
      o.nums("samples_ms", res.samples_ms);
      o.integer("placement_bytes", static_cast<long long>(res.placement_bytes));
      o.num("placement_spread", res.placement_spread).nums("placement_median_ms", res.placement_median_ms);
      o.nums("sample_placement", std::vector<double>(res.placement.begin(), res.placement.end()));
      o.boolean("ok", true);
    } catch (const std::exception& e) {
      o.boolean("ok", false).str("error", e.what());
      // A sticky CUDA error poisons the context: this process cannot go on.
      if (cudaPeekAtLastError() != cudaSuccess) m_broken = true;
    }
    o.num("t_cmd_ms", ms_since(t_cmd));
    return o.text();
  }
  bool broken() const { return m_broken; }

 private:
  krex::tenant& tenant() { return m_pool_tenant != nullptr ? *m_pool_tenant : *m_tenant; }

  void start(krex_eval::json_object& o) {
    if (m_stream != nullptr) return;
    if (m_args.mode == "krex") {
      const auto t = clk::now();
      if (m_pool_tenant != nullptr) {
        // A pool worker: its tenant joined when the pool started it, before
        // any command; its join time is reported with its first command.
        o.num("t_join_ms", m_pool_tenant->join_report().total_ns / 1e6).boolean("joined_at_pool_start", true);
      } else {
        // release_on_leave: the worker leaves when its last command is done
        // (stdin closed), and its context's teardown then runs inside the gate.
        m_tenant = std::make_unique<krex::tenant>(krex_eval::worker_tenant_options(m_args.device, m_args.segment));
        o.num("t_join_ms", ms_since(t));
      }
      const krex::join_timings& j = tenant().join_report();
      o.num("join_driver_ms", j.driver_ns / 1e6).num("join_segment_ms", j.segment_ns / 1e6);
      o.num("join_slot_ms", j.slot_ns / 1e6).num("join_freeze_ms", j.freeze_ns / 1e6);
      o.num("join_recover_ms", j.recover_ns / 1e6).num("join_sweep_ms", j.sweep_ns / 1e6);
      o.num("join_topology_ms", j.topology_ns / 1e6).num("join_agent_ms", j.agent_ns / 1e6);
      o.num("join_gating_ms", j.gating_ns / 1e6).num("join_guardian_ms", j.guardian_ns / 1e6);
      o.boolean("join_swept", j.swept);
    }
    const auto t = clk::now();
    ck(cudaSetDevice(m_args.device), "cudaSetDevice");
    ck(cudaFree(nullptr), "context creation (cudaFree(0))");
    o.num("t_context_ms", ms_since(t));
    ck(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking), "cudaStreamCreate");
    ck(cudaDeviceGetAttribute(&m_cc_major, cudaDevAttrComputeCapabilityMajor, m_args.device), "cc");
    ck(cudaDeviceGetAttribute(&m_cc_minor, cudaDevAttrComputeCapabilityMinor, m_args.device), "cc");
    ck(cudaDeviceGetAttribute(&m_sms, cudaDevAttrMultiProcessorCount, m_args.device), "sms");
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, m_args.device) == cudaSuccess) m_gpu = prop.name;
    o.str("gpu", m_gpu);
  }

  void compile_candidate(const krex_eval::candidate& c, prepared* p) {
    const auto src = source_of(c);
    const std::vector<char> cubin = compile_cubin(src.first, src.second, m_cc_major, m_cc_minor);
    ck(cuModuleLoadData(&p->mod.m, cubin.data()), "cuModuleLoadData");
    ck(cuModuleGetFunction(&p->mod.f, p->mod.m, "candidate"), "cuModuleGetFunction");
  }

  float* alloc(prepared* p, std::size_t floats, const char* role) {
    p->bufs.push_back(std::make_unique<krex::detail::device_buffer>(floats * sizeof(float)));
    void* d = p->bufs.back()->get();
    p->addrs.emplace_back(role, reinterpret_cast<std::uintptr_t>(d));
    return static_cast<float*>(d);
  }

  /// The region report's clocks (NVML) as flat fields, `prefix` "" (entry) or
  /// "exit_"; nothing when they could not be read.
  static void record_clocks(krex_eval::json_object& o, const std::string& prefix,
                            const krex::device_clocks& c) {
    if (!c.valid) return;
    o.num(prefix + "sm_mhz", c.sm_mhz).num(prefix + "mem_mhz", c.mem_mhz);
    o.num(prefix + "power_w", c.power_mw / 1000.0).num(prefix + "temp_c", c.temp_c);
    o.integer(prefix + "clock_reasons", static_cast<long long>(c.reasons));
  }

  /// krex::measure's L2 flush buffer for `mo` (flush_addr, flush_bytes): the
  /// per-process scratch that prepare_measure just filled, looked at through
  /// its lease (krex/gpu/measure.hpp, a krex detail: nothing is allocated
  /// here, the lease only names what the next measure will use). Nothing when
  /// the scratch is not at hand or there is no flush.
  static void record_flush(krex_eval::json_object& o, const krex::measure_options& mo) {
    using scratch = krex::detail::gpu::measure_scratch<krex::detail::cuda_api>;
    const std::size_t bytes = mo.cold_l2 ? krex::detail::flush_size(mo.flush_bytes) : 0;
    scratch::lease l;
    const std::size_t events = 2 * static_cast<std::size_t>(mo.samples);
    if (bytes == 0 || !scratch::get().take(bytes, events, l) || l.flush == nullptr) return;
    o.integer("flush_addr", static_cast<long long>(reinterpret_cast<std::uintptr_t>(l.flush)));
    o.integer("flush_bytes", static_cast<long long>(l.flush_bytes));
  }
  void fill(float* d, long long n, unsigned seed, float lo, float hi) {
    fill_uniform<<<m_sms * 8, 256, 0, m_stream>>>(d, n, seed, lo, hi);
    ck(cudaGetLastError(), "fill_uniform");
  }

  /// The K copies of a command's buffers (`bytes`, one copy's): the worker's
  /// kept copies when they fit (K > 1: as many copies of as many buffers, each
  /// at least as large, all within `budget`). Otherwise the kept ones are freed
  /// first, so that a worker never holds more than one command's copies, and
  /// new ones are allocated: kept (K > 1), or with K = 1 (or
  /// KREX_EVAL_FRESH_PLACEMENTS=1) for this command alone, into `owned`.
  krex::cuda::placement_buffers* placement_copies(int k, const std::vector<std::size_t>& bytes,
                                                  long long budget,
                                                  std::unique_ptr<krex::cuda::placement_buffers>* owned,
                                                  bool* reused) {
    const std::size_t cap = k > 1 ? static_cast<std::size_t>(budget) : 0;
    *reused = m_kept != nullptr &&
              krex_eval::placements_reusable(m_kept->count(), m_kept_sizes,
                                             static_cast<std::int64_t>(m_kept->bytes()), k, bytes, budget);
    if (*reused) return m_kept.get();
    m_kept.reset();
    m_kept_sizes.clear();
    if (k == 1 || m_fresh_placements) {
      *owned = std::make_unique<krex::cuda::placement_buffers>(k, bytes, cap);
      return owned->get();
    }
    m_kept = std::make_unique<krex::cuda::placement_buffers>(k, bytes, cap);
    m_kept_sizes = bytes;
    return m_kept.get();
  }

  /// K copies of the command's inputs (placement_buffers: each buffer of each
  /// copy its own allocation; copy 0 allocated first, as the inputs alone
  /// were), every copy filled alike; the kernel's pointers set to copy 0.
  /// `budget`: the bytes all K copies may take (k > 1; k was chosen to fit).
  void make_inputs(const krex_eval::candidate& c, prepared* p, int k, long long budget) {
    using krex_eval::family;
    const auto grid_stride = [&](long long work, unsigned bs) {
      const long long want = (work + bs - 1) / bs;
      return static_cast<unsigned>(std::max<long long>(1, std::min<long long>(want, m_sms * 16LL)));
    };
    // The buffers of one copy, in kernel-parameter order, and their roles.
    std::vector<std::pair<const char*, long long>> set;  // (role, floats)
    switch (c.fam) {
      case family::gemm: set = {{"a", c.m * c.k}, {"b", c.k * c.n}, {"c", c.m * c.n}}; break;
      case family::reduce: set = {{"x", c.n}, {"out", 1}}; break;
      case family::axpby: set = {{"x", c.n}, {"y", c.n}, {"z", c.n}}; break;
      case family::softmax: set = {{"x", c.m * c.n}, {"y", c.m * c.n}}; break;
    }
    std::vector<std::size_t> bytes;
    for (const auto& b : set) bytes.push_back(static_cast<std::size_t>(b.second) * sizeof(float));
    p->in = placement_copies(k, bytes, budget, &p->owned, &p->reused);
    p->place.assign(static_cast<std::size_t>(k), {0, 0, 0});
    for (int q = 0; q < k; ++q) {
      for (std::size_t b = 0; b < set.size(); ++b)
        p->place[static_cast<std::size_t>(q)][b] = reinterpret_cast<CUdeviceptr>(p->in->data(q, b));
      const auto f = [&](std::size_t b) { return p->in->get<float>(q, b); };
      switch (c.fam) {
        case family::gemm:
          fill(f(0), c.m * c.k, 1, -1, 1);
          fill(f(1), c.k * c.n, 2, -1, 1);
          break;
        case family::reduce:
          fill(f(0), c.n, 3, 0, 1);
          ck(cudaMemsetAsync(f(1), 0, sizeof(float), m_stream), "memset");  // check() sums into it once
          break;
        case family::axpby:
          fill(f(0), c.n, 4, -1, 1);
          fill(f(1), c.n, 5, -1, 1);
          break;
        case family::softmax: fill(f(0), c.m * c.n, 6, -4, 4); break;
      }
    }
    for (std::size_t b = 0; b < set.size(); ++b)  // where copy 0 lies
      p->addrs.emplace_back(set[b].first, static_cast<unsigned long long>(p->place[0][b]));
    p->use(0);
    switch (c.fam) {
      case family::gemm: {
        p->m32 = static_cast<int>(c.m), p->n32 = static_cast<int>(c.n), p->k32 = static_cast<int>(c.k);
        p->params = {&p->pa, &p->pb, &p->pc, &p->m32, &p->n32, &p->k32};
        p->grid[0] = static_cast<unsigned>((c.n + c.p0 - 1) / c.p0);
        p->grid[1] = static_cast<unsigned>((c.m + c.p0 - 1) / c.p0);
        p->block[0] = static_cast<unsigned>(c.p0);
        p->block[1] = static_cast<unsigned>(c.p0 / c.p1);
        break;
      }
      case family::reduce: {
        p->n = c.n;
        p->params = {&p->pa, &p->pb, &p->n};
        p->grid[0] = std::min<unsigned>(grid_stride(c.n / c.p1, c.p0), m_sms * 8);
        p->block[0] = static_cast<unsigned>(c.p0);
        break;
      }
      case family::axpby: {
        p->n = c.n;
        p->params = {&p->pa, &p->pb, &p->pc, &p->a, &p->b, &p->n};
        p->grid[0] = grid_stride(c.n / c.p0, 256);
        p->block[0] = 256;
        break;
      }
      case family::softmax: {
        p->m32 = static_cast<int>(c.m), p->n32 = static_cast<int>(c.n);
        p->params = {&p->pa, &p->pb, &p->m32, &p->n32};
        p->grid[0] = c.p0 != 0 ? static_cast<unsigned>(c.m) : static_cast<unsigned>((c.m + 7) / 8);
        p->block[0] = 256;
        break;
      }
    }
  }

  /// Runs the candidate once and compares it with the reference.
  void check(const krex_eval::candidate& c, prepared* p, double* err, double* tol) {
    using krex_eval::family;
    p->launch(m_stream);
    krex::detail::device_buffer scratch(2 * sizeof(unsigned) + 2 * sizeof(double));
    ck(cudaMemsetAsync(scratch.get(), 0, scratch.size(), m_stream), "memset");
    auto* u = static_cast<unsigned*>(scratch.get());
    auto* dd = reinterpret_cast<double*>(static_cast<char*>(scratch.get()) + 8);
    const auto compare = [&](const float* got, const float* ref, long long n) {
      max_diff<<<m_sms * 8, 256, 0, m_stream>>>(got, ref, n, u);
      unsigned h[2] = {0, 0};
      ck(cudaMemcpyAsync(h, u, sizeof h, cudaMemcpyDeviceToHost, m_stream), "memcpy");
      ck(cudaStreamSynchronize(m_stream), "check");
      float f[2];
      std::memcpy(f, h, sizeof f);
      return std::make_pair(double(f[0]), double(f[1]));
    };
    switch (c.fam) {
      case family::gemm: {
        if (m_cublas == nullptr) {
          ck(cublasCreate(&m_cublas), "cublasCreate");
          ck(cublasSetStream(m_cublas, m_stream), "cublasSetStream");
        }
        float* ref = alloc(p, c.m * c.n, "ref");
        const float one = 1, zero = 0;
        // Row-major C = A B is column-major C^T = B^T A^T.
        ck(cublasSgemm(m_cublas, CUBLAS_OP_N, CUBLAS_OP_N, p->n32, p->m32, p->k32, &one,
                       reinterpret_cast<const float*>(p->pb), p->n32,
                       reinterpret_cast<const float*>(p->pa), p->k32, &zero, ref, p->n32),
           "cublasSgemm");
        const auto r = compare(reinterpret_cast<float*>(p->pc), ref, c.m * c.n);
        *err = r.first;
        *tol = 1e-4 * r.second + 1e-4;
        break;
      }
      case family::reduce: {
        reduce_ref<<<m_sms * 8, 256, 0, m_stream>>>(reinterpret_cast<float*>(p->pa), c.n, dd, dd + 1);
        float got = 0;
        double ref[2] = {0, 0};
        ck(cudaMemcpyAsync(&got, reinterpret_cast<void*>(p->pb), sizeof got, cudaMemcpyDeviceToHost, m_stream), "memcpy");
        ck(cudaMemcpyAsync(ref, dd, sizeof ref, cudaMemcpyDeviceToHost, m_stream), "memcpy");
        ck(cudaStreamSynchronize(m_stream), "check");
        *err = std::fabs(double(got) - ref[0]);
        *tol = 1e-5 * ref[1] + 1e-3;
        break;
      }
      case family::axpby: {
        float* ref = alloc(p, c.n, "ref");
        axpby_ref<<<m_sms * 8, 256, 0, m_stream>>>(reinterpret_cast<float*>(p->pa),
                                                   reinterpret_cast<float*>(p->pb), ref, p->a, p->b, c.n);
        const auto r = compare(reinterpret_cast<float*>(p->pc), ref, c.n);
        *err = r.first;
        *tol = 1e-6 * r.second + 1e-7;
        break;
      }
      case family::softmax: {
        float* ref = alloc(p, c.m * c.n, "ref");
        softmax_ref<<<static_cast<unsigned>((c.m + 127) / 128), 128, 0, m_stream>>>(
            reinterpret_cast<float*>(p->pa), ref, p->m32, p->n32);
        const auto r = compare(reinterpret_cast<float*>(p->pb), ref, c.m * c.n);
        *err = r.first;
        *tol = 1e-5;
        break;
      }
    }
    ck(cudaGetLastError(), "reference kernels");
  }

  worker_args m_args;
  std::vector<krex_eval::candidate> m_all;
  std::unique_ptr<krex::tenant> m_tenant;
  std::unique_ptr<krex::cuda::placement_buffers> m_kept;  // K > 1: copies kept between commands
  std::vector<std::size_t> m_kept_sizes;                  // one copy's buffer sizes, as kept
  bool m_fresh_placements = [] {
    const char* v = std::getenv("KREX_EVAL_FRESH_PLACEMENTS");
    return v != nullptr && std::string(v) == "1";
  }();
  bool m_warm_placements = [] {  // KREX_EVAL_WARM_PLACEMENTS=1: warm-up on every copy
    const char* v = std::getenv("KREX_EVAL_WARM_PLACEMENTS");
    return v != nullptr && std::string(v) == "1";
  }();
  krex::tenant* m_pool_tenant = nullptr;  // --pool: the pool worker's tenant
  cudaStream_t m_stream = nullptr;
  cublasHandle_t m_cublas = nullptr;
  int m_cc_major = 0, m_cc_minor = 0, m_sms = 1;
  std::string m_gpu;
  bool m_first = true;
  bool m_broken = false;
};

}  // namespace

int main(int argc, char** argv) {
  worker_args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "krex_eval_worker: %s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--mode") a.mode = val();
    else if (k == "--lock") a.lock_path = val();
    else if (k == "--segment") a.segment = val();
    else if (k == "--device") a.device = std::stoi(val());
    else if (k == "--placements") a.placements = std::stoi(val());
    else if (k == "--placement-budget-mb") a.placement_budget_mb = std::stol(val());
    else if (k == "--pool") a.pool = std::stoi(val());
    else if (k == "--timeout-s") a.timeout_s = std::stod(val());
    else if (k == "--compile-only") {
      const int sm = std::stoi(val());
      int bad = 0;
      for (const auto& c : krex_eval::all_candidates()) {
        try {
          const auto src = source_of(c);
          const auto t = clk::now();
          const auto cubin = compile_cubin(src.first, src.second, sm / 10, sm % 10);
          std::printf("%-40s %8zu bytes %7.1f ms\n", c.id.c_str(), cubin.size(), ms_since(t));
        } catch (const std::exception& e) {
          std::printf("%-40s FAILED: %s\n", c.id.c_str(), e.what());
          ++bad;
        }
      }
      return bad == 0 ? 0 : 1;
    }
    else {
      std::fprintf(stderr, "krex_eval_worker: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  if (a.mode != "none" && a.mode != "lock" && a.mode != "krex") {
    std::fprintf(stderr, "krex_eval_worker: --mode must be none, lock or krex (got %s)\n", a.mode.c_str());
    return 2;
  }
  if (a.mode == "lock" && a.lock_path.empty()) {
    std::fprintf(stderr, "krex_eval_worker: --mode lock needs --lock PATH\n");
    return 2;
  }
  if (a.placements < 1 || a.placements > 256 || a.placement_budget_mb < 0) {
    std::fprintf(stderr, "krex_eval_worker: --placements must be 1..256 and --placement-budget-mb >= 0\n");
    return 2;
  }
  if (a.pool != 0) {
    if (a.mode != "krex" || a.pool < 1 || a.pool > 256) {
      std::fprintf(stderr, "krex_eval_worker: --pool C (1..256) needs --mode krex\n");
      return 2;
    }
    // The persistent shape on krex::pool: nothing here touches the GPU before
    // the pool has forked its workers; each worker makes its own runner (and
    // CUDA context) at its first command.
    krex_eval::pool_host_options po;
    po.workers = a.pool;
    po.timeout_s = a.timeout_s;
    po.tenant = krex_eval::worker_tenant_options(a.device, a.segment);
    return krex_eval::pool_host_main(
        po,
        [a](krex::tenant& t, const std::string& cmd) {
          static runner r{a};  // one per pool worker process
          std::string line = r.run(cmd, &t);
          if (r.broken()) throw krex_eval::worker_broken(line);  // the pool replaces this worker
          return line;
        },
        std::cin, std::cout);
  }
  try {
    runner r{a};
    std::string cmd;
    while (std::getline(std::cin, cmd)) {
      if (cmd.empty()) continue;
      std::cout << r.run(cmd) << std::endl;  // one line per command, flushed
      if (r.broken()) return 3;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "krex_eval_worker: %s\n", e.what());
    return 1;
  }
  return 0;
}
