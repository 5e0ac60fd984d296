# Throw-away (session 29, join29), no model: (1) how well the scale-out basis (features.scale_out_basis,
# positive weights, as the network's head draws a curve) can draw each s21 context's TRUE mean curve at
# all (the representational floor: the best positive mix fitted to the truth itself, log error); (2) what a
# context's nearest training curves (same job type, fold split and draws as the benchmark, nearest in
# machine type, input size, environment, partitions, their measured mean log curve moved to the level of
# the context's k runs) would predict at its test runs, against the shipping error from the diagnosis rows.
# python docs/results/shape-floor-s21-s29-join29.py JOB ROWS.csv   (BENCH_DATASET=c3o: C3O folds, twins by every property)
from __future__ import annotations

import os
import sys

import numpy as np
import pandas as pd
from scipy.optimize import minimize

from airflow_provider_bellamy.benchmarks.common import K_VALUES, cached_benchmark_runs, held_out_tasks
from airflow_provider_bellamy.model.features import scale_out_basis
from airflow_provider_bellamy.records import context_columns

TRACES = "docs/results/synthetic-trace-s21.csv"
PROPS = ["machine_type", "data_size_mb", "environment", "partitions"]
# a mismatch in what sets the memory cliff (machine type, input size) weighs more than one in the rest
WEIGHT = {"machine_type": 10, "data_size_mb": 10, "environment": 1, "partitions": 1}


def best_positive_fit(ns: np.ndarray, log_y: np.ndarray) -> np.ndarray:
    basis = scale_out_basis(ns)
    np.seterr(over="ignore", invalid="ignore")

    def loss(h: np.ndarray) -> float:
        return float(np.sum((np.log(basis @ np.exp(h)) - log_y) ** 2))

    best = None
    for start in (np.full(6, np.log(np.exp(log_y).mean() / 6)), np.log(np.r_[np.exp(log_y).min(), 1e-3 * np.ones(5)])):
        r = minimize(loss, start, method="L-BFGS-B")
        best = r if best is None or r.fun < best.fun else best
    return np.log(basis @ np.exp(best.x))


