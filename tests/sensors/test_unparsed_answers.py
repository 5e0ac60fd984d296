"""A status endpoint that answers, but not with a status that parses (a proxy's page in place of a
restarting master's JSON, an object of another shape): every wait (the trigger, the blocking wait,
the sensor) treats it as an unreachable endpoint, for the same grace, then fails with an error that
names the endpoint and the answer, never a ``KeyError`` traceback from the triggerer.

The endpoint is a real HTTP server on 127.0.0.1 answering as a Spark standalone master's
``/json/`` does, from what each test gives it.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_bellamy.exceptions import JobAnswerUnparsedError
from airflow_provider_bellamy.hooks.job import JobStatusHook
from airflow_provider_bellamy.sensors.job import BellamyJobSensor
from airflow_provider_bellamy.triggers.job import BellamyJobTrigger, error_from_event, unreachable_event
from tests.fixtures.http import json_server

APP_ID = "app-20261125010000-0003"
# what a proxy in front of a restarting master might hand on: an object, of another shape
GARBAGE = {"activeapps": "<html>502 Bad Gateway</html>", "completedapps": 0}
FINISHED = {
    "activeapps": [],
    "completedapps": [
        {
            "id": APP_ID,
            "name": "grep",
            "starttime": 1_790_000_000_000,
            "cores": 2,
            "state": "FINISHED",
            "duration": 42_000,
        }
    ],
}


@contextmanager
def master(answers: Callable[[int], Any]) -> Iterator[str]:
    """A master whose n-th answer (from 0) is ``answers(n)``."""
    count = itertools.count()
    lock = threading.Lock()

    def answer(path: str, client: tuple[str, int]) -> tuple[int, Any]:
        with lock:
            n = next(count)
        return 200, answers(n)

    with json_server(answer) as url:
        yield url


def _garbage_then_finished(garbled: int) -> Callable[[int], Any]:
    return lambda n: GARBAGE if n < garbled else FINISHED


def _events(trigger: BellamyJobTrigger) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [dict(event.payload) async for event in trigger.run()]

    return asyncio.run(collect())


def test_the_trigger_rides_out_unparsed_answers_and_ends_done(capsys: pytest.CaptureFixture[str]) -> None:
    with master(_garbage_then_finished(3)) as url:
        trigger = BellamyJobTrigger(
            kind="spark-master", job_id=APP_ID, endpoint=url, poll_interval_s=0.01, unreachable_grace_s=60
        )
        events = _events(trigger)
    assert [e["status"] for e in events] == ["done"], events
    assert events[0]["job"]["state"] == "FINISHED" and events[0]["job"]["duration_ms"] == 42_000
    # Airflow's task and trigger loggers write to stdout: one warning per answer that did not parse,
    # naming the endpoint, that its answer does not parse, and the answer
    warned = [line for line in capsys.readouterr().out.splitlines() if "warning" in line]
    assert len(warned) == 3, warned
    assert all(
        f"Spark master at {url}" in w and "do not parse" in w and "502 Bad Gateway" in w for w in warned
    )


def test_the_trigger_gives_up_after_the_grace_and_the_task_raises_a_clear_error() -> None:
    with master(lambda n: GARBAGE) as url:
        trigger = BellamyJobTrigger(
            kind="spark-master", job_id=APP_ID, endpoint=url, poll_interval_s=0.01, unreachable_grace_s=0.2
        )
        events = _events(trigger)
    assert len(events) == 1 and (events[0]["status"], events[0]["error_type"]) == ("error", "unparsed")
    error = error_from_event(events[0], url)
    assert isinstance(error, JobAnswerUnparsedError)
    assert f"Spark master at {url}" in str(error) and "502 Bad Gateway" in str(error)

    # the sensor resuming from that event raises it
    sensor = BellamyJobSensor(
        task_id="wait", job_id=APP_ID, kind="spark-master", endpoint=url, job_type="grep", scale_out=2
    )
    ti = SimpleNamespace(dag_id="d", task_id="wait", run_id="manual__1", map_index=-1, try_number=1)
    with pytest.raises(JobAnswerUnparsedError, match="502 Bad Gateway"):
        sensor.resume_execution("execute_complete", {"event": events[0]}, {"ti": ti, "task": sensor})


def test_the_blocking_wait_and_the_sensor_follow_the_same_rule() -> None:
    with master(_garbage_then_finished(2)) as url:
        status = JobStatusHook("spark-master", url).wait_for_status(
            APP_ID, poll_interval_s=0.01, unreachable_grace_s=60
        )
    assert status.state == "FINISHED" and status.duration_ms == 42_000

    with master(lambda n: GARBAGE) as url:
        hook = JobStatusHook("spark-master", url)
        with pytest.raises(JobAnswerUnparsedError, match="502 Bad Gateway"):
            hook.wait_for_status(APP_ID, poll_interval_s=0.01, unreachable_grace_s=0.1)

        # a poke keeps waiting for the same grace, then raises it named as an unreachable one's
        def sensor(grace_s: float) -> BellamyJobSensor:
            return BellamyJobSensor(
                task_id="wait",
                job_id=APP_ID,
                kind="spark-master",
                endpoint=url,
                job_type="grep",
                scale_out=2,
                unreachable_grace_s=grace_s,
            )

        ti = SimpleNamespace(dag_id="d", task_id="wait", run_id="manual__1", map_index=-1, try_number=1)
        waiting = sensor(60)
        assert waiting.poke({"ti": ti, "task": waiting}) is False
        failing = sensor(0)
        with pytest.raises(JobAnswerUnparsedError, match=f"Spark master at {url}"):
            failing.poke({"ti": ti, "task": failing})


@pytest.mark.parametrize(
    ("kind", "job_id"),
    [
        ("flink", "a" * 32),
        ("spark-master", APP_ID),
        ("spark-history", APP_ID),
    ],
)
def test_an_answer_that_is_no_json_object_is_unparsed_not_unreachable(kind: str, job_id: str) -> None:
    # HTTP 200 with a proxy's page for a body: the endpoint answered, with no status object
    page = "<html>502 Bad Gateway</html>"
    refused = pytest.raises(JobAnswerUnparsedError, match="no JSON object: <html>502 Bad Gateway")
    with json_server(lambda path, client: (200, page)) as url, refused as raised:
        JobStatusHook(kind, url).get_status(job_id)
    assert url in str(raised.value)
    # a wait rides it out for its grace and labels it for what it is
    assert unreachable_event(raised.value)["error_type"] == "unparsed"
