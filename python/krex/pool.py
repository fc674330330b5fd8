# SPDX-License-Identifier: Apache-2.0
"""krex.Pool: persistent worker processes, each a krex tenant of its own device.

    import krex

    def evaluate(candidate):               # top level of an importable module
        t = krex.worker_tenant()           # this worker's krex.Tenant
        ...                                # compile, check: concurrent with siblings
        with krex.region(t) as r:
            m = krex.measure(r, lambda: run(candidate))
        return m["median_ms"], r.report["level"]

    if __name__ == "__main__":
        with krex.Pool(workers=4, devices="all") as pool:
            for ms, level in pool.map(evaluate, candidates):
                ...

A harness that starts a process per candidate pays a CUDA context and a
tenant join for each. A pool's workers pay them once and keep them: the
tenant joins when the worker starts, and the CUDA context (made by the first
CUDA call, or by ``initializer``) lives as long as the worker.

Tasks are named "module:function" (a top-level callable is turned into its
name), so they survive the 'spawn' start method: a worker is a fresh
interpreter that imports the function's module. ``submit`` returns a
concurrent.futures.Future; ``map``, ``shutdown`` and ``with`` work as for any
concurrent.futures.Executor. A task's exception is raised again by
``Future.result()`` (with the worker's traceback as its ``__cause__``); a
worker that dies is replaced and its task fails with krex.WorkerDied.

See docs/PYTHON.md ("Worker pool").
"""

import atexit
import concurrent.futures as _cf
import importlib
import itertools
import multiprocessing as _mp
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import weakref
from multiprocessing.connection import wait as _wait

from . import _krex

__all__ = ["Pool", "PoolError", "WorkerDied", "worker_tenant"]

# The C++ pool's ranges (detail::pool_option_table in include/krex/pool_options.hpp).
_RANGES = {row["name"]: (row["lo"], row["hi"]) for row in _krex._pool_table}

_worker = {"tenant": None, "device": None, "index": None}


def worker_tenant():
    """In a pool worker: the worker's krex.Tenant (joined on its device when the
    worker started). Elsewhere: None."""
    return _worker["tenant"]


class PoolError(_krex.Error):
    """A pool's own failure (a krex.Error with step 'pool'): it could not
    start, it was shut down, a task timed out, a result could not be sent."""

    def __init__(self, message, hint=""):
        super().__init__("krex: pool: " + message + (" — " + hint if hint else ""))
        self.step, self.hint, self.code = "pool", hint, 0

    def __reduce__(self):  # a worker's PoolError reaches the pool unchanged
        return (_rebuild_error, (type(self), self.args, self.hint))


def _rebuild_error(cls, args, hint):
    e = cls.__new__(cls)
    e.args = args
    e.step, e.hint, e.code = "pool", hint, 0
    return e


class WorkerDied(PoolError):
    """The worker running the task died (a crash, os._exit, a kill from
    outside, a timeout); the pool replaced it."""


class _RemoteTraceback(Exception):
    def __init__(self, tb):
        super().__init__(tb)
        self.tb = tb

    def __str__(self):
        return self.tb


def _name_of(fn):
    """'module:function' for a string or a top-level function."""
    if isinstance(fn, str):
        if fn.count(":") != 1 or not all(fn.split(":")):
            raise TypeError("krex.Pool: a task is 'module:function' or a top-level function, "
                            "not %r" % (fn,))
        return fn
    module = getattr(fn, "__module__", None)
    qual = getattr(fn, "__qualname__", None)
    if not callable(fn) or not module or not qual or "<" in qual:
        raise TypeError("krex.Pool: %r is not a top-level function of a module; name it "
                        "'module:function' (workers import it, so it must survive 'spawn')"
                        % (fn,))
    return "%s:%s" % (module, qual)


def _resolve(name):
    module, _, attr = name.partition(":")
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def _describe_exit(code):
    if code is None:
        return "still running"
    if code < 0:
        try:
            return "killed by signal %d (%s)" % (-code, signal.Signals(-code).name)
        except ValueError:
            return "killed by signal %d" % -code
    return "exit status %d" % code


# --- the worker process ---------------------------------------------------

