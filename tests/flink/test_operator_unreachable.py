"""``BellamyFlinkOperator``'s waits follow the rule ``BellamyJobSensor`` follows for a JobManager
that refuses connections or answers something that is no status: ask again until that has lasted
``unreachable_grace_s``, then fail with the endpoint's error, in the blocking and the deferred wait
alike (until session 30 the operator had no such argument: its waits always took 60 s).

The JobManager is a real HTTP server on 127.0.0.1 answering ``GET /overview`` and ``GET /jobs/<id>``
as Flink does; the operator reattaches to the job it lists (a retry's path), so nothing is submitted.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import TaskDeferred

from airflow_provider_bellamy.exceptions import InvalidInputError, JobEndpointUnreachableError
from airflow_provider_bellamy.operators.flink import BellamyFlinkOperator
from airflow_provider_bellamy.triggers.job import BellamyJobTrigger
from tests.fixtures.airflow import connection_json
from tests.fixtures.http import json_server

OVERVIEW = {"taskmanagers": 1, "slots-total": 4, "slots-available": 4, "jobs-running": 1}
PROXY_PAGE = (200, "<html>502 Bad Gateway</html>")  # what a proxy hands on while the JobManager restarts


def _job(job_id: str, state: str) -> tuple[int, Any]:
    ended = state == "FINISHED"
    return 200, {
        "jid": job_id,
        "name": "wc",
        "state": state,
        "start-time": 1_000,
        "end-time": 31_000 if ended else -1,
        "duration": 30_000 if ended else 5_000,
        "vertices": [{"name": "src", "parallelism": 2}],
    }


@contextmanager
def jobmanager(monkeypatch: pytest.MonkeyPatch, statuses: list[str | tuple[int, Any]]) -> Iterator[list[str]]:
    """A JobManager behind the ``flink_standin`` connection whose n-th answer to ``/jobs/<id>``
    (from 0) is ``statuses[n]`` (a state, or a whole answer), the last one repeated; yields the
    job paths it was asked."""
    asked: list[str] = []
    lock = threading.Lock()

    def answer(path: str, client: tuple[str, int]) -> tuple[int, Any]:
        if path == "/overview":
            return 200, OVERVIEW
        found = re.fullmatch(r"/jobs/([0-9a-f]{32})", path)
        if found is None:
            return 404, {"errors": ["Not found."]}
        with lock:
            asked.append(path)
            status = statuses[min(len(asked), len(statuses)) - 1]
        return _job(found.group(1), status) if isinstance(status, str) else status

    with json_server(answer) as url:
        port = int(url.rsplit(":", 1)[1])
        monkeypatch.setenv(
            "AIRFLOW_CONN_FLINK_STANDIN", connection_json("flink", host="127.0.0.1", port=port)
        )
        yield asked


def _operator(tmp_path: Path, **kwargs: Any) -> BellamyFlinkOperator:
    script = tmp_path / "wc.py"
    script.write_text("print('wc')\n")
    return BellamyFlinkOperator(
        task_id="wc",
        job_type="wc",
        application=str(script),
        flink_conn_id="flink_standin",
        poll_interval_s=0.01,
        record=False,
        **kwargs,
    )


def _context(op: BellamyFlinkOperator, **extra: Any) -> dict[str, Any]:
    ti = SimpleNamespace(
        dag_id="d",
        task_id="wc",
        run_id="manual__1",
        map_index=-1,
        try_number=2,
        xcom_push=lambda key, value: None,
        xcom_pull=lambda **kwargs: None,
    )
    return {"ti": ti, "task": op, **extra}


def _events(trigger: BellamyJobTrigger) -> list[dict[str, Any]]:
    async def collect() -> list[dict[str, Any]]:
        return [dict(event.payload) async for event in trigger.run()]

    return asyncio.run(collect())


# the first /jobs answer is the operator's look for an earlier try's job (it reattaches to it)
BACK_AGAIN = ["RUNNING", PROXY_PAGE, (502, "Bad Gateway"), PROXY_PAGE, "RUNNING", "FINISHED"]
GONE = ["RUNNING", PROXY_PAGE]


def test_the_blocking_wait_rides_out_a_restarting_jobmanager_within_its_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with jobmanager(monkeypatch, BACK_AGAIN) as asked:
        op = _operator(tmp_path, unreachable_grace_s=60)
        out = op.execute(_context(op))
    assert out["state"] == "FINISHED" and out["reattached"] is True and out["parallelism"] == 2
    assert len(asked) == 6


def test_the_blocking_wait_fails_with_the_endpoints_error_once_its_grace_runs_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with jobmanager(monkeypatch, GONE) as asked:
        op = _operator(tmp_path, unreachable_grace_s=0.2)
        with pytest.raises(JobEndpointUnreachableError, match=r"127\.0\.0\.1"):
            op.execute(_context(op))
        assert len(asked) > 2  # asked again while the grace lasted
        asked.clear()
        none = _operator(tmp_path, unreachable_grace_s=0)
        with pytest.raises(JobEndpointUnreachableError):
            none.execute(_context(none))
    assert len(asked) == 2  # the look for the earlier try's job, then one status: no grace


def test_the_deferred_wait_takes_the_same_grace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with jobmanager(monkeypatch, GONE):
        op = _operator(tmp_path, deferrable=True, unreachable_grace_s="0.2")
        context = _context(op)
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context)
        trigger = deferred.value.trigger
        assert isinstance(trigger, BellamyJobTrigger)
        assert trigger.serialize()[1]["unreachable_grace_s"] == 0.2
        (event,) = _events(trigger)
    assert event["status"] == "error"
    with pytest.raises(JobEndpointUnreachableError, match=r"127\.0\.0\.1"):
        op.resume_execution("execute_complete", {"event": event, **deferred.value.kwargs}, context)

    with jobmanager(monkeypatch, BACK_AGAIN):
        op = _operator(tmp_path, deferrable=True, unreachable_grace_s=60)
        context = _context(op)
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context)
        (event,) = _events(deferred.value.trigger)
    assert event["status"] == "done"
    out = op.resume_execution("execute_complete", {"event": event, **deferred.value.kwargs}, context)
    assert out["state"] == "FINISHED" and out["reattached"] is True


def test_a_templated_grace_is_read_once_rendered_before_the_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with jobmanager(monkeypatch, ["RUNNING"]) as asked:
        op = _operator(tmp_path, deferrable=True, unreachable_grace_s="{{ params.grace }}")
        context = _context(op, params={"grace": 45})
        op.render_template_fields(context)
        assert op.unreachable_grace_s == "45"  # what Jinja renders a number to
        with pytest.raises(TaskDeferred) as deferred:
            op.execute(context)
        assert deferred.value.trigger.serialize()[1]["unreachable_grace_s"] == 45.0

        asked.clear()
        op = _operator(tmp_path, unreachable_grace_s="{{ params.grace }}")
        context = _context(op, params={"grace": "soon"})
        op.render_template_fields(context)
        with pytest.raises(InvalidInputError, match=r"unreachable_grace_s='soon'"):
            op.execute(context)
    assert asked == []  # refused before the cluster is asked about any job


def test_the_grace_reads_as_a_duration_and_a_bad_one_fails_the_dag_by_name(tmp_path: Path) -> None:
    assert _operator(tmp_path).unreachable_grace_s == 60.0
    assert _operator(tmp_path, unreachable_grace_s="2m").unreachable_grace_s == 120.0
    assert _operator(tmp_path, unreachable_grace_s=0).unreachable_grace_s == 0.0
    for bad in ("abc", -1, float("nan"), None):
        with pytest.raises(InvalidInputError, match=rf"unreachable_grace_s={bad!r}"):
            _operator(tmp_path, unreachable_grace_s=bad)


def test_a_pipeline_files_flink_block_gives_the_grace(tmp_path: Path) -> None:
    from airflow_provider_bellamy.config import load_pipeline_config

    (tmp_path / "wc.py").write_text("print('wc')\n")
    path = tmp_path / "jobs.yaml"
    path.write_text(
        "jobs:\n  wc:\n    framework: flink\n    scale_out: [1, 2]\n"
        "    flink: {application: wc.py, unreachable_grace_s: 2m}\n"
    )
    op = BellamyFlinkOperator.from_config(load_pipeline_config(path).job("wc"))
    assert op.unreachable_grace_s == 120.0
