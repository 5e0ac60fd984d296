"""Session 32 (twinchk32): a twin-weighted held-out context's twin weight and check factor, as
production fine-tunes it (``RuntimeModel.finetune``: the members' ensemble) against what
calibration's simulation (``calibrate``'s ``residuals``: ``fit_context`` on one out-of-fold head
per context) gives the same context with the same picked runs.

For each held-out context of s21 join (folds, quick, seed 0; the benchmark's own draws, as
``job-cells-s32-jobcal32.py``) with production twin weight > 0 at k: production's twin weight,
check rms / count, factor (``check_factor`` of the pooled (k − 1) tables' scale), upper offset,
and calibration's rule on each member's head alone (every member is out of fold for a held-out
context): the same quantities, mean over members.

usage: python twin-checks-s32-twinchk32.py CACHE [MAIN_COMMIT]
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from airflow_provider_bellamy.benchmarks import common
from airflow_provider_bellamy.benchmarks.common import benchmark_runs, held_out_tasks, pretrain
from airflow_provider_bellamy.model import calibration as cal
from airflow_provider_bellamy.model.features import scale_out_basis
from airflow_provider_bellamy.model.finetuning import fit_context, twin_log_runtime
from airflow_provider_bellamy.model.inference import log_runtime

CACHE = sys.argv[1]
MAIN = sys.argv[2] if len(sys.argv) > 2 else "ffb4e8f"
KS = (3, 5)
Q = 0.9
ROOT = Path(__file__).resolve().parents[2]
# (the git checkout holding MAIN, where this script runs from a copy of other code)
GIT = os.environ.get("BELLAMY_GIT", str(ROOT))


def main_digest() -> bytes:
    """The model code digest of ``MAIN`` (its cached fold models' key)."""
    names = subprocess.run(
        ["git", "-C", GIT, "ls-tree", "--name-only", MAIN, "airflow_provider_bellamy/model/"],
        capture_output=True, text=True, check=True,
    ).stdout.split()
    digest = hashlib.sha256()
    for name in sorted(n for n in names if n.endswith(".py")):
        digest.update(subprocess.run(["git", "-C", GIT, "show", f"{MAIN}:{name}"], capture_output=True, check=True).stdout)
    return digest.digest()


if CACHE != "-":
    digest = main_digest()
    common._model_code_digest = lambda: digest  # type: ignore[assignment]


def calibration_rule(model, ctx, ns, log_y, k):
    """Calibration's simulation of this context with these runs, on each member's head alone."""
    heads = model._base_h(ctx)  # [M, F]
    floor = model._steep_floor
    basis = scale_out_basis(ns, floor)
    found = model._known_twin(ctx, ns)
    log_n, log_twin, _, prior = found
    out = []
    for m in range(heads.shape[0]):
        head = heads[m]
        twin = twin_log_runtime(
            log_n, log_twin, ns, lambda at: log_runtime(head, scale_out_basis(np.asarray(at, float), floor)),
            log_runtime(head, basis),
        )
        fit = fit_context(
            head[None, None, :], basis[None], ns[None], log_y[None], np.ones((1, len(ns))),
            noise_sd=model._likelihood_sd, learned_cov=model._prior_covariance(),
            check_above=model._smallest_max, correction=model._correction,
            twin=twin[None], twin_prior=np.array([prior]),
        )
        out.append((float(fit.twin_weight[0]), float(fit.check_rms[0]), int(fit.check_count[0])))
    return np.array(out)


data = benchmark_runs(traces=ROOT / "docs/results/synthetic-trace-s21.csv", protocol="folds")
print(f"# s21 join, folds, quick, seed 0; cache {CACHE} (model code {MAIN})")
rows = {k: [] for k in KS}
for task in held_out_tasks(data, 0):
    if task.algorithm != "join":
        continue
    model = pretrain(task, 0, True, None if CACHE == "-" else CACHE)
    rng = np.random.default_rng(10_000 + 0 * 100 + task.fold)
    draws = {
        k: {cid: task.draw(g, k, rng) for cid, g in task.held_out.groupby("context_id", sort=True)}
        for k in common.K_VALUES
    }
    c = model.calibration
    for k in KS:
        for cid, (points, test) in draws[k].items():
            if task.draws_fall_short(points, k) or test.empty:
                continue
            ctxd = test.iloc[0].to_dict()
            tuned = model.finetune(points.drop(columns=["context_id"]))
            ctx = tuned._normalise(ctxd)
            tc = tuned._tuned_for(ctx)
            w = 0.0 if tc is None or tc.twin is None else float(tc.twin.weight)
            if w <= 0:
                continue
            env = ctx.get("environment")
            prior = cal.table_scale(c, k - 1, None if env is None else str(env), "join")
            f_prod = cal.check_factor(prior, cal.PRIOR_CHECKS, tc.check_count, tc.check_rms)
            ns_t = test["scale_out"].to_numpy()
            y = test["runtime_s"].to_numpy()
            pred, lo, hi = (np.asarray(a, float) for a in tuned.predict_band(ctxd, ns_t.tolist(), Q))
            ns_p = points["scale_out"].to_numpy()
            ly = np.log(points["runtime_s"].to_numpy(dtype=float))
            sim = calibration_rule(model, ctx, ns_p, ly, k)
            f_sim = [cal.check_factor(prior, cal.PRIOR_CHECKS, int(cc), float(r)) for _, r, cc in sim]
            covered = float(np.mean(y <= hi))
            rows[k].append((task.fold, cid, w, tc.check_rms, tc.check_count, f_prod, sim[:, 0].mean(),
                            sim[:, 1].mean(), sim[:, 2].mean(), float(np.mean(f_sim)),
                            float(np.mean(np.log(hi / pred))), covered, float(np.mean(np.log(y / pred)))))
for k in KS:
    print(f"\n## k = {k}: held-out contexts with a twin weight > 0 (production)")
    print("fold ctx | prod: w  rms   n  factor | calib rule per member head (mean): w  rms  n  factor | upper offset, ≤ upper, mean log(y/pred)")
    for r in rows[k]:
        print(f"{r[0]:4d} {r[1]:>4} | {r[2]:.2f} {r[3]:.3f} {r[4]:2d} {r[5]:.3f} | {r[6]:.2f} {r[7]:.3f} {r[8]:.1f} {r[9]:.3f} | {r[10]:.3f} {r[11]:.0%} {r[12]:+.3f}")
    a = np.array([r[2:] for r in rows[k]], dtype=float)
    for name, sel in (("w >= 0.5", a[:, 0] >= 0.5), ("0 < w < 0.5", a[:, 0] < 0.5)):
        s = a[sel]
        if len(s):
            print(f"{name}: {len(s)} ctx; prod w {s[:,0].mean():.2f} rms {s[:,1].mean():.3f} factor {s[:,3].mean():.3f}"
                  f" | calib rule w {s[:,4].mean():.2f} rms {s[:,5].mean():.3f} factor {s[:,7].mean():.3f}"
                  f" | upper offset {s[:,8].mean():.3f} ≤ upper {s[:,9].mean():.1%}")
