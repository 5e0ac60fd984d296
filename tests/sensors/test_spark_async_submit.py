"""BellamySparkSubmitOperator(wait_for_completion=False) + BellamyJobSensor(submit_task_id=...):
the operator sizes and submits in cluster deploy mode, returns the driver id without waiting,
and the sensor records the run (linked to the decision) with the duration the master reports.

The bad inputs are checked without Spark; the driver-id parsing runs the provider's real
submission code against a stand-in ``spark-submit`` on PATH (a real master cannot be made to
omit the driver id cheaply).
"""

from __future__ import annotations

import datetime as dt
import os
import random
import re
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.operators.spark import (
    BellamySparkSubmitHook,
    BellamySparkSubmitOperator,
    SparkDriverIdMissingError,
)
from airflow_provider_bellamy.sensors.job import BellamyJobSensor
from tests.fixtures.airflow import connection_json, task_states, xcom_value
from tests.fixtures.airflow_db import run_dag_test
from tests.fixtures.spark import (
    LOOPBACK_CONTEXT,
    cluster_mode_python,
    conf_args,
    fake_openlineage,
    spark_job,
)

CONTEXT = LOOPBACK_CONTEXT
DRIVER_ID_RE = re.compile(r"^driver-\d{14}-\d{4,}$")


def _standalone_conn(monkeypatch: pytest.MonkeyPatch, conn_id: str, port: int, webui: str | None) -> str:
    extra: dict[str, Any] = {"deploy-mode": "client"}  # the async mode must override it
    if webui:
        extra["master-webui"] = webui
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}",
        connection_json("spark", host="spark://127.0.0.1", port=port, extra=extra),
    )
    return conn_id


def _fake_spark_submit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lines: list[str]) -> Path:
    """A ``spark-submit`` first on PATH that prints ``lines``, exits 0 and logs each call."""
    calls = tmp_path / "calls.txt"
    script = tmp_path / "bin" / "spark-submit"
    script.parent.mkdir()
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"open({str(calls)!r}, 'a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        f"print({chr(10).join(lines)!r})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{script.parent}{os.pathsep}{os.environ['PATH']}")
    return calls


def _async_op(conn_id: str, **kwargs: Any) -> BellamySparkSubmitOperator:
    return BellamySparkSubmitOperator(
        task_id="submit",
        conn_id=conn_id,
        job_type="grep",
        scale_outs=[1, 2],
        application="job.jar",
        wait_for_completion=False,
        **kwargs,
    )


def test_async_mode_refuses_client_deploy_mode_and_other_masters(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidInputError, match=r"deploy_mode='client'.*cluster deploy mode"):
        _async_op("spark_default", deploy_mode="client")
    with pytest.raises(InvalidInputError, match="wait_for_completion='no'"):
        BellamySparkSubmitOperator(task_id="t", job_type="grep", scale_outs=[1], wait_for_completion="no")
    for conn_id, host in (("spark_local1", "local[2]"), ("spark_yarn1", "yarn")):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", connection_json("spark", host=host))
        op = _async_op(conn_id)
        # refused before sizing: no store, no context needed, no decision left behind
        with pytest.raises(InvalidInputError, match=rf"master='{re.escape(host)}'.*standalone spark://"):
            op.execute({})  # type: ignore[arg-type]


def test_sensor_needs_an_endpoint_from_somewhere() -> None:
    with pytest.raises(InvalidInputError, match="endpoint=None"):
        BellamyJobSensor(task_id="s", job_id="driver-20260101000000-0000", kind="spark-master")
    # with submit_task_id, kind and endpoint may come from the submitting task's return value
    sensor = BellamyJobSensor(task_id="s", submit_task_id="submit")
    assert sensor.kind is None and sensor.endpoint is None
    # the submitting operator records nothing itself (nor does the listener on its behalf)
    assert (
        BellamySparkSubmitOperator(
            task_id="t", job_type="grep", scale_outs=[1], wait_for_completion=False
        ).record
        is False
    )


