"""Spark jobs sized for their SLA from a pipeline config (the README's main example).

``pipelines/spark_sla.yaml`` describes two real PySpark jobs over generated data:

* ``grep`` has a plain runtime target (90 s);
* ``sort`` must finish by a templated absolute deadline (15 min after the run starts:
  its scheduled time, or the time it actually started when that is later, as for the run
  scheduled at once when the DAG is unpaused hours after its last slot) minus the time the
  ``publish`` task after it still needs (``reserve: auto``: the 90th percentile of
  ``publish``'s durations in earlier runs as Airflow recorded them, 30 s while there are none).

A DAG ``DeadlineAlert`` works too (``deadline: dag`` in the config recomputes it in the
task, see ``airflow_provider_bellamy.deadlines``); this example does not declare one
because ``dag.test()`` in Airflow 3.3.2 fails when a run of such a DAG finishes (its
test path hands the run serialized alerts instead of alert ids), and the demo and the
tests run this DAG with ``dag.test()``.

Each task asks the Bellamy model for the smallest scale-out that meets its target
with 90 % confidence, runs spark-submit with that many executors on the
``spark_default`` connection's master, and writes the observed runtime back, so the
next run is sized with a model fine-tuned on this context. ``bellamy demo`` runs
this DAG with ``dag.test()`` on a standalone master on 127.0.0.1.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_provider_bellamy.config import load_pipeline_config
from airflow_provider_bellamy.operators.spark import BellamySparkSubmitOperator

PIPELINE = load_pipeline_config(Path(__file__).resolve().parent / "pipelines" / "spark_sla.yaml")

with DAG(
    dag_id="bellamy_spark_sla",
    description="Spark jobs sized by the Bellamy model for their runtime target and the DAG deadline",
    schedule="0 5 * * *",
    start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    tags=["bellamy", "example", "spark"],
) as dag:
    grep = BellamySparkSubmitOperator.from_config(PIPELINE.job("grep"), conn_id="spark_default")
    sort = BellamySparkSubmitOperator.from_config(PIPELINE.job("sort"), conn_id="spark_default")

    @task
    def publish(grep_run: dict | None, sort_run: dict | None) -> dict:
        """Stands for the step after the jobs (e.g. a table swap); its duration is the reserve."""
        summary = {"grep": grep_run, "sort": sort_run}
        print(f"published: {summary}")
        return summary

    grep >> sort
    publish(grep.output, sort.output)
