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

#include <krex/compare.hpp>
#include <krex/error.hpp>
#include <krex/measure.hpp>
#include <krex/options.hpp>
#include <krex/pool_options.hpp>
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
#include <type_traits>
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

ms to_ms(const std::string& name, py::handle v) {
  return ms(to_int(name, v, "an integer number of milliseconds"));
}

/// The keywords krex.Tenant takes: detail::option_table's, in its order.
const std::string& option_names() {
  static const std::string names = [] {
    std::string n;
    for (const detail::option_spec& s : detail::option_table)
      n += (n.empty() ? "" : ", ") + std::string(s.python);
    return n;
  }();
  return names;
}

/// The keyword an unknown one `k` was meant as, or "": the keyword of the
/// option whose setter (gate_mode), variable (KREX_LEASE_MS) or variable in
/// lower case (lease_ms, freeze_scope) `k` is; else a keyword at most 2 edits
/// off (lease_mss).
std::string meant_keyword(const std::string& k) {
  for (const detail::option_spec& s : detail::option_table) {
    std::string lower = s.env + 5;
    for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    if (k == s.name || k == s.env || k == lower) return s.python;
  }
  std::string best;
  std::size_t best_d = 3;
  for (const detail::option_spec& s : detail::option_table) {
    const std::size_t d = detail::edit_distance(k, s.python);
    if (d < best_d) {
      best_d = d;
      best = s.python;
    }
  }
  return best;
}

/// device=True is an int to Python and a mistake to krex: a TypeError.
int to_device(py::handle v) {
  const long long d = to_int("device", v, "0.." + std::to_string(options::max_devices - 1));
  if (d < 0 || d >= options::max_devices)
    bad_value("device", std::to_string(d), "0.." + std::to_string(options::max_devices - 1));
  return static_cast<int>(d);
}

/// A keyword's value as the C++ type of its option's field (T), checked for
/// its Python type; the setter (options::set) then checks its range.
template <class T>
T from_python(const detail::option_spec& s, const std::string& k, py::handle v) {
  if constexpr (std::is_same_v<T, int>) {
    if (s.id == detail::option_id::device) return to_device(v);
    return static_cast<int>(to_int(k, v, std::to_string(s.lo) + ".." + std::to_string(s.hi)));
  } else if constexpr (std::is_same_v<T, ms>) {
    return to_ms(k, v);
  } else if constexpr (std::is_same_v<T, bool>) {
    return to_bool(k, v);
  } else if constexpr (std::is_same_v<T, std::string>) {
    return to_str(k, v, s.kind == detail::option_kind::segment_name ? "1..64 of [A-Za-z0-9._-]"
                                                                     : "an absolute path");
  } else {  // a choice: one of its enum's names
    const std::string names = detail::choice_list(*s.choices);
    const long long x = detail::choice_value(*s.choices, to_str(k, v, names));
    if (x < 0) bad_value(k, py_repr(v), names);
    return static_cast<T>(x);
  }
}

/// krex::options from Python keyword arguments, each through its option's
/// setter (options::set, which validates ranges and throws krex::error
/// naming the option); the keywords are detail::option_table's.
options make_options(const py::object& device, const py::kwargs& kw) {
  options o;
  o.device(to_device(device));
  for (const auto& item : kw) {
    const std::string k = item.first.cast<std::string>();
    const detail::option_spec* spec = nullptr;
    for (const detail::option_spec& s : detail::option_table)
      if (k == s.python) spec = &s;
    if (spec == nullptr) {
      const std::string near = meant_keyword(k);
      throw error(
          step::options,
          "unknown option '" + k + "'" + (near.empty() ? "" : "; did you mean '" + near + "'?"), 0,
          (near.empty() ? "" : "write " + near + "=...; ") + "accepted: " + option_names());
    }
    o.visit(spec->id, [&](const auto& field) {
      using field_t = std::decay_t<decltype(field)>;
      o.set(spec->id, from_python<field_t>(*spec, k, item.second));
    });
  }
  return o;
}

