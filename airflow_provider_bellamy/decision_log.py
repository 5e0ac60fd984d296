"""The store's sizing decisions: storing one with its request and provenance, linking the run it
led to, reading, listing and pruning them. The decision itself is made in ``sizing`` (the
policy) and ``resolution`` (which model answers); this module is what touches the store for it."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Any

from airflow_provider_bellamy.decisions import SizingDecision
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.records import validate_int
from airflow_provider_bellamy.spec import parse_duration
from airflow_provider_bellamy.store import DecisionRepository

if TYPE_CHECKING:
    from airflow_provider_bellamy.resolution import Request
    from airflow_provider_bellamy.store import Store


def store_decision(
    store: Store, decision: SizingDecision, req: Request, model_version_id: int | None, prov: dict[str, Any]
) -> SizingDecision:
    """Store a decision with its request and provenance; sets ``decision_id`` and ``created_at``."""
    decision.requested_confidence = req.confidence
    values = {
        "job_type": req.job_type,
        "framework": req.framework,
        "context": req.context,
        "context_fingerprint": req.fingerprint,
        "candidates": decision.to_dict()["candidates"],
        "target_s": decision.target_s,
        # what the band honours (a q the calibration cannot resolve is capped; the reason says so)
        "confidence": decision.confidence,
        "objective": decision.objective,
        "price_per_node_hour": decision.price_per_node_hour,
        "chosen_scale_out": decision.chosen_scale_out,
        "feasible": bool(decision.feasible),
        "reason": decision.reason,
        "shortfall_s": decision.shortfall_s,
        "model_version": decision.model_version,
        "model_version_id": model_version_id,
        "fallback_reason": decision.fallback_reason,
        "requested_confidence": req.confidence,
        "extrapolation": decision.extrapolation,
        "band_note": decision.band_note,
        **prov,
    }
    row = store.write(lambda s: DecisionRepository(s).add(values), what="storing a decision")
    decision.decision_id = row.id
    decision.created_at = row.created_at.isoformat()
    return decision


def link(store: Store, decision_id: Any, run_row_id: Any) -> None:
    """Attach the run a sizing decision led to."""
    decision_id = validate_int(decision_id, "decision_id")
    run_row_id = validate_int(run_row_id, "run_row_id")
    store.write(lambda s: DecisionRepository(s).link(decision_id, run_row_id), what="linking a decision")


def get(store: Store, decision_id: Any) -> SizingDecision:
    """A stored decision as ``size`` returned it."""
    decision_id = validate_int(decision_id, "decision_id")
    with store.read("reading a decision") as session:
        row = DecisionRepository(session).get(decision_id)
        if row is None:
            raise InvalidInputError("decision_id", decision_id, "no such decision")
        data = row.to_dict()
    return SizingDecision.from_dict(data)


def listing(store: Store, job_type: str | None, *, limit: int | None) -> list[dict[str, Any]]:
    """The newest decisions (of one job type, or all), as dicts."""
    with store.read("listing decisions") as session:
        return [d.to_dict() for d in DecisionRepository(session).list(job_type=job_type, limit=limit)]


def prune(store: Store, older_than: dt.timedelta | float | str, *, keep_linked: bool) -> int:
    """Delete the decisions made more than ``older_than`` (a timedelta, seconds, or text like ``90d``) ago; returns
    how many. Their runs stay, unlinked; ``keep_linked`` keeps those that led to a recorded run.
    Deleted in batches, each its own short transaction, so launches storing decisions meanwhile
    are not held up; a store that does not exist yet is not created for it."""
    seconds = parse_duration(older_than, "older_than")
    cutoff = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds)
    if not store.ensure_schema(write=False):
        return 0
    deleted = 0
    while True:
        done = store.write(
            lambda s: DecisionRepository(s).prune_batch(cutoff, keep_linked=keep_linked),
            what="pruning decisions",
        )
        deleted += done
        if done == 0:
            return deleted
