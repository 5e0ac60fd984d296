"""A client-mode Spark run's runtime from its own event log (the driver wrote it on this machine),
not the wall time around spark-submit (the driver JVM's and PySpark's start besides the job)."""

from __future__ import annotations

import datetime as dt
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.hooks.spark import BellamySparkSubmitHook, EventLogPlace, event_log_files
from airflow_provider_bellamy.hooks.spark_timing import (
    EventLogUnreadableError,
    ObservedRun,
    timing_from_event_log,
    timing_from_history,
)
from airflow_provider_bellamy.operators.spark import BellamySparkSubmitOperator
from tests.fixtures.airflow import connection_json, task_states, xcom_value
from tests.fixtures.spark import spark_job

APP = "local-1795594784049"
T0 = 1_795_594_781_978  # ms


def _event(name: str, at_ms: int, **fields: Any) -> str:
    # Spark's JsonProtocol writes compact JSON, the event's name first
    return json.dumps({"Event": name, **fields, "Timestamp": at_ms}, separators=(",", ":"))


def _executor(executor_id: str, at_ms: int, cores: int = 1) -> str:
    return _event(
        "SparkListenerExecutorAdded",
        at_ms,
        **{"Executor ID": executor_id, "Executor Info": {"Host": "h", "Total Cores": cores}},
    )


def _log(*, end: bool = True) -> list[str]:
    lines = [
        '{"Event":"SparkListenerLogStart","Spark Version":"4.2.0"}',
        '{"Event":"SparkListenerEnvironmentUpdate","Spark Properties":{"spark.hadoop.fs.s3a.secret.key":"s3cr3t"}}',
        _event("SparkListenerApplicationStart", T0, **{"App Name": "grep", "App ID": APP, "User": "u"}),
        _executor("driver", T0 + 100, cores=0),
        _executor("0", T0 + 3_000),
        _executor("1", T0 + 3_400),
        '{"Event":"SparkListenerTaskEnd","Stage ID":0}',
    ]
    if end:
        lines.append(_event("SparkListenerApplicationEnd", T0 + 33_000, ExitCode=0))
    return lines


def _iso(ms: int) -> str:
    """A history server's timestamp."""
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "GMT"


def test_an_event_log_gives_the_duration_and_its_split_at_the_executors() -> None:
    duration_s, timing = timing_from_event_log(_log(), executor_cores=1, app_id=APP)
    assert duration_s == pytest.approx(33.0)
    assert timing is not None
    assert timing.queue_s == pytest.approx(3.0) and timing.runtime_s == pytest.approx(30.0)
    assert timing.granted == 2 and timing.excluded_reason is None
    # the history server reads these events: the same split from its answer
    history = timing_from_history(
        {"startTime": _iso(T0), "endTime": _iso(T0 + 33_000)},
        [{"id": i, "addTime": _iso(T0 + at), "totalCores": 1} for i, at in (("0", 3_000), ("1", 3_400))],
        executor_cores=1,
    )
    assert history is not None and (history.queue_s, history.runtime_s, history.granted) == pytest.approx(
        (timing.queue_s, timing.runtime_s, timing.granted)
    )
    # an executor lost mid-run counts until it went
    lost = [
        *_log()[:-1],
        _event("SparkListenerExecutorRemoved", T0 + 10_000, **{"Executor ID": "1"}),
        _log()[-1],
    ]
    assert timing_from_event_log(lost, executor_cores=1)[1].granted == 2  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        (_log(end=False), "no SparkListenerApplicationEnd"),
        # the driver killed while it wrote: the last line cut off
        ([*_log(end=False), _log()[-1][:25]], "no SparkListenerApplicationEnd"),
        ([*_log(end=False), '{"Event":"SparkListenerApplicationEnd","Timestamp":17'], "line 8"),
        ([*_log()[:3], "s3cr3t garbage", *_log()[3:]], "line 4 is not a Spark listener event"),
        (_log()[3:], "no SparkListenerApplicationStart"),
        ([*_log()[:-1], _event("SparkListenerApplicationEnd", T0 - 1)], "ended 0.001 s before"),
        ([*_log()[:-1], _event("SparkListenerApplicationEnd", "soon")], "line 8"),  # type: ignore[arg-type]
    ],
    ids=["no end", "cut off", "end cut off", "garbage line", "no start", "end before start", "bad stamp"],
)
def test_an_event_log_that_is_not_whole_is_unreadable(lines: list[str], why: str) -> None:
    with pytest.raises(EventLogUnreadableError, match=why) as raised:
        timing_from_event_log(lines, executor_cores=1, app_id=APP)
    assert "s3cr3t" not in str(raised.value)  # the log holds the conf: never quoted


