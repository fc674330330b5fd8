#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The layer rules of docs/ARCHITECTURE.md, checked on every #include line
(<...> and "...", resolved relative to the including file, include/ and
tools/) of include/krex/ and tools/. LAYERS below is the one table of the
layers: the rules are checked against it and the map in docs/ARCHITECTURE.md
is drawn from it (the test fails when the map differs; --write redraws it).
Exits 1 naming every broken rule.

usage: layers_test.py [SOURCE_DIR]           check the tree
       layers_test.py --write [SOURCE_DIR]   redraw the map in docs/ARCHITECTURE.md
       layers_test.py --planted [SOURCE_DIR] copy the tree, plant broken includes
                                             one at a time, expect each reported
"""
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile

# The layers, top to bottom: a folder each below the façade (detail/ split by
# subsystem, its root the async-signal-safe base). A layer holds the files its
# patterns name (paths relative to include/, or tools/...; an exact name wins
# over a pattern, a longer pattern over a shorter one) and may include only
# files of the layers (or the single files) in `uses`, all of which are below
# it or itself. Every file of include/krex/ and tools/ is in exactly one layer.
BASE = ["detail base", "layer 0"]


def subsystem(name, what, *below):
    """A subsystem of detail/: its folder, krex/detail/NAME/, which may use
    itself, the subsystems named in `below` and the base."""
    return {"name": name, "what": what, "files": [f"krex/detail/{name}/*"],
            "uses": [name, *below] + BASE}


LAYERS = [
    {"name": "tools", "what": "krexctl and the code the tools share; not installed",
     "files": ["tools/*"],
     "uses": ["tools", "public façade", "compiled core", "membership", "backends",
              "protocol steps", "core boundary", "guardian", "freeze", "device", "slots",
              "segment", "pool", "cpu"] + BASE},
    {"name": "public façade", "what": "what harness code names",
     "files": ["krex/region.hpp", "krex/tenant.hpp", "krex/measure.hpp", "krex/compare.hpp",
               "krex/gbench.hpp", "krex/nvbench.hpp", "krex/pool.hpp", "krex/host/*", "krex/adapters/*",
               "krex/cuda/*", "krex/hip/*", "krex/gpu/*"],
     "uses": ["public façade", "compiled core", "backends", "protocol steps", "core boundary",
              "device", "slots", "pool"] + BASE},
    {"name": "compiled core",
     "what": "the join and the region over detail::device_ops, compiled once "
             "(KREX_SEPARATE_COMPILATION)",
     "files": ["krex/impl/*"],
     "uses": ["compiled core", "membership", "protocol steps", "core boundary", "guardian",
              "freeze", "device", "slots", "segment", "cpu"] + BASE},
    {"name": "membership", "what": "the tenant's join and leave as pieces with RAII undo",
     "files": ["krex/impl/membership.hpp"],
     "uses": ["membership", "freeze", "device", "slots", "cpu"] + BASE},
    {"name": "backends", "what": "a device's side of the steps",
     "files": ["krex/backend/*"],
     "uses": ["backends", "device", "slots", "cpu"] + BASE},
    {"name": "protocol steps", "what": "lock, gate, drain, freeze, quiet, pin",
     "files": ["krex/detail/steps/*", "krex/submit_guard.hpp"],
     "uses": ["protocol steps", "freeze", "device", "slots", "segment", "cpu"] + BASE},
    {"name": "core boundary", "what": "what the façade calls of the join and the region",
     "files": ["krex/detail/core.hpp"],
     "uses": ["core boundary"] + BASE},
    subsystem("guardian", "the guardian process and crash recovery", "device", "slots"),
    subsystem("freeze", "freezing a sibling's process tree: cgroups, signals", "slots"),
    subsystem("device", "the backend as the core sees it, the node's device registry, NVML"),
    subsystem("slots", "tenant slots, the lock's hand-off, the gate's submitters, siblings"),
    subsystem("segment", "the node segment: its file, its checks"),
    subsystem("pool", "krex::pool's workers, spawner and wire"),
    subsystem("cpu", "the machine's CPUs: topology, the join's slices, pinning, what ran beside "
                     "a region"),
    {"name": "detail base", "what": "async-signal-safe building blocks, futexes, identity",
     "files": ["krex/detail/*"],
     "uses": BASE},
    {"name": "layer 0", "what": "the shared bytes and the leaves every layer may use",
     "files": ["krex/detail/layout.hpp", "krex/detail/config.hpp", "krex/detail/proc.hpp",
               "krex/detail/sys.hpp", "krex/detail/json.hpp", "krex/detail/option_table.hpp", "krex/error.hpp", "krex/options.hpp",
               "krex/version.hpp", "krex/pool_options.hpp", "krex/report.hpp",
               "krex/detail/clocks.hpp"],
     "uses": ["layer 0"]},
]
SOURCE_SUFFIXES = (".hpp", ".cuh", ".h", ".cpp", ".cu")
DIRECTIVE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)
MAP_BEGIN = "<!-- map: drawn by tests/layers_test.py --write from its LAYERS table -->"
MAP_END = "<!-- map end -->"


def node_name(root, path):
    """include/krex/x.hpp -> krex/x.hpp; tools/... stays tools/...; else relative to root."""
    inc = os.path.join(root, "include")
    rel = os.path.relpath(path, inc)
    if not rel.startswith(".."):
        return rel.replace(os.sep, "/")
    return os.path.relpath(path, root).replace(os.sep, "/")


def resolve(root, src, form, target):
    """The file an #include names, or None for a system or third-party header."""
    candidates = [os.path.join(os.path.dirname(src), target)] if form == '"' else []
    candidates += [os.path.join(root, "include", target), os.path.join(root, "tools", target)]
    for c in candidates:
        if os.path.isfile(c):
            return node_name(root, os.path.normpath(c))
    return None


