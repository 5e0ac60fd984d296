from __future__ import annotations

import json
import math

import pytest

from airflow_provider_bellamy.decisions import Prediction, SizingDecision, format_confidence
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.model.extrapolation import signals, training_domain
from airflow_provider_bellamy.sizing import decide, default_decision, validate_confidence, validate_scale_outs


def _prediction(fallback: str | None = None) -> Prediction:
    # runtime falls with n, the band is ±20 %
    ns = [2, 4, 6, 8]
    mean = [1000.0, 520.0, 360.0, 300.0]
    return Prediction(
        "grep", ns, mean, [m * 0.8 for m in mean], [m * 1.2 for m in mean], 0.9, "grep@v3", fallback
    )


def test_min_scale_out_takes_the_smallest_whose_upper_band_meets_the_target() -> None:
    d = decide(_prediction(), target_s=500)
    # 520 mean meets 500 on average but not at 90 %: upper 624 > 500; 6 → 432 <= 500
    assert d.chosen_scale_out == 6 and d.feasible
    assert [c.meets_target for c in d.candidates] == [False, False, True, True]
    assert "90%" in d.reason and d.model_version == "grep@v3"


def test_min_scale_out_passes_over_a_smaller_size_that_is_slower_and_dearer() -> None:
    # a spill at 2 nodes: predicted three times the 4-node runtime; its upper bound 1200 s meets the
    # target, but 2 · 900 = 1800 predicted node-seconds against 4 · 300 = 1200: later and dearer
    spill = Prediction(
        "sgd", [2, 4, 8], [900.0, 300.0, 170.0], [720.0, 240.0, 136.0], [1200.0, 400.0, 230.0], 0.9
    )
    d = decide(spill, target_s=1300)
    assert d.chosen_scale_out == 4 and d.feasible
    assert "not 2" in d.reason and [c.meets_target for c in d.candidates] == [True, True, True]
    # 8 nodes, faster still, are predicted to cost more (8 · 170 = 1360): 4 stays the smallest not beaten
    assert 4 * 300 < 8 * 170
    # without the spill (2 nodes predicted under twice the 4-node runtime) the smallest, as before
    plain = Prediction(
        "sgd", [2, 4, 8], [550.0, 300.0, 170.0], [440.0, 240.0, 136.0], [700.0, 400.0, 230.0], 0.9
    )
    assert decide(plain, target_s=1300).chosen_scale_out == 2
    assert "not 2" not in decide(plain, target_s=1300).reason
    # where nodes are what is scarce, fewest_nodes keeps the smallest meeting the target, spill or not
    fewest = decide(spill, target_s=1300, objective="fewest_nodes")
    assert fewest.chosen_scale_out == 2 and fewest.feasible and "not 2" not in fewest.reason
    assert decide(spill, target_s=500, objective="fewest_nodes").chosen_scale_out == 4
    # without a target: the fewest nodes, where the other objectives take the least node-hours
    assert decide(spill, target_s=None, objective="fewest_nodes").chosen_scale_out == 2
    assert decide(spill, target_s=None).chosen_scale_out == 4


def test_min_cost_uses_node_hours_and_price() -> None:
    pred = Prediction(
        "grep", [2, 4, 8], [1000.0, 400.0, 260.0], [900.0, 360.0, 234.0], [1100.0, 440.0, 286.0], 0.9
    )
    d = decide(pred, target_s=1200, objective="min_cost", price_per_node_hour=2.0)
    # node-hours at the upper band: 2·1100 = 2200, 4·440 = 1760, 8·286 = 2288 node-seconds
    assert d.chosen_scale_out == 4
    assert math.isclose(d.chosen.cost, 4 * 440 / 3600 * 2.0)
    assert decide(pred, target_s=1200, objective="fastest").chosen_scale_out == 8


