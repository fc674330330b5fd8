#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""krex inside Slurm jobs that share a GPU through gres/shard (docs/FLEET.md),
on a single-node Slurm started here: munged, slurmctld and slurmd on private
sockets, ports and state directories; a count-only GRES (gpu:1 on /dev/null,
shard:8); the host backend through the Python binding.

- 8 concurrent `srun --gres=shard:1` jobs, each a krex tenant that enters 3
  regions: the jobs ran at once (their spans overlap), their regions never
  did, and the holders froze tenants of *other* jobs;
- a job cancelled with `scancel` while it is a tenant: its process is gone
  and the epilog's `krexctl clean` (the recipe's node-idle clean) leaves no
  leaf of the segment behind.

Slurm here uses proctrack/linuxproc and task/none (no Slurm cgroups): the
development VM's cgroups are hybrid v1/v2, which Slurm's cgroup plugins do
not support, and there is no systemd for cgroup/v2's scopes. So every job
starts in the same cgroup and the derived krex root is node-wide; the
recipe's explicit root under slurmstepd.scope is not exercised.

usage: slurm_test.py KREXCTL [PYTHONPATH]      exit 77: skipped (says why)
"""
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "python"))
from pyutil import cleanup, unique_name  # noqa: E402

SKIP = 77
JOBS = 8


def skip(why):
    print("SKIP: " + why)
    sys.exit(SKIP)


def free_port():
    for _ in range(50):
        p = random.randint(20000, 40000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
                return p
            except OSError:
                continue
    raise RuntimeError("no free port")


def wait_for(what, fn, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(0.3)
    raise AssertionError("timed out after %s s waiting for %s" % (timeout, what))


JOB = r'''
import json, os, sys, time
import krex
t = krex.Tenant(segment=sys.argv[1], scope="all", pin=False, confine=False,
                lock_wait_ms=60000, lease_ms=60000)
out = {"pid": os.getpid(), "job": os.environ.get("SLURM_JOB_ID"),
       "shards": os.environ.get("SLURM_SHARDS_ON_NODE"), "start": time.monotonic_ns(),
       "regions": [], "freeze": t.freeze}
if len(sys.argv) > 2:                       # the job to cancel: say it joined, then wait
    with open(sys.argv[2], "w") as f:
        f.write(json.dumps(out))
    time.sleep(600)
for _ in range(3):
    with krex.region(t) as r:
        a = time.monotonic_ns()
        while time.monotonic_ns() < a + 20_000_000:
            pass
        b = time.monotonic_ns()
    out["regions"].append([a, b, r.report["frozen_pids"], r.report["level"]])
    time.sleep(0.01)
out["end"] = time.monotonic_ns()
t.leave()
print("RESULT " + json.dumps(out), flush=True)
'''


def main():
    krexctl = sys.argv[1] if len(sys.argv) > 1 else ""
    pypath = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("PYTHONPATH", "")
    if os.geteuid() != 0:
        skip("needs root (slurmd runs jobs as their user; krex freezes through cgroups)")
    missing = [b for b in ("munged", "slurmctld", "slurmd", "srun", "sbatch", "scancel", "sinfo")
               if not shutil.which(b, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")]
    if missing:
        skip("Slurm is not installed (missing %s): apt-get install slurmctld slurmd slurm-client "
             "munge" % ", ".join(missing))
    if not os.path.isfile("/etc/munge/munge.key"):
        skip("no /etc/munge/munge.key (the munge package creates it: dpkg-reconfigure munge)")
    if not krexctl or not os.access(krexctl, os.X_OK):
        skip("krexctl not built (%r)" % krexctl)
    env = dict(os.environ, PYTHONPATH=pypath, PYTHONDONTWRITEBYTECODE="1")
    if subprocess.run([sys.executable, "-c", "import krex; assert krex.backend == 'host'"],
                      env=env, capture_output=True).returncode != 0:
        skip("the krex Python module (host backend) is not importable from %r" % pypath)

    sbin = lambda b: shutil.which(b, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")  # noqa: E731
    tmp = tempfile.mkdtemp(prefix="krex-slurm-")
    os.chmod(tmp, 0o755)
    name = unique_name("slurm")
    host = socket.gethostname().split(".")[0]
    procs = []
    try:
        # munged of our own: its socket in tmp, run as the munge user.
        mdir = os.path.join(tmp, "munge")
        os.makedirs(mdir)
        shutil.copy("/etc/munge/munge.key", os.path.join(mdir, "munge.key"))
        subprocess.run(["chown", "-R", "munge:munge", mdir], check=True)
        os.chmod(os.path.join(mdir, "munge.key"), 0o400)
        os.chmod(mdir, 0o755)
        sock = os.path.join(mdir, "munge.sock")
        subprocess.run(["runuser", "-u", "munge", "--", sbin("munged"), "--socket=" + sock,
                        "--key-file=" + os.path.join(mdir, "munge.key"),
                        "--pid-file=" + os.path.join(mdir, "munged.pid"),
                        "--log-file=" + os.path.join(mdir, "munged.log"),
                        "--seed-file=" + os.path.join(mdir, "munged.seed")], check=True, timeout=30)
        for d in ("state", "spool", "out"):
            os.makedirs(os.path.join(tmp, d))
        epilog = os.path.join(tmp, "epilog.sh")
        with open(epilog, "w") as f:  # the recipe's node-idle clean, for this test's segment
            f.write("#!/bin/sh\n%s clean --segment %s --kill >> %s/epilog.log 2>&1\n"
                    "echo \"job $SLURM_JOB_ID rc $?\" >> %s/epilog.log\n" % (krexctl, name, tmp, tmp))
        os.chmod(epilog, 0o755)
        conf = os.path.join(tmp, "slurm.conf")
        with open(conf, "w") as f:
            f.write(textwrap.dedent("""\
                ClusterName=krex{u}
                SlurmctldHost={host}
                SlurmUser=root
                AuthType=auth/munge
                AuthInfo=socket={sock}
                StateSaveLocation={tmp}/state
                SlurmdSpoolDir={tmp}/spool
                SlurmctldPidFile={tmp}/slurmctld.pid
                SlurmdPidFile={tmp}/slurmd.pid
                SlurmctldPort={p1}
                SlurmdPort={p2}
                ProctrackType=proctrack/linuxproc
                TaskPlugin=task/none
                SelectType=select/cons_tres
                SelectTypeParameters=CR_Core
                SlurmdParameters=config_overrides
                GresTypes=gpu,shard
                NodeName={host} CPUs=16 Gres=gpu:1,shard:8 State=UNKNOWN
                PartitionName=ci Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
                AccountingStorageType=accounting_storage/none
                JobCompType=jobcomp/none
                MpiDefault=none
                ReturnToService=2
                Epilog={epilog}
                SlurmctldLogFile={tmp}/slurmctld.log
                SlurmdLogFile={tmp}/slurmd.log
                """).format(u=os.getpid(), host=host, sock=sock, tmp=tmp, p1=free_port(),
                            p2=free_port(), epilog=epilog))
        with open(os.path.join(tmp, "gres.conf"), "w") as f:
            f.write("Name=gpu Count=1 File=/dev/null\nName=shard Count=8\n")
        env["SLURM_CONF"] = conf
        procs.append(subprocess.Popen([sbin("slurmctld"), "-D", "-f", conf], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        procs.append(subprocess.Popen([sbin("slurmd"), "-D", "-f", conf], env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        def idle():
            r = subprocess.run(["sinfo", "-h", "-N", "-o", "%T %G"], env=env, capture_output=True,
                               text=True)
            return r.returncode == 0 and r.stdout.startswith("idle") and "shard:8" in r.stdout
        wait_for("the node idle with 8 shards", idle, 60)

        # 8 jobs at once, one shard each.
        job = os.path.join(tmp, "job.py")
        with open(job, "w") as f:
            f.write(JOB)
        os.chmod(job, 0o644)
        runs = [subprocess.Popen(["srun", "--gres=shard:1", "-n1", "-t", "5", sys.executable, job, name],
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for _ in range(JOBS)]
        outs = []
        for p in runs:
            o, e = p.communicate(timeout=180)
            assert p.returncode == 0, "srun exited %d: %s" % (p.returncode, e)
            outs.append(json.loads([ln for ln in o.splitlines() if ln.startswith("RESULT ")][0][7:]))
        jobs = {o["job"] for o in outs}
        assert len(jobs) == JOBS, "8 Slurm jobs: %s" % jobs
        assert all(o["shards"] == "1" for o in outs), [o["shards"] for o in outs]
        pid_job = {o["pid"]: o["job"] for o in outs}
        # The control: the jobs ran at the same time.
        spans = sorted((o["start"], o["end"]) for o in outs)
        assert any(b[0] < a[1] for a, b in zip(spans, spans[1:])), "the jobs never ran at once"
        regions = sorted((a, b, o["pid"]) for o in outs for a, b, _, _ in o["regions"])
        bad = [(x, y) for x, y in zip(regions, regions[1:]) if y[0] < x[1]]
        assert not bad, "regions of different jobs overlapped: %s" % bad[:3]
        if outs[0]["freeze"] in ("cgroup2", "cgroup1"):
            frozen_other = set()
            for o in outs:
                for _, _, frozen, level in o["regions"]:
                    assert "freeze" in level, level
                    assert o["pid"] not in frozen
                    frozen_other |= {pid_job.get(p) for p in frozen if pid_job.get(p) != o["job"]}
            assert len(frozen_other - {None}) >= 2, "holders froze tenants of other jobs: %s" % frozen_other
        print("8 jobs: %d regions, none overlapping; freeze %s" % (len(regions), outs[0]["freeze"]))

        # A job cancelled while it is a tenant.
        flag = os.path.join(tmp, "out", "joined.json")
        r = subprocess.run(["sbatch", "--parsable", "--gres=shard:1", "-n1", "-t", "5",
                            "-o", os.path.join(tmp, "out", "hold.out"),
                            "--wrap", "%s %s %s %s" % (sys.executable, job, name, flag)],
                           env=env, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        jid = r.stdout.strip().split(";")[0]
        joined = wait_for("the held job to join", lambda: os.path.exists(flag) and os.path.getsize(flag)
                          and json.load(open(flag)), 60)
        subprocess.run(["scancel", jid], env=env, check=True, timeout=30)

        def gone():
            q = subprocess.run(["squeue", "-h", "-j", jid], env=env, capture_output=True, text=True)
            alive = os.path.exists("/proc/%d" % joined["pid"])
            log = open(os.path.join(tmp, "epilog.log")).read() if os.path.exists(
                os.path.join(tmp, "epilog.log")) else ""
            return not q.stdout.strip() and not alive and ("job %s rc" % jid) in log
        wait_for("the cancelled job, its tenant and its epilog to finish", gone, 60)
        log = open(os.path.join(tmp, "epilog.log")).read()
        assert "job %s rc 0" % jid in log, log
        leaves = [os.path.join(dp, d) for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")
                  if os.path.isdir(root)
                  for dp, dns, _ in os.walk(root) if name in dp for d in dns if d.startswith("t")]
        assert not leaves, "leaves left after scancel and the epilog: %s" % leaves
        print("scancel: tenant %d gone, epilog clean rc 0, no leaf left" % joined["pid"])
        return 0
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
        pidf = os.path.join(tmp, "munge", "munged.pid")
        if os.path.exists(pidf):
            try:
                os.kill(int(open(pidf).read().strip()), 15)
            except (OSError, ValueError):
                pass
        cleanup(name)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
