"""Robust fine-tuning: a run a straggler slowed must not drag the tuned curve (``straggler_weights``)."""

from __future__ import annotations

import numpy as np
import pytest

from airflow_provider_bellamy.model import calibration, finetuning
from airflow_provider_bellamy.model.features import scale_out_basis
from airflow_provider_bellamy.model.finetuning import ContextFit, fit_context, straggler_weights
from airflow_provider_bellamy.model.inference import log_runtime

NOISE_SD = 0.1
# the network's curve for the context: 20 s + 200 s / n (a CPU-bound job), two members
H0 = np.log(np.array([[20.0, 200.0, 1e-9, 1e-9, 1e-9, 1e-9], [21.0, 190.0, 1e-9, 1e-9, 1e-9, 1e-9]]))
COV = np.eye(6) * 0.1**2 + 0.05**2
GRID = np.array([2, 3, 4, 6, 8, 12, 16, 24])


def _truth(ns: np.ndarray) -> np.ndarray:
    # the context runs 1.2× slower than the network says: a level the runs must set
    return np.log(1.2 * (20.0 + 200.0 / ns))


def _fit(ns: np.ndarray, log_y: np.ndarray) -> ContextFit:
    return fit_context(
        H0[None],
        scale_out_basis(ns)[None],
        ns[None].astype(float),
        log_y[None],
        np.ones((1, len(ns))),
        noise_sd=NOISE_SD,
        learned_cov=COV,
    )


def _curve(fit: ContextFit) -> np.ndarray:
    """The tuned network's log runtime on ``GRID`` (members' mean)."""
    return log_runtime((H0 + fit.delta[0])[:, None, :], scale_out_basis(GRID)[None]).mean(axis=0)


@pytest.fixture
def untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fine-tuning as it was: every run weighs the same."""
    monkeypatch.setattr(finetuning, "straggler_weights", lambda h0, basis, ns, log_y, weight, **_: weight)


def _both(
    monkeypatch: pytest.MonkeyPatch, ns: np.ndarray, log_y: np.ndarray
) -> tuple[ContextFit, ContextFit]:
    robust = _fit(ns, log_y)
    with monkeypatch.context() as m:
        m.setattr(finetuning, "straggler_weights", lambda h0, basis, ns, log_y, weight, **_: weight)
        plain = _fit(ns, log_y)
    return robust, plain


@pytest.mark.parametrize("at", [4, 8, 16])
def test_a_straggler_among_several_runs_moves_the_curve_far_less(
    monkeypatch: pytest.MonkeyPatch, at: int
) -> None:
    ns = np.array([2, 4, 8, 16])
    clean = _truth(ns)
    slowed = clean + np.log(1.8) * (ns == at)
    reference = _curve(_fit(ns, clean))
    robust, plain = _both(monkeypatch, ns, slowed)
    moved_before = np.abs(_curve(plain) - reference).max()
    moved_now = np.abs(_curve(robust) - reference).max()
    assert moved_before > 0.05  # the straggler did drag the curve
    assert moved_now < 0.3 * moved_before
    assert robust.run_weight is not None
    assert robust.run_weight[0][ns == at][0] < 0.5
    assert np.all(robust.run_weight[0][ns != at] == 1.0)


def test_runs_that_agree_keep_their_fit_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    ns = np.array([2, 4, 8, 16])
    log_y = _truth(ns) + np.array([0.03, -0.02, 0.04, -0.01])
    robust, plain = _both(monkeypatch, ns, log_y)
    np.testing.assert_array_equal(robust.delta, plain.delta)
    np.testing.assert_array_equal(robust.theta, plain.theta)
    np.testing.assert_array_equal(robust.check_rms, plain.check_rms)


def test_a_spill_at_the_smallest_scale_out_keeps_its_level(monkeypatch: pytest.MonkeyPatch) -> None:
    """C3O's kmeans at 2 nodes: 5× slower than the rest of the curve says, a real memory spill."""
    ns = np.array([2, 4, 8, 16])
    log_y = _truth(ns) + np.log(5.0) * (ns == 2)
    robust, plain = _both(monkeypatch, ns, log_y)
    assert robust.run_weight is not None
    assert np.all(robust.run_weight == 1.0)
    np.testing.assert_array_equal(robust.delta, plain.delta)


