"""BellamyFlinkOperator end to end: dag.test() runs real PyFlink jobs on the live cluster.

Every assertion about what ran is checked against Flink's own REST API, and every recorded
run is read back from a real SQLite store through the façade.
"""

from __future__ import annotations

import datetime as dt
import json
import socket
from pathlib import Path

import pytest

from airflow_provider_bellamy.hooks.flink import FlinkHook
from airflow_provider_bellamy.operators.flink import BellamyFlinkOperator, deterministic_job_id
from tests.fixtures.airflow_db import run_dag_test

pytestmark = [pytest.mark.flink, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
WORDCOUNT = str(REPO / "dags_examples" / "jobs" / "flink_wordcount.py")
FAILING = str(Path(__file__).parent / "jobs" / "failing_job.py")
START = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def _ti_states(dr) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}


def _flink_runs(facade) -> list[dict]:
    return [r for r in facade.list_runs(limit=None) if r["framework"] == "flink"]


def test_wordcount_at_two_parallelisms_records_the_rest_duration(
    airflow_db, flink_cluster, flink_conn_id, bellamy_store, tmp_path
) -> None:
    from airflow.sdk import DAG

    conn_id, facade = "bellamy_default", bellamy_store
    with DAG("flink_two_parallelisms", schedule=None, start_date=START, catchup=False) as dag:
        for p in (1, 3):
            BellamyFlinkOperator(
                task_id=f"wordcount_p{p}",
                application=WORDCOUNT,
                application_args=["--lines", "60000", "--output", str(tmp_path / f"counts-{p}")],
                job_type="flink_wordcount",
                properties={"lines": 60000, "environment": "flink-standalone-127.0.0.1"},
                scale_outs=[p],
                flink_conn_id=flink_conn_id,
                bellamy_conn_id=conn_id,
                poll_interval_s=0.5,
            )
    dr = run_dag_test(dag)
    assert _ti_states(dr) == {"wordcount_p1": "success", "wordcount_p3": "success"}, flink_cluster.logs_tail()

    hook = FlinkHook(flink_conn_id)
    runs = {r["task_id"]: r for r in _flink_runs(facade)}
    assert set(runs) == {"wordcount_p1", "wordcount_p3"}
    for p in (1, 3):
        run = runs[f"wordcount_p{p}"]
        job = hook.get_job(run["external_id"])
        # What Flink ran: every vertex at the parallelism the operator chose.
        assert job.state == "FINISHED"
        assert set(job.vertex_parallelism.values()) == {p}, job.vertex_parallelism
        # What was recorded: that parallelism, and the time Flink ran it (RUNNING → FINISHED, to
        # the millisecond); the time before RUNNING is the queue, and both add up to Flink's duration.
        assert run["scale_out"] == p and run["requested_scale_out"] == p
        assert job.running_time_ms is not None and job.start_time_ms <= job.running_time_ms
        assert run["runtime_s"] == (job.end_time_ms - job.running_time_ms) / 1000
        assert run["queue_s"] == (job.running_time_ms - job.start_time_ms) / 1000
        assert run["runtime_s"] + run["queue_s"] == pytest.approx(job.duration_ms / 1000, abs=1e-6)
        assert run["status"] == "success" and run["job_type"] == "flink_wordcount"
        assert run["started_at"].startswith(
            dt.datetime.fromtimestamp(job.start_time_ms / 1000, dt.timezone.utc).isoformat()[:19]
        )
        # The job id is the task instance's deterministic first attempt.
        assert run["external_id"] == deterministic_job_id(
            "flink_two_parallelisms", f"wordcount_p{p}", dr.run_id, -1, 0
        )


