// SPDX-License-Identifier: Apache-2.0
//
// krex._krex: the Python binding (pybind11). One translation unit, built by
// python/CMakeLists.txt for both the CMake build (KREX_BUILD_PYTHON) and
// `pip install ./python` (scikit-build-core). The Python package krex/
// re-exports it and adds patch() and `python -m krex.run`.
//
// Threading: every wait krex can make (joining, region entry, region exit,
// leaving, a parked submission) runs with the GIL released, so a sibling that
// holds the device for seconds stalls only the waiting Python thread. Python
// callables (the timed body, submit's fn) run with the GIL held.

#include <krex/error.hpp>
#include <krex/measure.hpp>
#include <krex/options.hpp>
#include <krex/region.hpp>
#include <krex/report.hpp>
#include <krex/tenant.hpp>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace krex::python {
namespace {

using ms = std::chrono::milliseconds;

[[noreturn]] void bad_value(const std::string& name, const std::string& value,
                            const std::string& accepted) {
  throw error(step::options, "invalid value " + value + " for option '" + name + "'", 0,
              "accepted: " + accepted);
}

std::string py_repr(py::handle h) { return py::repr(h).cast<std::string>(); }

/// A value of the wrong Python type: TypeError (Python's convention), not
/// krex.Error, which is for values of the right type that krex refuses.
[[noreturn]] void bad_type(const std::string& name, py::handle v, const std::string& wanted) {
  throw py::type_error("krex: option '" + name + "' takes " + wanted + ", not " +
                       std::string(py::str(py::type::handle_of(v).attr("__name__"))) + " " +
                       py_repr(v));
}

bool to_bool(const std::string& name, py::handle v) {
  if (!py::isinstance<py::bool_>(v)) bad_type(name, v, "True or False");
  return v.cast<bool>();
}

long long to_int(const std::string& name, py::handle v, const std::string& accepted) {
  // bool is an int in Python; device=True is a mistake.
  if (py::isinstance<py::bool_>(v) || !py::isinstance<py::int_>(v))
    bad_type(name, v, "an int (" + accepted + ")");
  try {
    return v.cast<long long>();
  } catch (const py::cast_error&) {
    bad_value(name, py_repr(v), accepted);
  }
}

std::string to_str(const std::string& name, py::handle v, const std::string& accepted) {
  if (!py::isinstance<py::str>(v)) bad_type(name, v, "a str (" + accepted + ")");
  return v.cast<std::string>();
}

template <class Enum>
Enum to_enum(const std::string& name, py::handle v,
             const std::vector<std::pair<const char*, Enum>>& names) {
  std::string accepted;
  for (const auto& n : names) accepted += (accepted.empty() ? "" : ", ") + std::string(n.first);
  const std::string s = to_str(name, v, accepted);
  for (const auto& n : names)
    if (s == n.first) return n.second;
  bad_value(name, py_repr(v), accepted);
}

ms to_ms(const std::string& name, py::handle v) {
  return ms(to_int(name, v, "an integer number of milliseconds"));
}

constexpr const char* option_names =
    "device, segment, access, gate_park_ms, drain_deadline_ms, lock_wait_ms, lease_ms, "
    "allow_contended, freeze, scope, freeze_deadline_ms, cgroup_root, pin, reserved_cores, "
    "confine, host_devices, gating, gate_contexts, release_on_leave, handoff_grace_ms, "
    "quiet_deadline_ms, quiet_tolerance_pct";

/// device=True is an int to Python and a mistake to krex: a TypeError.
int to_device(py::handle v) {
  const long long d = to_int("device", v, "0.." + std::to_string(options::max_devices - 1));
  if (d < 0 || d >= options::max_devices)
    bad_value("device", std::to_string(d), "0.." + std::to_string(options::max_devices - 1));
  return static_cast<int>(d);
}

/// krex::options from Python keyword arguments, one setter per name (the
/// setters validate ranges and throw krex::error naming the option).
options make_options(const py::object& device, const py::kwargs& kw) {
  options o;
  o.device(to_device(device));
  for (const auto& item : kw) {
    const std::string k = item.first.cast<std::string>();
    const py::handle v = item.second;
    if (k == "device")
      o.device(to_device(v));
    else if (k == "segment") o.segment(to_str(k, v, "1..64 of [A-Za-z0-9._-]"));
    else if (k == "access")
      o.access(to_enum<segment_access>(k, v, {{"user", segment_access::user},
                                              {"group", segment_access::group}}));
    else if (k == "gate_park_ms") o.gate_park(to_ms(k, v));
    else if (k == "drain_deadline_ms") o.drain_deadline(to_ms(k, v));
    else if (k == "lock_wait_ms") o.lock_wait(to_ms(k, v));
    else if (k == "lease_ms") o.lease(to_ms(k, v));
    else if (k == "allow_contended") o.allow_contended(to_bool(k, v));
    else if (k == "freeze")
      o.freeze(to_enum<freeze_method>(k, v, {{"auto", freeze_method::automatic},
                                             {"cgroup2", freeze_method::cgroup_v2},
                                             {"cgroup1", freeze_method::cgroup_v1},
                                             {"signal", freeze_method::signal},
                                             {"none", freeze_method::none}}));
    else if (k == "scope")
      o.scope(to_enum<freeze_scope>(k, v, {{"all", freeze_scope::all},
                                           {"device", freeze_scope::device},
                                           {"active", freeze_scope::active}}));
    else if (k == "freeze_deadline_ms") o.freeze_deadline(to_ms(k, v));
    else if (k == "handoff_grace_ms") o.handoff_grace(to_ms(k, v));
    else if (k == "cgroup_root") o.cgroup_root(to_str(k, v, "an absolute path"));
    else if (k == "pin") o.pin(to_bool(k, v));
    else if (k == "reserved_cores") o.reserved_cores(static_cast<int>(to_int(k, v, "1..64")));
    else if (k == "confine") o.confine(to_bool(k, v));
    else if (k == "release_on_leave") o.release_on_leave(to_bool(k, v));
    else if (k == "host_devices")
      o.host_devices(static_cast<int>(to_int(k, v, "1.." + std::to_string(options::max_devices))));
    else if (k == "gating")
      o.gate_mode(to_enum<gating>(k, v, {{"auto", gating::automatic},
                                         {"explicit", gating::explicit_}}));
    else if (k == "gate_contexts") o.gate_contexts(to_bool(k, v));
    else if (k == "quiet_deadline_ms") o.quiet_deadline(to_ms(k, v));
    else if (k == "quiet_tolerance_pct")
      o.quiet_tolerance_pct(static_cast<int>(to_int(k, v, "1..100")));
    else
      throw error(step::options, "unknown option '" + k + "'", 0,
                  std::string("accepted: ") + option_names);
  }
  return o;
}

/// Tenant.__init__'s docstring: a typed signature whose defaults are those of
/// krex::options{} (one source), then what the keywords accept.
const std::string& tenant_init_doc() {
  static const std::string doc = [] {
    const options d;
    const auto b = [](bool v) { return std::string(v ? "True" : "False"); };
    const auto q = [](const std::string& v) { return "\"" + v + "\""; };
    const auto n = [](long long v) { return std::to_string(v); };
    const std::vector<std::pair<std::string, std::string>> args = {
        {"segment: str", q(d.segment())},
        {"access: str", q(to_string(d.access()))},
        {"gate_park_ms: int", n(d.gate_park().count())},
        {"drain_deadline_ms: int", n(d.drain_deadline().count())},
        {"lock_wait_ms: int", n(d.lock_wait().count())},
        {"lease_ms: int", n(d.lease().count())},
        {"allow_contended: bool", b(d.allow_contended())},
        {"freeze: str", q(to_string(d.freeze()))},
        {"scope: str", q(to_string(d.scope()))},
        {"freeze_deadline_ms: int", n(d.freeze_deadline().count())},
        {"handoff_grace_ms: int", n(d.handoff_grace().count())},
        {"cgroup_root: str", d.cgroup_root().empty() ? "<derived>" : q(d.cgroup_root())},
        {"pin: bool", b(d.pin())},
        {"reserved_cores: int", n(d.reserved_cores())},
        {"confine: bool", b(d.confine())},
        {"host_devices: int", n(d.host_devices())},
        {"gating: str", q(to_string(d.gate_mode()))},
        {"release_on_leave: bool", b(d.release_on_leave())},
        {"gate_contexts: bool", b(d.gate_contexts())},
        {"quiet_deadline_ms: int", n(d.quiet_deadline().count())},
        {"quiet_tolerance_pct: int", n(d.quiet_tolerance_pct())},
    };
    std::string sig = "Tenant(device: int = " + n(d.device()) + ", *";
    std::size_t col = sig.size();
    for (const auto& a : args) {
      const std::string item = a.first + " = " + a.second;
      if (col + item.size() + 2 > 76) {
        sig += ",\n       " + item;
        col = 7 + item.size();
      } else {
        sig += ", " + item;
        col += 2 + item.size();
      }
    }
    return "\n" + sig + R"doc()

Joins the node for `device` (krex::options' setters, durations in ms).
access: "user" or "group"; freeze: "auto", "cgroup2", "cgroup1", "signal" or
"none"; scope: "all" or "device"; gating: "auto" or "explicit". KREX_*
environment variables (KREX_DEVICE, KREX_FREEZE, ...) override the keywords.
Raises krex.Error (.step, .hint, .code) for a value krex refuses or a failed
join, TypeError for a keyword of the wrong type.)doc";
  }();
  return doc;
}

py::dict report_dict(const region_report& r) {
  py::dict d;
  d["level"] = r.level();
  d["epoch"] = r.epoch;
  d["ticket"] = r.ticket;
  d["siblings_seen"] = r.siblings_seen;
  d["siblings_drained"] = r.siblings_drained;
  d["siblings_gone"] = r.siblings_gone;
  d["undrained_pids"] = r.undrained_pids;
  d["frozen_pids"] = r.frozen_pids;
  d["lock_ns"] = r.lock_ns;
  d["gate_ns"] = r.gate_ns;
  d["drain_ns"] = r.drain_ns;
  d["freeze_ns"] = r.freeze_ns;
  d["pin_ns"] = r.pin_ns;
  d["body_ns"] = r.body_ns;
  d["exit_ns"] = r.exit_ns;
  d["gated"] = r.gated;
  d["drained"] = r.drained;
  d["contended"] = r.contended;
  d["frozen"] = r.frozen;
  d["pinned"] = r.pinned;
  d["took_over_gate"] = r.took_over_gate;
  d["lease_lost"] = r.lease_lost;
  d["thaw_failed"] = r.thaw_failed;
  d["freeze_broken"] = r.freeze_broken;
  d["unverified_pids"] = r.unverified_pids;
  d["freeze"] = to_string(r.freeze);
  d["scope"] = to_string(r.scope);
  d["pinned_cpus"] = r.pinned_cpus;
  d["gating"] = r.gating;
  d["notes"] = r.notes;
  d["warnings"] = r.warnings;
  d["body_preemptions"] = r.body_preemptions;
  d["reserved_foreign_ns"] = r.reserved_foreign_ns;
  d["quiet_checked"] = r.quiet_checked;
  d["quiet"] = r.quiet;
  d["quiet_ns"] = r.quiet_ns;
  d["quiet_wait_ns"] = r.quiet_wait_ns;
  d["quiet_bursts"] = r.quiet_bursts;
  d["quiet_first_ratio"] = r.quiet_first_ratio;
  d["quiet_last_ratio"] = r.quiet_last_ratio;
  const auto clocks = [](const device_clocks& c) -> py::object {
    if (!c.valid) return py::none();
    py::dict x;
    x["sm_mhz"] = c.sm_mhz;
    x["mem_mhz"] = c.mem_mhz;
    x["power_mw"] = c.power_mw;
    x["temp_c"] = c.temp_c;
    x["reasons"] = c.reasons;
    return std::move(x);
  };
  d["clocks_entry"] = clocks(r.clocks_entry);
  d["clocks_exit"] = clocks(r.clocks_exit);
  d["foreign_pids"] = r.foreign_pids;
  d["foreign_checked"] = r.foreign_checked;
  d["stopped_pids"] = r.stopped_pids;
  d["other_segments"] = r.other_segments;
  return d;
}

py::dict measure_dict(const measure_result& m) {
  py::dict d;
  d["samples_ms"] = m.samples_ms;
  d["median_ms"] = m.median_ms;
  d["p5_ms"] = m.p5_ms;
  d["p95_ms"] = m.p95_ms;
  d["mean_ms"] = m.mean_ms;
  d["min_ms"] = m.min_ms;
  d["max_ms"] = m.max_ms;
  d["method"] = m.method;
  d["throttled"] = m.throttled;
  d["throttle_reasons"] = m.throttle_reasons;
  d["retakes"] = m.retakes;
  d["clocks_checked"] = m.clocks_checked;
  return d;
}

/// A tenant plus the in-process arbitration krex itself leaves to the caller:
/// one region at a time per tenant. A second thread waits (bounded by
/// lock_wait); the same thread asking again is an error, since it would wait
/// for itself.
class py_tenant {
 public:
  explicit py_tenant(const options& o) {
    py::gil_scoped_release nogil;
    // A module built with the CUDA backend on a machine without a GPU (the
    // toolkit is there, the device is not): say so, and how to get the host one.
    if (default_backend(o).device_count() == 0)
      throw error(step::options,
                  std::string("this krex module was built with the ") + default_backend::name +
                      " backend, which sees no device here (no GPU, no driver, or "
                      "CUDA_VISIBLE_DEVICES hides them)",
                  0,
                  "run it where a GPU is visible, or install the host backend: pip install "
                  "./python --config-settings=cmake.define.KREX_WITH_CUDA=OFF (docs/PYTHON.md)");
    m_tenant = std::make_unique<tenant>(o);
  }
  // Leaving passes the gate: it waits while a sibling holds a region.
  ~py_tenant() {
    if (m_tenant && Py_IsInitialized() != 0) {
      py::gil_scoped_release nogil;
      m_tenant.reset();
    }
  }
  py_tenant(const py_tenant&) = delete;
  py_tenant& operator=(const py_tenant&) = delete;

