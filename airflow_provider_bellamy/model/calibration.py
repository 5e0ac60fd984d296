"""Calibration: what fine-tuning should trust, and how wide a band must be, from
out-of-fold predictions of the pre-trained members (numpy only).

Each member never saw the contexts of its fold, so simulating fine-tuning on k of their
runs and predicting the rest gives honest residuals: they choose the fine-tuning prior
and likelihood widths (empirical Bayes) and become split-conformal quantile tables per k,
which make the confidence of a sizing decision mean what it says.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np

from airflow_provider_bellamy.model.finetuning import (
    OTHER_ENVIRONMENT_PRIOR,
    empirical_prior_covariance,
    fit_context,
    fit_delta,
    tuned_log_runtime,
)
from airflow_provider_bellamy.model.inference import log_runtime

MAX_K = 5  # fine-tuning sizes the calibration tables cover; more points use MAX_K's table
QUANTILE_GRID = np.linspace(0.0, 1.0, 201)
DEFAULT_PRIOR_SD = 0.2
# Calibration keeps the smallest clusters apart: at the smallest trained scale-outs (≤ 1.5 × the
# minimum) memory pressure makes runtimes erratic (C3O: 3× to 25× jumps at 2 nodes), and one
# pooled residual table would widen every other scale-out's band by their spread.
SMALLEST_SCALE_OUT_FACTOR = 1.5
MIN_BUCKET_RESIDUALS = 20
# A scale-out within this factor of one the context was tuned on is predicted from its own runs
# close by; farther out the prediction rests on the curve's shape. Their errors differ, so each gets
# its own tables ("near", "far"; "others" holds both). Farther out the error keeps growing with the
# distance (docs/model.md, "Behind the constants"): the far table holds residuals divided by their
# log distance in units of log NEAR_FACTOR, and a band multiplies them back (normalised conformal
# scores).
NEAR_FACTOR = 1.5
# An environment (the ``environment`` property: a cluster, a cloud service) gets its own tables
# once this many of its contexts were predicted out of fold: fewer describe single jobs.
MIN_ENVIRONMENT_CONTEXTS = 2
PRIOR_SCALES = (0.25, 0.5, 1.0, 2.0)  # × the empirical prior covariance's standard deviations
LIKELIHOOD_FACTORS = (1.0, 2.0, 4.0)
# The residual correction's settings to choose from (see finetuning.residual_correction):
# amplitude (× the likelihood width) and length (log scale-out: 0.35 ≈ a factor 1.4, 0.7 ≈ 2).
# (0, ·) is no correction: a training set whose out-of-fold runs it does not help keeps the
# curves as they are.
CORRECTIONS = ((0.0, 0.5), *((a, length) for a in (0.5, 1.0, 2.0, 4.0) for length in (0.35, 0.7)))
_CALIBRATION_DRAWS = 4


def pick_points(scale_outs: np.ndarray, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Indices of one run at each of k distinct random scale-outs, and of the runs at the others."""
    distinct = np.unique(scale_outs)
    chosen = rng.choice(distinct, size=min(k, len(distinct)), replace=False) if k else np.array([])
    picked = np.array([rng.choice(np.flatnonzero(scale_outs == s)) for s in chosen], dtype=np.int64)
    test = np.flatnonzero(~np.isin(scale_outs, chosen))
    return picked, test


def quantile_table(residuals: np.ndarray) -> list[float]:
    return [float(v) for v in np.quantile(residuals, QUANTILE_GRID)] if len(residuals) else []