def sources(root):
    """Every file the rules cover: include/krex/ and tools/."""
    for top in (os.path.join(root, "include", "krex"), os.path.join(root, "tools")):
        for d, _, files in os.walk(top):
            for f in sorted(files):
                if f.endswith(SOURCE_SUFFIXES):
                    yield os.path.join(d, f)


def headers(root):
    """The include graph (file -> the files it includes) and the problems met
    while reading it: a quoted include, or one of krex or tool code, that names
    no file (third-party headers are included with <>)."""
    graph, problems = {}, []
    for path in sources(root):
        name = node_name(root, path)
        deps = []
        with open(path, encoding="utf-8") as fh:
            for form, target in DIRECTIVE.findall(fh.read()):
                dep = resolve(root, path, form, target.strip())
                if dep is not None:
                    deps.append(dep)
                elif form == '"' or target.startswith(("krex/", "krex_tools/")):
                    problems.append(f"{name} includes {form}{target}{'>' if form == '<' else form}, "
                                    "which names no file")
        graph[name] = deps
    return graph, problems


def layer_of(name, layers=None):
    """The layer holding `name` (exact name first, then the longest pattern), or None."""
    layers = LAYERS if layers is None else layers
    for layer in layers:
        if name in layer["files"]:
            return layer["name"]
    best, best_len = None, -1
    for layer in layers:
        for pattern in layer["files"]:
            if "*" in pattern and fnmatch.fnmatchcase(name, pattern) and len(pattern) > best_len:
                best, best_len = layer["name"], len(pattern)
    return best


def check_table(layers=None):
    """The table itself: every layer uses only itself and what lies below it."""
    layers = LAYERS if layers is None else layers
    problems = []
    index = {layer["name"]: i for i, layer in enumerate(layers)}
    for i, layer in enumerate(layers):
        for used in layer["uses"]:
            below = index.get(used, index.get(layer_of(used, layers)))
            if below is None:
                problems.append(f"LAYERS: {layer['name']} uses {used}, which is no layer or file")
            elif below < i:
                problems.append(f"LAYERS: {layer['name']} uses {used}, which is above it")
    return problems


