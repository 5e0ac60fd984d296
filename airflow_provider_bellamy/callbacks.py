"""Write observed runtimes back to the store, exactly once per task try.

Three paths can record a finished try: a Bellamy operator itself, the
``record_runtime`` callback, and the listener plugin. Any combination may be
enabled, and callbacks may be listed twice; each try still yields one row:

* a process-local marker keyed by ``(dag_id, task_id, run_id, map_index,
  try_number, ti_id)``: the operator, the task's callbacks and the listener of one try
  all run in the same task process, so whichever records first marks the try and
  the others skip without touching the store;
* the store's own idempotency on the try's ``ti_id`` (Airflow's id of the task
  instance try), for the cases a process-local marker cannot see (a callback re-run
  in another process, a listener in a different worker): ``record_run`` returns the
  existing row.

``ti_id`` tells a DAG run deleted and created again under the same run_id (which
starts again at try 1) from the old run: its tries are recorded as runs of their own.

Use as ``on_success_callback=record_runtime`` and
``on_failure_callback=record_runtime`` (also ``on_retry_callback``: a failed try
that will be retried fires that one, not ``on_failure_callback``), or configured:
``record_runtime(job_type="grep", scale_out=4)``.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from airflow_provider_bellamy.exceptions import InvalidInputError

log = logging.getLogger(__name__)

# XCom key under which a Bellamy operator or callback notes the recorded run row.
RECORDED_XCOM_KEY = "bellamy_recorded_run"
# Task state store key (Airflow 3.3, kept across tries) of a submitted job: the decision that
# sized it and its job id, so a retry that reattaches to the job records it with that decision.
LAUNCH_STATE_KEY = "bellamy_launch"

_lock = threading.Lock()
TryKey = tuple[str, str, str, int, int, str | None]
_recorded: dict[TryKey, int] = {}
# Tries that callbacks and the listener must not record, with why: a job that outlives its try (a
# durable submission a retry reattaches to: recording it would store the job twice), or a job that
# ended without a runtime the cluster reports readably (the task's wall time in its place holds
# sizing, submission and polling besides the job).
_unrecorded: dict[TryKey, str] = {}
_RUNS_ON = "its job runs on, for the retry that reattaches to it"
# Tries whose job ended and whose write-back the store did not take (down, refusing): the row the
# operator or sensor meant to write, which the listener or a callback of the same try writes instead
# of the task's wall time (that holds sizing, submission and polling besides the job, at the size
# asked for, not the one granted).
_pending: dict[TryKey, dict[str, Any]] = {}


def try_key(ti: Any) -> TryKey:
    """The provenance key of one task try, with Airflow's id of the try (None where ``ti`` has none)."""
    map_index = getattr(ti, "map_index", -1)
    return (
        str(ti.dag_id),
        str(ti.task_id),
        str(ti.run_id),
        -1 if map_index is None else int(map_index),
        int(getattr(ti, "try_number", 1) or 1),
        ti_id_of(ti),
    )


def try_label(ti: Any) -> str:
    """A try as log lines name it: its provenance key, and Airflow's id of it where ``ti`` has one
    (what tells a re-created run's try 1 from the old run's)."""
    *key, ti_id = try_key(ti)
    return f"{tuple(key)}" + (f" (ti {ti_id})" if ti_id else "")


def ti_id_of(ti: Any) -> str | None:
    """Airflow's id of the task instance try (``ti.id``, a UUID: new each try, and for a DAG run
    created again under the same run_id) as text; None for an object without one."""
    value = getattr(ti, "id", None)
    if isinstance(value, uuid.UUID):
        return str(value)
    return value if isinstance(value, str) else None


def recorded_row(ti: Any) -> int | None:
    """The run row recorded for this try in this process, if any."""
    with _lock:
        return _recorded.get(try_key(ti))


def mark_recorded(ti: Any, row_id: int) -> None:
    with _lock:
        _recorded[try_key(ti)] = row_id
        _pending.pop(try_key(ti), None)


