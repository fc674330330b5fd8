// krex — concurrent kernel benchmarking on shared GPU nodes.
// SPDX-License-Identifier: Apache-2.0
#pragma once

#include <krex/detail/config.hpp>

#include <cerrno>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
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

namespace detail {

/// One piece of a message that cat() joins: a text, or an integer written as
/// std::to_string writes it.
class piece {
 public:
  piece(const char* s) noexcept : m_text(s), m_size(std::char_traits<char>::length(s)) {}
  piece(const std::string& s) noexcept : m_text(s.data()), m_size(s.size()) {}
  piece(std::string_view s) noexcept : m_text(s.empty() ? "" : s.data()), m_size(s.size()) {}
  piece(char) = delete;  // not a number: write a one-character text
  piece(bool) = delete;
  piece(int v) noexcept : piece(static_cast<long long>(v)) {}
  piece(long v) noexcept : piece(static_cast<long long>(v)) {}
  piece(long long v) noexcept
      : m_size(v < 0 ? 0 - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v)),
        m_negative(v < 0) {}
  piece(unsigned v) noexcept : m_size(v) {}
  piece(unsigned long v) noexcept : m_size(v) {}
  piece(unsigned long long v) noexcept : m_size(v) {}

 private:
  friend std::string cat(std::initializer_list<piece> pieces);
  const char* m_text = nullptr;  // null: a number, m_size its magnitude
  unsigned long long m_size;
  bool m_negative = false;
};

/// The pieces joined into one string: what `a + b + std::to_string(n) + ...`
/// builds, written once (a call where a message is made, not its own copy of
/// std::string's code).
KREX_DETAIL_NOINLINE inline std::string cat(std::initializer_list<piece> pieces) {
  std::string out;
  for (const piece& p : pieces) {
    if (p.m_text != nullptr) {
      out.append(p.m_text, p.m_size);
      continue;
    }
    char digits[24];
    char* end = digits + sizeof digits;
    char* b = end;
    unsigned long long v = p.m_size;
    do {
      *--b = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    if (p.m_negative) *--b = '-';
    out.append(b, end);
  }
  return out;
}

}  // namespace detail

/// Every failure krex reports. `what()` reads
/// "krex: <step>: <what happened>[: <strerror>] — <what to do>".
class error : public std::runtime_error {
 public:
  /// `code` is an errno value (0 if none) or a backend error code.
  KREX_DETAIL_COLD error(krex::step s, const std::string& message, int code = 0,
                         const std::string& hint = {})
      : std::runtime_error(compose(s, message, code, hint)), m_step(s), m_code(code), m_hint(hint) {}
  /// The same, from texts (no std::string built where it is thrown); a null
  /// `hint` is none.
  KREX_DETAIL_COLD error(krex::step s, const char* message, int code = 0,
                         const char* hint = nullptr)
      : error(s, std::string(message), code, hint != nullptr ? std::string(hint) : std::string()) {}
  KREX_DETAIL_COLD error(krex::step s, const std::string& message, int code, const char* hint)
      : error(s, message, code, hint != nullptr ? std::string(hint) : std::string()) {}

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
      out += detail::cat({" (code ", code, ")"});
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
