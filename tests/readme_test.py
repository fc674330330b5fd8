#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Builds and runs the code blocks of README.md that are marked for a test,
as a user would: each fenced block preceded by `<!-- test: NAME FILE -->` is
written to FILE in a fresh directory.

  readme_test.py cpp SOURCE_DIR PREFIX WORK_DIR CMAKE [CMAKE_ARGS...]
      NAME readme_example: main.cpp and CMakeLists.txt are configured with
      CMAKE against the krex installed at PREFIX (find_package(krex) through
      CMAKE_PREFIX_PATH only: no package registry, no build tree), built,
      and run on the host backend; what it prints must match the `output`
      block line by line, where every number may differ and the protection
      level may be any that gated and drained (it depends on the machine).
      Its segment is removed afterwards with PREFIX/bin/krexctl clean.
  readme_test.py python SOURCE_DIR
      NAME readme_python: every FILE is run with this interpreter (krex
      importable: PYTHONPATH) and must exit 0 and print something.

The docs rules test (tests/docs_rules_test.py) checks that every code block
of the README and the guides is either marked for a test that exists or
marked as a fragment. Exits 1 naming the problem.
"""
import os
import re
import subprocess
import sys
import tempfile
import time

MARK = re.compile(r"^<!-- test: (\S+) (\S+) -->\s*$")


def blocks(path, name):
    """{FILE: text} of the fenced blocks of `path` marked `<!-- test: name FILE -->`."""
    out, lines = {}, open(path, encoding="utf-8").read().split("\n")
    for i, line in enumerate(lines):
        m = MARK.match(line)
        if not m or m.group(1) != name:
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("```"):
            raise SystemExit(f"readme_test: {path}:{i + 1}: the marker is not right before a fence")
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
        out[m.group(2)] = "\n".join(lines[i + 2:end]) + "\n"
    return out


def pattern(line):
    """A shown output line as a regex: numbers vary, and so does the protection
    level past "gate+drain" (freeze method, pinning: what the machine allows)."""
    if line.startswith("protection: "):
        return re.escape("protection: ") + r"gate\+drain\S*"
    return re.sub(r"\\?-?\d+(?:\\\.\d+)?", r"-?\\d+(?:\\.\\d+)?", re.escape(line))


def check_output(shown, got):
    want = [l for l in shown.strip().split("\n")]
    have = got.strip().split("\n")
    problems = []
    if len(want) != len(have):
        problems.append(f"README shows {len(want)} lines of output, the program printed {len(have)}")
    for w, h in zip(want, have):
        if not re.fullmatch(pattern(w), h):
            problems.append(f"README shows {w!r}, the program printed {h!r}")
    return problems


def run_cpp(root, prefix, work, cmake, cmake_args):
    b = blocks(os.path.join(root, "README.md"), "readme_example")
    for f in ("main.cpp", "CMakeLists.txt", "output"):
        if f not in b:
            print(f"readme_test: README.md has no block marked 'test: readme_example {f}'", file=sys.stderr)
            return 1
    lines = b["main.cpp"].rstrip("\n").count("\n") + 1
    if lines > 30:
        print(f"readme_test: README.md's example is {lines} lines; at most 30", file=sys.stderr)
        return 1
    src, bld = os.path.join(work, "hello"), os.path.join(work, "hello", "build")
    subprocess.run(["rm", "-rf", src], check=True)
    os.makedirs(src)
    for f in ("main.cpp", "CMakeLists.txt"):
        with open(os.path.join(src, f), "w", encoding="utf-8") as fh:
            fh.write(b[f])
    cmds = [[cmake, "-S", src, "-B", bld, "-DCMAKE_PREFIX_PATH=" + prefix,
             "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"] + cmake_args,
            [cmake, "--build", bld]]
    for c in cmds:
        r = subprocess.run(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)
        if r.returncode != 0:
            print(r.stdout + f"\nreadme_test: failed ({r.returncode}): {' '.join(c)}", file=sys.stderr)
            return 1
    with open(os.path.join(bld, "CMakeCache.txt"), encoding="utf-8") as fh:
        found = re.search(r"^krex_DIR:PATH=(.*)$", fh.read(), re.M)
    if not found or not os.path.realpath(found.group(1)).startswith(os.path.realpath(prefix) + os.sep):
        print(f"readme_test: krex was not found under {prefix}: {found and found.group(1)}", file=sys.stderr)
        return 1
    env = dict(os.environ, KREX_SEGMENT="readme-%d" % os.getpid())
    try:
        r = subprocess.run([os.path.join(bld, "hello")], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, universal_newlines=True, timeout=120)
    finally:
        clean(os.path.join(prefix, "bin", "krexctl"), env)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    problems = [f"the example exited {r.returncode}"] if r.returncode else []
    problems += check_output(b["output"], r.stdout)
    for p in problems:
        print("readme_test: " + p, file=sys.stderr)
    return 1 if problems else 0


def clean(krexctl, env):
    """krexctl clean --segment $KREX_SEGMENT, retried while the guardian lingers."""
    if not os.path.exists(krexctl):
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        out = subprocess.run([krexctl, "clean", "--segment", env["KREX_SEGMENT"]], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             universal_newlines=True, timeout=30).stdout
        if "in use" not in out:
            return
        time.sleep(0.2)


def run_python(root):
    b = blocks(os.path.join(root, "README.md"), "readme_python")
    if not b:
        print("readme_test: README.md has no block marked 'test: readme_python FILE'", file=sys.stderr)
        return 1
    problems = []
    with tempfile.TemporaryDirectory(prefix="krex-readme-") as d:
        # The segment in a directory of the test's own (KREX_SHM_DIR), removed with it.
        shm = os.path.join(d, "shm")
        os.mkdir(shm, 0o700)
        env = dict(os.environ, KREX_SEGMENT="readme-py", KREX_SHM_DIR=shm)
        for f, text in sorted(b.items()):
            path = os.path.join(d, f)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
            r = subprocess.run([sys.executable, path], cwd=d, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, universal_newlines=True, timeout=240)
            print(f"--- {f}\n{r.stdout}")
            if r.returncode != 0 or not r.stdout.strip():
                problems.append(f"{f}: exit {r.returncode}, output {r.stdout.strip()[-400:]!r}")
    for p in problems:
        print("readme_test: " + p, file=sys.stderr)
    return 1 if problems else 0


def self_test():
    """The output check can fail: a changed word, a missing line, an ungated level."""
    shown = "10 kernels in 181.94 ms\nprotection: gate+drain+freeze(cgroup2)+pin\nothers frozen: 0, warnings: 1\n"
    ok = check_output(shown, "10 kernels in 7 ms\nprotection: gate+drain+pin\nothers frozen: 3, warnings: 0\n")
    bad = [check_output(shown, "10 kernels in 7 ms\nprotection: none\nothers frozen: 3, warnings: 0"),
           check_output(shown, "10 kernels in 7 ms\nprotection: gate+drain\n"),
           check_output(shown, "11 kernel in 7 ms\nprotection: gate+drain\nothers frozen: 3, warnings: 0")]
    return [] if not ok and all(bad) else ["self-test: the output check " + repr((ok, bad))]


def main(argv):
    problems = self_test()
    if problems:
        print("readme_test: " + problems[0], file=sys.stderr)
        return 1
    if len(argv) >= 6 and argv[1] == "cpp":
        return run_cpp(argv[2], argv[3], argv[4], argv[5], argv[6:])
    if len(argv) == 3 and argv[1] == "python":
        return run_python(argv[2])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
