# The s21 generator's variant (session 22, leo): another seed, the held-out cluster not a level shift. Writes /tmp/leo/synth-v1.csv.
"""A synthetic trace file unlike the bundled ones: Flink-ish jobs, 1..32 workers, 3 machine types,
2 environments, data sizes over two decades, a spill when data per node exceeds memory."""
import numpy as np, pandas as pd
rng = np.random.default_rng(11)
machines = {"n2-standard-8": (8, 32768), "n2-highmem-4": (4, 32768), "e2-small": (2, 2048)}
rows = []
for job, serial, work, comm in [("wordcount", 8.0, 4.0, 0.02), ("join", 15.0, 9.0, 0.15), ("etl", 5.0, 2.0, 0.0)]:
    for env in ["k8s", "yarn"]:
        for mt, (cores, mem) in machines.items():
            for size in [2000.0, 9000.0, 40000.0, 150000.0]:
                for par in ([4.0, 16.0] if job == "join" else [1.0]):
                    for n in [1, 2, 4, 8, 16, 32]:
                        t = serial + work * size / 1000 / (n * cores) * (1 + 0.1 * par) + comm * n * size / 10000 * (2.0 if env == "yarn" else 1.0) + (0.5 if env == "yarn" else 0.0) * n
                        if size / n > mem * (0.45 if env == "yarn" else 0.6):
                            t *= 1.8
                        if env == "yarn":
                            t *= 1.05
                        for _ in range(2):
                            rows.append(dict(job_type=job, framework="flink", scale_out=n,
                                             runtime_s=round(t * np.exp(rng.normal(0, 0.04)), 2),
                                             machine_type=mt, cores=float(cores), memory_mb=float(mem),
                                             environment=env, data_size_mb=size,
                                             **({"partitions": par} if job == "join" else {})))
df = pd.DataFrame(rows)
df.to_csv("/tmp/leo/synth-v1.csv", index=False)
print(len(df), df.groupby("job_type").size().to_dict())
