# Throw-away diagnosis (session 29, join29): where Bellamy's error on s21 folds (quick, seed 0) lies.
# Replays benchmarks/accuracy.py's splits and draws (same rng order) with the same shipping calls
# (common.pretrain with a model cache, RuntimeModel.finetune, predict), for one job type, and writes
# one row per held-out context, k and test run: the context's properties, whether the run spills
# (input per worker > 60 % of a node's memory, the generator's rule), the untuned and tuned prediction,
# the tuned curve's parts (network after the delta, parametric share, residual correction), the tuned
# curve's residuals at its own k runs, and GBM's prediction.
# python docs/results/diagnose-s21-s29-join29.py JOB CACHE OUT.csv [K ...]   (BENCH_DATASET=c3o: C3O folds instead)
from __future__ import annotations

import os
import sys

import numpy as np
import pandas as pd

from airflow_provider_bellamy.benchmarks.common import (
    K_VALUES,
    GbmBaseline,
    cached_benchmark_runs,
    held_out_tasks,
    pretrain,
)

TRACES = "docs/results/synthetic-trace-s21.csv"
SPILL_FRACTION = 0.6


def main() -> None:
    job, cache, out = sys.argv[1], sys.argv[2], sys.argv[3]
    ks = [int(k) for k in sys.argv[4:]] or [5]
    c3o = os.environ.get("BENCH_DATASET") == "c3o"
    data = cached_benchmark_runs("c3o", None if c3o else TRACES, None if c3o else "folds")
    rows = []
    for task in held_out_tasks(data, 0):
        if task.algorithm != job:
            continue
        general = pretrain(task, 0, True, cache)
        gbm = GbmBaseline(task.train, 0)
        rng = np.random.default_rng(10_000 + task.fold)
        draws = {
            k: {cid: task.draw(g, k, rng) for cid, g in task.held_out.groupby("context_id", sort=True)}
            for k in K_VALUES
        }
        for k in ks:
            extra = pd.concat([p for p, _ in draws[k].values()]) if k else task.held_out.iloc[:0]
            test_frame = pd.concat([t for _, t in draws[k].values()])
            gbm_pred = gbm.fit_predict(extra.drop(columns=["context_id"]), test_frame)
            gbm_by_index = dict(zip(test_frame.index, gbm_pred, strict=True))
            for cid, (points, test) in draws[k].items():
                if test.empty:
                    continue
                ctx = test.iloc[0].to_dict()
                every = task.held_out[task.held_out["context_id"] == cid]
                truth = every.groupby("scale_out")["runtime_s"].mean()
                tuned = general.finetune(points.drop(columns=["context_id"]))
                grid = np.array(sorted(truth.index), dtype=np.int64)
                norm = tuned._normalise(ctx)
                net_untuned = general._network_log(general._normalise(ctx), grid)
                net_tuned, curve_uncorr = tuned._model_log_curves(norm, grid, corrected=False)
                _, curve_corr = tuned._model_log_curves(norm, grid, corrected=True)
                final = np.log(tuned.predict(ctx, grid.tolist()))
                untuned = np.log(general.predict(ctx, grid.tolist()))
                t = tuned.tuned
                # each picked run predicted by the shipping fine-tuning on the context's other picked runs
                loo = []
                if k >= 3:
                    bare = points.drop(columns=["context_id"])
                    for j in range(len(bare)):
                        rest = general.finetune(bare.drop(index=bare.index[j]))
                        n_j = int(bare["scale_out"].iloc[j])
                        loo.append(f"{n_j}:{np.log(bare['runtime_s'].iloc[j] / rest.predict(ctx, [n_j])[0]):+.4f}")
                at_runs = {int(n): float(r) for n, r in t.run_residuals} if t else {}
                pw = t.parametric_weight if t else 0.0
                mem = float(ctx["memory_mb"])
                size = float(ctx["data_size_mb"])
                for _, run in test.iterrows():
                    n = int(run["scale_out"])
                    i = int(np.flatnonzero(grid == n)[0])
                    rows.append(
                        dict(
                            fold=task.fold,
                            k=k,
                            context=cid[:10],
                            environment=ctx.get("environment"),
                            machine_type=ctx.get("machine_type"),
                            data_size_mb=size,
                            partitions=ctx.get("partitions"),
                            scale_out=n,
                            picked=" ".join(str(int(v)) for v in sorted(points["scale_out"])),
                            spills=size / n > SPILL_FRACTION * mem,
                            spill_up_to=int(max([m for m in grid if size / m > SPILL_FRACTION * mem], default=0)),
                            actual=float(run["runtime_s"]),
                            truth_mean=float(truth[n]),
                            untuned=float(np.exp(untuned[i])),
                            tuned=float(np.exp(final[i])),
                            net_untuned=float(np.exp(net_untuned[i])),
                            net_tuned=float(np.exp(net_tuned[i])),
                            uncorrected=float(np.exp(curve_uncorr[i])),
                            corrected=float(np.exp(curve_corr[i])),
                            parametric_weight=pw,
                            run_residuals=" ".join(f"{n_}:{r:+.3f}" for n_, r in sorted(at_runs.items())),
                            loo_residuals=" ".join(loo),
                            max_abs_run_residual=max((abs(r) for r in at_runs.values()), default=0.0),
                            gbm=float(gbm_by_index[run.name]),
                        )
                    )
    frame = pd.DataFrame(rows)
    for col in ("untuned", "tuned", "gbm"):
        frame[f"err_{col}"] = (frame[col] - frame["actual"]) / frame["actual"]
    frame.to_csv(out, index=False)
    print(frame.groupby("k")[["err_untuned", "err_tuned", "err_gbm"]].apply(lambda g: g.abs().mean()))


if __name__ == "__main__":
    main()
