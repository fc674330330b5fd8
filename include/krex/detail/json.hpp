// SPDX-License-Identifier: Apache-2.0
#pragma once

// The little JSON the library itself writes (krex::to_json(region_report)):
// string literals that are valid JSON whatever bytes they are given. Tools
// that write more JSON have their own writer (tools/krex_tools/json.hpp),
// which escapes strings with this one; this stays dependency-free.

#include <cstddef>
#include <string>
#include <string_view>

namespace krex::detail {

/// Length of the well-formed UTF-8 sequence that starts at s[i] (1..4), or 0
/// if the bytes there are not one (Unicode 15, table 3-7: no overlong forms,
/// no surrogates, nothing above U+10FFFF).
inline std::size_t utf8_sequence_length(std::string_view s, std::size_t i) noexcept {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return 1;
  std::size_t n = 0;
  unsigned char lo = 0x80;  // the range of the second byte
  unsigned char hi = 0xbf;
  if (b0 >= 0xc2 && b0 <= 0xdf) {
    n = 2;
  } else if (b0 >= 0xe0 && b0 <= 0xef) {
    n = 3;
    if (b0 == 0xe0) lo = 0xa0;
    if (b0 == 0xed) hi = 0x9f;
  } else if (b0 >= 0xf0 && b0 <= 0xf4) {
    n = 4;
    if (b0 == 0xf0) lo = 0x90;
    if (b0 == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (s.size() - i < n) return 0;
  const auto b1 = static_cast<unsigned char>(s[i + 1]);
  if (b1 < lo || b1 > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (b < 0x80 || b > 0xbf) return 0;
  }
  return n;
}

/// Appends the inside of a JSON string literal for s (RFC 8259): quote,
/// backslash and control characters escaped. Bytes that are not UTF-8 become
/// U+FFFD: report notes and krexctl's output carry paths and process names
/// read from the system, and one stray byte must not make the whole document
/// unreadable. The one escaper of krex: the library's and the tools' JSON.
inline void append_json_escaped(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    const std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      out += "\\ufffd";
      ++i;
      continue;
    }
    if (n > 1) {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += hex[static_cast<unsigned char>(c) >> 4];
          out += hex[static_cast<unsigned char>(c) & 0xf];
        } else {
          out += c;
        }
    }
    ++i;
  }
}

/// Appends s to out as a JSON string literal: quotes around append_json_escaped.
inline void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  append_json_escaped(out, s);
  out += '"';
}

}  // namespace krex::detail
