"""The demo's plot: one panel per decision, written as a PNG."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.plotting import plot_decisions


def _candidate(n: int, t: float, target: float) -> dict:
    return {
        "scale_out": n,
        "predicted_s": t,
        "lower_s": t * 0.9,
        "upper_s": t * 1.15,
        "node_hours": n * t / 3600,
        "cost": None,
        "meets_target": t * 1.15 <= target,
    }


def test_plot_writes_a_png(tmp_path: Path) -> None:
    decisions = [
        {
            "id": 7,
            "task_id": "grep",
            "job_type": "grep",
            "confidence": 0.9,
            "target_s": 60.0,
            "chosen_scale_out": 2,
            "candidates": [_candidate(1, 80, 60), _candidate(2, 45, 60), _candidate(3, 35, 60)],
        },
        {
            "id": 8,
            "task_id": "sort",
            "job_type": "sort",
            "confidence": 0.9,
            "chosen_scale_out": 2,
            "candidates": [],
        },
    ]
    runs = [{"decision_id": 7, "scale_out": 2, "runtime_s": 47.5}]
    out = plot_decisions(decisions, runs, tmp_path / "plots" / "demo.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    with pytest.raises(InvalidInputError, match="nothing to plot"):
        plot_decisions([], runs, tmp_path / "empty.png")


def test_the_legend_says_extrapolating_and_whether_the_run_landed_in_the_band(tmp_path: Path) -> None:
    from airflow_provider_bellamy.plotting import launch_labels

    far = {
        "id": 1,
        "task_id": "grep",
        "job_type": "grep",
        "confidence": 0.9,
        "target_s": 90.0,
        "chosen_scale_out": 3,
        "model_version": "grep/v1",
        "extrapolation": {"known": True, "kinds": ["categorical"], "sentence": "machine_type 'x' never seen"},
        # out of distribution: a band spanning decades, unbounded above at 1
        "candidates": [
            {**_candidate(1, 300, 90), "lower_s": 20.0, "upper_s": None},
            {**_candidate(3, 110, 90), "lower_s": 11.0, "upper_s": 4500.0},
        ],
    }
    learned = {
        **far,
        "id": 2,
        "model_version": "grep/ctx-ab/v1",
        "extrapolation": {"known": True, "kinds": []},
    }
    learned["candidates"] = [_candidate(1, 40, 90), _candidate(3, 30, 90)]
    curve, observed = launch_labels(far, {"scale_out": 3, "runtime_s": 29.5}, 0)
    assert curve == "launch 1: predicted (grep/v1), 90% band, extrapolating"
    assert observed == "launch 1: observed 29.5 s at 3 — in band"
    curve, observed = launch_labels(learned, {"scale_out": 3, "runtime_s": 40.0}, 1)
    assert "extrapolating" not in curve and observed.endswith("— OUTSIDE band")  # 40 > 30 × 1.15
    _, failed = launch_labels(learned, {"scale_out": 3, "runtime_s": 1.0, "status": "failed"}, 1)
    assert failed.endswith("(failed)")
    # two launches, one spanning decades (a log axis): still a PNG
    runs = [
        {"decision_id": 1, "scale_out": 3, "runtime_s": 29.5},
        {"decision_id": 2, "scale_out": 1, "runtime_s": 41.0},
    ]
    out = plot_decisions([far, learned], runs, tmp_path / "story.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_band_without_bounds_reaches_the_panels_edges(tmp_path: Path) -> None:
    """A guess's band, 0 – ∞ (stored as lower 0, upper None), is drawn from the panel's bottom to
    its top, not as a line at the prediction."""
    from airflow_provider_bellamy.plotting import band_to_edges

    assert band_to_edges([0.0, None, 2.0], [None, 30.0, 9.0], (0.5, 800.0)) == (
        [0.5, 0.5, 2.0],
        [800.0, 30.0, 9.0],
    )
    guess = {
        "id": 1,
        "task_id": "sort",
        "job_type": "sort",
        "confidence": 0.9,
        "target_s": 800.0,
        "chosen_scale_out": 3,
        "candidates": [{**_candidate(n, 100.0 / n, 800), "lower_s": 0.0, "upper_s": None} for n in (1, 2, 3)],
    }
    out = plot_decisions([guess], [{"decision_id": 1, "scale_out": 3, "runtime_s": 67.8}], tmp_path / "g.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


_WITHOUT_MATPLOTLIB = """
import sys
sys.modules["matplotlib"] = None  # as on a plain install: `import matplotlib` raises ImportError
from airflow_provider_bellamy.cli import main
sys.exit(main(["--store-url", sys.argv[1], "plot", "grep", "--scale-outs", "2,4", "--out", sys.argv[2]]))
"""


def test_plot_without_matplotlib_names_the_extra(tmp_path: Path) -> None:
    import subprocess
    import sys

    from airflow_provider_bellamy.facade import Bellamy

    url = f"sqlite:///{tmp_path / 'b.db'}"
    b = Bellamy(url)
    b.record_run(job_type="grep", framework="spark", scale_out=2, runtime_s=10.0)
    out = tmp_path / "p.png"
    proc = subprocess.run(
        [sys.executable, "-c", _WITHOUT_MATPLOTLIB, url, str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "pip install 'airflow-provider-bellamy[plot]'" in proc.stderr
    assert not out.exists() and b.list_decisions() == []  # refused before sizing
