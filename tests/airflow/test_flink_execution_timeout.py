"""A Flink task stopped by Airflow's ``execution_timeout`` while its job runs on
(``cancel_on_kill=False``) is recorded once, by the retry that reattaches to the job and sees it
end, as a ``job_timeout_s`` give-up is. Until session 31 (prod31) the listener recorded the timed-out
try as a ``failed`` run of the task's wall time (a job that did not fail), beside the retry's row:
two rows for one job."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.fixtures.airflow import task_states
from tests.fixtures.fake_flink import START_MS, FakeJobManager, JobAnswer, flink_dag


def _running_until_the_retry(jobmanager: FakeJobManager, *, down_until_retry: bool = False) -> JobAnswer:
    """The job runs until the next try asks for the cluster's slots (the retry's first request),
    then reports FINISHED at parallelism 2 after 30 s; ``down_until_retry``: 503 until then."""

    def job(job_id: str) -> tuple[int, dict[str, Any]]:
        done = jobmanager.asked_since_submission("/overview")
        if down_until_retry and not done:
            return 503, {"errors": ["JobManager restarting"]}
        body: dict[str, Any] = {"state": "FINISHED" if done else "RUNNING"}
        body["vertices"] = [{"name": "v", "parallelism": 2}]
        body["timestamps"] = {"CREATED": START_MS, "RUNNING": START_MS + 1_000}
        body["start-time"] = START_MS
        if done:
            body.update({"end-time": START_MS + 30_000, "duration": 30_000})
        return 200, body

    return job


def _one_row_by_the_retry(bellamy_store: Any, jobmanager: FakeJobManager) -> list[dict[str, Any]]:
    assert len(jobmanager.submitted) == 1  # the retry reattached
    runs = bellamy_store.list_runs("wc", limit=None)
    assert [(r["try_number"], r["status"], r["external_id"]) for r in runs] == [
        (2, "success", jobmanager.submitted[0])
    ]
    return runs


@pytest.mark.slow
def test_a_try_stopped_by_execution_timeout_leaves_its_running_job_to_the_retry(
    airflow_db: str, bellamy_store: Any, fake_jobmanager: FakeJobManager
) -> None:
    from tests.fixtures.airflow_db import run_dag_test

    fake_jobmanager.job = _running_until_the_retry(fake_jobmanager)  # runs past try 1's execution_timeout
    with flink_dag("test_flink_execution_timeout") as dag:
        fake_jobmanager.operator(
            poll_interval_s=0.2,
            cancel_on_kill=False,
            execution_timeout=dt.timedelta(seconds=10),
            retries=1,
            retry_delay=dt.timedelta(seconds=0),
        )
    dr = run_dag_test(dag)
    assert task_states(dr) == {"wc": "success"}
    runs = _one_row_by_the_retry(bellamy_store, fake_jobmanager)
    assert runs[0]["runtime_s"] == pytest.approx(29.0) and runs[0]["scale_out"] == 2


@pytest.mark.slow
def test_a_deferred_wait_past_the_unreachable_grace_leaves_the_running_job_to_the_retry(
    airflow_db: str, bellamy_store: Any, fake_jobmanager: FakeJobManager
) -> None:
    """The same for the trigger's ``unreachable`` event: the JobManager answers 503 past the grace,
    then (the retry) FINISHED; one row, the retry's."""
    from tests.fixtures.airflow_db import run_dag_test

    fake_jobmanager.job = _running_until_the_retry(fake_jobmanager, down_until_retry=True)
    with flink_dag("test_flink_deferred_unreachable") as dag:
        fake_jobmanager.operator(
            poll_interval_s=0.2,
            deferrable=True,
            unreachable_grace_s=1,
            retries=1,
            retry_delay=dt.timedelta(seconds=0),
        )
    dr = run_dag_test(dag)
    assert task_states(dr) == {"wc": "success"}
    _one_row_by_the_retry(bellamy_store, fake_jobmanager)
