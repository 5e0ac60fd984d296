# A variant of synthetic-trace-s21.py (session 22, stopbias): other seed, sizes, spill threshold and factor, environment factor, noise. Writes /tmp/stopbias/variant.csv.
"""A synthetic trace file unlike the bundled ones: Flink-ish jobs, 1..32 workers, 3 machine types,
2 environments, data sizes over two decades, a spill when data per node exceeds memory."""
import numpy as np, pandas as pd
rng = np.random.default_rng(11)
machines = {"n2-standard-8": (8, 32768), "n2-highmem-4": (4, 32768), "e2-small": (2, 2048)}
rows = []
for job, serial, work, comm in [("wordcount", 8.0, 4.0, 0.02), ("join", 15.0, 9.0, 0.15), ("etl", 5.0, 2.0, 0.0)]:
    for env in ["k8s", "yarn"]:
        for mt, (cores, mem) in machines.items():
            for size in [1500.0, 7000.0, 30000.0, 120000.0]:
                for par in ([4.0, 16.0] if job == "join" else [1.0]):
                    for n in [1, 2, 4, 8, 16, 32]:
                        t = serial + work * size / 1000 / (n * cores) * (1 + 0.1 * par) + comm * n * size / 10000
                        if size / n > mem * 0.45:
                            t *= 2.2
                        if env == "yarn":
                            t *= 1.3
                        for _ in range(2):
                            rows.append(dict(job_type=job, framework="flink", scale_out=n,
                                             runtime_s=round(t * np.exp(rng.normal(0, 0.06)), 2),
                                             machine_type=mt, cores=float(cores), memory_mb=float(mem),
                                             environment=env, data_size_mb=size,
                                             **({"partitions": par} if job == "join" else {})))
df = pd.DataFrame(rows)
df.to_csv("/tmp/stopbias/variant.csv", index=False)
print(len(df), df.groupby("job_type").size().to_dict())
