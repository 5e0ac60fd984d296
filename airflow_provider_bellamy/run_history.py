"""The store's runs: what their properties hold, recording them (one transaction, each Airflow
try once, linked to its decision), importing a data set once, reading them back (listed, counted,
as a frame, to a file).

Validation of a run lives in ``records``; this module is what touches the store for them."""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.records import (
    RUN_STATUSES,
    StoredKinds,
    conform_context,
    context_fingerprint,
    prepare_runs,
    runs_frame,
    successful_runs,
    validate_label,
)
from airflow_provider_bellamy.store import DecisionRepository, Run, RunRepository

if TYPE_CHECKING:
    import pandas as pd
    from sqlalchemy.orm import Session

    from airflow_provider_bellamy.store import Store

# Property kinds of a job type's stored runs, keyed by (store, job type, newest run id).
_KINDS_CACHE: dict[tuple[Any, ...], StoredKinds] = {}
_KINDS_CACHE_SIZE = 256
_KINDS_LOCK = threading.Lock()


def stored_kinds(store: Store, job_types: Iterable[str]) -> dict[str, StoredKinds]:
    """What the stored runs of each job type hold for each property (number or text), which user
    input is converted to (records.conform_property); cached until the job type gets new runs."""
    out: dict[str, StoredKinds] = {}
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


def conform(
    store: Store, job_type: str, context: Any, *, where: str = "context", physical: bool = True
) -> dict[str, str | float]:
    """A request's context as the job type's stored runs hold its properties; ``physical=False``
    for one that selects stored runs (records.conform_context)."""
    conform_context(context, where=where, physical=physical)  # refuse bad input before the store is read
    return conform_context(context, stored_kinds(store, [job_type])[job_type], where=where, physical=physical)


def prepare(store: Store, runs: Any) -> list[dict[str, Any]]:
    """Runs (a DataFrame or mappings) validated into store rows against the stored property kinds."""
    return prepare_runs(runs, lambda job_types: stored_kinds(store, job_types))


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
            rows = repo.list(job_type=job_type, fingerprint=fingerprint, newest_first=False)
    return runs_frame(rows, provenance=not successful_only)


def frame(
    store: Store, job_type: str | None, *, successful_only: bool, context: Mapping[str, Any] | None
) -> pd.DataFrame:
    """``read_frame``, of one context (conformed as a request's) where ``context`` is given."""
    fingerprint = None
    if context is not None:
        if job_type is None:
            raise InvalidInputError("job_type", None, "needed to select the runs of one context")
        job_type = validate_label(job_type, "job_type")
        # a read: the runs of a context stored before records.PHYSICAL_PROPERTIES can be found
        fingerprint = context_fingerprint(job_type, conform(store, job_type, context, physical=False))
    return read_frame(store, job_type, successful_only=successful_only, fingerprint=fingerprint)


# Runs per page of an export: a year of a large deployment (millions of runs) never sits in
# memory as one frame (about 5 kB a run there).
EXPORT_PAGE = 20_000


def export(
    store: Store, path: str | Path, job_type: str | None, *, successful_only: bool, overwrite: bool
) -> int:
    """Write the stored runs with their provenance to a CSV/TSV file (canonical columns), a page
    of runs at a time; returns the runs written. Nothing stored: an error, and no file."""
    from airflow_provider_bellamy.datasets import write_runs_chunks

    with store.read("exporting runs") as session:
        repo = RunRepository(session)
        newest = repo.newest_any_id(job_type)
        firsts = repo.first_of_each_context(job_type) if newest is not None else []
    # the columns a frame of every run would have: the first run's, then properties that
    # first appear in later contexts
    columns = [c for c in runs_frame(firsts[:1], provenance=True).columns if c != "id"]
    for run in firsts[1:]:
        columns += [k for k in run.context if k not in columns]

    def paged(status: str | None) -> Iterator[Run]:
        after = 0
        while newest is not None and after < newest:
            with store.read("exporting runs") as session:
                rows = RunRepository(session).page(after, newest, EXPORT_PAGE, job_type, status)
            if not rows:
                return
            after = rows[-1].id
            yield from rows

    def pages() -> Iterator[pd.DataFrame]:
        # one job type's runs in id order: a stream per status, merged
        streams = [paged(None)] if job_type is None else [paged(status) for status in RUN_STATUSES]
        runs = heapq.merge(*streams, key=lambda run: run.id)
        while rows := list(itertools.islice(runs, EXPORT_PAGE)):
            frame = runs_frame(rows, provenance=True).drop(columns=["id"])
            yield successful_runs(frame) if successful_only else frame

    written = write_runs_chunks(pages(), columns, path, overwrite=overwrite)
    if not written:
        field, value = ("job_type", job_type) if job_type is not None else ("store", store.display_url)
        raise InvalidInputError(field, value, "has no stored runs to export")
    return written


def import_traces(store: Store, name: str, *, append: bool) -> dict[str, int]:
    """Record a bundled trace set ("c3o", "bell" or "all"), each set once unless ``append``
    (traces have genuine duplicate rows: no row-by-row de-duplication); runs added per set."""
    from airflow_provider_bellamy.datasets import available_traces, load_traces

    sets = sorted(available_traces())
    if name != "all" and name not in sets:
        raise InvalidInputError("traces", name, f"choose one of {[*sets, 'all']}")
    added: dict[str, int] = {}
    for set_name in sets if name == "all" else [name]:
        rows = prepare(store, load_traces(set_name))
        added[set_name] = len(record_data_set(store, rows, append=append, skip_stored=True))
    return added


def listing(
    store: Store, job_type: str | None, *, status: str | None, source: str | None, limit: int | None
) -> list[dict[str, Any]]:
    """The newest runs (filtered), as dicts."""
    with store.read("listing runs") as session:
        rows = RunRepository(session).list(job_type=job_type, status=status, source=source, limit=limit)
        return [r.to_dict() for r in rows]


def count(store: Store, **filters: str | None) -> int:
    """How many runs match ``filters`` (``RunRepository.count``'s)."""
    with store.read("counting runs") as session:
        return RunRepository(session).count(**filters)


def job_types(store: Store) -> list[str]:
    with store.read("listing job types") as session:
        return RunRepository(session).job_types()


def recorded_job(store: Store, framework: str, external_id: str) -> int | None:
    """The run row already stored for a cluster job (any Airflow try), if any."""
    with store.read("looking up a recorded job") as session:
        return RunRepository(session).id_of_job(framework, external_id)


def task_durations(store: Store, dag_id: str, task_id: str, *, last: int) -> list[float]:
    """An Airflow task's last ``last`` successful runtimes, newest first."""
    with store.read("reading recorded task durations") as session:
        return RunRepository(session).task_runtimes(dag_id, task_id, limit=last)
