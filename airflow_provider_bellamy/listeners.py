"""Listener that writes back the runtime of every Bellamy-sized task try.

Registered through ``BellamyPlugin`` (the provider's ``plugins`` and the
``airflow.plugins`` entry point). It runs in the task process after the task's
callbacks, for every task of every DAG, so the check for "is this task sized by
Bellamy?" is cheap attribute access and nothing heavy is imported for others.

A task counts as Bellamy-sized when it is a Bellamy operator that records itself
(``BellamySparkSubmitOperator``; recorded here only if the operator could not), or
when a ``BellamySizingOperator`` of its DAG names it in ``sized_task_id``.
Recording is once per try (see ``airflow_provider_bellamy.callbacks``).
"""

from __future__ import annotations

import logging
from typing import Any

from airflow.listeners import hookimpl

log = logging.getLogger(__name__)


def _record(task_instance: Any) -> None:
    from airflow_provider_bellamy.callbacks import (
        is_bellamy_sized,
        pending_row,
        record_from_context,
        recorded_row,
    )

    task = getattr(task_instance, "task", None)
    if task is None or not is_bellamy_sized(task):
        return
    if recorded_row(task_instance) is not None:
        return
    if getattr(task, "_bellamy_records_itself", False) and not getattr(task, "record", True):
        return
    try:
        options: dict[str, Any] = {"source": "listener"}
        conn_id = getattr(task, "bellamy_conn_id", None)
        if conn_id:
            options["bellamy_conn_id"] = conn_id
        if getattr(task, "_bellamy_records_itself", False) and pending_row(task_instance) is None:
            # the operator's own decision is in its XCom; its try was not recorded (it failed early).
            # One whose write-back failed left its row: record_from_context writes that instead.
            decision = task_instance.xcom_pull(task_ids=task.task_id, key="bellamy_decision")
            if not decision:
                return
            options.update(
                job_type=decision.get("job_type"),
                scale_out=decision.get("chosen_scale_out"),
                properties=decision.get("context") or {},
                framework=decision.get("framework") or "spark",
            )
        record_from_context({"ti": task_instance, "task": task}, **options)
    except Exception:
        log.exception("Bellamy listener: recording %s failed", getattr(task_instance, "task_id", "?"))


class BellamyListener:
    """Task-instance hooks (Airflow's pluggy listener spec)."""

    @hookimpl
    def on_task_instance_success(self, previous_state: Any, task_instance: Any) -> None:
        _record(task_instance)

    @hookimpl
    def on_task_instance_failed(self, previous_state: Any, task_instance: Any, error: Any = None) -> None:
        _record(task_instance)


listener = BellamyListener()
