"""Scale-outs smaller than any the model was trained at: the curve continues down from its edge."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from airflow_provider_bellamy.model import RuntimeModel
from airflow_provider_bellamy.model.edges import (
    MIN_EDGE_POINTS,
    continued_log_runtime,
    edge_growth,
    first_octave,
    last_octave,
    power_law_log_runtime,
)

from .conftest import FAST


def test_below_the_edge_amdahls_curve_continues_as_itself() -> None:
    """A curve that is a + b / n over the first octave continues down as itself."""
    a, b = 20.0, 240.0
    known = first_octave((6, 12))
    assert known[-1] == 6.0 and known[0] == 12.0  # the edge last
    ns = np.array([1.0, 2.0, 4.0])
    np.testing.assert_allclose(np.exp(continued_log_runtime(ns, known, np.log(a + b / known))), a + b / ns)


def test_below_the_edge_runtime_rises_at_most_as_one_over_n_and_never_falls() -> None:
    """Going down, a curve falling faster than 1 / n at the edge (a cliff's tail) continues as a
    perfect speed-up (t ∝ 1 / n), one rising with n there (overhead) continues flat: fewer nodes do
    the same work no faster."""
    ns = np.array([1.0, 2.0])
    steep = np.log([40.0, 100.0])  # 6 → 4 nodes: 2.5× slower for 1.5× fewer
    got = np.exp(continued_log_runtime(ns, np.array([6.0, 4.0]), steep))
    np.testing.assert_allclose(got, 100.0 * 4 / ns)
    rising = np.log([60.0, 50.0])  # 6 → 4 nodes: faster with fewer
    got = np.exp(continued_log_runtime(ns, np.array([6.0, 4.0]), rising))
    np.testing.assert_allclose(got, [50.0, 50.0])
    # beyond the edge such a curve still rises towards a (as before)
    beyond = np.exp(continued_log_runtime(np.array([12.0]), np.array([4.0, 6.0]), np.log([50.0, 60.0])))
    assert beyond[0] > 60.0


def test_the_power_law_below_the_edge_keeps_the_octaves_rate() -> None:
    known = first_octave((4, 60))
    got = power_law_log_runtime(np.array([1.0, 2.0]), known, np.log(1000.0 * known**-0.8))
    np.testing.assert_allclose(np.exp(got), 1000.0 * np.array([1.0, 2.0]) ** -0.8)


def test_the_octaves_stay_inside_the_known_range() -> None:
    np.testing.assert_allclose(first_octave((6, 8))[[0, -1]], [8.0, 6.0])
    np.testing.assert_allclose(last_octave((6, 8))[[0, -1]], [6.0, 8.0])


@pytest.fixture(scope="module")
def grep_from_six(grep_runs: pd.DataFrame, held_out_context: str) -> RuntimeModel:
    """grep pre-trained on its runs at 6-12 nodes only (held-out context excluded)."""
    train = grep_runs[(grep_runs["context_id"] != held_out_context) & (grep_runs["scale_out"] >= 6)]
    return RuntimeModel.pretrain(train.drop(columns=["context_id"]), seed=0, config=FAST)


def test_below_the_trained_scale_outs_the_prediction_continues_from_the_edge(
    grep_from_six: RuntimeModel,
    held_out_properties: dict[str, object],
) -> None:
    """Trained at 6-12 nodes, asked about 2-4: the prediction there lies halfway (log) between its
    own curve continued down from 6-12 nodes as a + b / n and its extrapolation (a spill or not: no
    run said); the band spans both, the network's curve and the power law. Inside 6-12 nothing
    changes."""
    model = grep_from_six
    ctx = dict(held_out_properties)
    norm = model._normalise(ctx)
    assert model._edges(norm) == (6, 12)
    known = first_octave((6, 12))
    below = np.array([2.0, 4.0])
    at_known = model._model_log_curves(norm, known)[1]
    amdahl = np.exp(continued_log_runtime(below, known, at_known))
    own = np.exp(model._model_log_curves(norm, below)[1])
    np.testing.assert_allclose(model.predict(ctx, [2, 4]), np.sqrt(amdahl * own), rtol=1e-9)
    assert np.abs(np.log(amdahl / own)).max() > 0.05  # the guesses do differ there
    network = np.exp(model._network_log(norm, below))
    rate = np.exp(power_law_log_runtime(below, known, at_known))
    band = model.band(ctx, [2, 4, 6, 8, 12])
    assert band.below == 6 and band.beyond is None
    guesses = np.stack([network, amdahl, rate, own])
    assert np.all(band.lower[:2] <= guesses.min(axis=0) * (1 + 1e-9))
    assert np.all(band.upper[:2] >= guesses.max(axis=0) * (1 - 1e-9))
    # inside the trained scale-outs nothing changes, the band included
    inside = model.band(ctx, [6, 8, 12])
    assert inside.below is None
    np.testing.assert_array_equal(band.mean[2:], inside.mean)
    np.testing.assert_array_equal(band.lower[2:], inside.lower)
    np.testing.assert_array_equal(band.upper[2:], inside.upper)
    np.testing.assert_array_equal(
        np.log(inside.mean), model._model_log_curves(norm, np.array([6.0, 8.0, 12.0]))[1]
    )


def _below_three(model: RuntimeModel, ctx: dict[str, object]) -> tuple[list[float], float, float]:
    """The guesses the band spans at 3 nodes (edge 6) and the band's offsets at 6 nodes (the
    calibration's: no scale-out-dependent table on an untuned model)."""
    near = model.band(ctx, [6])
    norm = model._normalise(ctx)
    known = first_octave((6, 12))
    at_known = model._model_log_curves(norm, known)[1]
    three = np.array([3.0])
    guesses = [
        continued_log_runtime(three, known, at_known)[0],
        model._network_log(norm, three)[0],
        power_law_log_runtime(three, known, at_known)[0],
        model._model_log_curves(norm, three)[1][0],
    ]
    return guesses, float(np.log(near.lower[0] / near.mean[0])), float(np.log(near.upper[0] / near.mean[0]))


def test_the_band_below_the_edge_grows_by_the_training_runs_misses_there(
    grep_from_six: RuntimeModel,
    held_out_properties: dict[str, object],
) -> None:
    """Its offsets from the spanned guesses grow with the distance below the edge: each side's
    offset, grown by the convention (widths of the known range × half the band's log width: at 3
    nodes one width), and the rate the same guesses missed the training contexts' own runs below the
    edges of their scale-outs (``edge_misses``) times the octaves (one at 3 nodes), in quadrature."""
    model = grep_from_six
    ctx = dict(held_out_properties)
    band = model.band(ctx, [3, 6])
    guesses, lo_q, hi_q = _below_three(model, ctx)
    table = model._edge_table("grep")[0]
    assert table is not None and len(table.octaves) >= MIN_EDGE_POINTS
    one = np.array([1.0])
    lower = float(edge_growth(table.lower, table.octaves, one, 0.9)[0])
    upper = float(edge_growth(table.upper, table.octaves, one, 0.9)[0])
    assert upper > 0.0  # (grep's runs at 6-8 nodes lie over the continuations from 10-12)
    grow = 1.0 * (hi_q - lo_q) / 2
    assert np.log(band.lower[0]) == pytest.approx(min(guesses) - np.hypot(-lo_q + grow, lower), abs=1e-9)
    assert np.log(band.upper[0]) == pytest.approx(max(guesses) + np.hypot(hi_q + grow, upper), abs=1e-9)


def test_without_enough_runs_below_their_edges_the_band_widens_by_the_convention(
    grep_from_six: RuntimeModel,
    held_out_properties: dict[str, object],
) -> None:
    """Training contexts with two scale-outs each hold none out: the offsets grow by the distance
    in widths of the known range (log10(6 / n) / log10(12 / 6)) × half the band's log width, at 3
    nodes one width."""
    m = grep_from_six
    curves = m.metadata["curves"]
    two = {
        "scale_outs": curves["scale_outs"],
        "contexts": [
            {
                **e,
                "log_runtime": [
                    v if n in (6, 12) else None
                    for n, v in zip(curves["scale_outs"], e["log_runtime"], strict=True)
                ],
            }
            for e in curves["contexts"]
        ],
    }
    model = RuntimeModel(m.params, m.architecture, m.schema, {**m.metadata, "curves": two}, m.calibration)
    assert model._edge_table("grep") == (None, None)
    ctx = dict(held_out_properties)
    band = model.band(ctx, [3, 6])
    guesses, lo_q, hi_q = _below_three(model, ctx)
    grow = 1.0 * (hi_q - lo_q) / 2
    assert np.log(band.lower[0]) == pytest.approx(min(guesses) + lo_q - grow, abs=1e-9)
    assert np.log(band.upper[0]) == pytest.approx(max(guesses) + hi_q + grow, abs=1e-9)


def test_a_context_that_ran_below_the_trained_scale_outs_is_known_down_to_its_runs(
    grep_from_six: RuntimeModel,
    grep_runs: pd.DataFrame,
    held_out_context: str,
    held_out_properties: dict[str, object],
) -> None:
    """Its own runs move the edge: between its smallest run and the trained edge the tuned model's
    curve answers; only below its smallest run does the continuation."""
    runs = grep_runs[grep_runs["context_id"] == held_out_context].drop(columns=["context_id"])
    picked = pd.concat([runs[runs["scale_out"] == 2].head(1), runs[runs["scale_out"] == 8].head(1)])
    tuned = grep_from_six.finetune(picked)
    ctx = dict(held_out_properties)
    norm = tuned._normalise(ctx)
    assert tuned._edges(norm) == (2, 12)
    np.testing.assert_array_equal(
        np.log(tuned.predict(ctx, [2, 4])), tuned._model_log_curves(norm, np.array([2.0, 4.0]))[1]
    )
    assert tuned.band(ctx, [2, 4]).below is None
    known = first_octave((2, 12))
    at_known = tuned._model_log_curves(norm, known)[1]
    one = np.array([1.0])
    np.testing.assert_allclose(
        np.log(tuned.predict(ctx, [1])),
        (continued_log_runtime(one, known, at_known) + tuned._model_log_curves(norm, one)[1]) / 2,
    )
    assert tuned.band(ctx, [1, 2]).below == 2


def test_a_decision_over_candidates_below_the_known_scale_outs_says_so(
    grep_from_six: RuntimeModel,
    held_out_properties: dict[str, object],
) -> None:
    """The band names the edge only where a candidate lies below it; the decision's reason quotes it."""
    from airflow_provider_bellamy.decisions import Prediction
    from airflow_provider_bellamy.sizing import decide

    ctx = dict(held_out_properties)
    band = grep_from_six.band(ctx, [2, 4, 6, 8, 12])
    assert band.below == 6
    pred = Prediction(
        "grep",
        [2, 4, 6, 8, 12],
        list(band.mean),
        list(band.lower),
        list(band.upper),
        0.9,
        below_scale_out=band.below,
    )
    assert "scale-outs below 6 lie below every run" in decide(pred, target_s=1e6).reason
    plain = Prediction("grep", [6, 8], [1.0, 1.0], [1.0, 1.0], [1.0, 1.0], 0.9)
    assert "lie below every run" not in decide(plain, target_s=1e6).reason
