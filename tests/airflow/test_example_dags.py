"""dag.test() of the example DAGs that run here: the Spark SLA DAG on the loopback
standalone master, the retraining DAG, and the sizing → EMR / Databricks DAG (the cloud
calls replaced by capturing the request each operator would send)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from tests.fixtures.airflow import example_dag, task_states, xcom_value
from tests.fixtures.spark import WORKERS
from tests.store.conftest import add_decision

LOCAL = {
    "machine_type": "loopback-1c1g",
    "environment": "spark-standalone-loopback",
    "cores": 1,
    "memory_mb": 1024,
}


@pytest.mark.slow
@pytest.mark.spark
def test_spark_sla_dag(
    airflow_db: str, bellamy_store: Any, spark_standalone_conn: str, spark_standalone: Any
) -> None:
    from airflow_provider_bellamy.config import load_pipeline_config
    from tests.fixtures.airflow import EXAMPLES

    grep = load_pipeline_config(EXAMPLES / "pipelines" / "spark_sla.yaml").job("grep")
    # grep has earlier runs of this context at 1 and 3 executors (Ernest sizes it); sort has
    # none and no model (its default_scale_out is used)
    bellamy_store.record_runs(
        [
            {"job_type": "grep", "framework": "spark", "scale_out": n, "runtime_s": t, **grep.properties}
            for n, t in ((1, 150.0), (3, 60.0), (1, 140.0), (3, 62.0))
        ]
    )
    dag = example_dag("bellamy_spark_sla")
    dr = dag.test()
    assert task_states(dr) == {"grep": "success", "sort": "success", "publish": "success"}

    runs = {r["task_id"]: r for r in bellamy_store.list_runs(source="observed", limit=None)}
    assert sorted(runs) == ["grep", "sort"]
    for task_id in ("grep", "sort"):
        decision = xcom_value(dr, task_id, "bellamy_decision")
        run = runs[task_id]
        # recorded at the executors the 2-core test cluster granted, beside the size chosen
        assert run["requested_scale_out"] == decision["chosen_scale_out"]
        assert run["scale_out"] == min(decision["chosen_scale_out"], WORKERS)
        assert run["external_id"].startswith("app-") and run["status"] == "success"
        assert run["decision_id"] == decision["decision_id"]
        cmd = xcom_value(dr, task_id, "spark_submit_command")
        assert cmd[cmd.index("--total-executor-cores") + 1] == str(decision["chosen_scale_out"])

    grep_decision = xcom_value(dr, "grep", "bellamy_decision")
    assert grep_decision["target"]["source"] == "target" and grep_decision["target_s"] == 90
    assert grep_decision["candidates"], "Ernest on the recorded runs answers with candidates"
    sort_decision = xcom_value(dr, "sort", "bellamy_decision")
    target = sort_decision["target"]
    assert target["source"] == "deadline"
    assert target["reserve_s"] == 30 and target["unknown_reserve_tasks"] == ["publish"]
    assert 14 * 60 - 30 - 300 < sort_decision["target_s"] < 15 * 60 - 30  # 15 min after queueing
    assert sort_decision["chosen_scale_out"] == 2 and sort_decision["fallback_reason"]
    published = xcom_value(dr, "publish")
    assert published["grep"]["run_row_id"] == runs["grep"]["id"]


@pytest.mark.slow
def test_retraining_dag_trains_then_reports_up_to_date(airflow_db: str, bellamy_store: Any) -> None:
    from airflow_provider_bellamy.datasets import load_traces

    bellamy_store.record_runs(load_traces("bell", "grep"))
    old = add_decision(bellamy_store.store, age=dt.timedelta(days=400))
    recent = add_decision(bellamy_store.store, age=dt.timedelta(days=1))
    dag = example_dag("bellamy_retraining")
    conf = {"job_types": "grep", "time_budget_s": 15}
    first = dag.test(run_conf=conf)
    assert task_states(first) == {"train": "success", "summarize": "success", "prune": "success"}
    # retention ran after training: the year-old decision went, the new model stayed
    assert xcom_value(first, "prune") == {"general_models": 0, "context_models": 0, "decisions": 1}
    assert [d["id"] for d in bellamy_store.list_decisions()] == [recent]
    assert old != recent
    reports = xcom_value(first, "train")
    assert [(r["job_type"], r["outcome"]) for r in reports] == [("grep", "promoted")]
    assert reports[0]["metrics"] and reports[0]["train_rows"] > 0
    assert xcom_value(first, "summarize") == {"promoted": 1}
    assert [m for m in bellamy_store.list_models() if m["status"] == "active" and m["job_type"] == "grep"]

    second = dag.test(run_conf=conf)  # no new runs since: nothing to retrain
    assert [r["outcome"] for r in xcom_value(second, "train")] == ["up_to_date"]


@pytest.mark.slow
def test_sizing_drives_emr_and_databricks_requests(
    airflow_db: str, bellamy_store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    emr = pytest.importorskip(
        "airflow.providers.amazon.aws.operators.emr", reason="the `examples` extra is not installed"
    )
    databricks = pytest.importorskip(
        "airflow.providers.databricks.operators.databricks", reason="the `examples` extra is not installed"
    )
    sent: dict[str, Any] = {}

    # The cloud boundary: each operator's execute would call AWS / Databricks with the
    # request it holds after rendering; capture that request instead.
    def emr_execute(self: Any, context: Any) -> str:
        sent["emr"] = self.job_flow_overrides
        return "j-BELLAMYTEST"

    def databricks_execute(self: Any, context: Any) -> int:
        sent["databricks"] = self._prepare_submit_json(context)  # what submit_run would POST
        return 42

    monkeypatch.setattr(emr.EmrCreateJobFlowOperator, "execute", emr_execute)
    monkeypatch.setattr(databricks.DatabricksSubmitRunOperator, "execute", databricks_execute)

    dag = example_dag("bellamy_sizing_emr_databricks")
    context = dag.get_task("size_sort").properties
    bellamy_store.record_runs(
        [
            {"job_type": "sort", "framework": "spark", "scale_out": n, "runtime_s": t, **context}
            for n, t in ((2, 600.0), (4, 330.0), (8, 190.0), (12, 150.0), (2, 610.0), (8, 185.0))
        ]
    )
    dr = dag.test()
    assert set(task_states(dr).values()) == {"success"}

    sort_decision = xcom_value(dr, "size_sort")
    assert sort_decision["sized_task_id"] == "emr_sort" and sort_decision["candidates"]
    groups = {g["Name"]: g for g in sent["emr"]["Instances"]["InstanceGroups"]}
    assert groups["core"]["InstanceCount"] == sort_decision["chosen_scale_out"]
    assert isinstance(groups["core"]["InstanceCount"], int)
    assert sent["emr"]["Tags"] == [{"Key": "bellamy-decision", "Value": sort_decision["decision_id"]}]
    assert sent["emr"]["Name"].startswith("bellamy-sort-")

    grep_decision = xcom_value(dr, "size_grep")
    assert grep_decision["chosen_scale_out"] == 4  # no model, no runs: default_scale_out
    # the provider stringifies the payload's values before posting it
    assert str(sent["databricks"]["new_cluster"]["num_workers"]) == "4"
    assert sent["databricks"]["spark_python_task"]["python_file"] == "dbfs:/jobs/grep.py"

    # the listener recorded each sized cloud task once, at the size it was launched with
    runs = {r["task_id"]: r for r in bellamy_store.list_runs(source="observed", limit=None)}
    assert sorted(runs) == ["databricks_grep", "emr_sort"]
    assert runs["emr_sort"]["scale_out"] == sort_decision["chosen_scale_out"]
    assert runs["databricks_grep"]["scale_out"] == 4


def test_every_example_dag_file_imports(airflow_db: str) -> None:
    from tests.fixtures.airflow import example_import_errors

    assert example_import_errors() == {}
