// SPDX-License-Identifier: Apache-2.0
#pragma once

// Just enough JSON for the evaluation: flat objects (the worker's one-line
// results) written with the tools' shared writer (tools/krex_tools/json.hpp),
// and a reader for the same shape (the driver): string, number, bool and
// number-array values, no nesting.

// Included by path: the tests and the CUDA worker include this header
// without the krex_tools include directory.
#include "../../tools/krex_tools/json.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace krex_eval {

inline std::string json_escape(const std::string& s) { return krex_tools::json::escape(s); }

/// The eval's numbers: 6 significant digits, null when not finite.
inline constexpr int json_digits = 6;
inline std::string json_num(double v) { return krex_tools::json::number(v, json_digits); }

/// Builds one flat JSON object (the worker's one-line results) with the
/// tools' shared writer.
class json_object {
 public:
  json_object() { m_w.begin_object(); }
  json_object& str(const std::string& k, const std::string& v) {
    m_w.field(k, v);
    return *this;
  }
  json_object& num(const std::string& k, double v) {
    m_w.field(k, v, json_digits);
    return *this;
  }
  /// An integer, every digit (e.g. CLOCK_MONOTONIC nanoseconds; the reader
  /// keeps integers up to 2^53 exact).
  json_object& integer(const std::string& k, long long v) {
    m_w.field(k, v);
    return *this;
  }
  json_object& boolean(const std::string& k, bool v) {
    m_w.field(k, v);
    return *this;
  }
  json_object& nums(const std::string& k, const std::vector<double>& v) {
    m_w.key(k).values(v, json_digits);
    return *this;
  }
  /// `v` must already be valid JSON.
  json_object& raw(const std::string& k, const std::string& v) {
    m_w.key(k).raw(v);
    return *this;
  }
  std::string text() const { return m_w.str() + "}"; }

 private:
  krex_tools::json::writer m_w;
};

/// A parsed flat object: strings, numbers (null reads as NaN), bools (as 0/1
/// numbers) and number arrays.
struct flat_record {
  std::map<std::string, std::string> strs;
  std::map<std::string, double> nums;
  std::map<std::string, std::vector<double>> arrays;

  double num(const std::string& k, double def = NAN) const {
    auto it = nums.find(k);
    return it == nums.end() ? def : it->second;
  }
  std::string str(const std::string& k) const {
    auto it = strs.find(k);
    return it == strs.end() ? std::string() : it->second;
  }
};

namespace detail {
struct cursor {
  const std::string& s;
  std::size_t i = 0;
  void ws() {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
  }
  bool eat(char c) {
    ws();
    if (i < s.size() && s[i] == c) {
      ++i;
      return true;
    }
    return false;
  }
  bool string(std::string* out) {
    if (!eat('"')) return false;
    out->clear();
    while (i < s.size() && s[i] != '"') {
      char c = s[i++];
      if (c == '\\' && i < s.size()) {
        const char e = s[i++];
        switch (e) {
          case 'n': c = '\n'; break;
          case 'r': c = '\r'; break;
          case 't': c = '\t'; break;
          case 'u':
            if (i + 4 > s.size()) return false;
            c = static_cast<char>(std::strtol(s.substr(i, 4).c_str(), nullptr, 16));
            i += 4;
            break;
          default: c = e;
        }
      }
      *out += c;
    }
    return i++ < s.size();
  }
  bool number(double* out) {
    ws();
    if (s.compare(i, 4, "null") == 0) {
      i += 4;
      *out = NAN;
      return true;
    }
    const char* b = s.c_str() + i;
    char* e = nullptr;
    *out = std::strtod(b, &e);
    if (e == b) return false;
    i += static_cast<std::size_t>(e - b);
    return true;
  }
};
}  // namespace detail

/// Parses one flat object; false (and *why set) on anything else.
inline bool parse_flat(const std::string& text, flat_record* r, std::string* why) {
  detail::cursor c{text};
  const auto fail = [&](const char* what) {
    if (why != nullptr) *why = std::string(what) + " at offset " + std::to_string(c.i);
    return false;
  };
  if (!c.eat('{')) return fail("expected '{'");
  if (c.eat('}')) return true;
  for (;;) {
    std::string k;
    if (!c.string(&k)) return fail("expected a key");
    if (!c.eat(':')) return fail("expected ':'");
    c.ws();
    if (c.i < text.size() && text[c.i] == '"') {
      std::string v;
      if (!c.string(&v)) return fail("bad string");
      r->strs[k] = v;
    } else if (c.eat('[')) {
      std::vector<double> a;
      if (!c.eat(']')) {
        for (;;) {
          double x = 0;
          if (!c.number(&x)) return fail("bad array element");
          a.push_back(x);
          if (c.eat(']')) break;
          if (!c.eat(',')) return fail("expected ',' or ']'");
        }
      }
      r->arrays[k] = std::move(a);
    } else if (text.compare(c.i, 4, "true") == 0) {
      c.i += 4;
      r->nums[k] = 1;
    } else if (text.compare(c.i, 5, "false") == 0) {
      c.i += 5;
      r->nums[k] = 0;
    } else {
      double x = 0;
      if (!c.number(&x)) return fail("bad value");
      r->nums[k] = x;
    }
    if (c.eat('}')) break;
    if (!c.eat(',')) return fail("expected ',' or '}'");
  }
  c.ws();
  if (c.i != text.size()) return fail("trailing characters");
  return true;
}

}  // namespace krex_eval
