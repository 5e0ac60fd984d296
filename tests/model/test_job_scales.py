"""Per-job-type scales of the band's tables (Mondrian / normalised split conformal)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from airflow_provider_bellamy.model import RuntimeModel
from airflow_provider_bellamy.model.calibration import (
    MAX_K,
    MIN_JOB_CONTEXTS,
    BandTables,
    Calibration,
    FineTuning,
    _tables_per_k,
    job_scales,
    residual_quantiles,
)

SMALL_MAX = 1.0  # no scale-out below: no residual in the smallest bucket's own table


def _residuals(
    sds: dict[str, float], contexts: dict[str, int], runs: int = 20, seed: int = 0
) -> tuple[list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], list[str]]:
    """Per k the same kind of residuals: each job type's contexts' runs at scale-outs 2..21,
    untuned (infinite distance), N(0, its sd)."""
    rng = np.random.default_rng(seed)
    job_of = [job for job, n in contexts.items() for _ in range(n)]
    per_k = []
    for _ in range(MAX_K + 1):
        owner = np.repeat(np.arange(len(job_of)), runs)
        r = np.concatenate([rng.normal(0.0, sds[job], runs) for job in job_of])
        at = np.tile(np.arange(2, 2 + runs, dtype=float), len(job_of))
        per_k.append((r, at, owner, np.full(len(r), np.inf)))
    return per_k, job_of


def _calibration(per_k, job_of, scales) -> Calibration:  # type: ignore[no-untyped-def]
    tables = _tables_per_k(per_k, [None] * len(job_of), SMALL_MAX, len(job_of), job_scales=scales)
    return Calibration(0.05, FineTuning(0.1), tables)


def _upper_coverage(calibration: Calibration, job: str, seed: int) -> float:
    """Share of new residuals of ``job`` (same distributions, other draws) under the 90 % upper bound."""
    per_k, job_of = _residuals({"easy": 0.1, "hard": 0.2}, {"easy": 400, "hard": 400}, seed=seed)
    r, at, owner, _ = per_k[0]
    mine = np.array([job_of[i] == job for i in owner])
    _, hi = residual_quantiles(calibration, 0, 0.9, at[mine], job_type=job)
    return float(np.mean(r[mine] <= hi))


def test_a_job_type_twice_as_hard_gets_a_band_near_its_level() -> None:
    """One job type's residuals twice as wide as another's: the pooled table under-covers it (and
    over-covers the easy one); widened by its scale, it comes near 90 %. The easy one keeps the
    pooled band: a scale never narrows it (a job type's tail can be heavier than its mean says)."""
    per_k, job_of = _residuals({"easy": 0.1, "hard": 0.2}, {"easy": 40, "hard": 40})
    pooled = _calibration(per_k, job_of, None)
    scales = job_scales(per_k, job_of, SMALL_MAX)
    assert set(scales) == {"easy", "hard"} and all(len(s) == MAX_K + 1 for s in scales.values())
    assert min(scales["hard"][0]) > 1.2 and scales["easy"][0] == (1.0, 1.0)
    mondrian = _calibration(per_k, job_of, scales)
    before = {job: _upper_coverage(pooled, job, seed=1) for job in ("easy", "hard")}
    after = {job: _upper_coverage(mondrian, job, seed=1) for job in ("easy", "hard")}
    assert before["hard"] < 0.86 and before["easy"] > 0.95
    assert 0.87 <= after["hard"] <= 0.97 and after["easy"] == before["easy"]
    # a job type the tables hold no scale of (never seen) reads the tables as they are: 1
    assert mondrian.tables is not None and mondrian.tables.job_scale("never-seen", 0) == (1.0, 1.0)


def test_a_job_type_of_too_few_contexts_keeps_the_pooled_scale() -> None:
    per_k, job_of = _residuals({"big": 0.1, "few": 0.4}, {"big": 40, "few": MIN_JOB_CONTEXTS - 1})
    scales = job_scales(per_k, job_of, SMALL_MAX)
    assert scales["few"] == ((1.0, 1.0),) * (MAX_K + 1)
    # and a model of one job type keeps its tables as they were: no scales at all
    single, one = _residuals({"only": 0.2}, {"only": 30})
    assert job_scales(single, one, SMALL_MAX) == {}
    plain = _tables_per_k(single, [None] * len(one), SMALL_MAX, len(one))
    assert _calibration(single, one, {}).tables == plain


def test_the_scale_is_shrunk_towards_one_by_the_contexts_it_rests_on() -> None:
    few, job_few = _residuals({"easy": 0.1, "hard": 0.2}, {"easy": 6, "hard": 6})
    many, job_many = _residuals({"easy": 0.1, "hard": 0.2}, {"easy": 60, "hard": 60})
    for side in (0, 1):
        shrunk = job_scales(few, job_few, SMALL_MAX)["hard"][0][side]
        assert 1.0 < shrunk < job_scales(many, job_many, SMALL_MAX)["hard"][0][side]


def test_job_scales_round_trip_and_an_older_file_without_them_gives_the_band_it_gave(
    grep_model: RuntimeModel, grep_runs: pd.DataFrame
) -> None:
    per_k, job_of = _residuals({"easy": 0.1, "hard": 0.2}, {"easy": 40, "hard": 40})
    calibration = _calibration(per_k, job_of, job_scales(per_k, job_of, SMALL_MAX))
    assert calibration.tables is not None
    assert BandTables.from_dict(calibration.tables.to_dict(), "t") == calibration.tables
    broken = calibration.tables.to_dict()
    broken["job_scales"]["hard"] = [[1.0, 1.0]] * MAX_K  # one k short
    with pytest.raises(ValueError, match=r"job_scales\.hard"):
        BandTables.from_dict(broken, "t")
    broken["job_scales"]["hard"] = [[1.0, 0.0]] * (MAX_K + 1)  # a scale must be > 0
    with pytest.raises(ValueError, match=r"job_scales\.hard"):
        BandTables.from_dict(broken, "t")

    # grep_model's file, as written before job scales: no "job_scales" key
    data = grep_model.calibration.to_dict()
    assert data["tables"]["job_scales"] == {}  # one job type: none
    del data["tables"]["job_scales"]
    older = RuntimeModel(
        grep_model.params,
        grep_model.architecture,
        grep_model.schema,
        grep_model.metadata,
        Calibration.from_dict(data),
    )
    ctx = grep_runs.iloc[0].drop(["context_id", "runtime_s", "scale_out"]).to_dict()
    ns = [2, 4, 8, 12]
    np.testing.assert_array_equal(older.predict_band(ctx, ns, 0.9), grep_model.predict_band(ctx, ns, 0.9))
    # a model with job scales multiplies its job type's bounds by them (its tables' and the
    # levelled ones' beside them: test_level_spread.py)
    scales = {"grep": ((0.5, 2.0),) * (MAX_K + 1)}
    levelled = grep_model.calibration.tables.levelled
    scaled = RuntimeModel(
        grep_model.params,
        grep_model.architecture,
        grep_model.schema,
        grep_model.metadata,
        replace(
            grep_model.calibration,
            tables=replace(
                grep_model.calibration.tables,
                job_scales=scales,
                levelled=None if levelled is None else replace(levelled, job_scales=scales),
            ),
        ),
    )
    mean, lo, hi = grep_model.predict_band(ctx, ns, 0.9)
    mean2, lo2, hi2 = scaled.predict_band(ctx, ns, 0.9)
    np.testing.assert_array_equal(mean, mean2)
    np.testing.assert_allclose(np.log(hi2 / mean2), 2 * np.log(hi / mean), rtol=1e-9)
    assert np.all(lo < mean)
    np.testing.assert_allclose(np.log(lo2 / mean2), 0.5 * np.log(lo / mean), rtol=1e-9)


def test_a_job_type_the_model_is_biased_on_gets_the_wider_side_where_it_misses() -> None:
    """Residuals of one job type shifted above the prediction: its upper side's scale exceeds
    its lower side's, and its upper bound covers near the level."""
    per_k, job_of = _residuals({"a": 0.1, "b": 0.1}, {"a": 40, "b": 40})
    mine = [np.array([job_of[i] == "b" for i in owner]) for _, _, owner, _ in per_k]
    shifted = [(r + 0.1 * m, at, owner, d) for (r, at, owner, d), m in zip(per_k, mine, strict=True)]
    scales = job_scales(shifted, job_of, SMALL_MAX)
    below, above = scales["b"][0]
    assert above > 1.2 and below == 1.0
    calibration = _calibration(shifted, job_of, scales)
    r, at, _, _ = shifted[1]
    b = mine[1]
    _, hi = residual_quantiles(calibration, 1, 0.9, at[b], job_type="b")
    _, pooled_hi = residual_quantiles(_calibration(shifted, job_of, None), 1, 0.9, at[b])
    assert np.mean(r[b] <= pooled_hi) < 0.86 <= np.mean(r[b] <= hi)


def test_pretraining_on_two_job_types_scales_the_harder_ones_band(grep_runs: pd.DataFrame) -> None:
    """End to end: half of grep's contexts renamed to a second job type whose runs are jittered
    ±30 % per scale-out. The model's tables hold a scale per job type, the jittered one's wider on
    both sides; the unseen-job calibration (job types held out whole) holds none."""
    from .conftest import FAST

    rng = np.random.default_rng(3)
    ids = sorted(grep_runs["context_id"].unique())
    noisy = grep_runs["context_id"].isin(ids[::2])
    runs = grep_runs.copy()
    runs.loc[noisy, "job_type"] = "grep-noisy"
    runs.loc[noisy, "runtime_s"] *= np.exp(rng.normal(0.0, 0.3, int(noisy.sum())))
    model = RuntimeModel.pretrain(runs.drop(columns=["context_id"]), seed=0, config=FAST)
    tables = model.calibration.tables
    assert tables is not None and set(tables.job_scales) == {"grep", "grep-noisy"}
    for k in range(1, MAX_K + 1):
        assert min(tables.job_scale("grep-noisy", k)) > max(tables.job_scale("grep", k))
    unseen = model.calibration.unseen_job
    assert unseen is not None and unseen.tables is not None and unseen.tables.job_scales == {}
    ctx = runs[~noisy].iloc[0].drop(["context_id", "runtime_s", "scale_out"]).to_dict()
    ns = [4, 8, 12]
    mean, lo, hi = model.predict_band(ctx, ns, 0.9)
    mean_n, lo_n, hi_n = model.predict_band({**ctx, "job_type": "grep-noisy"}, ns, 0.9)
    assert np.all(np.log(hi_n / mean_n) > np.log(hi / mean))
    assert np.all(np.log(lo_n / mean_n) < np.log(lo / mean))
