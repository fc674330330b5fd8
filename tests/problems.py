# SPDX-License-Identifier: Apache-2.0
"""The end of the tree checkers' main (docs_rules_test.py, layers_test.py,
results_test.py): each problem on a line of its own, then the count; the exit
code is 1 if there was any."""


def report(name, problems, what=""):
    for p in problems:
        print(f"{name}:", p)
    print(f"{name}: {what}{len(problems)} problem(s)")
    return 1 if problems else 0
