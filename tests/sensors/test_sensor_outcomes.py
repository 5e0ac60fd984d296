"""How BellamyJobSensor ends when something other than the job goes wrong: a deferred wait that
times out ends as a poke-mode timeout does (``soft_fail=True`` skips the task); a store that
cannot take the finished job's record is a warning, as in the operators, and the task ends as
the job did."""

from __future__ import annotations

import socket
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowSensorTimeout, AirflowSkipException

from airflow_provider_bellamy.exceptions import JobFailedError
from airflow_provider_bellamy.hooks.job_status import JobStatus
from airflow_provider_bellamy.sensors.job import BellamyJobSensor
from tests.fixtures.airflow import connection_json

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


def _status(state: str) -> JobStatus:
    return JobStatus(
        kind="flink",
        job_id=JOB_ID,
        state=state,
        terminal=True,
        succeeded=state == "FINISHED",
        start_time_ms=1_700_000_000_000,
        end_time_ms=1_700_000_042_000,
        duration_ms=42_000,
        parallelism=2,
    )


@pytest.fixture
def store_down(monkeypatch: pytest.MonkeyPatch) -> str:
    """A ``bellamy_down`` connection to a port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql+psycopg://bellamy@127.0.0.1:{port}/bellamy"
    monkeypatch.setenv(
        "AIRFLOW_CONN_BELLAMY_DOWN",
        connection_json("bellamy", extra={"store_url": url, "connect_timeout": 2}),
    )
    return "bellamy_down"


def test_a_store_down_when_the_job_ends_is_a_warning_and_the_sensor_succeeds(
    store_down: str, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    sensor = _sensor(bellamy_conn_id=store_down)
    out = sensor._complete(_context(sensor), _status("FINISHED"))
    assert out["state"] == "FINISHED" and out["run_row_id"] is None
    logged = "\n".join((caplog.text, *capfd.readouterr()))
    assert f"could not record flink job {JOB_ID} (StoreError)" in logged, logged


def test_a_store_down_does_not_hide_a_failed_job(store_down: str) -> None:
    sensor = _sensor(bellamy_conn_id=store_down)
    with pytest.raises(JobFailedError):
        sensor._complete(_context(sensor), _status("FAILED"))
