"""Session 32 (jobcal32): why a job's cell of the 90 % band falls short (s21 join, k = 4/5).

Part A (held-out side): the folds benchmark's own draws (same rng as ``accuracy._evaluate_task``)
on the cached fold models, per fold: held-out contexts, share under the upper / above the lower
bound, and the multiplier of the band's offset each test run needed (log(y/pred) / log(upper/pred):
≤ 1 covered), with each fold model's job_scales and table counts.

Part B (calibration side): re-pre-trains each fold model of one job (same seed, same code: the
cached model is reproduced, checked) and keeps the scores calibration's final tables were built
from; per fold the out-of-fold contexts' multipliers against their own pooled table's bound, the
90 % quantile of both sides' multipliers, and how often a sample of the held-out size drawn from the
calibration contexts covers as little as the held-out contexts did.

usage: python job-cells-s32-jobcal32.py TRACE JOB CACHE [--calibration]
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np

from airflow_provider_bellamy.benchmarks import common
from airflow_provider_bellamy.benchmarks.common import K_VALUES, benchmark_runs, held_out_tasks, pretrain
from airflow_provider_bellamy.model import calibration as cal

TRACE, JOB, CACHE = sys.argv[1], sys.argv[2], sys.argv[3]
CAL = "--calibration" in sys.argv
KS = (3, 4, 5)
Q = 0.9


def data_of(trace: str):
    if trace == "c3o":
        return benchmark_runs("c3o", protocol="folds")
    return benchmark_runs(traces=Path(__file__).parent / f"synthetic-trace-{trace}.csv", protocol="folds")


def held_out(model, task, fold):
    """Per k: list of (context, multiplier up, multiplier down, covered up, covered down) per test run."""
    # (DRAWS=n: n draws of every held-out context's points, the first the benchmark's own)
    rng = np.random.default_rng(10_000 + 0 * 100 + fold)
    out = {k: [] for k in KS}
    for _ in range(int(os.environ.get("DRAWS", "1"))):
        for k, rows in one_draw(model, task, rng).items():
            out[k].extend(rows)
    return out


def one_draw(model, task, rng):
    draws = {
        k: {cid: task.draw(g, k, rng) for cid, g in task.held_out.groupby("context_id", sort=True)}
        for k in K_VALUES
    }
    out = {}
    for k in KS:
        rows = []
        for cid, (points, test) in draws[k].items():
            if task.draws_fall_short(points, k) or test.empty:
                continue
            ctx = test.iloc[0].to_dict()
            ns = test["scale_out"].to_numpy()
            y = test["runtime_s"].to_numpy()
            tuned = model.finetune(points.drop(columns=["context_id"]))
            pred, lo, hi = (np.asarray(a, dtype=float) for a in tuned.predict_band(ctx, ns.tolist(), Q))
            r = np.log(y / pred)
            up = np.where(r > 0, r / np.log(hi / pred), 0.0)
            dn = np.where(r < 0, r / np.log(lo / pred), 0.0)
            tc = tuned._tuned_for(tuned._normalise(ctx))
            w = 0.0 if tc is None or tc.twin is None else float(tc.twin.weight)
            rows.extend(
                (cid, u, d, yy <= h, yy >= low, w, rr, off)
                for u, d, yy, h, low, rr, off in zip(up, dn, y, hi, lo, r, np.log(hi / pred), strict=True)
            )
        out[k] = rows
    return out


def q90(x):
    return float(np.quantile(x, Q)) if len(x) else math.nan


captured: list[tuple] = []
rng = np.random.default_rng(0)
if CAL:
    original = cal.check_normalised_tables
    original_tables = cal._tables_per_k
    last_divisors: list = []

    def tables_capturing(*args, **kwargs):
        if kwargs.get("per_residual") is not None:
            last_divisors[:] = [kwargs["per_residual"]]
        return original_tables(*args, **kwargs)

    cal._tables_per_k = tables_capturing
    original_fit = cal.fit_context
    fits: list = []

    def fit_capturing(*args, **kwargs):
        fit = original_fit(*args, **kwargs)
        fits.append(None if fit.twin_weight is None else np.asarray(fit.twin_weight, dtype=float))
        return fit

    cal.fit_context = fit_capturing

    def capturing(per_k, checks, env_of, job_of, small_max, n_contexts, noise_sd, spread=None):
        tables = original(per_k, checks, env_of, job_of, small_max, n_contexts, noise_sd, spread=spread)
        if spread is None:
            # (the tables' pass: the last fit_context calls before its tables, 4 draws for each k = 1..5)
            captured.append(
                (per_k, checks, env_of, job_of, small_max, n_contexts, noise_sd, tables, last_divisors[0], fits[-20:])
            )
        return tables

    cal.check_normalised_tables = capturing

data = data_of(TRACE)
print(f"# {TRACE} {JOB}, folds, quick, seed 0; cache {CACHE}")
all_rows = {k: [] for k in KS}
cal_rows = {k: [] for k in KS}
for task in held_out_tasks(data, 0):
    if task.algorithm != JOB:
        continue
    model = pretrain(task, 0, True, CACHE)
    t = model.calibration.tables
    print(f"fold {task.fold}: job_types {model.metadata['job_types']} job_scales {dict(t.job_scales)}")
    if CAL:
        captured.clear()
        fits.clear()
        fresh = pretrain(task, 0, True, None)
        same = fresh.calibration.tables.to_dict() == t.to_dict()
        per_k, checks, env_of, job_of, small_max, n_ctx, noise_sd, tables, divisors, tables_fits = captured[0]
        print(f"   re-pre-trained: tables equal the cached model's: {same}")
    rows = held_out(model, task, task.fold)
    for k in KS:
        r = rows[k]
        all_rows[k].extend((task.fold, *x) for x in r)
        n_ctx_held = len({x[0] for x in r})
        up = np.array([x[1] for x in r])
        dn = np.array([x[2] for x in r])
        line = (
            f"   k={k} held-out {n_ctx_held:3d} ctx {len(r):3d} runs: ≤ upper {np.mean([x[3] for x in r]):.1%}"
            f" ≥ lower {np.mean([x[4] for x in r]):.1%}; needed multiplier q90 up {q90(up):.2f} down {q90(dn):.2f}"
        )
        if CAL:
            # the pooled tables' bound per residual (bucket, far scale) against its normalised score:
            # what each out-of-fold run needed, as the held-out runs above
            raw, at, owner, distance = per_k[k]
            tk = tables.per_k[k]
            small = at <= small_max
            near = cal.is_near(distance)
            fs = cal.far_scale(distance)
            bounds = {}
            for b, qs in tk.quantiles.items():
                n = max(tk.counts[b], 1)
                lev = min(1.0, math.ceil((n + 1) * Q) / n)
                bounds[b] = (float(np.interp(1 - lev, cal.QUANTILE_GRID, qs)), float(np.interp(lev, cal.QUANTILE_GRID, qs)))
            lo_b = np.where(small, bounds["smallest"][0], np.where(near, bounds["near"][0], bounds["far"][0] * fs))
            hi_b = np.where(small, bounds["smallest"][1], np.where(near, bounds["near"][1], bounds["far"][1] * fs))
            score = raw / divisors[k]
            cup = np.where(score > 0, score / hi_b, 0.0)
            cdn = np.where(score < 0, score / lo_b, 0.0)
            # each draw appends its contexts in order: a fall in the owner starts the next draw
            draw = np.concatenate([[0], np.cumsum(np.diff(owner) < 0)])
            wk = tables_fits[(k - 1) * 4 : k * 4]
            tw = np.array([0.0 if wk[dd] is None else float(wk[dd][o]) for dd, o in zip(draw, owner, strict=True)])
            cal_rows[k].extend(
                (task.fold, int(o), u, d, w, int(dd), float(rr), float(off))
                for o, u, d, w, dd, rr, off in zip(owner, cup, cdn, tw, draw, raw, hi_b * divisors[k], strict=True)
            )
            line += (
                f" | calibration {len(set(owner.tolist()))} ctx {len(raw)} res: ≤ upper {np.mean(cup <= 1):.1%}"
                f" ≥ lower {np.mean(cdn <= 1):.1%}; q90 up {q90(cup):.2f} down {q90(cdn):.2f}"
            )
        print(line)

print("\n# all folds")
for k in KS:
    r = all_rows[k]
    ctxs = sorted({(x[0], x[1]) for x in r})
    up = np.array([x[2] for x in r])
    dn = np.array([x[3] for x in r])
    cov_up, cov_dn = float(np.mean(up <= 1)), float(np.mean(dn <= 1))
    line = (
        f"k={k}: held-out {len(ctxs)} ctx {len(r)} runs ≤ upper {cov_up:.1%} ≥ lower {cov_dn:.1%};"
        f" needed multiplier q90 up {q90(up):.2f} down {q90(dn):.2f}"
    )
    # binomial: runs per context at this k (one draw), a context's runs share its error: the
    # context is the unit; P(share ≤ observed) for a band that covers 90 % of contexts' runs
    per_ctx = len(r) / max(len(ctxs), 1)
    n = len(ctxs)
    p_up = sum(math.comb(n, i) * Q**i * (1 - Q) ** (n - i) for i in range(0, int(round(cov_up * n)) + 1))
    line += f"; {per_ctx:.1f} runs/ctx; binomial P(≤ {cov_up:.1%} of {n} ctx | 90 %) = {p_up:.3f}"
    print(line)
    c = cal_rows[k]
    for name, sel_h, sel_c in (
        ("twin weight >= 0.5", lambda x: x[6] >= 0.5, lambda x: x[4] >= 0.5),
        ("twin weight < 0.5", lambda x: x[6] < 0.5, lambda x: x[4] < 0.5),
    ):
        h = [x for x in r if sel_h(x)]
        cc = [x for x in c if sel_c(x)]
        line = (
            f"      {name}: held-out {len({(x[0], x[1]) for x in h})} ctx {len(h)} runs ≤ upper "
            f"{np.mean([x[2] <= 1 for x in h]):.1%} ≥ lower {np.mean([x[3] <= 1 for x in h]):.1%}"
            f", mean log(y/pred) {np.mean([x[7] for x in h]):+.3f}, mean upper offset {np.mean([x[8] for x in h]):.3f}"
        )
        if cc:
            line += (
                f" | calibration {len({(x[0], x[1]) for x in cc})} ctx {len(cc)} res ≤ upper "
                f"{np.mean([x[2] <= 1 for x in cc]):.1%} ≥ lower {np.mean([x[3] <= 1 for x in cc]):.1%}"
                f", mean log residual {np.mean([x[6] for x in cc]):+.3f}, mean upper offset (pooled tables) {np.mean([x[7] for x in cc]):.3f}"
            )
        if cc and h:
            # samples of as many calibration contexts of the group, one draw each (as below)
            by_g = {}
            for x in cc:
                by_g.setdefault((x[0], x[1]), {}).setdefault(x[5], []).append(x)
            keys_g = sorted(by_g)
            n_g = len({(x[0], x[1]) for x in h})
            obs = float(np.mean([x[2] <= 1 for x in h]))
            sims = []
            for _ in range(4000):
                u = []
                for i in rng.integers(0, len(keys_g), n_g):
                    groups = list(by_g[keys_g[i]].values())
                    u.extend(x[2] <= 1 for x in groups[rng.integers(0, len(groups))])
                sims.append(np.mean(u))
            line += f"; samples of {n_g}: ≤ upper 5-95 % {np.quantile(sims, .05):.1%}-{np.quantile(sims, .95):.1%}, P(≤ {obs:.1%}) = {np.mean(np.array(sims) <= obs + 1e-9):.3f}"
        print(line)
    if CAL and cal_rows[k]:
        c = cal_rows[k]
        cup = np.array([x[2] for x in c])
        cdn = np.array([x[3] for x in c])
        # samples of the held-out size: n calibration contexts (of any fold), each with every test
        # residual of one of its draws (a held-out context's runs share one fine-tuning, as a
        # calibration context's runs of one draw do)
        keys = sorted({(x[0], x[1]) for x in c})
        by = {}
        for x in c:
            by.setdefault((x[0], x[1]), {}).setdefault(x[5], []).append(x)
        sims_up, sims_dn = [], []
        for _ in range(4000):
            pick = rng.integers(0, len(keys), n)
            u, d = [], []
            for i in pick:
                groups = list(by[keys[i]].values())
                rows_i = groups[rng.integers(0, len(groups))]
                u.extend(x[2] <= 1 for x in rows_i)
                d.extend(x[3] <= 1 for x in rows_i)
            sims_up.append(np.mean(u))
            sims_dn.append(np.mean(d))
        sims_up, sims_dn = np.array(sims_up), np.array(sims_dn)
        print(
            f"      calibration {len(keys)} ctx {len(c)} res: ≤ upper {np.mean(cup <= 1):.1%} ≥ lower {np.mean(cdn <= 1):.1%}"
            f"; q90 up {q90(cup):.2f} down {q90(cdn):.2f}; mean score part up {np.mean(np.maximum(cup,0)):.3f}"
            f"\n      samples of {n} calibration contexts (one draw each): ≤ upper 5-95 % {np.quantile(sims_up, .05):.1%}-{np.quantile(sims_up, .95):.1%},"
            f" P(≤ {cov_up:.1%}) = {np.mean(sims_up <= cov_up + 1e-9):.3f}; ≥ lower 5-95 % {np.quantile(sims_dn, .05):.1%}-"
            f"{np.quantile(sims_dn, .95):.1%}, P(≤ {cov_dn:.1%}) = {np.mean(sims_dn <= cov_dn + 1e-9):.3f}"
        )