def test_unreachable_target_is_infeasible_with_fastest_and_shortfall() -> None:
    d = decide(_prediction(), target_s=100, infeasible="fastest")
    assert not d.feasible and d.chosen_scale_out == 8
    assert math.isclose(d.shortfall_s, 300 * 1.2 - 100)
    assert "short" in d.reason
    # bands of one relative width: the likeliest is the fastest, and the default says so
    likeliest = decide(_prediction(), target_s=100)
    assert likeliest.chosen_scale_out == 8 and math.isclose(likeliest.shortfall_s, d.shortfall_s)
    assert (
        "the most likely to meet it: 8" in likeliest.reason and "lowest upper bound" not in likeliest.reason
    )


def _narrow_or_wide() -> Prediction:
    # 16: the largest scale-out a context ran at, a narrow band near the target; 24, above its runs,
    # a wide band centred well under it: the lower upper bound is the less likely to meet 100 s
    return Prediction(
        "grep", [8, 16, 24], [300.0, 105.0, 70.0], [200.0, 90.0, 40.0], [500.0, 125.0, 140.0], 0.9
    )


def test_an_unreachable_target_launches_the_candidate_most_likely_to_meet_it() -> None:
    from airflow_provider_bellamy.sizing import meeting_score

    fastest = decide(_narrow_or_wide(), target_s=100, infeasible="fastest")
    assert fastest.chosen_scale_out == 16
    d = decide(_narrow_or_wide(), target_s=100)
    assert not d.feasible and d.chosen_scale_out == 24 and math.isclose(d.shortfall_s, 40.0)
    # the band read as a two-piece log-normal: 24 meets 100 s with z = 1.2816 · ln(100/70) / ln(140/70)
    z = 1.2815516 * math.log(100 / 70) / math.log(2)
    assert math.isclose(meeting_score(d.chosen, 100, 0.9), z, rel_tol=1e-6)
    # 16: its mean over the target, so its lower half's spread: z = 1.2816 · ln(100/105) / ln(105/90) < 0
    assert meeting_score(d.candidates[1], 100, 0.9) < 0 < z
    assert d.reason == (
        "no candidate meets the target 100 s at 90% confidence; the most likely to meet it: 24 "
        "(predicted 70 s, upper 140 s at 90%, 40 s short; an estimated 75% chance of meeting it; "
        "the lowest upper bound is 16's, 125 s (predicted 105 s))"
    )
    # the target met at 90 %: the rule never applies; the fastest objective keeps the lowest upper bound
    assert decide(_narrow_or_wide(), target_s=145).chosen_scale_out == 16
    assert decide(_narrow_or_wide(), target_s=100, objective="fastest").chosen_scale_out == 16
    # the same with min_cost (the rule does not weigh node-hours)
    assert decide(_narrow_or_wide(), target_s=100, objective="min_cost").chosen_scale_out == 24
    # run-likely where no size is predicted to meet the target (60 s): the likeliest, not the fastest
    assert decide(_narrow_or_wide(), target_s=60, infeasible="fastest").chosen_scale_out == 16
    for objective in ("min_scale_out", "min_cost"):
        d = decide(_narrow_or_wide(), target_s=60, objective=objective, infeasible="smallest_predicted")
        assert d.chosen_scale_out == 24 and "the most likely to meet it: 24" in d.reason


