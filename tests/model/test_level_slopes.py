"""The level correction: the network's untuned prediction for a context it did not train on is
pulled towards its training contexts' mean level; calibration measures by how much on its
out-of-fold contexts (``level_slopes``) and the model undoes it inside its training data."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from airflow_provider_bellamy.model import RuntimeModel, calibration, inference
from airflow_provider_bellamy.model.calibration import (
    LEVEL_SLOPE_PRIOR_CONTEXTS,
    MIN_JOB_CONTEXTS,
    BandTables,
    level_slopes,
    untuned_level,
)
from airflow_provider_bellamy.model.features import scale_out_basis

GRID = np.array([2, 3, 4, 6, 8, 12], dtype=float)
PULL = 0.6  # the heads' spread of levels over the true one: regression to the mean


def _shrunk_runs(contexts: int = 16, seed: int = 0) -> dict[str, np.ndarray]:
    """Contexts of one job type whose true level spreads over 2 (log), runs at ``GRID`` twice with
    3 % noise; each member's heads (the same for both) predict the curve's shape right and its
    level pulled towards the mean by ``PULL``."""
    gen = np.random.default_rng(seed)
    true = np.linspace(-1.0, 1.0, contexts) + 3.0

    # serial + parallel work: e^a (1 + 4 / n); the other basis terms off
    def heads(a: np.ndarray) -> np.ndarray:
        off = np.full((len(a), 4), -30.0)
        return np.column_stack([a, a + np.log(4.0), off])

    ns = np.tile(np.repeat(GRID, 2), contexts)
    ctx_index = np.repeat(np.arange(contexts), 2 * len(GRID))
    h_true = heads(true)
    basis = scale_out_basis(ns)
    log_y = np.array(
        [inference.log_runtime(h_true[c], basis[i]) for i, c in enumerate(ctx_index)]
    ) + gen.normal(0.0, 0.03, len(ns))
    h_pulled = heads(true.mean() + PULL * (true - true.mean()))
    return {
        "h_members": np.stack([h_pulled, h_pulled]),
        "ctx_index": ctx_index,
        "basis": basis,
        "log_y": log_y,
        "scale_out": ns,
    }


def _calibrate(runs: dict[str, np.ndarray], level_correction: bool) -> calibration.Calibration:
    contexts = runs["h_members"].shape[1]
    return calibration.calibrate(
        runs["h_members"],
        [np.arange(0, contexts, 2), np.arange(1, contexts, 2)],
        runs["ctx_index"],
        runs["basis"],
        runs["log_y"],
        runs["scale_out"],
        0.05,
        np.random.default_rng(0),
        noise_sd=0.03,
        jobs=["sort"] * contexts,
        level_correction=level_correction,
    )


def test_calibration_measures_the_pull_and_its_tables_the_corrected_predictions() -> None:
    """Heads pulled to the mean by 0.6: the slowest contexts' residual is +0.4 (log), the fastest
    −0.4. Calibration finds the slope (1 / 0.6 − 1 = 0.67, shrunk by 16 contexts to 0.51) and
    its k = 0 tables measure the corrected predictions: their error falls by about half, the
    upper tail the slowest contexts made with it."""
    runs = _shrunk_runs()
    plain = _calibrate(runs, level_correction=False)
    corrected = _calibrate(runs, level_correction=True)
    assert plain.tables is not None and corrected.tables is not None
    assert plain.tables.level_slopes == {} and plain.tables.level_scale_outs == ()
    slope, centre = corrected.tables.level_slopes["sort"]
    shrink = 16 / (16 + LEVEL_SLOPE_PRIOR_CONTEXTS)
    assert slope == pytest.approx((1 / PULL - 1) * shrink, abs=0.05)
    assert corrected.tables.level_scale_outs == tuple(GRID)
    levels = untuned_level(runs["h_members"][0], runs["basis"][: 2 * len(GRID) : 2])
    assert centre == pytest.approx(float(levels.mean()))
    assert corrected.tables.validation_mre[0] < 0.65 * plain.tables.validation_mre[0]
    # (the untuned table's 95th percentile: index 190 of QUANTILE_GRID)
    assert corrected.tables.per_k[0].quantiles["far"][190] < plain.tables.per_k[0].quantiles["far"][190]


def test_slopes_need_contexts_and_are_clipped() -> None:
    level = np.linspace(-1.0, 1.0, 12)
    few = ["a"] * (MIN_JOB_CONTEXTS - 1) + ["b"] * (12 - MIN_JOB_CONTEXTS + 1)
    out = level_slopes(level, 3.0 * level, few)
    assert "a" not in out and out["b"][0] == 1.0  # (a pull past any network's: clipped)
    # a slope below 0 is no shrinkage: no correction
    assert level_slopes(level, -0.5 * level, ["a"] * 12)["a"][0] == 0.0


def test_an_old_model_file_has_no_slopes_and_a_bad_slope_is_named() -> None:
    tables = BandTables(
        per_k=(calibration.QuantileTables(),) * (calibration.MAX_K + 1),
        environments={},
        n=6,
        smallest_max_scale_out=3.0,
        validation_mre=(0.1,) * (calibration.MAX_K + 1),
    )
    data = tables.to_dict()
    del data["level_slopes"], data["level_scale_outs"]
    assert BandTables.from_dict(data, "tables") == tables
    stored = replace(tables, level_slopes={"sort": (0.3, 2.5)}, level_scale_outs=(2.0, 4.0))
    assert BandTables.from_dict(stored.to_dict(), "tables") == stored
    with pytest.raises(ValueError, match=r"tables\.level_slopes\.sort\.slope = 1\.5"):
        BandTables.from_dict({**stored.to_dict(), "level_slopes": {"sort": [1.5, 2.5]}}, "tables")
    with pytest.raises(ValueError, match=r"tables\.level_scale_outs = \[\]"):
        BandTables.from_dict({**stored.to_dict(), "level_scale_outs": []}, "tables")


def test_the_model_raises_a_context_inside_its_data_by_its_level_and_no_other(
    grep_model: RuntimeModel, held_out_properties: dict[str, object]
) -> None:
    """A context inside the training data moves by slope × (its level − centre) in log at every
    scale-out, tuned or not; one with a machine type the model never saw (outside: its tables
    were measured without the correction) and a model without slopes predict as before."""
    tables = grep_model.calibration.tables
    assert tables is not None
    scale_outs = (2.0, 4.0, 8.0)
    ctx = {k: v for k, v in held_out_properties.items() if pd.notna(v)}
    grid = scale_out_basis(np.asarray(scale_outs), float(grep_model.metadata["min_scale_out"]))
    heads = grep_model._base_h(grep_model._normalise(ctx))
    level = float(untuned_level(heads, grid).mean())
    moved = RuntimeModel(
        grep_model.params,
        grep_model.architecture,
        grep_model.schema,
        grep_model.metadata,
        replace(
            grep_model.calibration,
            tables=replace(tables, level_slopes={"grep": (0.5, level - 0.2)}, level_scale_outs=scale_outs),
        ),
    )
    ns = [2, 4, 6, 12]
    before, after = np.log(grep_model.predict(ctx, ns)), np.log(moved.predict(ctx, ns))
    assert after - before == pytest.approx(np.full(len(ns), 0.1), abs=1e-9)
    runs = pd.DataFrame([{**ctx, "scale_out": 4, "runtime_s": float(np.exp(before[1]))}])
    tuned_before = np.log(grep_model.finetune(runs).predict(ctx, ns))
    assert (np.log(moved.finetune(runs).predict(ctx, ns)) - tuned_before > 0.0).all()
    outside = {**ctx, "machine_type": "never-seen.4xlarge"}
    assert moved.predict(outside, ns) == pytest.approx(grep_model.predict(outside, ns), rel=1e-12)
