#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The layer rules of docs/ARCHITECTURE.md, checked on the #include lines of
include/krex/ (and tools/). Exits 1 naming every broken rule.

usage: layers_test.py [SOURCE_DIR]
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*<(krex/[^>]+)>', re.M)


def headers(root):
    out = {}
    base = os.path.join(root, "include")
    for d, _, files in os.walk(os.path.join(base, "krex")):
        for f in files:
            if f.endswith((".hpp", ".cuh")):
                path = os.path.join(d, f)
                name = os.path.relpath(path, base).replace(os.sep, "/")
                with open(path, encoding="utf-8") as fh:
                    out[name] = INCLUDE.findall(fh.read())
    return out


def closure(graph, start):
    seen, todo = set(), [start]
    while todo:
        h = todo.pop()
        for dep in graph.get(h, []):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


# Layer 0: the shared layout and the leaves every layer may use.
BASE = {"krex/detail/config.hpp", "krex/detail/layout.hpp", "krex/detail/proc.hpp",
        "krex/detail/sys.hpp", "krex/detail/json.hpp", "krex/detail/hash.hpp", "krex/error.hpp",
        "krex/options.hpp", "krex/version.hpp", "krex/pool_options.hpp"}
# The public façade: what detail/ must never reach up to.
PUBLIC_STEPS = {"krex/region.hpp", "krex/tenant.hpp", "krex/submit_guard.hpp",
                "krex/measure.hpp", "krex/report.hpp", "krex/gbench.hpp",
                "krex/pool.hpp"}
# Headers only tools (krexctl, fuzz, tests) include: never reached from a tenant.
TOOLS_ONLY = {"krex/detail/status.hpp"}
# The protocol steps: they never call crash recovery (a dead or expired
# holder in their way is handed to the member's recoverer, detail/slots.hpp,
# which the tenant installs).
STEPS = {"krex/detail/steps/" + s + ".hpp" for s in ("lock", "gate", "drain", "freeze", "quiet", "pin")}
RECOVERY = {"krex/detail/guardian_recover.hpp", "krex/detail/guardian.hpp"}
# Slot bookkeeping and the lock's hand-off use the async-signal-safe building
# blocks of detail/as_safe.hpp, never the guardian's headers.
SLOT_HEADERS = {"krex/detail/slots.hpp", "krex/detail/handoff.hpp"}
GUARDIAN = {"krex/detail/guardian_sys.hpp", "krex/detail/guardian_recover.hpp",
            "krex/detail/guardian.hpp"}


def check(g):
    """The broken rules of include graph `g` (header -> its krex includes)."""
    problems = []

    # 1. Layer 0 includes nothing above it.
    for h in sorted(BASE & g.keys()):
        for dep in g[h]:
            if dep not in BASE:
                problems.append(f"{h} (layer 0) includes {dep}")
    # 2. detail/ never reaches up to the protocol steps or the public façade.
    for h, deps in sorted(g.items()):
        if h.startswith("krex/detail/"):
            for dep in deps:
                if dep in PUBLIC_STEPS:
                    problems.append(f"{h} (detail) includes the public step header {dep}")
    # 3. No tenant header reaches the tools-only view (transitively).
    for entry in ("krex/tenant.hpp", "krex/region.hpp", "krex/gbench.hpp"):
        if entry in g:
            reached = closure(g, entry) & TOOLS_ONLY
            if reached:
                problems.append(f"{entry} reaches the tools-only {sorted(reached)}")
    # 4. No include cycles. A public header that pulls in its backend
    # extension at its end (krex/measure.hpp -> krex/cuda/measure.hpp, under
    # #if KREX_WITH_CUDA), which includes it back, is the one allowed loop.
    acyclic = {h: [d for d in deps
                   if not (d.startswith(("krex/cuda/", "krex/hip/")) and
                           d.rsplit("/", 1)[1] == h.rsplit("/", 1)[1] and
                           h.count("/") == 1)]
               for h, deps in g.items()}
    for h in acyclic:
        if h in closure(acyclic, h):
            problems.append(f"{h} is part of an include cycle")
    # 5. Library headers never include tools/ or bench/ code.
    for h, deps in g.items():
        for dep in deps:
            if dep.startswith(("krex_tools/", "krex/tools/")):
                problems.append(f"{h} includes tool code {dep}")
    # 6. Protocol steps never reach crash recovery (directly or through
    # another header).
    for h in sorted(STEPS & g.keys()):
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
        ("krex/detail/steps/gate.hpp", "krex/detail/guardian_recover.hpp",
         "krex/detail/steps/gate.hpp (protocol step)"),
        ("krex/detail/steps/lock.hpp", "krex/detail/guardian_recover.hpp",
         "krex/detail/steps/lock.hpp (protocol step)"),
        ("krex/detail/futex.hpp", "krex/detail/guardian_recover.hpp",
         "krex/detail/steps/drain.hpp (protocol step)"),
        ("krex/detail/steps/drain.hpp", "krex/detail/steps/gate.hpp",
         "krex/detail/steps/drain.hpp (protocol step) includes the step"),
        ("krex/detail/slots.hpp", "krex/detail/guardian_sys.hpp",
         "krex/detail/slots.hpp reaches the guardian's krex/detail/guardian_sys.hpp"),
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


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    g = headers(root)
    problems = check(g) + check_top_level(root) + self_test(g)
    for p in problems:
        print("layers_test:", p)
    print(f"layers_test: {len(g)} headers, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
