# Session 23 (helper observed): the band at the scale-outs a context was tuned on, tested on the other runs there.
# Run from the project root with PYTHONPATH set to the tree measured; REPEAT=1 adds one more run at the first drawn
# scale-out (drawn at random). The exec line pins the model-code digest to main 885596c so its cached models are read
# (/tmp/probe/patch_s22.py: airflow_provider_bellamy.benchmarks.common._model_code_digest returns that commit's digest).
# Usage: python docs/results/at-observed-s23-observed.py [--dataset D] [--traces F] [--protocol P] --cache DIR --out X.json
"""Band coverage at the scale-outs a context was tuned on, on the repeats there (not committed)."""
import json, sys, argparse
from collections import defaultdict
import numpy as np, pandas as pd, os
REPEAT = os.environ.get('REPEAT') == '1'
exec(open("/tmp/probe/patch_s22.py").read())
from airflow_provider_bellamy.benchmarks.common import K_VALUES, map_held_out_tasks, pretrain, cached_benchmark_runs

def work(data, seed, task, *, quick, model_cache, confidence):
    general = pretrain(task, seed, quick, model_cache)
    rng = np.random.default_rng(10_000 + seed * 100 + task.fold)
    draws = {k: {cid: (task.draw(g, k, rng), g) for cid, g in task.held_out.groupby("context_id", sort=True)} for k in K_VALUES}
    rows = []
    rng2 = np.random.default_rng(777 + task.fold)
    for k in K_VALUES:
        if k == 0:
            continue
        for cid, ((points, test), g) in draws[k].items():
            if task.draws_fall_short(points, k) or points.empty:
                continue
            if REPEAT:
                first = points["scale_out"].iloc[0]
                extra = g[(g["scale_out"] == first) & ~g.index.isin(points.index)]
                if extra.empty:
                    continue
                points = pd.concat([points, extra.iloc[[int(rng2.integers(len(extra)))]]])
            chosen = set(points["scale_out"].tolist())
            rep = g[g["scale_out"].isin(chosen) & ~g.index.isin(points.index)]
            tuned = general.finetune(points.drop(columns=["context_id"]))
            ctx = g.iloc[0].to_dict()
            if not rep.empty:
                ns = rep["scale_out"].to_numpy()
                p, lo, hi = tuned.predict_band(ctx, ns.tolist(), confidence)
                for n, a, pp, l, h in zip(ns, rep["runtime_s"].to_numpy(), p, lo, hi):
                    rows.append(dict(alg=task.algorithm, k=k, cid=str(cid), n=int(n), at=True, actual=float(a), pred=float(pp), lo=float(l), hi=float(h)))
            if not test.empty:
                ns = test["scale_out"].to_numpy()
                p, lo, hi = tuned.predict_band(ctx, ns.tolist(), confidence)
                for n, a, pp, l, h in zip(ns, test["runtime_s"].to_numpy(), p, lo, hi):
                    rows.append(dict(alg=task.algorithm, k=k, cid=str(cid), n=int(n), at=False, actual=float(a), pred=float(pp), lo=float(l), hi=float(h)))
    return rows

if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--dataset", default="c3o"); ap.add_argument("--traces"); ap.add_argument("--protocol")
    ap.add_argument("--cache"); ap.add_argument("--out")
    a = ap.parse_args()
    res = map_held_out_tasks(work, 1, dataset=a.dataset, traces=a.traces, protocol=a.protocol, quick=True, model_cache=a.cache, confidence=0.9)
    rows = [r for rr in res for r in rr]
    json.dump(rows, open(a.out, "w"))
    print(len(rows), "rows")
