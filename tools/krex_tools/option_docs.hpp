// SPDX-License-Identifier: Apache-2.0
#pragma once

// What is generated from the option tables (detail/option_table.hpp, and
// pool_options' detail::pool_option_table): README.md's options table,
// docs/PYTHON.md's keyword table, python/krex/_krex.pyi's Tenant keywords
// docs/POOL.md's pool_options table and docs/CUDA.md's measure_options table. `krexctl options --write DIR`
// rewrites them in the source tree DIR (regenerate()); tests/test_tables.cpp
// fails while a file differs from what regenerate() makes of it. Tools and
// tests only: the library never includes this.

#include <krex/measure.hpp>
#include <krex/options.hpp>
#include <krex/pool_options.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace krex_tools {

namespace kd = krex::detail;

/// The option's default as README.md's table writes it.
inline std::string option_default_text(const kd::option_spec& s) {
  switch (s.kind) {
    case kd::option_kind::integer:
    case kd::option_kind::milliseconds: return std::to_string(s.def);
    case kd::option_kind::boolean: return s.def != 0 ? "true" : "false";
    case kd::option_kind::path:
      return *s.def_text == '\0' ? std::string("derived") : "`" + std::string(s.def_text) + "`";
    case kd::option_kind::segment_name: return "`" + std::string(s.def_text) + "`";
    case kd::option_kind::choice: return "`" + std::string(s.choices->names[s.def]) + "`";
  }
  return "?";
}

/// What the option does (a choice without a doc: its names).
inline std::string option_doc(const kd::option_spec& s) {
  return *s.doc == '\0' && s.choices != nullptr ? kd::choice_list(*s.choices, "`", "`") : s.doc;
}

/// README.md's options table, header included, one line per row, each
/// ending in '\n' (`krexctl options --markdown` prints it).
inline std::string options_markdown() {
  std::string out = "| setter | environment | default | meaning |\n|---|---|---|---|\n";
  for (const kd::option_spec& s : kd::option_table)
    out += std::string("| `") + s.name + "` | `" + s.env + "` | " + option_default_text(s) +
           " | " + option_doc(s) + " |\n";
  return out;
}

/// The Python type of an option's keyword.
inline std::string python_type(const kd::option_spec& s) {
  switch (s.kind) {
    case kd::option_kind::integer:
    case kd::option_kind::milliseconds: return "int";
    case kd::option_kind::boolean: return "bool";
    default: return "str";
  }
}

/// docs/PYTHON.md's keyword table: one row per option.
inline std::string python_keywords_markdown() {
  std::string out = "| keyword | type | default | environment |\n|---|---|---|---|\n";
  for (const kd::option_spec& s : kd::option_table) {
    std::string type = python_type(s), def = option_default_text(s);
    if (s.kind == kd::option_kind::choice) {
      type = kd::choice_list(*s.choices, "`\"", "\"`");
      def = std::string("`\"") + s.choices->names[s.def] + "\"`";
    } else if (s.kind == kd::option_kind::segment_name) {
      def = std::string("`\"") + s.def_text + "\"`";
    } else if (s.kind == kd::option_kind::boolean) {
      def = s.def != 0 ? "`True`" : "`False`";
    } else if (s.kind == kd::option_kind::path && *s.def_text != '\0') {
      def = std::string("`\"") + s.def_text + "\"`";
    }
    out += std::string("| `") + s.python + "` | " + type + " | " + def + " | `" + s.env + "` |\n";
  }
  return out;
}

/// python/krex/_krex.pyi: Tenant.__init__'s keyword-only parameters.
inline std::string pyi_tenant_keywords() {
  std::string out;
  for (const kd::option_spec& s : kd::option_table)
    if (s.id != kd::option_id::device)
      out += std::string("        ") + s.python + ": " + python_type(s) + " = ...,\n";
  return out;
}

