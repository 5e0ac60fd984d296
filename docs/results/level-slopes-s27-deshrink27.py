"""Throw-away harness (session 27, deshrink27). Held-out contexts of s22 folds: per job type, OLS slope of the k = 0 mean log residual on the
centred predicted level (what a linear de-shrink would need), and the slope calibration stored."""

import sys

import numpy as np

from airflow_provider_bellamy.benchmarks.common import benchmark_runs, held_out_tasks, pretrain

data = benchmark_runs(traces=sys.argv[1])
rows = {}
for task in held_out_tasks(data, 0):
    model = pretrain(task, 0, True, sys.argv[2])
    grid = sorted(set(task.train["scale_out"].astype(int)))
    t = model.calibration.tables
    stored = getattr(t, "level_slopes", {}).get(task.algorithm)
    for _, runs in task.held_out.groupby("context_id", sort=True):
        ctx = runs.drop(columns=["context_id", "runtime_s", "scale_out"]).iloc[0].dropna().to_dict()
        level = float(np.mean(np.log(model.predict(ctx, grid))))
        resid = float(
            np.mean(
                np.log(runs["runtime_s"].to_numpy()) - np.log(model.predict(ctx, runs["scale_out"].tolist()))
            )
        )
        rows.setdefault(task.algorithm, []).append((task.fold, level, resid, stored))
for job, r in rows.items():
    a = np.array([(lv, rs) for _, lv, rs, _ in r])
    x = a[:, 0] - a[:, 0].mean()
    y = a[:, 1]
    print(
        job,
        f"n={len(a)} held-out slope={x @ (y - y.mean()) / (x @ x):.3f} r={np.corrcoef(x, y)[0, 1]:.2f}",
        "stored:",
        sorted({None if s is None else round(s[0], 3) for *_, s in r}, key=str),
    )
    order = np.argsort(a[:, 0])
    print("  levels", np.round(a[order, 0], 2).tolist())
    print("  resid ", np.round(a[order, 1], 2).tolist())
