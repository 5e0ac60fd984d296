"""BellamySparkSubmitOperator: the executor count per master, and real spark-submit runs
(local mode and the standalone master on 127.0.0.1) sized from the store and written back."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.operators.spark import (
    BellamySparkSubmitOperator,
    executor_settings,
    master_kind,
)
from tests.fixtures.airflow import connection_json, task_states, xcom_value
from tests.fixtures.airflow_db import run_dag_test
from tests.fixtures.spark import LOOPBACK_CONTEXT, conf_args, count_hook_builds, fake_openlineage, spark_job

CONTEXT = LOOPBACK_CONTEXT


def test_executor_settings_for_each_master() -> None:
    assert executor_settings("local[*]", 3, 1)["master"] == "local[3]"
    assert executor_settings("local", 2, 4)["master"] == "local[2]"
    standalone = executor_settings("spark://10.0.0.1:7077", 3, 2)
    assert standalone["total_executor_cores"] == 6 and standalone["executor_cores"] == 2
    for master in ("yarn", "k8s://https://kube:6443"):
        s = executor_settings(master, 5, 2)
        assert s["num_executors"] == 5 and s["executor_cores"] == 2
        assert s["conf"]["spark.executor.instances"] == "5"
        assert s["conf"]["spark.dynamicAllocation.enabled"] == "false"
    with pytest.raises(InvalidInputError, match="unsupported Spark master"):
        master_kind("mesos://m:5050")


def test_yarn_command_uses_num_executors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_YARN", connection_json("spark", host="yarn", extra={"queue": "etl"})
    )
    op = BellamySparkSubmitOperator(
        task_id="t",
        job_type="grep",
        scale_outs=[2, 4],
        conn_id="spark_yarn",
        application="job.py",
        executor_cores=2,
        conf={"spark.dynamicAllocation.enabled": "true"},  # the user's explicit choice stays
    )
    op._apply_size({}, 4)
    cmd = op._hook._build_spark_submit_command("job.py")
    assert cmd[cmd.index("--master") + 1] == "yarn"
    assert cmd[cmd.index("--num-executors") + 1] == "4"
    assert cmd[cmd.index("--executor-cores") + 1] == "2"
    assert "spark.executor.instances=4" in cmd
    assert "spark.dynamicAllocation.enabled=true" in cmd
    assert "--total-executor-cores" not in cmd


def test_operator_refuses_executor_counts_it_owns() -> None:
    with pytest.raises(InvalidInputError, match="num_executors"):
        BellamySparkSubmitOperator(task_id="t", job_type="grep", scale_outs=[1], num_executors=3)
    with pytest.raises(InvalidInputError, match="scale_outs"):
        BellamySparkSubmitOperator(task_id="t", job_type="grep", scale_outs=[0, 2])


def _seed(facade: Any) -> None:
    """Runs of the test context at 1 and 2 executors: 1 is far too slow for the target, 2 is not."""
    rng = random.Random(3)
    rows = []
    for scale_out, runtime in ((1, 400.0), (2, 30.0), (1, 410.0), (2, 31.0), (1, 395.0), (2, 29.0)):
        rows.append(
            {
                "job_type": "grep",
                "framework": "spark",
                "scale_out": scale_out,
                "runtime_s": runtime * rng.uniform(0.98, 1.02),
                **CONTEXT,
            }
        )
    facade.record_runs(rows)


@pytest.mark.slow
@pytest.mark.spark
def _grep_task(**extra: Any) -> dict[str, Any]:
    """A real grep launch's arguments on the loopback context (sized between 1 and 2 executors)."""
    return {
        "job_type": "grep",
        "properties": CONTEXT,
        "scale_outs": [1, 2],
        "target": 120,
        "application": str(spark_job("grep")),
        "application_args": ["--lines", "20000", "--partitions", "2"],
        **extra,
    }


