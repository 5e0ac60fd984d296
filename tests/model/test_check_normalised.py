"""The band's tables measure the band as it is given: residuals divided by the factor their
context's own checks rescale its band by (normalised split conformal, session 24)."""

from __future__ import annotations

import numpy as np

from airflow_provider_bellamy.model.calibration import (
    MAX_K,
    MIN_CHECKS,
    PRIOR_CHECKS,
    Calibration,
    FineTuning,
    _tables_per_k,
    check_factor,
    check_normalised_tables,
    residual_quantiles,
    table_scale,
)

SMALL_MAX = 1.0  # no scale-out below: every residual is rescaled where its context has checks
RUNS = 12


def _draws(contexts: int, seed: int):  # type: ignore[no-untyped-def]
    """Per k, residuals of contexts fine-tuned on k runs, as a straggler among them makes them:
    most contexts' curves miss their runs by noise (sd 0.03) and their checks say so; one in eight
    has its whole curve lifted by a straggler (every run 0.3 below it, ± noise), which its checks
    (leave-one-scale-out residuals) see as a large miss. Checks from k = 2 on."""
    rng = np.random.default_rng(seed)
    per_k, checks = [], []
    for k in range(MAX_K + 1):
        lifted = rng.random(contexts) < 0.125
        shift = np.where(lifted, -0.3, 0.0)
        owner = np.repeat(np.arange(contexts), RUNS)
        r = shift[owner] + rng.normal(0.0, 0.03, len(owner))
        at = np.tile(np.arange(2, 2 + RUNS, dtype=float), contexts)
        count = np.full(contexts, k if k >= MIN_CHECKS else 0)
        rms = np.abs(np.where(lifted, 0.3, 0.03) * rng.normal(1.0, 0.3, contexts))
        per_k.append((r, at, owner, np.full(len(r), np.inf)))
        checks.append((rms[owner], count[owner]))
    return per_k, checks


def _coverage(calibration: Calibration, k: int, seed: int) -> tuple[float, float]:
    """Share of new contexts' runs above the lower / under the upper bound of the band the model
    gives: the k tables' offsets times its checks' factor (``RuntimeModel._quantiles``, inside)."""
    per_k, checks = _draws(2000, seed)
    r, at, _, _ = per_k[k]
    rms, count = checks[k]
    lo, hi = residual_quantiles(calibration, k, 0.9, at)
    prior = table_scale(calibration, k - 1)
    factor = np.array(
        [check_factor(prior, PRIOR_CHECKS, int(c), float(s)) for s, c in zip(rms, count, strict=True)]
    )
    return float(np.mean(r >= lo * factor)), float(np.mean(r <= hi * factor))


def test_the_tables_hold_residuals_over_their_contexts_check_factor() -> None:
    """At k ≥ MIN_CHECKS a residual enters the tables divided by the factor the band multiplies by
    (the prior read from the k − 1 tables built the same way); below, as it is; the validation
    error stays the raw residuals'."""
    per_k, checks = _draws(40, 0)
    tables = check_normalised_tables(per_k, checks, [None] * 40, None, SMALL_MAX, 40, 0.05)
    raw = _tables_per_k(per_k, [None] * 40, SMALL_MAX, 40)
    assert tables.per_k[0] == raw.per_k[0] and tables.per_k[1] == raw.per_k[1]
    assert tables.validation_mre == raw.validation_mre
    calibration = Calibration(0.05, FineTuning(0.1), tables)
    r, at, owner, distance = per_k[2]
    rms, count = checks[2]
    prior = table_scale(calibration, 1)
    divisor = np.array(
        [check_factor(prior, PRIOR_CHECKS, int(c), float(s)) for s, c in zip(rms, count, strict=True)]
    )
    expected = _tables_per_k([(r / divisor, at, owner, distance)], [None] * 40, SMALL_MAX, 40)
    assert tables.per_k[2] == expected.per_k[0]
    assert tables.per_k[2] != raw.per_k[2]


def test_the_rescaled_band_covers_its_level() -> None:
    """Contexts whose checks tell a straggler-lifted curve from a good one: the band rescaled by
    the checks over raw residual tables covers far more than 90 % below (the lifted contexts'
    residuals set the raw lower quantile, and their rescaled band then covers them again) and the
    good ones' narrowed band less above; with the tables of the rescaled residuals each side holds
    about its 90 %."""
    per_k, checks = _draws(40, 1)
    envs = [None] * 40
    normalised = Calibration(
        0.05, FineTuning(0.1), check_normalised_tables(per_k, checks, envs, None, SMALL_MAX, 40, 0.05)
    )
    raw = Calibration(0.05, FineTuning(0.1), _tables_per_k(per_k, envs, SMALL_MAX, 40))
    for k in (2, 3, 4, 5):
        above, under = _coverage(normalised, k, 2)
        assert 0.87 <= above <= 0.94 and 0.87 <= under <= 0.94, (k, above, under)
        raw_above, raw_under = _coverage(raw, k, 2)
        assert raw_above > 0.95 or raw_under < 0.87, (k, raw_above, raw_under)
