"""BellamyJobSensor in poke mode on the live Flink cluster: submit-then-sense, and bad job ids."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.hooks.flink import FlinkHook
from airflow_provider_bellamy.operators.flink import BellamyFlinkOperator
from airflow_provider_bellamy.sensors.job import BellamyJobSensor
from tests.fixtures.airflow import task_states, xcom_value
from tests.fixtures.airflow_db import run_dag_test
from tests.flink.conftest import WORDCOUNT

pytestmark = [pytest.mark.flink, pytest.mark.slow]

START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def test_sensor_arguments_are_checked_at_parse_time() -> None:
    with pytest.raises(InvalidInputError, match="job_id"):
        BellamyJobSensor(task_id="s")
    with pytest.raises(InvalidInputError, match="kind"):
        BellamyJobSensor(task_id="s", job_id="x", kind="yarn")
    with pytest.raises(InvalidInputError, match="endpoint"):
        BellamyJobSensor(task_id="s", job_id="app-1", kind="spark-master")
    with pytest.raises(InvalidInputError, match="endpoint"):
        BellamyJobSensor(task_id="s", job_id="app-1", kind="spark-master", endpoint="localhost:8080")


def test_submit_without_waiting_then_the_sensor_records_the_run(
    airflow_db, flink_cluster, flink_conn_id, bellamy_store, finished_wordcount, tmp_path, capfd
) -> None:
    from airflow.sdk import DAG

    unknown = uuid.uuid4().hex
    with DAG("flink_submit_then_sense", schedule=None, start_date=START, catchup=False) as dag:
        submit = BellamyFlinkOperator(
            task_id="submit",
            application=str(WORDCOUNT),
            application_args=["--lines", "30000", "--output", str(tmp_path / "counts")],
            job_type="flink_wordcount",
            properties={"lines": 30000},
            scale_outs=[3],
            flink_conn_id=flink_conn_id,
            wait_for_completion=False,
        )
        sense = BellamyJobSensor(
            task_id="sense",
            submit_task_id="submit",
            flink_conn_id=flink_conn_id,
            poke_interval=0.5,
            timeout=300,
        )
        submit >> sense
        # A job finished long ago: the first poke records it, at the parallelism Flink reports.
        BellamyJobSensor(
            task_id="sense_finished",
            job_id=finished_wordcount.job_id,
            job_type="flink_wordcount_adhoc",
            flink_conn_id=flink_conn_id,
            poke_interval=0.5,
        )
        BellamyJobSensor(task_id="sense_unknown", job_id=unknown, job_type="x", flink_conn_id=flink_conn_id)
    dr = run_dag_test(dag)
    logs = "".join(capfd.readouterr())
    assert task_states(dr) == {
        "submit": "success",
        "sense": "success",
        "sense_finished": "success",
        "sense_unknown": "failed",
    }, flink_cluster.logs_tail()
    assert f"job_id='{unknown}'" in logs and "no such job" in logs

    hook = FlinkHook(flink_conn_id)
    submitted = xcom_value(dr, "submit")
    runs = {r["task_id"]: r for r in bellamy_store.list_runs(limit=None)}
    # The submitting task recorded nothing; the sensor recorded the job with the decision.
    assert set(runs) == {"sense", "sense_finished"}
    job = hook.get_job(submitted["job_id"])
    assert set(job.vertex_parallelism.values()) == {3}
    run = runs["sense"]
    assert run["external_id"] == job.job_id and run["scale_out"] == 3
    assert run["runtime_s"] == job.runtime_s and run["queue_s"] == job.queue_ms / 1000
    assert run["job_type"] == "flink_wordcount" and run["decision_id"] == submitted["decision"]["decision_id"]
    assert run["context"] == {"lines": 30000.0}
    other = runs["sense_finished"]
    assert other["scale_out"] == 2 and other["runtime_s"] == finished_wordcount.runtime_s
