"""The accuracy report's band measures: shares under, above and inside the band, and its width."""

from __future__ import annotations

import math

import numpy as np
import pytest

from airflow_provider_bellamy.benchmarks.accuracy import BAND_SUMS, band_report, band_sums, run_accuracy
from airflow_provider_bellamy.exceptions import InvalidInputError


def test_a_run_on_a_bound_is_inside_and_runs_beyond_it_are_not() -> None:
    # on the lower bound, below it, above the upper bound, in the middle; every band 10 → 20 s
    row = band_sums(np.array([10.0, 9.0, 21.0, 15.0]), np.full(4, 10.0), np.full(4, 20.0))
    assert dict(zip(BAND_SUMS, row, strict=True)) == pytest.approx(
        {"runs": 4, "under_upper": 3, "above_lower": 3, "inside": 2, "log_width": 4 * math.log(2)}
    )


def test_the_measures_are_shares_of_runs_and_every_algorithm_weighs_the_same() -> None:
    tight = band_sums(np.array([10.0, 9.0, 21.0, 15.0]), np.full(4, 10.0), np.full(4, 20.0))
    wide = band_sums(np.array([5.0, 50.0]), np.full(2, 4.0), np.full(2, 64.0))  # both inside, ×16
    report = band_report({"grep": {1: [tight]}, "sort": {1: [wide]}})
    assert report["per_algorithm"]["grep"] == {
        "under_upper": pytest.approx({**dict.fromkeys("02345"), "1": 0.75}),
        "above_lower": pytest.approx({**dict.fromkeys("02345"), "1": 0.75}),
        "inside": pytest.approx({**dict.fromkeys("02345"), "1": 0.5}),
        "mean_log_width": pytest.approx({**dict.fromkeys("02345"), "1": math.log(2)}),
    }
    assert report["per_algorithm"]["sort"]["mean_log_width"]["1"] == pytest.approx(math.log(16))
    overall = report["overall"]
    # the mean of the two algorithms' shares (0.5 and 1), not the share of the six runs pooled
    assert overall["inside"]["1"] == pytest.approx(0.75)
    assert overall["under_upper"]["1"] == pytest.approx(0.875)
    assert overall["mean_log_width"]["1"] == pytest.approx((math.log(2) + math.log(16)) / 2)
    assert overall["inside"]["0"] is None and report["interval_95"]["inside"]["0"] is None
    # one context per algorithm: every resample is the estimate itself
    assert report["interval_95"]["inside"]["1"] == pytest.approx([0.75, 0.75])


def test_the_interval_resamples_contexts_and_holds_the_estimate() -> None:
    inside = band_sums(np.array([15.0]), np.array([10.0]), np.array([20.0]))
    outside = band_sums(np.array([25.0]), np.array([10.0]), np.array([20.0]))
    report = band_report({"sort": {2: [inside, outside] * 10}})
    low, high = report["interval_95"]["inside"]["2"]
    assert report["overall"]["inside"]["2"] == pytest.approx(0.5)
    assert low < 0.5 < high
    assert low >= 0.0 and high <= 1.0
    # every context's band has the same width: no resample moves it
    assert report["interval_95"]["mean_log_width"]["2"] == pytest.approx([math.log(2)] * 2)


@pytest.mark.parametrize(
    ("argument", "value"),
    [("seeds", 0), ("seeds", True), ("workers", 0), ("confidence", 1.0), ("confidence", math.nan)],
)
def test_bad_arguments_are_refused_before_any_training(argument: str, value: object) -> None:
    with pytest.raises(InvalidInputError) as error:
        run_accuracy("bell", **{argument: value})  # type: ignore[arg-type]
    assert error.value.field == argument
