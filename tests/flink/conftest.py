"""Shared Flink jobs for the tests of this folder (each submission costs ~10 s of client start)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from airflow_provider_bellamy.hooks.flink import FlinkHook, FlinkJob

REPO = Path(__file__).resolve().parents[2]
WORDCOUNT = REPO / "dags_examples" / "jobs" / "flink_wordcount.py"
FAILING = Path(__file__).parent / "jobs" / "failing_job.py"


@pytest.fixture(scope="session")
def finished_wordcount(flink_cluster, tmp_path_factory) -> FlinkJob:
    """A small word count that ran to completion at parallelism 2."""
    hook = FlinkHook(None, rest_url=flink_cluster.rest_url, flink_bin=str(flink_cluster.flink_bin))
    out = tmp_path_factory.mktemp("wordcount-out")
    args = ["--lines", "20000", "--output", str(out / "counts")]
    job_id = hook.submit(str(WORDCOUNT), 2, application_args=args, job_id=uuid.uuid4().hex)
    job = hook.wait_for_job(job_id, poll_interval_s=0.3, timeout_s=180)
    assert job.state == "FINISHED", flink_cluster.logs_tail()
    return job
