"""Real-scheduler test DAG: a durable (cluster deploy mode) submission that waits for its driver;
the test kills the task's process while the driver runs, the retry reattaches."""

from __future__ import annotations

import datetime as dt
import os

from airflow.sdk import DAG

from airflow_provider_bellamy.operators.spark import BellamySparkSubmitOperator
from tests.fixtures.spark import cluster_mode_python

JOBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs")
CONTEXT = {"machine_type": "loopback-1c1g", "cores": 1, "memory_mb": 1024, "lines": 60000}

with DAG(
    "bellamy_durable_retry",
    schedule=None,
    start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
) as dag:
    BellamySparkSubmitOperator(
        task_id="grep",
        conn_id="spark_cluster",
        job_type="grep",
        properties=CONTEXT,
        scale_outs=[1],
        default_scale_out=1,
        target=300,
        **cluster_mode_python(os.path.join(JOBS, "grep.py"), "--lines", "60000", "--partitions", "4"),
        status_poll_interval=1,
        retries=1,
        retry_delay=dt.timedelta(seconds=1),
    )
