"""Recording runs: idempotent per Airflow try, validated before writing, failed runs kept apart."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from airflow_provider_bellamy.datasets import load_traces
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.records import context_fingerprint, normalize_context
from airflow_provider_bellamy.store import RunRepository, Store
from tests.store.conftest import observed_run


def test_same_airflow_try_is_recorded_once(bellamy: Bellamy) -> None:
    first = bellamy.record_run(**observed_run())
    again = bellamy.record_run(**observed_run(runtime_s=999.0))
    assert again == first
    assert bellamy.count_runs() == 1
    assert bellamy.list_runs()[0]["runtime_s"] == 120.5  # the first write is kept
    retry = bellamy.record_run(**observed_run(try_number=2))
    mapped = bellamy.record_run(**observed_run(map_index=3))
    other_run = bellamy.record_run(**observed_run(run_id="manual__x"))
    assert len({first, retry, mapped, other_run}) == 4
    assert bellamy.count_runs() == 4


def test_record_runs_in_one_call_is_idempotent_too(bellamy: Bellamy) -> None:
    rows = [observed_run(task_id=f"t{i}", scale_out=i + 1) for i in range(5)]
    ids = bellamy.record_runs(rows)
    assert len(set(ids)) == 5
    assert bellamy.record_runs(rows) == ids
    # The same try twice in one batch is one row too.
    dup = bellamy.record_runs([observed_run(task_id="z"), observed_run(task_id="z")])
    assert dup[0] == dup[1]
    assert bellamy.count_runs() == 6


def test_trace_rows_are_never_merged(bellamy: Bellamy) -> None:
    frame = load_traces("bell", job_type="grep").head(39)
    frame = pd.concat([frame, frame.iloc[[0]]], ignore_index=True)  # an exact repetition, as traces have
    ids = bellamy.record_runs(frame)
    assert len(ids) == 40 and len(set(ids)) == 40
    bellamy.record_runs(frame)
    assert bellamy.count_runs(source="trace", dataset="bell") == 80
    stored = bellamy.list_runs(limit=1)[0]
    assert stored["source"] == "trace" and stored["dag_id"] is None
    assert stored["context"]["machine_type"] == "bell-node-4c16g"
    expected_fp = context_fingerprint("grep", normalize_context(frame.iloc[0].to_dict()))
    assert stored["context_fingerprint"] == expected_fp


def test_import_traces_once_per_set(bellamy: Bellamy) -> None:
    assert bellamy.import_traces("bell") == {"bell": 315}
    assert bellamy.import_traces("bell") == {"bell": 0}
    assert bellamy.count_runs() == 315
    assert bellamy.import_traces("bell", append=True) == {"bell": 315}
    with pytest.raises(InvalidInputError, match="traces='nope'"):
        bellamy.import_traces("nope")


def test_failed_runs_are_kept_but_never_trained_on(bellamy: Bellamy, store: Store) -> None:
    ok = bellamy.record_run(**observed_run())
    failed = bellamy.record_run(**observed_run(try_number=2, status="failed", runtime_s=3.0))
    assert bellamy.count_runs() == 2
    assert bellamy.count_runs(status="failed") == 1
    fp = bellamy.list_runs()[0]["context_fingerprint"]
    with store.read() as session:
        repo = RunRepository(session)
        assert [r.id for r in repo.training_runs("grep")] == [ok]
        assert [r.id for r in repo.training_runs("grep", fingerprint=fp)] == [ok]
        assert repo.training_summary("grep", fp) == (1, ok)
        assert [r.id for r in repo.runs_since(0)] == [ok, failed]
        assert [r.id for r in repo.runs_since(ok)] == [failed]
        assert repo.job_types(successful_only=True) == ["grep"]
    frame = bellamy.runs_frame("grep")
    assert list(frame["id"]) == [ok]
    everything = bellamy.runs_frame("grep", successful_only=False)
    assert list(everything["status"]) == ["success", "failed"]


def test_provenance_and_timestamps_round_trip(bellamy: Bellamy) -> None:
    started = dt.datetime(2025, 3, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    row_id = bellamy.record_run(
        **observed_run(started_at=started, ended_at="2025-03-01T10:02:00Z", external_id="app-20250301-0001")
    )
    run = bellamy.list_runs()[0]
    assert run["id"] == row_id
    assert dt.datetime.fromisoformat(run["started_at"]) == started
    assert run["started_at"].endswith("+00:00")
    assert dt.datetime.fromisoformat(run["ended_at"]) - started == dt.timedelta(minutes=2)
    assert run["external_id"] == "app-20250301-0001"
    assert (run["dag_id"], run["task_id"], run["map_index"], run["try_number"]) == ("etl", "grep_logs", -1, 1)


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"scale_out": 0}, "scale_out"),
        ({"scale_out": 2.5}, "scale_out"),
        ({"runtime_s": -1.0}, "runtime_s"),
        ({"runtime_s": float("nan")}, "runtime_s"),
        ({"job_type": " "}, "job_type"),
        ({"status": "crashed"}, "status"),
        ({"run_id": None}, "run_id"),
        ({"try_number": -2}, "try_number"),
        ({"ti_id": "not-a-uuid"}, "ti_id"),
        ({"ti_id": 17}, "ti_id"),
        ({"started_at": "yesterday"}, "started_at"),
        ({"ended_at": "2020-01-01T00:00:00"}, "ended_at"),
        ({"context": {"data_size_mb": float("inf")}}, "context.data_size_mb"),
        ({"context": {"scale_out": 3}}, "context"),
    ],
)
def test_bad_run_is_refused_and_nothing_is_lost(bellamy: Bellamy, override: dict, field: str) -> None:
    kept = bellamy.record_run(**observed_run(task_id="kept"))
    bad = observed_run(task_id="bad", **{"started_at": "2025-01-01T00:00:00", **override})
    with pytest.raises(InvalidInputError) as err:
        bellamy.record_runs([observed_run(task_id="good"), bad])
    assert err.value.field == field
    assert field in str(err.value)
    assert [r["id"] for r in bellamy.list_runs()] == [kept]  # neither row of the batch was written


def test_bad_frame_row_is_named_with_its_position(bellamy: Bellamy) -> None:
    frame = load_traces("bell", job_type="sgd").head(5).copy()
    frame.loc[3, "runtime_s"] = 0.0
    with pytest.raises(InvalidInputError, match=r"runs row 3: runtime_s=0\.0"):
        bellamy.record_runs(frame)
    with pytest.raises(InvalidInputError, match="runs"):
        bellamy.record_runs(pd.DataFrame())
    with pytest.raises(InvalidInputError, match="runs"):
        bellamy.record_runs([])
    with pytest.raises(InvalidInputError, match="runs"):
        bellamy.record_runs("grep,spark,2,10")  # type: ignore[arg-type]
    assert bellamy.count_runs() == 0


def test_trace_rows_cannot_claim_airflow_provenance(bellamy: Bellamy) -> None:
    with pytest.raises(InvalidInputError, match="source"):
        bellamy.record_run(**observed_run(source="trace"))
    with pytest.raises(InvalidInputError, match="source"):  # nor Airflow's id of a try
        bellamy.record_run(
            job_type="grep", framework="spark", scale_out=2, runtime_s=9.0, context={"machine_type": "m"},
            source="trace", ti_id="01a21331-1786-770c-9854-adfcbb06b5a9",
        )  # fmt: skip
    assert bellamy.count_runs() == 0