def test_bad_inputs_fail_the_task_before_submission_and_a_failing_job_is_recorded_failed(
    airflow_db, flink_cluster, flink_conn_id, bellamy_store, tmp_path, monkeypatch, capfd
) -> None:
    from airflow.sdk import DAG

    conn_id, facade = "bellamy_default", bellamy_store
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    monkeypatch.setenv(
        "AIRFLOW_CONN_FLINK_DEAD", json.dumps({"conn_type": "flink", "host": "127.0.0.1", "port": dead_port})
    )
    common = {"job_type": "flink_bad", "bellamy_conn_id": conn_id, "poll_interval_s": 0.5}
    with DAG("flink_bad_inputs", schedule=None, start_date=START, catchup=False) as dag:
        BellamyFlinkOperator(
            task_id="fails_in_flink",
            application=FAILING,
            application_args=[str(tmp_path / "failing")],  # its input and output: gone with tmp_path
            scale_outs=[1],
            flink_conn_id=flink_conn_id,
            **common,
        )
        BellamyFlinkOperator(
            task_id="too_many_slots",
            application=WORDCOUNT,
            application_args=["--output", str(tmp_path / "never")],
            scale_outs=[flink_cluster.slots + 4],
            flink_conn_id=flink_conn_id,
            **common,
        )
        BellamyFlinkOperator(
            task_id="missing_script",
            application=str(tmp_path / "no_such_job.py"),
            scale_outs=[1],
            flink_conn_id=flink_conn_id,
            **common,
        )
        BellamyFlinkOperator(
            task_id="dead_jobmanager",
            application=WORDCOUNT,
            scale_outs=[1],
            flink_conn_id="flink_dead",
            **common,
        )
    hook = FlinkHook(flink_conn_id)
    jobs_before = {j["jid"] for j in hook.list_jobs()}
    dr = run_dag_test(dag)
    out = capfd.readouterr()
    logs = out.out + out.err
    assert set(_ti_states(dr).values()) == {"failed"}
    new_jobs = [j for j in hook.list_jobs() if j["jid"] not in jobs_before]
    # Only the job that fails inside Flink was submitted.
    assert [j["name"] for j in new_jobs] == ["bellamy-failing-job"]
    assert new_jobs[0]["state"] == "FAILED"

    [run] = _flink_runs(facade)
    assert run["task_id"] == "fails_in_flink" and run["status"] == "failed"
    assert run["external_id"] == new_jobs[0]["jid"]
    assert run["runtime_s"] == hook.get_job(new_jobs[0]["jid"]).runtime_s

    # Flink's failure cause is in the task log; each bad input is named with its value.
    assert "NumberFormatException" in logs and "not-a-number" in logs
    assert f"parallelism={flink_cluster.slots + 4}" in logs and "free task slot(s)" in logs
    assert "application=" in logs and "no_such_job.py" in logs and "no such file" in logs
    assert f"http://127.0.0.1:{dead_port}" in logs and "unreachable" in logs


def _wordcount(cls, args, flink_conn_id, **kwargs) -> BellamyFlinkOperator:
    """The reattach tests' word count task (``cls``: the operator or a subclass of it)."""
    return cls(
        task_id="wordcount",
        application=WORDCOUNT,
        application_args=args,
        job_type="flink_wordcount",
        flink_conn_id=flink_conn_id,
        poll_interval_s=0.5,
        **kwargs,
    )


def test_a_recreated_run_does_not_reattach_to_the_job_of_the_deleted_run(
    airflow_db, flink_cluster, flink_conn_id, bellamy_store, tmp_path
) -> None:
    """A DAG run deleted and created again under the same run_id (``dag.test()`` at the same
    logical date does so) derives the same Flink job ids; the jobs the earlier runs submitted are
    not its tries' (its task state store names none of them): it submits and records its own job.
    (Before, it reattached to the earlier run's finished job: nothing ran, nothing was recorded.)"""
    from airflow.models.dagrun import DagRun
    from airflow.sdk import DAG
    from airflow.utils.types import DagRunType

    conn_id, facade = "bellamy_default", bellamy_store
    logical = dt.datetime(2026, 2, 1, tzinfo=dt.timezone.utc)
    run_id = DagRun.generate_run_id(run_type=DagRunType.MANUAL, logical_date=logical, run_after=logical)
    ids = [deterministic_job_id("flink_reattach", "wordcount", run_id, -1, a) for a in range(3)]
    hook = FlinkHook(flink_conn_id)
    # A DAG run of this run_id, since deleted, submitted attempt 0 (at parallelism 2).
    args = ["--lines", "30000", "--output", str(tmp_path / "counts")]
    assert hook.submit(WORDCOUNT, 2, application_args=args, job_id=ids[0]) == ids[0]
    with DAG("flink_reattach", schedule=None, start_date=START, catchup=False) as dag:
        _wordcount(
            BellamyFlinkOperator,
            args,
            flink_conn_id,
            scale_outs=[1],  # this run's own submission runs at 1
            bellamy_conn_id=conn_id,
        )
    jobs_before = len(hook.list_jobs())
    for _ in range(2):  # the second dag.test() deletes the run and creates it again
        dr = run_dag_test(dag, logical_date=logical, run_after=logical)
        assert dr.run_id == run_id
        assert _ti_states(dr) == {"wordcount": "success"}, flink_cluster.logs_tail()
    assert len(hook.list_jobs()) == jobs_before + 2  # each run submitted its own job
    runs = sorted(_flink_runs(facade), key=lambda r: r["id"])
    assert [(r["external_id"], r["scale_out"], r["run_id"]) for r in runs] == [
        (ids[1], 1, run_id),
        (ids[2], 1, run_id),
    ]
    assert [r["runtime_s"] for r in runs] == [hook.get_job(i).runtime_s for i in ids[1:]]


