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