def main() -> None:
    job, rows_file = sys.argv[1], sys.argv[2]
    c3o = os.environ.get("BENCH_DATASET") == "c3o"
    data = cached_benchmark_runs("c3o", None if c3o else TRACES, None if c3o else "folds")
    diag = pd.read_csv(rows_file)
    floor_rows, near_rows = [], []
    for task in held_out_tasks(data, 0):
        if task.algorithm != job:
            continue
        props = (
            [p for p in PROPS if p in task.train.columns and task.train[p].notna().any()]
            if not c3o
            else [p for p in context_columns(task.train.columns) if p not in ("context_id", "job_type")
                  and task.train[p].notna().any() and task.train[p].nunique() > 1]
        )
        train_curves = {
            cid: (g.iloc[0][props].to_dict(), g.groupby("scale_out")["runtime_s"].apply(lambda x: np.log(x).mean()))
            for cid, g in task.train.groupby("context_id")
        }
        for cid, g in task.held_out.groupby("context_id"):
            first = g.iloc[0]
            spills = [first["data_size_mb"] / n > 0.6 * first["memory_mb"] for n in sorted(g["scale_out"].unique())] if not c3o else [False]
            cliff = any(spills) and not all(spills)
            truth = g.groupby("scale_out")["runtime_s"].apply(lambda x: np.log(x).mean())
            fit = best_positive_fit(truth.index.to_numpy(dtype=float), truth.to_numpy())
            for n, t, f in zip(truth.index, truth.to_numpy(), fit, strict=True):
                floor_rows.append(dict(fold=task.fold, context=cid, scale_out=n, err=abs(np.exp(f - t) - 1) * 100, cliff=cliff))
        rng = np.random.default_rng(10_000 + task.fold)
        draws = {
            k: {cid: task.draw(g, k, rng) for cid, g in task.held_out.groupby("context_id", sort=True)}
            for k in K_VALUES
        }
        for k in (1, 3, 5):
            for cid, (points, test) in draws[k].items():
                ctx = test.iloc[0][props].to_dict()
                distance = {
                    tid: sum(0 if c[p] == ctx[p] or (pd.isna(c[p]) and pd.isna(ctx[p])) else WEIGHT.get(p, 1) for p in props) for tid, (c, _) in train_curves.items()
                }
                best = min(distance.values())
                near = [train_curves[t][1] for t, d in distance.items() if d == best]
                curve = pd.concat(near, axis=1).mean(axis=1)
                gaps = np.log(points["runtime_s"].to_numpy()) - curve[points["scale_out"]].to_numpy()
                level = np.mean(gaps)
                # a choice the runs can make (k >= 3): the twin's curve where it misses the context's own
                # runs less (RMS about its level) than the tuned curve misses them (its residuals at the
                # runs, in-sample with 6 numbers: a choice that favours the tuned curve)
                row = diag[(diag.fold == task.fold) & (diag.k == k) & (diag.context == cid[:10])]
                own = [float(x.split(":")[1]) for x in str(row.run_residuals.iloc[0]).split()] if k >= 2 else []
                twin_rms = float(np.sqrt(np.mean((gaps - level) ** 2)))
                choose_twin = k >= 3 and own and twin_rms < float(np.sqrt(np.mean(np.square(own))))
                # the same choice leave-one-scale-out: each picked run predicted from the others, by the
                # twin's curve at the others' level and by the shipping fine-tuning on the others
                loo_ship = [float(x.split(":")[1]) for x in str(row.get("loo_residuals", pd.Series([""])).iloc[0]).split()] if k >= 3 and "loo_residuals" in row else []
                loo_twin = gaps - (gaps.sum() - gaps) / max(len(gaps) - 1, 1)
                choose_loo = bool(loo_ship) and float(np.mean(loo_twin**2)) < float(np.mean(np.square(loo_ship)))
                for _, run in test.iterrows():
                    pred = np.exp(curve[run["scale_out"]] + level)
                    near_rows.append(
                        dict(k=k, distance=best, scale_out=run["scale_out"], err=abs(pred / run["runtime_s"] - 1) * 100,
                             shipping=100 * abs(row.loc[row.scale_out == run["scale_out"], "err_tuned"]).mean(),
                             chosen=bool(choose_twin), chosen_loo=bool(choose_loo))
                    )
    floor = pd.DataFrame(floor_rows)
    print("best positive basis fit to the TRUE mean curves: mean |error| %", round(floor.err.mean(), 2),
          "; at its worst scale-out per context:", round(floor.groupby("context").err.max().mean(), 2))
    print(floor.groupby("scale_out").err.mean().round(2).to_dict())
    print("the same, contexts with a cliff inside their scale-outs / without:",
          floor.groupby("cliff").err.mean().round(2).to_dict(),
          "worst scale-out per context:", floor.groupby(["cliff", "context"]).err.max().groupby("cliff").mean().round(2).to_dict())
    near = pd.DataFrame(near_rows)
    print("nearest training curves, moved to the k runs' level: MRE % per k",
          near.groupby("k").err.mean().round(2).to_dict(), "distance counts", near.groupby("distance").size().to_dict())
    print("  by distance (1: a twin in all but environment or partitions; 10+: none in machine type and size):",
          near.groupby(["distance", "k"]).err.mean().round(2).to_dict())
    print("  shipping on the same runs by distance:", near.groupby(["distance", "k"]).shipping.mean().round(2).to_dict())
    near["choice"] = np.where(near.chosen, near.err, near.shipping)
    print("  twin where it fits the runs better than the tuned curve (k >= 3), else shipping: MRE % per k",
          near.groupby("k").choice.mean().round(2).to_dict(), "vs shipping", near.groupby("k").shipping.mean().round(2).to_dict(),
          "; share of runs on the twin", near.groupby("k").chosen.mean().round(2).to_dict())
    near["choice_loo"] = np.where(near.chosen_loo, near.err, near.shipping)
    print("  the same chosen leave-one-scale-out: MRE % per k", near.groupby("k").choice_loo.mean().round(2).to_dict(),
          "; share on the twin", near.groupby("k").chosen_loo.mean().round(2).to_dict())
    d = diag[diag.k.isin([1, 3, 5])]
    print("shipping per k", (d.groupby("k").err_tuned.apply(lambda e: e.abs().mean()) * 100).round(2).to_dict(),
          "gbm", (d.groupby("k").err_gbm.apply(lambda e: e.abs().mean()) * 100).round(2).to_dict())


if __name__ == "__main__":
    main()