/// docs/POOL.md's pool_options table.
inline std::string pool_options_markdown() {
  std::string out = "| setter | default | meaning |\n|---|---|---|\n";
  for (const kd::pool_option_spec& s : kd::pool_option_table) {
    std::string def = s.def_text != nullptr ? s.def_text : std::to_string(s.def), doc = s.doc;
    if (s.def_text == nullptr && s.kind == kd::option_kind::boolean)
      def = s.def != 0 ? "true" : "false";
    if (s.def_text == nullptr && s.kind == kd::option_kind::milliseconds)
      def = std::to_string(s.def / 1000) + " s";
    if (s.def_text == nullptr && s.kind == kd::option_kind::integer)
      doc += ", " + std::to_string(s.lo) + ".." + std::to_string(s.hi);
    out += std::string("| `") + s.name + "(" + s.arg + ")` | " + def + " | " + doc + " |\n";
  }
  return out;
}

/// docs/CUDA.md's measure_options table.
inline std::string measure_options_markdown() {
  std::string out = "| field | Python keyword | default | meaning |\n|---|---|---|---|\n";
  for (const kd::measure_option_spec& s : kd::measure_option_table) {
    const std::string type = s.type;
    std::string def = std::to_string(s.def);
    if (type == "bool") def = s.def != 0 ? "true" : "false";
    if (type == "us" || type == "ms") def += " " + type;
    out += std::string("| `") + s.name + "` | " +
           (s.python != nullptr ? "`" + std::string(s.python) + "`" : std::string("—")) + " | " +
           def + " | " + s.doc + " |\n";
  }
  return out;
}

/// `text` with its lines from the one equal to `first` through the last of
/// the block (a Markdown table: the lines starting with '|'; else up to the
/// line before `end`) replaced by `block`; "" when `first` is missing.
inline std::string replace_block(const std::string& text, const std::string& first,
                                 const std::string& block, const std::string& end = "") {
  std::istringstream in(text);
  std::string out, line;
  bool found = false, inside = false;
  while (std::getline(in, line)) {
    if (!found && line == first) {
      found = inside = true;
      if (!end.empty()) out += line + "\n";
      out += block;
      continue;
    }
    if (inside) {
      if (end.empty() ? (!line.empty() && line[0] == '|') : line != end) continue;
      inside = false;
    }
    out += line + "\n";
  }
  return found && !inside ? out : "";
}

/// A generated part of a file of the source tree.
struct generated_part {
  const char* file;   ///< relative to the source tree
  std::string first;  ///< the line it starts at (a table's header; a .pyi: the line before)
  std::string text;   ///< what it is
  std::string end;    ///< the line after it (a .pyi), or "" for a Markdown table
};

inline std::vector<generated_part> generated_parts() {
  const std::string opt = options_markdown(), py = python_keywords_markdown(),
                    pool = pool_options_markdown(), measure = measure_options_markdown();
  return {
      {"README.md", opt.substr(0, opt.find('\n')), opt, ""},
      {"docs/PYTHON.md", py.substr(0, py.find('\n')), py, ""},
      {"python/krex/_krex.pyi", "        *,", pyi_tenant_keywords(), "    ) -> None: ..."},
      {"docs/POOL.md", pool.substr(0, pool.find('\n')), pool, ""},
      {"docs/CUDA.md", measure.substr(0, measure.find('\n')), measure, ""},
  };
}

/// `text` (the file of `part`) with the part regenerated; "" when the part's
/// first line is missing.
inline std::string regenerate(const generated_part& part, const std::string& text) {
  return replace_block(text, part.first, part.text, part.end);
}

inline std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

/// Rewrites every generated part under the source tree `root`; the files
/// it could not (a part's first line missing), one per line.
inline std::string write_generated(const std::string& root) {
  std::string failed;
  for (const generated_part& p : generated_parts()) {
    const std::string path = root + "/" + p.file, text = read_text(path),
                      fresh = regenerate(p, text);
    if (fresh.empty()) {
      failed += path + ": no line '" + p.first + "'\n";
      continue;
    }
    if (fresh == text) continue;
    std::ofstream(path, std::ios::binary | std::ios::trunc) << fresh;
  }
  return failed;
}

}  // namespace krex_tools
