// SPDX-License-Identifier: Apache-2.0
// Compiled (-fsyntax-only) by the ctests `measure_needs_region*`
// (tests/CMakeLists.txt), once per KREX_MEASURE_ARG value. krex::measure takes
// a held krex::region or krex::unprotected as its first argument and nothing
// else:
//   region, unprotected (the control): must compile;
//   lock, tenant: must fail with krex::measure's own diagnostic.
// With KREX_COMPARE defined, krex::compare instead of krex::measure (the
// same rule, the same diagnostic).
// Not part of any target.
#include <krex/compare.hpp>
#include <krex/measure.hpp>
#include <krex/region.hpp>

#include <mutex>

#ifndef KREX_MEASURE_ARG
#error "define KREX_MEASURE_ARG (region, unprotected, lock or tenant)"
#endif  // KREX_MEASURE_ARG

#define KREX_ARG_region 1
#define KREX_ARG_unprotected 2
#define KREX_ARG_lock 3
#define KREX_ARG_tenant 4
#define KREX_CAT(a, b) a##b
#define KREX_ARG(x) KREX_CAT(KREX_ARG_, x)

#ifdef KREX_COMPARE
// krex::compare(first, {fn, fn}, o): the candidates in place of the body.
#define KREX_TIMED(first, fn, o) (krex::compare(first, {fn, fn}, o), krex::measure_result{})
using timed_options = krex::compare_options;
#else
#define KREX_TIMED(first, fn, o) krex::measure(first, fn, o)
using timed_options = krex::measure_options;
#endif  // KREX_COMPARE

krex::measure_result timed(krex::tenant& t) {
  timed_options o;
  const auto fn = [] {};
#if KREX_ARG(KREX_MEASURE_ARG) == KREX_ARG_region
  krex::region r{t};
  return KREX_TIMED(r, fn, o);
#elif KREX_ARG(KREX_MEASURE_ARG) == KREX_ARG_unprotected
  (void)t;
  return KREX_TIMED(krex::unprotected, fn, o);
#elif KREX_ARG(KREX_MEASURE_ARG) == KREX_ARG_lock
  // A lock of the caller's own is no region: say krex::unprotected.
  static std::mutex mu;
  std::lock_guard<std::mutex> held{mu};
  (void)t;
  return KREX_TIMED(held, fn, o);
#elif KREX_ARG(KREX_MEASURE_ARG) == KREX_ARG_tenant
  // A tenant is a membership, not a held region.
  return KREX_TIMED(t, fn, o);
#else
#error "unknown KREX_MEASURE_ARG"
#endif
}

int main() { return 0; }
