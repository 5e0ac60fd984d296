from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

import airflow_provider_bellamy.model.held_out as held_out
import airflow_provider_bellamy.model.runtime_model as runtime_model
from airflow_provider_bellamy.model import RuntimeModel, inference
from airflow_provider_bellamy.model.features import FeatureSchema
from airflow_provider_bellamy.model.training import (
    EncodedRuns,
    context_folds,
    encode_runs,
    split_fold,
    train_ensemble,
)

from .conftest import FAST


def _encoded(runs: pd.DataFrame) -> EncodedRuns:
    frame = runtime_model._training_frame(runs.drop(columns=["context_id"]), "runs")
    contexts = runtime_model._frame_contexts(frame)
    keys = [runtime_model._context_key(c) for c in contexts]
    schema = FeatureSchema.from_contexts(list(frame["job_type"]), contexts)
    schema.unknown_as_absent = FAST.property_dropout > 0
    return encode_runs(
        schema,
        contexts,
        keys,
        frame["scale_out"].to_numpy(),
        frame["runtime_s"].to_numpy(),
        torch.device("cpu"),
    )


def test_split_fold_halves_a_fold_and_leaves_a_single_context_whole() -> None:
    first, second = split_fold(np.array([3, 5, 8, 9, 12]), seed=1)
    assert sorted([*first, *second]) == [3, 5, 8, 9, 12]
    assert (len(first), len(second)) == (2, 3)
    assert split_fold(np.array([3, 5, 8, 9, 12]), seed=1)[0].tolist() == first.tolist()
    single = split_fold(np.array([4]), seed=1)
    assert single[0].tolist() == [4] and len(single[1]) == 0


def test_cross_fitted_heads_come_from_other_epochs_and_leave_the_kept_parameters_alone(
    grep_runs: pd.DataFrame,
) -> None:
    data = _encoded(grep_runs)
    n_ctx = data.vectors.shape[0]
    folds = context_folds(n_ctx, 2, np.random.default_rng(0))
    # member 1 holds out one context: a fold that cannot be split
    folds[1] = folds[1][:1]
    plain, _ = train_ensemble(data, folds, seed=0, config=FAST, deadline=None)
    sink: list[np.ndarray] = []
    net, stats = train_ensemble(data, folds, seed=0, config=FAST, deadline=None, cross_fitted=sink)
    # the deployed parameters (and so every prediction) stay bit for bit
    for (name, a), b in zip(plain.state_dict().items(), net.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    (heads,) = sink
    params = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    kept = inference.log_weights(params, data.vectors.numpy(), data.mask.numpy())
    assert heads.shape == kept.shape
    # only the split fold's contexts get heads of their own; elsewhere the kept ones stand (NaN)
    split = np.zeros((2, n_ctx), dtype=bool)
    split[0, folds[0]] = True
    assert np.array_equal(~np.isnan(heads).any(axis=-1), split)
    # chosen on the other half, not on the context itself: not the kept epoch's heads everywhere
    assert stats[0]["best_epoch"] > 0
    gap = np.abs(heads[0, folds[0]] - kept[0, folds[0]]).max(axis=-1)
    assert (gap > 1e-3).any()


def test_the_tables_read_the_cross_fitted_heads_and_the_settings_the_kept_ones(
    grep_runs: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
    real = held_out.calibrate

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(copy.deepcopy((args, kwargs)))
        return real(*args, **kwargs)

    monkeypatch.setattr(held_out, "calibrate", spy)
    train = grep_runs.drop(columns=["context_id"])
    model = RuntimeModel.pretrain(train, seed=0, config=FAST, extrapolation=False)
    data = _encoded(grep_runs)
    kept = inference.log_weights(model.params, data.vectors.numpy(), data.mask.numpy())
    args, kwargs = calls[0]
    # the settings' heads are the deployed ones; the tables' differ on the members' folds
    assert np.array_equal(args[0], kept)
    tables_heads = kwargs["h_tables"]
    assert tables_heads.shape == kept.shape and np.abs(tables_heads - kept).max() > 1e-3
    assert model.calibration.tables is not None
    assert model.calibration.to_dict() == real(*copy.deepcopy(args), **copy.deepcopy(kwargs)).to_dict()
    # the same draws: with the kept heads for the tables too, calibration is what it was before
    before = real(*copy.deepcopy(args), **{**copy.deepcopy(kwargs), "h_tables": None})
    same = real(*copy.deepcopy(args), **{**copy.deepcopy(kwargs), "h_tables": kept})
    assert same.to_dict() == before.to_dict()
    # the cross-fitted heads move the tables only, not fine-tuning's settings
    assert model.calibration.fine_tuning == before.fine_tuning
    assert model.calibration.tables != before.tables
