"""FlinkHook against the session's real Flink cluster: REST queries, submissions, bad input."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.hooks.flink import (
    FlinkHook,
    FlinkSubmissionError,
    InsufficientSlotsError,
    JobEndpointUnreachableError,
    UnknownJobIdError,
    summarize_flink_exceptions,
)

pytestmark = [pytest.mark.flink]

REPO = Path(__file__).resolve().parents[2]
WORDCOUNT = REPO / "dags_examples" / "jobs" / "flink_wordcount.py"
FAILING = Path(__file__).parent / "jobs" / "failing_job.py"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_overview_and_free_slots_come_from_the_cluster(flink_cluster, flink_conn_id) -> None:
    hook = FlinkHook(flink_conn_id)
    assert hook.rest_url == flink_cluster.rest_url
    overview = hook.overview()
    assert overview["flink-version"].startswith("2.")
    assert overview["taskmanagers"] == 1
    free, total = hook.free_slots()
    assert total == flink_cluster.slots
    assert 0 <= free <= total


def test_unreachable_jobmanager_names_the_url() -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    hook = FlinkHook(None, rest_url=url, timeout_s=2)
    with pytest.raises(JobEndpointUnreachableError, match=url.replace(".", r"\.")):
        hook.overview()
    with pytest.raises(JobEndpointUnreachableError):
        hook.get_job("0" * 32)


def test_unknown_and_malformed_job_ids(flink_cluster) -> None:
    hook = FlinkHook(None, rest_url=flink_cluster.rest_url)
    unknown = uuid.uuid4().hex
    with pytest.raises(UnknownJobIdError) as err:
        hook.get_job(unknown)
    assert err.value.field == "job_id" and err.value.value == unknown
    assert flink_cluster.rest_url in str(err.value)
    assert hook.find_job(unknown) is None
    with pytest.raises(InvalidInputError, match="32 hexadecimal"):
        hook.get_job("job-42")


def test_missing_connection_and_missing_host() -> None:
    with pytest.raises(Exception, match="no_such_flink_conn"):
        _ = FlinkHook("no_such_flink_conn").rest_url


def test_run_command_bad_inputs(flink_cluster, tmp_path) -> None:
    hook = FlinkHook(None, rest_url=flink_cluster.rest_url)
    with pytest.raises(InvalidInputError) as err:
        hook.build_run_command(str(tmp_path / "missing.py"), 2)
    assert err.value.field == "application" and "no such file" in str(err.value)
    other = tmp_path / "job.sh"
    other.write_text("echo hi\n")
    with pytest.raises(InvalidInputError, match=r"\.py script or a \.jar"):
        hook.build_run_command(str(other), 2)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(InvalidInputError, match="parallelism"):
            hook.build_run_command(str(WORDCOUNT), bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match=r"conf\.a=b='a=b': is no option name"):
        hook.build_run_command(str(WORDCOUNT), 1, conf={"a=b": "c"})
    with pytest.raises(InvalidInputError, match=r"conf\.taskmanager\.memory=None: must be one value"):
        hook.build_run_command(str(WORDCOUNT), 1, conf={"taskmanager.memory": None})
    with pytest.raises(InvalidInputError, match="flink_bin"):
        FlinkHook(None, rest_url=flink_cluster.rest_url, flink_bin=str(tmp_path / "flink")).build_run_command(
            str(WORDCOUNT), 1
        )


def test_run_command_is_an_argument_list(flink_cluster) -> None:
    hook = FlinkHook(None, rest_url=flink_cluster.rest_url, flink_bin=str(flink_cluster.flink_bin))
    cmd = hook.build_run_command(
        str(WORDCOUNT),
        3,
        application_args=["--output", "/tmp/out dir; rm -rf /"],
        conf={"pipeline.name": "x y"},
        job_id="ab" * 16,
    )
    assert cmd[:7] == [
        str(flink_cluster.flink_bin),
        "run",
        "--detached",
        "-m",
        f"127.0.0.1:{flink_cluster.port}",
        "-p",
        "3",
    ]
    assert cmd[7:9] == ["-D", "pipeline.name=x y"]
    assert cmd[9:11] == ["-D", "$internal.pipeline.job-id=" + "ab" * 16]
    # The interpreter comes from the venv the client lives in.
    assert cmd[cmd.index("-pyclientexec") + 1] == str(flink_cluster.python)
    assert cmd[-4:] == ["-py", str(WORDCOUNT), "--output", "/tmp/out dir; rm -rf /"]


def test_parallelism_above_free_slots_is_refused(flink_cluster) -> None:
    hook = FlinkHook(None, rest_url=flink_cluster.rest_url)
    with pytest.raises(InsufficientSlotsError) as err:
        hook.check_free_slots(flink_cluster.slots + 3)
    message = str(err.value)
    assert f"parallelism={flink_cluster.slots + 3}" in message
    assert f"({flink_cluster.slots} slot(s) in total)" in message


def test_failing_job_reports_flinks_cause(flink_cluster, tmp_path) -> None:
    hook = FlinkHook(None, rest_url=flink_cluster.rest_url, flink_bin=str(flink_cluster.flink_bin))
    job_id = uuid.uuid4().hex
    submitted = hook.submit(str(FAILING), 1, application_args=[str(tmp_path / "run1")], job_id=job_id)
    assert submitted == job_id  # the deterministic id is honoured
    job = hook.wait_for_job(job_id, poll_interval_s=0.5, timeout_s=120)
    assert job.state == "FAILED" and not job.succeeded
    cause = hook.failure_cause(job_id)
    assert "NumberFormatException" in cause and "not-a-number" in cause
    assert "\tat " not in cause
    # The same id cannot be submitted twice: Flink itself refuses.
    with pytest.raises(FlinkSubmissionError, match="already been submitted"):
        hook.submit(str(FAILING), 1, application_args=[str(tmp_path / "run2")], job_id=job_id)


def test_summarize_exceptions_of_older_flink() -> None:
    payload = {
        "root-exception": "java.lang.RuntimeException: boom\n\tat a.b(C.java:1)\n"
        "Caused by: java.io.IOException: disk\n",
        "all-exceptions": [],
    }
    assert (
        summarize_flink_exceptions(payload)
        == "java.lang.RuntimeException: boom\nCaused by: java.io.IOException: disk"
    )
    assert summarize_flink_exceptions({}) == "Flink reported no exception for this job"
