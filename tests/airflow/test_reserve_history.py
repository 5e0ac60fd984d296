"""``reserve: auto`` learns from Airflow's own task instances, and the example's deadline fits a
late scheduled run (issue 18, items 3 and 4), with ``dag.test()`` runs.

The sized task is the example pipeline's ``sort`` job (its templated deadline, ``reserve: auto``,
``default_task_reserve: 30s``) as a ``BellamySizingOperator``, followed by ``publish``, a task
the Bellamy store never hears of: only Airflow records how long it took.
"""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

import pytest

from tests.fixtures.airflow import EXAMPLES, task_states, xcom_value
from tests.fixtures.airflow_db import run_dag_test

DAG_ID = "test_bellamy_reserve_history"


def _publish_durations(dag_id: str) -> dict[str, float]:
    """run_id → duration of ``publish`` as Airflow recorded it in the metadata DB."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(TaskInstance.run_id, TaskInstance.duration).where(
                TaskInstance.dag_id == dag_id, TaskInstance.task_id == "publish"
            )
        ).all()
    return {run_id: float(duration) for run_id, duration in rows if duration is not None}


def _dag() -> Any:
    from airflow.sdk import DAG, task

    from airflow_provider_bellamy.config import load_pipeline_config
    from airflow_provider_bellamy.operators.sizing import BellamySizingOperator

    sort = load_pipeline_config(EXAMPLES / "pipelines" / "spark_sla.yaml").job("sort")
    with DAG(
        DAG_ID,
        schedule="0 5 * * *",
        start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
    ) as dag:
        size = BellamySizingOperator.from_config(sort, task_id="size")

        @task
        def publish() -> str:
            return "published"

        size >> publish()
    return dag


@pytest.mark.slow
def test_reserve_learns_downstream_durations_from_airflow_task_instances(
    airflow_db: str, bellamy_store: Any
) -> None:
    dag = _dag()
    now = dt.datetime.now(dt.timezone.utc)

    first = run_dag_test(dag, logical_date=now - dt.timedelta(minutes=3))
    assert task_states(first) == {"size": "success", "publish": "success"}
    target = xcom_value(first, "size")["target"]
    # nothing known about publish yet: the default, and the decision says so
    assert target["reserve_s"] == 30 and target["unknown_reserve_tasks"] == ["publish"]
    assert "default_task_reserve" in target["reserve_sources"]["publish"]

    second = run_dag_test(dag, logical_date=now - dt.timedelta(minutes=1))
    assert task_states(second) == {"size": "success", "publish": "success"}
    decision = xcom_value(second, "size")
    target = decision["target"]
    learned = _publish_durations(DAG_ID)[first.run_id]
    assert target["unknown_reserve_tasks"] == []
    assert target["reserve_s"] == pytest.approx(learned)  # publish's duration in the first run
    assert target["reserve_sources"]["publish"].endswith(
        "p90 of its last 1 successful Airflow task instances"
    )
    assert "Airflow task instances" in target["explanation"]
    assert not target["deadline_passed"]
    # dag.test() runs start now (run_after): the example deadline is 15 min after that
    assert 15 * 60 - learned - 300 < decision["target_s"] <= 15 * 60 - learned


def test_the_example_deadline_counts_from_when_a_late_scheduled_run_started() -> None:
    """Unpausing the example DAG schedules its last slot at once: run_after is 12 h old, the run
    starts now. (dag.test() cannot show this: it starts every run at its logical date.)"""
    from airflow.sdk import DAG
    from airflow.sdk.execution_time.context import MacrosAccessor

    from airflow_provider_bellamy.config import load_pipeline_config
    from airflow_provider_bellamy.operators.sizing import BellamySizingOperator

    sort = load_pipeline_config(EXAMPLES / "pipelines" / "spark_sla.yaml").job("sort")
    now = dt.datetime.now(dt.timezone.utc)
    for run_after, started in (
        (now - dt.timedelta(hours=12, minutes=12), now),  # late: unpaused hours after the slot
        (now - dt.timedelta(seconds=20), now - dt.timedelta(seconds=15)),  # on time
    ):
        with DAG("example_deadline", schedule=None, start_date=run_after) as dag:
            op = BellamySizingOperator.from_config(sort, task_id="size")
        dag_run = SimpleNamespace(run_after=run_after, start_date=started, logical_date=run_after)
        context: dict[str, Any] = {"dag_run": dag_run, "macros": MacrosAccessor(), "dag": dag, "task": op}
        op.render_template_fields(context)
        target = op.resolve_target(context)
        assert target.deadline == started + dt.timedelta(minutes=15)
        assert not target.deadline_passed and target.target_s is not None
        assert 15 * 60 - 300 < target.target_s <= 15 * 60  # nothing downstream here: no reserve


@pytest.mark.slow
def test_a_deadline_already_past_is_said_in_the_decision(airflow_db: str, bellamy_store: Any) -> None:
    from airflow.sdk import DAG

    from airflow_provider_bellamy.operators.sizing import BellamySizingOperator

    start = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    with DAG("test_bellamy_fixed_sla", schedule=None, start_date=start) as dag:
        BellamySizingOperator(
            task_id="size",
            job_type="sort",
            scale_outs=[1, 2, 3],
            # a wall-clock SLA: 15 min after the slot, however late the run starts
            deadline="{{ (dag_run.run_after + macros.timedelta(minutes=15)).isoformat() }}",
            on_infeasible="run-max",
        )
    late = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=12)
    run = run_dag_test(dag, logical_date=late, run_after=late)
    decision = xcom_value(run, "size")
    assert decision["target"]["deadline_passed"] is True
    assert decision["target"]["explanation"].startswith("the deadline ")
    assert "had already passed when this task started" in decision["target"]["explanation"]
    assert decision["reason"].startswith("the deadline ") and "had already passed" in decision["reason"]
    assert decision["chosen_scale_out"] == 3