def _worker_main(conn, index, device, tenant_options, initializer, patch):
    """What a worker process runs: join, initializer, then tasks until the
    pool closes the connection (or sends None); then leave the node."""
    try:
        import krex  # the package: region/measure for the tasks
        os.environ.pop("KREX_DEVICE", None)  # the pool decides the device, not the variable
        t = _krex.Tenant(device, **tenant_options)
        _worker.update(tenant=t, device=device, index=index)
        # The worker's tenant is the process tenant too: krex.process_tenant()
        # and patched timing calls (patch=True, or a task's own krex.patch())
        # use it rather than joining a second one.
        sys.modules["krex.patch"]._adopt(t)
        if patch:
            krex.patch(device=device, **tenant_options)
        if initializer is not None:
            _resolve(initializer)()
    except BaseException as e:  # noqa: BLE001 - every start failure is reported
        try:
            conn.send_bytes(pickle.dumps(("start_failed", "%s: %s" % (type(e).__name__, e))))
        except Exception:  # noqa: BLE001
            pass
        return
    conn.send_bytes(pickle.dumps(("ready", os.getpid(), t.slot)))
    cache = {}
    while True:
        try:
            msg = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            break
        if msg is None:
            break
        task_id, name, args, kwargs = msg
        t0 = time.perf_counter()
        try:
            fn = cache.get(name)
            if fn is None:
                fn = cache[name] = _resolve(name)
            reply = ("ok", task_id, fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - SystemExit too: it is the task's
            reply = ("err", task_id, e, traceback.format_exc())
        handler_ms = (time.perf_counter() - t0) * 1e3
        try:
            data = pickle.dumps(reply + (handler_ms,))
        except Exception as e:  # noqa: BLE001 - an unpicklable result or exception
            what = "result" if reply[0] == "ok" else "exception %r" % (reply[2],)
            err = PoolError("the task's %s cannot be pickled: %s" % (what, e),
                            "return (or raise) picklable values")
            data = pickle.dumps(("err", task_id, err, reply[3] if reply[0] == "err" else "",
                                 handler_ms))
        try:
            conn.send_bytes(data)
        except (EOFError, OSError):
            break
    t.leave()
    _worker["tenant"] = None


# --- the harness side -----------------------------------------------------

_live_pools = weakref.WeakSet()


@atexit.register
def _stop_live_pools():
    # At interpreter exit (before multiprocessing's own handler, registered
    # earlier, terminates daemonic children): stop every pool's workers now,
    # so that none is respawned while the interpreter goes down.
    for pool in list(_live_pools):
        try:
            pool._terminate()
        except Exception:  # noqa: BLE001
            pass

class _Task:
    __slots__ = ("id", "name", "args", "kwargs", "future", "device", "submitted", "sent",
                 "deadline")

    def __init__(self, task_id, name, args, kwargs, device):
        self.id, self.name, self.args, self.kwargs = task_id, name, args, kwargs
        self.future = _cf.Future()
        self.device = device  # a device ordinal (submit_to), or None
        self.submitted = time.monotonic()
        self.sent = None
        self.deadline = None


class _Worker:
    def __init__(self, index, device):
        self.index, self.device = index, device
        self.proc = None
        self.conn = None
        self.state = "exited"  # starting, idle, busy, killing, exited, retired
        self.task = None
        self.pid = None
        self.slot = None
        self.commands = self.failures = self.respawns = self.start_failures = 0
        self.start_error = ""
        self.last_error = ""


class Pool(_cf.Executor):
    """Persistent worker processes, ``workers`` per device, each a krex tenant
    of its own device.

    ``devices``: None (one device: ``device``, default 0), a list of device
    ordinals, or "all" (every device the backend sees). ``tenant_options``:
    the keyword options of krex.Tenant (segment, freeze, pin, ...), the same
    for every worker; the device is the pool's. ``initializer``: a
    "module:function" (or top-level function) every worker calls once after
    its tenant joined (e.g. create the CUDA context, load modules).
    ``timeout``: seconds a task may run in its worker before the worker is
    killed and the task fails (None: no limit). ``patch``: call krex.patch()
    in every worker on its own tenant, so patched timing functions
    (triton.testing.do_bench, KernelBench's) run in regions. ``context``:
    the multiprocessing start method, 'spawn' (default) or 'forkserver'
    ('fork' is refused: a CUDA context does not survive it).

    The constructor starts every worker and waits until each one's tenant
    joined (``start_timeout`` seconds); a worker that cannot start raises
    krex.PoolError with its own error.
    """

    def __init__(self, workers=1, devices=None, *, device=0, initializer=None, timeout=None,
                 start_timeout=120.0, respawn=True, start_retries=3, recycle_on_error=False,
                 patch=False, context="spawn", shutdown_grace=10.0, **tenant_options):
        lo, hi = _RANGES["workers"]
        if isinstance(workers, bool) or not isinstance(workers, int) or not lo <= workers <= hi:
            raise PoolError("workers=%r" % (workers,),
                            "%d..%d worker processes per device" % (lo, hi))
        if context not in ("spawn", "forkserver"):
            raise PoolError("context=%r" % (context,),
                            "'spawn' or 'forkserver': a CUDA context does not survive fork")
        if "device" in tenant_options:
            raise TypeError("krex.Pool: pass device= or devices=, not both")
        if devices is None:
            devices = [device]
        elif devices == "all":
            n = _krex.device_count(**tenant_options)
            if n < 1:
                raise PoolError("devices='all': the backend (%s) sees no device" % _krex.backend,
                                "check the driver and CUDA_VISIBLE_DEVICES, or list the devices")
            devices = list(range(n))
        else:
            devices = list(devices)
            if not devices or any(isinstance(d, bool) or not isinstance(d, int) or d < 0
                                  for d in devices) or len(set(devices)) != len(devices):
                raise PoolError("devices=%r" % (devices,),
                                "a non-empty list of distinct device ordinals, or 'all'")
        self._devices = devices
        self._per = workers
        self._tenant_options = dict(tenant_options)
        self._initializer = _name_of(initializer) if initializer is not None else None
        self._timeout = timeout
        self._respawn = respawn
        self._start_retries = start_retries
        self._recycle = recycle_on_error
        self._patch = patch
        self._grace = shutdown_grace
        self._ctx = _mp.get_context(context)
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._ids = itertools.count(1)
        self._queue = []                           # for any device
        self._dq = {d: [] for d in devices}        # per device (submit_to)
        self._counts = {"submitted": 0, "ok": 0, "failures": 0, "cancelled": 0}
        self._closing = False
        self._killing = False
        self._started = False
        self._start_error = ""
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        self._workers = [_Worker(i, devices[i // workers]) for i in range(workers * len(devices))]
        with self._lock:
            for w in self._workers:
                self._spawn(w)
        self._thread = threading.Thread(target=self._loop, name="krex-pool", daemon=True)
        self._thread.start()
        _live_pools.add(self)
        end = time.monotonic() + start_timeout
        with self._cv:
            while not self._start_error and not all(w.state == "idle" for w in self._workers):
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(left)
            why = self._start_error
            if not why and not all(w.state == "idle" for w in self._workers):
                why = "not every worker's tenant joined within %g s" % start_timeout
            self._started = True
        if why:
            self.shutdown(wait=True)
            raise PoolError("the pool could not start: " + why,
                            "a worker's tenant must be able to join (see its error); raise "
                            "start_timeout if joins are slow")

    # -- public API --

    @property
    def devices(self):
        """The devices the pool serves, in its order."""
        return list(self._devices)

    def submit(self, fn, /, *args, **kwargs):
        """Runs ``fn(*args, **kwargs)`` in a worker of the least-loaded device
        (FIFO). ``fn``: "module:function" or a top-level function. Returns a
        concurrent.futures.Future."""
        return self._enqueue(None, fn, args, kwargs)

    def submit_to(self, device, fn, /, *args, **kwargs):
        """As submit(), in a worker of ``device`` (one of the pool's devices)."""
        if device not in self._dq:
            raise PoolError("submit_to(%r): the pool does not serve device %r" % (device, device),
                            "pass one of the pool's devices: %s" % self._devices)
        return self._enqueue(device, fn, args, kwargs)

    def shutdown(self, wait=True, *, cancel_futures=False):
        """Stops taking tasks; tasks queued and running still finish (unless
        ``cancel_futures``); then the workers leave the node and exit (after
        ``shutdown_grace`` seconds they are killed). Idempotent."""
        with self._cv:
            self._closing = True
            if cancel_futures:
                for q in [self._queue] + list(self._dq.values()):
                    for t in q:
                        if t.future.cancel():
                            self._counts["cancelled"] += 1
                    q.clear()
            self._wake()
        if wait and self._thread is not threading.current_thread():
            self._thread.join()

    close = shutdown

    def _terminate(self):
        """Shutdown without waiting for running tasks: workers are killed,
        running and queued tasks fail. For interpreter exit."""
        with self._cv:
            self._closing = self._killing = True
            self._wake()
        if self._thread is not threading.current_thread():
            self._thread.join(10)

    def stats(self):
        """Node counters and one dict per device (see docs/PYTHON.md)."""
        with self._lock:
            devs = []
            for d in self._devices:
                ws = [w for w in self._workers if w.device == d]
                devs.append({
                    "device": d, "workers": len(ws),
                    "alive": sum(w.state in ("idle", "busy") for w in ws),
                    "busy": sum(w.state == "busy" for w in ws),
                    "queued": len(self._dq[d]),
                    "commands": sum(w.commands for w in ws),
                    "failures": sum(w.failures for w in ws),
                    "respawns": sum(w.respawns for w in ws),
                })
            s = dict(self._counts)
            s["queued"] = len(self._queue) + sum(d["queued"] for d in devs)
            for k in ("workers", "alive", "busy", "respawns"):
                s[k] = sum(d[k] for d in devs)
            s["devices"] = devs
            return s

    def workers(self):
        """One dict per worker place: index, device, pid, slot, alive,
        commands, failures, respawns, running (the task's name, or None),
        last_error."""
        with self._lock:
            return [{"index": w.index, "device": w.device, "pid": w.pid, "slot": w.slot,
                     "alive": w.state in ("idle", "busy"), "commands": w.commands,
                     "failures": w.failures, "respawns": w.respawns,
                     "running": w.task.name if w.task is not None else None,
                     "last_error": w.last_error} for w in self._workers]

    # -- internals (the pool's thread does all process and pipe work) --

    def _wake(self):
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def _enqueue(self, device, fn, args, kwargs):
        name = _name_of(fn)
        with self._lock:
            if self._closing:
                raise PoolError("submit() after shutdown()", "submit before shutdown()")
            if not self._left(device):
                where = "" if device is None else " on device %d" % device
                raise PoolError("no worker is left%s: %s" % (where, self._last_error()),
                                "see pool.workers(); make a new pool")
            task = _Task(next(self._ids), name, args, kwargs, device)
            self._counts["submitted"] += 1
            (self._queue if device is None else self._dq[device]).append(task)
            self._wake()
        return task.future

    def _left(self, device=None):
        return any(w.state != "retired" and (device is None or w.device == device)
                   for w in self._workers)

    def _last_error(self):
        errs = [w.last_error for w in self._workers if w.last_error]
        return errs[-1] if errs else "every worker was given up"

    def _spawn(self, w):
        parent, child = self._ctx.Pipe(duplex=True)
        p = self._ctx.Process(
            target=_worker_main, name="krex-pool-worker-%d" % w.index, daemon=True,
            args=(child, w.index, w.device, self._tenant_options, self._initializer,
                  self._patch))
        try:
            p.start()
        except Exception as e:  # noqa: BLE001
            parent.close()
            child.close()
            self._retire(w, "cannot start a worker process: %s" % e)
            return
        child.close()
        w.proc, w.conn, w.pid, w.slot = p, parent, p.pid, None
        w.state = "starting"
        w.start_error = ""

    def _retire(self, w, why):
        w.state = "retired"
        w.last_error = why
        if not self._started and not self._start_error:
            self._start_error = "worker %d (device %d): %s" % (w.index, w.device, why)
        if not self._left(w.device):
            self._fail_queue(self._dq[w.device], "no worker is left on device %d: %s"
                             % (w.device, why))
        if not self._left():
            self._fail_queue(self._queue, "no worker is left: %s" % why)

    def _fail_queue(self, q, why):
        for t in q:
            if t.future.set_running_or_notify_cancel():
                t.future.set_exception(PoolError(why))
                self._counts["failures"] += 1
            else:
                self._counts["cancelled"] += 1
        q.clear()

    def _finish(self, w, ok, value, handler_ms=0.0, tb=None):
        t = w.task
        w.task = None
        w.commands += 1
        now = time.monotonic()
        t.future.krex_info = {  # where and how long: like krex::pool_result
            "device": w.device, "worker": w.index, "pid": w.pid, "slot": w.slot,
            "queue_ms": (t.sent - t.submitted) * 1e3, "wall_ms": (now - t.sent) * 1e3,
            "handler_ms": handler_ms}
        if ok:
            self._counts["ok"] += 1
            t.future.set_result(value)
            return
        w.failures += 1
        self._counts["failures"] += 1
        if tb and isinstance(value, BaseException):
            value.__cause__ = _RemoteTraceback('\n"""\n%s"""' % tb)
        t.future.set_exception(value)

    def _least_loaded(self, idle):
        best, key = None, None
        for d in self._devices:
            if not idle.get(d):
                continue
            ws = [w for w in self._workers if w.device == d]
            busy = sum(w.state == "busy" for w in ws)
            alive = sum(w.state in ("idle", "busy") for w in ws)
            k = (busy / alive if alive else 1.0, busy)
            if key is None or k < key:
                best, key = d, k
        return best

    def _dispatch(self):
        while True:
            idle = {}
            for w in self._workers:
                if w.state == "idle":
                    idle.setdefault(w.device, w)
            if not idle:
                return
            q, dev = None, None
            oldest = None
            for d, dq in self._dq.items():
                if dq and d in idle and (oldest is None or dq[0].id < oldest):
                    q, dev, oldest = dq, d, dq[0].id
            if self._queue and (oldest is None or self._queue[0].id < oldest):
                q, dev = self._queue, self._least_loaded(idle)
            if q is None:
                return
            t = q.pop(0)
            if not t.future.set_running_or_notify_cancel():
                self._counts["cancelled"] += 1
                continue
            w = idle[dev]
            try:
                w.conn.send_bytes(pickle.dumps((t.id, t.name, t.args, t.kwargs)))
            except (pickle.PicklingError, TypeError, AttributeError) as e:
                t.future.set_exception(PoolError("the task's arguments cannot be pickled: %s" % e,
                                                 "pass picklable arguments"))
                self._counts["failures"] += 1
                continue
            except OSError:
                pass  # its end is seen on its sentinel; the task fails there
            t.sent = time.monotonic()
            if self._timeout is not None:
                t.deadline = t.sent + self._timeout
            w.task, w.state = t, "busy"

    def _kill(self, w):
        if w.proc is not None and w.proc.exitcode is None:
            try:
                os.kill(w.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        w.state = "killing"

    def _on_message(self, w, msg):
        kind = msg[0]
        if kind == "ready" and w.state == "starting":
            w.pid, w.slot = msg[1], msg[2]
            w.state = "idle"
            w.start_failures = 0
        elif kind == "start_failed":
            w.start_error = msg[1]
        elif kind in ("ok", "err") and w.task is not None and msg[1] == w.task.id:
            ok = kind == "ok"
            self._finish(w, ok, msg[2], msg[-1], None if ok else msg[3])
            if not ok and self._recycle:
                w.last_error = "recycled after a failed task"
                try:
                    w.conn.send_bytes(pickle.dumps(None))
                except OSError:
                    pass
                w.state = "killing"  # it exits by itself; replaced on its sentinel
            elif w.state == "busy":
                w.state = "idle"

    def _read(self, w):
        """Every message the worker wrote; False once its connection ended."""
        while w.conn is not None:
            try:
                if not w.conn.poll():
                    return True
                data = w.conn.recv_bytes()
            except (EOFError, OSError):
                w.conn.close()
                w.conn = None
                return False
            try:
                msg = pickle.loads(data)
            except Exception as e:  # noqa: BLE001 - e.g. an exception class not importable here
                if w.task is not None:
                    self._finish(w, False, PoolError(
                        "the task's result cannot be unpickled in the pool: %s" % e,
                        "return (or raise) types the harness can import"))
                    w.state = "idle" if w.state == "busy" else w.state
                continue
            self._on_message(w, msg)
        return False

    def _on_exit(self, w):
        self._read(w)
        if w.conn is not None:
            w.conn.close()
            w.conn = None
        w.proc.join(1)
        how = _describe_exit(w.proc.exitcode)
        who = "worker %d (pid %s, device %d)" % (w.index, w.proc.pid, w.device)
        was = w.state
        if w.task is not None:
            if self._closing and was == "killing":
                err = PoolError("the pool shut down while %r ran; %s %s" % (w.task.name, who, how))
            else:
                err = WorkerDied("%s died while running %r: %s; it is replaced"
                                 % (who, w.task.name, how))
            self._finish(w, False, err)
        w.proc, w.pid, w.slot = None, None, None
        if was == "starting":
            w.last_error = w.start_error or "%s ended before its tenant joined: %s" % (who, how)
            if not self._started:
                self._retire(w, w.last_error)
                return
            w.start_failures += 1
            if w.start_failures > self._start_retries:
                self._retire(w, "%s (gave up after %d failed starts in a row)"
                             % (w.last_error, w.start_failures))
                return
        elif was != "killing" and not self._closing:
            w.last_error = "%s %s" % (who, how)  # killing: the reason is already there
        if self._closing:
            w.state = "exited"
            return
        if not self._respawn and not (was == "killing" and w.last_error.startswith("recycled")):
            self._retire(w, w.last_error + " (respawn is off)")
            return
        w.respawns += 1
        self._spawn(w)

    def _check_deadlines(self):
        now = time.monotonic()
        nearest = None
        for w in self._workers:
            t = w.task
            if w.state != "busy" or t is None or t.deadline is None:
                continue
            if now >= t.deadline:
                w.last_error = ("killed: task %r ran past the pool's timeout of %g s"
                                % (t.name, self._timeout))
                self._finish(w, False, WorkerDied(
                    "task %r ran past the pool's timeout of %g s; worker %d (pid %s, device %d) "
                    "was killed and is replaced" % (t.name, self._timeout, w.index, w.pid,
                                                    w.device)))
                self._kill(w)
            elif nearest is None or t.deadline < nearest:
                nearest = t.deadline
        return nearest

    def _loop(self):
        closing_since = None
        with self._cv:
            while True:
                if not self._closing:
                    self._dispatch()
                else:
                    self._dispatch()  # queued tasks still run (shutdown without cancel)
                    if self._killing:
                        for q in [self._queue] + list(self._dq.values()):
                            self._fail_queue(q, "the pool was terminated (interpreter exit)")
                        for w in self._workers:
                            if w.proc is not None and w.state != "killing":
                                self._kill(w)
                    pending = self._queue or any(self._dq.values()) or any(
                        w.state == "busy" for w in self._workers)
                    if not pending:
                        if closing_since is None:
                            closing_since = time.monotonic()
                            for w in self._workers:
                                if w.conn is not None and w.state in ("idle", "starting"):
                                    try:
                                        w.conn.send_bytes(pickle.dumps(None))
                                    except OSError:
                                        pass
                                    w.state = "killing"
                        elif time.monotonic() - closing_since > max(self._grace, 1.0):
                            for w in self._workers:
                                if w.proc is not None:
                                    self._kill(w)
                    if all(w.proc is None for w in self._workers):
                        break
                nearest = self._check_deadlines()
                objs = [self._wake_r]
                for w in self._workers:
                    if w.conn is not None:
                        objs.append(w.conn)
                    if w.proc is not None:
                        objs.append(w.proc.sentinel)
                timeout = 0.2
                if nearest is not None:
                    timeout = max(0.0, min(timeout, nearest - time.monotonic()))
                self._cv.notify_all()
                self._lock.release()
                try:
                    ready = _wait(objs, timeout)
                finally:
                    self._lock.acquire()
                for obj in ready:
                    if obj is self._wake_r:
                        try:
                            while os.read(self._wake_r, 4096):
                                pass
                        except (BlockingIOError, OSError):
                            pass
                        continue
                    for w in self._workers:
                        if w.conn is not None and obj is w.conn:
                            self._read(w)
                            break
                        if (w.proc is not None and obj == w.proc.sentinel
                                and w.proc.exitcode is not None):  # not a reused fd number
                            self._on_exit(w)
                            break
            for q in [self._queue] + list(self._dq.values()):
                self._fail_queue(q, "the pool shut down before the task was sent")
            for w in self._workers:
                if w.state != "retired":
                    w.state = "exited"
            self._cv.notify_all()
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1

    def __del__(self):
        try:
            if not self._closing:
                self.shutdown(wait=False, cancel_futures=True)
        except Exception:  # noqa: BLE001
            pass

