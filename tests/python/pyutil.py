# SPDX-License-Identifier: Apache-2.0
"""Helpers of the Python binding's tests: child processes with bounded
line-by-line conversations, unique segment names, and cleanup of what a
test's tenants leave behind (the segment in /dev/shm, the krex cgroup root).

Every tenant lives in a child process: a process that joins is moved into a
leaf cgroup of the segment's krex root, and the test runner must stay out of
it to remove that root afterwards.
"""

import contextlib
import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

# The segment's leftovers: testkit/krex_leftovers.py, shared with bench/python/.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testkit"))
from krex_leftovers import remove_leftovers  # noqa: E402

_counter = [0]


def unique_name(prefix):
    """A segment name unique to this run: prefix, pid, a counter, a time stamp."""
    _counter[0] += 1
    return "%s-%d-%d-%d" % (prefix, os.getpid(), _counter[0], int(time.time() * 1000) % 100000)


# In every Child: in_fork(fn) runs fn() in a forked child of the child and
# returns what it returned (JSON through a pipe), or {"error": repr(e)}.
_IN_FORK = """
def in_fork(fn):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            res = fn()
        except BaseException as e:
            res = {"error": repr(e)}
        os.write(w, json.dumps(res).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.waitpid(pid, 0)
    return json.loads(data)
"""


class Child:
    """A Python child running `code` (after `import json, os, sys, threading,
    time, krex`, `say(tag, obj)`, which prints "tag <json>" and flushes, and
    in_fork(fn) above),
    talked to one line at a time; every read is bounded."""

    def __init__(self, code, env=None, args=(), python_args=()):
        full_env = dict(os.environ)
        full_env.update(env or {})
        prelude = ("import json, os, sys, threading, time\nimport krex\n"
                   "def say(tag, obj=None):\n"
                   "    print(tag, json.dumps(obj), flush=True)\n" + _IN_FORK)
        self.proc = subprocess.Popen(
            [sys.executable, *python_args, "-c", prelude + textwrap.dedent(code), *args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, bufsize=1, env=full_env)
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)

    @property
    def pid(self):
        return self.proc.pid

    def readline(self, timeout):
        """The next stdout line (stripped), or None after `timeout` seconds or at EOF."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self._sel.select(left):
                return None
            line = self.proc.stdout.readline()
            if line == "":
                return None
            line = line.strip()
            if line:
                return line

    def expect(self, prefix, timeout=20):
        """Reads lines until one starts with `prefix`; returns the rest parsed
        as JSON (or the text). Fails the test with the child's stderr otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.readline(max(0.0, deadline - time.monotonic()))
            if line is None:
                raise AssertionError("child %d: no '%s' line within %s s; stderr:\n%s"
                                     % (self.pid, prefix, timeout, self.stderr_now()))
            if line.startswith(prefix):
                rest = line[len(prefix):].strip()
                try:
                    return json.loads(rest)
                except ValueError:
                    return rest

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stderr_now(self):
        if self.proc.poll() is None:
            return "(still running)"
        return self.proc.stderr.read()

    def wait(self, timeout=20):
        """Exit status; kills the child if it has not exited in time."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("child %d did not exit within %s s" % (self.pid, timeout))

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def close(self):
        self.kill()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass
        self._sel.close()


def cleanup(name, children=()):
    """Kills the children, thaws and empties the segment's cgroup leaves,
    removes them, its root and the segment. Bounded: 5 s for the cgroups."""
    for c in children:
        c.close()
    remove_leftovers(name)


def children_say(code, prefix, envs, tag="out", timeout=20, segment_env=False):
    """Runs `code` in one Child per environment of `envs` (added to os.environ),
    all on one new segment made from `prefix`: sys.argv[1], and with
    segment_env KREX_SEGMENT too. Returns what each said under `tag`, in
    order; each must exit 0. The segment is cleaned up whatever happens."""
    name = unique_name(prefix)
    seg = {"KREX_SEGMENT": name} if segment_env else {}
    kids = [Child(code, env=dict(e or {}, **seg), args=[name]) for e in envs]
    try:
        outs = [c.expect(tag, timeout) for c in kids]
        assert [c.wait() for c in kids] == [0] * len(kids)
        return outs
    finally:
        cleanup(name, kids)


def child_says(code, prefix, tag="out", timeout=20, env=None):
    """children_say with one child: what it said under `tag`."""
    return children_say(code, prefix, [env], tag, timeout)[0]


@contextlib.contextmanager
def segment(prefix):
    """A unique segment name made from `prefix`, cleaned up (cleanup()) on exit."""
    name = unique_name(prefix)
    try:
        yield name
    finally:
        cleanup(name)


class TempTree:
    """A temporary directory of files {relative path: text}, removed at exit."""

    def __init__(self, files):
        self.path = tempfile.mkdtemp(prefix="krexpy-")
        for rel, text in files.items():
            p = os.path.join(self.path, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(textwrap.dedent(text))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.path, ignore_errors=True)
        return False