def test_the_likeliest_breaks_ties_to_the_smaller_scale_out_and_reads_no_unbounded_band() -> None:
    inf = math.inf
    # 4 and 8 read the same chance (the same band): the smaller
    same = Prediction(
        "grep", [2, 4, 8], [300.0, 120.0, 120.0], [250.0, 100.0, 100.0], [400.0, 150.0, 150.0], 0.9
    )
    assert decide(same, target_s=110).chosen_scale_out == 4
    # an unbounded band says nothing of its chance: a bounded one is read, however unlikely
    part = Prediction("grep", [2, 4, 8], [300.0, 120.0, 60.0], [250.0, 100.0, 1.0], [400.0, 150.0, inf], 0.9)
    d = decide(part, target_s=110)
    assert d.chosen_scale_out == 4 and "most likely to meet it: 4" in d.reason
    # unbounded everywhere: the largest, as without a model
    none = Prediction("grep", [2, 4, 8], [10.0, 6.0, 5.0], [1.0] * 3, [inf] * 3, 0.9)
    d = decide(none, target_s=2)
    assert d.chosen_scale_out == 8 and "no upper bound" in d.reason and "the largest, 8" in d.reason
    # zero-width bands over the target read no chance at all: the lowest upper bound among them
    flat = Prediction(
        "grep", [2, 4, 8], [300.0, 150.0, 160.0], [300.0, 150.0, 160.0], [300.0, 150.0, 160.0], 0.9
    )
    d = decide(flat, target_s=100)
    assert d.chosen_scale_out == 4 and "an estimated under 1% chance" in d.reason
    # q = 0.5: the upper bound is a median, a band reads no spread: every mean under the target reads
    # 50 %, and the lowest upper bound decides
    median = Prediction("grep", [8, 16, 24], [90.0, 80.0, 95.0], [60.0] * 3, [130.0, 120.0, 105.0], 0.5)
    d = decide(median, target_s=100)
    assert d.chosen_scale_out == 24 and "an estimated 50% chance" in d.reason


def _plateau() -> Prediction:
    # a job whose runtime barely falls past 4 nodes, under a ±40 % band: no size meets 210 s at 90 %
    ns = [2, 4, 6, 8, 10]
    mean = [280.0, 202.0, 190.0, 189.0, 183.0]
    return Prediction("pagerank", ns, mean, [m * 0.6 for m in mean], [m * 1.4 for m in mean], 0.9)


def test_an_unreachable_target_can_take_the_smallest_predicted_to_meet_it_instead_of_the_fastest() -> None:
    fastest = decide(_plateau(), target_s=210)
    assert not fastest.feasible and fastest.chosen_scale_out == 10  # 2.5x the nodes for 10 % less
    d = decide(_plateau(), target_s=210, infeasible="smallest_predicted")
    assert not d.feasible and d.chosen_scale_out == 4
    assert math.isclose(d.shortfall_s, 202 * 1.4 - 210)
    assert "the smallest predicted to meet it: 4" in d.reason
    # the confidence given up, and by how much: the upper bound's overshoot of the target
    assert "the 90% confidence given up: its upper bound 283 s is 73 s (35%) over the target" in d.reason
    # min_cost: the least node-hours (at the upper bound) among those predicted to meet it
    cost = decide(_plateau(), target_s=210, objective="min_cost", infeasible="smallest_predicted")
    assert cost.chosen_scale_out == 4 and "least node-hours predicted" in cost.reason
    # nothing predicted to meet it, or the fastest asked for: here the fastest (the likeliest, as by
    # default, is the fastest where every band has the same relative width)
    assert decide(_plateau(), target_s=150, infeasible="smallest_predicted").chosen_scale_out == 10
    assert (
        decide(
            _plateau(), target_s=210, objective="fastest", infeasible="smallest_predicted"
        ).chosen_scale_out
        == 10
    )
    # a target met at 90 %: the rule never applies
    assert decide(_plateau(), target_s=300, infeasible="smallest_predicted").chosen_scale_out == 4
    assert decide(_plateau(), target_s=300, infeasible="smallest_predicted") == decide(
        _plateau(), target_s=300
    )


def test_an_unbounded_band_is_no_guide_to_the_smallest_predicted() -> None:
    inf = math.inf
    pred = Prediction("grep", [2, 4, 8], [10.0, 6.0, 5.0], [1.0, 1.0, 1.0], [inf, inf, inf], 0.9)
    d = decide(pred, target_s=60, infeasible="smallest_predicted")
    assert not d.feasible and d.chosen_scale_out == 8 and "the largest, 8" in d.reason


