// SPDX-License-Identifier: Apache-2.0
// krex_minimal: the smallest krex program. Join the node's segment, time a
// loop inside a region, print the region report (text, then one JSON line).
// Start several at once to see them take turns; krex options come from
// KREX_* variables (e.g. KREX_FREEZE=signal, KREX_SEGMENT=mine).

#include <krex/region.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>

namespace {

// Stands in for a kernel launch: host work on the host backend.
double kernel() {
  volatile double x = 0;
  for (int i = 0; i < 2'000'000; ++i) x = x + 1e-9 * i;
  return x;
}

}  // namespace

int main() try {
  krex::tenant t{krex::options{}};  // device 0 of this node; KREX_* override
  // Compile, generate inputs, check correctness: concurrent with siblings.
  kernel();

  krex::region r{t};  // lock -> gate -> drain -> freeze -> pin
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) t.submit([] { kernel(); });
  const std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - t0;
  r.exit();  // unpin -> thaw -> lower gate -> release; the report is complete

  std::cout << "10 kernels in " << took.count() << " ms\n"
            << r.report() << '\n'
            << krex::to_json(r.report()) << '\n';
  return 0;
} catch (const krex::error& e) {
  std::fprintf(stderr, "krex_minimal: %s\n", e.what());
  return 1;
}