@pytest.mark.parametrize("ns", [np.array([2, 4, 8, 16]), np.array([4, 6, 8, 16])])
def test_a_spill_reaching_up_from_the_smallest_scale_out_is_not_doubted(
    monkeypatch: pytest.MonkeyPatch, ns: np.ndarray
) -> None:
    """A machine type with less memory spills at the two smallest scale-outs it ran at (3× and 2×
    slower): the network, trained elsewhere, knows no cliff there, and the run above the smallest
    is part of the spill, not a straggler (without the guard it weighed 0.4)."""
    log_y = _truth(ns) + np.log(3.0) * (ns == ns[0]) + np.log(2.0) * (ns == ns[1])
    robust, plain = _both(monkeypatch, ns, log_y)
    assert robust.run_weight is not None
    assert np.all(robust.run_weight == 1.0)
    np.testing.assert_array_equal(robust.delta, plain.delta)


def test_one_run_still_sets_the_level(monkeypatch: pytest.MonkeyPatch) -> None:
    ns = np.array([8])
    log_y = _truth(ns) + np.log(3.0)  # a context 3× slower than the network says: a real level shift
    robust, plain = _both(monkeypatch, ns, log_y)
    np.testing.assert_array_equal(robust.delta, plain.delta)
    at_run = log_runtime((H0 + robust.delta[0])[:, None, :], scale_out_basis(ns)[None]).mean(axis=0)
    assert abs(at_run[0] - log_y[0]) < 0.15


def test_of_two_runs_the_slower_than_predicted_one_weighs_less() -> None:
    ns = np.array([4, 16])
    clean = _truth(ns)
    slowed = clean + np.log(1.8) * (ns == 16)
    weights = straggler_weights(
        H0[None],
        scale_out_basis(ns)[None],
        ns[None].astype(float),
        slowed[None],
        np.ones((1, 2)),
        noise_sd=NOISE_SD,
        learned_cov=COV,
    )[0]
    assert weights[1] < 0.5
    assert weights[0] == 1.0  # the faster one is never doubted: nothing makes a run faster


def test_runs_faster_than_predicted_are_never_doubted() -> None:
    ns = np.array([2, 4, 8, 16])
    fast = _truth(ns) - np.log(1.8) * (ns == 8)
    weights = straggler_weights(
        H0[None],
        scale_out_basis(ns)[None],
        ns[None].astype(float),
        fast[None],
        np.ones((1, 4)),
        noise_sd=NOISE_SD,
        learned_cov=COV,
    )
    # (a fast run may make its neighbour look slow: that one weighs a little less, never itself)
    assert weights[0][ns == 8][0] == 1.0
    assert np.all(weights >= 0.5)


def test_padding_stays_padding_in_a_batch() -> None:
    ns = np.array([[2, 4, 8, 16], [2, 4, 1, 1]], dtype=float)
    log_y = np.stack([_truth(ns[0]) + np.log(1.8) * (ns[0] == 8), np.zeros(4)])
    log_y[1, :2] = _truth(ns[1, :2])
    weight = np.array([[1.0, 1, 1, 1], [1, 1, 0, 0]])
    basis = scale_out_basis(ns)
    out = straggler_weights(np.stack([H0, H0]), basis, ns, log_y, weight, noise_sd=NOISE_SD, learned_cov=COV)
    assert out[0, 2] < 0.5
    np.testing.assert_array_equal(out[1], weight[1])


def test_a_context_with_an_unseen_value_is_judged_by_the_whole_width() -> None:
    """On a context like the training data a run 40 % above the others' curve is doubted even where
    the width is wide (it holds the network's misses across contexts); on one with a value the
    model never saw (a raised ``other_prior``) the network's shape is a guess: the width decides."""
    ns = np.array([2, 4, 8, 16])
    log_y = _truth(ns) + np.log(1.4) * (ns == 8)
    args = (H0[None], scale_out_basis(ns)[None], ns[None].astype(float), log_y[None], np.ones((1, 4)))
    known = straggler_weights(*args, noise_sd=0.25, learned_cov=COV)[0]
    unseen = straggler_weights(
        *args, noise_sd=0.25, learned_cov=COV, other_prior=finetuning.UNSEEN_VALUE_PRIOR
    )[0]
    assert known[2] < 0.8
    assert np.all(unseen == 1.0)


