"""A cluster answering unreadable figures after a Spark job succeeded, under ``dag.test()``: the
job's success stands and is recorded once, its runtime from the next source (history server,
then the standalone master, then spark-submit's wall time), the source passed over named."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_provider_bellamy.hooks.spark_timing import WALL_TIME_IN_CLUSTER_MODE
from tests.fixtures.airflow import connection_json, task_states, xcom_value
from tests.fixtures.http import json_server
from tests.fixtures.spark import SIMULATED_CONTEXT, SIMULATED_TASK, run_spark_task

APP_ID = "app-20261124200000-0000"
SUBMIT_S = 0.3  # spark-submit's own wall time in these tests
GOOD_ATTEMPT = {
    "completed": True,
    "duration": 4000,
    "startTime": "2026-11-24T20:00:00.000GMT",
    "endTime": "2026-11-24T20:00:04.000GMT",
}


@pytest.fixture
def cluster() -> Iterator[dict[str, Any]]:
    """A history server and a standalone master's web UI on 127.0.0.1 answering what the test
    puts in ``answers`` (path -> JSON body); fault injection for servers we cannot make misbehave."""
    state: dict[str, Any] = {"answers": {}, "asked": []}

    def answer(path: str, client: tuple[str, int]) -> tuple[int, Any]:
        state["asked"].append(path)
        body = state["answers"].get(path)
        return (200, body) if body is not None else (404, {})

    with json_server(answer) as url:
        state["url"] = url
        yield state


CASES = {
    # case: (history attempt or None for no history server, the master's completed app or None
    # for a local master, expected runtime (None: spark-submit's wall time), source's start, passed over)
    "history readable": (GOOD_ATTEMPT, None, 4.0, f"history server ({APP_ID})", None),
    "history duration unreadable": (
        {**GOOD_ATTEMPT, "duration": "n/a"},
        None,
        None,
        "wall time of spark-submit",
        "the Spark history server",
    ),
    "history times unreadable, master next": (
        {**GOOD_ATTEMPT, "startTime": "2026-11-24 20:00:00"},
        {"id": APP_ID, "name": "grep", "duration": 3000},
        3.0,
        f"standalone master ({APP_ID})",
        "the Spark history server",
    ),
    "master duration unreadable": (
        None,
        {"id": APP_ID, "name": "grep", "duration": "3 s"},
        None,
        "wall time of spark-submit",
        "the Spark master",
    ),
    # answers whose structure does not parse (the whole body given): not asked again, named
    "history attempts not a list of objects": (
        {"id": APP_ID, "attempts": [1]},
        None,
        None,
        "wall time of spark-submit",
        "the Spark history server",
    ),
    "master completedapps not a list": (
        None,
        {"activeapps": [], "completedapps": "n/a"},
        None,
        "wall time of spark-submit",
        "the Spark master",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_unreadable_figures_after_a_successful_job_fall_back_to_the_next_source(
    airflow_db: str, bellamy_store: Any, monkeypatch: pytest.MonkeyPatch, cluster: dict[str, Any], case: str
) -> None:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    attempt, master_app, runtime, source, passed_over = CASES[case]
    standalone = master_app is not None
    answers = cluster["answers"]
    if attempt is not None:
        body = attempt if "attempts" in attempt else {"id": APP_ID, "attempts": [attempt]}
        answers[f"/api/v1/applications/{APP_ID}"] = body
        answers[f"/api/v1/applications/{APP_ID}/allexecutors"] = []
    if standalone:
        body = (
            master_app if "completedapps" in master_app else {"activeapps": [], "completedapps": [master_app]}
        )
        answers["/json/"] = body
        conn = connection_json(
            "spark", host="spark://127.0.0.1", port=7077, extra={"master-webui": cluster["url"]}
        )
    else:
        conn = connection_json("spark", host="local[1]", extra={})
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_FAKE", conn)
    submits = {"n": 0}

    def spark_submit(self: Any, context: Any) -> None:
        submits["n"] += 1
        self._hook.bellamy_app_id = APP_ID  # as spark-submit logs it
        time.sleep(SUBMIT_S)

    monkeypatch.setattr(SparkSubmitOperator, "execute", spark_submit)
    dr = run_spark_task(
        "test_spark_observe_faults",
        conn_id="spark_fake",
        **SIMULATED_TASK,
        history_server_url=cluster["url"] if attempt is not None else None,
        retries=1,
        retry_delay=dt.timedelta(seconds=0),
    )
    assert task_states(dr) == {"grep": "success"}
    assert submits["n"] == 1  # the job ran once: no retry re-ran it
    if attempt is not None:  # asked once: an answer that reads, or one that never will
        assert cluster["asked"].count(f"/api/v1/applications/{APP_ID}") == 1

    result = xcom_value(dr, "grep")
    assert result["runtime_source"].startswith(source)
    if passed_over is None:
        assert result["runtime_source"] == source
    else:
        assert (
            f"{passed_over} at {cluster['url']} answered figures that do not parse"
            in result["runtime_source"]
        )
    (run,) = bellamy_store.list_runs("etl", limit=None)
    assert (run["status"], run["try_number"], run["scale_out"]) == ("success", 1, 2)
    if runtime is None:  # spark-submit's own wall time
        assert SUBMIT_S <= run["runtime_s"] < 2.0
    else:
        assert run["runtime_s"] == pytest.approx(runtime)
    assert run["runtime_s"] == pytest.approx(result["runtime_s"])


@pytest.mark.parametrize(
    ("json", "asks", "named"),
    [
        # the master does not list the driver yet: asked again (it does a moment later), all polls
        ({"activedrivers": [], "completeddrivers": [], "completedapps": []}, 20, False),
        # an answer whose structure does not parse: asked once, named
        ({"activedrivers": [1], "completeddrivers": []}, 1, True),
        (
            {
                "activedrivers": [],
                "completeddrivers": [{"id": "driver-1", "state": "FINISHED", "starttime": "x"}],
            },
            1,
            True,
        ),
    ],
    ids=["not listed yet", "drivers not objects", "start time unreadable"],
)
def test_a_cluster_mode_drivers_status_names_an_answer_that_does_not_parse(
    monkeypatch: pytest.MonkeyPatch, cluster: dict[str, Any], json: dict[str, Any], asks: int, named: bool
) -> None:
    """The cluster-mode driver's duration is polled a moment after the driver ends: a master not
    listing it yet is asked again; one whose answer does not parse is not (it answers the same),
    and is named for the run's runtime_source ("wall time of the try (...)")."""
    from airflow_provider_bellamy.hooks.job import JobStatusHook
    from airflow_provider_bellamy.hooks.spark import BellamySparkSubmitHook

    cluster["answers"]["/json/"] = json
    monkeypatch.setattr(
        BellamySparkSubmitHook,
        "master_status_hook",
        lambda self, timeout_s=5.0: JobStatusHook("spark-master", cluster["url"], timeout_s=timeout_s),
    )
    monkeypatch.setattr("airflow_provider_bellamy.hooks.job.time.sleep", lambda s: None)
    hook = BellamySparkSubmitHook.__new__(BellamySparkSubmitHook)
    unread: list[str] = []
    assert hook.driver_status("driver-1", unread) is None
    assert cluster["asked"].count("/json/") == asks  # 20: driver_status's polls
    assert bool(unread) is named
    if named:
        assert unread[0].startswith(
            f"the Spark master at {cluster['url']} answered figures that do not parse"
        )


