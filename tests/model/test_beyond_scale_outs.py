"""Scale-outs larger than any the model was trained at: the curve continues from its edge."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from airflow_provider_bellamy.model import RuntimeModel
from airflow_provider_bellamy.model.edges import (
    continued_log_runtime,
    last_octave,
    overhead_log_runtime,
    power_law_log_runtime,
)

from .conftest import FAST


def test_the_continuation_is_amdahls_curve_through_the_edge() -> None:
    """A curve that is a + b / n over the last octave continues as itself; one bumped near the edge
    keeps the octave's slope and meets the curve at the edge."""
    a, b = 20.0, 240.0
    known = np.geomspace(3.0, 6.0, 8)
    ns = np.array([6.0, 12.0, 48.0])
    got = np.exp(continued_log_runtime(ns, known, np.log(a + b / known)))
    np.testing.assert_allclose(got, a + b / ns)
    bumped = np.log(a + b / known) + np.where(known == 6.0, 0.1, 0.0)
    got = np.exp(continued_log_runtime(ns, known, bumped))
    assert got[0] == pytest.approx((a + b / 6) * np.exp(0.1))
    assert got[0] - got[2] == pytest.approx(b * (1 / 6 - 1 / 48), rel=0.2)  # the octave's slope


def test_a_curve_falling_faster_than_one_over_n_continues_as_perfect_speed_up() -> None:
    """Super-linear speed-up at the edge (a memory cliff's tail) is not carried on: a would be < 0."""
    at_edges = np.log([100.0, 40.0])  # 4 → 6 nodes: 2.5× faster for 1.5× the nodes
    got = np.exp(continued_log_runtime(np.array([12.0, 24.0]), np.array([4.0, 6.0]), at_edges))
    np.testing.assert_allclose(got, [40.0 * 6 / 12, 40.0 * 6 / 24])


def test_the_power_law_keeps_the_octaves_rate() -> None:
    """t ∝ n^-0.8 over the octave continues as itself from the edge."""
    known = np.geomspace(4.0, 8.0, 8)
    got = power_law_log_runtime(np.array([16.0, 32.0]), known, np.log(1000.0 * known**-0.8))
    np.testing.assert_allclose(np.exp(got), 1000.0 * np.array([16.0, 32.0]) ** -0.8)


def test_a_curve_rising_at_the_edge_stays_bounded() -> None:
    """Overhead growing with n at the edge: a + b / n with b < 0 rises towards a, never past it."""
    at_edges = np.log([50.0, 60.0])
    got = np.exp(continued_log_runtime(np.array([12.0, 1000.0]), np.array([4.0, 6.0]), at_edges))
    b = (50.0 - 60.0) / (1 / 4 - 1 / 6)
    assert got[0] > 60.0 and got[1] < 60.0 - b / 6


def test_ernests_overhead_terms_continue_a_cost_that_grows_with_the_cluster() -> None:
    """A curve 20 + 400 / n + 1.5 n over 1-8 nodes (coordination cost growing with n) is Ernest's
    curve: the fit over the whole known range recovers it, so at 32 nodes it lies 1.6x above
    Amdahl's continuation from the last octave, which flattens towards its fixed cost."""
    known = np.geomspace(1.0, 8.0, 16)
    truth = 20.0 + 400.0 / known + 1.5 * known
    ns = np.array([16.0, 32.0])
    got = np.exp(overhead_log_runtime(ns, known, np.log(truth)))
    np.testing.assert_allclose(got, 20.0 + 400.0 / ns + 1.5 * ns, rtol=1e-6)
    octave = known[known >= 4.0]
    amdahl = np.exp(continued_log_runtime(ns, octave, np.log(20.0 + 400.0 / octave + 1.5 * octave)))
    assert got[1] > 1.5 * amdahl[1]


def test_a_curve_with_no_overhead_is_not_given_one() -> None:
    """Amdahl's a + b / n over the known range: the fit keeps it (no overhead term invented), so the
    band's extra guess adds nothing beyond the edge."""
    known = np.geomspace(2.0, 12.0, 16)
    ns = np.array([24.0, 48.0])
    got = np.exp(overhead_log_runtime(ns, known, np.log(30.0 + 600.0 / known)))
    np.testing.assert_allclose(got, 30.0 + 600.0 / ns, rtol=1e-6)


