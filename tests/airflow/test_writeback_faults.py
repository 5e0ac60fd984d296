"""A store that does not take a finished job's write-back, under ``dag.test()``: the listener
writes the job's own figures for the try, never the task's wall time."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.fixtures.airflow import connection_json, task_states
from tests.fixtures.spark import SIMULATED_TASK, run_spark_task


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["write refused", "store not opened", "write refused, callback"])
def test_a_failed_write_back_is_retried_with_the_jobs_own_figures(
    airflow_db: str, bellamy_store: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any, fault: str
) -> None:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from airflow_provider_bellamy.callbacks import record_runtime
    from airflow_provider_bellamy.exceptions import StoreError
    from airflow_provider_bellamy.facade import Bellamy
    from airflow_provider_bellamy.hooks.spark import BellamySparkSubmitHook
    from airflow_provider_bellamy.hooks.spark_timing import ObservedRun

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_FAKE", connection_json("spark", host="local[1]", extra={}))
    # the operator's store under its own connection; bellamy_default (a callback's default) elsewhere
    monkeypatch.setenv(
        "AIRFLOW_CONN_BELLAMY_OPS",
        connection_json("bellamy", extra={"store_url": f"sqlite:///{tmp_path / 'bellamy.db'}"}),
    )
    elsewhere_url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    elsewhere = Bellamy(elsewhere_url)
    elsewhere.upgrade()
    monkeypatch.setenv(
        "AIRFLOW_CONN_BELLAMY_DEFAULT", connection_json("bellamy", extra={"store_url": elsewhere_url})
    )

    def spark_submit(self: Any, context: Any) -> None:
        time.sleep(0.5)  # the JVM's start and stop around the application

    def observe(self: Any, app_id: Any, *, requested: int, **kwargs: Any) -> ObservedRun:
        # what a history server reports: 0.25 s at the 1 executor granted, after 0.1 s waiting
        return ObservedRun(runtime_s=0.25, source="history server (test)", scale_out=1, queue_s=0.1)

    monkeypatch.setattr(SparkSubmitOperator, "execute", spark_submit)
    monkeypatch.setattr(BellamySparkSubmitHook, "observe_application", observe)
    calls = {"n": 0}
    if fault.startswith("write refused"):
        real = Bellamy.record_run

        def record_run(self: Any, **kwargs: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 1:
                raise StoreError("the store refused the write (a moment's outage)")
            return real(self, **kwargs)

        monkeypatch.setattr(Bellamy, "record_run", record_run)
    else:  # down at sizing and at the write-back, back a moment later
        from airflow_provider_bellamy.hooks.bellamy import BellamyHook

        real_open = BellamyHook.get_facade

        def get_facade(self: Any) -> Any:
            calls["n"] += 1
            if calls["n"] <= 2:
                raise StoreError("could not connect to the store (a moment's outage)")
            return real_open(self)

        monkeypatch.setattr(BellamyHook, "get_facade", get_facade)

    dr = run_spark_task(
        "test_writeback_fault",
        conn_id="spark_fake",
        **SIMULATED_TASK,
        bellamy_conn_id="bellamy_ops",
        on_success_callback=record_runtime if fault.endswith("callback") else None,
    )
    assert task_states(dr) == {"grep": "success"}
    assert calls["n"] == (3 if fault == "store not opened" else 2)  # failed once, then retried

    (run,) = bellamy_store.list_runs("etl", limit=None)
    assert (run["try_number"], run["status"]) == (1, "success")
    # the job's figures, not the task's wall time (sizing, spark-submit, 0.5 s here) at the size asked for
    assert run["runtime_s"] == pytest.approx(0.25)
    assert (run["scale_out"], run["requested_scale_out"], run["queue_s"]) == (1, 2, 0.1)
    decisions = bellamy_store.list_decisions("etl")  # none stored with the store down at sizing
    assert [d["id"] for d in decisions] == ([] if fault == "store not opened" else [run["decision_id"]])
    assert elsewhere.count_runs() == 0  # a callback retries it in the operator's store, not its default
