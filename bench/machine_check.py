"""Can this machine run its cores at once? A check to run before (and after) the other benchmarks.

On a shared VM two vCPUs can each be fast alone and slow together (siblings of one physical core, or a busy
host): then every multi-process figure — sparkdl on local[2], TorchDistributor, local[2] vs local[1] scaling —
says more about the host than about the code. This script times a fixed float32 GEMM loop in one process per
core, first alone on each core, then on all cores at once, and prints the slowdown of the concurrent run.

    python bench/machine_check.py [--seconds 3]

Last line: one JSON object ``{"cores": n, "alone_ms": [...], "together_ms": [...], "worst_slowdown": x}``
(the median milliseconds per GEMM block per core; a worst slowdown above ~1.15 means the cores interfere).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_WORKER = """
import os, sys, time
os.environ["OPENBLAS_NUM_THREADS"] = "1"
import numpy as np
os.sched_setaffinity(0, {int(sys.argv[1])})
a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
end, times = time.perf_counter() + float(sys.argv[2]), []
while time.perf_counter() < end:
    t = time.perf_counter()
    for _ in range(20):
        a @ a
    times.append(time.perf_counter() - t)
print(1000 * sorted(times)[len(times) // 2])
"""


def _run(cores, seconds):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-c", _WORKER, str(c), str(seconds)], stdout=subprocess.PIPE,
                              text=True, env=env) for c in cores]
    return [float(p.communicate()[0]) for p in procs]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="duration of each timing run")
    args = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    alone = [_run([c], args.seconds)[0] for c in cores]
    together = _run(cores, args.seconds)
    slowdown = max(t / a for t, a in zip(together, alone))
    for c, a, t in zip(cores, alone, together):
        print(f"core {c}: {a:6.2f} ms alone, {t:6.2f} ms with all cores busy ({t / a:.2f}x)")
    print(f"worst slowdown {slowdown:.2f}x" + ("  <- the cores interfere: multi-process figures are unreliable now"
                                              if slowdown > 1.15 else ""))
    print(json.dumps({"cores": len(cores), "alone_ms": [round(a, 2) for a in alone],
                      "together_ms": [round(t, 2) for t in together], "worst_slowdown": round(slowdown, 3)}))


if __name__ == "__main__":
    main()
