"""Session 32 (twinchk32): calibration's side of the twin-weighted contexts, by heads.

Re-pre-trains s21 join's fold models (folds, quick, seed 0; the tables are checked equal to the
cached model's) keeping what ``calibrate`` was given; then for every out-of-fold context and
DRAWS draws of its k picked runs simulates fine-tuning as ``calibrate``'s tables pass does
(``fit_context`` on one head, the twin at the picked runs and mixed in at the test runs), once
on the tables' heads (``h_tables``: cross-fitted) and once on the members' heads (what the model
fine-tunes with, ``h_members``), with the same picks. Per side: twin weight, check rms / count,
check factor (the model's pooled (k − 1) tables' scale), the share of test runs under the pooled
k tables' upper bound times the factor (as ``job-cells-s32-jobcal32.py``), split by twin weight;
the test residual as the prediction mixes the twin (runs − the mixed curve) against session 31's
``calibrate`` (the residual runs − tuned curve mixed with the twin's curve − runs).
Run with the model code of the cached models (main ffb4e8f's behaviour) for "tables equal".

usage: python twin-heads-s32-twinchk32.py CACHE [FOLDS]   (DRAWS=n, default 4)
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
from pathlib import Path

import numpy as np

from airflow_provider_bellamy.benchmarks.common import benchmark_runs, held_out_tasks, pretrain
from airflow_provider_bellamy.model import calibration as cal
from airflow_provider_bellamy.model import runtime_model as rm
from airflow_provider_bellamy.model.finetuning import fit_context, mix_twin, run_level, twin_log_runtime, tuned_log_runtime
from airflow_provider_bellamy.model.inference import log_runtime

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("tc", HERE / "twin-checks-s32-twinchk32.py")
CACHE = sys.argv[1]
FOLDS = {int(f) for f in sys.argv[2].split(",")} if len(sys.argv) > 2 else set(range(5))
DRAWS = int(os.environ.get("DRAWS", "4"))
KS = (3, 5)
Q = 0.9

# the main code digest of the cached models (twin-checks' helper)
sys.argv = [sys.argv[0], CACHE]
tc = importlib.util.module_from_spec(spec)
src = (HERE / "twin-checks-s32-twinchk32.py").read_text().split("\ndef calibration_rule")[0]
exec(compile(src, "twin-checks", "exec"), tc.__dict__)

captured: dict = {}
original = rm.calibrate_members


def capturing(h_members, folds, data, noise_sd, rng, *args, **kwargs):
    captured.update(h_members=h_members, folds=folds, data=data, kwargs=kwargs)
    return original(h_members, folds, data, noise_sd, rng, *args, **kwargs)


rm.calibrate_members = capturing


def bounds(tk, at, small_max, distance):
    b = {}
    for name, qs in tk.quantiles.items():
        n = max(tk.counts[name], 1)
        lev = min(1.0, math.ceil((n + 1) * Q) / n)
        b[name] = float(np.interp(lev, cal.QUANTILE_GRID, qs))
    small = at <= small_max
    return np.where(small, b["smallest"], np.where(cal.is_near(distance), b["near"], b["far"] * cal.far_scale(distance)))


data = benchmark_runs(traces=HERE / "synthetic-trace-s21.csv", protocol="folds")
rows = {k: [] for k in KS}
for task in held_out_tasks(data, 0):
    if task.algorithm != "join" or task.fold not in FOLDS:
        continue
    cached = pretrain(task, 0, True, CACHE)
    fresh = pretrain(task, 0, True, None)
    same = fresh.calibration.tables.to_dict() == cached.calibration.tables.to_dict()
    print(f"fold {task.fold}: re-pre-trained tables equal the cached model's: {same}", flush=True)
    model = fresh
    c = model.calibration
    h_members, folds, d, kw = captured["h_members"], captured["folds"], captured["data"], captured["kwargs"]
    h_tables, twins = kw["h_out_of_fold"], kw["twins"]
    ft = c.fine_tuning
    lik = ft.likelihood_sd
    cov = np.asarray(ft.prior_covariance)
    corr = model._correction
    small_max = c.tables.smallest_max_scale_out
    scale_out, basis, log_y = d.scale_out, d.basis, d.log_y
    row_at = {int(n): int(np.flatnonzero(scale_out == n)[0]) for n in np.unique(scale_out)}
    rng = np.random.default_rng(123 + task.fold)
    for m, fold in enumerate(folds):
        for ci in fold:
            if twins[ci] is None:
                continue
            runs = np.flatnonzero(d.ctx_index == ci)
            log_n, log_twin, prior_t = twins[ci]
            for k in KS:
                prior = cal.table_scale(c, k - 1)
                tk = c.tables.per_k[k]
                for _ in range(DRAWS):
                    p, t = cal.pick_points(scale_out[runs], k, rng)
                    p, t = runs[p], runs[t]
                    if len(t) == 0:
                        continue
                    out = []
                    for heads in (h_tables, h_members):
                        head = heads[m, ci].astype(np.float64)

                        def net(at, head=head):
                            return log_runtime(head, basis[[row_at[round(float(n))] for n in at]])

                        tw_p = twin_log_runtime(log_n, log_twin, scale_out[p], net, log_runtime(head, basis[p]))
                        fit = fit_context(
                            head[None, None, :], basis[p][None], scale_out[p][None], log_y[p][None],
                            np.ones((1, len(p))), noise_sd=lik, learned_cov=cov, check_above=small_max,
                            correction=corr, twin=tw_p[None], twin_prior=np.array([prior_t]),
                        )
                        hh = head + fit.delta[0, 0]
                        rw = fit.run_weight[0]
                        at_picks = tuned_log_runtime(log_runtime(hh, basis[p]), scale_out[p], fit.theta[0],
                                                     fit.parametric_weight[0], actual=log_y[p])[0] * rw
                        r = tuned_log_runtime(
                            log_runtime(hh, basis[t]), scale_out[t], fit.theta[0], fit.parametric_weight[0],
                            runs=(scale_out[p], at_picks), corrections=[corr or (0.0, 0.5)], noise_sd=lik,
                            actual=log_y[t],
                        )[0]
                        w = float(fit.twin_weight[0])
                        r31 = r
                        if w > 0:
                            level = run_level(tw_p[None], log_y[p][None], (rw > 0)[None])[0]
                            twin_t = twin_log_runtime(log_n, log_twin, scale_out[t], net, log_runtime(hh, basis[t])) + level
                            # session 31's tables: the residual runs − curve mixed with the twin's curve − runs
                            r31 = mix_twin(r, twin_t - log_y[t], w)
                            # the prediction's mix (the fix): runs − the mixed curve
                            r = log_y[t] - mix_twin(log_y[t] - r, twin_t, w)
                        n_c, rms = int(fit.check_count[0]), float(fit.check_rms[0])
                        fac = cal.check_factor(prior, cal.PRIOR_CHECKS, n_c, rms) if n_c >= cal.MIN_CHECKS else 1.0
                        dist = cal.log_distance(scale_out[t], scale_out[p])
                        hi = bounds(tk, scale_out[t], small_max, dist)
                        hi = np.where(scale_out[t] > small_max, hi * fac, hi)
                        # residuals are log(y / pred): the run is under the upper bound where r ≤ hi
                        # (the cached session 31 tables' bound; ``cov31``: session 31's residual against it)
                        cov_up = float(np.mean(r <= hi))
                        out.append((w, rms, n_c, fac, cov_up, float(np.mean(hi)), float(np.mean(r)),
                                    float(np.mean(r31 <= hi)), float(np.sqrt(np.mean(r**2))), float(np.sqrt(np.mean(r31**2)))))
                    rows[k].append(out)

print(f"\n# s21 join, fold models {sorted(FOLDS)}, {DRAWS} draws per out-of-fold context; the same picks on both heads")
for k in KS:
    a = np.array(rows[k])  # [draws, 2 (tables, members), 7]
    print(f"\n## k = {k}: {len(a)} context draws")
    for name, col in (("twin weight on the tables' heads", 0), ("twin weight on the members' heads", 1)):
        for lab, sel in (("w >= 0.5", a[:, col, 0] >= 0.5), ("w < 0.5", a[:, col, 0] < 0.5)):
            s = a[sel]
            print(
                f"{name} {lab}: {len(s)} draws | tables' heads: w {s[:,0,0].mean():.2f} rms {s[:,0,1].mean():.3f}"
                f" factor {s[:,0,3].mean():.3f} ≤ upper {s[:,0,4].mean():.1%} upper offset {s[:,0,5].mean():.3f}"
                f" | members' heads: w {s[:,1,0].mean():.2f} rms {s[:,1,1].mean():.3f} factor {s[:,1,3].mean():.3f}"
                f" ≤ upper {s[:,1,4].mean():.1%} upper offset {s[:,1,5].mean():.3f}"
            )
    for lab, sel in (("w >= 0.5", a[:, 0, 0] >= 0.5), ("w < 0.5", a[:, 0, 0] < 0.5)):
        s = a[sel]
        print(f"tables' heads, {lab}: rms of the test residual, prediction's mix {s[:,0,8].mean():.3f} against session 31's"
              f" {s[:,0,9].mean():.3f}; ≤ the session 31 tables' upper: prediction's mix {s[:,0,4].mean():.1%},"
              f" session 31's residual {s[:,0,7].mean():.1%}")
    print(f"weight differs by > 0.25 between the heads: {np.mean(np.abs(a[:,0,0]-a[:,1,0]) > 0.25):.1%} of draws;"
          f" corr of weights {np.corrcoef(a[:,0,0], a[:,1,0])[0,1]:.2f}")