def check_layers(g):
    """Every file is in a layer and includes only what its layer may use."""
    problems = []
    uses = {layer["name"]: layer["uses"] for layer in LAYERS}
    for h, deps in sorted(g.items()):
        mine = layer_of(h)
        if mine is None:
            problems.append(f"{h} is in no layer: add it to LAYERS in tests/layers_test.py "
                            "(and redraw docs/ARCHITECTURE.md with --write)")
            continue
        for dep in deps:
            theirs = layer_of(dep)
            if theirs is None and not dep.startswith(("krex/", "tools/")):
                problems.append(f"{h} ({mine}) includes {dep}, outside include/krex/ and tools/")
            elif theirs is not None and theirs not in uses[mine] and dep not in uses[mine]:
                problems.append(f"{h} ({mine}) includes {dep} ({theirs}): {mine} may use "
                                + ", ".join(uses[mine]))
    return problems


def closure(graph, start):
    seen, todo = set(), [start]
    while todo:
        h = todo.pop()
        for dep in graph.get(h, []):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


# The protocol steps, one file each under detail/steps/: they never call
# crash recovery (a dead or expired holder in their way is handed to the
# member's recoverer, detail/slots/slots.hpp, which the tenant installs), and no
# step includes another (rule 9).
STEPS = {"krex/detail/steps/" + s + ".hpp" for s in ("lock", "gate", "drain", "freeze", "quiet", "pin")}
RECOVERY = {"krex/detail/guardian/guardian_recover.hpp", "krex/detail/guardian/guardian.hpp"}
# Slot bookkeeping and the lock's hand-off use the async-signal-safe building
# blocks of detail/as_safe.hpp, never the guardian's headers.
SLOT_HEADERS = {"krex/detail/slots/slots.hpp", "krex/detail/slots/handoff.hpp"}
GUARDIAN = {"krex/detail/guardian/guardian_sys.hpp", "krex/detail/guardian/guardian_recover.hpp",
            "krex/detail/guardian/guardian.hpp"}


def is_library(h):
    return h.startswith("krex/")


def check(g):
    """The broken rules of include graph `g` (file -> the files it includes)."""
    problems = check_layers(g)
    # The folders are the layers: a header in a folder of detail/ belongs to
    # that folder's layer, never to detail/'s root by the root's pattern.
    for h in sorted(g):
        if (h.startswith("krex/detail/") and h.count("/") > 2
                and layer_of(h) == layer_of("krex/detail/x.hpp")):
            problems.append(f"{h} is in a folder of detail/ that no layer names: add the folder "
                            "to LAYERS in tests/layers_test.py")
    # 3. No tools-only code in include/: every detail header is reached from a
    # header users include (top level, cuda/, hip/, backend/), not only from tools.
    entries = [h for h in g if is_library(h) and not h.startswith("krex/detail/")]
    reached = set(entries)
    for h in entries:
        reached |= closure(g, h)
    for h in sorted(g):
        if is_library(h) and h not in reached:
            problems.append(f"{h} is reached from no public header: tools-only code lives in "
                            "tools/krex_tools/ and is not installed (rule 3)")
    # 4. No include cycles. krex/measure.hpp, krex/compare.hpp and
    # krex/gbench.hpp include their host part (krex/host/, krex/adapters/gbench.hpp)
    # and, in a CUDA build, the CUDA part, which includes the host part, not them.
    for h in sorted(g):
        if h in closure(g, h):
            problems.append(f"{h} is part of an include cycle")
    # 5. Library headers never include tools/ code, in any form (the layer
    # table says so too; this names it plainly).
    for h, deps in sorted(g.items()):
        if is_library(h):
            for dep in deps:
                if not is_library(dep):
                    problems.append(f"{h} includes tool code {dep}")
    # 6. Protocol steps never reach crash recovery (directly or through
    # another header).
    for h in sorted(set(STEPS) & g.keys()):
        for dep in sorted(closure(g, h) & RECOVERY):
            problems.append(f"{h} (protocol step) reaches the crash recovery of {dep}: "
                            "call the member's recoverer instead (docs/ARCHITECTURE.md)")
    # 7. Slot bookkeeping never reaches the guardian's headers.
    for h in sorted(SLOT_HEADERS & g.keys()):
        for dep in sorted(closure(g, h) & GUARDIAN):
            problems.append(f"{h} reaches the guardian's {dep}: use detail/as_safe.hpp "
                            "(docs/ARCHITECTURE.md)")
    # 9. No step includes another step (only the region knows their order);
    # what they share is detail/steps/context.hpp.
    for h in sorted(STEPS & g.keys()):
        for dep in sorted(set(g[h]) & STEPS):
            problems.append(f"{h} (protocol step) includes the step {dep}: "
                            "only the region sequences steps (docs/ARCHITECTURE.md)")
    return problems


