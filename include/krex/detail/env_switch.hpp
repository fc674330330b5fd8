// SPDX-License-Identifier: Apache-2.0
#pragma once

// An adapter's on/off environment switch (KREX_GBENCH, KREX_GBENCH_STRICT,
// KREX_NVBENCH_REGIONS): unset or "1" is on, "0" is off, anything else is
// an error the adapter reports on every use.

#include <cstdlib>
#include <string>

namespace krex::detail {

struct env_switch {
  bool on = true;
  std::string error;  ///< non-empty: the value was neither 0 nor 1
};

/// Reads variable `name`; `accepted` ends the error message, e.g. "0, 1".
inline env_switch read_env_switch(const char* name, const char* accepted) {
  env_switch r;
  const char* v = std::getenv(name);
  if (v == nullptr || std::string(v) == "1") return r;
  if (std::string(v) == "0") {
    r.on = false;
    return r;
  }
  r.error = std::string("invalid value '") + v + "' for " + name + " (accepted: " + accepted + ")";
  return r;
}

}  // namespace krex::detail