  tenant& get() {
    if (!m_tenant || !m_tenant->joined())
      throw error(step::join, "this krex.Tenant has left the node", 0,
                  "create a new krex.Tenant");
    return *m_tenant;
  }
  tenant* peek() noexcept { return m_tenant.get(); }

  /// Takes the in-process region slot (call without the GIL).
  void acquire_slot(ms wait) {
    std::unique_lock<std::mutex> lk(m_mutex);
    if (m_busy && m_holder == std::this_thread::get_id())
      throw error(step::lock, "this thread already holds a region on this tenant", 0,
                  "a nested region on the same device would wait for itself: time inside the "
                  "outer region (krex.patch() passes nested timing calls through)");
    if (!m_cv.wait_for(lk, wait, [this] { return !m_busy; }))
      throw error(step::lock,
                  "another thread of this process held a region on this tenant for longer than "
                  "lock_wait (" + std::to_string(wait.count()) + " ms)",
                  0, "raise lock_wait_ms / KREX_LOCK_WAIT_MS, or give each thread its own device");
    m_busy = true;
    m_holder = std::this_thread::get_id();
  }
  void release_slot() noexcept {
    {
      std::lock_guard<std::mutex> lk(m_mutex);
      m_busy = false;
      m_holder = std::thread::id{};
    }
    m_cv.notify_one();
  }
  bool busy() {
    std::lock_guard<std::mutex> lk(m_mutex);
    return m_busy;
  }