@pytest.mark.parametrize(
    ("driver_id", "note", "why"),
    [
        ("driver-1", "the Spark master at http://m answered figures that do not parse (x)", None),
        ("driver-1", None, "the master listed no duration for driver driver-1"),
        (None, None, "no driver id to ask the master about"),
    ],
)
def test_a_drivers_wall_time_fallback_says_why(driver_id: Any, note: Any, why: Any) -> None:
    """A cluster-mode driver recorded with the try's wall time names why in runtime_source."""
    from types import SimpleNamespace

    from airflow_provider_bellamy.hooks.spark import BellamySparkSubmitHook
    from airflow_provider_bellamy.operators.spark import BellamySparkSubmitOperator

    hook = BellamySparkSubmitHook.__new__(BellamySparkSubmitHook)
    hook._driver_id = driver_id

    def driver_status(driver: str, unread: list[str] | None = None) -> None:
        if note is not None and unread is not None:
            unread.append(note)

    hook.driver_status = driver_status  # type: ignore[method-assign]
    operator = BellamySparkSubmitOperator(
        task_id="t", application="job.py", job_type="etl", scale_outs=[2], record=False
    )
    operator._hook = hook
    seen: list[Any] = []
    operator._log_observed = lambda status, observed: seen.append(observed)  # type: ignore[method-assign]
    ti = SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=-1, try_number=1)
    decision = {"chosen_scale_out": 2}
    operator._finish_durable({"ti": ti}, decision, {}, None, 3.0, False)
    (observed,) = seen
    assert observed.runtime_s == 3.0
    assert observed.source == f"wall time of the try ({why or note})"
    # the try's wall time holds the submission, the driver's wait for a worker and the status
    # polls: stored, never trained on (until session 27 it trained as the job's runtime)
    assert observed.excluded_reason == WALL_TIME_IN_CLUSTER_MODE


