"""Leave-machine-type-out band coverage, quick: FAST models cached (pretraining code is the same in
both trees), evaluated with whichever package is on sys.path. usage: lmto.py JOBS [seed]"""
import sys, numpy as np
from pathlib import Path
sys.path.insert(0, ".")
from airflow_provider_bellamy.benchmarks.common import with_context_ids
from airflow_provider_bellamy.datasets import load_traces
from airflow_provider_bellamy.model import RuntimeModel, TrainingConfig
FAST = TrainingConfig(members=4, max_epochs=400, min_epochs=100, patience=100)
jobs = sys.argv[1].split(","); seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
tot = {}
for job in jobs:
    runs = with_context_ids(load_traces("c3o", job))
    for mt in sorted(runs.machine_type.unique()):
        held = runs.machine_type == mt
        p = Path(f"/tmp/band/lmto-{job}-{mt}-{seed}.model")
        if p.exists(): model = RuntimeModel.load(p)
        else:
            model = RuntimeModel.pretrain(runs[~held].drop(columns=["context_id"]), seed=seed, config=FAST); model.save(p)
        rng = np.random.default_rng(seed)
        for cid, cr in runs[held].groupby("context_id"):
            ctx = cr.iloc[0].to_dict()
            distinct = np.unique(cr.scale_out)
            for k in range(0, 4):
                if k >= len(distinct): continue
                chosen = rng.choice(distinct, size=k, replace=False)
                picks = cr[cr.scale_out.isin(chosen)].groupby("scale_out").head(1)
                test = cr[~cr.scale_out.isin(chosen)]
                m = model.finetune(picks.drop(columns=["context_id"])) if k else model
                b = m.band(ctx, test.scale_out.tolist(), 0.9)
                y = test.runtime_s.to_numpy()
                t = tot.setdefault((job, k), [0, 0, 0, 0.0])
                t[0] += len(y); t[1] += int(np.sum(y <= b.upper)); t[2] += int(np.sum((y >= b.lower) & (y <= b.upper)))
                t[3] += float(np.sum(np.log(b.upper / b.lower)))
for k in range(4):
    rows = [(j, *tot[(j, k)]) for j in jobs if (j, k) in tot]
    n = sum(r[1] for r in rows); u = sum(r[2] for r in rows); i = sum(r[3] for r in rows); w = sum(r[4] for r in rows)
    per = " ".join(f"{r[0]}:{r[2] / r[1]:.1%}/{r[3] / r[1]:.1%}" for r in rows)  # job: under upper / inside
    print(f"k={k} n={n} under upper {u/n:.1%} inside band {i/n:.1%} mean log width {w/n:.3f} | {per}")