  void leave() {
    if (!m_tenant) return;
    if (busy())
      throw error(step::release, "leave() while a region on this tenant is open", 0,
                  "exit the region first (leave the `with krex.region(t)` block)");
    py::gil_scoped_release nogil;
    m_tenant->leave();
  }

 private:
  std::unique_ptr<tenant> m_tenant;
  std::mutex m_mutex;
  std::condition_variable m_cv;
  bool m_busy = false;
  std::thread::id m_holder;
};

class py_region {
 public:
  explicit py_region(py::object t) : m_owner(std::move(t)), m_tenant(tenant_of(m_owner)) {}
  ~py_region() {
    // Garbage-collected while open: end it (noexcept) rather than leak the device.
    if (m_region) {
      py::gil_scoped_release nogil;
      close();
    }
  }
  py_region(const py_region&) = delete;
  py_region& operator=(const py_region&) = delete;

  void enter() {
    if (m_region) throw error(step::lock, "this krex.region is already entered", 0,
                              "use a new krex.region(t) for each timed loop");
    tenant& t = m_tenant->get();
    const ms wait = t.opts().lock_wait();
    py::gil_scoped_release nogil;
    m_tenant->acquire_slot(wait);
    try {
      m_region = std::make_unique<region>(t);
    } catch (...) {
      m_tenant->release_slot();
      throw;
    }
    m_report = m_region->report();
  }