def test_decisions_are_stable_and_round_trip_through_json() -> None:
    a, b = decide(_prediction(), target_s=500), decide(_prediction(), target_s=500)
    assert a.to_dict() == b.to_dict()
    back = SizingDecision.from_dict(json.loads(json.dumps(a.to_dict())))
    assert back.to_dict() == a.to_dict()


def test_fallback_reason_is_kept() -> None:
    d = decide(_prediction("ernest: no pre-trained model"), target_s=500)
    assert d.fallback_reason == "ernest: no pre-trained model" and "ernest" in d.reason


def test_default_decision_uses_largest_candidate_when_unset() -> None:
    d = default_decision(
        "grep", [4, 2, 8], None, "no model and 1 distinct scale-out", target_s=60, confidence=0.9
    )
    assert d.chosen_scale_out == 8 and "no model" in d.reason
    assert json.loads(json.dumps(d.to_dict()))["candidates"][0]["upper_s"] is None  # inf → null
    assert (
        default_decision("grep", [2, 8], 3, "cold start", target_s=None, confidence=0.5).chosen_scale_out == 3
    )


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"target_s": 0}, "target_s"),
        ({"target_s": float("nan")}, "target_s"),
        ({"target_s": -5}, "target_s"),
        ({"target_s": 10, "objective": "cheapest"}, "objective"),
        ({"target_s": 10, "price_per_node_hour": -1.0}, "price_per_node_hour"),
        ({"target_s": 10, "infeasible": "cheapest"}, "infeasible"),
    ],
)
def test_bad_inputs_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        decide(_prediction(), **kwargs)
    assert err.value.field == field


def test_validators() -> None:
    assert validate_scale_outs([4, 2, 4]) == [2, 4]
    for bad in ([], [0], [1.5], "24"):
        with pytest.raises(InvalidInputError, match="scale_outs"):
            validate_scale_outs(bad)
    for bad in (0, 1, 1.2, True, "0.9"):
        with pytest.raises(InvalidInputError, match="confidence"):
            validate_confidence(bad)


def test_confidence_below_one_half_is_refused_naming_why() -> None:
    # below 0.5 the band's lower bound (the (1 − q)-quantile) passes its upper
    for bad in (0.3, 0.49):
        with pytest.raises(InvalidInputError, match=r"confidence=.*lower bound would pass its upper"):
            validate_confidence(bad)
    assert validate_confidence(0.5) == 0.5


@pytest.mark.parametrize("bad", [1, 1.0, 1.5, float("inf")])
def test_confidence_of_one_or_more_is_refused_for_its_own_reason(bad: float) -> None:
    # at q = 1 the band has no upper bound; the inversion below 0.5 is not why
    with pytest.raises(InvalidInputError, match=r"confidence=.*unbounded") as err:
        validate_confidence(bad)
    assert "lower bound would pass" not in str(err.value)
    assert err.value.field == "confidence"
    assert err.value.value == bad


@pytest.mark.parametrize(
    ("q", "text"),
    [(0.9, "90%"), (0.925, "92.5%"), (0.999, "99.9%"), (0.999999, "99.9999%"), (0.998081, "99.8%")],
)
def test_format_confidence_never_says_100(q: float, text: str) -> None:
    assert format_confidence(q) == text


def _extrapolating(capped_from: float | None = None) -> Prediction:
    base = _prediction()
    ext = signals(
        training_domain([{"job_type": "grep", "machine_type": "m4", "data_size_mb": 960.0}]),
        {"job_type": "grep", "machine_type": "x", "data_size_mb": 24.0},
    )
    return Prediction(
        **{
            **base.to_dict(),
            "confidence": 0.998 if capped_from else 0.9,
            "requested_confidence": capped_from,
            "extrapolation": ext.to_dict(),
            "band_note": "contexts held out whole (categorical, numeric)",
        }
    )


