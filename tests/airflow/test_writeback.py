"""Write-back exactly once per task try: operator, callbacks (listed twice) and the listener
plugin all enabled, a task that fails once and is retried → one row per try."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_bellamy.callbacks import forget_recorded, record_from_context, record_runtime
from airflow_provider_bellamy.exceptions import InvalidInputError
from tests.fixtures.airflow import task_states, xcom_value
from tests.fixtures.airflow_db import run_dag_test

CONTEXT = {"machine_type": "emr-m5", "cores": 4, "data_size_mb": 512.0}


def _flaky(**context: Any) -> None:
    import time

    time.sleep(0.2)  # a measurable runtime
    if context["ti"].try_number == 1:
        raise RuntimeError("first try fails on purpose")


def _steady() -> None:
    import time

    time.sleep(0.1)


@pytest.mark.slow
def test_one_row_per_try_whatever_is_enabled(airflow_db: str, bellamy_store: Any) -> None:
    from airflow.providers.standard.operators.python import PythonOperator
    from airflow.sdk import DAG

    from airflow_provider_bellamy.operators.sizing import BellamySizingOperator

    twice = [record_runtime, record_runtime]
    with DAG(
        "test_bellamy_writeback", schedule=None, start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    ):
        size = BellamySizingOperator(
            task_id="size",
            job_type="etl",
            properties=CONTEXT,
            scale_outs=[2, 4, 8],
            target=600,
            default_scale_out=4,  # no model, no runs: the default
            sized_task_id="flaky",
        )
        flaky = PythonOperator(
            task_id="flaky",
            python_callable=_flaky,
            retries=1,
            retry_delay=dt.timedelta(seconds=0),
            on_success_callback=twice,
            on_failure_callback=twice,
            on_retry_callback=twice,
        )
        size_other = BellamySizingOperator(
            task_id="size_other",
            job_type="etl",
            properties=CONTEXT,
            scale_outs=[2, 4],
            default_scale_out=2,
            sized_task_id="listener_only",
        )
        listener_only = PythonOperator(task_id="listener_only", python_callable=_steady)  # no callbacks
        PythonOperator(task_id="unsized", python_callable=_steady, on_success_callback=record_runtime)
        size >> flaky
        size_other >> listener_only
    dr = run_dag_test(dag := flaky.dag)
    assert task_states(dr)["flaky"] == "success"

    decision = xcom_value(dr, "size")
    assert decision["chosen_scale_out"] == 4 and decision["sized_task_id"] == "flaky"
    runs = bellamy_store.list_runs("etl", limit=None)
    by_try = sorted((r["task_id"], r["try_number"], r["status"]) for r in runs)
    assert by_try == [("flaky", 1, "failed"), ("flaky", 2, "success"), ("listener_only", 1, "success")]
    # each try with Airflow's id of it: a retry is a try of its own (ti.id is new each try)
    flaky_ti_ids = {r["ti_id"] for r in runs if r["task_id"] == "flaky"}
    assert len(flaky_ti_ids) == 2 and None not in flaky_ti_ids
    flaky_ok = next(r for r in runs if r["task_id"] == "flaky" and r["status"] == "success")
    assert flaky_ok["scale_out"] == 4 and flaky_ok["runtime_s"] >= 0.2
    assert flaky_ok["decision_id"] == decision["decision_id"]
    assert flaky_ok["context"]["machine_type"] == "emr-m5"
    assert not [r for r in runs if r["task_id"] == "unsized"]  # nothing sized it: nothing recorded
    assert dag.dag_id == dr.dag_id

    # a callback fired again from another process (no process-local marker): the store's
    # provenance key still yields the same row
    forget_recorded()
    ti = SimpleNamespace(
        dag_id=dr.dag_id,
        task_id="flaky",
        run_id=dr.run_id,
        map_index=-1,
        try_number=2,
        start_date=dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=5),
        end_date=dt.datetime.now(dt.timezone.utc),
        state="success",
    )
    row = record_from_context({"ti": ti}, job_type="etl", scale_out=4, properties=CONTEXT)
    assert row == flaky_ok["id"]
    assert len(bellamy_store.list_runs("etl", limit=None)) == 3


def test_configured_callback_rejects_unknown_options() -> None:
    with pytest.raises(InvalidInputError, match="scaleout"):
        record_runtime(scaleout=3)
    cb = record_runtime(job_type="etl", scale_out=3)
    assert callable(cb) and cb.__name__ == "record_runtime"


@pytest.mark.parametrize(
    ("option", "bad"),
    [
        ("scale_out", True),  # read as 1 before: a run stored (and trained on) at 1 node
        ("scale_out", 4.7),  # read as 4 before
        ("scale_out", "four"),
        ("scale_out", 0),
        ("job_type", ""),
        ("job_type", "all"),
        ("framework", 5),
        ("properties", "cores=4"),
        ("properties", {"cores": float("nan")}),
        ("sizing_task_id", ""),
    ],
)
def test_configured_callback_refuses_a_bad_value_when_the_dag_is_parsed(option: str, bad: Any) -> None:
    """A callback never fails the task: a value checked only when it fired was a log line, or
    (``int()``) a wrong scale-out recorded as the size the job ran at."""
    with pytest.raises(InvalidInputError) as err:
        record_runtime(**{option: bad})
    assert err.value.field.split(".")[0] == option


def test_configured_callback_reads_a_scale_out_given_as_text(bellamy_store: Any) -> None:
    callback = record_runtime(job_type="etl", scale_out="4", properties=CONTEXT)
    now = dt.datetime.now(dt.timezone.utc)
    ti = SimpleNamespace(
        dag_id="d", task_id="t", run_id="r", map_index=-1, try_number=1,
        start_date=now - dt.timedelta(seconds=30), end_date=now, state="success",
    )  # fmt: skip
    callback({"ti": ti})
    (run,) = bellamy_store.list_runs("etl", limit=None)
    assert run["scale_out"] == 4 and run["runtime_s"] == pytest.approx(30.0)
