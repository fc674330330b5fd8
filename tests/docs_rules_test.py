#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The rules of the product documentation (README.md, docs/, and the READMEs
of python/ and scripts/); the lab (lab/) is exempt. Exits 1 naming every problem.

- No internal bookkeeping in prose: issue numbers ("issue 19"), run numbers
  ("run 12", "runs 12-13", "run B"), p-values, dates of sessions
  (2026-12-01). Code (fenced blocks, `inline code`) is exempt: a command is
  quoted as it is typed. Those belong to the lab's notes.
- Every fenced code block of README.md and of the guides (the files the
  index, docs/README.md, lists under "Getting started" and "Guides") is
  either run by a test, marked `<!-- test: NAME FILE -->` on the line
  before the fence with NAME a ctest test that exists, or marked
  `<!-- fragment -->`. Blocks of `text` or `json` (output) need no marker.
- README.md: at most 200 lines, an `## Install` heading, its first tested
  C++ block (the complete example) starting within the first 80 lines, and
  the Quick start's two commands, scripts/demo.sh and scripts/test.sh.
- docs/: at most 25 files, images included, and an index (docs/README.md)
  that links every other page of docs/.
- docs/REPORT.md lists every field of the region report, in the order of
  include/krex/report.hpp (visit_report_fields).

usage: docs_rules_test.py [SOURCE_DIR]
"""
import glob
import os
import re
import sys

from problems import report

NUMBERING = [
    (re.compile(r"\bissues?\s+#?\d+", re.I), "an issue number"),
    (re.compile(r"(?<![\w`])#\d+\b"), "an issue number"),
    (re.compile(r"\bruns?\s+\d+[a-z]?(?:\s*(?:-|–|,|and)\s*\d+[a-z]?)*\b"
                r"(?!\s*(?:%|x|×|commands?|workers?|process(?:es)?|profilers?|tests?|kernels?|times|"
                r"copies|jobs|benchmarks?|candidates?|GPUs?|tenants?|actors?|siblings?|samples?|"
                r"iterations?|regions?|warm|at|of|in|on|per|s|ms|us|min|seconds?|minutes?|hours?)\b)", re.I),
     "a run number"),
    (re.compile(r"\bruns?\s+[A-C](?:\s*(?:,|and)\s*[A-C])*\b(?![\w/+])"), "a run name"),
    (re.compile(r"\bp\s*(?:[<=>≤≥]|&lt;|&gt;)\s*0?\.\d|\bp\s+0?\.\d|\bp-values?\b|\bFisher\b", re.I), "a p-value"),
    (re.compile(r"\b20\d\d-\d\d-\d\d\b"), "a date"),
]
MARK = re.compile(r"^<!-- (fragment|test: (\S+) (\S+)) -->\s*$")
UNMARKED_OK = {"text", "json"}


def prose(text):
    """The text without fenced blocks, inline code, link targets and HTML comments."""
    text = re.sub(r"(?ms)^\s*```.*?^\s*```[^\n]*$", "", text)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.sub(r"\]\([^)]*\)", "]", text)


def numbering_problems(rel, text):
    out = []
    for n, line in enumerate(prose(text).split("\n"), 1):
        for rx, what in NUMBERING:
            m = rx.search(line)
            if m:
                out.append(f"{rel}: {what} in prose: '{m.group(0)}' (near: {line.strip()[:90]!r}); "
                           "it belongs in a lab note (lab/results/)")
    return out


def fences(text):
    """(line number, info string, marker line) of each fenced block's opening."""
    out, lines, inside = [], text.split("\n"), False
    for i, line in enumerate(lines):
        s = line.strip()
        if not s.startswith("```"):
            continue
        if not inside:
            out.append((i + 1, s[3:].strip(), lines[i - 1].strip() if i else ""))
        inside = not inside
    return out


def registered_tests(root):
    names = set()
    for f in ["CMakeLists.txt", "tests/CMakeLists.txt", "lab/CMakeLists.txt", "examples/CMakeLists.txt",
              "bench/CMakeLists.txt"] + glob.glob(os.path.join(root, "cmake", "*.cmake")):
        path = f if os.path.isabs(f) else os.path.join(root, f)
        if os.path.exists(path):
            names |= set(re.findall(r"\bNAME\s+([\w.-]+)", open(path, encoding="utf-8").read()))
    return names


def fence_problems(rel, text, tests):
    out = []
    for line, info, mark in fences(text):
        m = MARK.match(mark)
        if m and m.group(1) == "fragment":
            continue
        if m:
            if m.group(2) not in tests:
                out.append(f"{rel}:{line}: marked for test '{m.group(2)}', which no CMakeLists.txt registers")
            continue
        lang = info.split()[0] if info else ""
        if lang in UNMARKED_OK:
            continue
        out.append(f"{rel}:{line}: a ```{lang} block neither tested (<!-- test: NAME FILE -->) nor "
                   "marked <!-- fragment --> on the line before it")
    return out


def index_sections(index_text, headings):
    """The docs/ pages the index links under the given '## ' headings."""
    out, cur = [], None
    for line in index_text.split("\n"):
        h = re.match(r"^##\s+(.*)", line)
        if h:
            cur = h.group(1).strip()
            continue
        if cur in headings:
            out += [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", line)
                    if not re.match(r"^[a-z]+:", t) and not t.startswith("..")]
    return sorted(set(t for t in out if t.endswith(".md")))