/// An option's Python type and its default in options{} as Python writes it.
std::pair<std::string, std::string> python_type_and_default(const detail::option_spec& s,
                                                            const options& d) {
  std::pair<std::string, std::string> out;
  d.visit(s.id, [&](const auto& field) {
    using field_t = std::decay_t<decltype(field)>;
    if constexpr (std::is_same_v<field_t, int>) out = {"int", std::to_string(field)};
    else if constexpr (std::is_same_v<field_t, ms>) out = {"int", std::to_string(field.count())};
    else if constexpr (std::is_same_v<field_t, bool>) out = {"bool", field ? "True" : "False"};
    else if constexpr (std::is_same_v<field_t, std::string>)
      out = {"str", field.empty() ? "<derived>" : "\"" + field + "\""};
    else out = {"str", "\"" + std::string(to_string(field)) + "\""};
  });
  return out;
}

/// Tenant.__init__'s docstring: a typed signature whose defaults are those of
/// krex::options{} (one source), then what the keywords accept.
const std::string& tenant_init_doc() {
  static const std::string doc = [] {
    const options d;
    std::string sig = "Tenant(device: int = " + std::to_string(d.device()) + ", *";
    std::size_t col = sig.size();
    for (const detail::option_spec& s : detail::option_table) {
      if (s.id == detail::option_id::device) continue;
      const auto [type, def] = python_type_and_default(s, d);
      const std::string item = std::string(s.python) + ": " + type + " = " + def;
      if (col + item.size() + 2 > 76) {
        sig += ",\n       " + item;
        col = 7 + item.size();
      } else {
        sig += ", " + item;
        col += 2 + item.size();
      }
    }
    // What the choices take: `access: "user" or "group"; ...`, wrapped.
    std::string choices;
    for (const detail::option_spec& s : detail::option_table) {
      if (s.kind != detail::option_kind::choice) continue;
      const detail::choice_names& c = *s.choices;
      choices += (choices.empty() ? "" : "; ") + std::string(s.python) + ":";
      for (std::size_t i = 0; i < c.count; ++i)
        choices += std::string(i == 0 ? " " : i + 1 == c.count ? " or " : ", ") + "\"" +
                   c.names[i] + "\"";
    }
    std::string wrapped, line;
    for (std::size_t at = 0; at <= choices.size();) {
      std::size_t sp = choices.find(' ', at);
      if (sp == std::string::npos) sp = choices.size();
      const std::string word = choices.substr(at, sp - at);
      if (!line.empty() && line.size() + 1 + word.size() > 76) {
        wrapped += line + "\n";
        line.clear();
      }
      line += (line.empty() ? "" : " ") + word;
      at = sp + 1;
    }
    wrapped += line + ".";
    return "\n" + sig + R"doc()

Joins the node for `device` (krex::options' setters, durations in ms).
)doc" + wrapped + R"doc(
KREX_* environment variables (KREX_DEVICE, KREX_FREEZE, ...) override the
keywords. Raises krex.Error (.step, .hint, .code) for a value krex refuses or
a failed join, TypeError for a keyword of the wrong type.)doc";
  }();
  return doc;
}

/// A report field as Python holds it (detail::visit_report_fields' types).
/// A choice (freeze, scope) by its name.
template <class T>
py::object to_python(const T& v) {
  if constexpr (detail::choices_of<T>.count > 0) return py::str(to_string(v));
  else return py::cast(v);
}
py::object to_python(const device_clocks& c) {
  if (!c.valid) return py::none();
  py::dict x;
  x["sm_mhz"] = c.sm_mhz;
  x["mem_mhz"] = c.mem_mhz;
  x["power_mw"] = c.power_mw;
  x["temp_c"] = c.temp_c;
  x["reasons"] = c.reasons;
  return std::move(x);
}

/// r.report: "level" and every field of detail::visit_report_fields.
py::dict report_dict(const region_report& r) {
  py::dict d;
  d["level"] = r.level();
  detail::visit_report_fields(r, [&d](const char* name, const auto& field, bool /*line*/) {
    d[name] = to_python(field);
  });
  return d;
}

