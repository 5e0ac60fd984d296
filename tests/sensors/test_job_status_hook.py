"""JobStatusHook (kind="spark-master") against the session's real standalone master: an
application submitted in client mode, read blocking and on asyncio, and the hook's errors."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time

import pytest

from airflow_provider_bellamy.exceptions import (
    InvalidInputError,
    JobEndpointUnreachableError,
    UnknownJobIdError,
)
from airflow_provider_bellamy.hooks.job import JobStatusHook
from airflow_provider_bellamy.hooks.job_status import JobStatus, spark_master_completed_app_steps
from tests.fixtures.spark import spark_job
from tests.sensors.test_spark_job_sensor import _spark_submit, _wait_for_app


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.spark
@pytest.mark.slow
def test_blocking_and_async_status_of_an_application_on_the_master(spark_standalone) -> None:
    cluster = spark_standalone
    since_ms = int(time.time() * 1000)
    subprocess.run(
        _spark_submit(cluster, str(spark_job("wordcount")), "--lines", "20000", "--partitions", "2"),
        env=cluster.env(),
        capture_output=True,
        timeout=300,
        check=True,
    )
    app_id = _wait_for_app(cluster, "bellamy-example-wordcount", since_ms)
    hook = JobStatusHook("spark-master", cluster.webui_url)
    # the master moves the application to completedapps a moment after spark-submit returns
    status = hook.wait_for_status(app_id, poll_interval_s=0.5, timeout_s=60)
    listed = next(a for a in cluster.status()["completedapps"] if a["id"] == app_id)
    assert status.kind == "spark-master" and status.job_id == app_id
    assert status.state == "FINISHED" and status.succeeded and status.terminal
    assert status.duration_ms == listed["duration"] and status.runtime_s == listed["duration"] / 1000
    assert status.parallelism == listed["cores"]
    assert hook.get_status(app_id) == status

    async def twice_on_one_client() -> list[JobStatus]:
        async with JobStatusHook("spark-master", cluster.webui_url) as shared:
            return [await shared.a_get_status(app_id), await shared.a_get_status(app_id)]

    assert asyncio.run(twice_on_one_client()) == [status, status]
    # what the operator reads when it has the id, and when it only has the name
    for app_id_or_none, name in ((app_id, None), (None, "bellamy-example-wordcount")):
        app = hook.poll(
            lambda i=app_id_or_none, n=name: spark_master_completed_app_steps(i, n, hook.where),
            done=lambda found: found is not None,
            polls=3,
            interval_s=0.1,
        )
        assert app is not None and app["duration"] == listed["duration"]
    unknown = "app-20000101000000-9999"
    with pytest.raises(UnknownJobIdError, match=f"{unknown}.*Spark master at {cluster.webui_url}"):
        hook.get_status(unknown)
    with pytest.raises(UnknownJobIdError, match=unknown):
        asyncio.run(hook.a_get_status(unknown))


def test_an_unreachable_endpoint_is_one_error_blocking_and_async() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    hook = JobStatusHook("spark-master", url, timeout_s=2)
    with pytest.raises(JobEndpointUnreachableError, match=url.replace(".", r"\.")):
        hook.get_status("app-20260101000000-0001")
    with pytest.raises(JobEndpointUnreachableError, match=url.replace(".", r"\.")):
        asyncio.run(hook.a_get_status("app-20260101000000-0001"))
    with pytest.raises(JobEndpointUnreachableError):
        hook.get_json("/json/")
    calls: list[int] = []

    def steps():  # counts the calls poll makes
        calls.append(1)
        return spark_master_completed_app_steps("app-20260101000000-0001", None, hook.where)

    assert hook.poll(steps, done=bool, polls=3, interval_s=0.01, give_up_when_unreachable=True) is None
    assert len(calls) == 1
    assert hook.poll(steps, done=bool, polls=3, interval_s=0.01) is None
    assert len(calls) == 4


def test_a_blocking_wait_rides_out_a_short_outage_and_gives_up_after_the_grace() -> None:
    """A JobManager restart must not fail the task whose job runs on (as the trigger does)."""
    from airflow_provider_bellamy.hooks.job import wait_until_terminal

    answers = iter(
        [
            JobEndpointUnreachableError("http://127.0.0.1:1", "ConnectError"),
            JobStatus("flink", "j", "RUNNING", False, False),
            JobEndpointUnreachableError("http://127.0.0.1:1", "HTTP 503"),
            JobStatus("flink", "j", "FINISHED", True, True),
        ]
    )

    def get() -> JobStatus:
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    done = wait_until_terminal(get, what="job", poll_interval_s=0.0, unreachable_grace_s=60.0)
    assert done.state == "FINISHED"

    calls: list[int] = []

    def down() -> JobStatus:
        calls.append(1)
        raise JobEndpointUnreachableError("http://127.0.0.1:1", "ConnectError")

    with pytest.raises(JobEndpointUnreachableError, match="ConnectError"):
        wait_until_terminal(down, what="job", poll_interval_s=0.01, unreachable_grace_s=0.05)
    assert len(calls) > 1
    calls.clear()
    with pytest.raises(JobEndpointUnreachableError):
        wait_until_terminal(down, what="job", poll_interval_s=0.01, timeout_s=0.0, unreachable_grace_s=60.0)
    assert len(calls) <= 2


def test_bad_hook_arguments_name_the_field() -> None:
    with pytest.raises(InvalidInputError, match="kind='yarn'"):
        JobStatusHook("yarn", "http://127.0.0.1:8080")
    with pytest.raises(InvalidInputError, match=r"endpoint='127\.0\.0\.1:8080'"):
        JobStatusHook("spark-master", "127.0.0.1:8080")
    with pytest.raises(InvalidInputError, match="job_id"):
        JobStatusHook("flink", "http://127.0.0.1:8081").get_status("not-a-flink-id")