def test_a_driver_an_earlier_try_recorded_is_this_trys_row_too(bellamy_store: Any) -> None:
    """A retry that finds its cluster-mode driver already stored (an earlier try recorded it) marks
    the row as this try's: the listener, which runs after it, then does not store the try's wall
    time as a second run of the same driver."""
    from types import SimpleNamespace

    from airflow_provider_bellamy.callbacks import record_from_context, recorded_row
    from airflow_provider_bellamy.hooks.spark import BellamySparkSubmitHook
    from airflow_provider_bellamy.operators.spark import BellamySparkSubmitOperator

    existing = bellamy_store.record_run(
        job_type="etl",
        framework="spark",
        scale_out=2,
        runtime_s=40.0,
        context=SIMULATED_CONTEXT,
        external_id="driver-1",
    )
    hook = BellamySparkSubmitHook.__new__(BellamySparkSubmitHook)
    hook._driver_id = "driver-1"
    hook.driver_status = lambda driver, unread=None: None  # type: ignore[method-assign]
    operator = BellamySparkSubmitOperator(
        task_id="t", application="job.py", job_type="etl", properties=SIMULATED_CONTEXT, scale_outs=[2]
    )
    operator._hook = hook
    ti = SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index=-1, try_number=2)
    result = operator._finish_durable({"ti": ti}, {"chosen_scale_out": 2}, {}, None, 3.0, True)

    assert result is not None and result["run_row_id"] == existing
    assert recorded_row(ti) == existing
    # the listener's path for this try finds the row and writes nothing
    assert record_from_context({"ti": ti}, job_type="etl", framework="spark", scale_out=2) == existing
    assert bellamy_store.count_runs() == 1


def test_a_bad_id_of_ours_in_a_poll_is_raised_named_not_read_as_the_clusters_answer(
    monkeypatch: pytest.MonkeyPatch, cluster: dict[str, Any]
) -> None:
    """``InvalidInputError`` is a ValueError: a malformed id in a poll step was caught as "the
    Spark master answered figures that do not parse" and the runtime taken from the next source
    (the same bad id asked of it). It is our request, not the cluster's answer: raised, named,
    before anything is asked."""
    from airflow_provider_bellamy.exceptions import InvalidInputError
    from airflow_provider_bellamy.hooks.job import JobStatusHook
    from airflow_provider_bellamy.hooks.job_status import status_steps
    from airflow_provider_bellamy.hooks.spark import BellamySparkSubmitHook
    from airflow_provider_bellamy.hooks.spark_timing import ObservedRun

    monkeypatch.setattr("airflow_provider_bellamy.hooks.job.time.sleep", lambda s: None)
    cluster["answers"]["/json/"] = {"activedrivers": [], "completeddrivers": [], "completedapps": []}
    master = JobStatusHook("spark-master", cluster["url"])
    unread: list[str] = []
    with pytest.raises(InvalidInputError, match=r"job_id='driver-1/x'") as err:
        master.poll(
            lambda: status_steps("spark-master", "driver-1/x", master.endpoint),
            done=lambda s: s is not None,
            polls=3,
            interval_s=0.0,
            unread=unread,
        )
    assert err.value.field == "job_id" and unread == [] and cluster["asked"] == []

    monkeypatch.setattr(
        BellamySparkSubmitHook,
        "master_status_hook",
        lambda self, timeout_s=5.0: JobStatusHook("spark-master", cluster["url"], timeout_s=timeout_s),
    )
    hook = BellamySparkSubmitHook.__new__(BellamySparkSubmitHook)
    with pytest.raises(InvalidInputError, match=r"job_id='app-1/\.\./x'"):
        hook.observe_application(
            "app-1/../x",
            name="grep",
            requested=2,
            executor_cores=1,
            history_server_url=cluster["url"],
            standalone=True,
            fallback=ObservedRun(runtime_s=1.0, source="wall time of spark-submit", scale_out=2),
        )
    assert cluster["asked"] == []  # neither the history server nor the master (the next source)


