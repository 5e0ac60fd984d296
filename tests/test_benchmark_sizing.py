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
    render_sizing,
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
        ("decisions", "/"),
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
                tally.add(k, ("job", "ctx", k, 0, 0, draw), ("job", "fold 0"), outcome)
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


def _two_job_types() -> _Tally:
    """grep on two held-out tasks and sort on one: grep's decisions cost little and hit, sort's
    are long (the oracle spends 10x) and bellamy pays 1.5x there, missing a quarter."""
    tally = _Tally()
    for k in K_SIZING:
        for task, (oracle_s, bellamy_s) in {
            "held out a": (100.0, 100.0),
            "held out b": (100.0, 120.0),
        }.items():
            for i in range(4):
                outcome = {p: (True, oracle_s) for p in POLICIES}
                outcome["bellamy"] = (True, bellamy_s)
                outcome["always_max"] = (True, 2 * oracle_s)
                tally.add(k, ("grep", f"g{i}", k, 0, 0, 0), ("grep", task), outcome)
        for i in range(4):
            outcome = {p: (True, 1000.0) for p in POLICIES}
            outcome["bellamy"] = (i > 0, 1500.0)
            outcome["always_max"] = (True, 2000.0)
            tally.add(k, ("sort", f"s{i}", k, 0, 0, 0), ("sort", "held out a"), outcome)
    return tally


def test_the_report_says_which_job_types_and_tasks_carry_the_excess_node_seconds() -> None:
    report = _summarise(_two_job_types(), "c3o", 0.9, 1, True, 0.0)
    total_oracle = len(K_SIZING) * (8 * 100.0 + 4 * 1000.0)
    grep, sort = report["per_algorithm"]["grep"]["bellamy"], report["per_algorithm"]["sort"]["bellamy"]
    assert (grep["decisions"], sort["decisions"]) == (8 * len(K_SIZING), 4 * len(K_SIZING))
    assert (grep["attainment"], sort["attainment"]) == (1.0, 0.75)
    assert grep["node_seconds_vs_oracle"] == pytest.approx(1.1)
    assert sort["node_seconds_vs_oracle"] == pytest.approx(1.5)
    # sort weighs 5/6 of the oracle's node-seconds: its 1.5x carries nearly all of the excess
    assert sort["oracle_share"] == pytest.approx(4000 / 4800)
    assert grep["adds_to_ratio"] == pytest.approx(len(K_SIZING) * 80.0 / total_oracle)
    assert sort["adds_to_ratio"] == pytest.approx(len(K_SIZING) * 2000.0 / total_oracle)
    for policy, overall in report["policies"].items():
        groups = [report["per_algorithm"][a][policy] for a in ("grep", "sort")]
        assert sum(g["adds_to_ratio"] for g in groups) == pytest.approx(overall["node_seconds_vs_oracle"] - 1)
        assert sum(g["oracle_share"] for g in groups) == pytest.approx(1.0)
    # within grep, the held-out task that paid more
    tasks = report["per_task"]["grep"]
    assert list(tasks) == ["held out a", "held out b"] and list(report["per_task"]["sort"]) == ["held out a"]
    assert tasks["held out a"]["bellamy"]["node_seconds_vs_oracle"] == pytest.approx(1.0)
    assert tasks["held out b"]["bellamy"]["node_seconds_vs_oracle"] == pytest.approx(1.2)
    assert report["per_task"]["sort"]["held out a"]["bellamy"] == sort
    assert report["per_algorithm"]["sort"]["always_max"]["node_seconds_vs_oracle"] == pytest.approx(2.0)


def test_the_text_report_prints_every_policy_per_job_type_and_task(
    capsys: pytest.CaptureFixture[str],
) -> None:
    report = _summarise(_two_job_types(), "c3o", 0.9, 1, True, 0.0)
    render_sizing(report)
    out = capsys.readouterr().out
    for policy in ("bellamy", "ernest", "gbm", "always_max"):
        ratio = report["policies"][policy]["node_seconds_vs_oracle"]
        assert f"Where {policy}'s node-seconds go: {ratio:.3f}" in out
    assert "Where oracle's" not in out
    lines = [line for line in out.splitlines() if "held out b" in line]
    # bellamy's table: grep's held-out b at 1.200 x its oracle, adding 80 s x 5 / 24,000 s
    assert any("1.200" in line and f"+{len(K_SIZING) * 80 / 24000:.3f}" in line for line in lines), lines
    assert any("sort" in line and "75.0%" in line and "1.500" in line for line in out.splitlines())
