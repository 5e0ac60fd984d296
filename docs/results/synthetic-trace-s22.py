# Writes docs/results/synthetic-trace-s22.csv (run from the project root): a second trace unlike the bundled ones.
# `python docs/results/synthetic-trace-s22.py 0 /tmp/s22-no-stragglers.csv`: the same without stragglers.
# `... RATE OUT SEED NOISE SLOWEST`: a variant (session 23: `0.05 OUT 31 0.035 2.2`, stragglers 1.25-2.2x;
# `0.08 OUT 23`: seed 23, 8 % stragglers; docs/model.md). Stragglers are 1.25x+ slow where SLOWEST is given.
"""Spark-like jobs with physics the bundled traces and session 21's trace lack: a shuffle whose
all-to-all cost grows with the cluster, machine types that differ in per-core speed (a property no
run records: only the machine type's name carries it), an iterative job whose per-iteration
synchronisation does not shrink with the cluster, 2..24 executors on a denser grid, and stragglers
(4 % of the runs 1.3-2x slower, as a slow node or a re-tried task makes them)."""

import sys

import numpy as np
import pandas as pd

STRAGGLERS = float(sys.argv[1]) if len(sys.argv) > 1 else 0.04
OUT = sys.argv[2] if len(sys.argv) > 2 else "docs/results/synthetic-trace-s22.csv"
SEED = int(sys.argv[3]) if len(sys.argv) > 3 else 22
NOISE = float(sys.argv[4]) if len(sys.argv) > 4 else 0.03
SLOWEST = float(sys.argv[5]) if len(sys.argv) > 5 else 2.0
FASTEST = 1.3 if len(sys.argv) <= 5 else 1.25
rng = np.random.default_rng(SEED)
# name: (cores, memory_mb, per-core speed)
machines = {
    "m6i.2xlarge": (8, 32768, 1.0),
    "c6i.4xlarge": (16, 32768, 1.25),
    "r6i.xlarge": (4, 32768, 0.9),
    "m5.2xlarge": (8, 32768, 0.8),
}
rows = []
for job in ("scan", "sessionize", "train"):
    for mt, (cores, mem, speed) in machines.items():
        for size in (5_000.0, 20_000.0, 80_000.0, 320_000.0):
            for iterations in (10.0, 40.0) if job == "train" else (None,):
                for n in (2, 3, 4, 6, 8, 12, 16, 24):
                    cpu = size / 1000 / (n * cores * speed)
                    if job == "scan":
                        t = 12 + 3.0 * cpu
                    elif job == "sessionize":
                        # map, then an all-to-all shuffle: each executor sends (1 - 1/n) of its share
                        t = 20 + 4.0 * cpu + 0.9 * size / 1000 / n * (1 - 1 / n) + 0.04 * n * np.log2(n)
                    else:
                        t = 15 + iterations * (0.5 * cpu + 0.35 + 0.05 * np.log2(n))
                    for _ in range(3):
                        noise = np.exp(rng.normal(0, NOISE))
                        if rng.random() < STRAGGLERS:
                            noise *= rng.uniform(FASTEST, SLOWEST)
                        rows.append(
                            dict(
                                job_type=job,
                                framework="spark",
                                scale_out=n,
                                runtime_s=round(t * noise, 2),
                                machine_type=mt,
                                cores=float(cores),
                                memory_mb=float(mem),
                                environment="emr-7",
                                data_size_mb=size,
                                **({"iterations": iterations} if iterations is not None else {}),
                            )
                        )
df = pd.DataFrame(rows)
df.to_csv(OUT, index=False)
print(len(df), df.groupby("job_type").size().to_dict())