def test_detached_hook_reads_the_driver_id_and_never_polls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The provider's own execute path with a cluster-mode standalone connection: one
    spark-submit call (no ``--status`` polling), the driver id noted."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    calls = _fake_spark_submit(
        tmp_path,
        monkeypatch,
        ["INFO ClientEndpoint: Driver successfully submitted as driver-20260102030405-0007", "bye"],
    )
    op = _async_op(_standalone_conn(monkeypatch, "spark_fake", 1, None))
    op._apply_size({}, 2)
    hook = op._hook
    assert isinstance(hook, BellamySparkSubmitHook)
    cmd = hook._build_spark_submit_command("job.jar")
    assert cmd[cmd.index("--deploy-mode") + 1] == "cluster"
    assert cmd[cmd.index("--total-executor-cores") + 1] == "2"
    SparkSubmitOperator.execute(op, {})  # type: ignore[arg-type]
    assert hook.bellamy_driver_id == "driver-20260102030405-0007"
    assert len(calls.read_text().splitlines()) == 1  # the provider would poll with --status
    assert "--status" not in calls.read_text()
    assert hook.master_webui() == "http://127.0.0.1:8080"


def test_missing_driver_id_names_the_log_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_spark_submit(tmp_path, monkeypatch, ["WARN something odd", "the master said no"])
    op = _async_op(_standalone_conn(monkeypatch, "spark_fake", 1, None))
    op._apply_size({}, 1)
    hook = op._hook
    assert isinstance(hook, BellamySparkSubmitHook)
    hook.submit("job.jar")
    with pytest.raises(SparkDriverIdMissingError, match=r"(?s)no driver id.*the master said no"):
        op._driver_id_or_raise(hook, ["spark-submit", "job.jar"])


