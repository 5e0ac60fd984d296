"""The sizing policy: predictions with a calibrated band + a runtime target → a decision.

Pure: no torch, no store, no Airflow. The band's upper bound at ``confidence`` q is the
runtime the job stays under with probability q (split-conformal, see model/), so
"meets the target at confidence q" is simply ``upper_s <= target_s``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

from airflow_provider_bellamy.decisions import (
    Candidate,
    Prediction,
    SizingDecision,
    format_confidence,
)
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.records import validate_confidence, validate_scale_out
from airflow_provider_bellamy.spec import parse_objective, parse_price, parse_target
from airflow_provider_bellamy.spec import parse_scale_outs as validate_scale_outs

# what to choose when no candidate meets the target at the requested confidence (docs/sizing.md):
# the one most likely to meet it, read off each band (a narrow band near the target is less likely
# to meet it than a wide one centred well under it, though its upper bound is lower); the fastest
# (the lowest upper bound); the smallest whose predicted runtime meets the target (the requested
# confidence given up, not the target: where a job's runtime barely changes with its size, the
# fastest upper bound is one size among near-equals bought at several times the nodes); or the largest
INFEASIBLE_RULES = ("likeliest", "fastest", "smallest_predicted", "largest")

# The operators' ``on_infeasible`` (spec.ON_INFEASIBLE) as the rule the decision is made by, so
# that the stored decision is the size launched: ``fail`` raises after the likeliest's decision.
ON_INFEASIBLE_RULES = {
    "fail": "likeliest",
    "warn": "likeliest",
    "run-likely": "smallest_predicted",
    "run-max": "largest",
}


def infeasible_rule(on_infeasible: str) -> str:
    """The ``decide(infeasible=...)`` rule of an ``on_infeasible`` policy (parsed by ``spec``)."""
    if on_infeasible not in ON_INFEASIBLE_RULES:
        raise InvalidInputError(
            "on_infeasible", on_infeasible, f"must be one of {', '.join(ON_INFEASIBLE_RULES)}"
        )
    return ON_INFEASIBLE_RULES[on_infeasible]


def meeting_score(candidate: Candidate, target_s: float, confidence: float) -> float:
    """How far ``target_s`` lies above the candidate's predicted runtime, in standard scores of its
    band read as a two-piece log-normal: the mean its median, the upper bound its ``confidence``
    quantile, the lower bound its (1 - ``confidence``) one (each half of the band its own spread,
    as the calibration measures each side apart). Φ(score) estimates the chance a run there meets the
    target; higher is likelier. -inf where the band gives no reading (a half of zero or negative
    width on the target's side, a non-positive runtime), +inf where a zero-width band meets it."""
    mean, lower, upper = candidate.predicted_s, candidate.lower_s, candidate.upper_s
    if not (mean > 0 and math.isfinite(mean)) or not target_s > 0:
        return -math.inf
    log = lambda x: math.log(x) if x > 0 else -math.inf  # noqa: E731
    gap = math.log(target_s) - math.log(mean)
    if gap == 0:
        return 0.0
    # the target above the centre: the upper half's spread; below it, the lower half's
    width = log(upper) - log(mean) if gap > 0 else log(mean) - log(lower)
    if width <= 0:
        return math.inf if gap > 0 else -math.inf
    score = NormalDist().inv_cdf(confidence) * gap / width
    return -math.inf if math.isnan(score) else score


def _likeliest(cands: list[Candidate], target_s: float, confidence: float) -> tuple[Candidate, float]:
    """The candidate most likely to meet ``target_s`` and that likelihood. Only candidates with a
    bounded band are read (an unbounded one says nothing about its chance). Equal scores, then the
    lower upper bound (where the bands read no chance, or q = 0.5 reads none apart: the fastest),
    then the smaller scale-out (the same band at two sizes)."""
    bounded = [c for c in cands if math.isfinite(c.upper_s)]
    scored = [(meeting_score(c, target_s, confidence), c) for c in bounded]
    best = min(scored, key=lambda sc: (-sc[0], sc[1].upper_s, sc[1].scale_out))
    return best[1], NormalDist().cdf(best[0]) if math.isfinite(best[0]) else float(best[0] > 0)


def _candidates(prediction: Prediction, target_s: float | None, price: float | None) -> list[Candidate]:
    out = []
    for n, mean, lo, hi in zip(
        prediction.scale_outs, prediction.mean_s, prediction.lower_s, prediction.upper_s, strict=True
    ):
        # node-hours at the band's upper bound: what the decision plans to pay for
        node_hours = n * hi / 3600.0
        out.append(
            Candidate(
                scale_out=int(n),
                predicted_s=float(mean),
                lower_s=float(lo),
                upper_s=float(hi),
                node_hours=node_hours,
                cost=None if price is None else node_hours * price,
                meets_target=target_s is not None and hi <= target_s,
            )
        )
    return sorted(out, key=lambda c: c.scale_out)


def _undominated(meeting: list[Candidate]) -> Candidate:
    """The smallest candidate meeting the target that no larger one meeting it beats in predicted
    node-hours. A larger scale-out predicted to take fewer node-hours is also predicted to finish
    sooner: the smaller one is slower and dearer at once — a scale-out in a spill (a job slowed
    more than twice when its nodes are halved, its input out of memory), which no reason to want
    fewer nodes covers. (The prediction, not the upper bound: a wider band at a smaller scale-out
    is uncertainty, not cost. C3O leave-machine-type-out, sgd on r4.2xlarge: 2 nodes predicted
    3 × the 4-node runtime and taken, 8-25 × in the contexts that missed: 1.2 of its 2.2 × the
    oracle's node-seconds.)"""
    ordered = sorted(meeting, key=lambda c: c.scale_out)
    spent = [c.scale_out * c.predicted_s for c in ordered]
    for i, c in enumerate(ordered):
        if not any(later < spent[i] for later in spent[i + 1 :]):
            return c
    return ordered[-1]


def decide(
    prediction: Prediction,
    *,
    target_s: float | None,
    objective: str = "min_scale_out",
    price_per_node_hour: float | None = None,
    context: Mapping[str, Any] | None = None,
    framework: str | None = None,
    infeasible: str = "likeliest",
) -> SizingDecision:
    """Choose a scale-out. Ties break towards the smaller scale-out, so equal inputs give equal decisions.

    * ``min_scale_out``: the smallest scale-out whose upper band meets the target, passing over one
      that a larger such scale-out beats in predicted node-hours (predicted slower and dearer);
    * ``min_cost``: the least node-hours (× price) among those meeting the target;
    * ``fastest``: the lowest upper band (the target only decides ``feasible``);
    * ``fewest_nodes``: the smallest scale-out whose upper band meets the target, even one predicted
      slower and dearer than a larger one (nodes are what is scarce: a quota, a shared pool).
    Without a target, ``min_scale_out``/``min_cost`` pick the cheapest candidate, ``fewest_nodes`` the
    smallest.
    No candidate meets the target → ``feasible=False``, the shortfall of the candidate chosen, and
    by ``infeasible``: ``likeliest``, the one most likely to meet the target (``meeting_score``; the
    fastest with the ``fastest`` objective); ``fastest``, the lowest upper bound; ``smallest_predicted``, the smallest
    candidate whose predicted runtime meets the target (the least node-hours of them with
    ``min_cost``; the likeliest where none does; the fastest with the ``fastest`` objective);
    ``largest``, the largest candidate.
    """
    target = parse_target(target_s)
    objective = parse_objective(objective)
    price = parse_price(price_per_node_hour)
    if infeasible not in INFEASIBLE_RULES:
        raise InvalidInputError("infeasible", infeasible, f"must be one of {', '.join(INFEASIBLE_RULES)}")
    cands = _candidates(prediction, target, price)
    if not cands:
        raise InvalidInputError("scale_outs", [], "must not be empty")
    # an unbounded band (a context far outside the training data) at every candidate: the largest,
    # the choice least likely to miss, as without a model
    fastest = min(cands, key=lambda c: (c.upper_s, -c.scale_out if math.isinf(c.upper_s) else c.scale_out))
    cheapest = lambda pool: min(pool, key=lambda c: (c.node_hours, c.scale_out))  # noqa: E731
    q = format_confidence(prediction.confidence)
    meeting = [c for c in cands if c.meets_target] if target is not None else cands
    feasible = bool(meeting)
    shortfall = None
    likely = []
    if not feasible and target is not None and infeasible == "smallest_predicted" and objective != "fastest":
        # an unbounded upper bound: the prediction is no guide there (the largest, as below)
        likely = [c for c in cands if c.predicted_s <= target and math.isfinite(c.upper_s)]
    if likely:
        by_cost = objective == "min_cost"
        chosen = cheapest(likely) if by_cost else min(likely, key=lambda c: c.scale_out)
        shortfall = chosen.upper_s - target
        reason = (
            f"no candidate meets the target {target:.0f} s at {q} confidence; the "
            f"{'least node-hours' if by_cost else 'smallest'} predicted to meet it: {chosen.scale_out} "
            f"(predicted {chosen.predicted_s:.0f} s; the {q} confidence given up: its upper bound "
            f"{chosen.upper_s:.0f} s is {shortfall:.0f} s ({shortfall / target:.0%}) over the target)"
        )
    elif (
        not feasible
        and target is not None
        # run-likely where no size is predicted to meet the target: the likeliest, as warn
        and infeasible in ("likeliest", "smallest_predicted")
        and objective != "fastest"
        and any(math.isfinite(c.upper_s) for c in cands)
    ):
        chosen, chance = _likeliest(cands, target, prediction.confidence)
        shortfall = chosen.upper_s - target
        odds = "under 1%" if chance < 0.01 else f"{chance:.0%}"
        other = (
            ""
            if chosen is fastest
            else f"; the lowest upper bound is {fastest.scale_out}'s, {fastest.upper_s:.0f} s "
            f"(predicted {fastest.predicted_s:.0f} s)"
        )
        reason = (
            f"no candidate meets the target {target:.0f} s at {q} confidence; the most likely to meet it: "
            f"{chosen.scale_out} (predicted {chosen.predicted_s:.0f} s, upper {chosen.upper_s:.0f} s at {q}, "
            f"{shortfall:.0f} s short; an estimated {odds} chance of meeting it{other})"
        )
    elif not feasible and target is not None and infeasible == "largest":
        chosen = max(cands, key=lambda c: c.scale_out)
        shortfall = chosen.upper_s - target
        upper = "no upper bound" if math.isinf(chosen.upper_s) else f"upper {chosen.upper_s:.0f} s"
        reason = (
            f"no candidate meets the target {target:.0f} s at {q} confidence; the largest, "
            f"{chosen.scale_out} ({upper})"
        )
    elif not feasible:
        chosen = fastest
        shortfall = fastest.upper_s - target if target is not None else None
        if math.isinf(chosen.upper_s):
            reason = (
                f"no candidate meets the target {target:.0f} s at {q} confidence: the band has no upper "
                f"bound (the context lies too far outside the training data); the largest, {chosen.scale_out}"
            )
        else:
            reason = (
                f"no candidate meets the target {target:.0f} s at {q} confidence; "
                f"fastest is {chosen.scale_out} (upper {chosen.upper_s:.0f} s, {shortfall:.0f} s short)"
            )
    elif objective == "fastest":
        chosen = fastest
        reason = f"fastest candidate: {chosen.scale_out} (upper {chosen.upper_s:.0f} s at {q})"
    elif objective == "min_cost":
        chosen = cheapest(meeting)
        unit = "cost" if price is not None else "node-hours"
        reason = f"least {unit} among {len(meeting)} candidate(s) meeting the target: {chosen.scale_out}"
    elif target is None and objective == "fewest_nodes":
        chosen = min(cands, key=lambda c: c.scale_out)
        reason = f"no target given: fewest nodes, {chosen.scale_out}"
    elif target is None:
        chosen = cheapest(cands)
        reason = f"no target given: least node-hours, {chosen.scale_out}"
    else:
        chosen = (
            _undominated(meeting) if objective == "min_scale_out" else min(meeting, key=lambda c: c.scale_out)
        )
        reason = (
            f"smallest scale-out whose runtime stays under {target:.0f} s with {q} confidence: "
            f"{chosen.scale_out} (predicted {chosen.predicted_s:.0f} s, upper {chosen.upper_s:.0f} s)"
        )
        skipped = [c for c in meeting if c.scale_out < chosen.scale_out]
        if skipped:
            reason += (
                f"; not {', '.join(str(c.scale_out) for c in skipped)}: meets it too, but is predicted "
                f"to take longer and more node-hours than {chosen.scale_out}"
            )
    if prediction.fallback_reason:
        reason = f"{reason} [{prediction.fallback_reason}]"
    for note in prediction.notes:
        reason = f"{reason} [{note}]"
    return SizingDecision(
        job_type=prediction.job_type,
        chosen_scale_out=chosen.scale_out,
        feasible=feasible,
        reason=reason,
        target_s=target,
        confidence=prediction.confidence,
        objective=objective,
        candidates=cands,
        context=dict(context or {}),
        framework=framework,
        model_version=prediction.model_version,
        fallback_reason=prediction.fallback_reason,
        shortfall_s=shortfall,
        price_per_node_hour=price,
        requested_confidence=(
            prediction.confidence
            if prediction.requested_confidence is None
            else prediction.requested_confidence
        ),
        extrapolation=prediction.extrapolation,
        band_note=prediction.band_note,
    )


def default_decision(
    job_type: str,
    scale_outs: Sequence[int],
    default_scale_out: int | None,
    reason: str,
    *,
    target_s: float | None,
    confidence: float,
    objective: str = "min_scale_out",
    context: Mapping[str, Any] | None = None,
    framework: str | None = None,
    price_per_node_hour: float | None = None,
) -> SizingDecision:
    """No model can answer (no model, < 2 distinct observed scale-outs): a configured default.

    ``default_scale_out`` None → the largest candidate, the choice least likely to miss.
    ``feasible`` is False: nothing checked the size against the target (as the operators'
    own fallback when the store cannot answer); ``shortfall_s`` stays None, there is no figure.
    """
    values = validate_scale_outs(list(scale_outs))
    target = parse_target(target_s)
    confidence = validate_confidence(confidence)
    objective = parse_objective(objective)
    chosen = (
        max(values)
        if default_scale_out is None
        else validate_scale_out(default_scale_out, field="default_scale_out")
    )
    cands = [
        Candidate(
            scale_out=n,
            predicted_s=math.inf,
            lower_s=0.0,
            upper_s=math.inf,
            node_hours=math.inf,
            cost=None,
            meets_target=False,
        )
        for n in values
    ]
    return SizingDecision(
        job_type=job_type,
        chosen_scale_out=chosen,
        feasible=False,
        reason=f"default scale-out {chosen}: {reason}",
        target_s=target,
        confidence=confidence,
        objective=objective,
        candidates=cands,
        context=dict(context or {}),
        framework=framework,
        model_version=None,
        fallback_reason=reason,
        price_per_node_hour=parse_price(price_per_node_hour),
        requested_confidence=confidence,
    )
