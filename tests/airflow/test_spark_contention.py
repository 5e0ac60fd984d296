"""Real Spark standalone runs where what the master reports is not what the model must learn.

* Two applications contend for the cluster's cores: the one that waited records the time it ran
  at the executors it got, and the wait apart (``queue_s``).
* A durable (cluster deploy mode) submission whose first try fails while its driver runs on: the
  retry reattaches to that driver with the first try's decision (no new sizing) and the driver
  is recorded once.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_bellamy.operators.spark import BellamySparkSubmitOperator
from tests.fixtures.airflow import connection_json, task_states, xcom_value
from tests.fixtures.spark import (
    LOOPBACK_CONTEXT,
    cluster_mode_python,
    conf_args,
    count_hook_builds,
    fake_openlineage,
    run_spark_task,
    spark_job,
)

pytestmark = [pytest.mark.slow, pytest.mark.spark]

CONTEXT = LOOPBACK_CONTEXT
HOLD = Path(__file__).parent / "jobs" / "hold.py"
DRIVER_ID_RE = re.compile(r"^driver-\d{14}-\d{4,}$")
# The waiting application is kept waiting at least this long after it registered.
ENFORCED_WAIT_S = 8.0


def _seed(facade: Any) -> None:
    """One executor meets the 120 s target: the decision is 1."""
    rng = random.Random(11)
    facade.record_runs(
        [
            {
                "job_type": "grep",
                "framework": "spark",
                "scale_out": n,
                "runtime_s": s * rng.uniform(0.98, 1.02),
            }
            | CONTEXT
            for n, s in ((1, 30.0), (2, 18.0), (1, 31.0), (2, 17.5), (1, 29.0), (2, 18.5))
        ]
    )


def _wait_for(cluster: Any, ready: Any, what: str, timeout_s: float = 600.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            found = ready(cluster.status(timeout_s=30.0))
        except (OSError, ValueError):  # a master slow to answer on a busy machine: ask again
            found = None
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_runtime_excludes_the_wait_for_cores(
    airflow_db: str,
    bellamy_store: Any,
    spark_standalone: Any,
    spark_standalone_conn: str,
    tmp_path: Path,
) -> None:

    from tests.fixtures.spark import spark_home

    cluster = spark_standalone
    _seed(bellamy_store)
    release = tmp_path / "release"
    # An application holding both worker cores until it is told to let go.
    blocker = subprocess.Popen(
        [
            str(spark_home() / "bin" / "spark-submit"),
            "--master",
            cluster.master_url,
            "--total-executor-cores",
            "2",
            "--executor-cores",
            "1",
            "--executor-memory",
            "512m",
            str(HOLD),
            str(release),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    released: dict[str, float] = {}

    def release_when_ours_waits() -> None:
        # Our application registered and got no core: keep it waiting, then free the cores.
        try:
            _wait_for(
                cluster,
                lambda s: [
                    a for a in s["activeapps"] if a["name"] == "bellamy-example-grep" and a["cores"] == 0
                ],
                "the sized application to wait for cores",
            )
            time.sleep(ENFORCED_WAIT_S)
            released["at"] = time.monotonic()
        finally:
            release.write_text("go")  # never leave the cores held, whatever happened

    try:
        _wait_for(
            cluster,
            lambda s: [a for a in s["activeapps"] if a["name"] == "bellamy-test-hold" and a["cores"] == 2],
            "the holding application to get both cores",
        )
        releaser = threading.Thread(target=release_when_ours_waits, daemon=True)
        releaser.start()
        dr = run_spark_task(
            "spark_contention",
            conn_id=spark_standalone_conn,
            job_type="grep",
            properties=CONTEXT,
            scale_outs=[1, 2],
            target=120,
            application=str(spark_job("grep")),
            application_args=["--lines", "20000", "--partitions", "2"],
            executor_memory="512m",
        )
        releaser.join(timeout=60)
    finally:
        release.write_text("go")
        try:
            blocker.wait(timeout=300)
        finally:
            if blocker.poll() is None:
                blocker.kill()
    assert task_states(dr) == {"grep": "success"}
    assert "at" in released

    [run] = bellamy_store.list_runs("grep", source="observed", limit=None)
    app = cluster.completed_app(app_id=run["external_id"])
    assert app is not None and app["name"] == "bellamy-example-grep"
    duration_s = app["duration"] / 1000
    # What it ran at: the one executor it was granted (and asked for).
    assert run["scale_out"] == run["requested_scale_out"] == app["cores"] == 1
    # The wait is apart: the master's duration = queue + runtime, and the queue holds at least
    # half the wait the test enforced (the rest is the samplers' resolution on a busy machine).
    assert run["queue_s"] >= ENFORCED_WAIT_S / 2, run
    assert run["runtime_s"] + run["queue_s"] == pytest.approx(duration_s, abs=1e-6)
    assert run["runtime_s"] < duration_s
    assert run["excluded_reason"] is None
    result = xcom_value(dr, "grep")
    assert result["queue_s"] == run["queue_s"] and "standalone master" in result["runtime_source"]


class _WorkerLostOnFirstTry(BellamySparkSubmitOperator):
    """The first try's worker is lost right after the driver was submitted: the task fails while
    the driver runs on (the real-scheduler test kills the worker process instead)."""

    def poll_until_complete(self, external_id: Any, context: Any) -> None:
        if context["ti"].try_number == 1:
            raise RuntimeError(f"worker lost while driver {external_id} runs")
        return super().poll_until_complete(external_id, context)


def test_durable_retry_reattaches_with_its_decision_and_records_once(
    airflow_db: str, bellamy_store: Any, spark_standalone: Any, monkeypatch: pytest.MonkeyPatch
) -> None:

    cluster = spark_standalone
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_DURABLE",
        connection_json(
            "spark",
            host="spark://127.0.0.1",
            port=cluster.master_port,
            extra={
                "deploy-mode": "cluster",
                "rest-port": cluster.rest_port,
                "master-webui": cluster.webui_url,
            },
        ),
    )
    _seed(bellamy_store)
    seen = count_hook_builds(monkeypatch)
    fake_openlineage(monkeypatch)  # the parent run id names the try: run-1, run-2
    drivers_before = {
        d["id"] for d in cluster.status()["completeddrivers"] + cluster.status()["activedrivers"]
    }
    dr = run_spark_task(
        "spark_durable_retry",
        operator=_WorkerLostOnFirstTry,
        conn_id="spark_durable",
        job_type="grep",
        properties=CONTEXT,
        scale_outs=[1, 2],
        target=120,
        **cluster_mode_python(spark_job("grep"), "--lines", "20000", "--partitions", "2"),
        status_poll_interval=1,
        retries=1,
        retry_delay=dt.timedelta(seconds=0),
        openlineage_inject_parent_job_info=True,
    )
    assert task_states(dr) == {"grep": "success"}

    # One driver was submitted, by the first try; the retry reattached to it.
    status = cluster.status()
    new_drivers = [
        d for d in status["completeddrivers"] + status["activedrivers"] if d["id"] not in drivers_before
    ]
    assert len(new_drivers) == 1, new_drivers
    driver = new_drivers[0]
    assert DRIVER_ID_RE.match(driver["id"]) and driver["state"] == "FINISHED"

    # One decision (the first try's), reused by the retry.
    decisions = [d for d in bellamy_store.list_decisions("grep", limit=None) if d["task_id"] == "grep"]
    assert len(decisions) == 1, decisions
    decision = xcom_value(dr, "grep", "bellamy_decision")
    assert decision["decision_id"] == decisions[0]["id"] and decision["reused_from_try"] == 1
    # The command the retry publishes is the one the driver was launched with, the first try's
    # (before session 29: rebuilt by the retry, naming its own OpenLineage parent run).
    confs = conf_args(xcom_value(dr, "grep", "spark_submit_command"))
    assert confs["spark.openlineage.parentRunId"] == "run-1"

    # One run row: the driver, recorded by the try that saw it end, linked to that decision.
    [run] = bellamy_store.list_runs("grep", source="observed", limit=None)
    assert run["external_id"] == driver["id"] and run["try_number"] == 2
    assert run["status"] == "success" and run["decision_id"] == decisions[0]["id"]
    assert run["scale_out"] == run["requested_scale_out"] == decision["chosen_scale_out"] == 1
    stored = next(
        d for d in bellamy_store.list_decisions("grep", limit=None) if d["id"] == decision["decision_id"]
    )
    assert stored["run_row_id"] == run["id"]

    # One hook per try, the retry's own (not the first try's, which followed its spark-submit):
    # each try looks the connection up to build it, and once for the master's web UI.
    assert seen.hooks == 2, seen
    assert seen.lookups == {"spark_durable": 4}, seen
