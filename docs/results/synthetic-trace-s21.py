# Writes docs/results/synthetic-trace-s21.csv (run from the project root): a trace unlike the bundled ones.
# `python docs/results/synthetic-trace-s21.py [VARIANT] [OUT]` writes one of the variants that checked a
# figure on other constants (edges-variant, leo-v1, leo-v2, stopbias-variant, tables-variant; docs/model.md).
"""A synthetic trace file unlike the bundled ones: Flink-ish jobs, 1..32 workers, 3 machine types,
2 environments, data sizes over two decades, a spill when data per node exceeds memory."""

import sys

import numpy as np
import pandas as pd

BASE = dict(
    seed=7,
    jobs=[("wordcount", 8.0, 4.0, 0.02), ("join", 15.0, 9.0, 0.15), ("etl", 5.0, 2.0, 0.0)],
    sizes=[2000.0, 9000.0, 40000.0, 150000.0],
    scale_outs=[1, 2, 4, 8, 16, 32],
    spill_fraction=0.6,  # a spill where data per node exceeds this share of its memory
    spill=1.8,
    yarn=1.15,  # the yarn environment's level
    yarn_comm=1.0,  # ... its coordination cost's factor
    yarn_per_node_s=0.0,  # ... seconds per worker it adds
    yarn_spill_fraction=None,  # ... its own spill threshold (None: the same)
    noise=0.04,
    small_memory_mb=2048,  # e2-small's
    out="docs/results/synthetic-trace-s21.csv",
)
VARIANTS = {
    "base": {},
    # other seed, constants, scale-outs, spill, noise (docs/results/*-s22-edges*)
    "edges-variant": dict(
        seed=11,
        jobs=[("wordcount", 6.0, 5.0, 0.05), ("join", 20.0, 7.0, 0.3), ("etl", 3.0, 3.0, 0.01)],
        sizes=[1500.0, 6000.0, 25000.0, 100000.0],
        scale_outs=[1, 2, 3, 4, 6, 8, 12, 16, 24],
        spill_fraction=0.5,
        spill=2.2,
        yarn=1.25,
        noise=0.06,
        out="/tmp/edges/variant.csv",
    ),
    # another seed; the held-out cluster is not a level shift (coordination x2, a spill moved)
    "leo-v1": dict(
        seed=11, yarn=1.05, yarn_comm=2.0, yarn_per_node_s=0.5, yarn_spill_fraction=0.45, out="/tmp/leo/synth-v1.csv"
    ),
    # other seed and constants, the held-out cluster x1.3, 6 % noise
    "leo-v2": dict(
        seed=5,
        jobs=[("wordcount", 6.0, 5.0, 0.03), ("join", 20.0, 7.0, 0.1), ("etl", 4.0, 3.0, 0.01)],
        spill_fraction=0.5,
        yarn=1.3,
        noise=0.06,
        out="/tmp/leo/synth-v2.csv",
    ),
    # other seed, sizes, spill threshold and factor, environment factor, noise
    "stopbias-variant": dict(
        seed=11,
        sizes=[1500.0, 7000.0, 30000.0, 120000.0],
        spill_fraction=0.45,
        spill=2.2,
        yarn=1.3,
        noise=0.06,
        out="/tmp/stopbias/variant.csv",
    ),
    # other seed, more memory on the small machine, sizes, spill threshold and factor (session 23, tables)
    "tables-variant": dict(
        seed=23,
        small_memory_mb=4096,
        sizes=[1500.0, 6000.0, 25000.0, 100000.0],
        spill_fraction=0.45,
        spill=2.2,
        out="/tmp/s21v.csv",
    ),
}


def generate(variant: str = "base") -> pd.DataFrame:
    p = {**BASE, **VARIANTS[variant]}
    rng = np.random.default_rng(p["seed"])
    machines = {"n2-standard-8": (8, 32768), "n2-highmem-4": (4, 32768), "e2-small": (2, p["small_memory_mb"])}
    rows = []
    for job, serial, work, comm in p["jobs"]:
        for env in ["k8s", "yarn"]:
            yarn = env == "yarn"
            spill_fraction = p["yarn_spill_fraction"] if yarn and p["yarn_spill_fraction"] else p["spill_fraction"]
            for mt, (cores, mem) in machines.items():
                for size in p["sizes"]:
                    for par in [4.0, 16.0] if job == "join" else [1.0]:
                        for n in p["scale_outs"]:
                            # (x 1.0 and + 0.0 are exact: the base trace is bit for bit what it was)
                            t = serial + work * size / 1000 / (n * cores) * (1 + 0.1 * par)
                            t += comm * n * size / 10000 * (p["yarn_comm"] if yarn else 1.0)
                            t += (p["yarn_per_node_s"] if yarn else 0.0) * n
                            if size / n > mem * spill_fraction:
                                t *= p["spill"]
                            if yarn:
                                t *= p["yarn"]
                            for _ in range(2):
                                rows.append(
                                    dict(
                                        job_type=job,
                                        framework="flink",
                                        scale_out=n,
                                        runtime_s=round(t * np.exp(rng.normal(0, p["noise"])), 2),
                                        machine_type=mt,
                                        cores=float(cores),
                                        memory_mb=float(mem),
                                        environment=env,
                                        data_size_mb=size,
                                        **({"partitions": par} if job == "join" else {}),
                                    )
                                )
    return pd.DataFrame(rows)


if __name__ == "__main__":
    variant = sys.argv[1] if len(sys.argv) > 1 else "base"
    out = sys.argv[2] if len(sys.argv) > 2 else {**BASE, **VARIANTS[variant]}["out"]
    df = generate(variant)
    df.to_csv(out, index=False)
    print(len(df), df.groupby("job_type").size().to_dict())