/// krex._krex._option_table: the table for tests (tests/python/test_package.py).
py::list option_table_py() {
  py::list l;
  const options d;
  for (const detail::option_spec& s : detail::option_table) {
    py::dict row;
    row["name"] = s.name;
    row["python"] = s.python;
    row["env"] = s.env;
    const auto [type, def] = python_type_and_default(s, d);
    row["type"] = type;
    row["default"] = def;
    l.append(row);
  }
  return l;
}

/// krex._krex._pool_table: detail::pool_option_table's checked rows (name,
/// lo, hi, default), so that krex.Pool (pool.py) checks by the C++ ranges.
py::list pool_table_py() {
  py::list l;
  for (const detail::pool_option_spec& s : detail::pool_option_table) {
    if (s.def_text != nullptr) continue;
    py::dict row;
    row["name"] = s.name;
    row["lo"] = s.lo;
    row["hi"] = s.hi;
    row["default"] = s.def;
    l.append(row);
  }
  return l;
}

/// krex._krex._report_fields: the report's keys, "level" first.
py::list report_fields_py() {
  py::list l;
  l.append("level");
  region_report r;
  detail::visit_report_fields(r, [&l](const char* name, const auto&, bool) { l.append(name); });
  return l;
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
  d["placement"] = m.placement;
  d["placement_median_ms"] = m.placement_median_ms;
  d["placement_spread"] = m.placement_spread;
  d["placement_bytes"] = m.placement_bytes;
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

/// The CUDA stream of krex.measure / krex.compare's `stream` argument.
[[maybe_unused]] std::uintptr_t stream_handle(const py::object& stream) {
  if (stream.is_none()) return 0;
  py::object s = py::hasattr(stream, "cuda_stream") ? stream.attr("cuda_stream") : stream;
  return static_cast<std::uintptr_t>(to_int("stream", s, "an int handle or a torch.cuda.Stream"));
}

/// krex.measure / krex.compare's loop options from their keywords.
measure_options loop_options(int warmup, int samples, double warmup_ms, bool cold_l2,
                             std::size_t flush_bytes, int placements, std::size_t placement_bytes) {
  measure_options o;
  o.warmup = warmup;
  o.samples = samples;
  if (warmup_ms < 0) bad_value("warmup_ms", std::to_string(warmup_ms), "milliseconds >= 0");
  o.warmup_time = std::chrono::microseconds(static_cast<long long>(warmup_ms * 1000.0));
  o.cold_l2 = cold_l2;
  o.flush_bytes = flush_bytes;
  o.placements = placements;
  o.placement_bytes = placement_bytes;
  return o;
}

/// True when the loop is timed with CUDA events (else the host clock).
bool cuda_timer(const std::string& timer) {
  const bool cuda = default_backend::name == std::string("cuda");
  if (timer != "auto" && timer != "host" && timer != "cuda")
    bad_value("timer", "'" + timer + "'", "auto, host, cuda");
  if (timer == "cuda" && !cuda)
    throw error(step::options, "timer='cuda' in a krex built with the " +
                                   std::string(default_backend::name) + " backend",
                0, "use timer='host', or build krex with CUDA (see docs/PYTHON.md)");
  return timer != "host" && cuda;
}

py::dict measure_py(py_region& r, const py::function& fn, int warmup, int samples,
                    double warmup_ms, const std::string& timer, const py::object& stream,
                    bool cold_l2, std::size_t flush_bytes, int placements,
                    std::size_t placement_bytes) {
  region& held = r.held();
  const measure_options o =
      loop_options(warmup, samples, warmup_ms, cold_l2, flush_bytes, placements, placement_bytes);
  // One placement: fn(), as before placements existed; K > 1: fn(p), the
  // placement index (a Python callable's parameters are not its type).
  const auto call = [&fn](placement p) { fn(p.index); };
  const auto call0 = [&fn] { fn(); };
  const bool k1 = placements == 1;
  if (!cuda_timer(timer))
    return measure_dict(k1 ? measure(held, call0, o) : measure(held, call, o));
#if defined(KREX_WITH_CUDA) && KREX_WITH_CUDA
  const auto s = reinterpret_cast<cudaStream_t>(stream_handle(stream));
  return measure_dict(k1 ? measure(held, s, call0, o) : measure(held, s, call, o));
#else
  (void)stream;
  return measure_dict(k1 ? measure(held, call0, o) : measure(held, call, o));
#endif
}

py::dict compare_py(py_region& r, const py::sequence& fns, const py::object& names, int warmup,
                    int samples, double warmup_ms, const std::string& timer,
                    const py::object& stream, bool cold_l2, std::size_t flush_bytes,
                    int placements, std::size_t placement_bytes, double tolerance,
                    double confidence, std::uint64_t seed) {
  region& held = r.held();
  compare_options o;
  o.measure =
      loop_options(warmup, samples, warmup_ms, cold_l2, flush_bytes, placements, placement_bytes);
  o.tolerance = tolerance;
  o.confidence = confidence;
  o.seed = seed;
  std::vector<std::string> given;
  if (!names.is_none())
    for (py::handle n : py::sequence(names)) given.push_back(py::str(n).cast<std::string>());
  if (!given.empty() && given.size() != py::len(fns))
    throw error(step::options,
                std::to_string(given.size()) + " names for " + std::to_string(py::len(fns)) +
                    " candidates",
                0, "give one name per candidate, or none");
  std::vector<candidate> cs;
  for (std::size_t i = 0; i < py::len(fns); ++i) {
    py::object fn = fns[i];
    if (!PyCallable_Check(fn.ptr()))
      throw py::type_error("krex: krex.compare's candidate " + std::to_string(i) +
                           " is not callable: " + py_repr(fn));
    const std::string name = given.empty() ? std::string{} : given[i];
    if (placements == 1)
      cs.emplace_back(name, [fn](placement) { fn(); });
    else
      cs.emplace_back(name, [fn](placement p) { fn(p.index); });
  }
  compare_result c;
  if (!cuda_timer(timer)) {
    c = compare(held, cs, o);
  } else {
#if defined(KREX_WITH_CUDA) && KREX_WITH_CUDA
    c = compare(held, reinterpret_cast<cudaStream_t>(stream_handle(stream)), cs, o);
#else
    (void)stream;
    c = compare(held, cs, o);
#endif
  }
  py::dict d;
  d["names"] = c.names;
  py::list cands, vs;
  for (const measure_result& m : c.candidates) cands.append(measure_dict(m));
  for (const comparison& v : c.vs_first) {
    py::dict e;
    e["pairs"] = v.pairs;
    e["ratio"] = v.ratio;
    e["low"] = v.low;
    e["high"] = v.high;
    e["coverage"] = v.coverage;
    e["diff_ms"] = v.diff_ms;
    e["verdict"] = to_string(v.verdict);
    vs.append(e);
  }
  d["candidates"] = cands;
  d["vs_first"] = vs;
  d["order"] = c.order;
  d["method"] = c.method;
  return d;
}

}  // namespace
}  // namespace krex::python