  /// `raise_lost`: throw krex.Error when the lease was lost (a normal exit);
  /// an exit by exception only records it, so the body's exception surfaces.
  void exit(bool raise_lost) {
    if (!m_region) return;
    py::gil_scoped_release nogil;
    std::exception_ptr lost = close();
    if (lost && raise_lost) std::rethrow_exception(lost);
  }

  bool active() const noexcept { return static_cast<bool>(m_region); }
  region& held() {
    if (!m_region)
      throw error(step::lock, "krex.measure needs an entered region", 0,
                  "call it inside `with krex.region(t) as r:`");
    return *m_region;
  }
  py::dict report() const { return report_dict(m_region ? m_region->report() : m_report); }
  py::object tenant_object() const { return m_owner; }

 private:
  // Ends the region (without the GIL); returns what exit() threw (a lost lease).
  std::exception_ptr close() noexcept {
    std::exception_ptr lost;
    try {
      m_region->exit();
    } catch (...) {
      lost = std::current_exception();
    }
    m_report = m_region->report();
    m_region.reset();
    m_tenant->release_slot();
    return lost;
  }

  static py_tenant* tenant_of(const py::object& t) {
    if (!py::isinstance<py_tenant>(t))
      throw py::type_error("krex: krex.region takes a krex.Tenant, not " +
                           std::string(py::str(py::type::handle_of(t).attr("__name__"))) + " " +
                           py_repr(t));
    return &t.cast<py_tenant&>();
  }

