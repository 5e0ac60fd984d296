"""Credentials in Flink and Spark submissions never reach a log or an XCom (issue 18, D6).

The Spark provider masks only keys containing ``secret`` or ``password``; a Flink command was
logged as is. Each test puts credentials of every shape into a real command and asserts that
none of their values appears in what is logged, raised or pushed.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_bellamy.hooks.flink import FlinkHook, JobEndpointUnreachableError
from airflow_provider_bellamy.masking import find_secrets, mask_args, mask_text
from airflow_provider_bellamy.operators.spark import BellamySparkSubmitOperator

S3_SECRET = "S3secretVALUE0001"
AZURE_KEY = "AzureAccountKey0002=="
OAUTH = "oauthTOKEN0003"
API_TOKEN = "apiTOKEN0004"
PASSWORD = "hunter2pass0005"
URL_PASSWORD = "urlPW0006"
SECRETS = (S3_SECRET, AZURE_KEY, OAUTH, API_TOKEN, PASSWORD, URL_PASSWORD)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def _logged(caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]) -> str:
    """Everything logged: stdlib records (caplog) and what Airflow's structlog wrote out."""
    out, err = capfd.readouterr()
    return "\n".join((caplog.text, out, err))


def test_every_shape_of_credential_is_found_and_masked() -> None:
    cmd = [
        "flink", "run", "--detached", "-m", f"alice:{URL_PASSWORD}@jm.example:8081", "-p", "2",
        "-D", f"s3.secret-key={S3_SECRET}",
        "-D", f"fs.azure.account.key.acct.blob.core.windows.net={AZURE_KEY}",
        "-D", "s3.endpoint=http://minio:9000",
        "--conf", f"spark.kubernetes.authenticate.submission.oauthToken={OAUTH}",
        "--conf", "spark.authenticate.enableSaslEncryption=true",
        "job.py", "--api-token", API_TOKEN, f"--password={PASSWORD}", "--lines", "2000",
        f"https://bob:{URL_PASSWORD}@api.example/v1",
    ]  # fmt: skip
    assert sorted(find_secrets(cmd)) == sorted(SECRETS)
    masked = mask_args(cmd)
    assert len(masked) == len(cmd) and not _leaks(" ".join(masked))
    # what is not a credential stays readable
    for kept in ("s3.endpoint=http://minio:9000", "--lines", "2000", "-p", "2", "job.py"):
        assert kept in masked
    assert "alice:***@jm.example:8081" in masked and "https://bob:***@api.example/v1" in masked
    assert "spark.authenticate.enableSaslEncryption=true" in masked
    # the same in free text (a log line), and values known from the command wherever they recur
    line = f"Using --api-token {API_TOKEN} and echoing {S3_SECRET} back"
    assert not _leaks(mask_text(line, find_secrets(cmd)))


def test_a_setting_whose_value_has_a_space_is_masked_whole() -> None:
    """``--conf "spark.db.secret=two words"`` is one argument: its whole value is the secret, not
    the text up to the space (the tail leaked into the log line and the XCom before)."""
    cmd = ["spark-submit", "--conf", "spark.db.secret=s3cr3t tail0007", "--name", "word count", "job.py"]
    assert find_secrets(cmd) == ["s3cr3t tail0007"]
    masked = mask_args(cmd)
    assert masked[2] == "spark.db.secret=***" and "word count" in masked
    assert "tail0007" not in mask_text(" ".join(cmd), find_secrets(cmd))


def test_an_authorization_header_is_masked_whole() -> None:
    """An HTTP header given as a setting (OpenLineage's transport ``headers.Authorization``, which
    the operator now passes on) carries its scheme and token with a space between: both are the
    secret. A setting about authentication, not a credential, stays readable."""
    header = "spark.openlineage.transport.headers.Authorization=Bearer tok0008"
    cmd = ["spark-submit", "--conf", header, "--conf", "spark.authenticate=true", "job.py"]
    assert find_secrets(cmd) == ["Bearer tok0008"]
    masked = mask_args(cmd)
    assert masked[2] == "spark.openlineage.transport.headers.Authorization=***"
    assert "spark.authenticate=true" in masked


