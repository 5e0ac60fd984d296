"""Level tiers of the band's tables (session 26; gated, session 27): a network pulls its prediction
for a context it was not trained on towards its training contexts' mean, so the contexts it predicts
slowest run slower still; one pooled table is too narrow above them. The tables keep each tier of the
out-of-fold contexts' untuned predicted levels apart, and a context inside the training data reads
its tier's on a side where the tier's contexts missed the pool's bound measurably more often, never
narrower than the pool's."""

from __future__ import annotations

import numpy as np

from airflow_provider_bellamy.model.calibration import (
    MAX_K,
    BandTables,
    Calibration,
    FineTuning,
    check_normalised_tables,
    level_tiers,
    residual_quantiles,
    untuned_level,
)

SMALL_MAX = 1.0
RUNS = 12


def _draws(contexts: int, seed: int):  # type: ignore[no-untyped-def]
    """Per k, residuals of contexts whose untuned levels spread evenly; the slowest third's curves
    miss their runs by a shift drawn per context (0 to 0.6 slow), the others by noise (sd 0.03):
    regression to the mean, with its misses on the slow side. No checks."""
    rng = np.random.default_rng(seed)
    levels = np.linspace(0.0, 3.0, contexts)
    slow = levels > 2.0
    per_k, checks = [], []
    for _ in range(MAX_K + 1):
        shift = np.where(slow, rng.uniform(0.0, 0.6, contexts), 0.0)
        owner = np.repeat(np.arange(contexts), RUNS)
        r = shift[owner] + rng.normal(0.0, 0.03, len(owner))
        at = np.tile(np.arange(2, 2 + RUNS, dtype=float), contexts)
        per_k.append((r, at, owner, np.full(len(r), np.inf)))
        checks.append((np.zeros(len(r)), np.zeros(len(r), dtype=np.int64)))
    return per_k, checks, levels


def _tables(contexts: int, seed: int, tiers: bool) -> BandTables:
    per_k, checks, levels = _draws(contexts, seed)
    grid = np.array([2.0, 4.0])
    return check_normalised_tables(
        per_k,
        checks,
        [None] * contexts,
        None,
        SMALL_MAX,
        contexts,
        0.05,
        levels=(levels, grid) if tiers else None,
    )


def test_the_slowest_tier_reads_its_own_misses_on_its_side_only() -> None:
    """With tiers, a context predicted among the slowest gets an upper bound that holds its tier's
    slow misses, which the pooled table (a third of its runs up to 0.6 slow) puts under. A side
    whose tier the pool holds reads the pooled bound (a tier of a third of the contexts is a
    thinner table), and a side that reads its tier is never narrower than the pool's.
    Without a tier (outside the training data, or an old model file) the pooled table answers."""
    tables = _tables(60, 0, tiers=True)
    assert len(tables.level_tables) == 3 and len(tables.level_edges) == 2
    calibration = Calibration(0.05, FineTuning(0.1), tables)
    at = np.array([4.0])
    pooled = residual_quantiles(calibration, 1, 0.9, at)
    slow = residual_quantiles(calibration, 1, 0.9, at, tier=tables.tier(2.9))
    fast = residual_quantiles(calibration, 1, 0.9, at, tier=tables.tier(0.1))
    assert tables.tier(2.9) == "2" and tables.tier(0.1) == "0"
    assert slow[1][0] > pooled[1][0] + 0.05, (slow, pooled)
    # the slowest tier misses the pool's upper bound, not its lower one; the other two, whose
    # runs are noise about the prediction, miss the pool's lower bound (set by a mixture with the
    # slow tier's shifted runs) a little more often, and never its upper one
    assert all(pair == (False, True) for pair in tables.level_sides["2"])
    assert not any(pair[1] for tier in ("0", "1") for pair in tables.level_sides[tier])
    np.testing.assert_array_equal(slow[0], pooled[0])
    np.testing.assert_array_equal(fast[1], pooled[1])
    assert tables.level_sides["0"][1] == (True, False) and fast[0][0] <= pooled[0][0]
    # new contexts like the slowest third: the pooled band holds far less than 90 % of their
    # runs above, their tier's about 90 %
    per_k, _, levels = _draws(3000, 1)
    r, _, owner, _ = per_k[1]
    mine = levels[owner] > 2.0
    assert np.mean(r[mine] <= pooled[1][0]) < 0.8
    assert np.mean(r[mine] <= slow[1][0]) >= 0.85
    plain = Calibration(0.05, FineTuning(0.1), _tables(60, 0, tiers=False))
    assert plain.tables is not None and not plain.tables.level_tables
    for got, want in zip(
        residual_quantiles(calibration, 1, 0.9, at), residual_quantiles(plain, 1, 0.9, at), strict=True
    ):
        np.testing.assert_array_equal(got, want)


def test_too_few_contexts_make_no_tiers() -> None:
    """Tiers of fewer than MIN_JOB_CONTEXTS contexts say nothing of their own: two tiers from 10
    contexts, none from 9."""
    assert len(_tables(10, 0, tiers=True).level_tables) == 2
    assert not _tables(9, 0, tiers=True).level_tables
    per_k, checks, levels = _draws(9, 0)
    plain = check_normalised_tables(per_k, checks, [None] * 9, None, SMALL_MAX, 9, 0.05)
    assert (
        level_tiers(plain, per_k, [np.ones(len(r)) for r, *_ in per_k], levels, np.ones(1), SMALL_MAX, 9)
        == plain
    )


def test_tiers_survive_the_model_file() -> None:
    tables = _tables(30, 0, tiers=True)
    again = BandTables.from_dict(tables.to_dict(), "tables")
    assert again == tables
    old = tables.to_dict()
    for key in ("level_tables", "level_sides", "level_edges", "level_scale_outs"):
        del old[key]
    assert not BandTables.from_dict(old, "tables").level_tables


def test_untuned_level_is_the_mean_log_seconds_over_the_scale_outs() -> None:
    """The level the tiers split at: per context, its curve's mean log seconds over the grid (the
    heads' mean over members first where they come with one)."""
    from airflow_provider_bellamy.model.features import scale_out_basis
    from airflow_provider_bellamy.model.inference import log_runtime

    rng = np.random.default_rng(0)
    grid = np.array([2.0, 4.0, 8.0])
    heads = rng.normal(0.0, 1.0, (3, scale_out_basis(grid).shape[1]))
    expected = log_runtime(heads[:, None, :], scale_out_basis(grid)).mean(axis=1)
    np.testing.assert_allclose(untuned_level(heads, grid), expected)
    members = np.stack([heads, heads + 0.0])
    np.testing.assert_allclose(untuned_level(members, grid), expected)
