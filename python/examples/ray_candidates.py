#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Evaluates N candidates over a Ray cluster, 8 actors per GPU (num_gpus=1/8),
each candidate timed inside a krex region. Prints each candidate's median and
its region's protection level.

    pip install ray ./python
    python3 python/examples/ray_candidates.py                  # local cluster
    python3 python/examples/ray_candidates.py --address auto   # a running cluster
    python3 python/examples/ray_candidates.py --gpus 1         # no GPU: declare one (host backend)

With PyTorch and a CUDA build of krex the candidates are float32 matmuls of
different sizes, timed with CUDA events; otherwise (the host backend) they are
CPU loops of different lengths, timed with the host clock. docs/FLEET.md.
"""

import argparse
import time

import ray

import krex
import krex.ray


def make_candidate(i):
    """Candidate i: setup outside the region, returns the function to time."""
    def candidate():
        try:
            import torch
            if krex.backend == "cuda" and torch.cuda.is_available():
                n = 1024 + 256 * (i % 8)
                a = torch.randn(n, n, device="cuda")
                b = torch.randn(n, n, device="cuda")
                torch.cuda.synchronize()
                return lambda: a @ b
        except ImportError:
            pass
        n = 20000 + 5000 * (i % 8)
        data = list(range(n))
        return lambda: sum(x * x for x in data)
    return candidate


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--address", help="a running cluster (default: start a local one)")
    ap.add_argument("--gpus", type=int, help="GPUs to declare for a local cluster (default: detect)")
    ap.add_argument("--per-gpu", type=int, default=8, help="actors per GPU (default 8)")
    ap.add_argument("--candidates", type=int, default=32)
    ap.add_argument("--samples", type=int, default=20)
    a = ap.parse_args()

    if a.address:
        ray.init(address=a.address)
    else:
        ray.init(num_gpus=a.gpus, include_dashboard=False)
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if gpus < 1:
        raise SystemExit("ray_candidates.py: the cluster has no GPU resource; on a machine "
                         "without GPUs pass --gpus 1 (krex's host backend)")
    Worker = krex.ray.worker(num_gpus=1 / a.per_gpu, num_cpus=0)
    workers = [Worker.remote() for _ in range(gpus * a.per_gpu)]
    t0 = time.monotonic()
    results = krex.ray.evaluate(workers, [make_candidate(i) for i in range(a.candidates)],
                                samples=a.samples)
    wall = time.monotonic() - t0
    print("| candidate | actor pid | device | median ms | p95 ms | protection |")
    print("|---|---|---|---|---|---|")
    for i, r in enumerate(results):
        m = r["measure"]
        print("| %d | %d | %d | %.4f | %.4f | %s |" % (i, r["pid"], r["device"], m["median_ms"],
                                                     m["p95_ms"], r["report"]["level"]))
    print("%d candidates on %d actors over %d GPU(s) in %.1f s" % (a.candidates, len(workers), gpus, wall))
    ray.get([w.leave.remote() for w in workers])
    ray.shutdown()


if __name__ == "__main__":
    main()
