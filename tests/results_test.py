#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""docs/RESULTS.md, the page of current results, and README.md's result
table against the notes they link (lab/results/<topic>.md): every such table
is a copy of a table in a note, so a headline number cannot drift from the run it came from; and every
relative link of the docs (README.md, scripts/README.md, docs/, lab/results/)
names a file that exists and, with #anchor, a heading of that file. Exits 1
naming every problem.

usage: results_test.py [SOURCE_DIR]
"""
import glob
import os
import re
import sys

from problems import report

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    out, fence = set(), False
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("```"):
                fence = not fence
            m = re.match(r"^#{1,6} (.*)", line)
            if m and not fence:
                out.add(slug(m.group(1)))
    return out


def tables(text):
    """The tables of a markdown text, each as the tuple of its lines."""
    out, cur = [], []
    for line in text.split("\n") + [""]:
        if line.startswith("|"):
            cur.append(line.rstrip())
        elif cur:
            out.append(tuple(cur))
            cur = []
    return out


def check_tables(root):
    problems = []
    with open(os.path.join(root, "docs", "RESULTS.md"), encoding="utf-8") as fh:
        page = tables(fh.read())
    notes = []
    for path in sorted(glob.glob(os.path.join(root, "lab", "results", "*.md"))):
        with open(path, encoding="utf-8") as fh:
            notes += tables(fh.read())
    if not page:
        problems.append("docs/RESULTS.md has no table")
    for t in page[1:]:  # the first table is the list of notes
        if t not in notes:
            problems.append("docs/RESULTS.md: a table that is in no note of lab/results/: " + t[0][:80])
    # README.md's result table too; its options table is krexctl's (tests/test_tables.cpp).
    with open(os.path.join(root, "README.md"), encoding="utf-8") as fh:
        readme = [t for t in tables(fh.read()) if not t[0].startswith("| setter |")]
    if not readme:
        problems.append("README.md has no result table")
    for t in readme:
        if t not in notes:
            problems.append("README.md: a table that is in no note of lab/results/: " + t[0][:80])
    return problems


def check_links(root):
    problems = []
    docs = [os.path.join(root, "README.md"), os.path.join(root, "scripts", "README.md")]
    docs += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    docs += [os.path.join(root, "lab", "README.md")]
    docs += sorted(glob.glob(os.path.join(root, "lab", "results", "*.md")))
    for doc in docs:
        with open(doc, encoding="utf-8") as fh:
            text = re.sub(r"```.*?```", "", fh.read(), flags=re.S)
        rel = os.path.relpath(doc, root)
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target):
                continue  # http:, https:, mailto:
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
            if not os.path.exists(dest):
                problems.append(f"{rel}: link to {target}: no such file")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                problems.append(f"{rel}: link to {target}: no heading with that anchor")
    return problems


def self_test():
    """The checks can fail: a slug as GitHub makes it, a table missing from
    the notes, a link to a missing heading."""
    missed = []
    if slug("The eval, shape for shape (`--config issue11`)") != "the-eval-shape-for-shape---config-issue11":
        missed.append("self-test: slug")
    if tables("a\n| x |\n|---|\nb\n") != [("| x |", "|---|")]:
        missed.append("self-test: tables")
    return missed


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems = check_tables(root) + check_links(root) + self_test()
    return report("results_test", problems)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