def _padded(
    groups: list[np.ndarray], basis: np.ndarray, log_y: np.ndarray, scale_out: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Batch the runs of each group: (basis [B,K,F], log_y, weight, scale-outs [B,K]); padding
    weighs 0."""
    kmax = max(len(g) for g in groups)
    b = np.ones((len(groups), kmax, basis.shape[1]))
    yy = np.zeros((len(groups), kmax))
    w = np.zeros((len(groups), kmax))
    ns = np.ones((len(groups), kmax))
    for i, g in enumerate(groups):
        b[i, : len(g)], yy[i, : len(g)], w[i, : len(g)], ns[i, : len(g)] = (
            basis[g],
            log_y[g],
            1.0,
            scale_out[g],
        )
    return b, yy, w, ns


def calibrate(
    h_members: np.ndarray,
    folds: list[np.ndarray],
    ctx_index: np.ndarray,
    basis: np.ndarray,
    log_y: np.ndarray,
    scale_out: np.ndarray,
    likelihood_sd: float,
    rng: np.random.Generator,
    deadline: float | None = None,
    environments: list[str | None] | None = None,
    settings: Mapping[str, Any] | None = None,
    fold_scales: Sequence[np.ndarray] | None = None,
    other_priors: np.ndarray | None = None,
) -> dict[str, Any]:
    """Out-of-fold residuals after simulated fine-tuning with k = 0..MAX_K points.

    ``h_members`` [M, C, F]: every member's head output for every training context;
    runs: ``ctx_index``, ``basis``, ``log_y``, ``scale_out`` [N].

    Also picks the fine-tuning prior width and likelihood width by out-of-fold error
    (empirical Bayes on the training data itself, never on the data evaluated later):
    the likelihood must cover the basis' structural misfit, not only run noise, or a
    few points on a smooth-looking job drag the curve into interpolating them.

    ``environments`` [C] (the contexts' ``environment`` property): besides the pooled tables,
    each environment with enough out-of-fold contexts gets tables of its own contexts'
    residuals (group-conditional conformal). Pooled tables are dominated by the environment
    with most training runs; a context of a rarer one is as hard to predict as its own
    environment's contexts were, and its band says so.

    ``settings`` (a calibration's ``prior_covariance``, ``likelihood_sd`` and
    ``residual_correction``): fine-tune with these instead of choosing them, so the tables
    measure the fine-tuning the model will actually do (the out-of-distribution pass).
    ``fold_scales`` [per fold, one per context]: each out-of-fold context's residuals are divided
    by its scale (≥ 1) before they enter the tables (normalised conformal scores; a band
    multiplies the bounds back by its context's scale).
    ``other_priors`` [C]: each context's prior probability of "another environment" in
    fine-tuning (``finetuning.fit_delta_averaged``), as the model will fine-tune it (default: the
    model's default for a context it knows).
    """
    h_oof: list[np.ndarray] = []
    ctx_ids: list[int] = []
    divisors: list[float] = []
    for m, fold in enumerate(folds):
        if m >= h_members.shape[0] or len(fold) == 0:
            continue
        h_oof.append(h_members[m, fold])
        ctx_ids.extend(int(c) for c in fold)
        divisors.extend(
            np.ones(len(fold)) if fold_scales is None else np.asarray(fold_scales[m], dtype=float)
        )
    if not ctx_ids:
        return {}
    divisor = np.asarray(divisors)
    h_all = np.concatenate(h_oof).astype(np.float64)
    run_ids = [np.flatnonzero(ctx_index == c) for c in ctx_ids]
    env_of = [None if environments is None else environments[c] for c in ctx_ids]
    prior_of = OTHER_ENVIRONMENT_PRIOR if other_priors is None else np.asarray(other_priors)[ctx_ids]

    def residuals(
        k: int,
        cov: np.ndarray,
        lik_sd: float,
        draws: int,
        corrections: Sequence[tuple[float, float]] = ((0.0, 0.5),),
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Out-of-fold log residuals at the test runs ([one row per residual correction] ×
        runs), the scale-outs they were at, the index (into ``ctx_ids``) of their context and
        their log distance to the nearest picked scale-out."""
        out: list[np.ndarray] = []
        at: list[np.ndarray] = []
        owner: list[np.ndarray] = []
        distance: list[np.ndarray] = []
        for _ in range(draws):
            picks, tests = [], []
            for runs in run_ids:
                p, t = pick_points(scale_out[runs], k, rng)
                picks.append(runs[p])
                tests.append(runs[t])
            delta = np.zeros_like(h_all)
            theta, share = np.zeros((len(h_all), 4)), np.zeros(len(h_all))
            if k:
                b, yy, w, ns = _padded(picks, basis, log_y, scale_out)
                fit = fit_context(
                    h_all[:, None, :], b, ns, yy, w, noise_sd=lik_sd, learned_cov=cov, other_prior=prior_of
                )
                delta, theta, share = fit.delta[:, 0], fit.theta, fit.parametric_weight
            hh = h_all + delta
            for i, t in enumerate(tests):
                if len(t) == 0:
                    continue
                p = picks[i]
                at_picks = tuned_log_runtime(
                    log_runtime(hh[i], basis[p]), scale_out[p], theta[i], share[i], actual=log_y[p]
                )[0]
                out.append(
                    tuned_log_runtime(
                        log_runtime(hh[i], basis[t]),
                        scale_out[t],
                        theta[i],
                        share[i],
                        runs=(scale_out[p], at_picks),
                        corrections=[(amplitude * lik_sd, length) for amplitude, length in corrections],
                        noise_sd=lik_sd,
                        actual=log_y[t],
                    )
                )
                at.append(scale_out[t])
                owner.append(np.full(len(t), i))
                distance.append(log_distance(scale_out[t], scale_out[p]))
        if not out:
            return (
                np.zeros((len(corrections), 0)),
                np.array([]),
                np.array([], dtype=np.int64),
                np.array([]),
            )
        return (
            np.concatenate(out, axis=1),
            np.concatenate(at),
            np.concatenate(owner),
            np.concatenate(distance),
        )

    # Empirical Bayes prior: the corrections each out-of-fold context needs when all of
    # its runs are known, fitted under a weak prior.
    if settings is not None:
        return _fixed_tables(settings, residuals, env_of, scale_out, len(ctx_ids), divisor, deadline)
    b, yy, w, _ = _padded(run_ids, basis, log_y, scale_out)
    full = fit_delta(h_all, b, yy, w, noise_sd=likelihood_sd, prior_precision=np.eye(h_all.shape[1]))
    cov = empirical_prior_covariance(full)
    scores: dict[tuple[float, float], float] = {}
    # the middle of the grid first: if the time budget ends the search early, it has the safest guess
    grid = sorted(
        ((p, f) for p in PRIOR_SCALES for f in LIKELIHOOD_FACTORS),
        key=lambda pf: (abs(np.log(pf[0])) + abs(np.log(pf[1] / 2.0)), pf),
    )
    for scale, factor in grid:
        if scores and deadline is not None and time.monotonic() > deadline:
            break
        lik = likelihood_sd * factor
        scores[(scale, lik)] = _out_of_fold_error(
            [residuals(k, cov * scale**2, lik, 1)[0][0] for k in (1, 2, 3, 5)]
        )
    prior_scale, lik_sd = min(scores, key=lambda p: (scores[p], p))
    prior_cov = cov * prior_scale**2
    draws = 1 if deadline is not None and time.monotonic() > deadline else _CALIBRATION_DRAWS
    small_max = SMALLEST_SCALE_OUT_FACTOR * float(scale_out.min())
    per_k = [residuals(k, prior_cov, lik_sd, draws, CORRECTIONS) for k in range(MAX_K + 1)]
    # the residual correction that predicts the out-of-fold runs best, as the prior was chosen
    errors = [_out_of_fold_error([rows[g] for rows, *_ in per_k[1:]]) for g in range(len(CORRECTIONS))]
    best = min(range(len(CORRECTIONS)), key=lambda g: (errors[g], g))
    amplitude, length = CORRECTIONS[best]
    tables, counts, by_env, mre = _tables_per_k(
        [(rows[best], at, owner, d) for rows, at, owner, d in per_k], env_of, small_max
    )
    return {
        "prior_scale": prior_scale,
        "prior_covariance": prior_cov.tolist(),
        "likelihood_sd": lik_sd,
        "prior_scores": {f"{p}/{lik:.4f}": v for (p, lik), v in scores.items()},
        "residual_correction": {"amplitude": amplitude * lik_sd, "length": length},
        "residual_correction_scores": {
            f"{a}/{ln}": e for (a, ln), e in zip(CORRECTIONS, errors, strict=True)
        },
        "calibration": {
            "quantiles": tables,
            "counts": counts,
            "n": len(ctx_ids),
            "smallest_max_scale_out": small_max,
            "far_scaled": True,
            "environments": by_env,
        },
        "validation_mre": mre,
    }


def _tables_per_k(
    per_k: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    env_of: Sequence[str | None],
    small_max: float,
    divisor: np.ndarray | None = None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], dict[str, float]]:
    """Per k (residuals, their scale-outs, owners, distances): pooled and per-environment
    bucket tables, their counts and the mean relative error; residuals divided by their owner's
    ``divisor`` where given."""
    tables: dict[str, dict[str, list[float]]] = {}
    counts: dict[str, dict[str, int]] = {}
    by_env: dict[str, dict[str, Any]] = {}
    mre: dict[str, float] = {}
    env_names = sorted(
        e for e, n in Counter(env_of).items() if e is not None and n >= MIN_ENVIRONMENT_CONTEXTS
    )
    for k, (raw, at, owner, distance) in enumerate(per_k):
        r = raw if divisor is None else raw / divisor[owner]
        small = at <= small_max
        tables[str(k)], counts[str(k)] = _bucket_tables(r, small, distance)
        for env in env_names:
            mine = np.array([env_of[i] == env for i in owner], dtype=bool)
            t, c = _bucket_tables(
                r[mine], small[mine], distance[mine], fallback=(tables[str(k)], counts[str(k)])
            )
            slot = by_env.setdefault(env, {"quantiles": {}, "counts": {}})
            slot["quantiles"][str(k)], slot["counts"][str(k)] = t, c
        mre[str(k)] = float(np.mean(np.abs(np.expm1(-raw)))) if len(raw) else math.nan
    return tables, counts, by_env, mre


def _fixed_tables(
    settings: Mapping[str, Any],
    residuals: Any,
    env_of: Sequence[str | None],
    scale_out: np.ndarray,
    n_contexts: int,
    divisor: np.ndarray,
    deadline: float | None,
) -> dict[str, Any]:
    """``calibrate``'s tables for fine-tuning with given settings (no search)."""
    lik_sd = float(settings["likelihood_sd"])
    prior_cov = np.asarray(settings["prior_covariance"], dtype=np.float64)
    setting = settings.get("residual_correction") or {"amplitude": 0.0, "length": 0.5}
    correction = ((float(setting["amplitude"]) / lik_sd, float(setting["length"])),)
    draws = 1 if deadline is not None and time.monotonic() > deadline else _CALIBRATION_DRAWS
    small_max = SMALLEST_SCALE_OUT_FACTOR * float(scale_out.min())
    per_k = [residuals(k, prior_cov, lik_sd, draws, correction) for k in range(MAX_K + 1)]
    tables, counts, by_env, mre = _tables_per_k(
        [(rows[0], at, owner, d) for rows, at, owner, d in per_k], env_of, small_max, divisor
    )
    return {
        "calibration": {
            "quantiles": tables,
            "counts": counts,
            "n": n_contexts,
            "smallest_max_scale_out": small_max,
            "far_scaled": True,
            "environments": by_env,
        },
        "validation_mre": mre,
    }


def _out_of_fold_error(per_k: Sequence[np.ndarray]) -> float:
    """What the empirical-Bayes choices minimise: the mean over k of the mean relative error of
    the out-of-fold log residuals. A k no context has enough scale-outs for gives no residuals:
    it cannot vote."""
    errors = [float(np.mean(np.abs(np.expm1(r)))) for r in per_k if len(r)]
    return float(np.mean(errors)) if errors else 0.0


def log_distance(scale_outs: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """Per scale-out: |log n − log m| to the nearest ``observed`` scale-out m (none observed: inf)."""
    if len(observed) == 0:
        return np.full(len(scale_outs), np.inf)
    ratio = (
        np.log(np.asarray(scale_outs, dtype=np.float64))[:, None]
        - np.log(np.asarray(observed, dtype=np.float64))[None, :]
    )
    return np.abs(ratio).min(axis=1)


def is_near(distance: np.ndarray) -> np.ndarray:
    return distance <= math.log(NEAR_FACTOR) + 1e-9


def far_scale(distance: np.ndarray) -> np.ndarray:
    """What a far residual is divided by in the far table: its log distance in units of
    log NEAR_FACTOR (≥ 1; none observed, as at k = 0: 1)."""
    d = np.where(np.isfinite(distance), distance, 0.0)
    return np.maximum(d / math.log(NEAR_FACTOR), 1.0)


def _bucket_tables(
    r: np.ndarray,
    small: np.ndarray,
    distance: np.ndarray,
    fallback: tuple[dict[str, list[float]], dict[str, int]] | None = None,
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Quantile tables and residual counts of the smallest scale-outs, the others, and the others
    split into near / far from the tuned scale-outs (the far ones divided by ``far_scale``); a
    bucket with too few residuals takes ``fallback``'s bucket (or the table of all residuals, in the
    bucket's units)."""
    near = is_near(distance)
    scaled = r / far_scale(distance)
    tables, counts = {}, {}
    for bucket, sel, values in (
        ("smallest", small, r),
        ("others", ~small, r),
        ("near", ~small & near, r),
        ("far", ~small & ~near, scaled),
    ):
        if sel.sum() >= MIN_BUCKET_RESIDUALS:
            tables[bucket], counts[bucket] = quantile_table(values[sel]), int(sel.sum())
        elif fallback is not None:
            tables[bucket], counts[bucket] = fallback[0][bucket], fallback[1][bucket]
        else:
            tables[bucket], counts[bucket] = quantile_table(values), len(values)
    return tables, counts


def _calibration(metadata: Mapping[str, Any], environment: str | None) -> Mapping[str, Any]:
    """The tables that answer for a context: its environment's where calibration had enough of
    its contexts, the pooled ones otherwise."""
    cal = metadata.get("calibration") or {}
    own = (cal.get("environments") or {}).get(environment) if environment is not None else None
    return own or cal


def _tables(
    metadata: Mapping[str, Any], k: int, environment: str | None = None
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """The residual quantile tables (per scale-out bucket) for a model tuned on k points, and
    how many residuals each holds."""
    source = _calibration(metadata, environment)
    key = str(min(k, MAX_K))
    tables = (source.get("quantiles") or {}).get(key) or {}
    if not any(tables.values()):
        # no residual measured this k (the calibration contexts ran at too few scale-outs to hold
        # k + 1 out): no table, the Gaussian band answers
        return {}, {}
    return tables, (source.get("counts") or {}).get(key) or {}


def gaussian_sd(metadata: Mapping[str, Any]) -> float:
    """The log-space sd of the band where no table measured the error (a single training context,
    too few contexts held out whole): run noise and twice the default prior width, wider than any
    calibrated band on purpose."""
    return math.hypot(float(metadata.get("noise_sd", 0.05)), 2 * DEFAULT_PRIOR_SD)


def residual_quantiles(
    metadata: Mapping[str, Any],
    k: int,
    confidence: float,
    scale_outs: np.ndarray,
    environment: str | None = None,
    observed: Sequence[int] = (),
    groups: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper log-residual quantiles per scale-out, for a model tuned on k points at the
    ``observed`` scale-outs (a context of ``environment``). ``groups``: the tables hold the
    residuals of this many groups held out whole (``metadata["groups"]`` where not given)."""
    cal = metadata.get("calibration") or {}
    groups = groups if groups is not None else metadata.get("groups")
    tables, counts = _tables(metadata, k, environment)
    if not tables:
        sd = gaussian_sd(metadata)
        z = NormalDist().inv_cdf(confidence)
        return np.full(len(scale_outs), -z * sd), np.full(len(scale_outs), z * sd)
    bounds = {}
    for bucket, t in tables.items():
        # finite-sample conformal correction over the table's residuals: level ⌈(n+1)q⌉/n,
        # clipped to the table's range. (Counting contexts instead, ~20 per job type, turned a
        # 90 % band into a 95 % one: measured 95.5 % coverage on C3O's held-out runs.)
        n = max(int(counts.get(bucket, cal.get("n", 1))), 1)
        if groups and k == 0:
            # untuned, the residuals of one held-out group share its shift: they count as one
            # (group-conformal); a context's own runs re-fit its level, what is left varies per run
            n = min(n, groups)
        level = min(1.0, math.ceil((n + 1) * confidence) / n)
        bounds[bucket] = (
            float(np.interp(1.0 - level, QUANTILE_GRID, t)),
            float(np.interp(level, QUANTILE_GRID, t)),
        )
    small = scale_outs <= float(cal.get("smallest_max_scale_out", 0.0))
    lo = np.where(small, bounds["smallest"][0], bounds["others"][0])
    hi = np.where(small, bounds["smallest"][1], bounds["others"][1])
    if len(observed) and "near" in bounds:  # (a model calibrated before the split: "others")
        distance = log_distance(scale_outs, np.asarray(observed))
        near = is_near(distance)
        # (a model calibrated before the far table was scaled: its far bounds as they are)
        scale = far_scale(distance) if cal.get("far_scaled") else 1.0
        lo = np.where(small, lo, np.where(near, bounds["near"][0], bounds["far"][0] * scale))
        hi = np.where(small, hi, np.where(near, bounds["near"][1], bounds["far"][1] * scale))
    return lo, hi


def widened(lo: np.ndarray, hi: np.ndarray, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """A band's log offsets (lower, upper) for a context outside the training data: symmetric
    about the prediction, each side as far out as the farther of the two, times ``scale`` ≥ 1
    (the distance widening; normalised conformal scores multiplied back).

    The out-of-distribution tables hold residuals of a few groups held out whole (two or three
    machine types, the two ends of a range); each group's residuals share a shift, so a table's
    asymmetry is the direction those few groups happened to be off in. A new group's direction is
    not theirs (C3O sort, one machine type held out, the others' tables: the new one's runs lay
    below a lower bound that the tables put near the prediction, 32 % inside a 90 % band): only
    the size of the error carries over, on both sides. The result always contains the band it
    was given."""
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    size = np.maximum(np.maximum(-lo, hi), 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        # (an infinite scale of a zero offset: no growth rather than NaN)
        grown = np.where(size > 0, size * scale, 0.0)
    return -grown, grown


def max_confidence(metadata: Mapping[str, Any], k: int, environment: str | None = None) -> float:
    """The highest confidence the k-point tables can honour: with n residuals the conformal level
    ⌈(n+1)q⌉/n passes 1 above q = n/(n+1), and every q beyond gives the same band (the largest
    residual). The smallest bucket decides; no table (the Gaussian band): 1."""
    tables, counts = _tables(metadata, k, environment)
    if not tables:
        return 1.0
    fallback = int((metadata.get("calibration") or {}).get("n", 1))
    n = min(max(int(counts.get(bucket, fallback)), 1) for bucket in tables)
    return n / (n + 1)


def table_scale(metadata: Mapping[str, Any], k: int, environment: str | None = None) -> float:
    """A robust standard deviation of the k-point residual table above the smallest scale-outs:
    half the distance between its 16th and 84th percentiles; without any table, the sd of the
    Gaussian band that answers then (``gaussian_sd``)."""
    tables = _tables(metadata, k, environment)[0]
    if not tables:
        return gaussian_sd(metadata)
    table = tables.get("others")
    if not table:
        return 0.0
    return float(np.interp(0.84, QUANTILE_GRID, table) - np.interp(0.16, QUANTILE_GRID, table)) / 2
