"""The sizing replay's bookkeeping: how targets split over draws and what its intervals resample."""

from __future__ import annotations

import math

import numpy as np
import pytest

from airflow_provider_bellamy.benchmarks.sizing import (
    K_SIZING,
    POLICIES,
    _repeats,
    _split,
    _summarise,
    _Tally,
    run_sizing,
)
from airflow_provider_bellamy.exceptions import InvalidInputError


def test_targets_split_evenly_over_the_draws_and_keep_their_total() -> None:
    assert _split(40, 4) == [10, 10, 10, 10]
    assert _split(6, 1) == [6]
    assert _split(10, 3) == [4, 3, 3]
    assert sum(_split(41, 4)) == 41


def test_draws_reach_the_minimum_and_none_is_left_without_a_target() -> None:
    assert _repeats(4, 1, 40) == 4  # one held-out context: drawn 4 times
    assert _repeats(40, 1, 40) == 40
    assert _repeats(400, 1, 40) == 40  # no more draws than Bell's 40 targets
    assert _repeats(4, 10, 6) == 1  # enough contexts: one draw each
    assert _repeats(10, 4, 6) == 3
    assert _repeats(40, 4, 6) == 6  # no more draws than C3O's 6 targets
    assert all(_split(40, _repeats(m, 1, 40))[-1] >= 1 for m in (1, 3, 7, 39, 40, 41))


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("min_draws", 0),
        ("min_draws", 2.5),
        ("seeds", 0),
        ("seeds", True),
        ("confidence", 1.0),
        ("confidence", math.nan),
    ],
)
def test_bad_arguments_are_refused_before_any_training(argument: str, value: object) -> None:
    with pytest.raises(InvalidInputError) as error:
        run_sizing("bell", **{argument: value})  # type: ignore[arg-type]
    assert error.value.field == argument


def _tally(per_draw: list[tuple[float, float]], decisions: int = 8) -> _Tally:
    """Draws whose bellamy decisions all hit with the given rate and cost ``ratio`` × the oracle's."""
    tally = _Tally()
    for draw, (rate, ratio) in enumerate(per_draw):
        for k in K_SIZING:
            for i in range(decisions):
                outcome = {p: (True, 100.0) for p in POLICIES}
                outcome["bellamy"] = (i < rate * decisions, 100.0 * ratio)
                tally.add(k, ("job", "ctx", k, 0, 0, draw), outcome)
    return tally


def test_the_interval_resamples_draws_and_holds_the_estimate() -> None:
    report = _summarise(_tally([(1.0, 1.0), (0.5, 1.2)] * 10), "bell", 0.9, 1, False, 0.0)
    bellamy = report["policies"]["bellamy"]
    assert bellamy["attainment"] == 0.75
    assert abs(bellamy["node_seconds_vs_oracle"] - 1.1) < 1e-12
    lo, hi = bellamy["interval_95"]["attainment"]
    assert lo < 0.75 < hi and hi - lo > 0.05
    lo, hi = bellamy["interval_95"]["node_seconds_vs_oracle"]
    assert 1.0 <= lo < 1.1 < hi <= 1.2
    # the oracle against itself: no spread whatever the draws
    assert report["policies"]["oracle"]["interval_95"]["node_seconds_vs_oracle"] == [1.0, 1.0]
    assert report["draws"] == 20 * len(K_SIZING)


def test_identical_draws_give_an_interval_of_no_width() -> None:
    report = _summarise(_tally([(0.5, 1.2)] * 6), "c3o", 0.9, 1, False, 0.0)
    interval = report["policies"]["bellamy"]["interval_95"]
    assert np.allclose(interval["attainment"], [0.5, 0.5])
    assert np.allclose(interval["node_seconds_vs_oracle"], [1.2, 1.2])
