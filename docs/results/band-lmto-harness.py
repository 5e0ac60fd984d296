"""Leave-machine-type-out band coverage on C3O (the figures of docs/model.md, 2026-11-23).

Each machine type held out whole per job type; a small ensemble pre-trained on the other two
(cached: pre-training code is the same in 5b18ab8 and the band branch, so both read the same model
files); one run at each of k random distinct scale-outs of every held-out context; the band at its
other runs. Run from the root of the tree whose band code is measured:

    BAND_CACHE=/tmp/band python docs/results/band-lmto-harness.py sort,grep [seed]

Per job: under the upper bound / above the lower bound / inside the band.
"""

import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, ".")  # the package of the tree it runs in

from airflow_provider_bellamy.benchmarks.common import with_context_ids
from airflow_provider_bellamy.datasets import load_traces
from airflow_provider_bellamy.model import RuntimeModel, TrainingConfig

FAST = TrainingConfig(members=4, max_epochs=400, min_epochs=100, patience=100)
CACHE = Path(os.environ.get("BAND_CACHE", "/tmp/band"))

jobs = sys.argv[1].split(",")
seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
totals: dict[tuple[str, int], list[float]] = {}  # runs, under upper, inside, summed log width
for job in jobs:
    runs = with_context_ids(load_traces("c3o", job))
    for machine in sorted(runs.machine_type.unique()):
        held = runs.machine_type == machine
        path = CACHE / f"lmto-{job}-{machine}-{seed}.model"
        if path.exists():
            model = RuntimeModel.load(path)
        else:
            train = runs[~held].drop(columns=["context_id"])
            model = RuntimeModel.pretrain(train, seed=seed, config=FAST)
            model.save(path)
        rng = np.random.default_rng(seed)
        for _, context_runs in runs[held].groupby("context_id"):
            ctx = context_runs.iloc[0].to_dict()
            distinct = np.unique(context_runs.scale_out)
            for k in range(4):
                if k >= len(distinct):
                    continue
                chosen = rng.choice(distinct, size=k, replace=False)
                picks = context_runs[context_runs.scale_out.isin(chosen)].groupby("scale_out").head(1)
                test = context_runs[~context_runs.scale_out.isin(chosen)]
                tuned = model.finetune(picks.drop(columns=["context_id"])) if k else model
                band = tuned.band(ctx, test.scale_out.tolist(), 0.9)
                y = test.runtime_s.to_numpy()
                t = totals.setdefault((job, k), [0, 0, 0, 0.0, 0])
                t[0] += len(y)
                t[1] += int(np.sum(y <= band.upper))
                t[2] += int(np.sum((y >= band.lower) & (y <= band.upper)))
                t[4] += int(np.sum(y >= band.lower))
                t[3] += float(np.sum(np.log(band.upper / band.lower)))
for k in range(4):
    rows = [(j, *totals[(j, k)]) for j in jobs if (j, k) in totals]
    n, under, inside, width, above = (sum(r[i] for r in rows) for i in range(1, 6))
    per = " ".join(f"{r[0]}:{r[2] / r[1]:.1%}/{r[5] / r[1]:.1%}/{r[3] / r[1]:.1%}" for r in rows)  # job: under upper / inside
    print(
        f"k={k} n={n} under upper {under / n:.1%} above lower {above / n:.1%} inside band {inside / n:.1%} mean log width {width / n:.3f} | {per}"
    )