def draw_map(g):
    """The map of docs/ARCHITECTURE.md: each layer of LAYERS, top to bottom,
    with the files of the tree in it and what it may use."""
    width = 76
    lines = [" harness code: krex::tenant, krex::region, krex::measure, krex::gbench,",
             "              krex::nvbench, report, krex::pool",
             "   │",
             "   ▼",
             " ┌" + "─" * width + "┐"]

    def row(text):
        lines.append(" │ " + text.ljust(width - 1) + "│")

    def wrapped(prefix, words, indent):
        line = prefix
        for w in words:
            if len(line) + 1 + len(w) > width - 1 and line.strip():
                row(line)
                line = " " * indent
            line += ("" if line.endswith(" ") or not line else " ") + w
        row(line)

    for i, layer in enumerate(LAYERS):
        if i:
            lines.append(" ├" + "─" * width + "┤")
        wrapped(f"{layer['name']}:", layer["what"].split(), 4)
        files = sorted(h for h in g if layer_of(h) == layer["name"])
        folders = {}
        for h in files:
            rel = h[len("krex/"):] if h.startswith("krex/") else h
            folder, _, base = rel.rpartition("/")
            folders.setdefault(folder, []).append(base)
        for folder in sorted(folders):
            prefix = f"  {folder}/:" if folder else "  "
            wrapped(prefix, folders[folder], 4)
        used = [u.replace("krex/", "") for u in layer["uses"] if u != layer["name"]]
        wrapped("  may use:", [u + "," for u in used[:-1]] + used[-1:] or ["nothing else"], 4)
    lines.append(" └" + "─" * width + "┘")
    return "```\n" + "\n".join(lines) + "\n```"


def map_problems(root, g, write=False):
    path = os.path.join(root, "docs", "ARCHITECTURE.md")
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    if MAP_BEGIN not in text or MAP_END not in text:
        return [f"docs/ARCHITECTURE.md: the map markers are missing ({MAP_BEGIN})"]
    head, rest = text.split(MAP_BEGIN, 1)
    old, tail = rest.split(MAP_END, 1)
    new = "\n" + draw_map(g) + "\n"
    if write:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(head + MAP_BEGIN + new + MAP_END + tail)
        return []
    if old != new:
        return ["docs/ARCHITECTURE.md: the map differs from the LAYERS table and the tree: "
                "redraw it with tests/layers_test.py --write"]
    return []


# 8. A top-level header is public API: one whose only namespace is
# krex::detail belongs under detail/ (the protocol steps are in detail/steps/).
NAMESPACE = re.compile(r'^\s*namespace\s+(krex(?:::[A-Za-z_:]+)?)\s*\{', re.M)
DETAIL_ONLY_ALLOWED = set()