def test_spark_operator_local_and_standalone_real_runs(
    airflow_db: str,
    bellamy_store: Any,
    spark_local_conn: str,
    spark_standalone_conn: str,
    spark_standalone: Any,
) -> None:
    from airflow.sdk import DAG

    from airflow_provider_bellamy.callbacks import record_runtime

    _seed(bellamy_store)
    common: dict[str, Any] = {
        "job_type": "grep",
        "properties": CONTEXT,
        "scale_outs": [1, 2],
        "target": "{{ params.target_s }}",  # templated: rendered before sizing
        "application": str(spark_job("grep")),
        "application_args": ["--lines", "20000", "--partitions", "4"],
        "on_success_callback": [record_runtime, record_runtime],  # + the listener: still one row
    }
    with DAG(
        "test_bellamy_spark_operator",
        schedule=None,
        start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
        params={"target_s": 120},
    ) as dag:
        BellamySparkSubmitOperator(task_id="local_grep", conn_id=spark_local_conn, **common)
        BellamySparkSubmitOperator(
            task_id="standalone_grep",
            conn_id=spark_standalone_conn,
            # a timedelta renders as "0:02:00": read as the 120 s it is
            **{**common, "target": "{{ macros.timedelta(seconds=params.target_s) }}"},
        )
        BellamySparkSubmitOperator(
            task_id="failing",
            conn_id=spark_local_conn,
            job_type="broken",
            scale_outs=[1, 2],
            default_scale_out=1,
            application=str(Path(__file__).parent / "jobs" / "fail.py"),
            retries=1,
            retry_delay=dt.timedelta(seconds=0),
            on_failure_callback=record_runtime,
            on_retry_callback=record_runtime,
        )
    dr = run_dag_test(dag)
    states = task_states(dr)
    assert states == {"local_grep": "success", "standalone_grep": "success", "failing": "failed"}, states

    runs = {r["task_id"]: r for r in bellamy_store.list_runs("grep", source="observed", limit=None)}
    assert sorted(runs) == ["local_grep", "standalone_grep"]  # one row each, despite 2 callbacks + listener

    # local mode: the master became local[n] for the chosen n
    decision = xcom_value(dr, "local_grep", "bellamy_decision")
    assert decision["chosen_scale_out"] == 2 and decision["fallback_reason"]  # Ernest on the seeded runs
    cmd = xcom_value(dr, "local_grep", "spark_submit_command")
    assert cmd[cmd.index("--master") + 1] == "local[2]"
    assert "--total-executor-cores" not in cmd and "--num-executors" not in cmd
    local = runs["local_grep"]
    assert local["scale_out"] == 2 and local["status"] == "success"
    assert local["external_id"].startswith("local-")
    assert local["decision_id"] == decision["decision_id"]

    # standalone: 2 executors of 1 core, the runtime is the application's own duration per the master
    assert xcom_value(dr, "standalone_grep", "bellamy_decision")["target_s"] == decision["target_s"] == 120
    cmd = xcom_value(dr, "standalone_grep", "spark_submit_command")
    assert cmd[cmd.index("--master") + 1] == spark_standalone.master_url
    assert cmd[cmd.index("--total-executor-cores") + 1] == "2"
    assert cmd[cmd.index("--executor-cores") + 1] == "1"
    standalone = runs["standalone_grep"]
    assert standalone["scale_out"] == 2 and standalone["external_id"].startswith("app-")
    app = spark_standalone.completed_app(app_id=standalone["external_id"])
    assert app is not None and app["cores"] == 2
    assert standalone["runtime_s"] == pytest.approx(app["duration"] / 1000.0)
    result = xcom_value(dr, "standalone_grep")
    assert result["runtime_source"].startswith("standalone master")

    # the failing application: one failed row per try, with the submission's wall time
    failed = bellamy_store.list_runs("broken", limit=None)
    assert sorted((r["try_number"], r["status"]) for r in failed) == [(1, "failed"), (2, "failed")]
    assert all(r["scale_out"] == 1 and r["runtime_s"] > 0 for r in failed)