def _calibrate_with_stragglers() -> calibration.Calibration:
    """12 contexts (two members' folds) of the network's shape at their own levels, 3 % noise and
    a run in six 1.5-2× slower (none at the smallest scale-out)."""
    gen = np.random.default_rng(5)
    ns = np.repeat(GRID, 2)
    ctx_index, log_y, scale_out = [], [], []
    for c in range(12):
        y = np.log(gen.uniform(0.8, 1.3) * (20.0 + 200.0 / ns)) + gen.normal(0.0, 0.03, len(ns))
        slow = (gen.random(len(ns)) < 1 / 6) & (ns > GRID[0])
        log_y.append(y + slow * np.log(gen.uniform(1.5, 2.0, len(ns))))
        ctx_index.append(np.full(len(ns), c))
        scale_out.append(ns.astype(float))
    h_members = np.repeat(H0[:, None, :], 12, axis=1)
    return calibration.calibrate(
        h_members,
        [np.arange(6), np.arange(6, 12)],
        np.concatenate(ctx_index),
        scale_out_basis(np.concatenate(scale_out)),
        np.concatenate(log_y),
        np.concatenate(scale_out),
        NOISE_SD,
        np.random.default_rng(0),
        noise_sd=0.03,
    )


def test_calibration_chooses_the_settings_with_every_run_at_full_weight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The straggler weights change the fit the band's tables measure, not the fine-tuning settings
    calibration chooses: with them in the choice, a held-out C3O machine type's kmeans got a 4×
    stronger residual correction (the doubted runs' share of it made up by the amplitude), which
    its runs, all agreeing, then got in full."""
    robust = _calibrate_with_stragglers()
    with monkeypatch.context() as m:
        m.setattr(finetuning, "straggler_weights", lambda h0, basis, ns, log_y, weight, **_: weight)
        plain = _calibrate_with_stragglers()
    assert robust.fine_tuning == plain.fine_tuning  # the scores of every setting too
    assert robust.tables is not None and plain.tables is not None
    # the tables measure the weighted fit: some draw did doubt a picked run
    assert any(
        a.quantiles != b.quantiles for a, b in zip(robust.tables.per_k, plain.tables.per_k, strict=True)
    )


def test_fit_context_not_robust_keeps_every_weight(monkeypatch: pytest.MonkeyPatch) -> None:
    ns = np.array([2, 4, 8, 16])
    slowed = _truth(ns) + np.log(1.8) * (ns == 8)
    args = (H0[None], scale_out_basis(ns)[None], ns[None].astype(float), slowed[None], np.ones((1, 4)))
    off = fit_context(*args, noise_sd=NOISE_SD, learned_cov=COV, robust=False)
    _, plain = _both(monkeypatch, ns, slowed)
    np.testing.assert_array_equal(off.delta, plain.delta)
    assert off.run_weight is not None and np.all(off.run_weight == 1.0)


def test_two_runs_above_the_shape_are_a_shape_not_stragglers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bell's sgd at k = 5 (4, 12, 20, 52, 56 nodes): its curve is flatter between 4 and 20 nodes
    than the network's, and the runs at 12 and 20 each lie ~40 % above what the others predict.
    Stragglers are rare and independent; two runs over the limit are the context's own shape, which
    the fit must follow (doubting both took that context from 12 % to 19 % off)."""
    ns = np.array([2, 4, 8, 16, 24])
    log_y = _truth(ns) + np.log(1.4) * ((ns == 4) | (ns == 8))
    robust, plain = _both(monkeypatch, ns, log_y)
    assert robust.run_weight is not None
    assert np.all(robust.run_weight == 1.0)
    np.testing.assert_array_equal(robust.delta, plain.delta)
    # each of the two alone would be doubted
    for at in (4, 8):
        alone = straggler_weights(
            H0[None],
            scale_out_basis(ns)[None],
            ns[None].astype(float),
            (_truth(ns) + np.log(1.4) * (ns == at))[None],
            np.ones((1, len(ns))),
            noise_sd=NOISE_SD,
            learned_cov=COV,
        )[0]
        assert alone[ns == at][0] < 1.0
