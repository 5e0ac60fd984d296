"""BellamyJobSensor on Spark: an application id (client mode) and a driver id (cluster deploy
mode) on the session's real standalone master, sensed by dag.test() and recorded with the
duration the master reports."""

from __future__ import annotations

import datetime as dt
import glob
import re
import subprocess
import time

import pytest

from airflow_provider_bellamy.hooks.job import JobStatusHook
from tests.fixtures.airflow import task_states
from tests.fixtures.airflow_db import run_dag_test
from tests.fixtures.spark import spark_job

pytestmark = [pytest.mark.spark, pytest.mark.slow]

START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
SMALL = ["--driver-memory", "512m", "--executor-memory", "512m", "--total-executor-cores", "1"]


def _spark_submit(cluster, *args: str) -> list[str]:
    from tests.fixtures.spark import spark_home

    return [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.master_url, *SMALL, *args]


def _wait_for_app(cluster, name: str, since_ms: int, timeout_s: float = 120) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = cluster.status()
        for app in status.get("activeapps", []) + status.get("completedapps", []):
            if app.get("name") == name and int(app.get("starttime", 0)) >= since_ms:
                return str(app["id"])
        time.sleep(0.5)
    raise AssertionError(f"no application {name!r} on {cluster.json_url}")


def test_sensor_records_a_spark_application_and_a_cluster_mode_driver(
    airflow_db, spark_standalone, bellamy_store
) -> None:
    from airflow.sdk import DAG

    from airflow_provider_bellamy.sensors.job import BellamyJobSensor
    from tests.fixtures.spark import spark_home

    cluster = spark_standalone
    env = cluster.env()
    since_ms = int(time.time() * 1000)
    # Client mode: the application runs while the sensor waits for it.
    client = subprocess.Popen(
        _spark_submit(cluster, str(spark_job("wordcount")), "--lines", "20000", "--partitions", "2"),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    app_id = _wait_for_app(cluster, "bellamy-example-wordcount", since_ms)
    client.wait(timeout=300)
    # Cluster deploy mode: spark-submit returns the driver id. Standalone masters run Python
    # drivers through PythonRunner with a jar as the primary resource.
    jar = sorted(glob.glob(str(spark_home() / "jars" / "spark-core_*.jar")))[0]
    submit = subprocess.run(
        _spark_submit(
            cluster,
            "--deploy-mode",
            "cluster",
            "--class",
            "org.apache.spark.deploy.PythonRunner",
            jar,
            str(spark_job("grep")),
            "",
            "--lines",
            "20000",
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    driver_id = re.search(r"(driver-\d+-\d+)", submit.stdout + submit.stderr).group(1)

    with DAG("spark_sensors", schedule=None, start_date=START, catchup=False) as dag:
        BellamyJobSensor(
            task_id="sense_app",
            kind="spark-master",
            job_id=app_id,
            endpoint=cluster.webui_url,
            job_type="spark_wordcount",
            scale_out=1,
            poke_interval=1,
            timeout=300,
        )
        BellamyJobSensor(
            task_id="sense_driver",
            kind="spark-master",
            job_id=driver_id,
            endpoint=cluster.webui_url,
            job_type="spark_grep",
            scale_out=1,
            poke_interval=1,
            timeout=300,
        )
        BellamyJobSensor(
            task_id="sense_unknown",
            kind="spark-master",
            job_id="app-19700101000000-9999",
            endpoint=cluster.webui_url,
            job_type="x",
        )
    dr = run_dag_test(dag)
    assert task_states(dr) == {"sense_app": "success", "sense_driver": "success", "sense_unknown": "failed"}

    runs = {r["task_id"]: r for r in bellamy_store.list_runs(limit=None)}
    assert set(runs) == {"sense_app", "sense_driver"}
    master = cluster.status()
    app = next(a for a in master["completedapps"] if a["id"] == app_id)
    assert runs["sense_app"]["external_id"] == app_id
    assert runs["sense_app"]["runtime_s"] == app["duration"] / 1000
    assert runs["sense_app"]["status"] == "success" and runs["sense_app"]["framework"] == "spark"
    driver = JobStatusHook("spark-master", cluster.webui_url).get_status(driver_id)
    assert driver.state == "FINISHED" and driver.duration_ms is not None
    assert runs["sense_driver"]["external_id"] == driver_id
    assert runs["sense_driver"]["runtime_s"] == driver.duration_ms / 1000
