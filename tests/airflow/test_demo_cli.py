"""`bellamy demo` refuses bad arguments before starting anything (the full run is the
example DAG test plus `make demo`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_bellamy.cli import main


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["demo", "--workers", "0"], "--workers=0"),
        (["demo", "--runs", "9"], "--runs=9"),
        (["demo", "--dags-folder", "/nonexistent"], "--dags-folder='/nonexistent'"),
    ],
)
def test_bad_arguments_are_named(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err, err


def test_overhead_benchmark_refuses_zero_samples(tmp_path: Path) -> None:
    import argparse

    from airflow_provider_bellamy.benchmarks.overhead import main_from_args
    from airflow_provider_bellamy.exceptions import InvalidInputError

    with pytest.raises(InvalidInputError, match="--samples"):
        main_from_args(argparse.Namespace(samples=0, train_budget=1.0, json_path=str(tmp_path / "x.json")))
