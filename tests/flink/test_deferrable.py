"""Deferrable waits hold no worker slot: shown with dag.test() against the live Flink cluster.

Airflow 3's ``dag.test()`` runs a deferred task's trigger inline: the task process returns
with a DeferTask message, the task instance is set DEFERRED in the metadata DB, and the trigger
then runs in the test process (as the triggerer would) before the task resumes in
``execute_complete``. The test watches the metadata DB's state changes and asks Flink's REST
API, at the moment the task instance became DEFERRED, what its job was doing.
"""

from __future__ import annotations

import datetime as dt

import pytest

from airflow_provider_bellamy.hooks.flink import FlinkHook
from airflow_provider_bellamy.operators.flink import BellamyFlinkOperator, deterministic_job_id
from airflow_provider_bellamy.sensors.job import BellamyJobSensor
from tests.fixtures.airflow_db import run_dag_test
from tests.flink.conftest import WORDCOUNT

pytestmark = [pytest.mark.flink, pytest.mark.slow]

START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def test_deferred_while_the_flink_job_runs_then_recorded(
    airflow_db, flink_cluster, flink_conn_id, bellamy_store, tmp_path, monkeypatch
) -> None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.sdk import DAG
    from airflow.utils.session import create_session

    conn_id, facade = "bellamy_default", bellamy_store
    hook = FlinkHook(flink_conn_id)
    seen: list[dict] = []
    real_set_state = TaskInstance.set_state

    def watching_set_state(self, state, *args, **kwargs):  # type: ignore[no-untyped-def]
        changed = real_set_state(self, state, *args, **kwargs)
        if state == "deferred":
            with create_session() as fresh:
                stored = fresh.get(TaskInstance, self.id).state
            job = hook.get_job(deterministic_job_id(self.dag_id, self.task_id, self.run_id, -1, 0))
            now = dt.datetime.now(dt.timezone.utc)
            seen.append({"task_id": self.task_id, "db_state": stored, "job": job, "at": now})
        return changed

    monkeypatch.setattr(TaskInstance, "set_state", watching_set_state)

    with DAG("flink_deferrable", schedule=None, start_date=START, catchup=False) as dag:
        submit = BellamyFlinkOperator(
            task_id="wordcount",
            application=str(WORDCOUNT),
            application_args=["--lines", "400000", "--output", str(tmp_path / "counts")],
            job_type="flink_wordcount",
            scale_outs=[2],
            flink_conn_id=flink_conn_id,
            bellamy_conn_id=conn_id,
            deferrable=True,
            poll_interval_s=0.5,
        )
        # A sensor on a job that has already finished completes without deferring.
        wait = BellamyJobSensor(
            task_id="sensor_after",
            submit_task_id="wordcount",
            flink_conn_id=flink_conn_id,
            record=False,
            deferrable=True,
            poke_interval=0.5,
        )
        submit >> wait
    dr = run_dag_test(dag)
    assert {ti.task_id: str(ti.state) for ti in dr.get_task_instances()} == {
        "wordcount": "success",
        "sensor_after": "success",
    }, flink_cluster.logs_tail()

    [deferred] = seen
    job = hook.get_job(deferred["job"].job_id)
    # When Airflow stored DEFERRED the task process had returned, and Flink was still running the job.
    assert deferred["db_state"] == "deferred"
    assert deferred["job"].state in ("INITIALIZING", "CREATED", "RUNNING")
    assert job.state == "FINISHED"
    assert job.start_time_ms / 1000 <= deferred["at"].timestamp() <= job.end_time_ms / 1000

    [run] = [r for r in facade.list_runs(limit=None) if r["framework"] == "flink"]
    assert run["external_id"] == job.job_id and run["scale_out"] == 2
    assert run["runtime_s"] == job.runtime_s and run["queue_s"] == job.queue_ms / 1000
