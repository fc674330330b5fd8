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
#include <type_traits>

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
  static constexpr const char* names[] = {"options", "segment", "join",    "lock",    "gate", "drain",
                                          "freeze",  "pin",     "release", "backend", "pool"};
  const auto i = static_cast<unsigned>(s);
  return i < sizeof names / sizeof names[0] ? names[i] : "unknown";
}

namespace detail {
/// A piece of a message cat() joins: a text, or an integer as std::to_string writes it.
struct piece {
  piece(const char* s) noexcept : text(s), size(std::char_traits<char>::length(s)) {}
  piece(std::string_view s) noexcept : text(s.empty() ? "" : s.data()), size(s.size()) {}
  piece(const std::string& s) noexcept : text(s.data()), size(s.size()) {}
  piece(char) = delete;  // not a number: write a one-character text
  piece(bool) = delete;
  template <class I, class = std::enable_if_t<std::is_integral_v<I>>>
  piece(I v) noexcept : size(static_cast<unsigned long long>(v)) {
    if constexpr (std::is_signed_v<I>) negative = v < 0, size = negative ? 0 - size : size;
  }
  const char* text = nullptr;  ///< null: a number, `size` its magnitude
  unsigned long long size;
  bool negative = false;
};
/// The pieces joined: what `a + b + std::to_string(n) + ...` builds, written
/// once, so that making a message is a call, not inlined std::string code.
KREX_DETAIL_NOINLINE inline std::string cat(std::initializer_list<piece> pieces) {
  std::string out;
  for (const piece& p : pieces) {
    char digits[24], *end = digits + sizeof digits, *b = end;
    for (unsigned long long v = p.size; p.text == nullptr && (b == end || v != 0); v /= 10)
      *--b = static_cast<char>('0' + v % 10);
    if (p.text == nullptr && p.negative) *--b = '-';
    p.text != nullptr ? out.append(p.text, p.size) : out.append(b, end);
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
  /// The same from texts (none built where it is thrown); a null `hint` is none.
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
    return detail::cat(
        {"krex: ", to_string(s), ": ", message,
         code > 0 && s != krex::step::backend  // strerror is not thread-safe
             ? detail::cat({": ", std::system_category().message(code)})
             : code != 0 ? detail::cat({" (code ", code, ")"}) : std::string(),
         hint.empty() ? "" : " — ", hint});
  }

  krex::step m_step;
  int m_code;
  std::string m_hint;
};

}  // namespace krex