  py::object m_owner;  // keeps the tenant alive while this region exists
  py_tenant* m_tenant;
  std::unique_ptr<region> m_region;
  region_report m_report;
};

py::dict measure_py(py_region& r, const py::function& fn, int warmup, int samples,
                    double warmup_ms, const std::string& timer, const py::object& stream,
                    bool cold_l2, std::size_t flush_bytes) {
  region& held = r.held();
  measure_options o;
  o.warmup = warmup;
  o.samples = samples;
  if (warmup_ms < 0) bad_value("warmup_ms", std::to_string(warmup_ms), "milliseconds >= 0");
  o.warmup_time = std::chrono::microseconds(static_cast<long long>(warmup_ms * 1000.0));
  o.cold_l2 = cold_l2;
  o.flush_bytes = flush_bytes;
  const auto call = [&fn] { fn(); };
  const bool cuda = default_backend::name == std::string("cuda");
  if (timer != "auto" && timer != "host" && timer != "cuda")
    bad_value("timer", "'" + timer + "'", "auto, host, cuda");
  if (timer == "cuda" && !cuda)
    throw error(step::options, "timer='cuda' in a krex built with the " +
                                   std::string(default_backend::name) + " backend",
                0, "use timer='host', or build krex with CUDA (see docs/PYTHON.md)");
  if (timer == "host" || !cuda) return measure_dict(measure(held, call, o));
#if defined(KREX_WITH_CUDA) && KREX_WITH_CUDA
  std::uintptr_t handle = 0;
  if (!stream.is_none()) {
    py::object s = py::hasattr(stream, "cuda_stream") ? stream.attr("cuda_stream") : stream;
    handle = static_cast<std::uintptr_t>(to_int("stream", s, "an int handle or a torch.cuda.Stream"));
  }
  return measure_dict(measure(held, reinterpret_cast<cudaStream_t>(handle), call, o));
#else
  (void)stream;
  return measure_dict(measure(held, call, o));
#endif
}

}  // namespace
}  // namespace krex::python

