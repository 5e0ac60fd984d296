"""Scheduled retraining: every night, retrain the models of job types that got new runs.

``BellamyTrainOperator`` pre-trains a candidate general model per job type with new
runs, compares it with the active version on the newest held-out runs and promotes it
only if it is not worse; the previous version stays for ``bellamy models rollback``.
The report (per job type: outcome, hold-out errors, rows, seconds) is the task's XCom.
Trigger it with ``{"job_types": "all"}`` (or list "all" among them) to refresh the model of
every job type too, which sizes new job types until they have a model of their own.
"""

from __future__ import annotations

import datetime as dt

from airflow.sdk import DAG, task

from airflow_provider_bellamy.operators.train import BellamyTrainOperator

with DAG(
    dag_id="bellamy_retraining",
    description="Retrain Bellamy models of job types with new runs; promote only if not worse",
    schedule="30 2 * * *",
    start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
    catchup=False,
    max_active_runs=1,
    params={"job_types": None, "time_budget_s": 120},
    tags=["bellamy", "example", "training"],
) as dag:
    train = BellamyTrainOperator(
        task_id="train",
        job_types="{{ params.job_types or '' }}",
        time_budget_s="{{ params.time_budget_s }}",
        execution_timeout=dt.timedelta(hours=2),
    )

    @task
    def summarize(reports: list[dict]) -> dict:
        """Counts per outcome, so a dashboard or an alert can watch the retraining."""
        outcomes: dict[str, int] = {}
        for report in reports:
            outcomes[report["outcome"]] = outcomes.get(report["outcome"], 0) + 1
        print(f"retraining outcomes: {outcomes}")
        return outcomes

    summarize(train.output)
