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
