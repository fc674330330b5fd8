// krex — concurrent kernel benchmarking on shared GPU nodes.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <krex/detail/config.hpp>

#include <cerrno>
#include <stdexcept>
#include <string>
#include <system_error>

namespace krex {

/// The protocol step (or setup stage) an error comes from.
enum class step {
  options,  ///< an option or KREX_* environment value
  segment,  ///< the node's shared-memory segment
  join,     ///< claiming a tenant slot
  lock,     ///< the per-device FIFO region lock
  gate,     ///< step 1: the submission gate
  drain,    ///< step 2: draining siblings' device work
  freeze,   ///< step 3: freezing siblings' process trees
  pin,      ///< step 4: pinning the measuring thread
  release,  ///< leaving a region
  backend,  ///< the device backend (CUDA, HIP, host)
  pool,     ///< a worker pool (krex::pool): its workers and the commands sent to them
};

/// Name of a step as it appears in messages ("gate", "drain", ...).
inline const char* to_string(step s) noexcept {
  switch (s) {
    case step::options: return "options";
    case step::segment: return "segment";
    case step::join: return "join";
    case step::lock: return "lock";
    case step::gate: return "gate";
    case step::drain: return "drain";
    case step::freeze: return "freeze";
    case step::pin: return "pin";
    case step::release: return "release";
    case step::backend: return "backend";
    case step::pool: return "pool";
  }
  return "unknown";
}

/// Every failure krex reports. `what()` reads
/// "krex: <step>: <what happened>[: <strerror>] — <what to do>".
class error : public std::runtime_error {
 public:
  /// `code` is an errno value (0 if none) or a backend error code.
  error(krex::step s, const std::string& message, int code = 0, const std::string& hint = {})
      : std::runtime_error(compose(s, message, code, hint)), m_step(s), m_code(code), m_hint(hint) {}

  /// The step that failed.
  krex::step where() const noexcept { return m_step; }
  /// errno or backend error code; 0 when the failure has none.
  int code() const noexcept { return m_code; }
  /// What the user can do about it (may be empty).
  const std::string& hint() const noexcept { return m_hint; }

 private:
  static std::string compose(krex::step s, const std::string& message, int code,
                             const std::string& hint) {
    std::string out = "krex: ";
    out += to_string(s);
    out += ": ";
    out += message;
    if (code > 0 && s != krex::step::backend) {
      out += ": ";
      out += std::system_category().message(code);  // strerror is not thread-safe
    } else if (code != 0) {
      out += " (code " + std::to_string(code) + ")";
    }
    if (!hint.empty()) {
      out += " — ";
      out += hint;
    }
    return out;
  }

  krex::step m_step;
  int m_code;
  std::string m_hint;
};

}  // namespace krex