def readme_problems(text, tests):
    out, lines = [], text.split("\n")
    if len(lines) - (1 if text.endswith("\n") else 0) > 200:
        out.append(f"README.md: {len(lines) - 1} lines; at most 200")
    if "## Install" not in lines:
        out.append("README.md: no '## Install' heading")
    first = next((n for n, info, mark in fences(text)
                  if info in ("cpp", "c++") and MARK.match(mark) and MARK.match(mark).group(2)), None)
    if first is None or first > 80:
        out.append(f"README.md: the first complete (tested) C++ example starts at line {first}; within 80")
    qs = re.search(r"(?ms)^## Quick start\n(.*?)^## ", text)
    cmds = re.findall(r"(?m)^(scripts/\S+)", qs.group(1)) if qs else []
    if cmds != ["scripts/demo.sh", "scripts/test.sh"]:
        out.append(f"README.md: the Quick start's commands are {cmds}, not scripts/demo.sh and scripts/test.sh")
    return out


def docs_dir_problems(root):
    out, files = [], []
    for d, _, names in os.walk(os.path.join(root, "docs")):
        files += [os.path.relpath(os.path.join(d, n), os.path.join(root, "docs")) for n in names]
    if len(files) > 25:
        out.append(f"docs/ holds {len(files)} files; at most 25 (move the rest to lab/)")
    index = os.path.join(root, "docs", "README.md")
    if not os.path.exists(index):
        return out + ["docs/README.md, the index, is missing"]
    text = open(index, encoding="utf-8").read()
    linked = {os.path.normpath(t.split("#")[0]) for t in re.findall(r"\]\(([^)\s]+)\)", text)}
    for f in sorted(files):
        if f.endswith(".md") and f != "README.md" and f not in linked:
            out.append(f"docs/README.md does not link docs/{f}")
    return out


def report_fields_problems(root):
    """docs/REPORT.md's field table lists the report's fields, in the order
    include/krex/report.hpp's visit_report_fields gives them."""
    src = open(os.path.join(root, "include", "krex", "report.hpp"), encoding="utf-8").read()
    want = re.findall(r"^\s*KREX_REPORT_FIELD\((\w+),", src, re.M)
    path = os.path.join(root, "docs", "REPORT.md")
    if not os.path.exists(path):
        return ["docs/REPORT.md, the report fields, is missing"]
    doc = open(path, encoding="utf-8").read()
    start = doc.find("| field | meaning |")
    got = re.findall(r"^\| `(\w+)` \|", doc[start:], re.M) if start >= 0 else []
    if not want:
        return ["include/krex/report.hpp: no KREX_REPORT_FIELD found"]
    if got != want:
        missing = [f for f in want if f not in got]
        extra = [f for f in got if f not in want]
        return [f"docs/REPORT.md's field table differs from visit_report_fields: missing {missing}, "
                f"not fields {extra}" + ("" if missing or extra else ", order differs")]
    return []


def self_test(tests):
    """Each rule can fail."""
    missed = []
    for bad in ["as issue 19 asks", "runs 12-13 show", "in run 4 the", "(p 0.029)", "p < 0.001",
                "on 2026-12-01", "run B's numbers", "see #19"]:
        if not numbering_problems("x", bad):
            missed.append(f"self-test: numbering not caught: {bad!r}")
    for good in ["runs 16 commands at once", "run 8 workers", "`eval.sh issue11`", "the p95 of",
                 "a run of 10 ms", "```\nrun 12\n```", "runs A/B comparisons"]:
        if numbering_problems("x", good):
            missed.append(f"self-test: caught in good text: {good!r}: {numbering_problems('x', good)}")
    if not fence_problems("x", "text\n```cpp\nint x;\n```\n", tests):
        missed.append("self-test: an unmarked cpp block passed")
    if fence_problems("x", "<!-- fragment -->\n```cpp\nint x;\n```\n```text\nout\n```\n", tests):
        missed.append("self-test: a marked cpp block or a text block failed")
    if not fence_problems("x", "<!-- test: no_such_test a.cpp -->\n```cpp\nint x;\n```\n", tests):
        missed.append("self-test: a marker naming no test passed")
    return missed


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    tests = registered_tests(root)
    problems = self_test(tests)
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    problems += readme_problems(readme, tests)
    problems += numbering_problems("README.md", readme) + fence_problems("README.md", readme, tests)
    problems += docs_dir_problems(root) + report_fields_problems(root)
    others = [os.path.join(root, "python", "README.md"), os.path.join(root, "scripts", "README.md")]
    for path in sorted(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True)) + others:
        problems += numbering_problems(os.path.relpath(path, root), open(path, encoding="utf-8").read())
    index = os.path.join(root, "docs", "README.md")
    if os.path.exists(index):
        guides = index_sections(open(index, encoding="utf-8").read(), {"Getting started", "Guides"})
        if not guides:
            problems.append("docs/README.md lists no page under 'Getting started' or 'Guides'")
        for g in guides:
            path = os.path.join(root, "docs", g)
            if os.path.exists(path):
                problems += fence_problems("docs/" + g, open(path, encoding="utf-8").read(), tests)
    return report("docs_rules_test", problems)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