PYBIND11_MODULE(_krex, m) {
  using namespace krex::python;
  namespace k = krex;
  m.doc() = "krex: concurrent kernel benchmarking on shared GPU nodes (binding)";
  m.attr("backend") = k::default_backend::name;
  m.attr("compare_default_samples") = k::compare_default_samples;
  m.attr("compare_default_confidence") = k::compare_default_confidence;
  m.attr("_option_table") = option_table_py();
  m.attr("_pool_table") = pool_table_py();
  m.attr("_report_fields") = report_fields_py();

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
      .def_property_readonly("join_report",
                             [](py_tenant& t) {
                               // What the join cost, step by step (krex::join_timings), in ms.
                               const k::join_timings& j = t.get().join_report();
                               py::dict d;
                               d["driver_ms"] = static_cast<double>(j.driver_ns) / 1e6;
                               d["segment_ms"] = static_cast<double>(j.segment_ns) / 1e6;
                               d["slot_ms"] = static_cast<double>(j.slot_ns) / 1e6;
                               d["freeze_ms"] = static_cast<double>(j.freeze_ns) / 1e6;
                               d["recover_ms"] = static_cast<double>(j.recover_ns) / 1e6;
                               d["sweep_ms"] = static_cast<double>(j.sweep_ns) / 1e6;
                               d["topology_ms"] = static_cast<double>(j.topology_ns) / 1e6;
                               d["agent_ms"] = static_cast<double>(j.agent_ns) / 1e6;
                               d["gating_ms"] = static_cast<double>(j.gating_ns) / 1e6;
                               d["guardian_ms"] = static_cast<double>(j.guardian_ns) / 1e6;
                               d["total_ms"] = static_cast<double>(j.total_ns) / 1e6;
                               d["swept"] = j.swept;
                               return d;
                             })
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

  // The loop's keywords and their defaults: detail::measure_option_table's.
  using mo = k::detail::measure_option_id;
  const auto md = [](mo i) { return k::detail::measure_default<long long>(i); };
  const double warmup_ms = static_cast<double>(md(mo::warmup_time)) / 1000.0;
  m.def("measure", &measure_py, py::arg("region"), py::arg("fn"),
        py::arg("warmup") = md(mo::warmup), py::arg("samples") = md(mo::samples),
        py::arg("warmup_ms") = warmup_ms, py::arg("timer") = "auto",
        py::arg("stream") = py::none(), py::arg("cold_l2") = md(mo::cold_l2) != 0,
        py::arg("flush_bytes") = md(mo::flush_bytes), py::arg("placements") = md(mo::placements),
        py::arg("placement_bytes") = md(mo::placement_bytes),
        R"doc(
Times fn() inside the entered region r (krex::measure): warm-up, then samples.
timer='host' uses the host clock per call; on a CUDA build, 'auto' uses CUDA
events on `stream` (an int handle or an object with .cuda_stream; None: the
legacy default stream, PyTorch's default) with the L2 flushed before each
sample. placements=K > 1: fn(p) runs on copy p of its inputs, p = sample % K
(docs/COMPARE.md). Returns a dict: samples_ms, median_ms, p5_ms, p95_ms,
mean_ms, min_ms, max_ms, method, placement, placement_median_ms,
placement_spread, placement_bytes.)doc");

  m.def("compare", &compare_py, py::arg("region"), py::arg("fns"), py::arg("names") = py::none(),
        py::arg("warmup") = md(mo::warmup), py::arg("samples") = k::compare_default_samples,
        py::arg("warmup_ms") = warmup_ms, py::arg("timer") = "auto",
        py::arg("stream") = py::none(), py::arg("cold_l2") = md(mo::cold_l2) != 0,
        py::arg("flush_bytes") = md(mo::flush_bytes), py::arg("placements") = md(mo::placements),
        py::arg("placement_bytes") = md(mo::placement_bytes), py::arg("tolerance") = 0.005,
        py::arg("confidence") = k::compare_default_confidence, py::arg("seed") = 1,
        R"doc(
Times the candidates fns (two or more callables) inside the entered region r,
interleaved sample by sample (krex::compare), and compares each with the
first. Returns a dict: names, candidates (a measure dict each), vs_first (per
candidate: pairs, ratio, low, high, coverage, diff_ms, verdict: 'baseline',
'faster', 'slower', 'same' or 'unsure'), order, method.)doc");

  m.def(
      "prepare_measure",
      [](bool cold_l2, std::size_t flush_bytes) {
#if defined(KREX_WITH_CUDA) && KREX_WITH_CUDA
        krex::measure_options o;
        o.cold_l2 = cold_l2;
        o.flush_bytes = flush_bytes;
        py::gil_scoped_release nogil;
        krex::prepare_measure(o);
#else
        (void)cold_l2;
        (void)flush_bytes;
#endif
      },
      py::arg("cold_l2") = md(mo::cold_l2) != 0, py::arg("flush_bytes") = md(mo::flush_bytes),
      R"doc(
prepare_measure(cold_l2=True, flush_bytes=0) -> None: krex::prepare_measure.
On a CUDA build, makes measure's device scratch (the L2 flush buffer and
events) and the quiet step's probe buffers on the current device, and loads
NVML, now, outside any region, so the first region of the process neither
allocates nor loads anything with the device held. It creates the CUDA
context if the process has none. Nothing on the host backend.)doc");

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
