"""The band's spread by predicted level (sessions 27-28): residuals whose spread grows with the
context's untuned predicted level enter tables of their own divided by σ(level); the band reads
them times its context's σ beside the pooled tables, the wider per side (never narrower)."""

from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np
import pandas as pd
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
from airflow_provider_bellamy.model.runtime_model import RuntimeModel

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
    # the pooled tables keep the levelled ones beside them; a file without them reads the pooled alone
    pooled = replace(tables, level_spreads={}, level_scale_outs=(), levelled=tables)
    assert BandTables.from_dict(pooled.to_dict(), "t") == pooled
    assert (
        BandTables.from_dict({k: v for k, v in pooled.to_dict().items() if k != "levelled"}, "t").levelled
        is None
    )
    with pytest.raises(ValueError, match=r"t\.levelled"):
        BandTables.from_dict(dict(pooled.to_dict(), levelled=old), "t")
    bad = dict(data, level_spreads={"scan": [[-0.5, 1.0], [0.1, 2.0]]})
    with pytest.raises(ValueError, match=r"t\.level_spreads\.scan\[0\]\.slope"):
        BandTables.from_dict(bad, "t")
    with pytest.raises(ValueError, match="level_scale_outs"):
        BandTables.from_dict(dict(data, level_scale_outs=[]), "t")


def _grep_contexts(grep_runs: pd.DataFrame) -> list[dict[str, object]]:
    """Every pairing of grep's machine types, input sizes and occurrence shares: each value one a
    training context had (contexts like the training contexts), their levels spread."""
    props = grep_runs.drop(columns=["context_id", "runtime_s", "scale_out"])
    machines = props[["machine_type", "memory_mb"]].drop_duplicates().to_dict("records")
    sizes = props[["data_size_mb", "lines"]].drop_duplicates().to_dict("records")
    base = props.iloc[0].to_dict()
    return [
        {**base, **m, **z, "p_occurrence": float(p)}
        for m in machines
        for z in sizes
        for p in sorted(props["p_occurrence"].unique())
    ]


def test_the_band_never_narrows_and_covers_the_slowest_third_more(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame
) -> None:
    """A model whose tables hold residuals spreading e^1.5-fold per log unit of level above the
    prediction: its band at k = 0 is, per side, never narrower than the band of the pooled tables
    alone (bit for bit where σ × the levelled tables' bound is narrower: the fastest third), and
    covers the slowest third of new contexts more under the upper bound, where the pooled tables
    leave it short."""
    contexts = _grep_contexts(grep_runs)
    grid = tuple(float(n) for n in sorted(grep_runs["scale_out"].unique()))
    level = np.array([grep_model.untuned_level(grep_model._normalise(c), grid) for c in contexts])
    centred = level - level.mean()
    rng = np.random.default_rng(6)

    def draw(runs: int) -> list[np.ndarray]:
        out = []
        for x in centred:
            r = np.abs(rng.normal(0.0, 0.1, runs))
            out.append(np.where(rng.random(runs) < 0.5, r * np.exp(1.5 * x), -r))
        return out

    residuals = draw(RUNS)
    per_k, checks = _per_k(level, residuals)
    n, jobs, envs = len(contexts), ["grep"] * len(contexts), [None] * len(contexts)
    spreads = level_spreads(level, residuals, jobs)
    assert spreads["grep"][1][0] > 0.5, spreads
    sigma = np.array(
        [BandTables((), {}, 1, 0.0, (), level_spreads=spreads).level_spread("grep", x) for x in level]
    )
    pooled = check_normalised_tables(per_k, checks, envs, jobs, SMALL_MAX, n, 0.05)
    levelled = check_normalised_tables(per_k, checks, envs, jobs, SMALL_MAX, n, 0.05, spread=sigma)
    levelled = replace(levelled, level_spreads=spreads, level_scale_outs=grid)

    def band_offsets(tables: BandTables) -> tuple[np.ndarray, np.ndarray]:
        model = copy.copy(grep_model)
        model.calibration = replace(grep_model.calibration, tables=tables)
        bands = [model.band(c, [8], 0.9) for c in contexts]
        assert all(b.calibrated_for == "contexts like the training contexts" for b in bands)
        return (
            np.array([float(np.log(b.lower[0] / b.mean[0])) for b in bands]),
            np.array([float(np.log(b.upper[0] / b.mean[0])) for b in bands]),
        )

    lo_pooled, hi_pooled = band_offsets(pooled)
    lo, hi = band_offsets(replace(pooled, levelled=levelled))
    assert np.all(hi >= hi_pooled) and np.all(lo <= lo_pooled)
    narrower = sigma[:, 1] < 0.8  # (σ × the levelled bound then lies well inside the pooled one)
    assert narrower.any() and np.array_equal(hi[narrower], hi_pooled[narrower])
    new = draw(400)
    thirds = np.array_split(np.argsort(level), 3)
    covered = [np.mean([np.mean(new[i] <= hi[i]) for i in part]) for part in thirds]
    covered_pooled = [np.mean([np.mean(new[i] <= hi_pooled[i]) for i in part]) for part in thirds]
    assert covered_pooled[2] < 0.85 and covered[2] >= covered_pooled[2] + 0.05, (covered, covered_pooled)
    assert covered[0] == covered_pooled[0] and covered[0] > 0.9, (covered, covered_pooled)