class _GivesUpOnFirstTry(BellamyFlinkOperator):
    """Try 1 gives up before its first poll and leaves its job running, as a try whose worker is
    lost (or whose ``job_timeout_s`` runs out) does; the retry waits for the job as configured.
    (Not a tiny ``job_timeout_s``: a job finished by the first poll would let try 1 succeed.)"""

    def _wait(self, context, job_id, parallelism, decision, *, reattached):
        if context["ti"].try_number == 1:
            self._leave_running_job_to_retry(context, job_id)
            raise TimeoutError(f"try 1 gives up on Flink job {job_id}")
        return super()._wait(context, job_id, parallelism, decision, reattached=reattached)


def test_retry_reattaches_with_the_decision_of_the_try_that_submitted(
    airflow_db, flink_cluster, flink_conn_id, bellamy_store, tmp_path
) -> None:
    """Try 1 sizes and submits, then gives up waiting (its job runs on); try 2 (the retry of the
    same task instance in the same DAG run) reattaches to that job with try 1's decision (task
    state store): no second decision, one run, recorded by try 2 and linked to that decision."""
    from airflow.sdk import DAG

    from tests.fixtures.airflow import xcom_value

    args = ["--lines", "30000", "--output", str(tmp_path / "counts")]
    hook = FlinkHook(flink_conn_id)
    jobs_before = len(hook.list_jobs())
    with DAG("flink_reattach_decision", schedule=None, start_date=START, catchup=False) as dag:
        _wordcount(
            _GivesUpOnFirstTry,
            args,
            flink_conn_id,
            properties={"lines": 30000},
            scale_outs=[2],
            default_scale_out=2,
            retries=1,
            retry_delay=dt.timedelta(seconds=0),
        )
    dr = run_dag_test(dag)
    assert _ti_states(dr) == {"wordcount": "success"}
    [ti] = dr.get_task_instances()
    assert ti.try_number == 2
    assert len(hook.list_jobs()) == jobs_before + 1  # submitted once, by try 1
    decisions = [
        d for d in bellamy_store.list_decisions("flink_wordcount", limit=None) if d["task_id"] == "wordcount"
    ]
    # try 1's (the store knew no job type: the default, stored all the same); none by try 2
    assert [(d["try_number"], d["chosen_scale_out"]) for d in decisions] == [(1, 2)], decisions
    decision = xcom_value(dr, "wordcount", "bellamy_decision")
    assert decision["decision_id"] == decisions[0]["id"] and decision["reused_from_try"] == 1
    [run] = _flink_runs(bellamy_store)
    assert run["try_number"] == 2 and run["decision_id"] == decisions[0]["id"]
    assert run["scale_out"] == run["requested_scale_out"] == 2
    assert bellamy_store.list_decisions("flink_wordcount", limit=None)[0]["run_row_id"] == run["id"]


def test_a_job_reattached_by_a_later_try_is_not_recorded_twice(
    bellamy_store, flink_cluster, finished_wordcount
) -> None:
    """Two tries (different try numbers) recording the same Flink job: one row, the first one."""
    from types import SimpleNamespace

    from airflow_provider_bellamy.callbacks import forget_recorded
    from airflow_provider_bellamy.hooks.job import JobStatusHook

    status = JobStatusHook("flink", flink_cluster.rest_url).get_status(finished_wordcount.job_id)
    operator = BellamyFlinkOperator(task_id="wc", application=WORDCOUNT, job_type="flink_wordcount")
    rows = []
    for try_number in (1, 2):
        ti = SimpleNamespace(dag_id="d", task_id="wc", run_id="r", map_index=-1, try_number=try_number)
        rows.append(
            operator.record_job_run(
                {"ti": ti},
                status,
                facade=bellamy_store,
                job_type="flink_wordcount",
                framework="flink",
                scale_out=2,
                properties={},
                decision_id=None,
                source="operator",
            )
        )
        forget_recorded()  # as if each try ran in its own worker process
    assert rows[0] == rows[1]
    [run] = _flink_runs(bellamy_store)
    assert run["try_number"] == 1 and run["runtime_s"] == finished_wordcount.runtime_s