def test_a_local_mode_run_runs_from_its_drivers_threads() -> None:
    """``local[n]``: the driver is the one executor, its n cores the scale-out; the SparkContext's
    start-up before it is no runtime (a serial term the model would learn as work)."""
    lines = [_log()[2], _executor("driver", T0 + 2_200, cores=2), _log()[-1]]
    duration_s, timing = timing_from_event_log(lines, executor_cores=1)
    assert duration_s == pytest.approx(33.0) and timing is not None
    assert (timing.queue_s, timing.runtime_s, timing.granted) == pytest.approx((2.2, 30.8, 2))
    # the same from a history server's answer for that log
    history = timing_from_history(
        {"startTime": _iso(T0), "endTime": _iso(T0 + 33_000)},
        [{"id": "driver", "addTime": _iso(T0 + 2_200), "totalCores": 2}],
        executor_cores=1,
    )
    assert history is not None and (history.queue_s, history.runtime_s, history.granted) == pytest.approx(
        (2.2, 30.8, 2)
    )


def test_another_applications_log_is_unreadable() -> None:
    with pytest.raises(EventLogUnreadableError, match="another application"):
        timing_from_event_log(_log(), executor_cores=1, app_id="local-1")


def test_event_log_files_by_application_id(tmp_path: Path) -> None:
    with pytest.raises(EventLogUnreadableError, match=f"no event log of {APP}"):
        event_log_files(tmp_path, APP)
    (tmp_path / f"{APP}0").write_text("another application's id that starts with ours")
    (tmp_path / f".{APP}.crc").write_text("")
    (tmp_path / f"{APP}.inprogress").write_text("")
    assert event_log_files(tmp_path, APP) == [tmp_path / f"{APP}.inprogress"]
    rolled = tmp_path / "rolled"
    (rolled / f"eventlog_v2_{APP}").mkdir(parents=True)
    for n in (10, 2, 1):
        (rolled / f"eventlog_v2_{APP}" / f"events_{n}_{APP}").write_text("")
    (rolled / f"eventlog_v2_{APP}" / f"appstatus_{APP}").write_text("")
    assert [p.name for p in event_log_files(rolled, APP)] == [f"events_{n}_{APP}" for n in (1, 2, 10)]
    # zstd (Spark 4's default codec) is read; Spark's own framings of the others are not
    zipped = tmp_path / "zipped"
    zipped.mkdir()
    (zipped / f"{APP}.zstd.inprogress").write_text("")
    assert event_log_files(zipped, APP) == [zipped / f"{APP}.zstd.inprogress"]
    for codec in ("lz4", "lzf", "snappy"):
        (zipped / f"{APP}.zstd.inprogress").unlink(missing_ok=True)
        (zipped / f"{APP}.{codec}").write_text("")
        with pytest.raises(EventLogUnreadableError, match=rf"compressed \({codec},.*no {codec} reader"):
            event_log_files(zipped, APP)
        (zipped / f"{APP}.{codec}").unlink()


