"""Throw-away harness (session 27, spread27; deshrink27's thirds harness, split by whether the context lies inside the training data): the 90 % band at k = 0 on the held-out contexts of
a traces file's folds, split per job type into thirds of the untuned predicted level (mean log
seconds over the training data's scale-outs), pooled over job types. Reads the models an
accuracy run left in its --model-cache (same code tree on PYTHONPATH, seed 0, --quick).

usage: python level-thirds-s27-deshrink27.py TRACES MODEL_CACHE
"""

import sys

import numpy as np

from airflow_provider_bellamy.benchmarks.common import benchmark_runs, held_out_tasks, pretrain

traces, cache = sys.argv[1:3]
data = benchmark_runs(traces=traces)
rows = []  # (job, level, runs under upper, runs above lower, runs, sum of log widths)
for task in held_out_tasks(data, 0):
    model = pretrain(task, 0, True, cache)
    grid = sorted(set(task.train["scale_out"].astype(int)))
    for _, runs in task.held_out.groupby("context_id", sort=True):
        ctx = runs.drop(columns=["context_id", "runtime_s", "scale_out"]).iloc[0].dropna().to_dict()
        ns = runs["scale_out"].to_numpy()
        actual = runs["runtime_s"].to_numpy()
        _, lower, upper = model.predict_band(ctx, ns.tolist(), 0.9)
        level = float(np.mean(np.log(model.predict(ctx, grid))))
        rows.append(
            ((not model.extrapolation(ctx).kinds),)
            + (
                task.algorithm,
                level,
                int((actual <= upper).sum()),
                int((actual >= lower).sum()),
                len(ns),
                float(np.log(upper / lower).sum()),
            )
        )
thirds = np.zeros((3, 4))
for job in sorted({r[1] for r in rows}):
    mine = sorted((r for r in rows if r[1] == job), key=lambda r: r[2])
    for i, part in enumerate(np.array_split(np.arange(len(mine)), 3)):
        for j in part:
            thirds[i] += mine[j][3:]
for name, (under, above, n, width) in zip(("fastest", "middle", "slowest"), thirds, strict=True):
    print(
        f"{name:8} third: {int(n):5d} runs, under upper {100 * under / n:5.1f} %, above lower "
        f"{100 * above / n:5.1f} %, mean log width {width / n:.3f}"
    )
for inside in (True, False):
    t = np.zeros((3, 4))
    for job in sorted({r[1] for r in rows}):
        mine = sorted((r for r in rows if r[1] == job), key=lambda r: r[2])
        for i, part in enumerate(np.array_split(np.arange(len(mine)), 3)):
            for j in part:
                if mine[j][0] == inside:
                    t[i] += mine[j][3:]
    print(
        "inside" if inside else "outside",
        [f"{int(n)} runs {100 * u / max(n, 1):.1f} % ≤ up" for u, a, n, w in t],
    )