def test_detached_submission_carries_the_openlineage_properties(
    airflow_db: str, bellamy_store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The detached launch sizes and submits through the same conf as the waiting one: the
    OpenLineage properties are in the arguments spark-submit itself was called with."""
    from airflow.sdk import DAG

    fake_openlineage(monkeypatch)
    calls = _fake_spark_submit(
        tmp_path,
        monkeypatch,
        ["INFO ClientEndpoint: Driver successfully submitted as driver-20260102030405-0008"],
    )
    conn_id = _standalone_conn(monkeypatch, "spark_fake_ol", 1, "http://127.0.0.1:1")
    with DAG(
        "spark_async_openlineage", schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    ) as dag:
        _async_op(
            conn_id,
            properties=CONTEXT,
            default_scale_out=2,
            openlineage_inject_parent_job_info=True,
            openlineage_inject_transport_info=True,
        )
    dr = run_dag_test(dag)
    assert task_states(dr) == {"submit": "success"}
    argv = calls.read_text().split()
    assert len(calls.read_text().splitlines()) == 1
    confs = conf_args(argv)
    assert confs["spark.openlineage.parentJobName"] == "spark_async_openlineage.submit"
    assert confs["spark.openlineage.transport.type"] == "http"
    assert argv[argv.index("--deploy-mode") + 1] == "cluster"
    assert (
        conf_args(xcom_value(dr, "submit", "spark_submit_command"))["spark.openlineage.parentRunId"]
        == "run-1"
    )


def _seed(facade: Any) -> None:
    """One executor meets the 120 s target (and 2 would not be needed): the decision is 1.

    The session cluster has two 1-core workers and a cluster-mode driver holds one of them,
    so one executor core is all the application can get."""
    rng = random.Random(5)
    rows = [
        {
            "job_type": "grep",
            "framework": "spark",
            "scale_out": n,
            "runtime_s": s * rng.uniform(0.98, 1.02),
            **CONTEXT,
        }
        for n, s in ((1, 30.0), (2, 18.0), (1, 31.0), (2, 17.5), (1, 29.0), (2, 18.5))
    ]
    facade.record_runs(rows)


@pytest.mark.spark
@pytest.mark.slow
def test_async_submit_then_sensor_records_the_run(
    airflow_db: str, bellamy_store: Any, spark_standalone: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.models.taskinstance import TaskInstance
    from airflow.sdk import DAG
    from airflow.utils.session import create_session
    from sqlalchemy import select

    cluster = spark_standalone
    conn_id = _standalone_conn(monkeypatch, "spark_async", cluster.master_port, cluster.webui_url)
    _seed(bellamy_store)
    with DAG(
        "spark_async_submit",
        schedule=None,
        start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
        catchup=False,
    ) as dag:
        submit = BellamySparkSubmitOperator(
            task_id="submit",
            conn_id=conn_id,
            job_type="grep",
            properties=CONTEXT,
            scale_outs=[1, 2],
            target=120,
            wait_for_completion=False,
            **cluster_mode_python(spark_job("grep"), "--lines", "20000", "--partitions", "2"),
        )
        sense = BellamyJobSensor(task_id="sense", submit_task_id="submit", poke_interval=1, timeout=300)
        submit >> sense
    dr = run_dag_test(dag)
    assert task_states(dr) == {"submit": "success", "sense": "success"}

    decision = xcom_value(dr, "submit", "bellamy_decision")
    assert decision["chosen_scale_out"] == 1 and decision["decision_id"]
    cmd = xcom_value(dr, "submit", "spark_submit_command")
    assert cmd[cmd.index("--deploy-mode") + 1] == "cluster"
    assert cmd[cmd.index("--total-executor-cores") + 1] == "1"
    submitted = xcom_value(dr, "submit")
    driver_id = submitted["job_id"]
    assert DRIVER_ID_RE.match(driver_id), submitted
    assert submitted["kind"] == "spark-master" and submitted["endpoint"] == cluster.webui_url
    assert submitted["scale_out"] == 1 and submitted["decision_id"] == decision["decision_id"]
    assert submitted["job_type"] == "grep" and submitted["properties"] == CONTEXT
    assert dt.datetime.fromisoformat(submitted["started_at"]).tzinfo is not None

    master = cluster.status()
    driver = next(d for d in master["completeddrivers"] if d["id"] == driver_id)
    assert driver["state"] == "FINISHED"
    # the master JSON does not link a driver to its application: it is the one that started after it
    apps = [a for a in master["completedapps"] if int(a["starttime"]) >= int(driver["starttime"])]
    assert len(apps) == 1, apps
    app = apps[0]
    app_end = dt.datetime.fromtimestamp((app["starttime"] + app["duration"]) / 1000, tz=dt.timezone.utc)

    # Not waiting: the submitting task ended before the application did (waiting for the
    # driver would end it after the application's end, which precedes the driver's exit).
    with create_session() as session:
        submit_ti = session.scalars(
            select(TaskInstance).where(
                TaskInstance.dag_id == dr.dag_id,
                TaskInstance.run_id == dr.run_id,
                TaskInstance.task_id == "submit",
            )
        ).one()
        submit_end = submit_ti.end_date
    assert submit_end < app_end, (submit_end, app_end)

    runs = bellamy_store.list_runs(limit=None, source="observed")
    assert len(runs) == 1, runs
    run = runs[0]
    assert run["task_id"] == "sense" and run["external_id"] == driver_id
    assert run["status"] == "success" and run["framework"] == "spark" and run["job_type"] == "grep"
    assert run["scale_out"] == decision["chosen_scale_out"] == app["cores"]
    assert run["runtime_s"] == app["duration"] / 1000
    assert run["decision_id"] == decision["decision_id"]
    stored = next(
        d for d in bellamy_store.list_decisions("grep", limit=None) if d["id"] == decision["decision_id"]
    )
    assert stored["run_row_id"] == run["id"]
