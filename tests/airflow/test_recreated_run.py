"""A DAG run deleted and created again under the same run_id (a scheduled run deleted in the UI and
re-run by the scheduler, ``airflow dags trigger --run-id X`` after deleting X, ``dag.test()`` at the
same logical date) starts again at try 1: its runtime is its own run, not the old run's try 1
recorded twice. Airflow tells the two apart by the task instance try's id (``ti.id``, a UUID each
try), which the store keeps (``ti_id``, revision 0006)."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest

from tests.fixtures.airflow import task_states, xcom_value
from tests.fixtures.airflow_db import run_dag_test

CONTEXT = {"machine_type": "emr-m5", "cores": 4, "data_size_mb": 512.0}
LOGICAL_DATE = dt.datetime(2025, 3, 1, tzinfo=dt.timezone.utc)


def _work() -> None:
    import time

    time.sleep(0.1)  # a measurable runtime


def _ti_ids(dag_run: Any, task_id: str) -> list[str]:
    """The ids of ``task_id``'s tries in a finished run (the current try and its history)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        ids = []
        for model in (TaskInstanceHistory, TaskInstance):
            id_column = model.task_instance_id if model is TaskInstanceHistory else model.id
            ids += [
                str(v)
                for v in session.scalars(
                    select(id_column).where(
                        model.dag_id == dag_run.dag_id,
                        model.run_id == dag_run.run_id,
                        model.task_id == task_id,
                    )
                )
            ]
        return ids


@pytest.mark.slow
def test_a_recreated_run_with_the_same_run_id_is_recorded_as_its_own_run(
    airflow_db: str, bellamy_store: Any, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG

    from airflow_provider_bellamy.callbacks import record_runtime
    from airflow_provider_bellamy.operators.sizing import BellamySizingOperator

    with DAG("test_bellamy_recreated_run", schedule=None, start_date=LOGICAL_DATE):
        size = BellamySizingOperator(
            task_id="size",
            job_type="etl",
            properties=CONTEXT,
            scale_outs=[2, 4],
            default_scale_out=4,  # no model: the default, a decision stored each run
            sized_task_id="work",
        )
        work = PythonOperator(
            task_id="work", python_callable=_work, on_success_callback=[record_runtime, record_runtime]
        )
        size >> work
    dag = work.dag

    first = run_dag_test(dag, run_after=LOGICAL_DATE, logical_date=LOGICAL_DATE)
    assert task_states(first)["work"] == "success"
    first_decision = xcom_value(first, "size")
    [first_ti] = _ti_ids(first, "work")
    caplog.clear()
    capfd.readouterr()
    with caplog.at_level(logging.INFO, logger="airflow_provider_bellamy"):
        # dag.test() at the same logical date deletes the DagRun and creates it again: same run_id
        second = run_dag_test(dag, run_after=LOGICAL_DATE, logical_date=LOGICAL_DATE)
    assert second.run_id == first.run_id
    assert task_states(second)["work"] == "success"
    second_decision = xcom_value(second, "size")
    [second_ti] = _ti_ids(second, "work")
    assert second_ti != first_ti  # Airflow's identity of the re-created run's try

    runs = sorted(bellamy_store.list_runs("etl", limit=None), key=lambda r: r["id"])
    # both runs stored, each its own row: the first kept, the second not dropped as its duplicate
    assert [(r["run_id"], r["try_number"]) for r in runs] == [(first.run_id, 1), (first.run_id, 1)]
    assert [r.get("ti_id") for r in runs] == [first_ti, second_ti]
    old, new = runs
    assert old["decision_id"] == first_decision["decision_id"]
    assert new["decision_id"] == second_decision["decision_id"] != first_decision["decision_id"]
    # each decision leads to its own run (before, the second one linked to the first run's row)
    decisions = {d["id"]: d for d in bellamy_store.list_decisions(limit=None)}
    assert decisions[first_decision["decision_id"]]["run_row_id"] == old["id"]
    assert decisions[second_decision["decision_id"]]["run_row_id"] == new["id"]
    assert decisions[second_decision["decision_id"]]["ti_id"] is not None
    assert (
        decisions[second_decision["decision_id"]]["ti_id"]
        != decisions[first_decision["decision_id"]]["ti_id"]
    )
    # the log tells what happened: the second run recorded as a new row, not "already recorded"
    out, err = capfd.readouterr()  # dag.test() task logs reach the captured output, not only caplog
    text = "\n".join((caplog.text, out, err))
    assert f"(run row {new['id']}, via callback)" in text
    assert "already recorded" not in text
