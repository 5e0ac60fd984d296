"""A context the model knows, whose twins (training contexts of its job with the same input per
node's memory and per core) measured a curve the head's basis cannot draw (a memory-spill step):
their curve is weighed against the tuned one by leave-one-scale-out, as the parametric curve is."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from airflow_provider_bellamy.model import RuntimeModel
from airflow_provider_bellamy.model.features import scale_out_basis
from airflow_provider_bellamy.model.finetuning import (
    OTHER_ENVIRONMENT_PARAMETRIC_PRIOR,
    PARAMETRIC_PRIOR,
    basis_misfit,
    fit_context,
    pseudo_bma_weight,
    twin_curve,
    twin_prior,
)

from .conftest import FAST

SCALE_OUTS = (1, 2, 4, 8, 16, 32)
MEMORY = 32768.0
SIZES = (2000.0, 9000.0, 40000.0)
SPILL = 1.8


def _runtime(n: int, size: float, spill: bool = True) -> float:
    """s21's rule: ×1.8 once the input per worker exceeds 60 % of a node's memory."""
    base = 15.0 + 9.0 * size / 1000 / (n * 8) * 1.4 + 0.15 * n * size / 10000
    return base * (SPILL if spill and size / n > 0.6 * MEMORY else 1.0)


def _runs(environment: str, level: float, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = [
        {
            "job_type": "join",
            "framework": "flink",
            "scale_out": n,
            "runtime_s": level * _runtime(n, size) * math.exp(rng.normal(0, 0.03)),
            "machine_type": "n2-standard-8",
            "cores": 8.0,
            "memory_mb": MEMORY,
            "environment": environment,
            "data_size_mb": size,
        }
        for size in SIZES
        for n in SCALE_OUTS
        for _ in range(2)
    ]
    return pd.DataFrame(rows)


def test_the_weight_is_the_pseudo_bma_of_the_two_errors() -> None:
    """Equal errors leave the prior; a difference of 2σ² · log 9 in squared error makes even
    odds 9 : 1; the kept curve wins the same way."""
    sigma = 0.2
    edge = 2 * sigma**2 * math.log(9.0)
    got = pseudo_bma_weight(np.array([0.1, 0.1 + edge, 0.1]), np.array([0.1, 0.1, 0.1 + edge]), sigma, 0.5)
    np.testing.assert_allclose(got, [0.5, 0.9, 0.1])
    np.testing.assert_allclose(pseudo_bma_weight(np.array([0.3]), np.array([0.3]), sigma, 0.02), [0.02])


def test_only_a_curve_the_basis_cannot_draw_starts_even() -> None:
    ns = np.array(SCALE_OUTS, dtype=float)
    basis = scale_out_basis(ns)
    smooth = np.log(basis @ np.array([10.0, 50.0, 0.0, 0.0, 0.0, 0.3]))
    stepped = np.log([_runtime(int(n), 40000.0) for n in ns])
    assert basis_misfit(basis, smooth) < 1e-6
    # a ×1.8 step between 2 and 4 nodes: no positive mix bends to it
    assert basis_misfit(basis, stepped) > 0.05
    assert twin_prior(basis_misfit(basis, smooth), 0.03) == PARAMETRIC_PRIOR
    assert twin_prior(basis_misfit(basis, stepped), 0.03) == OTHER_ENVIRONMENT_PARAMETRIC_PRIOR


def test_a_twin_has_the_same_ratios_and_none_means_none() -> None:
    grid = [1.0, 2.0, 4.0]
    curves = [
        {"context": {"job_type": "j", "env": "a", "r": 2.0}, "log_runtime": [3.0, 2.5, 2.0]},
        {"context": {"job_type": "j", "env": "b", "r": 4.0}, "log_runtime": [5.0, 4.0, 3.0]},
        {"context": {"job_type": "other", "env": "c", "r": 2.0}, "log_runtime": [9.0, 9.0, 9.0]},
    ]
    found = twin_curve({"job_type": "j", "env": "c", "r": 2.0}, curves, grid, ["env"], ["r"])
    assert found is not None
    np.testing.assert_allclose(found[1], [3.0, 2.5, 2.0])
    assert twin_curve({"job_type": "j", "env": "c", "r": 3.0}, curves, grid, ["env"], ["r"]) is None
    # no ratio to agree in: no twin (every context would be one)
    assert twin_curve({"job_type": "j", "env": "c"}, curves, grid, ["env"], []) is None
    # a context is not its own twin (a store's context is trained on, then fine-tuned on its runs)
    itself = {"context": {"job_type": "j", "env": "c", "r": 2.0}, "log_runtime": [7.0, 7.0, 7.0]}
    found = twin_curve({"job_type": "j", "env": "c", "r": 2.0}, [*curves, itself], grid, ["env"], ["r"])
    assert found is not None
    np.testing.assert_allclose(found[1], [3.0, 2.5, 2.0])
    assert twin_curve({"job_type": "j", "env": "a", "r": 2.0}, curves, grid, ["env"], ["r"]) is None


def _fit(truth: np.ndarray, twin: np.ndarray | None, ran: list[int], prior: float) -> float:
    ns = np.array(ran)
    at = [SCALE_OUTS.index(n) for n in ran]
    basis = scale_out_basis(ns.astype(float))
    # the network's curve: a smooth positive mix at the truth's level
    h0 = np.log(np.array([12.0, 40.0, 1e-6, 1e-6, 1e-6, 0.2]))[None, None, :]
    fit = fit_context(
        h0,
        basis[None],
        ns[None],
        truth[at][None],
        np.ones((1, len(ns))),
        noise_sd=0.1,
        learned_cov=np.eye(6) * 0.01,
        twin=None if twin is None else twin[at][None],
        twin_prior=prior,
    )
    assert fit.twin_weight is not None
    return float(fit.twin_weight[0])


def test_fine_tuning_weighs_a_twin_by_what_it_predicts_left_out() -> None:
    """Runs at 1, 2, 4, 8 of a context that spills up to 2 nodes: its twin, 1.3× faster with the
    same step, predicts each left-out scale-out at the others' level; the smooth network cannot.
    A twin whose step the context does not have loses, and below three scale-outs nothing is
    compared."""
    stepped = np.log([_runtime(n, 40000.0) for n in SCALE_OUTS])
    smooth = np.log([_runtime(n, 40000.0, spill=False) for n in SCALE_OUTS])
    assert _fit(stepped, stepped - math.log(1.3), [1, 2, 4, 8], OTHER_ENVIRONMENT_PARAMETRIC_PRIOR) > 0.9
    assert _fit(smooth, stepped, [1, 2, 4, 8], OTHER_ENVIRONMENT_PARAMETRIC_PRIOR) < 0.5
    assert _fit(stepped, stepped, [2, 4], OTHER_ENVIRONMENT_PARAMETRIC_PRIOR) == 0.0
    assert _fit(stepped, None, [1, 2, 4, 8], OTHER_ENVIRONMENT_PARAMETRIC_PRIOR) == 0.0


@pytest.fixture(scope="module")
def two_clusters() -> tuple[RuntimeModel, pd.DataFrame]:
    """Pre-trained on two clusters (the second 1.3× slower), the context at 40 GB on the second
    held out: the first cluster's 40 GB context is its twin."""
    train = pd.concat([_runs("k8s", 1.0, 0), _runs("yarn", 1.3, 1)])
    held = (train["environment"] == "yarn") & (train["data_size_mb"] == 40000.0)
    return RuntimeModel.pretrain(train[~held], seed=0, config=FAST), train[held]


