"""`bellamy train | predict | size | plot` against a real store, end to end in-process."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_bellamy.cli import main
from airflow_provider_bellamy.facade import Bellamy

CONTEXT = [
    "--set", "machine_type=m4.2xlarge", "--set", "cores=8", "--set", "memory_mb=16000",
    "--set", "data_size_mb=15000", "--set", "line_length=100", "--set", "lines=150000000",
    "--set", "p_occurrence=0.5", "--set", "environment=aws-emr", "--framework", "spark",
]  # fmt: skip


@pytest.fixture(scope="module")
def trained_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('cli') / 'store.db'}"
    assert main(["--store-url", url, "db", "upgrade"]) == 0
    assert main(["--store-url", url, "history", "import", "--traces", "c3o"]) == 0
    assert main(["--store-url", url, "train", "--job-type", "grep", "--time-budget", "15"]) == 0
    return url


def test_size_prints_candidates_and_marks_the_choice(
    trained_store: str, capsys: pytest.CaptureFixture
) -> None:
    code = main(
        ["--store-url", trained_store, "size", "grep", *CONTEXT, "--scale-outs", "2-12:2", "--target", "400"]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "▶" in out and "smallest scale-out" in out
    # a generous target is met by the smallest candidate
    assert "decision" in out and ": 2 —" in out


def test_unreachable_target_exits_3_with_the_shortfall(
    trained_store: str, capsys: pytest.CaptureFixture
) -> None:
    code = main(
        ["--store-url", trained_store, "size", "grep", *CONTEXT, "--scale-outs", "2,4", "--target", "5"]
    )
    assert code == 3
    assert "short" in capsys.readouterr().out


def test_predict_and_plot(trained_store: str, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["--store-url", trained_store, "predict", "grep", *CONTEXT, "--scale-outs", "2,6,12"]) == 0
    assert "grep/v1" in capsys.readouterr().out
    png = tmp_path / "plot.png"
    code = main(
        [
            "--store-url",
            trained_store,
            "plot",
            "grep",
            *CONTEXT,
            "--scale-outs",
            "2-12:2",
            "--target",
            "150",
            "--out",
            str(png),
        ]
    )
    assert code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_bad_cli_input_names_the_field(trained_store: str, capsys: pytest.CaptureFixture) -> None:
    assert main(["--store-url", trained_store, "size", "grep", *CONTEXT, "--scale-outs", "2-x"]) == 2
    assert "--scale-outs" in capsys.readouterr().err
    assert main(["--store-url", trained_store, "size", "grep", "--set", "oops", "--scale-outs", "2"]) == 2
    assert "--set" in capsys.readouterr().err
    # a context without the properties the model was trained with
    assert main(["--store-url", trained_store, "predict", "grep", "--scale-outs", "2,"]) == 2
    assert "context." in capsys.readouterr().err


def test_predict_and_size_say_where_the_model_extrapolates_and_cap_the_confidence(
    trained_store: str, capsys: pytest.CaptureFixture
) -> None:
    far = [*CONTEXT, "--set", "data_size_mb=1e308"]
    assert main(["--store-url", trained_store, "predict", "grep", *far, "--scale-outs", "2,6,12"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "extrapolating: data_size_mb 1e+308 is" in out and "above the largest trained" in out
    # so far out that the band has no upper bound: sizing takes the largest size and says why
    far_size = [
        "--store-url",
        trained_store,
        "size",
        "grep",
        *far,
        "--scale-outs",
        "2,6,12",
        "--target",
        "600",
    ]
    assert main(far_size) == 3  # infeasible: no bound meets any target
    out = " ".join(capsys.readouterr().out.split())
    assert "the band has no upper bound" in out and "the largest, 12" in out, out
    main(
        [
            "--store-url",
            trained_store,
            "size",
            "grep",
            *CONTEXT,
            "--scale-outs",
            "2,4",
            "--confidence",
            "0.999999",
        ]
    )
    out = " ".join(capsys.readouterr().out.split())
    assert "capped at" in out and "100%" not in out
    # the store keeps both: what was asked, and what the band honours
    stored = Bellamy(trained_store).list_decisions(limit=1)[0]
    assert stored["requested_confidence"] == 0.999999 and stored["confidence"] < 0.999999


def test_a_confidence_below_one_half_is_refused(trained_store: str, capsys: pytest.CaptureFixture) -> None:
    code = main(
        ["--store-url", trained_store, "size", "grep", *CONTEXT, "--scale-outs", "2,4", "--confidence", "0.3"]
    )
    assert code != 0
    captured = capsys.readouterr()
    assert "confidence=0.3" in captured.out + captured.err


def test_size_on_infeasible_run_likely_gives_up_the_confidence_not_the_target(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    facade = Bellamy(url)
    facade.upgrade()
    context = {"machine_type": "m5.xlarge", "cores": 4, "data_size_mb": 2048.0}
    # runtime barely falls past 4 nodes, with a ±20 % spread: no size meets 140 s at 90 %
    for n, times in ((1, (300, 240, 360)), (2, (170, 140, 200)), (4, (120, 100, 140)), (8, (110, 95, 130))):
        for t in times:
            facade.record_run(
                job_type="wc", framework="spark", scale_out=n, runtime_s=float(t), context=context
            )
    args = ["--store-url", url, "size", "wc", "--set", "machine_type=m5.xlarge", "--set", "cores=4"]
    args += ["--set", "data_size_mb=2048.0", "--scale-outs", "1,2,4,8", "--target", "140"]
    assert main(args) == 3
    assert (
        ": 8 — no candidate meets the target 140 s at 90% confidence; the most likely to meet it: 8"
        in " ".join(capsys.readouterr().out.split())
    )
    assert main([*args, "--on-infeasible", "run-likely"]) == 3  # still infeasible at 90 %
    out = " ".join(capsys.readouterr().out.split())
    assert ": 4 — no candidate meets the target 140 s at 90% confidence; the smallest predicted" in out
    assert "the 90% confidence given up: its upper bound" in out
    [likely, fastest] = facade.list_decisions("wc", limit=2)
    assert (likely["chosen_scale_out"], fastest["chosen_scale_out"]) == (4, 8)
    with pytest.raises(SystemExit):
        main([*args, "--on-infeasible", "likely"])
    assert "--on-infeasible: invalid choice: 'likely'" in capsys.readouterr().err


def test_size_target_is_read_as_any_duration_and_a_bad_one_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`--target 15m` as the operators' and pipeline files' targets (`spec.parse_duration`); it was
    refused by argparse (`type=float`)."""
    import json

    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert main(["--store-url", url, "db", "upgrade"]) == 0
    Bellamy(url).record_run(
        job_type="wc", framework="spark", scale_out=2, runtime_s=50.0, context={"cores": 4}
    )
    size = ["--store-url", url, "size", "wc", "--set", "cores=4"]
    size += ["--framework", "spark", "--scale-outs", "2,4"]
    capsys.readouterr()
    for target in ("15m", "900", "PT15M"):
        main([*size, "--target", target, "--json"])  # the store's default decision: infeasible, exit 3
        assert json.loads(capsys.readouterr().out)["target_s"] == 900.0, target
    assert main([*size, "--target", "15 minutes"]) == 2
    assert "--target='15 minutes': must be a duration" in capsys.readouterr().err


def test_train_time_budget_is_read_as_any_duration_and_a_bad_one_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """`--time-budget 10m` as every other door reads durations; it was argparse's `type=float`."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert main(["--store-url", url, "db", "upgrade"]) == 0
    capsys.readouterr()
    for budget in ("10m", "600", "PT10M"):  # read; an empty store then has nothing to train
        assert main(["--store-url", url, "train", "--time-budget", budget]) == 1, budget
        assert "no runs stored yet" in capsys.readouterr().out
    assert main(["--store-url", url, "train", "--time-budget", "ten minutes"]) == 2
    assert "--time-budget='ten minutes': must be a duration" in capsys.readouterr().err