def keep_pending(ti: Any, row: Mapping[str, Any]) -> None:
    """Keep the row a write-back is about to write (``write_back``'s keywords) until it is stored."""
    with _lock:
        _pending[try_key(ti)] = dict(row)


def pending_row(ti: Any) -> dict[str, Any] | None:
    """The row of this try that its operator or sensor could not store, if any."""
    with _lock:
        row = _pending.get(try_key(ti))
        return dict(row) if row is not None else None


def leave_unrecorded(ti: Any, reason: str) -> None:
    """Mark this try as not to be recorded by callbacks or the listener, saying why."""
    with _lock:
        _unrecorded[try_key(ti)] = reason


def unrecorded_reason(ti: Any) -> str | None:
    """Why this try is not to be recorded, if it is marked so."""
    with _lock:
        return _unrecorded.get(try_key(ti))


def leave_to_retry(ti: Any) -> None:
    """Mark this try as not to be recorded: its job is still running for a retry to reattach to."""
    leave_unrecorded(ti, _RUNS_ON)


def forget_recorded(ti: Any | None = None) -> None:
    """Drop the process-local marker (tests use it to act as a second process)."""
    with _lock:
        if ti is None:
            _recorded.clear()
            _unrecorded.clear()
            _pending.clear()
        else:
            _recorded.pop(try_key(ti), None)
            _unrecorded.pop(try_key(ti), None)
            _pending.pop(try_key(ti), None)


def _as_utc(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)
    return None


def write_back(
    facade: Any,
    ti: Any,
    *,
    job_type: str,
    framework: str,
    scale_out: int,
    runtime_s: float,
    status: str,
    properties: Mapping[str, Any],
    started_at: dt.datetime | None = None,
    ended_at: dt.datetime | None = None,
    external_id: str | None = None,
    decision_id: int | None = None,
    source: str = "operator",
    queue_s: float | None = None,
    requested_scale_out: int | None = None,
    excluded_reason: str | None = None,
) -> int:
    """Record one try's run (once) and link it to its sizing decision; returns the run row id.

    ``runtime_s`` is the time the job ran at ``scale_out`` (the size it was granted), ``queue_s``
    the time it waited for that size before; see ``docs/airflow.md``."""
    existing = recorded_row(ti)
    if existing is not None:
        log.info("Bellamy: try %s already recorded as run %s; not recording again", try_label(ti), existing)
        return existing
    dag_id, task_id, run_id, map_index, try_number, ti_id = try_key(ti)
    row_id = facade.record_run(
        job_type=job_type,
        framework=framework,
        scale_out=int(scale_out),
        runtime_s=float(runtime_s),
        context=dict(properties),
        status=status,
        dag_id=dag_id,
        task_id=task_id,
        run_id=run_id,
        map_index=map_index,
        try_number=try_number,
        ti_id=ti_id,
        started_at=started_at,
        ended_at=ended_at,
        external_id=external_id,
        decision_id=decision_id,
        queue_s=queue_s,
        requested_scale_out=requested_scale_out,
        excluded_reason=excluded_reason,
    )
    if decision_id is not None:
        try:
            facade.link_decision(decision_id, row_id)
        except Exception as exc:  # the run is stored; a missing link only loses an audit edge
            log.warning("Bellamy: could not link decision %s to run %s: %s", decision_id, row_id, exc)
    mark_recorded(ti, row_id)
    log.info(
        "Bellamy: recorded %s run of %s at scale-out %s: %.2f s (run row %s, via %s)",
        status,
        job_type,
        scale_out,
        runtime_s,
        row_id,
        source,
    )
    return row_id