def test_unreachable_rest_endpoint_error_hides_the_url_password(caplog: pytest.LogCaptureFixture) -> None:
    port = _closed_port()
    hook = FlinkHook(None, rest_url=f"http://alice:{URL_PASSWORD}@127.0.0.1:{port}", timeout_s=2)
    with caplog.at_level(logging.DEBUG), pytest.raises(JobEndpointUnreachableError) as err:
        hook.overview()
    assert f"alice:***@127.0.0.1:{port}" in str(err.value)  # still names the endpoint
    assert not _leaks(str(err.value)) and not _leaks(err.value.url) and not _leaks(caplog.text)
    # the trigger and the sensors report the same error class
    from airflow_provider_bellamy.hooks.job import JobStatusHook

    with pytest.raises(JobEndpointUnreachableError) as err:
        JobStatusHook("spark-master", f"http://alice:{URL_PASSWORD}@127.0.0.1:{port}").get_status(
            "app-20260101000000-0001"
        )
    assert not _leaks(str(err.value))


@pytest.mark.spark
def test_spark_command_log_output_and_xcom_are_masked(
    bellamy_store: Any,
    spark_local_conn: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    # The application prints its own arguments: spark-submit's output carries them back.
    app = tmp_path / "echo_args.py"
    app.write_text("import sys\nprint('args:', ' '.join(sys.argv[1:]))\n")
    op = BellamySparkSubmitOperator(
        task_id="echo",
        conn_id=spark_local_conn,
        job_type="echo",
        scale_outs=[1],
        default_scale_out=1,
        application=str(app),
        conf={
            "spark.kubernetes.authenticate.submission.oauthToken": OAUTH,
            "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net": AZURE_KEY,
            "spark.hadoop.fs.s3a.secret.key": S3_SECRET,
        },
        application_args=["--api-token", API_TOKEN, "--password", PASSWORD],
    )
    pushed: dict[str, Any] = {}
    ti = SimpleNamespace(
        dag_id="masking", task_id="echo", run_id="manual__1", map_index=-1, try_number=1,
        xcom_push=lambda key, value: pushed.__setitem__(key, value),
    )  # fmt: skip
    with caplog.at_level(logging.INFO):
        result = op.execute({"ti": ti, "task": op})
    assert result is not None and result["status"] == "success"
    command = pushed["spark_submit_command"]
    assert "--api-token" in command and "***" in command and not _leaks(" ".join(command))
    logged = _logged(caplog, capfd)
    assert "Spark-Submit cmd" in logged  # the provider's own log of the command
    assert "args: --api-token ***" in logged  # the application's echo, masked
    assert not _leaks(logged), _leaks(logged)


@pytest.mark.flink
def test_flink_submission_log_and_client_error_are_masked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    from airflow_provider_bellamy.hooks.flink import FlinkSubmissionError
    from tests.fixtures.flink import _ensure_flink_venv

    python, home = _ensure_flink_venv()  # the real flink client; no cluster is needed

    # A PyFlink script that prints its arguments and fails in the client, before any job exists.
    app = tmp_path / "echo_and_fail.py"
    app.write_text("import sys\nprint('args:', ' '.join(sys.argv[1:]))\nsys.exit(3)\n")
    hook = FlinkHook(
        None,
        rest_url=f"http://alice:{URL_PASSWORD}@127.0.0.1:{_closed_port()}",
        flink_bin=str(home / "bin" / "flink"),
        python=str(python),
    )
    conf = {"s3.secret-key": S3_SECRET, "fs.azure.account.key.acct.blob.core.windows.net": AZURE_KEY}
    with caplog.at_level(logging.INFO), pytest.raises(FlinkSubmissionError) as err:
        hook.submit(str(app), 1, conf=conf, application_args=["--token", API_TOKEN, "--password", PASSWORD])
    logged = _logged(caplog, capfd)
    assert "Submitting to Flink" in logged and "s3.secret-key=***" in logged
    assert not _leaks(logged), _leaks(logged)
    assert not _leaks(str(err.value)), _leaks(str(err.value))
