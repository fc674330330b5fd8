// SPDX-License-Identifier: Apache-2.0
// A downstream program linked with krex::compiled: its krex headers only
// declare the join and the region (KREX_SEPARATE_COMPILATION), the library
// defines them. It joins on the host backend (every build has it), holds a
// region, and leaves.
#include <krex/region.hpp>

#include <unistd.h>

#include <cstdio>
#include <string>

#if !defined(KREX_SEPARATE_COMPILATION)
#error "krex::compiled did not define KREX_SEPARATE_COMPILATION for its users"
#endif

int main() {
  const krex::options o = krex::options{}
                              .segment("consumer-compiled-" + std::to_string(::getpid()))
                              .freeze(krex::freeze_method::none)
                              .pin(false);
  bool gated = false;
  {
    krex::basic_tenant<krex::backend::host> t{o};
    krex::basic_region<krex::backend::host> r{t};
    r.exit();
    gated = r.report().gated;
  }
  krex::remove_segment(o.with_env());
  std::printf("krex compiled consumer: region gated %s\n", gated ? "yes" : "no");
  return gated ? 0 : 1;
}
