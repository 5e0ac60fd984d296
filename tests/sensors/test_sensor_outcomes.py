"""How BellamyJobSensor ends when something other than the job goes wrong: a deferred wait that
times out ends as a poke-mode timeout does (``soft_fail=True`` skips the task)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowSensorTimeout, AirflowSkipException

from airflow_provider_bellamy.sensors.job import BellamyJobSensor

JOB_ID = "a" * 32


def _sensor(**kwargs: Any) -> BellamyJobSensor:
    return BellamyJobSensor(
        task_id="wait",
        job_id=JOB_ID,
        kind="flink",
        endpoint="http://127.0.0.1:8081",
        job_type="wc",
        scale_out=2,
        **kwargs,
    )


def _context(sensor: BellamyJobSensor) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="d", task_id="wait", run_id="manual__1", map_index=-1, try_number=1)
    return {"ti": ti, "task": sensor}


TIMEOUT_EVENT = {"status": "timeout", "job": {"kind": "flink", "job_id": JOB_ID, "state": "RUNNING"}}


@pytest.mark.parametrize(
    ("soft_fail", "raised"), [(False, AirflowSensorTimeout), (True, AirflowSkipException)]
)
def test_a_deferred_wait_that_times_out_ends_as_a_poke_mode_timeout(
    soft_fail: bool, raised: type[Exception]
) -> None:
    sensor = _sensor(deferrable=True, timeout=60, soft_fail=soft_fail)
    # what the task runner calls with the trigger's event
    with pytest.raises(raised):
        sensor.resume_execution("execute_complete", {"event": TIMEOUT_EVENT}, _context(sensor))
