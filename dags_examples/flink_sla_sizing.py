"""A PyFlink batch job sized for its SLA by the Bellamy model, waiting without a worker slot.

``jobs/flink_wordcount.py`` counts the words of generated text in Flink's BATCH mode. The
``wordcount`` task asks the model for the smallest parallelism (1 … the cluster's task slots)
that finishes within 2 minutes with 90 % confidence, checks the cluster has that many free
slots, submits ``flink run --detached -p N`` to the ``flink_default`` connection's JobManager,
and defers: the triggerer polls the job's REST status while no worker slot is held. When the job
ends, the task resumes and writes Flink's own job duration back to the store, so the next run is
sized with a model fine-tuned on this context. A failed job is recorded as failed and fails the
task with Flink's failure cause in the log.

``flink_default`` is a connection of type ``flink`` (host/port of the JobManager's REST API; the
``flink`` client is found in the project's .venv-flink, or set ``flink_bin`` in its extra).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from airflow.sdk import DAG, task

from airflow_provider_bellamy.operators.flink import BellamyFlinkOperator

JOBS = Path(__file__).resolve().parent / "jobs"

with DAG(
    dag_id="bellamy_flink_sla",
    description="A PyFlink word count sized by the Bellamy model for a 2-minute target",
    schedule="0 6 * * *",
    start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    params={"lines": 200_000, "output_dir": "/tmp/bellamy-flink-wordcount"},
    # Keeps the templated "lines" a number in the context (a string would be hashed as text).
    render_template_as_native_obj=True,
    tags=["bellamy", "example", "flink"],
) as dag:
    wordcount = BellamyFlinkOperator(
        task_id="wordcount",
        application=str(JOBS / "flink_wordcount.py"),
        application_args=[
            "--lines",
            "{{ params.lines }}",
            "--output",
            "{{ params.output_dir }}/{{ ts_nodash }}-{{ ti.try_number }}",
        ],
        job_type="flink_wordcount",
        # Per-node context (never cluster totals): what the job is given and where it runs.
        properties={
            "lines": "{{ params.lines }}",
            "words_per_line": 12,
            "environment": "flink-standalone",
            "slots_per_taskmanager": 4,
        },
        target=dt.timedelta(minutes=2),
        confidence=0.9,
        on_infeasible="warn",
        flink_conn_id="flink_default",
        deferrable=True,
        poll_interval_s=2.0,
        job_timeout_s=1800,
    )

    @task
    def report(run: dict) -> dict:
        """Stands for the step after the job; shows what was decided and observed."""
        decision = run.get("decision") or {}
        summary = {
            "job_id": run["job_id"],
            "parallelism": run["parallelism"],
            "runtime_s": run["runtime_s"],
            "reason": decision.get("reason"),
        }
        print(f"flink word count: {summary}")
        return summary

    report(wordcount.output)
