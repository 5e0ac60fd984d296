"""The band's spread by predicted level (session 27): residuals whose spread grows with the
context's untuned predicted level enter the tables divided by σ(level), and the band multiplies
its offsets back by its context's σ."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from airflow_provider_bellamy.model.calibration import (
    MAX_K,
    MIN_JOB_CONTEXTS,
    BandTables,
    Calibration,
    FineTuning,
    check_normalised_tables,
    level_spreads,
    residual_quantiles,
)

SMALL_MAX = 1.0  # no scale-out below: no residual in the smallest bucket's own table
RUNS = 10


def _contexts(n: int, seed: int, upper_growth: float) -> tuple[np.ndarray, list[np.ndarray]]:
    """n contexts' levels (uniform over 2 log units) and untuned residuals: below the prediction
    sd 0.1 everywhere, above it sd 0.1 × exp(``upper_growth`` × (level − 5))."""
    rng = np.random.default_rng(seed)
    level = rng.uniform(4.0, 6.0, n)
    residuals = []
    for x in level:
        r = np.abs(rng.normal(0.0, 0.1, RUNS))
        up = rng.random(RUNS) < 0.5
        residuals.append(np.where(up, r * np.exp(upper_growth * (x - 5.0)), -r))
    return level, residuals


def test_the_slope_follows_the_side_whose_spread_grows() -> None:
    """Upper spread growing e-fold per log unit of level: an upper slope near 1 (shrunk by n /
    (n + 5)), the lower side's none to the noise; the contexts' mean σ is 1 on each side. A flat
    spread gives slopes of its noise only, one that shrinks with the level none on its side (never
    below 0); a job type of fewer than MIN_JOB_CONTEXTS contexts takes the pool's slope."""
    level, residuals = _contexts(200, 0, 1.0)
    spreads = level_spreads(level, residuals, ["scan"] * 200)
    (b_lo, _), (b_hi, _) = spreads["scan"]
    assert b_lo < 0.15 and 0.8 < b_hi < 1.1, spreads
    tables = BandTables((), {}, 1, 0.0, (), level_spreads=spreads, level_scale_outs=(2.0,))
    sigma = np.array([tables.level_spread("scan", float(x)) for x in level])
    assert np.allclose(sigma.mean(axis=0), 1.0)
    flat_level, flat = _contexts(200, 1, 0.0)
    flat_spreads = level_spreads(flat_level, flat, ["scan"] * 200).get("scan", ((0.0, 0.0), (0.0, 0.0)))
    assert all(b < 0.2 for b, _ in flat_spreads), flat_spreads
    down_level, down = _contexts(200, 2, -1.0)
    assert level_spreads(down_level, down, ["scan"] * 200).get("scan", ((0.0, 0.0), (0.0, 0.0)))[1][0] == 0.0
    few = MIN_JOB_CONTEXTS - 1
    jobs = ["scan"] * 200 + ["sort"] * few
    mixed = level_spreads(np.concatenate([level, level[:few]]), residuals + residuals[:few], jobs)
    assert mixed["sort"][1][0] == pytest.approx(
        level_spreads(level, residuals, ["scan"] * 200)["scan"][1][0], 0.1
    )


def _per_k(level: np.ndarray, residuals: list[np.ndarray]):  # type: ignore[no-untyped-def]
    """The same untuned residuals at every k (no checks): per k (residuals, scale-outs, owners,
    distances) and (check RMS, check count) per residual."""
    r = np.concatenate(residuals)
    owner = np.repeat(np.arange(len(level)), RUNS)
    at = np.tile(np.arange(2, 2 + RUNS, dtype=float), len(level))
    per_k = [(r, at, owner, np.full(len(r), np.inf))] * (MAX_K + 1)
    checks = [(np.zeros(len(r)), np.zeros(len(r), dtype=np.int64))] * (MAX_K + 1)
    return per_k, checks


def _upper_coverage(calibration: Calibration, level: np.ndarray, residuals: list[np.ndarray]) -> list[float]:
    """Share of new contexts' runs under the 90 % upper bound, per third of their level (fastest
    first), each band scaled by its context's σ (``RuntimeModel.level_spread``)."""
    tables = calibration.tables
    assert tables is not None
    covered = []
    for x, r in zip(level, residuals, strict=True):
        spread = tables.level_spread("scan", float(x))
        _, hi = residual_quantiles(calibration, 0, 0.9, np.full(len(r), 5.0), job_type="scan", spread=spread)
        covered.append(float(np.mean(r <= hi)))
    order = np.argsort(level)
    return [float(np.mean(np.asarray(covered)[part])) for part in np.array_split(order, 3)]


def test_the_band_scaled_by_the_spread_covers_the_slowest_third() -> None:
    """With the residuals divided by σ(level) in the tables and the band multiplied back, each
    third of new contexts by level is covered about 90 % under the upper bound; the pooled tables
    alone leave the slowest third short and the fastest over-covered."""
    level, residuals = _contexts(120, 3, 1.5)
    per_k, checks = _per_k(level, residuals)
    spreads = level_spreads(level, residuals, ["scan"] * len(level))
    sigma = np.array(
        [
            BandTables((), {}, 1, 0.0, (), level_spreads=spreads, level_scale_outs=(2.0,)).level_spread(
                "scan", float(x)
            )
            for x in level
        ]
    )
    envs = [None] * len(level)
    jobs = ["scan"] * len(level)
    spread = check_normalised_tables(per_k, checks, envs, jobs, SMALL_MAX, len(level), 0.05, spread=sigma)
    spread = replace(spread, level_spreads=spreads, level_scale_outs=(2.0,))
    pooled = check_normalised_tables(per_k, checks, envs, jobs, SMALL_MAX, len(level), 0.05)
    new_level, new = _contexts(3000, 4, 1.5)
    with_spread = _upper_coverage(Calibration(0.05, FineTuning(0.1), spread), new_level, new)
    without = _upper_coverage(Calibration(0.05, FineTuning(0.1), pooled), new_level, new)
    assert all(0.85 <= c <= 0.95 for c in with_spread), with_spread
    assert without[2] < 0.85 and without[0] > 0.95, without


def test_the_model_file_keeps_the_spreads_and_reads_old_files() -> None:
    """Written and read back the same; a file written before them has none (σ = 1); a bad one is
    refused naming its field."""
    level, residuals = _contexts(10, 5, 0.0)
    per_k, checks = _per_k(level, residuals)
    tables = replace(
        check_normalised_tables(per_k, checks, [None] * 10, ["scan"] * 10, SMALL_MAX, 10, 0.05),
        level_spreads={"scan": ((0.0, 0.0), (0.5, 4.2))},
        level_scale_outs=(2.0, 4.0),
    )
    data = tables.to_dict()
    assert BandTables.from_dict(data, "t").level_spreads == tables.level_spreads
    assert BandTables.from_dict(data, "t").level_spread("scan", 4.2 + 2.0) == pytest.approx(
        (1.0, np.exp(1.0))
    )
    old = {k: v for k, v in data.items() if k not in ("level_spreads", "level_scale_outs")}
    assert BandTables.from_dict(old, "t").level_spread("scan", 9.0) == (1.0, 1.0)
    bad = dict(data, level_spreads={"scan": [[-0.5, 1.0], [0.1, 2.0]]})
    with pytest.raises(ValueError, match=r"t\.level_spreads\.scan\[0\]\.slope"):
        BandTables.from_dict(bad, "t")
    with pytest.raises(ValueError, match="level_scale_outs"):
        BandTables.from_dict(dict(data, level_scale_outs=[]), "t")