def find_sizing_decision(ti: Any, task: Any, sizing_task_id: str | None = None) -> dict[str, Any] | None:
    """The sizing decision (XCom) that sized ``task``.

    ``sizing_task_id`` names it; otherwise the DAG's ``BellamySizingOperator`` whose
    ``sized_task_id`` is this task, else the single sizing task directly upstream.
    """
    from airflow_provider_bellamy.operators.sizing import BellamySizingOperator

    candidate = sizing_task_id
    if candidate is None:
        dag = getattr(task, "dag", None)
        tasks = list(getattr(dag, "tasks", []) or [])
        named = [
            t.task_id
            for t in tasks
            if isinstance(t, BellamySizingOperator) and getattr(t, "sized_task_id", None) == task.task_id
        ]
        if named:
            candidate = named[0]
        else:
            upstream = [
                t.task_id
                for t in tasks
                if isinstance(t, BellamySizingOperator) and t.task_id in set(task.upstream_task_ids)
            ]
            if len(upstream) == 1:
                candidate = upstream[0]
    if candidate is None:
        return None
    value = ti.xcom_pull(task_ids=candidate)
    return value if isinstance(value, Mapping) else None


def is_bellamy_sized(task: Any) -> bool:
    """Cheap check used by the listener on every task of every DAG."""
    if getattr(task, "_bellamy_records_itself", False):
        return True
    dag = getattr(task, "dag", None)
    if dag is None:
        return False
    for other in getattr(dag, "tasks", []) or []:
        if getattr(other, "sized_task_id", None) == task.task_id and getattr(other, "_bellamy_sizing", False):
            return True
    return False


def _failed(context: Mapping[str, Any], ti: Any) -> bool:
    state = str(getattr(ti, "state", "") or "").lower()
    if state.endswith(("failed", "up_for_retry")):
        return True
    return context.get("exception") is not None


def already_stored(facade: Any, ti: Any, framework: str, job_id: str | None) -> int | None:
    """The row of a job stored already (an earlier try recorded it: a durable job that outlived it),
    marked as this try's too, so that no later path of the try stores it again; None if not stored."""
    if job_id is None:
        return None
    existing = facade.recorded_job_run(framework, job_id)
    if existing is None:
        return None
    log.info("Bellamy: %s job %s is already recorded as run %s", framework, job_id, existing)
    mark_recorded(ti, int(existing))
    return int(existing)


def write_job_row(
    ti: Any, row: Mapping[str, Any], open_facade: Callable[[], Any], facade: Any | None = None
) -> int:
    """Write a finished job's row (``write_back``'s keywords) for this try, once. The row is kept
    first: a store that cannot be opened, or refuses the write, leaves it to the listener or a
    ``record_runtime`` callback of the same try, which write it instead of the task's wall time. A
    job stored already is not stored again (``already_stored``)."""
    keep_pending(ti, row)
    if facade is None:
        facade = open_facade()
    existing = already_stored(facade, ti, row["framework"], row["external_id"])
    return existing if existing is not None else write_back(facade, ti, **row)


def record_from_context(
    context: Mapping[str, Any],
    *,
    job_type: str | None = None,
    framework: str | None = None,
    scale_out: int | None = None,
    properties: Mapping[str, Any] | None = None,
    sizing_task_id: str | None = None,
    bellamy_conn_id: str = "bellamy_default",
    source: str = "callback",
) -> int | None:
    """Record the try described by a task context (used by ``record_runtime`` and the listener)."""
    ti = context.get("ti") or context.get("task_instance")
    if ti is None:
        raise InvalidInputError("context", sorted(context), "is not a task context (no 'ti')")
    if recorded_row(ti) is not None:
        return recorded_row(ti)
    reason = unrecorded_reason(ti)
    if reason is not None:
        log.info("Bellamy: not recording %s: %s", try_label(ti), reason)
        return None
    from airflow_provider_bellamy.hooks.bellamy import BellamyHook

    task = context.get("task") or getattr(ti, "task", None)
    pending = pending_row(ti)
    if pending is not None:
        # the job's own figures, which the operator or sensor could not store a moment ago, for
        # the store it meant (a callback's default connection may name another)
        facade = BellamyHook(getattr(task, "bellamy_conn_id", None) or bellamy_conn_id).get_facade()
        stored = already_stored(facade, ti, pending["framework"], pending["external_id"])
        if stored is not None:
            return stored
        # the kept row stays as it was: a write refused again is retried by the next path, once
        return write_back(
            facade, ti, **{**pending, "source": f"{source}, retrying the {pending['source']}'s write-back"}
        )
    decision = None
    if scale_out is None or job_type is None:
        decision = find_sizing_decision(ti, task, sizing_task_id) if task is not None else None
    chosen = scale_out if scale_out is not None else (decision or {}).get("chosen_scale_out")
    jt = job_type or (decision or {}).get("job_type")
    if chosen is None or jt is None:
        log.warning(
            "Bellamy: not recording %s: no sizing decision found and no job_type/scale_out given",
            try_label(ti),
        )
        return None
    props = dict(properties) if properties is not None else dict((decision or {}).get("context") or {})
    fw = framework or (decision or {}).get("framework") or "spark"
    started = _as_utc(getattr(ti, "start_date", None))
    ended = _as_utc(getattr(ti, "end_date", None)) or dt.datetime.now(dt.timezone.utc)
    runtime = (ended - started).total_seconds() if started else None
    if runtime is None or runtime <= 0:
        log.warning("Bellamy: not recording %s: no start time to measure the runtime from", try_label(ti))
        return None
    facade = BellamyHook(bellamy_conn_id).get_facade()
    return write_back(
        facade,
        ti,
        job_type=str(jt),
        framework=str(fw),
        scale_out=int(chosen),
        runtime_s=runtime,
        status="failed" if _failed(context, ti) else "success",
        properties=props,
        started_at=started,
        ended_at=ended,
        decision_id=(decision or {}).get("decision_id"),
        source=source,
    )


