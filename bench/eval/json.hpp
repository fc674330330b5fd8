// SPDX-License-Identifier: Apache-2.0
#pragma once

// Just enough JSON for the evaluation: a writer for flat objects (the
// worker's one-line results) and a reader for the same shape (the driver):
// string, number, bool and number-array values, no nesting.

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

namespace krex_eval {

inline std::string json_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size() + 2);
  for (char c : s) {
    switch (c) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += c;
        }
    }
  }
  return o;
}

inline std::string json_num(double v) {
  if (!std::isfinite(v)) return "null";
  char b[32];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

/// Builds one flat JSON object.
class json_object {
 public:
  json_object& str(const std::string& k, const std::string& v) {
    return raw(k, "\"" + json_escape(v) + "\"");
  }
  json_object& num(const std::string& k, double v) { return raw(k, json_num(v)); }
  json_object& boolean(const std::string& k, bool v) { return raw(k, v ? "true" : "false"); }
  json_object& nums(const std::string& k, const std::vector<double>& v) {
    std::string s = "[";
    for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + json_num(v[i]);
    return raw(k, s + "]");
  }
  /// `v` must already be valid JSON.
  json_object& raw(const std::string& k, const std::string& v) {
    m_s += (m_s.empty() ? "{" : ",") + std::string("\"") + json_escape(k) + "\":" + v;
    return *this;
  }
  std::string text() const { return m_s.empty() ? "{}" : m_s + "}"; }

 private:
  std::string m_s;
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
