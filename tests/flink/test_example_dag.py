"""dags_examples/flink_sla_sizing.py run by dag.test() on the live Flink cluster."""

from __future__ import annotations

import pytest

from airflow_provider_bellamy.hooks.flink import FlinkHook
from tests.fixtures.airflow import example_dag, task_states, xcom_value

pytestmark = [pytest.mark.flink, pytest.mark.slow]


CONTEXT = {
    "lines": 50000,
    "words_per_line": 12,
    "environment": "flink-standalone",
    "slots_per_taskmanager": 4,
}


def _history(hook: FlinkHook, facade, tmp_path) -> None:
    """Two real runs of the example's job in the example's context, at parallelism 1 and 3,
    recorded as the operator would: enough history for the model to size the DAG's run."""
    import uuid
    from concurrent.futures import ThreadPoolExecutor

    from tests.flink.conftest import WORDCOUNT

    def run(p: int):
        args = ["--lines", "50000", "--output", str(tmp_path / f"history-{p}")]
        job_id = hook.submit(str(WORDCOUNT), p, application_args=args, job_id=uuid.uuid4().hex)
        return hook.wait_for_job(job_id, poll_interval_s=0.3, timeout_s=180)

    with ThreadPoolExecutor(2) as pool:
        jobs = list(pool.map(run, (1, 3)))
    for job in jobs:
        assert job.state == "FINISHED"
        facade.record_run(
            job_type="flink_wordcount",
            framework="flink",
            scale_out=job.parallelism,
            runtime_s=job.runtime_s,
            context=CONTEXT,
            external_id=job.job_id,
            dag_id="history_outside_airflow",
            task_id=f"wordcount_p{job.parallelism}",
            run_id=job.job_id,
        )


def test_flink_sla_example_dag(airflow_db, flink_cluster, bellamy_store, tmp_path, monkeypatch) -> None:
    from tests.fixtures.airflow_db import run_dag_test

    monkeypatch.setenv("AIRFLOW_CONN_FLINK_DEFAULT", flink_cluster.connection_uri_json())
    _history(FlinkHook("flink_default"), bellamy_store, tmp_path)
    dag = example_dag("bellamy_flink_sla")
    dr = run_dag_test(dag, run_conf={"lines": 50000, "output_dir": str(tmp_path)})
    assert task_states(dr) == {"wordcount": "success", "report": "success"}, flink_cluster.logs_tail()

    result = xcom_value(dr, "wordcount")
    job = FlinkHook("flink_default").get_job(result["job_id"])
    assert job.state == "FINISHED"
    assert set(job.vertex_parallelism.values()) == {result["parallelism"]}
    assert 1 <= result["parallelism"] <= flink_cluster.slots
    [run] = [r for r in bellamy_store.list_runs(limit=None) if r["task_id"] == "wordcount"]
    assert run["framework"] == "flink" and run["job_type"] == "flink_wordcount"
    assert run["scale_out"] == result["parallelism"]
    assert run["runtime_s"] == job.runtime_s and run["queue_s"] == job.queue_ms / 1000
    assert run["context"]["lines"] == 50000
    assert run["decision_id"] == result["decision"]["decision_id"]
    decision = bellamy_store.get_decision(run["decision_id"])
    # A real decision from the context's history: every candidate slot count was predicted.
    assert decision.chosen_scale_out == result["parallelism"] and decision.target_s == 120
    assert [c.scale_out for c in decision.candidates] == list(range(1, flink_cluster.slots + 1))
    assert decision.feasible
    assert xcom_value(dr, "report")["runtime_s"] == run["runtime_s"]
