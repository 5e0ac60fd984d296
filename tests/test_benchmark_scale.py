"""`bellamy benchmark scale`: its bad input, the stores it refuses, and its bulk fill (the
measurements themselves take minutes: they are the benchmark's output, not a test)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from airflow_provider_bellamy.benchmarks.scale import Synthetic, fill, levels_for, validate_count
from airflow_provider_bellamy.cli import main
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.records import context_fingerprint
from airflow_provider_bellamy.store import Decision, Run


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--runs", "0"], "--runs"),
        (["--runs", "-10"], "--runs"),
        (["--runs", "1e12"], "--runs"),
        (["--runs", "ten"], "--runs"),
        (["--runs", "12500.5"], "--runs"),
        (["--runs", "nan"], "--runs"),
        (["--contexts", "1"], "--contexts"),
        (["--runs", "10000", "--contexts", "5000"], "--contexts"),
        (["--samples", "0"], "--samples"),
        (["--train-budget", "-1"], "--train-budget"),
        (["--train-at", "last"], "--train-at"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    args: list[str],
    field: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    named = tmp_path / "named.db"
    assert main(["benchmark", "scale", "--store-url", f"sqlite:///{named}", *args]) == 2
    err = capsys.readouterr().err
    assert field in err and "error" in err
    assert not named.exists() and not (tmp_path / "home").exists()


def test_counts_accept_scientific_and_underscores() -> None:
    assert validate_count("1e6", "--runs", 1000, 10**7) == 1_000_000
    assert validate_count("100_000", "--runs", 1000, 10**7) == 100_000
    with pytest.raises(InvalidInputError, match="--runs"):
        validate_count(True, "--runs", 1000, 10**7)
    assert levels_for(1_000_000) == [10_000, 100_000, 1_000_000]
    assert levels_for(250_000) == [10_000, 100_000, 250_000]
    assert levels_for(5_000) == [5_000]


def test_unreachable_store_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    url = "postgresql+psycopg://bench@127.0.0.1:1/nowhere"
    assert main(["benchmark", "scale", "--runs", "10000", "--store-url", url]) == 2
    err = capsys.readouterr().err
    assert "cannot use the model store at postgresql+psycopg://bench@127.0.0.1:1/nowhere" in err


def test_a_store_holding_runs_is_refused_without_force(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    b = Bellamy(store_url)
    b.upgrade()
    b.record_run(job_type="grep", framework="spark", scale_out=2, runtime_s=10.0)
    assert main(["benchmark", "scale", "--runs", "10000", "--store-url", store_url]) == 2
    err = capsys.readouterr().err
    assert "--store-url" in err and "already holds 1 runs" in err and "--force" in err
    assert b.count_runs() == 1 and b.list_decisions() == []


def test_global_and_own_store_url_must_agree(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    assert main(["--store-url", a, "benchmark", "scale", "--store-url", b]) == 2
    assert "differs from the global --store-url" in capsys.readouterr().err
    assert not (tmp_path / "a.db").exists() and not (tmp_path / "b.db").exists()


def test_fill_writes_readable_linked_runs_and_decisions(store_url: str) -> None:
    b = Bellamy(store_url)
    b.upgrade()
    synthetic = Synthetic(contexts=10, total=2_500)
    fill(b.store, synthetic, 1_500, lambda _msg: None)
    fill(b.store, synthetic, 1_000, lambda _msg: None)
    assert b.count_runs() == 2_500 and len(b.list_decisions(limit=None)) == 2_500
    assert 0 < b.count_runs(status="failed") < 250
    # the rows read back through the ORM as the provider wrote them itself
    with b.store.read() as s:
        assert s is not None
        run = s.get(Run, 2_000)
        decision = s.get(Decision, run.decision_id)
    assert run.source == "observed" and run.started_at is not None
    assert run.started_at.tzinfo == dt.timezone.utc and run.ended_at > run.started_at
    assert run.context_fingerprint == context_fingerprint(run.job_type, run.context)
    assert (
        decision is not None and decision.run_row_id == run.id and decision.chosen_scale_out == run.scale_out
    )
    assert decision.candidates[0]["scale_out"] == 2
    # a year of launches in time order, ending about now
    newest = b.list_runs(limit=1)[0]
    assert abs(
        dt.datetime.fromisoformat(newest["started_at"]) - dt.datetime.now(dt.timezone.utc)
    ) < dt.timedelta(days=1)
    # ordinary writes carry on after the bulk fill (PostgreSQL's id sequences were advanced)
    new_id = b.record_run(
        job_type="grep", framework="spark", scale_out=2, runtime_s=10.0, dag_id="d", task_id="t", run_id="r"
    )
    assert new_id == 2_501
