# Variant of docs/results/synthetic-trace-s21.py (session 22, helper edges): other seed, constants, scale-outs, spill, noise.
# Writes /tmp/edges/variant.csv (not committed: this regenerates it).
import numpy as np, pandas as pd
rng = np.random.default_rng(11)
machines = {"n2-standard-8": (8, 32768), "n2-highmem-4": (4, 32768), "e2-small": (2, 2048)}
rows = []
for job, serial, work, comm in [("wordcount", 6.0, 5.0, 0.05), ("join", 20.0, 7.0, 0.3), ("etl", 3.0, 3.0, 0.01)]:
    for env in ["k8s", "yarn"]:
        for mt, (cores, mem) in machines.items():
            for size in [1500.0, 6000.0, 25000.0, 100000.0]:
                for par in ([4.0, 16.0] if job == "join" else [1.0]):
                    for n in [1, 2, 3, 4, 6, 8, 12, 16, 24]:
                        t = serial + work * size / 1000 / (n * cores) * (1 + 0.1 * par) + comm * n * size / 10000
                        if size / n > mem * 0.5:
                            t *= 2.2
                        if env == "yarn":
                            t *= 1.25
                        for _ in range(2):
                            rows.append(dict(job_type=job, framework="flink", scale_out=n,
                                             runtime_s=round(t * np.exp(rng.normal(0, 0.06)), 2),
                                             machine_type=mt, cores=float(cores), memory_mb=float(mem),
                                             environment=env, data_size_mb=size,
                                             **({"partitions": par} if job == "join" else {})))
df = pd.DataFrame(rows)
df.to_csv("/tmp/edges/variant.csv", index=False)
print(len(df), df.groupby("job_type").size().to_dict())
