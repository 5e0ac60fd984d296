"""The store's runs: what their properties hold, recording them (one transaction, each Airflow
try once, linked to its decision), importing a data set once, reading them back as a frame.

Validation of a run lives in ``records``; this module is what touches the store for them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.records import conform_context, runs_frame
from airflow_provider_bellamy.store import DecisionRepository, Run, RunRepository

if TYPE_CHECKING:
    import pandas as pd
    from sqlalchemy.orm import Session

    from airflow_provider_bellamy.store import Store

# Property kinds of a job type's stored runs, keyed by (store, job type, newest run id).
_KINDS_CACHE: dict[tuple[Any, ...], dict[str, str]] = {}
_KINDS_CACHE_SIZE = 256
_KINDS_LOCK = threading.Lock()


def stored_kinds(store: Store, job_types: Iterable[str]) -> dict[str, dict[str, str]]:
    """What the stored runs of each job type hold for each property (number or text), which user
    input is converted to (records.conform_property); cached until the job type gets new runs."""
    out: dict[str, dict[str, str]] = {}
    with store.read("reading property kinds") as session:
        repo = RunRepository(session)
        for job in job_types:
            key = (store.cache_key, job, repo.newest_id(job))
            with _KINDS_LOCK:
                kinds = _KINDS_CACHE.get(key)
            if kinds is None:
                kinds = repo.property_kinds(job)
                with _KINDS_LOCK:
                    if len(_KINDS_CACHE) > _KINDS_CACHE_SIZE:
                        _KINDS_CACHE.clear()
                    _KINDS_CACHE[key] = kinds
            out[job] = kinds
    return out


def conform(store: Store, job_type: str, context: Any, *, where: str = "context") -> dict[str, str | float]:
    """A request's context as the job type's stored runs hold its properties."""
    conform_context(context, where=where)  # refuse bad input before the store is read
    return conform_context(context, stored_kinds(store, [job_type])[job_type], where=where)


def record(
    store: Store, rows: list[dict[str, Any]], *, before: Callable[[Session], bool] | None = None
) -> list[int]:
    """Store prepared rows (records.prepare_runs) in one transaction and link each new one to its
    decision; ``before`` runs first in the same transaction and may veto (returns []).
    An Airflow try stored already keeps its row: its id is returned, nothing is added."""

    def work(session: Session) -> list[int]:
        if before is not None and not before(session):
            return []
        results = RunRepository(session).add_many(rows)
        decisions = DecisionRepository(session)
        for row, (row_id, created) in zip(rows, results, strict=True):
            if created and row.get("decision_id") is not None:
                # A stale or foreign decision id must not cost the run itself.
                decisions.try_link(row["decision_id"], row_id)
        return [row_id for row_id, _ in results]

    return store.write(work, what="recording runs")


def record_data_set(
    store: Store, rows: list[dict[str, Any]], *, append: bool, skip_stored: bool
) -> list[int]:
    """Record a data set (a file, a trace set) once: where a ``dataset`` of the rows already has
    stored runs, refuse (``skip_stored``: add nothing, return []) unless ``append``. The check runs
    in the write transaction, so two imports of one file at once store it once."""
    datasets = sorted({r["dataset"] for r in rows if r.get("dataset") is not None})

    def check(session: Session) -> bool:
        repo = RunRepository(session)
        repo.lock_datasets(datasets)
        for name in datasets:
            stored = repo.count(dataset=name)
            if stored and not skip_stored:
                raise InvalidInputError(
                    "dataset",
                    name,
                    f"already has {stored} stored runs; pass append=True (--append) to add again",
                )
            if stored:
                return False
        return True

    return record(store, rows, before=None if append else check)


def read_frame(
    store: Store, job_type: str | None, *, successful_only: bool, fingerprint: str | None
) -> pd.DataFrame:
    """Stored runs as a canonical frame (plus ``id``), oldest first: the trainable ones, or every
    run with its provenance; ``fingerprint``: one context's."""
    with store.read("loading runs") as session:
        repo = RunRepository(session)
        rows: Sequence[Run]
        if successful_only:
            rows = repo.training_runs(job_type, fingerprint=fingerprint)
        else:
            rows = repo.list(job_type=job_type, newest_first=False)
            if fingerprint is not None:
                rows = [r for r in rows if r.context_fingerprint == fingerprint]
    return runs_frame(rows, provenance=not successful_only)
