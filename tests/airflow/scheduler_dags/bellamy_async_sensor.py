"""Real-scheduler test DAG: submit without waiting, then a deferrable sensor (in the triggerer)
waits for the driver and records the run."""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG

from airflow_provider_bellamy.operators.spark import BellamySparkSubmitOperator
from airflow_provider_bellamy.sensors.job import BellamyJobSensor
from tests.fixtures.spark import cluster_mode_python

JOBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs")
CONTEXT = {"machine_type": "loopback-1c1g", "cores": 1, "memory_mb": 1024, "lines": 20000}

with DAG(
    "bellamy_async_sensor",
    schedule=None,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
) as dag:
    submit = BellamySparkSubmitOperator(
        task_id="submit",
        conn_id="spark_cluster",
        job_type="grep",
        properties=CONTEXT,
        scale_outs=[1],
        default_scale_out=1,
        target=300,
        wait_for_completion=False,
        **cluster_mode_python(os.path.join(JOBS, "grep.py"), "--lines", "20000", "--partitions", "2"),
    )
    sense = BellamyJobSensor(task_id="sense", submit_task_id="submit", deferrable=True, poke_interval=2)
    submit >> sense
