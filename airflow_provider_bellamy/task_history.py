"""Durations of earlier task instances, as Airflow recorded them, read from inside a running task.

``reserve="auto"`` needs how long the tasks after a sized one usually take. Airflow knows: every
finished task instance has a duration in the metadata database. A task of Airflow 3 cannot query
that database, but its supervisor answers ``GetPreviousTI`` through the execution API (the
request behind ``RuntimeTaskInstance.get_previous_ti``, asked here for another task of the DAG):
the latest task instance of a task, in a given state, of a DAG run whose logical date is before a
given one. Walking back from the current run's logical date gives the last ``n`` successful
durations. This is the same message under ``dag.test()`` (an in-process supervisor) and under a
scheduler (the supervisor asks the API server).

Runs without a logical date (manual runs triggered without one) are not found by that request;
when nothing is found the caller falls back to the Bellamy store's recorded runs.
"""

from __future__ import annotations

import datetime as dt
from typing import Any


def _supervisor() -> Any | None:
    """The task's channel to its supervisor; None outside a running task."""
    from airflow.sdk.execution_time import task_runner

    return getattr(task_runner, "SUPERVISOR_COMMS", None)


def airflow_task_durations(
    dag_id: str, task_id: str, before: dt.datetime | None, *, last: int = 20
) -> list[float] | None:
    """Seconds of the last ``last`` successful instances of ``task_id`` in DAG runs with a logical
    date before ``before`` (newest first); None when not running inside an Airflow task.

    ``before`` is the current run's logical date: the instance of this run is never counted.
    """
    comms = _supervisor()
    if comms is None:
        return None
    from airflow.sdk.execution_time.comms import GetPreviousTI

    durations: list[float] = []
    seen: set[str] = set()
    cursor = before
    for _ in range(last):
        response = comms.send(
            GetPreviousTI(dag_id=dag_id, task_id=task_id, logical_date=cursor, state="success")
        )
        ti = getattr(response, "task_instance", None)
        if ti is None or ti.run_id in seen:
            break
        seen.add(ti.run_id)
        duration = ti.duration
        if duration is None and ti.start_date is not None and ti.end_date is not None:
            duration = (ti.end_date - ti.start_date).total_seconds()
        if duration is not None and duration >= 0:
            durations.append(float(duration))
        # The request walks by logical date; without one (or without progress) it cannot go on.
        if ti.logical_date is None or (cursor is not None and ti.logical_date >= cursor):
            break
        cursor = ti.logical_date
    return durations
