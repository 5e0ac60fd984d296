"""Throw-away (adapted from the mondrian helper's): C3O folds pooled over job types, one quick model of all
five per fold; per-job band sides with the merged per-side widening-only scales vs the pooled tables."""
import sys, time
from dataclasses import replace
import numpy as np, pandas as pd
from airflow_provider_bellamy.benchmarks.common import benchmark_runs, draw_points, quick_config
from airflow_provider_bellamy.model.runtime_model import RuntimeModel
DRAWS = int(sys.argv[1]); OUT = sys.argv[2]
data = benchmark_runs("c3o"); runs = data.runs
fold_of = {}
for job, g in runs.groupby("job_type", sort=True):
    ctx = np.array(sorted(g["context_id"].unique()))
    order = np.random.default_rng(0).permutation(len(ctx))
    for f in range(5):
        for c in ctx[order[f::5]]: fold_of[c] = f
rows = []; t0 = time.time()
for f in range(5):
    held = runs["context_id"].map(fold_of) == f
    after = RuntimeModel.pretrain(runs[~held].drop(columns=["context_id"]), seed=0, config=quick_config(), unseen_job_types=False)
    t = after.calibration.tables
    print("fold", f, round(time.time() - t0), {j: [tuple(round(v, 2) for v in x) for x in s] for j, s in t.job_scales.items()}, flush=True)
    before = RuntimeModel(after.params, after.architecture, after.schema, after.metadata, replace(after.calibration, tables=replace(t, job_scales={})))
    for d in range(DRAWS):
        rng = np.random.default_rng([f, d, 7])
        for k in range(6):
            for cid, g in runs[held].groupby("context_id", sort=True):
                points, test = draw_points(g, k, rng)
                if test.empty: continue
                ctx = test.iloc[0].to_dict(); ns = test["scale_out"].to_numpy(); y = test["runtime_s"].to_numpy()
                pts = points.drop(columns=["context_id"])
                for name, model in (("before", before), ("after", after)):
                    tuned = model.finetune(pts)
                    pred, lo, hi = tuned.predict_band(ctx, ns.tolist(), 0.9)
                    for i in range(len(ns)):
                        rows.append((name, ctx["job_type"], f, cid, d, k, float(np.log(y[i] / pred[i])), float(np.log(lo[i] / pred[i])), float(np.log(hi[i] / pred[i]))))
pd.DataFrame(rows, columns=["model", "job", "fold", "ctx", "draw", "k", "r", "lo", "hi"]).to_parquet(OUT)
d = pd.DataFrame(rows, columns=["model", "job", "fold", "ctx", "draw", "k", "r", "lo", "hi"])
d["up"] = d.r <= d.hi; d["low"] = d.r >= d.lo; d["w"] = d.hi - d.lo
for name, g in d.groupby("model", sort=False):
    t = g.groupby(["job", "k"]).agg(up=("up", "mean"), low=("low", "mean"), w=("w", "mean"))
    cells = np.r_[t.up.to_numpy(), t.low.to_numpy()] * 100
    print(f"== {name}: cells<90 {int((cells<90).sum())} <87 {int((cells<87).sum())} <85 {int((cells<85).sum())} shortfall {np.maximum(90-cells,0).mean():.2f} worst {cells.min():.1f} width {g.w.mean():.3f} pooled up {g.up.mean()*100:.1f} low {g.low.mean()*100:.1f}")
    for m in ("up", "low"):
        print(m); print((t[m].unstack("k") * 100).round(1).to_string())
