"""A Flink job that ended without a runtime the cluster reports readably, under ``dag.test()``:
the try is not recorded as a run (the operator says why), and neither the listener nor a
``record_runtime`` callback records the task's wall time in its place (that holds sizing,
submission and polling besides the job)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.fixtures.airflow import task_states, xcom_value
from tests.fixtures.fake_flink import FakeJobManager, flink_dag

CASES = {
    # a duration that does not parse and no start/end times to take it from
    "duration unreadable": {"duration": "n/a", "vertices": [{"name": "v", "parallelism": 2}]},
    # no duration at all
    "no duration": {"vertices": [{"name": "v", "parallelism": 2}]},
}


@pytest.mark.slow
@pytest.mark.parametrize("callback", [False, True], ids=["listener", "listener+callback"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_job_without_a_readable_runtime_is_not_recorded_as_a_run(
    airflow_db: str, bellamy_store: Any, fake_jobmanager: FakeJobManager, case: str, callback: bool
) -> None:
    from airflow_provider_bellamy.callbacks import record_runtime
    from tests.fixtures.airflow_db import run_dag_test

    fake_jobmanager.job = lambda job_id: (200, {"state": "FINISHED", **CASES[case]})
    with flink_dag("test_flink_no_runtime") as dag:
        fake_jobmanager.operator(
            poll_interval_s=0.1, on_success_callback=record_runtime if callback else None
        )
    dr = run_dag_test(dag)
    assert task_states(dr) == {"wc": "success"}  # the job's success stands
    assert fake_jobmanager.submitted
    assert bellamy_store.list_runs("wc", limit=None) == []  # no row with the task's wall time
    assert xcom_value(dr, "wc")["run_row_id"] is None


def test_the_reason_a_try_is_not_recorded_is_logged_by_each_path(caplog: pytest.LogCaptureFixture) -> None:
    """The operator logs why it records nothing; a callback or the listener of the same try then
    records nothing either (without opening a store) and logs the same reason."""
    from types import SimpleNamespace

    from airflow_provider_bellamy.callbacks import forget_recorded, record_from_context
    from airflow_provider_bellamy.hooks.job_status import JobStatus
    from airflow_provider_bellamy.operators.flink import BellamyFlinkOperator

    status = JobStatus(
        kind="flink",
        job_id="f" * 32,
        state="FINISHED",
        terminal=True,
        succeeded=True,
        unreadable="duration='n/a'",
    )
    assert status.runtime_s is None
    ti = SimpleNamespace(dag_id="d", task_id="wc", run_id="r", map_index=-1, try_number=1)
    operator = BellamyFlinkOperator(task_id="wc", application="wc.py", job_type="wc")
    operator._cached_logger = logging.getLogger("test.flink_operator")  # structlog's is not captured
    reason = f"flink job {'f' * 32} ended FINISHED but reports no readable runtime (duration='n/a')"
    try:
        with caplog.at_level(logging.INFO):
            kw = dict(job_type="wc", framework="flink", scale_out=2, properties={}, decision_id=None)
            assert operator.record_job_run({"ti": ti}, status, source="operator", **kw) is None
            assert f"{reason}; this try is not recorded as a run" in caplog.text
            # a store this would open does not exist: recording nothing must not reach for one
            got = record_from_context({"ti": ti}, job_type="wc", scale_out=2, bellamy_conn_id="no_such_conn")
            assert got is None
            assert f"not recording ('d', 'wc', 'r', -1, 1): {reason}" in caplog.text
    finally:
        forget_recorded(ti)
