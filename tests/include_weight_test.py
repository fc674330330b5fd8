#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The include weight of <krex/region.hpp>: how many krex headers, and how
many lines of them, a translation unit that includes it compiles (the host
backend, as `g++ -E -H` lists them), header-only and under
KREX_SEPARATE_COMPILATION. Fails above the limits below, so the weight can
only go down (docs/ARCHITECTURE.md, "Include weight"); and fails if the
separate-compilation weight is above half of the weight before issue 22.

usage: include_weight_test.py SOURCE_DIR [CXX]
"""
import os
import subprocess
import sys
import tempfile

# Before issue 22: 37 headers, 7,959 lines. Header-only, a translation unit
# compiles the join and the region (krex/impl/); under
# KREX_SEPARATE_COMPILATION only their declarations (docs/ARCHITECTURE.md).
BEFORE_ISSUE_22 = 7959
LIMITS = {
    ("krex/region.hpp", ""): (47, 10089),
    ("krex/region.hpp", "KREX_SEPARATE_COMPILATION"): (22, 3608),
}


def weight(root, cxx, header, define=""):
    """(krex headers, their lines) that including `header` compiles, with
    macro `define` defined (if not empty)."""
    inc = os.path.join(root, "include")
    defines = ["-D" + define] if define else []
    p = subprocess.run([cxx, "-std=c++17", "-I" + inc] + defines + ["-x", "c++", "-E", "-H", "-",
                                                                     "-o", os.devnull], input=f"#include <{header}>\n", capture_output=True,
                       text=True, check=False)
    if p.returncode != 0:
        raise SystemExit(f"include_weight_test: {cxx} failed:\n{p.stderr}")
    files = set()
    for line in p.stderr.splitlines():
        name = line.lstrip(".").strip()
        if line.startswith(".") and os.path.realpath(name).startswith(
                os.path.realpath(os.path.join(inc, "krex")) + os.sep):
            files.add(os.path.realpath(name))
    lines = 0
    for f in files:
        with open(f, encoding="utf-8") as fh:
            lines += sum(1 for _ in fh)
    return files, lines


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    cxx = argv[2] if len(argv) > 2 else "c++"
    problems = []
    for (header, define), (max_headers, max_lines) in LIMITS.items():
        files, lines = weight(root, cxx, header, define)
        mode = f"with {define}" if define else "header-only"
        print(f"include_weight_test: <{header}> {mode} pulls {len(files)} krex headers, {lines} "
              f"lines (limits {max_headers}, {max_lines})")
        # The measurement itself must see the header it starts from.
        if not any(f.endswith(os.sep + header.replace("/", os.sep)) for f in files):
            problems.append(f"{header} itself was not seen: the -H parsing is broken")
        if len(files) > max_headers:
            problems.append(f"<{header}> {mode} pulls {len(files)} krex headers, over {max_headers}")
        if lines > max_lines:
            problems.append(f"<{header}> {mode} pulls {lines} lines, over {max_lines}")
        if define == "KREX_SEPARATE_COMPILATION":
            # The compiled part must really be left out, and the goal held.
            if any(os.sep + "impl" + os.sep in f for f in files):
                problems.append(f"<{header}> {mode} still includes krex/impl/")
            if 2 * lines > BEFORE_ISSUE_22:
                problems.append(f"<{header}> {mode} pulls {lines} lines, over half of "
                                f"{BEFORE_ISSUE_22} (issue 22)")
    # The compiled part's translation unit without the macro is a usage error
    # that says what to do, not a program with every function defined twice.
    inc = os.path.join(root, "include")
    p = subprocess.run([cxx, "-std=c++17", "-I" + inc, "-x", "c++", "-fsyntax-only", "-"],
                       input="#include <krex/impl/src.hpp>\n", capture_output=True, text=True,
                       check=False)
    if p.returncode == 0 or "define it for the whole program (or link krex::compiled)" not in p.stderr:
        problems.append("<krex/impl/src.hpp> without KREX_SEPARATE_COMPILATION did not stop with "
                        f"its message (exit {p.returncode}): {p.stderr[:300]}")
    # A separate-compilation program without the compiled part fails to link
    # naming what is missing.
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "harness.cpp")
        with open(src, "w", encoding="utf-8") as fh:
            fh.write("#include <krex/region.hpp>\nint main() { krex::tenant t; krex::region r{t}; }\n")
        p = subprocess.run([cxx, "-std=c++17", "-DKREX_SEPARATE_COMPILATION", "-I" + inc, src,
                            "-o", os.path.join(d, "harness"), "-pthread"],
                           capture_output=True, text=True, check=False)
        if p.returncode == 0 or "link_krex_compiled_or_compile_krex_impl_src_hpp" not in p.stderr:
            problems.append("a KREX_SEPARATE_COMPILATION program without the compiled part did not "
                            f"fail to link naming it (exit {p.returncode})")
    for p in problems:
        print("include_weight_test:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
