#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Moves include/krex/detail/'s headers into one folder per subsystem
(issue 37, "Folders are the layers") and rewrites every path that names them.

MOVES below is the whole change: old path -> new path, relative to
include/krex/detail/. For each pair the script `git mv`s the file (when the
old one is there and the new one is not) and then, in every file git tracks
(headers, tests, testkit, bench, examples, python, tools, docs, lab, CMake),
rewrites `detail/OLD` to `detail/NEW` wherever it stands as a path (lab/'s
raw records, its logs and JSON, are left as they were written): in
`#include <krex/detail/...>` and `"..."`, in `include/krex/detail/...` in
prose and comments, in the Python and CMake tables that name headers. Nothing
else changes, so the script can be run again after branches that still use
the old paths are merged: files already moved stay, paths already rewritten
do not match again, and new uses of an old path are rewritten. MOVES_OUT
and MERGED do the same for the headers that left detail/ and for the tiny
ones merged into another.

usage: relayout.py [--check] [SOURCE_DIR]
  --check   change nothing; exit 1 if a file is still to move or a path still
            to rewrite (listing them)
"""
import os
import re
import subprocess
import sys

# old -> new, relative to include/krex/detail/. What stays at detail/'s root
# is the async-signal-safe base and the leaves every subsystem uses (as_safe,
# layout, proc, sys, identity, clocks, config, json, option_table) and the
# façade's boundary (core); the protocol steps stay in steps/.
MOVES = {
    # the node segment: the file, its checks, the segment object
    "segment.hpp": "segment/segment.hpp",
    "segment_file.hpp": "segment/segment_file.hpp",
    "validate.hpp": "segment/validate.hpp",
    # tenant slots: claiming and reaping, the lock's hand-off, the gate's
    # submitters' side, a sibling, the bounded waits on their words
    "slots.hpp": "slots/slots.hpp",
    "futex.hpp": "slots/futex.hpp",
    "handoff.hpp": "slots/handoff.hpp",
    "sibling.hpp": "slots/sibling.hpp",
    "submit.hpp": "slots/submit.hpp",
    # the guardian process and crash recovery
    "guardian.hpp": "guardian/guardian.hpp",
    "guardian_recover.hpp": "guardian/guardian_recover.hpp",
    "guardian_sys.hpp": "guardian/guardian_sys.hpp",
    # freezing: the freezer, the signal fallback, cgroups
    "freezer.hpp": "freeze/freezer.hpp",
    "freeze_signal.hpp": "freeze/freeze_signal.hpp",
    "cgroup.hpp": "freeze/cgroup.hpp",
    # krex::pool's workers
    "pool_core.hpp": "pool/pool_core.hpp",
    "pool_spawner.hpp": "pool/pool_spawner.hpp",
    "pool_wire.hpp": "pool/pool_wire.hpp",
    "pool_worker.hpp": "pool/pool_worker.hpp",
    # the machine's CPUs: topology, what ran beside a region
    "topology.hpp": "cpu/topology.hpp",
    "cpu_watch.hpp": "cpu/cpu_watch.hpp",
    # the device: the backend as the core sees it, the node's device registry, NVML
    "device_ops.hpp": "device/device_ops.hpp",
    "device_registry.hpp": "device/device_registry.hpp",
    "nvml.hpp": "device/nvml.hpp",
}
DETAIL = os.path.join("include", "krex", "detail")

# Headers that left detail/ (old, relative to include/krex/detail/ -> new,
# relative to include/krex/): the join's pieces beside the join, what the
# benchmark adapters share beside gbench's host part. Moved as MOVES are.
MOVES_OUT = {
    "membership.hpp": "impl/membership.hpp",
    "bench_state.hpp": "adapters/bench_state.hpp",
}
# Tiny headers merged into the one their users always include with them (old
# -> new, both relative to include/krex/): the merge itself is done by hand;
# the script rewrites the old path to the new one and drops an #include line
# that then stands twice. It fails while the old file is still there.
MERGED = {
    "env_switch.hpp": "adapters/bench_state.hpp",   # the adapters' on/off switches
    "freeze_table.hpp": "detail/as_safe.hpp",        # the freezers' table, which the thaw writes
    "hash.hpp": "detail/layout.hpp",                 # how the segment's keys are hashed
}

# Public headers that pull in their CUDA part at their end (a loop: the CUDA
# part includes them back). Each becomes its host part (HOST_PARTS' path,
# under krex/), which the CUDA, HIP and shared GPU parts include, and a short
# public header of the same name that includes the host part and, in a CUDA
# build, the CUDA part: the same public includes, no loop. A public header
# without THIN's line holds the body (a merge brought it back): the script
# moves it again. gbench's host part holds regions (it includes region.hpp),
# so it is not in host/, which stands below the region (gpu/ and hip/
# include it), but in adapters/ (docs/ARCHITECTURE.md, "Decisions").
HOST_PARTS = {"measure.hpp": "host/measure.hpp", "compare.hpp": "host/compare.hpp",
              "gbench.hpp": "adapters/gbench.hpp"}
THIN = "// The host part and, in a CUDA build, the CUDA part (tools/relayout.py)."
PUBLIC = os.path.join("include", "krex")
# The body's end: its comment lines, then one or more #if KREX_WITH_CUDA
# blocks that each include a CUDA part.
CUDA_TAIL = re.compile(r"(?:\n//[^\n]*)*(?:\n#if defined\(KREX_WITH_CUDA\)[^\n]*(?:\\\n[^\n]*)*"
                       r"\n#include <krex/cuda/[a-z_]+\.hpp>\n#endif[^\n]*)+\n?$")


def thin_tail(tail, stem):
    """The short header's #if blocks: the tail without its comment lines
    (they spoke of the body's end), and a line that names another header's
    CUDA part (gbench.hpp brings krex::measure's)."""
    out = []
    for line in tail.strip("\n").split("\n"):
        if line.startswith("//"):
            continue
        other = re.match(r"#include <krex/cuda/([a-z_]+)\.hpp>", line)
        if other and other.group(1) != stem:
            out.append(f"// krex::{other.group(1)}'s CUDA part, as <krex/{other.group(1)}.hpp> "
                       "brings it.")
        out.append(line)
    return "\n".join(out)


def split_host_parts(root, check):
    """Moves each public header of HOST_PARTS that still holds its body to
    krex/host/ and writes the short public header; returns what it did."""
    done = []
    for name, part in HOST_PARTS.items():
        pub = os.path.join(root, PUBLIC, name)
        host = os.path.join(root, PUBLIC, part)
        if not os.path.exists(pub):
            continue
        with open(pub, encoding="utf-8") as f:
            body = f.read()
        if THIN in body:
            continue
        tail = CUDA_TAIL.search(body)
        if tail is None:
            raise SystemExit(f"relayout: {pub} does not end in its #if KREX_WITH_CUDA include")
        done.append(f"krex/{name} -> krex/{part} and a short krex/{name}")
        if check:
            continue
        if os.path.exists(host):
            subprocess.run(["git", "-C", root, "rm", "-q", "-f", os.path.join(PUBLIC, part)],
                           check=True)
        os.makedirs(os.path.dirname(host), exist_ok=True)
        subprocess.run(["git", "-C", root, "mv", os.path.join(PUBLIC, name),
                        os.path.join(PUBLIC, part)], check=True)
        with open(host, "w", encoding="utf-8") as f:
            f.write(body[:tail.start()].rstrip("\n") + "\n")
        stem = name[:-len(".hpp")]
        with open(pub, "w", encoding="utf-8") as f:
            f.write("// SPDX-License-Identifier: Apache-2.0\n#pragma once\n\n"
                    f"// krex::{stem}: see krex/{part}.\n{THIN}\n\n"
                    + ("#include <krex/detail/config.hpp>\n" if part.startswith("host/") else "")
                    + f"#include <krex/{part}>\n" + thin_tail(tail.group(0), stem) + "\n")
        subprocess.run(["git", "-C", root, "add", os.path.join(PUBLIC, name)], check=True)
    return done


GBENCH_CUDA_MEASURE = """\
// krex::measure's CUDA part, as <krex/measure.hpp> brings it (the host part
// is included above, not <krex/measure.hpp>, which would loop back here
// through krex/cuda/gbench.hpp).
#if defined(KREX_WITH_CUDA) && KREX_WITH_CUDA
#include <krex/cuda/measure.hpp>
#endif  // KREX_WITH_CUDA
"""


def gbench_host_measure(text):
    """krex/gbench.hpp includes krex::measure's host part, and its CUDA part
    under #if, not <krex/measure.hpp> (which loops back through cuda/gbench.hpp)."""
    if "#include <krex/measure.hpp>\n" not in text:
        return text
    text = text.replace("#include <krex/measure.hpp>\n", "#include <krex/host/measure.hpp>\n")
    if GBENCH_CUDA_MEASURE not in text:
        i = text.rindex("#if defined(KREX_WITH_CUDA)")
        text = text[:i] + GBENCH_CUDA_MEASURE + text[i:]
    return text


# Inside the device parts and the host parts, the host parts are included,
# never the short public headers (which would close the loop again).
HOST_INCLUDE = re.compile(r"^#include <krex/(" + "|".join(n[:-4] for n in HOST_PARTS)
                          + r")\.hpp>", re.M)

HOST_DIRS = tuple("include/krex/" + d + "/" for d in ("cuda", "gpu", "hip", "host", "adapters"))


def pattern(old):
    """`detail/OLD` standing as a path (not a longer name, nor another folder's detail/)."""
    return re.compile(r"(?<![\w.-])((?:include/)?(?:krex/)?detail/)" + re.escape(old)
                      + r"(?![\w-]|\.\w)")


KREX_INCLUDE = re.compile(r"^#include <krex/([^>]+)>")


def sort_include_runs(text):
    """Sorts each run of consecutive `#include <krex/...>` lines by path (as
    .clang-format's include sorting does), so moved paths stand in order."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        j = i
        while j < len(lines) and KREX_INCLUDE.match(lines[j]):
            j += 1
        if j - i > 1:
            lines[i:j] = sorted(lines[i:j], key=lambda l: KREX_INCLUDE.match(l).group(1))
        i = max(j, i + 1)
    return "\n".join(lines)


def dedupe_includes(text):
    """Drops an `#include <krex/...>` line that stands again after its first."""
    seen, out = set(), []
    for line in text.split("\n"):
        if KREX_INCLUDE.match(line):
            if line in seen:
                continue
            seen.add(line)
        out.append(line)
    return "\n".join(out)


def tracked(root):
    out = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True,
                         check=True).stdout.decode().split("\0")
    return [f for f in out if f]


def main(argv):
    check = "--check" in argv
    args = [a for a in argv[1:] if a != "--check"]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems, moved, rewritten = [], [], []
    # (old, new, as printed), both relative to the root
    renames = [(os.path.join(DETAIL, old), os.path.join(DETAIL, new), f"{old} -> {new}")
               for old, new in MOVES.items()]
    renames += [(os.path.join(DETAIL, old), os.path.join(PUBLIC, new), f"detail/{old} -> {new}")
                for old, new in MOVES_OUT.items()]
    for old, new, said in renames:
        src, dst = os.path.join(root, old), os.path.join(root, new)
        if os.path.exists(src) and os.path.exists(dst):
            problems.append(f"both {src} and {dst} exist: merge them by hand, then rerun")
        elif os.path.exists(src):
            moved.append(said)
            if not check:
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                subprocess.run(["git", "-C", root, "mv", old, new], check=True)
    for old, new in MERGED.items():
        if os.path.exists(os.path.join(root, DETAIL, old)):
            problems.append(f"detail/{old} is still there: merge it into {new} by hand, then rerun")
    moved += split_host_parts(root, check)
    # detail/OLD -> detail/NEW; out of detail/: krex/detail/OLD -> krex/NEW
    # (and a bare detail/OLD in prose -> NEW, the path under krex/).
    patterns = [(pattern(old), lambda m, new=new: m.group(1) + new) for old, new in MOVES.items()]
    patterns += [(pattern(old), lambda m, new=new: m.group(1)[:-len("detail/")] + new)
                 for old, new in list(MOVES_OUT.items()) + list(MERGED.items())
                 if not os.path.exists(os.path.join(root, DETAIL, old))]  # not yet merged
    for rel in tracked(root):
        if rel.startswith("lab/") and not rel.endswith(".md"):
            continue  # raw records of past runs (logs, JSON) say what was, not what is
        path = os.path.join(root, rel)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (UnicodeDecodeError, OSError):
            continue  # not text
        out = text
        for rx, repl in patterns:
            out = rx.sub(repl, out)
        if rel == "include/krex/gbench.hpp":
            out = gbench_host_measure(out)
        if rel.startswith(HOST_DIRS):
            out = HOST_INCLUDE.sub(lambda m: f"#include <krex/{HOST_PARTS[m.group(1) + '.hpp']}>",
                                   out)
        if out != text:
            if rel.endswith((".hpp", ".cpp", ".cu", ".cuh", ".h", ".hip")):
                out = dedupe_includes(sort_include_runs(out))
            rewritten.append(rel)
            if not check:
                with open(path, "w", encoding="utf-8") as f:
                    f.write(out)
    verb = "to move" if check else "moved"
    for m in moved:
        print(f"relayout: {verb} {m}")
    for r in rewritten:
        print(f"relayout: {'to rewrite' if check else 'rewrote'} {r}")
    for p in problems:
        print(f"relayout: {p}")
    if check:
        return 1 if (moved or rewritten or problems) else 0
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