def test_a_cluster_url_read_after_the_job_is_checked_before_it_launches(
    monkeypatch: pytest.MonkeyPatch, bellamy_store: Any
) -> None:
    """``history_server_url`` and the connection's ``master-webui`` are read once the job has
    ended: a URL without its scheme failed the task of a job that had run (its retry running the
    job again). Refused when the DAG is parsed / before sizing, named."""
    from types import SimpleNamespace

    from airflow_provider_bellamy.exceptions import InvalidInputError
    from airflow_provider_bellamy.operators.spark import BellamySparkSubmitOperator

    with pytest.raises(InvalidInputError, match=r"history_server_url='history:18080': must be an http"):
        BellamySparkSubmitOperator(
            task_id="t",
            application="job.py",
            job_type="etl",
            scale_outs=[2],
            history_server_url="history:18080",
        )
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_FAKE",
        connection_json(
            "spark", host="spark://127.0.0.1", port=7077, extra={"master-webui": "127.0.0.1:8080"}
        ),
    )
    op = BellamySparkSubmitOperator(
        task_id="t",
        conn_id="spark_fake",
        application="job.py",
        job_type="etl",
        scale_outs=[2],
        default_scale_out=2,
    )
    ti = SimpleNamespace(dag_id="d", task_id="t", run_id="manual__1", map_index=-1, try_number=1)
    with pytest.raises(InvalidInputError, match=r"extra master-webui='127\.0\.0\.1:8080': must be an http"):
        op.prepare_launch({"ti": ti, "task": op, "params": {}})
    assert bellamy_store.list_decisions() == []  # refused before sizing stored a decision


@pytest.mark.slow
@pytest.mark.parametrize("deploy_mode", ["client", "cluster"])
def test_spark_submits_wall_time_in_cluster_deploy_mode_is_kept_out_of_training(
    airflow_db: str, bellamy_store: Any, monkeypatch: pytest.MonkeyPatch, deploy_mode: str
) -> None:
    """On YARN (or Kubernetes) in cluster deploy mode spark-submit waits for the driver it
    submitted: with no history server its wall time holds the driver's submission and queueing
    besides the job. The run is stored and linked as before, with the reason it is not trained
    on; a client-mode driver's wall time is trained on as before, once its event log (a temporary
    one: this simulated spark-submit writes none) gave no runtime, named in the source."""
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    from airflow_provider_bellamy.records import successful_runs

    conn = connection_json("spark", host="yarn", extra={"deploy-mode": deploy_mode})
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", conn)
    monkeypatch.setattr(SparkSubmitOperator, "execute", lambda self, context: time.sleep(SUBMIT_S))
    dr = run_spark_task(
        "test_spark_cluster_mode_wall_time",
        conn_id="spark_yarn",
        **SIMULATED_TASK,
    )
    assert task_states(dr) == {"grep": "success"}
    result = xcom_value(dr, "grep")
    (run,) = bellamy_store.list_runs("etl", limit=None)
    assert run["status"] == "success"
    trained = successful_runs(bellamy_store.runs_frame("etl", successful_only=False))
    if deploy_mode == "cluster":
        assert result["runtime_source"] == "wall time of spark-submit"
        assert run["excluded_reason"] == result["excluded_reason"] == WALL_TIME_IN_CLUSTER_MODE
        assert trained.empty
    else:
        assert result["runtime_source"].startswith("wall time of spark-submit (the event log in /")
        assert result["runtime_source"].endswith(" not read: no event log of the application in it)")
        assert run["excluded_reason"] is None and len(trained) == 1
