"""The store's commands: bellamy history / models / decisions / db, on a real store."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_bellamy.cli import main
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.store import HEAD_REVISION, DecisionRepository, ModelRepository, Store


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "220")  # rich wraps table cells to the terminal width


def test_db_current_and_upgrade(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    assert main(["--store-url", url, "db", "current"]) == 1
    assert "missing" in capsys.readouterr().out
    assert main(["--store-url", url, "db", "upgrade"]) == 0
    assert f"<none> -> {HEAD_REVISION}" in capsys.readouterr().out
    assert main(["--store-url", url, "db", "upgrade"]) == 0
    assert f"already at schema revision {HEAD_REVISION}" in capsys.readouterr().out
    assert main(["--store-url", url, "db", "current"]) == 0
    assert "current: up to date" in capsys.readouterr().out


def test_history_import_traces_and_list(
    store_url: str, store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--store-url", store_url, "history", "import", "--traces", "bell"]) == 0
    assert "imported 315 runs of the bell traces" in capsys.readouterr().out
    assert main(["--store-url", store_url, "history", "import", "--traces", "bell"]) == 0
    assert "already in the store" in capsys.readouterr().out
    assert main(["--store-url", store_url, "history", "list", "--job-type", "sgd", "--limit", "2"]) == 0
    out = capsys.readouterr().out
    assert "2 newest of 105" in out and "bell-node-4c16g" in out
    assert main(["--store-url", store_url, "history", "list", "--limit", "0"]) == 2
    assert "--limit=0" in capsys.readouterr().err
    assert main(["--store-url", store_url, "decisions", "list", "--limit", "-1"]) == 2
    assert "--limit=-1: must be >= 1" in capsys.readouterr().err


def test_history_import_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    runs = tmp_path / "runs.csv"
    runs.write_text(
        "job_type,framework,scale_out,runtime_s,machine_type,data_size_mb\n"
        "wordcount,flink,2,300.5,n2-standard-4,2048\n"
        "wordcount,flink,4,160.0,n2-standard-4,2048\n"
        "wordcount,flink,8,95.2,n2-standard-4,2048\n"
    )
    assert main(["--store-url", url, "history", "import", str(runs)]) == 0
    assert "imported 3 runs" in capsys.readouterr().out
    # A second import of the same file is refused rather than doubling the history.
    assert main(["--store-url", url, "history", "import", str(runs)]) == 2
    assert "already has 3 stored runs" in capsys.readouterr().err
    assert main(["--store-url", url, "history", "import", "--append", str(runs)]) == 0
    assert Bellamy(url).count_runs(job_type="wordcount") == 6

    bad = tmp_path / "bad.csv"
    bad.write_text("job_type,framework,scale_out,runtime_s\nwordcount,flink,2,300\nwordcount,flink,-1,20\n")
    assert main(["--store-url", url, "history", "import", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "line 3" in err and "scale_out=-1" in err
    assert Bellamy(url).count_runs() == 6  # nothing of the bad file was written
    assert main(["--store-url", url, "history", "import", "--traces", "bell", str(runs)]) == 2


def test_models_list_promote_rollback(
    store_url: str, store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--store-url", store_url, "models", "list"]) == 0
    assert "no models stored yet" in capsys.readouterr().out
    ids = store.write(
        lambda s: [
            ModelRepository(s)
            .add(job_type="grep", scope="general", weights=b"w1", metrics={"holdout_mre": 0.1})
            .id,
            ModelRepository(s).add(job_type="grep", scope="general", weights=b"w2").id,
        ]
    )
    assert main(["--store-url", store_url, "models", "promote", str(ids[0])]) == 0
    assert main(["--store-url", store_url, "models", "promote", str(ids[1])]) == 0
    assert "now grep/v2" in capsys.readouterr().out
    assert main(["--store-url", store_url, "models", "list"]) == 0
    out = capsys.readouterr().out
    assert "grep/v1" in out and "retired" in out and "10.0%" in out
    assert main(["--store-url", store_url, "models", "rollback", "grep"]) == 0
    assert "now grep/v1" in capsys.readouterr().out
    assert main(["--store-url", store_url, "models", "rollback", "grep"]) == 2
    assert "no version was active before grep/v1" in capsys.readouterr().err
    assert main(["--store-url", store_url, "models", "promote", "999"]) == 2


def test_decisions_list_and_show(store_url: str, store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--store-url", store_url, "decisions", "list"]) == 0
    assert "no decisions stored" in capsys.readouterr().out
    row = store.write(
        lambda s: DecisionRepository(s).add(
            {
                "job_type": "grep",
                "context": {"machine_type": "m5.xlarge"},
                "context_fingerprint": "abc",
                "candidates": [],
                "target_s": 600.0,
                "confidence": 0.9,
                "objective": "min_scale_out",
                "chosen_scale_out": 8,
                "feasible": False,
                "reason": "no candidate meets the target; fastest chosen",
            }
        )
    )
    assert main(["--store-url", store_url, "decisions", "list"]) == 0
    out = capsys.readouterr().out
    assert "fastest chosen" in out and "NO" in out
    assert main(["--store-url", store_url, "decisions", "show", str(row.id)]) == 0
    assert '"chosen_scale_out": 8' in capsys.readouterr().out
    assert main(["--store-url", store_url, "decisions", "show", "77"]) == 2
    assert "decision_id=77" in capsys.readouterr().err
