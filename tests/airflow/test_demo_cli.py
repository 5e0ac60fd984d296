"""`bellamy demo` refuses bad arguments before starting anything (the full run is the
example DAG test plus `make demo`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


# ------------------------------------------------------------------ the story the demo tells
# What the demo's launches show depends on this machine's runtimes (printed, never asserted);
# what follows is what cannot flake: how a launch is judged, and that the first decision for the
# demo's local context says it extrapolates and is stored saying so.


def _candidate(n: int, predicted: float, lower: float, upper: float | None) -> dict[str, Any]:
    return {"scale_out": n, "predicted_s": predicted, "lower_s": lower, "upper_s": upper}


def test_a_launch_is_judged_by_the_band_at_the_size_it_ran_at() -> None:
    from airflow_provider_bellamy.cli.demo import launches

    ext = {"known": True, "kinds": ["categorical"], "sentence": "machine_type 'loopback-1c1g' never seen"}
    decisions = [
        {  # launch 2: asked 3, granted 2 (a 2-core machine): judged at 2
            "id": 11,
            "run_id": "r2",
            "task_id": "grep",
            "job_type": "grep",
            "chosen_scale_out": 3,
            "feasible": True,
            "target_s": 60.0,
            "confidence": 0.9,
            "model_version": "grep/ctx-ab/v1",
            "extrapolation": ext,
            "candidates": [_candidate(2, 40.0, 30.0, 50.0), _candidate(3, 35.0, 20.0, 45.0)],
        },
        {  # launch 1: no size meets the target, the band unbounded above
            "id": 10,
            "run_id": "r1",
            "task_id": "grep",
            "job_type": "grep",
            "chosen_scale_out": 3,
            "feasible": False,
            "target_s": 60.0,
            "confidence": 0.9,
            "model_version": "grep/v1",
            "extrapolation": ext,
            "candidates": [_candidate(3, 100.0, 80.0, None)],
        },
        {  # launch 3: its run failed; a decision stored before revision 0004 says nothing
            "id": 12,
            "run_id": "r3",
            "task_id": "grep",
            "job_type": "grep",
            "chosen_scale_out": 2,
            "feasible": True,
            "target_s": 60.0,
            "confidence": 0.9,
            "model_version": None,
            "extrapolation": None,
            "candidates": [_candidate(2, 40.0, 30.0, 50.0)],
        },
    ]
    runs = [
        {"decision_id": 10, "scale_out": 3, "runtime_s": 85.0, "status": "success"},
        {"decision_id": 11, "scale_out": 2, "runtime_s": 55.0, "status": "success"},
        {"decision_id": 12, "scale_out": 2, "runtime_s": 5.0, "status": "failed"},
    ]
    first, second, third = launches(decisions, runs, ["r1", "r2", "r3"])
    assert [x.launch for x in (first, second, third)] == [1, 2, 3]
    assert first.extrapolating and first.extrapolates_in.startswith("machine_type")
    assert first.inside is True and first.met_target is False  # 80 <= 85 <= unbounded; 85 > 60
    assert (second.ran_at, second.upper_s) == (2, 50.0)
    assert second.inside is False and second.met_target is True  # 55 s: above the band at 2
    assert third.inside is None and third.met_target is None and third.extrapolating is None
    assert third.model == "default"


@pytest.mark.slow
def test_the_demos_first_launch_is_flagged_and_stored_as_extrapolating(tmp_path: Path) -> None:
    """The demo's grep job on a model trained on the C3O grep traces: the decision says where it
    extrapolates, the store keeps it, and the next launch is sized by a copy fine-tuned on the run."""
    from airflow_provider_bellamy.cli.demo import launches
    from airflow_provider_bellamy.config import load_pipeline_config
    from airflow_provider_bellamy.datasets import load_traces
    from airflow_provider_bellamy.facade import Bellamy
    from airflow_provider_bellamy.model import TrainingConfig
    from tests.fixtures.airflow import EXAMPLES

    job = load_pipeline_config(EXAMPLES / "pipelines" / "spark_sla.yaml").job("grep")
    b = Bellamy(f"sqlite:///{tmp_path / 'bellamy.db'}")
    b.record_runs(load_traces("c3o", job_type="grep"))
    (report,) = b.train(config=TrainingConfig(members=2, max_epochs=100, min_epochs=20, patience=20))
    assert report.outcome == "promoted"
    sizes = job.scale_outs
    first = b.size("grep", job.properties, sizes, target_s=90.0)
    assert first.extrapolating is True
    assert "categorical" in first.extrapolation["kinds"] and "numeric" in first.extrapolation["kinds"]
    assert "[extrapolating: machine_type 'loopback-1c1g' never seen" in first.reason
    assert "not 'spark-standalone-loopback'" in first.reason
    assert first.requested_confidence == 0.9
    stored = b.list_decisions(limit=None)
    (story,) = launches(stored, [], [None])  # type: ignore[list-item]
    assert story.extrapolating is True and story.extrapolates_in == first.extrapolation["sentence"]

    b.record_run(
        job_type="grep",
        framework="spark",
        scale_out=first.chosen_scale_out,
        runtime_s=30.0,
        context=job.properties,
        dag_id="bellamy_spark_sla",
        task_id="grep",
        run_id="manual__1",
        map_index=-1,
        try_number=1,
        decision_id=first.decision_id,
    )
    second = b.size("grep", job.properties, sizes, target_s=90.0)
    assert second.model_version.startswith("grep/ctx-")  # learned from the local run
    assert "no runs of this context yet" not in second.reason
