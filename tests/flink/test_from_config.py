"""``BellamyFlinkOperator.from_config``: a pipeline YAML's ``flink:`` job run by dag.test() on the
live Flink cluster, as ``BellamySparkSubmitOperator.from_config`` runs its ``spark:`` jobs."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import pytest

from airflow_provider_bellamy.config import load_pipeline_config
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.hooks.flink import FlinkHook
from airflow_provider_bellamy.operators.flink import BellamyFlinkOperator
from airflow_provider_bellamy.operators.spark import BellamySparkSubmitOperator
from tests.flink.conftest import WORDCOUNT

pytestmark = [pytest.mark.flink, pytest.mark.slow]

START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _pipeline(tmp_path: Path, flink_conn_id: str) -> Path:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    shutil.copy(WORDCOUNT, jobs / "wordcount.py")
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        f"""
defaults:
  framework: flink
  confidence: "0.8"
jobs:
  nightly_count:
    job_type: flink_wordcount
    properties: {{lines: 30000, environment: flink-from-config}}
    target: 10m
    default_scale_out: 2
    flink:
      application: jobs/wordcount.py
      application_args: [--lines, "30000", --output, "{tmp_path / "counts"}"]
      flink_conn_id: {flink_conn_id}
      poll_interval_s: 0.5
  any_size:
    job_type: flink_wordcount
    scale_out: [1, 2]
    flink: {{application: jobs/wordcount.py}}
  on_spark:
    framework: spark
    scale_out: [1]
"""
    )
    return path


def test_flink_job_of_a_pipeline_config_runs_sized(
    airflow_db, flink_cluster, flink_conn_id, bellamy_store, tmp_path
) -> None:
    from airflow.sdk import DAG

    from tests.fixtures.airflow_db import run_dag_test

    config = load_pipeline_config(_pipeline(tmp_path, flink_conn_id))
    job = config.job("nightly_count")
    # no scale_out in the file: 1 … the cluster's slots, read at launch (as the operator's default)
    assert job.scale_outs is None and job.confidence == 0.8 and job.target_s == 600
    assert job.flink["application"] == str(tmp_path / "jobs" / "wordcount.py")  # relative to the file
    with DAG("flink_from_config", schedule=None, start_date=START, catchup=False) as dag:
        op = BellamyFlinkOperator.from_config(job)
    assert (op.task_id, op.job_type, op.framework, op.flink_conn_id) == (
        "nightly_count",
        "flink_wordcount",
        "flink",
        flink_conn_id,
    )
    dr = run_dag_test(dag)
    assert {ti.task_id: str(ti.state) for ti in dr.get_task_instances()} == {"nightly_count": "success"}, (
        flink_cluster.logs_tail()
    )

    [run] = [r for r in bellamy_store.list_runs(limit=None) if r["framework"] == "flink"]
    assert (run["task_id"], run["job_type"]) == ("nightly_count", "flink_wordcount")
    assert run["context"] == {"lines": 30000.0, "environment": "flink-from-config"}
    # no model knows the job type: the config's default_scale_out, over the cluster's slots
    assert run["scale_out"] == run["requested_scale_out"] == 2
    job_run = FlinkHook(flink_conn_id).get_job(run["external_id"])
    assert job_run.state == "FINISHED" and set(job_run.vertex_parallelism.values()) == {2}
    decision = bellamy_store.get_decision(run["decision_id"])
    assert decision.target_s == 600 and decision.confidence == 0.8 and not decision.feasible
    assert "default_scale_out=2" in decision.reason


def test_from_config_refuses_a_job_of_another_framework(tmp_path: Path) -> None:
    config = load_pipeline_config(_pipeline(tmp_path, "flink_default"))
    with pytest.raises(InvalidInputError) as err:
        BellamyFlinkOperator.from_config(config.job("on_spark"), task_id="x")
    assert (err.value.field, err.value.value) == ("jobs.on_spark.framework", "spark")
    with pytest.raises(InvalidInputError, match="BellamySparkSubmitOperator needs spark"):
        BellamySparkSubmitOperator.from_config(config.job("any_size"))
    op = BellamyFlinkOperator.from_config(config.job("any_size"), task_id="count")
    assert op.scale_outs == [1, 2] and op.task_id == "count"