@pytest.fixture(scope="module")
def grep_to_six(grep_runs: pd.DataFrame, held_out_context: str) -> RuntimeModel:
    """grep pre-trained on its runs at 2-6 nodes only (held-out context excluded)."""
    train = grep_runs[(grep_runs["context_id"] != held_out_context) & (grep_runs["scale_out"] <= 6)]
    return RuntimeModel.pretrain(train.drop(columns=["context_id"]), seed=0, config=FAST)


def test_beyond_the_trained_scale_outs_the_prediction_continues_from_the_edge(
    grep_to_six: RuntimeModel,
    held_out_properties: dict[str, object],
) -> None:
    """Trained at 2-6 nodes, asked about 8-12: the prediction there is the continuation of its own
    curve over 3-6 nodes (the network's basis beyond 6 was fitted to nothing), and the band spans
    the network's own extrapolation as well."""
    ctx = dict(held_out_properties)
    norm = grep_to_six._normalise(ctx)
    assert grep_to_six._edges(norm) == (2, 6)
    known = last_octave((2, 6))
    beyond = np.array([8, 10, 12])
    expected = np.exp(
        continued_log_runtime(beyond.astype(float), known, grep_to_six._model_log_curves(norm, known)[1])
    )
    np.testing.assert_allclose(grep_to_six.predict(ctx, beyond.tolist()), expected, rtol=1e-9)
    network = np.exp(grep_to_six._network_log(grep_to_six._normalise(ctx), beyond.astype(float)))
    rate = np.exp(
        power_law_log_runtime(beyond.astype(float), known, grep_to_six._model_log_curves(norm, known)[1])
    )
    band = grep_to_six.band(ctx, beyond.tolist())
    guesses = np.stack([network, expected, rate])
    assert np.all(band.lower <= guesses.min(axis=0) * (1 + 1e-9))
    assert np.all(band.upper >= guesses.max(axis=0) * (1 - 1e-9))
    # inside the trained scale-outs nothing changes: the model's own curve
    ns = np.array([2.0, 4.0, 6.0])
    np.testing.assert_array_equal(
        np.log(grep_to_six.predict(ctx, [2, 4, 6])),
        grep_to_six._model_log_curves(grep_to_six._normalise(ctx), ns)[1],
    )


def test_a_context_that_ran_beyond_the_trained_scale_outs_is_known_up_to_its_runs(
    grep_to_six: RuntimeModel,
    grep_runs: pd.DataFrame,
    held_out_context: str,
    held_out_properties: dict[str, object],
) -> None:
    """Its own runs move the edge: between the trained edge and its largest run the tuned model's
    curve answers; only beyond its largest run does the continuation."""
    runs = grep_runs[grep_runs["context_id"] == held_out_context].drop(columns=["context_id"])
    picked = pd.concat([runs[runs["scale_out"] == 4].head(1), runs[runs["scale_out"] == 12].head(1)])
    tuned = grep_to_six.finetune(picked)
    ctx = dict(held_out_properties)
    norm = tuned._normalise(ctx)
    assert tuned._edges(norm) == (2, 12)
    np.testing.assert_array_equal(
        np.log(tuned.predict(ctx, [8, 10])), tuned._model_log_curves(norm, np.array([8.0, 10.0]))[1]
    )
    known = last_octave((2, 12))
    at_known = tuned._model_log_curves(norm, known)[1]
    np.testing.assert_allclose(
        np.log(tuned.predict(ctx, [24])), continued_log_runtime(np.array([24.0]), known, at_known)
    )


def test_a_decision_over_candidates_beyond_the_known_scale_outs_says_so(
    grep_to_six: RuntimeModel,
    held_out_properties: dict[str, object],
) -> None:
    """The band names the edge only where a candidate lies beyond it; the decision's reason quotes it."""
    from airflow_provider_bellamy.decisions import Prediction
    from airflow_provider_bellamy.sizing import decide

    ctx = dict(held_out_properties)
    assert grep_to_six.band(ctx, [2, 4, 6]).beyond is None
    band = grep_to_six.band(ctx, [2, 4, 6, 8, 12])
    assert band.beyond == 6
    pred = Prediction(
        "grep",
        [2, 4, 6, 8, 12],
        list(band.mean),
        list(band.lower),
        list(band.upper),
        0.9,
        beyond_scale_out=band.beyond,
    )
    assert "scale-outs above 6 lie beyond every run" in decide(pred, target_s=1e6).reason
