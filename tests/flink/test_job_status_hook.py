"""JobStatusHook (kind="flink") against the session's real Flink cluster: blocking and asyncio
calls agree with each other and with FlinkHook, which sends its REST requests through it."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from airflow_provider_bellamy.exceptions import UnknownJobIdError
from airflow_provider_bellamy.hooks.flink import FlinkHook
from airflow_provider_bellamy.hooks.job import JobStatusHook
from airflow_provider_bellamy.hooks.job_status import JobStatus, flink_job_steps

pytestmark = [pytest.mark.flink]


def test_blocking_and_async_status_of_a_finished_job(flink_cluster, finished_wordcount) -> None:
    job_id = finished_wordcount.job_id
    hook = JobStatusHook("flink", flink_cluster.rest_url)
    status = hook.get_status(job_id)
    assert isinstance(status, JobStatus)
    assert status.kind == "flink" and status.state == "FINISHED" and status.succeeded and status.terminal
    assert status.duration_ms == finished_wordcount.duration_ms
    assert status.runtime_s == finished_wordcount.runtime_s
    assert status.parallelism == finished_wordcount.parallelism == 2

    async def twice_on_one_client() -> tuple[JobStatus, JobStatus]:
        async with JobStatusHook("flink", flink_cluster.rest_url) as shared:
            client = shared._async_client
            first = await shared.a_get_status(job_id)
            second = await shared.a_get_status(job_id)
            assert shared._async_client is client  # the block's client served both calls
        assert shared._async_client is None  # and was closed with the block
        return first, second

    first, second = asyncio.run(twice_on_one_client())
    assert first == second == status
    # A job that has ended is returned by the first poll of a wait.
    assert hook.wait_for_status(job_id, poll_interval_s=0.1, timeout_s=5) == status


def test_flink_hook_reads_jobs_through_the_status_protocol(flink_cluster, finished_wordcount) -> None:
    flink = FlinkHook(None, rest_url=flink_cluster.rest_url)
    rest = flink.job_status_hook()
    assert rest.kind == "flink" and rest.endpoint == flink_cluster.rest_url
    job = flink.find_job(finished_wordcount.job_id)
    assert job == finished_wordcount
    assert rest.drive(flink_job_steps(finished_wordcount.job_id, rest.where)) == job
    assert flink.wait_for_job(finished_wordcount.job_id, poll_interval_s=0.1, timeout_s=5) == job
    assert rest.get_json("/overview")["slots-total"] == flink_cluster.slots


def test_an_unknown_job_id_names_the_jobmanager_blocking_and_async(flink_cluster) -> None:
    unknown = uuid.uuid4().hex
    hook = JobStatusHook("flink", flink_cluster.rest_url)
    with pytest.raises(UnknownJobIdError, match=f"{unknown}.*Flink JobManager at {flink_cluster.rest_url}"):
        hook.get_status(unknown)
    with pytest.raises(UnknownJobIdError, match=unknown):
        asyncio.run(hook.a_get_status(unknown))
    # poll keeps asking (the job may not be listed yet) and returns what it last had: nothing
    assert (
        hook.poll(lambda: flink_job_steps(unknown, hook.where), done=bool, polls=2, interval_s=0.05) is None
    )
