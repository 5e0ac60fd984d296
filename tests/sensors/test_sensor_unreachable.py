"""One rule in every mode of ``BellamyJobSensor`` for a status endpoint that refuses connections
or answers something that is no status (a Flink JobManager restarting, a proxy's page in front of
it): the sensor keeps waiting, a warning a poke, until that has lasted ``unreachable_grace_s``, then
fails with the endpoint's error, the same class and message in poke, reschedule and deferrable
mode. An unknown job id still fails at once.

The endpoint is a real HTTP server on 127.0.0.1 answering as a JobManager's ``GET /jobs/<id>``
does, from a list the test gives it (nothing listening on the port first: a refused connection).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import PokeReturnValue
from airflow.sdk.exceptions import TaskDeferred

from airflow_provider_bellamy.exceptions import (
    InvalidInputError,
    JobEndpointUnreachableError,
    UnknownJobIdError,
)
from airflow_provider_bellamy.sensors.job import UNREACHABLE_STATE_KEY, BellamyJobSensor
from airflow_provider_bellamy.triggers.job import BellamyJobTrigger, error_from_event
from tests.fixtures.airflow import task_state_store, task_states
from tests.fixtures.airflow_db import run_dag_test
from tests.fixtures.http import json_server

JOB_ID = "a" * 32
JOB = {"jid": JOB_ID, "name": "wc", "start-time": 1_000, "vertices": [{"name": "src", "parallelism": 3}]}
RUNNING = {**JOB, "state": "RUNNING", "end-time": -1, "duration": 5_000}
FINISHED = {**JOB, "state": "FINISHED", "end-time": 31_000, "duration": 30_000}
# what a proxy in front of a restarting JobManager hands on: a page, not a job (JobAnswerUnparsedError,
# a JobEndpointUnreachableError: every wait rides it out as it does a refused connection)
PROXY_PAGE = (200, "<html>502 Bad Gateway</html>")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def jobmanager(answers: list[tuple[int, Any]], port: int = 0) -> Iterator[tuple[str, list[str]]]:
    """A JobManager whose n-th answer (from 0) is ``answers[n]``, the last one repeated; yields
    its URL and the paths it was asked."""
    asked: list[str] = []
    lock = threading.Lock()

    def answer(path: str, client: tuple[str, int]) -> tuple[int, Any]:
        with lock:
            asked.append(path)
            return answers[min(len(asked), len(answers)) - 1]

    with json_server(answer, port=port) as url:
        yield url, asked


def _sensor(endpoint: str, **kwargs: Any) -> BellamyJobSensor:
    return BellamyJobSensor(
        task_id="wait", job_id=JOB_ID, kind="flink", endpoint=endpoint, record=False, **kwargs
    )


def _context(sensor: BellamyJobSensor) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="d", task_id="wait", run_id="manual__1", map_index=-1, try_number=1)
    return {"ti": ti, "task": sensor}


def test_a_poke_rides_out_a_refused_connection_and_a_proxys_page_until_the_job_ends(
    capsys: pytest.CaptureFixture[str],
) -> None:
    port = _closed_port()
    sensor = _sensor(f"http://127.0.0.1:{port}", unreachable_grace_s=60)
    context = _context(sensor)
    assert sensor.poke(context) is False  # refused: nothing listens yet
    with jobmanager([PROXY_PAGE, (502, "Bad Gateway"), (200, RUNNING), (200, FINISHED)], port=port) as (
        _,
        asked,
    ):
        assert [sensor.poke(context) for _ in range(3)] == [False, False, False]
        done = sensor.poke(context)
    assert isinstance(done, PokeReturnValue) and done.is_done
    assert done.xcom_value["state"] == "FINISHED" and done.xcom_value["duration_ms"] == 30_000
    assert len(asked) == 4
    # one warning per failed poke, naming the endpoint and the grace
    warned = [
        line for line in capsys.readouterr().out.splitlines() if "asking again for up to 60.0 s" in line
    ]
    assert len(warned) == 3, warned
    assert all(f"127.0.0.1:{port}" in line for line in warned)


def test_a_poke_mode_wait_ends_as_the_job_did_after_garbled_answers() -> None:
    answers = [PROXY_PAGE, PROXY_PAGE, (503, "restarting"), (200, RUNNING), (200, FINISHED)]
    with jobmanager(answers) as (url, asked):
        sensor = _sensor(url, poke_interval=0.01, timeout=60, unreachable_grace_s=60)
        out = sensor.execute(_context(sensor))
    assert out["state"] == "FINISHED" and out["parallelism"] == 3
    assert len(asked) == 5


def _trigger_events(url: str, grace_s: float) -> list[dict[str, Any]]:
    trigger = BellamyJobTrigger(
        kind="flink", job_id=JOB_ID, endpoint=url, poll_interval_s=0.01, unreachable_grace_s=grace_s
    )

    async def collect() -> list[dict[str, Any]]:
        return [dict(event.payload) async for event in trigger.run()]

    return asyncio.run(collect())


@contextmanager
def _endpoint(how: str) -> Iterator[str]:
    if how == "refused":
        yield f"http://127.0.0.1:{_closed_port()}"
    else:
        with jobmanager([PROXY_PAGE]) as (url, _):
            yield url


@pytest.mark.parametrize("how", ["refused", "garbled"])
def test_past_the_grace_every_mode_fails_with_the_same_named_error(how: str) -> None:
    with _endpoint(how) as url:
        sensor = _sensor(url, poke_interval=0.01, timeout=60, unreachable_grace_s=0.05)
        with pytest.raises(JobEndpointUnreachableError) as poked:
            sensor.execute(_context(sensor))
        (event,) = _trigger_events(url, 0.05)
        deferred = _sensor(url, deferrable=True, unreachable_grace_s=0.05)
        with pytest.raises(JobEndpointUnreachableError) as resumed:
            deferred.resume_execution("execute_complete", {"event": event}, _context(deferred))
    assert type(poked.value) is type(resumed.value) is type(error_from_event(event, url))
    # one message shape (httpx words a refusal its own way blocking and asyncio), not the endpoint's
    # error wrapped in itself as when an event carried its whole text
    assert str(poked.value).split(": ")[0] == str(resumed.value).split(": ")[0]
    assert str(poked.value).count(url) == str(resumed.value).count(url) == 1, (poked.value, resumed.value)
    if how == "garbled":
        assert str(poked.value) == str(resumed.value)


def test_no_grace_fails_the_first_refused_poke() -> None:
    sensor = _sensor(f"http://127.0.0.1:{_closed_port()}", unreachable_grace_s=0)
    with pytest.raises(JobEndpointUnreachableError, match="is unreachable"):
        sensor.poke(_context(sensor))


def test_an_unknown_job_id_fails_at_once_in_poke_mode() -> None:
    with jobmanager([(404, {"errors": ["Job could not be found."]})]) as (url, asked):
        sensor = _sensor(url, poke_interval=0.01, timeout=60, unreachable_grace_s=60)
        with pytest.raises(UnknownJobIdError, match=JOB_ID):
            sensor.execute(_context(sensor))
    assert len(asked) == 1


def test_the_grace_reads_as_a_duration_and_a_bad_one_is_refused_by_name() -> None:
    url = "http://127.0.0.1:8081"
    assert _sensor(url, unreachable_grace_s="30").unreachable_grace_s == 30.0
    assert _sensor(url, unreachable_grace_s=dt.timedelta(minutes=2)).unreachable_grace_s == 120.0
    assert _sensor(url, unreachable_grace_s=0).unreachable_grace_s == 0.0
    for bad in ("abc", -1, float("nan"), None):
        with pytest.raises(InvalidInputError, match=rf"unreachable_grace_s={bad!r}"):
            _sensor(url, unreachable_grace_s=bad)
    with pytest.raises(InvalidInputError, match=r"unreachable_grace_s='abc'"):
        BellamyJobTrigger(kind="flink", job_id=JOB_ID, endpoint=url, unreachable_grace_s="abc")


def test_a_templated_grace_is_read_once_rendered_and_reaches_the_trigger() -> None:
    with jobmanager([(200, RUNNING)]) as (url, _):
        sensor = _sensor(url, deferrable=True, unreachable_grace_s="{{ params.grace }}", params={"grace": 30})
        context = {**_context(sensor), "params": {"grace": 30}}
        sensor.render_template_fields(context)
        assert sensor.unreachable_grace_s == "30"  # what Jinja renders a number to
        with pytest.raises(TaskDeferred) as deferred:
            sensor.execute(context)
    assert deferred.value.trigger.serialize()[1]["unreachable_grace_s"] == 30.0

    sensor = _sensor(url, unreachable_grace_s="{{ params.grace }}", params={"grace": "abc"})
    context = {**_context(sensor), "params": {"grace": "abc"}}
    sensor.render_template_fields(context)
    with pytest.raises(InvalidInputError, match=r"unreachable_grace_s='abc'"):
        sensor.poke(context)


def test_a_deferrable_sensor_defers_when_its_first_look_finds_the_endpoint_down() -> None:
    sensor = _sensor(f"http://127.0.0.1:{_closed_port()}", deferrable=True, unreachable_grace_s=45)
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute(_context(sensor))
    assert deferred.value.trigger.serialize()[1]["unreachable_grace_s"] == 45.0


def _reschedule_dag(dag_id: str, url: str, grace_s: float) -> Any:
    from airflow.sdk import DAG

    with DAG(dag_id, schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)) as dag:
        # soft_fail: the sensor's own timeout would skip the task, the endpoint's error fails it
        _sensor(
            url, mode="reschedule", poke_interval=0.1, timeout=30, soft_fail=True, unreachable_grace_s=grace_s
        )
    return dag


def test_reschedule_mode_counts_the_grace_across_pokes_in_the_task_state_store(airflow_db: str) -> None:
    """Each reschedule-mode poke is a run of its own: "unreachable since" is kept in the task state
    store, so the grace runs out (the task fails with the endpoint's error) rather than starting
    again at every poke until the sensor's timeout skips the task."""
    with jobmanager([PROXY_PAGE]) as (url, asked):
        dr = run_dag_test(_reschedule_dag("bellamy_sensor_reschedule_down", url, 0.3))
    assert task_states(dr) == {"wait": "failed"}
    assert len(asked) >= 2  # rescheduled, not failed at its first poke
    assert UNREACHABLE_STATE_KEY in task_state_store(dr)

    with jobmanager([PROXY_PAGE, (502, "Bad Gateway"), (200, RUNNING), (200, FINISHED)]) as (url, asked):
        dr = run_dag_test(_reschedule_dag("bellamy_sensor_reschedule_back", url, 60))
    assert task_states(dr) == {"wait": "success"}
    assert len(asked) == 4
    # the endpoint answered again: its outage is forgotten, the next one starts a new grace
    assert UNREACHABLE_STATE_KEY not in task_state_store(dr)
