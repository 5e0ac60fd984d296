"""``BellamyJobSensor`` records a Flink job at the parallelism the job ran at, as the Flink operator
does (docs/airflow.md: ``scale_out`` = the vertices' parallelism, operator, sensor and trigger).
Until session 31 (prod31) the sensor recorded the parallelism the submitting task asked for (its
XCom, then the decision) ahead of the cluster's: a job Flink ran at 2 (adaptive batch parallelism,
fewer slots) was stored as a run at 4."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.airflow import connection_json, task_states
from tests.fixtures.http import json_server

CONTEXT = {"machine_type": "flink-m5", "environment": "test"}
JOB_ID = "a" * 32


@pytest.fixture
def jobmanager() -> Iterator[dict[str, Any]]:
    """A Flink JobManager's REST API on 127.0.0.1: the submitted job, FINISHED at parallelism 2
    (60 s, 5 s of it before RUNNING)."""
    state: dict[str, Any] = {"submitted": None}
    start_ms = 1_764_000_000_000

    def answer(path: str, client: tuple[str, int]) -> tuple[int, Any]:
        if path == "/overview":
            return 200, {"slots-available": 4, "slots-total": 4, "taskmanagers": 1}
        job_id = state["submitted"]
        if job_id and path == f"/jobs/{job_id}":
            return 200, {
                "jid": job_id,
                "name": "wc",
                "state": "FINISHED",
                "start-time": start_ms,
                "end-time": start_ms + 60_000,
                "duration": 60_000,
                "timestamps": {
                    "CREATED": start_ms,
                    "RUNNING": start_ms + 5_000,
                    "FINISHED": start_ms + 60_000,
                },
                "vertices": [{"name": "source", "parallelism": 2}, {"name": "sink", "parallelism": 2}],
            }
        if job_id and path == f"/jobs/{job_id}/exceptions":
            return 200, {}
        return 404, {"errors": ["not found"]}

    with json_server(answer) as url:
        state["url"] = url
        yield state


@pytest.mark.slow
def test_the_sensor_records_the_parallelism_the_flink_job_ran_at(
    airflow_db: str,
    bellamy_store: Any,
    monkeypatch: pytest.MonkeyPatch,
    jobmanager: dict[str, Any],
    tmp_path: Any,
) -> None:
    from airflow.sdk import DAG

    from airflow_provider_bellamy.hooks.flink import FlinkHook
    from airflow_provider_bellamy.operators.flink import BellamyFlinkOperator
    from airflow_provider_bellamy.sensors.job import BellamyJobSensor
    from tests.fixtures.airflow_db import run_dag_test

    monkeypatch.setenv("AIRFLOW_CONN_FLINK_DEFAULT", connection_json("http", host=jobmanager["url"]))

    def submit(self: Any, application: str, parallelism: int, *, job_id: str | None = None, **kw: Any) -> str:
        jobmanager["submitted"] = job_id
        return str(job_id)

    monkeypatch.setattr(FlinkHook, "submit", submit)
    application = tmp_path / "wc.py"
    application.write_text("print('wc')\n")
    with DAG(
        "test_sensor_flink_parallelism",
        schedule=None,
        start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
    ) as dag:
        submit_task = BellamyFlinkOperator(
            task_id="submit",
            application=str(application),
            job_type="wc",
            properties=CONTEXT,
            scale_outs=[4],
            wait_for_completion=False,
        )
        wait = BellamyJobSensor(task_id="wait", submit_task_id="submit", poke_interval=0.1, timeout=60)
        submit_task >> wait
    dr = run_dag_test(dag)
    assert task_states(dr) == {"submit": "success", "wait": "success"}
    (run,) = bellamy_store.list_runs("wc", limit=None)
    assert run["task_id"] == "wait" and run["external_id"] == jobmanager["submitted"]
    assert run["scale_out"] == 2  # what Flink ran it at (4 before the fix)
    assert run["requested_scale_out"] == 4  # what sizing asked for
    assert run["runtime_s"] == pytest.approx(55.0) and run["queue_s"] == pytest.approx(5.0)
