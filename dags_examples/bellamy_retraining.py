"""Scheduled retraining: every night, retrain the models of job types that got new runs.

``BellamyTrainOperator`` pre-trains a candidate general model per job type with new
runs, compares it with the active version on the newest held-out runs and promotes it
only if it is not worse; the previous version stays for ``bellamy models rollback``.
The report (per job type: outcome, hold-out errors, rows, seconds) is the task's XCom.
Trigger it with ``{"job_types": "all"}`` (or list "all" among them) to refresh the model of
every job type too, which sizes new job types until they have a model of their own.

Then retention, so the store does not grow without bound (docs/architecture.md, "A store of a
million runs"): model versions nothing uses are deleted (never an active version nor a context's
copy of it; ``keep_model_versions`` older ones per job type stay for rollback), and decisions
older than ``decisions_older_than_days`` (their runs stay). It runs whether training succeeded or not.
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
    params={
        "job_types": None,
        "time_budget_s": 120,
        "keep_model_versions": 3,
        "decisions_older_than_days": 180,
    },
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

    @task(trigger_rule="all_done")
    def prune(params: dict | None = None) -> dict:
        """`bellamy models prune` and `bellamy decisions prune --older-than`, on the same store."""
        from airflow_provider_bellamy.hooks.bellamy import BellamyHook

        facade = BellamyHook().get_facade()
        models = facade.prune_models(keep=int(params["keep_model_versions"]))
        decisions = facade.prune_decisions(dt.timedelta(days=float(params["decisions_older_than_days"])))
        pruned = {
            "general_models": models["general"],
            "context_models": models["context"],
            "decisions": decisions,
        }
        print(f"retention: deleted {pruned}")
        return pruned

    summarize(train.output)
    train >> prune()
