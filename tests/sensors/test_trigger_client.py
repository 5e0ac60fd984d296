"""BellamyJobTrigger keeps the triggerer's event loop free: one HTTP client per trigger run,
built off the loop, its connection reused by every poll (issue 18, item 5).

The status endpoint is a small HTTP/1.1 server on 127.0.0.1 answering as a Spark standalone
master's ``/json/`` does: the application is running for a few polls, then finished.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from airflow_provider_bellamy.triggers.job import BellamyJobTrigger
from tests.fixtures.http import json_server

APP_ID = "app-20261122180000-0007"
RUNNING_POLLS = 4


@dataclass
class MasterStub:
    url: str
    requests: int = 0
    connections: set[tuple[str, int]] = field(default_factory=set)


def _master_json(finished: bool) -> dict[str, Any]:
    app = {"id": APP_ID, "name": "grep", "starttime": 1_790_000_000_000, "cores": 2}
    if finished:
        return {"activeapps": [], "completedapps": [{**app, "state": "FINISHED", "duration": 51_400}]}
    return {"activeapps": [{**app, "state": "RUNNING", "duration": 0}], "completedapps": []}


@pytest.fixture
def master() -> Iterator[MasterStub]:
    stub = MasterStub(url="")
    lock = threading.Lock()

    def answer(path: str, client: tuple[str, int]) -> tuple[int, Any]:
        with lock:
            stub.requests += 1
            stub.connections.add(client)
            finished = stub.requests > RUNNING_POLLS
        return 200, _master_json(finished)

    # keep-alive: a reused client shows as one connection
    with json_server(answer, keep_alive=True) as url:
        stub.url = url
        yield stub


def test_one_client_per_run_built_off_the_loop_and_no_slow_callback(
    master: MasterStub, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    built_on: list[int] = []
    real_client = httpx.AsyncClient

    class CountingClient(real_client):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            built_on.append(threading.get_ident())
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(httpx, "AsyncClient", CountingClient)
    trigger = BellamyJobTrigger(kind="spark-master", job_id=APP_ID, endpoint=master.url, poll_interval_s=0.05)
    loop_threads: list[int] = []

    async def collect() -> list[dict[str, Any]]:
        loop = asyncio.get_running_loop()
        # Generous: nothing the trigger does on the loop should come near a second; a client
        # built on the loop (SSL context, CA bundle) took 0.68 s on a busy triggerer.
        loop.slow_callback_duration = 1.0
        loop_threads.append(threading.get_ident())
        return [event.payload async for event in trigger.run()]

    with caplog.at_level(logging.WARNING, logger="asyncio"):
        events = asyncio.run(collect(), debug=True)

    assert [e["status"] for e in events] == ["done"]
    assert events[0]["job"]["state"] == "FINISHED" and events[0]["job"]["duration_ms"] == 51_400
    assert master.requests == RUNNING_POLLS + 1
    assert len(built_on) == 1, f"{len(built_on)} clients for one trigger run of {master.requests} polls"
    assert built_on[0] != loop_threads[0], "the client was built on the event loop's thread"
    assert len(master.connections) == 1, f"{len(master.connections)} connections: the client was not reused"
    slow = [r.getMessage() for r in caplog.records if r.name == "asyncio" and "took" in r.getMessage()]
    assert not slow, slow


def test_a_one_off_status_call_closes_its_own_client(master: MasterStub) -> None:
    from airflow_provider_bellamy.hooks.job import JobStatusHook

    status = asyncio.run(JobStatusHook("spark-master", master.url).a_get_status(APP_ID))
    assert status.state == "RUNNING" and not status.terminal


def test_a_refused_input_in_the_trigger_is_raised_again_as_it_was() -> None:
    """An ``InvalidInputError`` in the triggerer reached the task as its text wrapped in another
    (``job_id='a b': job_id='a b': …``). The event carries field, value and problem: the task
    raises the refusal as it was, named once."""
    from airflow_provider_bellamy.exceptions import InvalidInputError
    from airflow_provider_bellamy.triggers.job import error_from_event

    async def first_event() -> dict[str, Any]:
        trigger = BellamyJobTrigger(kind="spark-master", job_id="app 1", endpoint="http://127.0.0.1:1")
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("no event")

    event = asyncio.run(first_event())
    assert (event["status"], event["error_type"]) == ("error", "invalid")
    error = error_from_event(event, "http://127.0.0.1:1")
    assert isinstance(error, InvalidInputError)
    assert (error.field, error.value) == ("job_id", "app 1")
    assert str(error) == "job_id='app 1': a Spark application or driver id (app-…/driver-…)"
