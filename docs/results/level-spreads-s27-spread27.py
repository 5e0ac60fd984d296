"""Throw-away harness (session 27, spread27): per fold model of an accuracy run's --model-cache,
the level spreads its calibration fitted (per side: slope, centre) and the σ they give the
held-out contexts at k = 0 (min / median / max, inside the training data only).

usage: python level-spreads-s27-spread27.py TRACES MODEL_CACHE
"""

import sys

import numpy as np

from airflow_provider_bellamy.benchmarks.common import benchmark_runs, held_out_tasks, pretrain

traces, cache = sys.argv[1:3]
data = benchmark_runs(traces=traces)
for task in held_out_tasks(data, 0):
    model = pretrain(task, 0, True, cache)
    tables = model.calibration.tables
    spreads = {} if tables is None else dict(tables.level_spreads)
    sigmas = []
    for _, runs in task.held_out.groupby("context_id", sort=True):
        ctx = runs.drop(columns=["context_id", "runtime_s", "scale_out"]).iloc[0].dropna().to_dict()
        ctx = model._normalise(ctx)
        if model.extrapolation(ctx).kinds:
            continue
        sigmas.append(model.level_spread(model.calibration, ctx))
    s = np.array(sigmas) if sigmas else np.ones((1, 2))
    print(
        f"{task.algorithm:11} fold {task.fold}: "
        + ", ".join(f"{j}: lo b={lo[0]:.2f}, hi b={hi[0]:.2f}" for j, (lo, hi) in spreads.items())
        + f"; held-out inside {len(sigmas)}: σ lo {s[:, 0].min():.2f}/{np.median(s[:, 0]):.2f}/{s[:, 0].max():.2f}"
        + f", σ hi {s[:, 1].min():.2f}/{np.median(s[:, 1]):.2f}/{s[:, 1].max():.2f}"
    )
