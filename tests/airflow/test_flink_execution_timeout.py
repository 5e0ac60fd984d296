"""A Flink task stopped by Airflow's ``execution_timeout`` while its job runs on
(``cancel_on_kill=False``) is recorded once, by the retry that reattaches to the job and sees it
end, as a ``job_timeout_s`` give-up is. Until session 31 (prod31) the listener recorded the timed-out
try as a ``failed`` run of the task's wall time (a job that did not fail), beside the retry's row:
two rows for one job."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from tests.fixtures.airflow import connection_json, task_states
from tests.fixtures.http import json_server

CONTEXT = {"machine_type": "flink-m5", "environment": "test"}


@pytest.fixture
def jobmanager() -> Iterator[dict[str, Any]]:
    """A JobManager's REST API on 127.0.0.1 whose one job runs until the next try asks for the
    cluster's slots (the retry's first request), then reports FINISHED at parallelism 2."""
    state: dict[str, Any] = {"submitted": [], "done": False, "down_until_retry": False}

    def answer(path: str, client: tuple[str, int]) -> tuple[int, Any]:
        if path == "/overview":
            state["done"] = bool(state["submitted"])
            return 200, {"slots-available": 4, "slots-total": 4, "taskmanagers": 1}
        for job_id in state["submitted"]:
            if path == f"/jobs/{job_id}" and state["down_until_retry"] and not state["done"]:
                return 503, {"errors": ["JobManager restarting"]}
            if path == f"/jobs/{job_id}":
                start_ms = 1_764_000_000_000
                done = state["done"]
                body = {"jid": job_id, "name": "wc", "state": "FINISHED" if done else "RUNNING"}
                body["vertices"] = [{"name": "v", "parallelism": 2}]
                body["timestamps"] = {"CREATED": start_ms, "RUNNING": start_ms + 1_000}
                body["start-time"] = start_ms
                if done:
                    body.update({"end-time": start_ms + 30_000, "duration": 30_000})
                return 200, body
            if path == f"/jobs/{job_id}/exceptions":
                return 200, {}
        return 404, {"errors": ["not found"]}

    with json_server(answer) as url:
        state["url"] = url
        yield state


@pytest.mark.slow
def test_a_try_stopped_by_execution_timeout_leaves_its_running_job_to_the_retry(
    airflow_db: str,
    bellamy_store: Any,
    monkeypatch: pytest.MonkeyPatch,
    jobmanager: dict[str, Any],
    tmp_path: Any,
) -> None:
    from airflow.sdk import DAG

    from airflow_provider_bellamy.hooks.flink import FlinkHook
    from airflow_provider_bellamy.operators.flink import BellamyFlinkOperator
    from tests.fixtures.airflow_db import run_dag_test

    monkeypatch.setenv("AIRFLOW_CONN_FLINK_DEFAULT", connection_json("http", host=jobmanager["url"]))

    def submit(self: Any, application: str, parallelism: int, *, job_id: str | None = None, **kw: Any) -> str:
        jobmanager["submitted"].append(job_id)  # runs past try 1's execution_timeout
        return str(job_id)

    monkeypatch.setattr(FlinkHook, "submit", submit)
    application = tmp_path / "wc.py"
    application.write_text("print('wc')\n")
    with DAG(
        "test_flink_execution_timeout",
        schedule=None,
        start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
    ) as dag:
        BellamyFlinkOperator(
            task_id="wc",
            application=str(application),
            job_type="wc",
            properties=CONTEXT,
            scale_outs=[2],
            poll_interval_s=0.2,
            cancel_on_kill=False,
            execution_timeout=dt.timedelta(seconds=10),
            retries=1,
            retry_delay=dt.timedelta(seconds=0),
        )
    dr = run_dag_test(dag)
    assert task_states(dr) == {"wc": "success"}
    assert len(jobmanager["submitted"]) == 1  # the retry reattached
    runs = bellamy_store.list_runs("wc", limit=None)
    assert [(r["try_number"], r["status"], r["external_id"]) for r in runs] == [
        (2, "success", jobmanager["submitted"][0])
    ]
    assert runs[0]["runtime_s"] == pytest.approx(29.0) and runs[0]["scale_out"] == 2


@pytest.mark.slow
def test_a_deferred_wait_past_the_unreachable_grace_leaves_the_running_job_to_the_retry(
    airflow_db: str,
    bellamy_store: Any,
    monkeypatch: pytest.MonkeyPatch,
    jobmanager: dict[str, Any],
    tmp_path: Any,
) -> None:
    """The same for the trigger's ``unreachable`` event: the JobManager answers 503 past the grace,
    then (the retry) FINISHED; one row, the retry's."""
    from airflow.sdk import DAG

    from airflow_provider_bellamy.hooks.flink import FlinkHook
    from airflow_provider_bellamy.operators.flink import BellamyFlinkOperator
    from tests.fixtures.airflow_db import run_dag_test

    monkeypatch.setenv("AIRFLOW_CONN_FLINK_DEFAULT", connection_json("http", host=jobmanager["url"]))
    jobmanager["down_until_retry"] = True

    def submit(self: Any, application: str, parallelism: int, *, job_id: str | None = None, **kw: Any) -> str:
        jobmanager["submitted"].append(job_id)
        return str(job_id)

    monkeypatch.setattr(FlinkHook, "submit", submit)
    application = tmp_path / "wc.py"
    application.write_text("print('wc')\n")
    with DAG(
        "test_flink_deferred_unreachable",
        schedule=None,
        start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
    ) as dag:
        BellamyFlinkOperator(
            task_id="wc",
            application=str(application),
            job_type="wc",
            properties=CONTEXT,
            scale_outs=[2],
            poll_interval_s=0.2,
            deferrable=True,
            unreachable_grace_s=1,
            retries=1,
            retry_delay=dt.timedelta(seconds=0),
        )
    dr = run_dag_test(dag)
    assert task_states(dr) == {"wc": "success"}
    assert len(jobmanager["submitted"]) == 1  # the retry reattached
    runs = bellamy_store.list_runs("wc", limit=None)
    assert [(r["try_number"], r["status"], r["external_id"]) for r in runs] == [
        (2, "success", jobmanager["submitted"][0])
    ]
