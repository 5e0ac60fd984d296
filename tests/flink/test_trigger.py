"""BellamyJobTrigger: serialisation and real asynchronous runs against the live Flink cluster."""

from __future__ import annotations

import asyncio
import datetime as dt
import importlib
import socket
import uuid

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.hooks.job import JobStatusHook
from airflow_provider_bellamy.triggers.job import BellamyJobTrigger, JobStatus

pytestmark = [pytest.mark.flink]


def _run(trigger: BellamyJobTrigger, timeout_s: float = 120) -> list[dict]:
    async def collect() -> list[dict]:
        return [event.payload async for event in trigger.run()]

    return asyncio.run(asyncio.wait_for(collect(), timeout_s))


def _roundtrip(trigger: BellamyJobTrigger) -> BellamyJobTrigger:
    """What the triggerer does: import the class by path and build it from the kwargs."""
    path, kwargs = trigger.serialize()
    module, _, name = path.rpartition(".")
    clone = getattr(importlib.import_module(module), name)(**kwargs)
    assert clone.serialize() == (path, kwargs)
    return clone


def test_serialize_round_trips_every_argument() -> None:
    trigger = BellamyJobTrigger(
        kind="spark-master",
        job_id="app-20260101000000-0001",
        endpoint="http://127.0.0.1:8080/",
        poll_interval_s=3,
        deadline_at="2030-01-01T00:00:00+00:00",
        unreachable_grace_s=7,
        request_timeout_s=4,
    )
    path, kwargs = trigger.serialize()
    assert path == "airflow_provider_bellamy.triggers.job.BellamyJobTrigger"
    assert kwargs == {
        "kind": "spark-master",
        "job_id": "app-20260101000000-0001",
        "endpoint": "http://127.0.0.1:8080",
        "poll_interval_s": 3.0,
        "deadline_at": "2030-01-01T00:00:00+00:00",
        "unreachable_grace_s": 7.0,
        "request_timeout_s": 4.0,
    }
    _roundtrip(trigger)


def test_bad_trigger_arguments() -> None:
    with pytest.raises(InvalidInputError, match="kind"):
        BellamyJobTrigger(kind="yarn", job_id="x", endpoint="http://127.0.0.1:1")
    with pytest.raises(InvalidInputError, match="endpoint"):
        BellamyJobTrigger(kind="flink", job_id="0" * 32, endpoint="127.0.0.1:8081")
    with pytest.raises(InvalidInputError, match="deadline_at"):
        BellamyJobTrigger(kind="flink", job_id="0" * 32, endpoint="http://127.0.0.1:1", deadline_at="soon")


def test_trigger_reports_a_finished_job_with_its_rest_duration(flink_cluster, finished_wordcount) -> None:
    job_id, url = finished_wordcount.job_id, flink_cluster.rest_url
    trigger = _roundtrip(BellamyJobTrigger(kind="flink", job_id=job_id, endpoint=url, poll_interval_s=0.2))
    [event] = _run(trigger)
    assert event["status"] == "done"
    status = JobStatus.from_dict(event["job"])
    assert status.state == "FINISHED" and status.succeeded and status.terminal
    assert status.duration_ms == finished_wordcount.duration_ms
    # the time it ran: Flink's duration less the wait before RUNNING
    assert status.runtime_s == finished_wordcount.runtime_s
    assert status.queue_s == finished_wordcount.queue_ms / 1000
    assert finished_wordcount.running_time_ms is not None
    assert status.parallelism == 2
    start_ms = finished_wordcount.start_time_ms
    assert status.started_at == dt.datetime.fromtimestamp(start_ms / 1000, dt.timezone.utc)
    # Blocking and asynchronous clients agree.
    assert JobStatusHook("flink", url).get_status(job_id) == status
    assert asyncio.run(JobStatusHook("flink", url).a_get_status(job_id)) == status


def test_trigger_unknown_job_id_is_an_error_event(flink_cluster) -> None:
    unknown = uuid.uuid4().hex
    [event] = _run(BellamyJobTrigger(kind="flink", job_id=unknown, endpoint=flink_cluster.rest_url))
    assert event["status"] == "error" and event["error_type"] == "invalid"
    assert unknown in event["error"] and flink_cluster.rest_url in event["error"]


def test_trigger_gives_up_on_an_unreachable_endpoint_after_the_grace() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    trigger = BellamyJobTrigger(
        kind="flink", job_id="0" * 32, endpoint=url, poll_interval_s=0.1, unreachable_grace_s=0.5
    )
    [event] = _run(trigger, timeout_s=30)
    assert event["status"] == "error" and event["error_type"] == "unreachable"
    assert url in event["error"]


def test_trigger_finished_job_wins_over_a_past_deadline(flink_cluster, finished_wordcount) -> None:
    # The job is checked before the deadline: a finished job is reported, not a timeout.
    past = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)).isoformat()
    [event] = _run(
        BellamyJobTrigger(
            kind="flink", job_id=finished_wordcount.job_id, endpoint=flink_cluster.rest_url, deadline_at=past
        )
    )
    assert event["status"] == "done"
