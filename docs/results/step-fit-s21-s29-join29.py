# Throw-away (session 29, join29): a memory-spill STEP fitted jointly with fine-tuning's head correction,
# offline on s21 folds (quick, seed 0; the benchmark's cached models, splits and draws, as
# docs/results/diagnose-s21-s29-join29.py). Hypotheses per held-out context: no step, or every run at
# n <= lo (a gap lo|hi between two observed scale-outs) slower by a factor e^s, s in a grid; each fitted
# by finetuning.fit_delta_averaged (the shipping MAP fit, the step folded into the basis rows of the
# spilled runs), weighed by its runs' Gaussian likelihood at the calibrated run noise with a BIC penalty
# for (lo, s). Predicted: the network after its delta (no parametric blend, no residual correction: both
# ~nil on s21 join), + s·P(spilled at n): 1 at or below lo, 0 at or above hi, inside the gap 1/2
# ("half") or the generator's rule ("physics": input per worker > 60 % of memory; an upper bound, NOT
# shippable). Baseline in the same rows: the shipping prediction, and the network-only no-step fit.
# python docs/results/step-fit-s21-s29-join29.py JOB CACHE [K ...]
from __future__ import annotations

import sys

import numpy as np
import pandas as pd

from airflow_provider_bellamy.benchmarks.common import K_VALUES, cached_benchmark_runs, held_out_tasks, pretrain
from airflow_provider_bellamy.model.features import scale_out_basis
from airflow_provider_bellamy.model.finetuning import OTHER_ENVIRONMENT_PRIOR, fit_delta_averaged
from airflow_provider_bellamy.model.inference import log_runtime

TRACES = "docs/results/synthetic-trace-s21.csv"
STEPS = np.log([1.25, 1.5, 1.8, 2.2, 3.0])


def main() -> None:
    job, cache = sys.argv[1], sys.argv[2]
    ks = [int(k) for k in sys.argv[3:]] or [3, 5]
    data = cached_benchmark_runs("c3o", TRACES, "folds")
    rows = []
    for task in held_out_tasks(data, 0):
        if task.algorithm != job:
            continue
        general = pretrain(task, 0, True, cache)
        lik, noise = general._likelihood_sd, float(general.calibration.noise_sd)
        cov = general._prior_covariance()
        floor = general._steep_floor
        rng = np.random.default_rng(10_000 + task.fold)
        draws = {
            k: {cid: task.draw(g, k, rng) for cid, g in task.held_out.groupby("context_id", sort=True)}
            for k in K_VALUES
        }
        for k in ks:
            for _cid, (points, test) in draws[k].items():
                if test.empty:
                    continue
                ctx = test.iloc[0].to_dict()
                tuned = general.finetune(points.drop(columns=["context_id"]))
                shipping = tuned.predict(ctx, test["scale_out"].astype(int).tolist())
                norm = general._normalise(ctx)
                h0 = general._base_h(norm)  # [M, F]
                m = h0.shape[0]
                ns = points["scale_out"].to_numpy(dtype=float)
                ly = np.log(points["runtime_s"].to_numpy(dtype=float))
                basis = scale_out_basis(ns, floor)
                levels = np.unique(ns)
                hyps = [(None, 0.0)] + [
                    ((lo, hi), s) for lo, hi in zip(levels[:-1], levels[1:], strict=True) for s in STEPS
                ]
                spilled = np.stack([ns <= (h[0][0] if h[0] else -1) for h in hyps]).astype(float)
                step = np.array([h[1] for h in hyps])
                stepped = basis[None] * np.exp(step[:, None] * spilled)[..., None]  # [H, K, F]
                # hypothesis-major rows: each hypothesis' M members together
                b = np.repeat(stepped, m, axis=0)
                hh = np.tile(h0, (len(hyps), 1))
                delta, _ = fit_delta_averaged(
                    hh,
                    b,
                    np.tile(ly, (len(hyps) * m, 1)),
                    np.ones((len(hyps) * m, len(ly))),
                    noise_sd=lik,
                    learned_cov=cov,
                    other_prior=OTHER_ENVIRONMENT_PRIOR,
                )
                h = (hh + delta).reshape(len(hyps), m, -1)  # [H, M, F]
                pred_runs = log_runtime(h[:, :, None, :], stepped[:, None]).mean(axis=1)  # [H, K]
                sse = np.sum((pred_runs - ly) ** 2, axis=1)
                cost = sse / (2 * noise**2) + np.where(step > 0, 0.5 * 2 * np.log(len(ly)), 0.0)
                w = np.exp(-(cost - cost.min()))
                w /= w.sum()
                tn = test["scale_out"].to_numpy(dtype=float)
                net = log_runtime(h[:, :, None, :], scale_out_basis(tn, floor)[None, None]).mean(axis=1)  # [H, T]
                mem = float(ctx["memory_mb"])
                for mode in ("half", "physics"):
                    p = np.zeros((len(hyps), len(tn)))
                    for i, (gap, _) in enumerate(hyps):
                        if gap is None:
                            continue
                        lo, hi = gap
                        rule = (float(ctx["data_size_mb"]) / tn > 0.6 * mem).astype(float)
                        p[i] = np.where(tn <= lo, 1.0, np.where(tn >= hi, 0.0, 0.5 if mode == "half" else rule))
                    pred = np.exp(np.sum(w[:, None] * (net + step[:, None] * p), axis=0))
                    for j, (_, run) in enumerate(test.iterrows()):
                        rows.append(
                            dict(fold=task.fold, k=k, mode=mode, scale_out=int(run["scale_out"]),
                                 actual=run["runtime_s"], shipping=shipping[j], no_step=float(np.exp(net[0, j])),
                                 step=pred[j], step_weight=float(1 - w[0]),
                                 spill_up_to=int(max([g for g in (1, 2, 4, 8, 16, 32) if float(ctx["data_size_mb"]) / g > 0.6 * mem], default=0)))
                        )
    f = pd.DataFrame(rows)
    for col in ("shipping", "no_step", "step"):
        f["e_" + col] = (f[col] - f.actual).abs() / f.actual * 100
    print(f.groupby(["k", "mode"])[["e_shipping", "e_no_step", "e_step", "step_weight"]].mean().round(2).to_string())
    cliff = f.spill_up_to.isin([1, 2, 4, 8, 16])
    print("contexts with a cliff inside 1..32:")
    print(f[cliff].groupby(["k", "mode"])[["e_shipping", "e_no_step", "e_step", "step_weight"]].mean().round(2).to_string())
    print("contexts without:")
    print(f[~cliff].groupby(["k", "mode"])[["e_shipping", "e_no_step", "e_step", "step_weight"]].mean().round(2).to_string())


if __name__ == "__main__":
    main()
