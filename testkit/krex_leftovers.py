# SPDX-License-Identifier: Apache-2.0
"""What a krex segment's tenants leave behind once they are gone, removed by
the segment's base name: its cgroup leaves (thawed, and what still runs in
them killed), the krex cgroup root they were in, and the segment file in
/dev/shm. Shared by the Python tests (tests/python/pyutil.py), the Python
benchmarks (bench/python/) and the lab's (lab/scripts/kernelbench_real.py):
testkit/ is what tests and benchmarks share.
"""

import glob
import os
import time


def cgroup_roots(name):
    """krex cgroup roots of segment base name `name` (v2 and the v1 freezer)."""
    found = []
    for mount in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/freezer"):
        if not os.path.isdir(mount):
            continue
        for dirpath, dirnames, _ in os.walk(mount):
            if dirpath.count("/") - mount.count("/") >= 6:
                dirnames[:] = []
                continue
            for d in list(dirnames):
                if d.startswith("krex-") and d.endswith("-" + name):
                    found.append(os.path.join(dirpath, d))
                    dirnames.remove(d)
    return found


def _write(path, text):
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError:
        pass


def remove_leftovers(name):
    """Thaws and empties the cgroup leaves of segment `name`, removes them and
    their root, then the segment file. Bounded: 5 s for the cgroups."""
    for root in cgroup_roots(name):
        leaves = [p for p in glob.glob(root + "/t*") if os.path.isdir(p)]
        for leaf in leaves:
            _write(leaf + "/cgroup.freeze", "0")
            _write(leaf + "/freezer.state", "THAWED")
            _write(leaf + "/cgroup.kill", "1")
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            for leaf in leaves:
                try:
                    os.rmdir(leaf)
                except OSError:
                    pass
            try:
                os.rmdir(root)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)
    for seg in glob.glob("/dev/shm/krex-*-" + name):
        try:
            os.unlink(seg)
        except OSError:
            pass
