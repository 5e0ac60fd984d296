"""`bellamy history export`: the stored runs out to a file that `history import` reads back whole."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pandas as pd
import pytest

from airflow_provider_bellamy.cli import main
from airflow_provider_bellamy.datasets import load_runs_file, load_traces, write_runs_file
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.facade import Bellamy

CONTEXT = {"machine_type": "m5.xlarge", "data_size_mb": 2048.0, "environment": "laptop"}
STARTED = dt.datetime(2026, 11, 20, 6, 0, tzinfo=dt.timezone.utc)


def _comparable(frame: pd.DataFrame) -> pd.DataFrame:
    """Runs as a set: no row ids, one column order, one row order."""
    out = frame.drop(columns=["id"]).astype(str)
    return out[sorted(out.columns)].sort_values(sorted(out.columns)).reset_index(drop=True)


@pytest.fixture
def store(tmp_path: Path) -> Bellamy:
    """Bell's sgd trace and three observed Airflow tries of another job, the last one failed."""
    b = Bellamy(f"sqlite:///{tmp_path / 'source.db'}")
    b.record_runs(load_traces("bell", job_type="sgd"))
    for attempt, (status, seconds) in enumerate([("success", 300.0), ("success", 180.5), ("failed", 40.0)]):
        b.record_run(
            job_type="etl",
            framework="spark",
            scale_out=4 + 4 * attempt,
            runtime_s=seconds,
            context=CONTEXT,
            status=status,
            dag_id="nightly",
            task_id="etl",
            run_id=f"scheduled__2026-11-{20 + attempt}",
            try_number=1,
            started_at=STARTED + dt.timedelta(days=attempt),
            ended_at=STARTED + dt.timedelta(days=attempt, seconds=seconds),
        )
    return b


def test_export_then_import_gives_the_same_runs(store: Bellamy, tmp_path: Path) -> None:
    path = tmp_path / "runs.tsv"
    assert main(["--store-url", store.store.url, "history", "export", str(path)]) == 0
    assert "\t" in path.read_text().splitlines()[0]  # the suffix chose the separator
    assert len(load_runs_file(path)) == 108
    copy = Bellamy(f"sqlite:///{tmp_path / 'copy.db'}")
    assert main(["--store-url", copy.store.url, "history", "import", str(path)]) == 0
    before = store.runs_frame(successful_only=False)
    after = copy.runs_frame(successful_only=False)
    pd.testing.assert_frame_equal(_comparable(before), _comparable(after))
    # the observed tries keep their provenance: recording them again adds nothing
    observed = load_runs_file(path).query("source == 'observed'")
    assert len(observed) == 3
    copy.record_runs(observed)
    assert copy.count_runs() == 108