def detail_only(text):
    """True if the header opens krex namespaces and every one is krex::detail(::...)."""
    spaces = NAMESPACE.findall(text)
    return bool(spaces) and all(n == "krex::detail" or n.startswith("krex::detail::") for n in spaces)


def check_top_level(root):
    problems = []
    base = os.path.join(root, "include", "krex")
    for f in sorted(os.listdir(base)):
        if not f.endswith(".hpp"):
            continue
        with open(os.path.join(base, f), encoding="utf-8") as fh:
            text = fh.read()
        name = "krex/" + f
        if detail_only(text) and name not in DETAIL_ONLY_ALLOWED:
            problems.append(f"{name} holds only krex::detail: move it under include/krex/detail/ "
                            "(docs/ARCHITECTURE.md, rule 8)")
    return problems


def self_test(g):
    """Rules 6, 7 and 9 catch what they exist for, on copies of the real graph:
    a step including crash recovery directly or through a detail header, and
    slots.hpp including guardian_sys.hpp. Returns what did not fail."""
    cases = [
        ("krex/detail/steps/gate.hpp", "krex/detail/guardian/guardian_recover.hpp",
         "krex/detail/steps/gate.hpp (protocol step)"),
        ("krex/detail/steps/lock.hpp", "krex/detail/guardian/guardian_recover.hpp",
         "krex/detail/steps/lock.hpp (protocol step)"),
        ("krex/detail/slots/futex.hpp", "krex/detail/guardian/guardian_recover.hpp",
         "krex/detail/steps/drain.hpp (protocol step)"),
        ("krex/detail/steps/drain.hpp", "krex/detail/steps/gate.hpp",
         "krex/detail/steps/drain.hpp (protocol step) includes the step"),
        ("krex/detail/slots/slots.hpp", "krex/detail/guardian/guardian_sys.hpp",
         "krex/detail/slots/slots.hpp reaches the guardian's "
         "krex/detail/guardian/guardian_sys.hpp"),
    ]
    missed = []
    for h, dep, expect in cases:
        if h not in g:
            missed.append(f"self-test: {h} not found")
            continue
        broken = {k: list(v) for k, v in g.items()}
        broken[h].append(dep)
        if not any(p.startswith(expect) for p in check(broken)):
            missed.append(f"self-test: {h} including {dep} was not reported")
    # Rule 8 tells a detail-only header from a public one.
    if not detail_only("namespace krex::detail {\n}\nnamespace krex::detail::x {\n}\n"):
        missed.append("self-test: a detail-only header was not recognized")
    if detail_only("namespace krex::detail {\n}\nnamespace krex {\n}\n") or detail_only("#define X 1\n"):
        missed.append("self-test: a public header was taken for detail-only")
    return missed


# Broken trees the checker must reject, planted one at a time in a copy of the
# real one: (file, the line added to it, what the report must contain).
PLANTED = [
    # quoted, relative to the including file: detail/ reaching up to the façade
    ("include/krex/detail/slots/slots.hpp", '#include "../../tenant.hpp"',
     "krex/detail/slots/slots.hpp (slots) includes krex/tenant.hpp (public façade)"),
    # quoted, relative to include/: layer 0 reaching into detail
    ("include/krex/detail/layout.hpp", '#include "krex/detail/segment/segment.hpp"',
     "krex/detail/layout.hpp (layer 0) includes krex/detail/segment/segment.hpp (segment)"),
    # one folder of detail/ reaching a folder above it: slots -> freeze
    ("include/krex/detail/slots/sibling.hpp", '#include "../freeze/freezer.hpp"',
     "krex/detail/slots/sibling.hpp (slots) includes krex/detail/freeze/freezer.hpp (freeze)"),
    # angle and quoted tool code in the library
    ("include/krex/options.hpp", "#include <krex_tools/cli.hpp>",
     "krex/options.hpp includes tool code tools/krex_tools/cli.hpp"),
    ("include/krex/report.hpp", '#include "../../tools/krex_tools/status.hpp"',
     "krex/report.hpp includes tool code tools/krex_tools/status.hpp"),
    # a backend reaching the façade
    ("include/krex/backend/host.hpp", '#include "../region.hpp"',
     "krex/backend/host.hpp (backends) includes krex/region.hpp (public façade)"),
    # a step reaching crash recovery through a quoted include
    ("include/krex/detail/steps/pin.hpp", '#include "../guardian/guardian_recover.hpp"',
     "krex/detail/steps/pin.hpp (protocol step) reaches the crash recovery"),
    # a step including another step (rule 9)
    ("include/krex/detail/steps/quiet.hpp", '#include "gate.hpp"',
     "krex/detail/steps/quiet.hpp (protocol step) includes the step krex/detail/steps/gate.hpp"),
    # an include naming no file
    ("include/krex/detail/layout.hpp", '#include "gone.hpp"', "includes \"gone.hpp\", which names no file"),
]