@pytest.mark.slow
@pytest.mark.spark
def test_a_launch_parses_its_sizing_arguments_once_and_records_with_them(
    airflow_db: str, bellamy_store: Any, spark_local_conn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One parse per launch: the spec the operator parses after rendering is what the façade sizes
    (no second parse) and what the write-back records the properties of (no re-parse either)."""
    from airflow.sdk import DAG

    from airflow_provider_bellamy import callbacks
    from airflow_provider_bellamy.spec import SizingSpec

    _seed(bellamy_store)
    specs: list[SizingSpec] = []
    recorded: list[Any] = []
    real_parse = SizingSpec.parse.__func__  # type: ignore[attr-defined]
    real_write_back = callbacks.write_back

    def parse(cls: type[SizingSpec], *args: Any, **kwargs: Any) -> SizingSpec:
        spec = real_parse(cls, *args, **kwargs)
        if not kwargs.get("defer_templates"):  # the DAG file's own check keeps templates
            specs.append(spec)
        return spec

    def write_back(*args: Any, **kwargs: Any) -> Any:
        recorded.append(kwargs["properties"])
        return real_write_back(*args, **kwargs)

    monkeypatch.setattr(SizingSpec, "parse", classmethod(parse))
    monkeypatch.setattr(callbacks, "write_back", write_back)
    with DAG(
        "test_bellamy_one_parse",
        schedule=None,
        start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
        params={"lines": CONTEXT["lines"]},
    ) as dag:
        BellamySparkSubmitOperator(
            task_id="grep",
            conn_id=spark_local_conn,
            job_type="grep",
            properties={**CONTEXT, "lines": "{{ params.lines }}"},  # rendered as text, once
            scale_outs=[1, 2],
            target=120,
            application=str(spark_job("grep")),
            application_args=["--lines", "20000", "--partitions", "2"],
        )
    dr = run_dag_test(dag)
    assert task_states(dr) == {"grep": "success"}
    assert len(specs) == 1, specs  # the launch's parse; the façade did not parse again
    assert specs[0].properties == {**CONTEXT, "lines": str(CONTEXT["lines"])}
    assert len(recorded) == 1 and recorded[0] is specs[0].properties  # the write-back's, not a re-parse
    run = bellamy_store.list_runs("grep", source="observed", limit=None)
    assert (
        len(run) == 1 and run[0]["decision_id"] == xcom_value(dr, "grep", "bellamy_decision")["decision_id"]
    )


@pytest.mark.slow
@pytest.mark.spark
def test_a_launch_builds_one_hook_and_reads_its_connection_once(
    airflow_db: str,
    bellamy_store: Any,
    spark_local_conn: str,
    spark_standalone_conn: str,
    spark_standalone: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Checking the master, sizing, submitting and reading the runtime back share one hook: one
    connection lookup to build it, and one for the standalone master's web UI extra."""
    from airflow.sdk import DAG

    _seed(bellamy_store)
    seen = count_hook_builds(monkeypatch)
    common = _grep_task()
    with DAG(
        "test_bellamy_one_hook",
        schedule=None,
        start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
    ) as dag:
        local = BellamySparkSubmitOperator(task_id="local_grep", conn_id=spark_local_conn, **common)
        standalone = BellamySparkSubmitOperator(
            task_id="standalone_grep", conn_id=spark_standalone_conn, **common
        )
        local >> standalone
    dr = run_dag_test(dag)
    assert task_states(dr) == {"local_grep": "success", "standalone_grep": "success"}
    assert seen.hooks == 2, seen  # one per launch
    assert seen.lookups == {spark_local_conn: 1, spark_standalone_conn: 2}, seen
    # the one hook was sized: the command it ran and the row it recorded say so
    cmd = xcom_value(dr, "local_grep", "spark_submit_command")
    assert cmd[cmd.index("--master") + 1] == "local[2]"
    cmd = xcom_value(dr, "standalone_grep", "spark_submit_command")
    assert cmd[cmd.index("--total-executor-cores") + 1] == "2"
    runs = {r["task_id"]: r for r in bellamy_store.list_runs("grep", source="observed", limit=None)}
    assert runs["standalone_grep"]["external_id"].startswith("app-")
    assert xcom_value(dr, "standalone_grep")["runtime_source"].startswith("standalone master")


def test_openlineage_properties_reach_the_sized_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every launch (waiting, detached, reattaching) builds the command through ``_apply_size``;
    with the operator's OpenLineage flags on, the properties are in it next to the sized ones."""
    fake_openlineage(monkeypatch)
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", connection_json("spark", host="yarn"))

    class TI:
        dag_id, task_id, try_number = "d", "t", 3

    op = BellamySparkSubmitOperator(
        task_id="t",
        job_type="grep",
        scale_outs=[2, 4],
        conn_id="spark_yarn",
        application="job.py",
        openlineage_inject_parent_job_info=True,
        openlineage_inject_transport_info=True,
    )
    op._apply_size({"ti": TI()}, 4)  # type: ignore[typeddict-item]
    confs = conf_args(op._hook._build_spark_submit_command("job.py"))
    assert confs["spark.openlineage.parentJobName"] == "d.t"
    assert confs["spark.openlineage.parentRunId"] == "run-3"
    assert confs["spark.openlineage.transport.type"] == "http"
    assert confs["spark.executor.instances"] == "4"


@pytest.mark.slow
@pytest.mark.spark
def test_openlineage_properties_reach_spark_submit(
    airflow_db: str, bellamy_store: Any, spark_local_conn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``[openlineage] spark_inject_*`` on, the provider injects into ``self.conf`` before it
    builds its hook; ours is built and sized before that, so the properties must be put in the
    hook's conf by the operator itself, where the command (and its XCom) shows them. A property
    the user set keeps the user's value, and the provider's rule then injects none of its group."""
    from airflow.sdk import DAG

    _seed(bellamy_store)
    fake_openlineage(monkeypatch)
    common = _grep_task(
        conn_id=spark_local_conn,
        openlineage_inject_parent_job_info=True,
        openlineage_inject_transport_info=True,
    )
    with DAG(
        "test_bellamy_openlineage",
        schedule=None,
        start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
    ) as dag:
        BellamySparkSubmitOperator(task_id="lineage", **common)
        BellamySparkSubmitOperator(
            task_id="own_parent", conf={"spark.openlineage.parentJobName": "mine"}, **common
        )
    dr = run_dag_test(dag)
    assert task_states(dr) == {"lineage": "success", "own_parent": "success"}

    cmd = xcom_value(dr, "lineage", "spark_submit_command")
    confs = conf_args(cmd)
    assert confs["spark.openlineage.parentJobName"] == "test_bellamy_openlineage.lineage"
    assert confs["spark.openlineage.parentRunId"] == "run-1"
    assert confs["spark.openlineage.transport.type"] == "http"
    assert confs["spark.openlineage.transport.auth.apiKey"] == "***"  # masked in the XCom
    assert cmd[cmd.index("--master") + 1] == "local[2]"  # still sized

    confs = conf_args(xcom_value(dr, "own_parent", "spark_submit_command"))
    assert confs["spark.openlineage.parentJobName"] == "mine"
    assert "spark.openlineage.parentRunId" not in confs
    assert confs["spark.openlineage.transport.type"] == "http"