def test_export_reads_the_store_a_page_at_a_time(
    store: Bellamy, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A year of a large deployment (millions of runs, ~5 kB each as one frame) must not be read
    into memory at once: pages of EXPORT_PAGE runs, written under the columns one frame of every
    run would have (a property first seen in a later context included)."""
    from airflow_provider_bellamy import run_history

    store.record_run(
        job_type="etl", framework="spark", scale_out=3, runtime_s=99.0, context={**CONTEXT, "tier": "gold"}
    )
    whole = tmp_path / "whole.csv"
    write_runs_file(store.runs_frame(successful_only=False).drop(columns=["id"]), whole)
    sizes: list[int] = []
    framed = run_history.runs_frame

    def counting(rows, **kwargs):
        rows = list(rows)
        sizes.append(len(rows))
        return framed(rows, **kwargs)

    monkeypatch.setattr(run_history, "EXPORT_PAGE", 7)
    monkeypatch.setattr(run_history, "runs_frame", counting)
    paged = tmp_path / "paged.csv"
    assert store.export_runs(paged) == 109
    assert max(sizes) <= 7 and sum(sizes) >= 109
    a, b = pd.read_csv(whole), pd.read_csv(paged)
    assert list(a.columns) == list(b.columns) and a.columns[-1] == "tier"
    pd.testing.assert_frame_equal(a, b, check_dtype=False)
    assert store.export_runs(paged, "etl", successful_only=True, overwrite=True) == 3


def test_export_narrows_to_a_job_type_and_to_successful_runs(store: Bellamy, tmp_path: Path) -> None:
    path = tmp_path / "etl.csv"
    assert store.export_runs(path, "etl", successful_only=True) == 2
    runs = load_runs_file(path)
    assert set(runs["job_type"]) == {"etl"} and set(runs["status"]) == {"success"}
    assert sorted(runs["runtime_s"]) == [180.5, 300.0]
    assert runs["environment"].tolist() == ["laptop", "laptop"]


def test_an_existing_file_is_kept_unless_forced(store: Bellamy, tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text("mine\n")
    with pytest.raises(InvalidInputError) as err:
        store.export_runs(path)
    assert err.value.field == "path" and path.read_text() == "mine\n"
    assert main(["--store-url", store.store.url, "history", "export", str(path)]) == 2
    assert path.read_text() == "mine\n"
    assert main(["--store-url", store.store.url, "history", "export", str(path), "--force"]) == 0
    assert len(load_runs_file(path)) == 108
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no partial file left


def test_a_name_of_another_format_is_refused_and_nothing_is_written(store: Bellamy, tmp_path: Path) -> None:
    """`history export runs.parquet` wrote CSV text under a Parquet name."""
    path = tmp_path / "runs.parquet"
    with pytest.raises(InvalidInputError, match=r"names a \.parquet file") as err:
        store.export_runs(path)
    assert err.value.field == "path"
    assert main(["--store-url", store.store.url, "history", "export", str(path)]) == 2
    assert not path.exists()
    assert main(["--store-url", store.store.url, "history", "export", str(tmp_path / "runs.tsv")]) == 0


def test_nothing_to_export_is_an_error_and_writes_no_file(store: Bellamy, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError) as err:
        store.export_runs(tmp_path / "none.csv", "kmeans")
    assert (err.value.field, err.value.value) == ("job_type", "kmeans")
    empty = Bellamy(f"sqlite:///{tmp_path / 'empty.db'}")
    with pytest.raises(InvalidInputError) as err:
        empty.export_runs(tmp_path / "none.csv")
    assert err.value.field == "store"
    with pytest.raises(InvalidInputError) as err:
        store.export_runs(tmp_path / "missing" / "runs.csv")
    assert err.value.field == "path" and "does not exist" in str(err.value)
    assert not (tmp_path / "none.csv").exists()


def test_a_bad_provenance_value_in_a_file_names_its_line(tmp_path: Path, capsys) -> None:
    """A timestamp or status is checked after the file is read: its error names the file's line
    (a blank line counted), not the row's position in the frame, and stores nothing."""
    path = tmp_path / "runs.csv"
    path.write_text(
        "job_type,framework,scale_out,runtime_s,machine,started_at,status\n"
        "etl,spark,4,100,m5,2026-11-20T06:00:00+02:00,success\n"
        "\n"
        "etl,spark,8,60,m5,yesterday,success\n"
    )
    url = f"sqlite:///{tmp_path / 'import.db'}"
    assert main(["--store-url", url, "history", "import", str(path)]) == 2
    assert f"{path} line 4: started_at='yesterday'" in capsys.readouterr().err
    assert Bellamy(url).count_runs() == 0


def test_a_column_mixing_epoch_seconds_and_iso_text_is_read_per_value(tmp_path: Path, capsys) -> None:
    """One number in a column of ISO text turns the column into text: each value is still read as
    what it is (naive ISO text as UTC), and only a value that is neither is refused."""
    path = tmp_path / "runs.csv"
    path.write_text(
        "job_type,framework,scale_out,runtime_s,machine,started_at\n"
        "etl,spark,4,100,m5,1700000000\n"
        "etl,spark,8,60,m5,2023-11-14T22:13:20\n"
        "etl,spark,6,70,m5,2023-11-15T00:13:20+02:00\n"
        "etl,spark,2,150,m5,1700000000.5\n"
    )
    url = f"sqlite:///{tmp_path / 'import.db'}"
    assert main(["--store-url", url, "history", "import", str(path)]) == 0
    stamps = Bellamy(url).runs_frame(successful_only=False).sort_values("scale_out")["started_at"]
    expected = dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)
    got = [dt.datetime.fromisoformat(str(s)) for s in stamps]
    assert got == [expected + dt.timedelta(seconds=0.5), expected, expected, expected]
    bad = tmp_path / "bad.csv"
    bad.write_text(path.read_text() + "etl,spark,10,50,m5,last tuesday\n")
    assert main(["--store-url", url, "history", "import", str(bad)]) == 2
    assert f"{bad} line 6: started_at='last tuesday'" in capsys.readouterr().err
    assert Bellamy(url).count_runs() == 4
    # an ISO basic date is also a number: refused, not guessed
    both = tmp_path / "both.csv"
    both.write_text(path.read_text() + "etl,spark,10,50,m5,20231114\n")
    assert main(["--store-url", url, "history", "import", str(both)]) == 2
    assert "started_at='20231114'" in capsys.readouterr().err
    assert Bellamy(url).count_runs() == 4


def test_importing_stored_tries_again_reports_none_added(store: Bellamy, tmp_path: Path, capsys) -> None:
    """An export read back into its own store adds no Airflow try twice: the CLI says so rather
    than counting the rows the store already held as imported."""
    path = tmp_path / "runs.csv"
    store.export_runs(path, "etl")
    capsys.readouterr()
    assert main(["--store-url", store.store.url, "history", "import", str(path), "--append"]) == 0
    out = capsys.readouterr().out
    assert "imported 0 runs from" in out and "3 were stored already" in out
    assert "(dataset )" not in out
    assert store.count_runs() == 108


def test_a_sorted_frame_of_a_file_still_names_each_row_its_line(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(
        "job_type,framework,scale_out,runtime_s,machine,status\n"
        "etl,spark,8,100,m5,done\n"
        "etl,spark,4,60,m5,success\n"
    )
    frame = load_runs_file(path).sort_values("scale_out")
    with pytest.raises(InvalidInputError) as err:
        Bellamy(f"sqlite:///{tmp_path / 'import.db'}").import_runs(frame)
    assert (err.value.field, err.value.value, err.value.where) == ("status", "done", f"{path} line 2")
