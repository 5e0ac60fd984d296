# Throw-away (session 30, twin30): the shipping tuned model's 90 % band per test run of the diagnosis draws, run with
# PYTHONPATH at the base code (git archive 4e5eaf7). python ... DATASET JOB CACHE OUT.csv
# per test run of the diagnosis draws: the shipping tuned model's 90 % band (predict_band), k = 1 3 5
import sys; sys.path.insert(0, "/tmp/twin30")
import oldmodels; oldmodels.patch()
import numpy as np, pandas as pd
from airflow_provider_bellamy.benchmarks.common import K_VALUES, cached_benchmark_runs, held_out_tasks, pretrain
dataset, job, cache, out = sys.argv[1:5]
data = cached_benchmark_runs("c3o", None, None) if dataset == "c3o" else cached_benchmark_runs("c3o", f"docs/results/synthetic-trace-{dataset}.csv", "folds")
rows = []
for task in held_out_tasks(data, 0):
    if task.algorithm != job: continue
    general = pretrain(task, 0, True, cache)
    rng = np.random.default_rng(10_000 + task.fold)
    draws = {k: {cid: task.draw(g, k, rng) for cid, g in task.held_out.groupby("context_id", sort=True)} for k in K_VALUES}
    for k in (1, 3, 5):
        for cid, (points, test) in draws[k].items():
            if test.empty: continue
            ctx = test.iloc[0].to_dict()
            tuned = general.finetune(points.drop(columns=["context_id"]))
            ns = test["scale_out"].astype(int).tolist()
            pred, lo, hi = tuned.predict_band(ctx, ns, 0.9)
            for n, p, l, h, a in zip(ns, pred, lo, hi, test["runtime_s"]):
                rows.append(dict(fold=task.fold, k=k, context=cid[:10], scale_out=n, actual=a, pred=p, lower=l, upper=h))
pd.DataFrame(rows).to_csv(out, index=False)
print(job, "done", len(rows))
