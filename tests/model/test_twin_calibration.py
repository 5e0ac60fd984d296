"""The band's tables measure the prediction a context with a known twin gets: calibration fine-tunes
each out-of-fold context with its twin's curve (``calibrate``'s ``twins``) and mixes it into the
test residuals as ``RuntimeModel.finetune`` and ``_model_log_curves`` do."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import pytest

from airflow_provider_bellamy.model import RuntimeModel, calibration, held_out, runtime_model
from airflow_provider_bellamy.model.calibration import Calibration, calibrate
from airflow_provider_bellamy.model.features import scale_out_basis
from airflow_provider_bellamy.model.finetuning import (
    OTHER_ENVIRONMENT_PARAMETRIC_PRIOR,
    mix_twin,
    run_level,
)

from .conftest import FAST
from .test_known_twin import _runs

SCALE_OUTS = (1, 2, 3, 4, 6, 8, 12, 16)
CONTEXTS = 10
FOLDS = 5
NOISE = 0.02


def _stepped(n: np.ndarray) -> np.ndarray:
    """A memory-spill step (×1.8 up to 3 nodes) on a smooth curve: no positive mix of the basis
    draws it."""
    return np.log(20.0 + 400.0 / n) + np.where(n <= 3, math.log(1.8), 0.0)


Twin = tuple[np.ndarray, np.ndarray, float]


def _job(seed: int) -> tuple[tuple[Any, ...], list[Twin]]:
    """Ten contexts of one job at their own levels, every one with the step, two runs at each
    scale-out; each member's heads draw the smooth curve at the context's level (the network that
    cannot draw the step). ``calibrate``'s positional arguments up to the runs, and each context's
    twin: the others' mean curve (the step is theirs too)."""
    rng = np.random.default_rng(seed)
    levels = rng.uniform(-0.5, 0.5, CONTEXTS)
    ns = np.repeat(np.tile(np.array(SCALE_OUTS, dtype=float), CONTEXTS), 2)
    ctx_index = np.repeat(np.arange(CONTEXTS), 2 * len(SCALE_OUTS))
    log_y = _stepped(ns) + levels[ctx_index] + rng.normal(0.0, NOISE, len(ns))
    # the smooth part's own mix (20 + 400/n: the constant and 1/n terms), a little of the others
    smooth = np.log(np.array([20.0, 400.0, 1e-3, 1e-3, 1e-3, 1e-3]))
    heads = smooth[None, :] + levels[:, None] + math.log(1.25)
    h_members = np.repeat(heads[None], FOLDS, axis=0)
    folds = [np.arange(m, CONTEXTS, FOLDS) for m in range(FOLDS)]
    grid = np.array(SCALE_OUTS, dtype=float)
    twins = [
        (np.log(grid), _stepped(grid) + float(np.delete(levels, c).mean()), 0.5) for c in range(CONTEXTS)
    ]
    runs = (h_members, folds, ctx_index, scale_out_basis(ns), log_y, ns.astype(np.int64))
    return runs, twins


def _calibrate(runs: tuple[Any, ...], twins: Sequence[Twin | None] | None) -> Calibration:
    return calibrate(*runs, 0.1, np.random.default_rng(0), noise_sd=NOISE, twins=twins)


def test_the_tables_of_a_context_with_twins_measure_the_mix() -> None:
    """Its twins' step is what the smooth network misses: with them simulated, the out-of-fold
    error from runs at three scale-outs on is far smaller. Below two runs neither the twin (weighed
    from ``MIN_SCALE_OUTS_TO_COMPARE`` scale-outs) nor the residual correction (whose choice now
    scores the mix, and may differ) acts: the same residuals, bit for bit."""
    runs, twins = _job(0)
    before, after = (_calibrate(runs, t).tables for t in (None, twins))
    assert before is not None and after is not None
    before, after = before.validation_mre, after.validation_mre
    assert after[:2] == before[:2]
    for k in (3, 4, 5):
        assert after[k] < 0.5 * before[k], (k, before, after)


def test_without_a_twin_the_tables_are_as_before() -> None:
    runs, _ = _job(1)
    assert _calibrate(runs, [None] * CONTEXTS).to_dict() == _calibrate(runs, None).to_dict()


def test_the_twins_level_and_mix_are_one_rule() -> None:
    """The level is the runs' mean distance above the twin's curve at the runs the fit used (a
    straggler's weight 0 leaves it out); the mix is linear in log space."""
    curve = np.array([[1.0, 2.0, 3.0, np.nan]])
    log_y = np.array([[1.5, 2.5, 9.0, 0.0]])
    used = np.array([[True, True, False, False]])
    np.testing.assert_allclose(run_level(curve, log_y, used), [0.5])
    np.testing.assert_allclose(mix_twin(np.array([1.0, 3.0]), np.array([2.0, 2.0]), 0.25), [1.25, 2.75])
    assert OTHER_ENVIRONMENT_PARAMETRIC_PRIOR == 0.5


def test_pretraining_gives_calibration_the_twins_fine_tuning_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each training context's twin among the others (the other cluster's context of its size),
    as the pre-trained model finds it for that context when fine-tuning."""
    given: dict[str, Any] = {}

    def calibrate_members(*args: Any, **kwargs: Any) -> Calibration:
        given["twins"] = kwargs.get("twins")
        return held_out.calibrate_members(*args, **kwargs)

    monkeypatch.setattr(runtime_model, "calibrate_members", calibrate_members)
    train = pd.concat([_runs("k8s", 1.0, 0), _runs("yarn", 1.3, 1)])
    model = RuntimeModel.pretrain(train, seed=0, config=FAST)
    twins = given["twins"]
    contexts = [c["context"] for c in model.metadata["curves"]["contexts"]]
    assert twins is not None and len(twins) == len(contexts) == 6
    for ctx, twin in zip(contexts, twins, strict=True):
        found = model._known_twin(model._normalise(ctx), np.array([1.0]))
        assert twin is not None and found is not None
        np.testing.assert_array_equal(twin[0], found[0])
        np.testing.assert_array_equal(twin[1], found[1])
        assert twin[2] == found[3]


def test_a_twin_weighted_residual_is_the_run_above_the_mixed_prediction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tables' residual of a context whose fit weighs its twin is what the run lies above the
    prediction, the tuned curve and the twin's mixed as ``_model_log_curves`` mixes them: every
    context runs 0.15 slower at 16 nodes than its twins' curve shows (the network misses the step
    worse still), so where 16 nodes is a test run and the twin carries the fit, the run lies
    above the mix. (Mixing the residual runs − tuned curve with the twin's prediction − runs, as
    session 31 did, cancelled the run's own noise and put these runs below it.)"""
    runs, twins = _job(2)
    h_members, folds, ctx_index, basis, log_y, ns = runs
    log_y = log_y + np.where(ns == 16, 0.15, 0.0)
    given: list[Any] = []
    original = calibration.check_normalised_tables

    def keeping(per_k: Any, *args: Any, **kwargs: Any) -> Any:
        given.append(per_k)
        return original(per_k, *args, **kwargs)

    monkeypatch.setattr(calibration, "check_normalised_tables", keeping)
    _calibrate((h_members, folds, ctx_index, basis, log_y, ns), twins)
    for k in (3, 4, 5):
        residuals, at, _, _ = given[0][k]
        at_16 = residuals[at == 16]
        assert len(at_16) > 0
        assert np.median(at_16) > 0.05, (k, np.median(at_16))
