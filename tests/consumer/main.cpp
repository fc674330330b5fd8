// SPDX-License-Identifier: Apache-2.0
// A downstream program: it must compile against krex as installed or as a
// subproject, and run.
#if __has_include(<krex/region.hpp>)
#include <krex/region.hpp>
#else
#include <krex/options.hpp>
#endif

#include <cstdio>

int main() {
  const krex::options o = krex::options{}.device(0);
  std::printf("krex consumer: device %d, segment '%s', freeze %s\n", o.device(),
              o.segment().c_str(), krex::to_string(o.freeze()));
  return 0;
}