def _zstd(lines: list[str], frames: int = 3) -> bytes:
    """``lines`` as Spark's zstd codec writes an event log: several frames in one file."""
    import zstandard

    text = "".join(f"{line}\n" for line in lines).encode()
    cuts = [len(text) * k // frames for k in range(frames + 1)]
    compressor = zstandard.ZstdCompressor()
    return b"".join(compressor.compress(text[a:b]) for a, b in itertools.pairwise(cuts))


def test_a_zstd_event_log_is_read_as_a_stream_and_a_broken_one_passed_over(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_PLAN", connection_json("spark", host="local[2]", extra={}))
    hook = BellamySparkSubmitHook.adopt(SparkSubmitHook(conn_id="spark_plan"))
    user = EventLogPlace(tmp_path, temporary=False)
    # Spark 4's defaults: rolled, zstd; the events split over two files
    rolled = tmp_path / f"eventlog_v2_{APP}"
    rolled.mkdir()
    (rolled / f"events_1_{APP}.zstd").write_bytes(_zstd(_log()[:4]))
    (rolled / f"events_2_{APP}.zstd").write_bytes(_zstd(_log()[4:]))
    observed = hook.read_event_log(user, APP, requested=2, executor_cores=1)
    assert (observed.runtime_s, observed.queue_s, observed.scale_out) == pytest.approx((30.0, 3.0, 2))
    assert observed.source == f"event log ({APP}); event log executor add times"

    wall = ObservedRun.wall_time(40.0, "wall time of spark-submit", 2, cluster_mode=False)

    def passed_over() -> str:
        observed = hook.observe_application(
            APP, name="grep", requested=2, executor_cores=1, event_log=user, fallback=wall
        )
        assert observed.runtime_s == 40.0 and "s3cr3t" not in observed.source
        return observed.source

    whole = _zstd(_log())
    (rolled / f"events_2_{APP}.zstd").unlink()
    # cut off in its last frame (the driver killed while it wrote the end): the events read say
    # what is missing, the end or the rest of its line, whichever the cut left
    (rolled / f"events_1_{APP}.zstd").write_bytes(_zstd(_log(end=False)) + _zstd(_log()[-1:], 1)[:-4])
    source = passed_over()
    assert source.startswith(f"wall time of spark-submit (the event log in {tmp_path} not read: ")
    assert "no SparkListenerApplicationEnd" in source or "line 8 (SparkListenerApplicationEnd)" in source
    # not zstd at all, or a damaged frame header: named, the log not quoted
    (rolled / f"events_1_{APP}.zstd").write_bytes(b"s3cr3t " + whole)
    assert passed_over() == (
        f"wall time of spark-submit (the event log in {tmp_path} not read: events_1_{APP}.zstd is no "
        "valid zstd stream (zstd decompress error: Unknown frame descriptor))"
    )
    # zstandard missing (installed without the [spark] extra): passed over, saying what to install
    monkeypatch.setitem(sys.modules, "zstandard", None)
    (rolled / f"events_1_{APP}.zstd").write_bytes(whole)
    assert "zstandard is not installed (the [spark] extra brings it)" in passed_over()


@pytest.mark.parametrize(
    ("line", "app_id"),
    [
        # the only line naming a local id when the user's log rolls (Spark 4's default)
        (
            "26/11/25 11:46:16 INFO RollingEventLogFilesWriter: Logging events to file:/tmp/ev/"
            "eventlog_v2_local-1795607174971/events_1_local-1795607174971.zstd",
            "local-1795607174971",
        ),
        (
            "26/11/25 11:46:16 INFO SingleEventLogFileWriter: Logging events to "
            "file:/tmp/bellamy-eventlog-0f1e/local-1795607174971.inprogress",
            "local-1795607174971",
        ),
        # Kubernetes in client mode: KubernetesConf.getKubernetesAppId, "spark-" + a UUID's hex
        (
            "26/11/25 11:46:16 INFO RollingEventLogFilesWriter: Logging events to file:/var/log/spark/"
            "eventlog_v2_spark-1340ea6be86c491a8eb42a40baea4ae9/events_1_spark-1340ea6be86c491a8eb42a40baea4ae9.zstd",
            "spark-1340ea6be86c491a8eb42a40baea4ae9",
        ),
        (
            "labels: spark-app-selector -> spark-1340ea6be86c491a8eb42a40baea4ae9, spark-role -> driver",
            "spark-1340ea6be86c491a8eb42a40baea4ae9",
        ),
        # Spark's scratch directories are spark-<UUID> with its dashes: no application id
        (
            "INFO ShutdownHookManager: Deleting directory /tmp/spark-1c6a8b6e-4d8f-4a3f-9b0e-6a2c7d4e5f91",
            None,
        ),
        (
            "INFO Utils: Successfully started service on port 40123 (spark-1340ea6be86c491a8eb42a40baea4ae9f)",
            None,
        ),
        (
            "INFO Client: Submitted application application_1795607174971_0042",
            "application_1795607174971_0042",
        ),
        (
            "INFO StandaloneSchedulerBackend: Connected to Spark cluster with app ID app-20261125114616-0003",
            "app-20261125114616-0003",
        ),
    ],
    ids=[
        "rolled local",
        "temporary local",
        "rolled kubernetes",
        "pod label",
        "scratch dir",
        "33 hex",
        "yarn",
        "standalone",
    ],
)
def test_the_application_id_spark_submit_logs(
    monkeypatch: pytest.MonkeyPatch, line: str, app_id: str | None
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_PLAN", connection_json("spark", host="local[2]", extra={}))
    hook = BellamySparkSubmitHook.adopt(SparkSubmitHook(conn_id="spark_plan"))
    hook._process_spark_submit_log(iter([line]))
    assert hook.bellamy_app_id == app_id


# -- which log a launch reads -----------------------------------------------------------------


def _plan(monkeypatch: pytest.MonkeyPatch, master: str, conf: dict[str, str] | None = None, **kw: Any) -> Any:
    monkeypatch.setenv(
        "AIRFLOW_CONN_SPARK_PLAN", connection_json("spark", host=master, extra=kw.pop("extra", {}))
    )
    op = BellamySparkSubmitOperator(
        task_id="t", conn_id="spark_plan", job_type="grep", scale_outs=[1], application="job.py", **kw
    )
    hook = op._launch_hook()
    kind = "standalone" if master.startswith("spark://") else "local"
    extra = op._plan_event_log(conf or {}, {"kind": kind}, hook)
    return extra, op._bellamy_event_log


def test_which_event_log_a_launch_reads(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "no-conf"))
    extra, place = _plan(monkeypatch, "local[2]")
    directory = place.directory
    assert place.temporary and extra["spark.eventLog.dir"] == directory.as_uri() and not directory.exists()
    # Spark 4's defaults (zstd, rolling) are switched off for it: readable without a codec
    assert extra["spark.eventLog.compress"] == "false" and extra["spark.eventLog.rolling.enabled"] == "false"
    assert _plan(monkeypatch, "local[2]", temporary_event_log=False) == ({}, None)
    assert _plan(monkeypatch, "local[2]", history_server_url="http://hs:18080") == ({}, None)
    assert _plan(monkeypatch, "spark://m:7077") == ({}, None)  # the master reports the duration
    assert _plan(monkeypatch, "yarn", extra={"deploy-mode": "cluster"}) == ({}, None)
    # the user's: read where it is local, never redirected
    user = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": f"file://{tmp_path}/ev"}
    assert _plan(monkeypatch, "local[2]", user) == ({}, EventLogPlace(tmp_path / "ev", temporary=False))
    assert _plan(monkeypatch, "local[2]", {**user, "spark.eventLog.dir": "hdfs://nn/ev"}) == ({}, None)
    assert _plan(monkeypatch, "local[2]", {"spark.eventLog.enabled": "false"}) == ({}, None)
    # ... also when spark-defaults.conf sets it (--conf would override the file)
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "spark-defaults.conf").write_text(
        "# site defaults\nspark.eventLog.enabled   true\nspark.eventLog.dir=hdfs://nn/spark-logs\n"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    assert _plan(monkeypatch, "local[2]") == ({}, None)


def test_temporary_event_log_must_be_a_bool() -> None:
    with pytest.raises(InvalidInputError, match=r"temporary_event_log.*'no'"):
        BellamySparkSubmitOperator(task_id="t", job_type="grep", scale_outs=[1], temporary_event_log="no")


# -- real spark-submit in client mode ----------------------------------------------------------


def _grep(conn_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "conn_id": conn_id,
        "job_type": "grep",
        "properties": {"machine_type": "loopback", "lines": 20000},
        "scale_outs": [2],
        "application": str(spark_job("grep")),
        "application_args": ["--lines", "20000", "--partitions", "2"],
        **extra,
    }


@pytest.mark.slow
@pytest.mark.spark
def test_local_client_mode_runs_are_timed_by_their_event_log(
    airflow_db: str,
    bellamy_store: Any,
    spark_local_conn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.sdk import DAG

    from tests.fixtures.airflow_db import run_dag_test

    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "no-conf"))  # no site defaults on this machine
    users = tmp_path / "user-events"
    users.mkdir()
    with DAG(
        "test_bellamy_spark_event_log",
        schedule=None,
        start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
    ) as dag:
        BellamySparkSubmitOperator(task_id="temporary", **_grep(spark_local_conn))
        BellamySparkSubmitOperator(
            task_id="users",
            **_grep(
                spark_local_conn,
                conf={
                    "spark.eventLog.enabled": "true",
                    "spark.eventLog.dir": users.as_uri(),
                    "spark.eventLog.compress": "false",
                },
            ),
        )
    dr = run_dag_test(dag)
    assert task_states(dr) == {"temporary": "success", "users": "success"}
    runs = {r["task_id"]: r for r in bellamy_store.list_runs("grep", limit=None)}

    temporary = xcom_value(dr, "temporary")
    assert temporary["runtime_source"] == f"event log ({temporary['app_id']}); event log executor add times"
    ended, started = (
        dt.datetime.fromisoformat(str(runs["temporary"][k])) for k in ("ended_at", "started_at")
    )
    wall_s = (ended - started).total_seconds()
    assert 0 < runs["temporary"]["runtime_s"] < wall_s and runs["temporary"]["excluded_reason"] is None
    # local[2]: the driver's 2 threads from the moment they were there, the SparkContext's start-up before
    assert temporary["queue_s"] > 0 and runs["temporary"]["scale_out"] == 2
    command = xcom_value(dr, "temporary", "spark_submit_command")
    (log_dir,) = [a.split("=", 1)[1] for a in command if a.startswith("spark.eventLog.dir=")]
    assert "bellamy-eventlog-" in log_dir and not Path(log_dir.removeprefix("file://")).exists()

    user = xcom_value(dr, "users")
    assert user["runtime_source"] == f"event log ({user['app_id']}); event log executor add times"
    # Spark 4 rolls it by default (rolling left on here): read from its directory, left in place
    assert (users / f"eventlog_v2_{user['app_id']}" / f"events_1_{user['app_id']}").is_file()
    command = xcom_value(dr, "users", "spark_submit_command")
    assert f"spark.eventLog.dir={users.as_uri()}" in command and "bellamy-eventlog-" not in " ".join(command)


# A job that, like most, prints no application id (spark-submit's log must name it), and can
# damage its own event log after stopping its SparkContext, before spark-submit ends.
_QUIET_JOB = """
import pathlib, sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
spark.range(200_000, numPartitions=2).selectExpr("sum(id)").collect()
app = spark.sparkContext.applicationId
logs = pathlib.Path(spark.conf.get("spark.eventLog.dir").removeprefix("file:"))
spark.stop()
if sys.argv[1:] == ["--damage-log"]:
    for part in logs.glob(f"eventlog_v2_{app}/events_*"):
        part.write_bytes(b"\\0\\0\\0\\0" + part.read_bytes()[4:])  # its zstd magic number gone
"""


@pytest.mark.slow
@pytest.mark.spark
def test_a_users_event_log_with_spark_4s_defaults_times_the_run(
    airflow_db: str,
    bellamy_store: Any,
    spark_local_conn: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Spark 4.2 compresses (zstd) and rolls the event log by default: a user who only switches it
    on gets the runtime from it; a damaged log or another codec's falls back to the wall time,
    saying why, the task's success standing."""
    from airflow.sdk import DAG

    from tests.fixtures.airflow_db import run_dag_test

    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "no-conf"))  # no site defaults on this machine
    job = tmp_path / "quiet.py"
    job.write_text(_QUIET_JOB)
    dirs = {name: tmp_path / name for name in ("default", "damaged", "lz4")}
    for directory in dirs.values():
        directory.mkdir()

    def quiet(name: str, *args: str, **conf: str) -> BellamySparkSubmitOperator:
        return BellamySparkSubmitOperator(
            task_id=name,
            **{
                **_grep(spark_local_conn),
                "application": str(job),
                "application_args": list(args),
                "conf": {"spark.eventLog.enabled": "true", "spark.eventLog.dir": dirs[name].as_uri(), **conf},
            },
        )

    with DAG(
        "test_bellamy_spark_event_log_defaults",
        schedule=None,
        start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc),
    ) as dag:
        quiet("default")
        quiet("damaged", "--damage-log")
        quiet("lz4", **{"spark.eventLog.compression.codec": "lz4"})
    dr = run_dag_test(dag)
    assert task_states(dr) == {"default": "success", "damaged": "success", "lz4": "success"}
    runs = {r["task_id"]: r for r in bellamy_store.list_runs("grep", limit=None)}

    default = xcom_value(dr, "default")
    app = default["app_id"]
    assert app.startswith("local-")  # from Spark's "Logging events to …/eventlog_v2_<id>/…" line
    assert (dirs["default"] / f"eventlog_v2_{app}" / f"events_1_{app}.zstd").is_file()  # the defaults
    assert default["runtime_source"] == f"event log ({app}); event log executor add times"
    ended, started = (dt.datetime.fromisoformat(str(runs["default"][k])) for k in ("ended_at", "started_at"))
    assert 0 < runs["default"]["runtime_s"] < (ended - started).total_seconds()
    assert default["queue_s"] > 0 and runs["default"]["scale_out"] == 2

    damaged = xcom_value(dr, "damaged")
    assert damaged["runtime_source"] == (
        f"wall time of spark-submit (the event log in {dirs['damaged']} not read: "
        f"events_1_{damaged['app_id']}.zstd is no valid zstd stream (zstd decompress error: Unknown frame "
        "descriptor))"
    )
    lz4 = xcom_value(dr, "lz4")
    assert lz4["runtime_source"].startswith(
        f"wall time of spark-submit (the event log in {dirs['lz4']} not read: "
    )
    assert (
        f"events_1_{lz4['app_id']}.lz4 is compressed (lz4, spark.eventLog.compression.codec)"
        in (lz4["runtime_source"])
    )
    assert runs["damaged"]["excluded_reason"] is None and runs["lz4"]["excluded_reason"] is None