def record_runtime(context: Mapping[str, Any] | None = None, /, **options: Any) -> Any:
    """Task callback that records the finished try's runtime in the Bellamy store.

    ``on_success_callback=record_runtime`` takes the scale-out, job type and context
    from the sizing decision in XCom (the ``BellamySizingOperator`` naming this task
    in ``sized_task_id``, or the one directly upstream). ``record_runtime(job_type=...,
    scale_out=..., properties=..., sizing_task_id=..., bellamy_conn_id=...)`` returns
    a configured callback. A callback never fails the task: errors are logged.
    """
    if context is None:
        options = _checked_options(options)

        def _callback(ctx: Mapping[str, Any]) -> None:
            record_runtime(ctx, **options)

        _callback.__name__ = "record_runtime"
        return _callback
    try:
        record_from_context(context, **options)
    except Exception:
        log.exception("Bellamy: recording the runtime failed (the task's own state is unaffected)")
    return None


def _checked_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """A configured callback's options, checked when the DAG is parsed (a callback never fails the
    task, so a bad value found when it fires would only be a log line): ``int()`` there read
    ``scale_out=True`` as 1 and ``4.7`` as 4, recorded and trained on as the size the job ran at."""
    from airflow_provider_bellamy.records import validate_job_type, validate_label, validate_scale_out
    from airflow_provider_bellamy.spec import parse_properties

    readers: dict[str, Callable[[Any, str], Any]] = {
        "job_type": lambda v, f: validate_job_type(v, field=f),
        "framework": lambda v, f: validate_label(v, f).lower(),
        "scale_out": lambda v, f: validate_scale_out(v, field=f),
        "properties": lambda v, f: parse_properties(v, f),
        "sizing_task_id": validate_label,
        "bellamy_conn_id": validate_label,
    }
    unknown = sorted(set(options) - set(readers))
    if unknown:
        raise InvalidInputError(
            unknown[0], options[unknown[0]], f"unknown option; allowed: {sorted(readers)}"
        )
    return {name: value if value is None else readers[name](value, name) for name, value in options.items()}


RecordCallback = Callable[[Mapping[str, Any]], None]


def log_missed_deadline(context: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
    """A ``DeadlineAlert`` callback that logs the miss (``SyncCallback(log_missed_deadline)``).

    Deadline callbacks run outside the task (scheduler/triggerer side); the sizing operators
    recompute the deadline themselves (see ``airflow_provider_bellamy.deadlines``).
    """
    dag_run = (context or {}).get("dag_run") if isinstance(context, Mapping) else None
    log.warning("Bellamy: DAG run %s missed its deadline (%s)", getattr(dag_run, "run_id", "?"), kwargs or "")