PYBIND11_MODULE(_krex, m) {
  using namespace krex::python;
  namespace k = krex;
  m.doc() = "krex: concurrent kernel benchmarking on shared GPU nodes (binding)";
  m.attr("backend") = k::default_backend::name;

  static py::exception<k::error> error_type(m, "Error", PyExc_RuntimeError);
  error_type.attr("__doc__") = R"doc(What krex refused or failed to do (a krex::error), a RuntimeError.

str(e) is the message: "krex: <step>: <what happened> — <what to do>".
Attributes:
  step: where it happened: "options", "segment", "join", "lock", "gate",
        "drain", "freeze", "pin", "release", ...
  hint: what to do about it (also at the end of the message).
  code: the errno or driver status behind it, 0 when there is none.

Bad option values (lease_ms=0, freeze="sometimes", an unknown keyword, a bad
KREX_* variable) are step "options". A keyword of the wrong Python type
(pin="yes", device=1.5) is a TypeError, not a krex.Error.)doc";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const k::error& e) {
      py::object exc = py::handle(error_type.ptr())(e.what());
      exc.attr("step") = k::to_string(e.where());
      exc.attr("hint") = e.hint();
      exc.attr("code") = e.code();
      PyErr_SetObject(error_type.ptr(), exc.ptr());
    }
  });

  py::class_<py_tenant>(m, "Tenant", R"doc(
Membership of this node for one device (krex::tenant): joining takes a slot
in the node's segment; leave() (or the end of a `with krex.Tenant() as t:`
block, or garbage collection) gives it back. See __init__ for the options.)doc")
      .def(py::init([](const py::object& device, const py::kwargs& kw) {
             return std::make_unique<py_tenant>(make_options(device, kw));
           }),
           py::arg("device") = 0, tenant_init_doc().c_str())
      .def_property_readonly("device", [](py_tenant& t) { return t.get().device(); })
      .def_property_readonly("slot", [](py_tenant& t) { return t.get().slot(); })
      .def_property_readonly("segment_name", [](py_tenant& t) { return t.get().segment_name(); })
      .def_property_readonly("freeze", [](py_tenant& t) { return k::to_string(t.get().freeze()); })
      .def_property_readonly("cgroup_root", [](py_tenant& t) { return t.get().cgroup_root(); })
      .def_property_readonly("gating", [](py_tenant& t) { return t.get().gating_note(); })
      .def_property_readonly("reserved_cpus", [](py_tenant& t) { return t.get().reserved_cpus(); })
      .def_property_readonly("protection_notes",
                             [](py_tenant& t) { return t.get().protection_notes(); })
      .def_property_readonly("drains", [](py_tenant& t) { return t.get().drains(); })
      .def_property_readonly("syncs", [](py_tenant& t) { return t.get().syncs(); })
      .def_property_readonly("submits", [](py_tenant& t) { return t.get().submits(); })
      .def_property_readonly("lock_wait_ms",
                             [](py_tenant& t) { return t.get().opts().lock_wait().count(); })
      .def_property_readonly("joined",
                             [](py_tenant& t) { return t.peek() != nullptr && t.peek()->joined(); })
      .def("leave", &py_tenant::leave,
           "leave() -> None: leaves the node (idempotent); raises krex.Error while a region "
           "on this tenant is open.")
      .def(
          "submit",
          [](py_tenant& t, const py::function& fn) {
            k::tenant& kt = t.get();
            std::optional<k::submit_guard> g;
            {
              py::gil_scoped_release nogil;  // parks while a sibling holds a region
              g.emplace(kt);
            }
            return fn();
          },
          py::arg("fn"),
          "submit(fn) -> fn(): calls fn() inside a submit guard: waits (GIL released) while a "
          "sibling holds a region, then returns what fn() returns.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](py_tenant& t, const py::args&) {
        t.leave();
        return false;
      });

  py::class_<py_region>(m, "Region", R"doc(
A region on a tenant's device (krex::region): `with krex.region(t) as r:`.
Entry waits (GIL released) for the device's FIFO lock, then gates, drains and
freezes siblings and pins this thread; exit undoes it. r.report is a dict.)doc")
      .def(py::init<py::object>(), py::arg("tenant"),
           "Region(tenant: Tenant): a region on the tenant's device, not yet entered.")
      .def("enter", &py_region::enter,
           "enter() -> None: waits for the device's region lock, gates, drains, freezes, pins.")
      .def("exit", [](py_region& r) { r.exit(true); },
           "exit() -> None: undoes enter(); raises krex.Error if the region's lease was lost.")
      .def("__enter__",
           [](py::object self) {
             self.cast<py_region&>().enter();
             return self;
           })
      .def("__exit__",
           [](py_region& r, const py::object& type, const py::object&, const py::object&) {
             r.exit(type.is_none());
             return false;
           })
      .def_property_readonly("active", &py_region::active)
      .def_property_readonly("report", &py_region::report)
      .def_property_readonly("tenant", &py_region::tenant_object);

  m.def("measure", &measure_py, py::arg("region"), py::arg("fn"), py::arg("warmup") = 3,
        py::arg("samples") = 50, py::arg("warmup_ms") = 0.0, py::arg("timer") = "auto",
        py::arg("stream") = py::none(), py::arg("cold_l2") = true, py::arg("flush_bytes") = 0,
        R"doc(
Times fn() inside the entered region r (krex::measure): warm-up, then samples.
timer='host' uses the host clock per call; on a CUDA build, 'auto' uses CUDA
events on `stream` (an int handle or an object with .cuda_stream; None: the
legacy default stream, PyTorch's default) with the L2 flushed before each
sample. Returns a dict: samples_ms, median_ms, p5_ms, p95_ms, mean_ms, min_ms,
max_ms, method.)doc");

  m.def(
      "device_count",
      [](const py::kwargs& kw) {
        const k::options o = krex::python::make_options(py::int_(0), kw).with_env();
        py::gil_scoped_release nogil;
        return k::default_backend(o).device_count();
      },
      R"doc(
device_count(**options) -> int: the devices this build's backend sees (the
host backend: host_devices, KREX_HOST_DEVICES applied; CUDA: the visible
GPUs, 0 without a driver). krex.Pool(devices='all') uses it.)doc");
}
