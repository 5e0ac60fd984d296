"""What is recorded as a run's runtime: the time it ran at the size it was granted, with the wait
for that size (queue_s) apart, the size asked for, and runs at no single size kept out of training.

The split itself is checked here on cluster answers of the documented shapes; the Spark and
Flink tests check it against live clusters (tests/airflow/test_spark_contention.py, tests/flink).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.hooks.flink import parse_flink_job
from airflow_provider_bellamy.hooks.job_status import JobStatus, flink_status_steps
from airflow_provider_bellamy.hooks.spark_timing import (
    MasterGrantSampler,
    ObservedRun,
    timing_from_grants,
    timing_from_history,
)
from airflow_provider_bellamy.store import HEAD_REVISION


def test_queueing_before_the_first_executor_is_not_runtime() -> None:
    # 79.15 s on the master, no executor for the first 27.75 s, then 2 executors to the end
    timing = timing_from_grants(79.15, [(0.0, 0), (27.75, 2), (79.0, 2)], source="test")
    assert timing is not None
    assert timing.queue_s == 27.75
    assert timing.runtime_s == pytest.approx(51.4)
    assert timing.granted == 2 and timing.excluded_reason is None
    observed = ObservedRun.of(79.15, timing, "master", requested=2)
    assert (observed.scale_out, observed.queue_s) == (2, 27.75)


def test_a_run_granted_fewer_executors_is_recorded_at_what_it_got() -> None:
    timing = timing_from_grants(40.0, [(0.5, 1), (20.0, 1)], source="test")
    assert timing is not None and timing.granted == 1 and timing.excluded_reason is None
    assert ObservedRun.of(40.0, timing, "master", requested=3).scale_out == 1


def test_executors_arriving_in_steps_keep_the_run_out_of_training() -> None:
    timing = timing_from_grants(60.0, [(1.0, 1), (25.0, 2)], source="test")
    assert timing is not None and timing.granted == 2 and timing.queue_s == 1.0
    assert timing.excluded_reason is not None and "1 at +1.0 s, 2 at +25.0 s" in timing.excluded_reason
    # a second executor a moment later (within 10 % of the run) is one size
    assert timing_from_grants(60.0, [(1.0, 1), (3.0, 2)], source="t").excluded_reason is None  # type: ignore[union-attr]


def test_no_executor_ever_granted_keeps_the_plain_duration() -> None:
    assert timing_from_grants(10.0, [(0.0, 0), (5.0, 0)], source="t") is None
    observed = ObservedRun.of(10.0, None, "master", requested=4)
    assert (observed.runtime_s, observed.scale_out, observed.queue_s) == (10.0, 4, None)


def test_history_server_executor_add_times() -> None:
    attempt = {"startTime": "2026-11-22T10:00:00.000GMT", "endTime": "2026-11-22T10:01:00.000GMT"}
    executors = [
        {"id": "driver", "addTime": "2026-11-22T10:00:00.100GMT", "totalCores": 0},
        {"id": "0", "addTime": "2026-11-22T10:00:12.000GMT", "totalCores": 2},
        {"id": "1", "addTime": "2026-11-22T10:00:12.500GMT", "totalCores": 2},
    ]
    timing = timing_from_history(attempt, executors, executor_cores=2)
    assert timing is not None
    assert timing.queue_s == pytest.approx(12.0) and timing.runtime_s == pytest.approx(48.0)
    assert timing.granted == 2 and timing.excluded_reason is None
    # an executor lost mid-run and never replaced: it still held 2 at most
    executors[2]["removeTime"] = "2026-11-22T10:00:40.000GMT"
    assert timing_from_history(attempt, executors, executor_cores=2).granted == 2  # type: ignore[union-attr]


def test_master_sampler_follows_one_application_by_id() -> None:
    answers = iter(
        [
            {"activeapps": [{"id": "app-1", "cores": 0}, {"id": "other", "cores": 2}]},
            {"activeapps": [{"id": "app-1", "cores": 0}]},
            {"activeapps": [{"id": "app-1", "cores": 2}]},
        ]
    )
    ids = iter([None, "app-1", "app-1", "app-1"])
    sampler = MasterGrantSampler(fetch=lambda: next(answers), app_id=lambda: next(ids), executor_cores=2)
    for _ in range(4):
        sampler.poll_once()
    assert [n for _, n in sampler.samples] == [0, 0, 1]
    timing = sampler.timing(30.0)
    assert timing is not None and timing.granted == 1
    assert timing.queue_s == sampler.samples[2][0]


def test_master_sampler_skips_an_answer_it_cannot_read() -> None:
    """A malformed answer is a missed sample: it ended the sampling thread, leaving the
    timing to the samples before it."""
    answers = iter(
        [
            {"activeapps": [{"id": "app-1", "cores": 2}]},
            {"activeapps": [{"id": "app-1", "cores": "n/a"}]},
            {"activeapps": ["app-1"]},
            {"activeapps": [{"id": "app-1", "cores": 4}]},
        ]
    )
    sampler = MasterGrantSampler(fetch=lambda: next(answers), app_id=lambda: "app-1", executor_cores=2)
    for _ in range(4):
        sampler.poll_once()
    assert [n for _, n in sampler.samples] == [1, 2] and sampler.errors == 2


def _flink_job(**timestamps: int) -> dict[str, Any]:
    return {
        "jid": "a" * 32,
        "name": "wc",
        "state": "FINISHED",
        "start-time": 1_000,
        "end-time": 31_000,
        "duration": 30_000,
        "timestamps": {"INITIALIZING": 1_000, "CREATED": 1_050, **timestamps},
        "vertices": [{"name": "src", "parallelism": 3}],
    }


def test_flink_runtime_is_running_to_finished() -> None:
    job = parse_flink_job(_flink_job(RUNNING=5_000, FINISHED=31_000))
    assert job.queue_ms == 4_000 and job.runtime_s == 26.0 and job.parallelism == 3
    steps = flink_status_steps("a" * 32, "test")
    assert next(steps) == f"/jobs/{'a' * 32}"
    with pytest.raises(StopIteration) as done:
        steps.send((200, _flink_job(RUNNING=5_000, FINISHED=31_000)))
    status = done.value.value
    assert status.queue_s == 4.0 and status.runtime_s == 26.0
    assert status.runtime_s + status.queue_s == status.duration_ms / 1000
    # a Flink that reports no RUNNING time: the whole duration, no queue
    assert parse_flink_job(_flink_job()).runtime_s == 30.0


def _finished_status(payload: dict[str, Any]) -> Any:
    steps = flink_status_steps("a" * 32, "test")
    next(steps)
    with pytest.raises(StopIteration) as done:
        steps.send((200, payload))
    return done.value.value


def test_flink_figures_that_do_not_parse_are_read_as_not_reported() -> None:
    """A finished job whose answer has a malformed figure still reads as finished (its task must
    not fail, nor its retry wait for it again): the figure is read as not reported, and named."""
    status = _finished_status({**_flink_job(RUNNING=5_000, FINISHED=31_000), "duration": "n/a"})
    assert status.terminal and status.succeeded
    # Flink's duration is end-time - start-time
    assert status.duration_ms == 30_000 and status.runtime_s == 26.0 and status.queue_s == 4.0
    assert status.unreadable == "duration='n/a'"
    # a RUNNING time and a vertex parallelism that do not parse: the whole duration, no queue
    job = parse_flink_job(
        {
            **_flink_job(RUNNING="5 s"),  # type: ignore[arg-type]
            "vertices": [{"name": "src", "parallelism": "three"}, {"name": "map", "parallelism": 2}],
        }
    )
    assert job.runtime_s == 30.0 and job.queue_ms is None and job.parallelism == 2
    assert job.unreadable == ("parallelism='three'", "RUNNING='5 s'")
    # nothing to read a duration from: no runtime (not recorded), never a 0 s run
    status = _finished_status({**_flink_job(), "duration": "n/a", "start-time": "soon"})
    assert status.succeeded and status.duration_ms is None and status.runtime_s is None
    assert status.unreadable == "start-time='soon', duration='n/a'"
    assert JobStatus.from_dict(status.to_dict()) == status  # a trigger's event carries it
    # no duration at all: end-time - start-time too, and without them no runtime (it was a 0 s run)
    payload = {k: v for k, v in _flink_job(RUNNING=5_000, FINISHED=31_000).items() if k != "duration"}
    status = _finished_status(payload)
    assert status.duration_ms == 30_000 and status.runtime_s == 26.0 and status.unreadable is None
    status = _finished_status({**payload, "start-time": None})
    assert status.succeeded and status.duration_ms is None and status.runtime_s is None


def test_store_keeps_timing_and_trains_only_on_runs_at_one_size(bellamy_store: Any, tmp_path: Path) -> None:
    b = bellamy_store
    common = {"job_type": "grep", "framework": "spark", "context": {"cores": 1}}
    kept = b.record_run(scale_out=2, runtime_s=51.4, queue_s=27.75, requested_scale_out=2, **common)
    fewer = b.record_run(scale_out=1, runtime_s=80.0, queue_s=0.5, requested_scale_out=2, **common)
    mixed = b.record_run(
        scale_out=2, runtime_s=60.0, queue_s=1.0, excluded_reason="executors arrived in steps", **common
    )
    rows = {r["id"]: r for r in b.list_runs("grep", limit=None)}
    assert (rows[kept]["queue_s"], rows[kept]["requested_scale_out"]) == (27.75, 2)
    assert (rows[fewer]["scale_out"], rows[fewer]["requested_scale_out"]) == (1, 2)
    assert rows[mixed]["excluded_reason"] == "executors arrived in steps"
    assert sorted(b.runs_frame("grep")["id"]) == [kept, fewer]  # what training sees

    # export carries the columns, import reads them back (and still trains on the same two)
    path = tmp_path / "runs.csv"
    assert b.export_runs(path) == 3
    from airflow_provider_bellamy.datasets import load_runs_file
    from airflow_provider_bellamy.facade import Bellamy

    other = Bellamy(f"sqlite:///{tmp_path / 'other.db'}")
    other.upgrade()
    other.record_runs(load_runs_file(path))
    again = sorted(other.list_runs("grep", limit=None), key=lambda r: r["id"])
    assert [(r["queue_s"], r["requested_scale_out"], r["excluded_reason"]) for r in again] == [
        (27.75, 2, None),
        (0.5, 2, None),
        (1.0, None, "executors arrived in steps"),
    ]
    assert len(other.runs_frame("grep")) == 2

    with pytest.raises(InvalidInputError, match=r"queue_s=-1"):
        b.record_run(scale_out=1, runtime_s=1.0, queue_s=-1, **common)
    with pytest.raises(InvalidInputError, match=r"requested_scale_out=0"):
        b.record_run(scale_out=1, runtime_s=1.0, requested_scale_out=0, **common)


def test_migration_0002_keeps_the_runs_of_a_0001_store(tmp_path: Path) -> None:
    from airflow_provider_bellamy.facade import Bellamy
    from airflow_provider_bellamy.store import Store

    url = f"sqlite:///{tmp_path / 'old.db'}"
    Store(url).upgrade("0001_initial")
    with sqlite3.connect(tmp_path / "old.db") as conn:
        conn.execute(
            "INSERT INTO runs (job_type, framework, scale_out, runtime_s, context, context_fingerprint,"
            " status, source, recorded_at) VALUES ('grep', 'spark', 2, 79.15, '{}', 'x', 'success',"
            " 'trace', '2026-11-22 10:00:00')"
        )
    b = Bellamy(url)
    assert b.schema_status().state == "outdated"
    assert b.upgrade() == ("0001_initial", HEAD_REVISION)
    [run] = b.list_runs(limit=None)
    assert run["runtime_s"] == 79.15 and run["queue_s"] is None and run["excluded_reason"] is None
