// SPDX-License-Identifier: Apache-2.0
#pragma once

// The JSON writer krexctl, krex_demo and krex_eval share (tools and benches
// only: the library headers never include it). It writes compact JSON,
// nesting included: separators and escaping are its business, so a caller
// cannot produce a document that does not parse.
//
//   krex_tools::json::writer j;
//   j.begin_object().field("segment", path).key("removed").begin_array();
//   for (...) j.value(p);
//   j.end_array().end_object();
//   std::puts(j.str().c_str());

#include <krex/detail/json.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace krex_tools::json {

/// `s` as the inside of a JSON string: krex's one escaper
/// (krex::detail::append_json_escaped: quote, backslash and control
/// characters escaped, UTF-8 passed through, other bytes as U+FFFD).
inline std::string escape(std::string_view s) {
  std::string o;
  o.reserve(s.size() + 2);
  krex::detail::append_json_escaped(o, s);
  return o;
}

/// `v` as a JSON number: the shortest text that reads back as `v`, or
/// `significant` digits (%g) when given; null when not finite (JSON has no NaN).
inline std::string number(double v, int significant = 0) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  if (significant > 0) {
    std::snprintf(b, sizeof b, "%.*g", significant, v);
    return b;
  }
  const auto r = std::to_chars(b, b + sizeof b, v);
  return std::string(b, r.ptr);
}

/// Writes one JSON document. Misuse (a value where a key is due, an
/// unbalanced end) throws std::logic_error: a bug in the tool, never input.
class writer {
 public:
  writer& begin_object() { return open('{'); }
  writer& end_object() { return close('{', '}'); }
  writer& begin_array() { return open('['); }
  writer& end_array() { return close('[', ']'); }

  /// The key of the next value (objects only).
  writer& key(std::string_view k) {
    if (m_stack.empty() || m_stack.back().kind != '{' || m_key_pending)
      throw std::logic_error("json::writer: a key outside an object or after a key");
    comma();
    m_s += '"';
    m_s += escape(k);
    m_s += "\":";
    m_key_pending = true;
    return *this;
  }

  writer& value(std::string_view v) {
    item();
    m_s += '"';
    m_s += escape(v);
    m_s += '"';
    return *this;
  }
  writer& value(const char* v) { return value(std::string_view(v)); }
  writer& value(const std::string& v) { return value(std::string_view(v)); }
  writer& value(bool v) {
    item();
    m_s += v ? "true" : "false";
    return *this;
  }
  writer& value(double v, int significant = 0) {
    item();
    m_s += number(v, significant);
    return *this;
  }
  template <class Int, std::enable_if_t<std::is_integral_v<Int> && !std::is_same_v<Int, bool>,
                                        int> = 0>
  writer& value(Int v) {
    item();
    m_s += std::to_string(v);
    return *this;
  }
  writer& null() {
    item();
    m_s += "null";
    return *this;
  }
  /// `json` must be one complete JSON value (e.g. another writer's str()).
  writer& raw(std::string_view json) {
    item();
    m_s += json;
    return *this;
  }
  /// An array of numbers.
  writer& values(const std::vector<double>& v, int significant = 0) {
    begin_array();
    for (const double x : v) value(x, significant);
    return end_array();
  }

  /// key(k).value(v), for any value() overload.
  template <class T>
  writer& field(std::string_view k, const T& v) {
    return key(k).value(v);
  }
  writer& field(std::string_view k, double v, int significant) {
    return key(k).value(v, significant);
  }

  /// True once the document is complete.
  bool done() const noexcept { return m_stack.empty() && !m_s.empty(); }
  /// The document (complete or not).
  const std::string& str() const noexcept { return m_s; }

 private:
  struct level {
    char kind;
    bool first;
  };
  void comma() {
    if (!m_stack.back().first) m_s += ',';
    m_stack.back().first = false;
  }
  void item() {
    if (m_stack.empty()) {
      if (!m_s.empty()) throw std::logic_error("json::writer: a second top-level value");
      return;
    }
    if (m_stack.back().kind == '{') {
      if (!m_key_pending) throw std::logic_error("json::writer: a value without a key");
      m_key_pending = false;
      return;
    }
    comma();
  }
  writer& open(char kind) {
    item();
    m_s += kind;
    m_stack.push_back({kind, true});
    return *this;
  }
  writer& close(char kind, char c) {
    if (m_stack.empty() || m_stack.back().kind != kind || m_key_pending)
      throw std::logic_error("json::writer: unbalanced end");
    m_stack.pop_back();
    m_s += c;
    return *this;
  }

  std::string m_s;
  std::vector<level> m_stack;
  bool m_key_pending = false;
};

}  // namespace krex_tools::json
