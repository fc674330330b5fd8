# SPDX-License-Identifier: Apache-2.0
"""The one quantile of krex's Python scripts (scripts/*.py, bench/python/):
linear interpolation between the closest ranks, as krex::measure computes its
median and p95 (krex::detail::quantile_sorted), so numbers from C++ and from
Python compare. Standard library only.
"""


def quantile(v, q):
    """Quantile q in [0, 1] of the values `v` (any order); NaN if there are none."""
    v = sorted(v)
    if not v:
        return float("nan")
    pos = q * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)
