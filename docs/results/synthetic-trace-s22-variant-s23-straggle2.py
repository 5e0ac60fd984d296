# Session 23 (straggle2): the s22 generator with seed 31, 3.5 % noise, stragglers 1.25-2.2x; `python docs/results/synthetic-trace-s22-variant-s23-straggle2.py 0.05 /tmp/s22-var.csv`
# `python docs/results/synthetic-trace-s22.py 0 /tmp/s22-no-stragglers.csv`: the same without stragglers.
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
rng = np.random.default_rng(31)
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
                        noise = np.exp(rng.normal(0, 0.035))
                        if rng.random() < STRAGGLERS:
                            noise *= rng.uniform(1.25, 2.2)
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
