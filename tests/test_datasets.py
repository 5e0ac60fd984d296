from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_bellamy.datasets import load_runs_file, load_traces
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.records import context_columns


def test_bundled_traces_are_canonical() -> None:
    every = load_traces()
    assert set(every["dataset"]) == {"c3o", "bell"}
    assert len(load_traces("c3o")) == 4650 and len(load_traces("bell")) == 315
    assert {"job_type", "framework", "scale_out", "runtime_s"} <= set(every.columns)
    assert (every["runtime_s"] > 0).all() and (every["scale_out"] >= 1).all()


def test_c3o_totals_are_stored_per_node() -> None:
    grep = load_traces("c3o", "grep")
    # a context's properties must not change with the scale-out
    props = [c for c in context_columns(grep.columns) if grep[c].notna().all()]
    per_context = grep.groupby(props)["scale_out"].nunique()
    assert (per_context == 6).all()
    assert set(grep.loc[grep["machine_type"] == "c4.2xlarge", "cores"]) == {8.0}


def test_bell_runtimes_are_seconds_with_paper_context() -> None:
    bell = load_traces("bell", "grep")
    assert bell["runtime_s"].between(10, 2000).all()  # milliseconds in the file
    assert set(bell["cores"]) == {4.0} and set(bell["data_size_mb"]) == {250_000.0}


def test_unknown_set_and_job() -> None:
    with pytest.raises(InvalidInputError, match="dataset='nope'"):
        load_traces("nope")
    with pytest.raises(InvalidInputError, match="job_type='wordcount'"):
        load_traces("c3o", "wordcount")


def test_user_file_bad_row_reports_line_column_and_value(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(
        "job_type,framework,scale_out,runtime_s,machine_type\ngrep,spark,2,100,m5\ngrep,spark,4,-7,m5\n"
    )
    with pytest.raises(InvalidInputError) as err:
        load_runs_file(path)
    assert "line 3" in str(err.value) and err.value.field == "runtime_s" and err.value.value == -7
    tsv = tmp_path / "runs.tsv"
    tsv.write_text("job_type\tframework\tscale_out\truntime_s\ngrep\tspark\t3\t50.5\n")
    assert load_runs_file(tsv)["scale_out"].tolist() == [3]
    with pytest.raises(InvalidInputError, match="missing required column"):
        (tmp_path / "x.csv").write_text("job_type,scale_out\ngrep,2\n")
        load_runs_file(tmp_path / "x.csv")
    with pytest.raises(InvalidInputError, match="no such file"):
        load_runs_file(tmp_path / "absent.csv")