def test_a_known_context_follows_its_twins_step(two_clusters: tuple[RuntimeModel, pd.DataFrame]) -> None:
    model, held = two_clusters
    runs = held.drop_duplicates("scale_out")
    ctx = runs.drop(columns=["runtime_s", "scale_out"]).iloc[0].to_dict()
    assert not model.schema.unknown_properties(model._normalise(ctx))
    points = runs[runs["scale_out"].isin([1, 4, 8, 16])]
    tuned = model.finetune(points)
    assert tuned.tuned is not None and tuned.tuned.twin is not None and tuned.tuned.twin.weight > 0.5
    truth = 1.3 * _runtime(2, 40000.0)
    # the left-out scale-out that spills: nearer the truth than the tuned curve alone
    without = tuned._copy(replace(tuned.tuned, twin=None))
    assert abs(math.log(tuned.predict(ctx, [2])[0] / truth)) < abs(
        math.log(without.predict(ctx, [2])[0] / truth)
    )
    # it travels with the file
    again = RuntimeModel.from_bytes(tuned.to_bytes())
    np.testing.assert_array_equal(again.predict(ctx, list(SCALE_OUTS)), tuned.predict(ctx, list(SCALE_OUTS)))


@pytest.mark.parametrize(
    ("size", "ran"),
    [(20000.0, [1, 4, 8, 16]), (40000.0, [4, 16])],
    ids=["no twin: no training context puts 20 GB on a node", "a twin, runs at two scale-outs"],
)
def test_a_context_the_twin_does_not_weigh_in_keeps_its_prediction_bit_for_bit(
    two_clusters: tuple[RuntimeModel, pd.DataFrame],
    monkeypatch: pytest.MonkeyPatch,
    size: float,
    ran: list[int],
) -> None:
    """Fine-tuning, its checks and its band are those of the model that never looks for twins."""
    model, held = two_clusters
    points = held.drop_duplicates("scale_out").assign(data_size_mb=size)
    points = points[points["scale_out"].isin(ran)]
    ctx = points.drop(columns=["runtime_s", "scale_out"]).iloc[0].to_dict()
    found = model._known_twin(model._normalise(ctx), points["scale_out"].to_numpy())
    assert (found is None) == (size == 20000.0)
    tuned = model.finetune(points)
    monkeypatch.setattr(RuntimeModel, "_known_twin", lambda self, ctx, ns: None)
    plain = model.finetune(points)
    assert tuned.tuned is not None and plain.tuned is not None and tuned.tuned.twin is None
    assert (tuned.check_rms, tuned.tuned.parametric_weight) == (
        plain.check_rms,
        plain.tuned.parametric_weight,
    )
    np.testing.assert_array_equal(tuned.predict(ctx, list(SCALE_OUTS)), plain.predict(ctx, list(SCALE_OUTS)))
    band, plain_band = tuned.band(ctx, list(SCALE_OUTS)), plain.band(ctx, list(SCALE_OUTS))
    np.testing.assert_array_equal(band.lower, plain_band.lower)
    np.testing.assert_array_equal(band.upper, plain_band.upper)


def test_a_context_from_elsewhere_takes_no_known_twin(
    two_clusters: tuple[RuntimeModel, pd.DataFrame],
) -> None:
    """A context with a value the model never saw (a new cluster, machine type or job: the
    protocols on contexts unlike the training data) has the older unknown-value path
    (``_twin_log``, ``_nearest_for``); the known-context twin leaves it bit for bit."""
    model, held = two_clusters
    points = held.drop_duplicates("scale_out").assign(environment="on-premises")
    points = points[points["scale_out"].isin([1, 4, 8, 16])]
    ctx = points.drop(columns=["runtime_s", "scale_out"]).iloc[0].to_dict()
    assert model.schema.unknown_properties(model._normalise(ctx))
    assert model._known_twin(model._normalise(ctx), points["scale_out"].to_numpy()) is None
    tuned = model.finetune(points)
    assert tuned.tuned is not None and tuned.tuned.twin is None