def test_the_hook_reads_a_log_and_passes_over_one_that_is_not_whole(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_PLAN", connection_json("spark", host="local[2]", extra={}))
    hook = BellamySparkSubmitHook.adopt(SparkSubmitHook(conn_id="spark_plan"))
    (tmp_path / APP).write_text("\n".join(_log()) + "\n")
    ours = EventLogPlace(tmp_path, temporary=True)
    observed = hook.read_event_log(ours, APP, requested=2, executor_cores=1)
    assert (observed.runtime_s, observed.queue_s, observed.scale_out) == pytest.approx((30.0, 3.0, 2))
    assert observed.source == f"event log ({APP}); event log executor add times"
    # no id logged (Kubernetes' spark-<uuid>): the one log of a directory of ours, never a user's
    assert hook.read_event_log(ours, None, requested=2, executor_cores=1).source.startswith(
        f"event log ({APP})"
    )
    with pytest.raises(EventLogUnreadableError, match="no application id"):
        hook.read_event_log(EventLogPlace(tmp_path, temporary=False), None, requested=2, executor_cores=1)
    (tmp_path / "local-1").write_text("")
    with pytest.raises(EventLogUnreadableError, match="2 logs in it"):
        hook.read_event_log(ours, None, requested=2, executor_cores=1)

    # binary (a codec without a short name): passed over, not a failed task
    (tmp_path / "local-1").unlink()
    (tmp_path / APP).write_bytes(b"\x28\xb5\x2f\xfd\xff\xfe s3cr3t")
    with pytest.raises(EventLogUnreadableError, match="not UTF-8"):
        hook.read_event_log(ours, APP, requested=2, executor_cores=1)

    # a driver killed mid-run: the wall time, the reason named, no line of the log quoted
    (tmp_path / APP).write_text("\n".join([*_log(end=False), "s3cr3t"]))
    wall = ObservedRun.wall_time(40.0, "wall time of spark-submit", 2, cluster_mode=False)
    observed = hook.observe_application(
        APP, name="grep", requested=2, executor_cores=1, event_log=ours, fallback=wall
    )
    assert observed.runtime_s == 40.0 and "s3cr3t" not in observed.source
    assert (
        observed.source
        == f"wall time of spark-submit (the event log in {tmp_path} not read: line 8 is not a Spark listener event)"
    )


def test_conf_and_spark_defaults_combine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "spark-defaults.conf").write_text("spark.eventLog.enabled true\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    # --conf sets the directory, the defaults file switches logging on: both hold
    assert _plan(monkeypatch, "local[2]", {"spark.eventLog.dir": str(tmp_path / "ev")}) == (
        {},
        EventLogPlace(tmp_path / "ev", temporary=False),
    )