def planted(root):
    """Copies include/, tools/ and docs/ARCHITECTURE.md, checks the copy passes,
    then plants each broken include of PLANTED (and a header in no layer, and a
    stale map) and runs this checker on the copy as its own process: each must
    exit 1 naming the break. Returns what was not caught."""
    missed = []
    with tempfile.TemporaryDirectory(prefix="krex-layers-") as tmp:
        for part in ("include", "tools"):
            shutil.copytree(os.path.join(root, part), os.path.join(tmp, part))
        os.makedirs(os.path.join(tmp, "docs"))
        arch = os.path.join(tmp, "docs", "ARCHITECTURE.md")
        shutil.copy(os.path.join(root, "docs", "ARCHITECTURE.md"), arch)

        def run():
            p = subprocess.run([sys.executable, os.path.abspath(__file__), tmp],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
            return p.returncode, p.stdout

        rc, out = run()
        if rc != 0:
            return [f"planted: the unchanged copy fails:\n{out}"]
        cases = [(f, "\n" + line + "\n", expect) for f, line, expect in PLANTED]
        cases.append(("include/krex/stray.hpp", "#pragma once\n", "krex/stray.hpp is in no layer"))
        cases.append(("include/krex/detail/stray/stray.hpp", "#pragma once\n",
                      "krex/detail/stray/stray.hpp is in a folder of detail/ that no layer names"))
        cases.append(("docs/ARCHITECTURE.md", "\n", None))
        for rel, added, expect in cases:
            path = os.path.join(tmp, rel)
            original = None
            if os.path.exists(path):
                with open(path, encoding="utf-8") as fh:
                    original = fh.read()
            text = original or ""
            if expect is None:  # a stale map: one file name less in it
                text = text.replace("tenant.hpp ", "", 1)
                expect = "docs/ARCHITECTURE.md: the map differs"
            else:
                text += added
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
            rc, out = run()
            if rc != 1 or expect not in out:
                missed.append(f"planted: {rel} + {added.strip() or 'edit'}: rc {rc}, "
                              f"expected '{expect}' in:\n{out}")
            if original is None:
                os.remove(path)
            else:
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(original)
    print(f"layers_test: {len(cases)} planted breaks, {len(missed)} not caught")
    return missed


def main(argv):
    args = argv[1:]
    mode = args.pop(0) if args and args[0].startswith("--") else None
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    if mode == "--planted":
        problems = planted(root)
        for p in problems:
            print("layers_test:", p)
        return 1 if problems else 0
    g, problems = headers(root)
    if mode == "--write":
        map_problems(root, g, write=True)
        print("layers_test: docs/ARCHITECTURE.md map redrawn")
        return 0
    problems += check_table() + check(g) + check_top_level(root) + self_test(g) + map_problems(root, g)
    for p in problems:
        print("layers_test:", p)
    print(f"layers_test: {len(g)} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
