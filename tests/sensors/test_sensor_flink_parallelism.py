"""``BellamyJobSensor`` records a Flink job at the parallelism the job ran at, as the Flink operator
does (docs/airflow.md: ``scale_out`` = the vertices' parallelism, operator, sensor and trigger).
Until session 31 (prod31) the sensor recorded the parallelism the submitting task asked for (its
XCom, then the decision) ahead of the cluster's: a job Flink ran at 2 (adaptive batch parallelism,
fewer slots) was stored as a run at 4."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures.airflow import task_states
from tests.fixtures.fake_flink import START_MS, FakeJobManager, flink_dag


def _finished_at_parallelism_2(job_id: str) -> tuple[int, dict[str, Any]]:
    """FINISHED at parallelism 2 (60 s, 5 s of it before RUNNING)."""
    return 200, {
        "state": "FINISHED",
        "start-time": START_MS,
        "end-time": START_MS + 60_000,
        "duration": 60_000,
        "timestamps": {"CREATED": START_MS, "RUNNING": START_MS + 5_000, "FINISHED": START_MS + 60_000},
        "vertices": [{"name": "source", "parallelism": 2}, {"name": "sink", "parallelism": 2}],
    }


@pytest.mark.slow
def test_the_sensor_records_the_parallelism_the_flink_job_ran_at(
    airflow_db: str, bellamy_store: Any, fake_jobmanager: FakeJobManager
) -> None:
    from airflow_provider_bellamy.sensors.job import BellamyJobSensor
    from tests.fixtures.airflow_db import run_dag_test

    fake_jobmanager.job = _finished_at_parallelism_2
    with flink_dag("test_sensor_flink_parallelism") as dag:
        submit_task = fake_jobmanager.operator(task_id="submit", scale_outs=[4], wait_for_completion=False)
        wait = BellamyJobSensor(task_id="wait", submit_task_id="submit", poke_interval=0.1, timeout=60)
        submit_task >> wait
    dr = run_dag_test(dag)
    assert task_states(dr) == {"submit": "success", "wait": "success"}
    (run,) = bellamy_store.list_runs("wc", limit=None)
    assert run["task_id"] == "wait" and fake_jobmanager.submitted == [run["external_id"]]
    assert run["scale_out"] == 2  # what Flink ran it at (4 before the fix)
    assert run["requested_scale_out"] == 4  # what sizing asked for
    assert run["runtime_s"] == pytest.approx(55.0) and run["queue_s"] == pytest.approx(5.0)
