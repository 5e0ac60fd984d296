"""Two `bellamy history import` of one file at the same time store it once (issue 18, race).

Two real processes on the parametrised backend (SQLite file, PostgreSQL server), released
together once their imports are loaded; the duplicate check runs inside the write transaction.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from airflow_provider_bellamy.facade import Bellamy

RUNS = 6000

_CHILD = """
import sys, time
from pathlib import Path
from airflow_provider_bellamy.cli import main
import pandas  # what the import loads, loaded before the start line
go = Path(sys.argv[3])
while not go.exists():
    time.sleep(0.001)
sys.exit(main(["--store-url", sys.argv[1], "history", "import", sys.argv[2]]))
"""


def _runs_file(path: Path) -> Path:
    lines = ["job_type,framework,scale_out,runtime_s,machine_type,data_size_mb"]
    lines += [f"grep,spark,{1 + i % 12},{100.0 + i / 7:.3f},m5.xlarge,{1000 + i % 40}" for i in range(RUNS)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_two_concurrent_imports_of_one_file_store_it_once(store_url: str, tmp_path: Path) -> None:
    Bellamy(store_url).upgrade()
    runs = _runs_file(tmp_path / "history.csv")
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD, store_url, str(runs), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ},
        )
        for _ in range(2)
    ]
    time.sleep(0.5)  # not a measurement: both children are importing; they wait for `go` anyway
    go.touch()
    outputs = [p.communicate(timeout=600) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], outputs
    refused = next(err for (_, err), p in zip(outputs, procs, strict=True) if p.returncode == 2)
    assert "already has 6000 stored runs" in refused and "Traceback" not in refused
    assert Bellamy(store_url).count_runs() == RUNS
