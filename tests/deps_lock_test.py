#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""scripts/ci/deps.sh waits for the package manager's lock instead of failing
(issue 21). dpkg, apt-get and id are stubs on PATH: dpkg reports every
package missing, id says root, and apt-get fails with apt's lock message a
given number of times before it succeeds; nothing is installed.

usage: deps_lock_test.py [SOURCE_DIR]
"""
import os
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.abspath(sys.argv.pop(1) if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DEPS = os.path.join(ROOT, "scripts", "ci", "deps.sh")

APT_GET = """#!/bin/sh
# Fails like apt while "another apt" holds the lock, for the first $LOCKED calls.
n=$(cat "$STATE/calls" 2>/dev/null || echo 0)
n=$((n + 1))
echo "$n" > "$STATE/calls"
echo "$*" >> "$STATE/log"
if [ "$n" -le "$LOCKED" ]; then
  echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)" >&2
  exit 100
fi
if [ -n "$OTHER_ERROR" ]; then
  echo "E: Unable to locate package $OTHER_ERROR" >&2
  exit 100
fi
exit 0
"""


class DepsLock(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        bin_dir = os.path.join(self.dir.name, "bin")
        os.mkdir(bin_dir)
        stubs = {"apt-get": APT_GET, "dpkg": "#!/bin/sh\nexit 1\n", "id": "#!/bin/sh\necho 0\n"}
        for name, text in stubs.items():
            path = os.path.join(bin_dir, name)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o755)
        self.env = dict(os.environ, PATH=bin_dir + ":" + os.environ.get("PATH", "/usr/bin:/bin"),
                        STATE=self.dir.name)
        self.env.pop("KREX_WITH_HIP", None)

    def tearDown(self):
        self.dir.cleanup()

    def run_deps(self, **env):
        e = dict(self.env, **{k: str(v) for k, v in env.items()})
        t0 = time.monotonic()
        r = subprocess.run(["bash", DEPS], env=e, capture_output=True, text=True, timeout=120)
        return r, time.monotonic() - t0

    def log(self):
        with open(os.path.join(self.dir.name, "log")) as f:
            return f.read().splitlines()

    def test_waits_for_the_lock_then_installs(self):
        r, took = self.run_deps(LOCKED=1)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("another apt or dpkg holds the package manager lock; waiting", r.stderr)
        calls = self.log()
        self.assertEqual(len(calls), 3, calls)  # update (locked), update, install
        self.assertTrue(all("DPkg::Lock::Timeout=600" in c for c in calls), calls)
        self.assertIn("update", calls[1])
        self.assertIn("install", calls[2])
        self.assertIn("cmake", calls[2])
        poll = float(os.environ.get("KREX_APT_LOCK_POLL", "5"))
        self.assertGreaterEqual(took, poll * 0.9)  # it waited before retrying

    def test_gives_up_after_the_wait(self):
        r, _ = self.run_deps(LOCKED=1000, KREX_APT_LOCK_WAIT=1)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("lock was still held after 1 s", r.stderr)
        self.assertIn("KREX_APT_LOCK_WAIT", r.stderr)

    def test_other_errors_fail_at_once(self):
        r, took = self.run_deps(LOCKED=0, OTHER_ERROR="nosuch")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("Unable to locate package nosuch", r.stderr)
        self.assertNotIn("waiting", r.stderr)
        self.assertEqual(len(self.log()), 1)
        self.assertLess(took, float(os.environ.get("KREX_APT_LOCK_POLL", "5")) * 0.9)

    def test_bad_wait_value(self):
        r, _ = self.run_deps(LOCKED=0, KREX_APT_LOCK_WAIT="soon")
        self.assertEqual(r.returncode, 1)
        self.assertIn("KREX_APT_LOCK_WAIT must be a number of seconds", r.stderr)


if __name__ == "__main__":
    unittest.main()