def test_the_reason_says_where_the_model_extrapolates_and_the_decision_carries_it() -> None:
    d = decide(_extrapolating(), target_s=500)
    assert (
        "[extrapolating: machine_type 'x' never seen; data_size_mb 24 is 40× below the smallest trained (960)"
        in d.reason
    )
    assert d.extrapolation["kinds"] == ["categorical", "numeric"]
    back = SizingDecision.from_dict(json.loads(json.dumps(d.to_dict())))
    assert back.extrapolation == d.extrapolation


def test_a_capped_confidence_is_stated_never_100() -> None:
    d = decide(_extrapolating(capped_from=0.999999), target_s=500)
    assert "100%" not in d.reason and "100 %" not in d.reason
    assert "confidence 99.9999% asked, capped at 99.8%" in d.reason
    assert d.confidence == 0.998 and d.requested_confidence == 0.999999


def test_an_unbounded_band_everywhere_chooses_the_largest() -> None:
    inf = math.inf
    pred = Prediction("grep", [2, 4, 8], [10.0, 6.0, 5.0], [1.0, 1.0, 1.0], [inf, inf, inf], 0.9)
    d = decide(pred, target_s=60)
    assert not d.feasible and d.chosen_scale_out == 8
    assert "the band has no upper bound" in d.reason and "the largest, 8" in d.reason
    # JSON (XCom, the store's columns) has no infinity: the unbounded figures are written as None
    data = json.loads(json.dumps(d.to_dict(), allow_nan=False))
    assert data["shortfall_s"] is None and all(c["upper_s"] is None for c in data["candidates"])
    assert SizingDecision.from_dict(data).chosen.upper_s == inf


def test_a_default_decision_is_not_feasible_nothing_checked_it() -> None:
    # as the operators' own fallback (tests/airflow/test_sizing_operator.py): no prediction met the
    # target, so the decision cannot say it does; it has no shortfall either (no figure)
    for target in (60, None):
        d = default_decision("grep", [2, 8], 2, "no model", target_s=target, confidence=0.9)
        assert not d.feasible and d.shortfall_s is None and d.chosen_scale_out == 2


def test_every_on_infeasible_policy_has_the_rule_its_decision_is_made_by() -> None:
    from airflow_provider_bellamy.sizing import ON_INFEASIBLE_RULES, infeasible_rule
    from airflow_provider_bellamy.spec import ON_INFEASIBLE

    assert set(ON_INFEASIBLE_RULES) == set(ON_INFEASIBLE)
    plateau = _plateau()
    chosen = {p: decide(plateau, target_s=210, infeasible=infeasible_rule(p)) for p in ON_INFEASIBLE}
    assert {p: d.chosen_scale_out for p, d in chosen.items()} == {
        "fail": 10,  # the likeliest's decision is stored, then the operator raises
        "warn": 10,
        "run-likely": 4,
        "run-max": 10,
    }
    assert not any(d.feasible for d in chosen.values())
    # the largest: where the fastest is not the largest, the stored decision is the largest's
    slower_at_10 = Prediction(
        "pagerank", [2, 4, 10], [280.0, 190.0, 195.0], [1.0] * 3, [390.0, 260.0, 270.0], 0.9
    )
    d = decide(slower_at_10, target_s=210, infeasible=infeasible_rule("run-max"))
    assert d.chosen_scale_out == 10 and math.isclose(d.shortfall_s, 60.0) and "the largest, 10" in d.reason
    assert decide(slower_at_10, target_s=210, infeasible=infeasible_rule("warn")).chosen_scale_out == 4
    # warn and fail: the likeliest, where it is not the lowest upper bound
    for policy in ("warn", "fail"):
        assert (
            decide(_narrow_or_wide(), target_s=100, infeasible=infeasible_rule(policy)).chosen_scale_out == 24
        )
    with pytest.raises(InvalidInputError) as err:
        infeasible_rule("run-fast")
    assert err.value.field == "on_infeasible" and err.value.value == "run-fast"
