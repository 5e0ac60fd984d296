"""A store this user may read but not write: a read-only PostgreSQL role, a SQLite file or folder
without write permission. Writes are refused naming the store and the cause; nothing stored is lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url

from airflow_provider_bellamy.cli import main
from airflow_provider_bellamy.exceptions import StoreError
from airflow_provider_bellamy.facade import Bellamy
from tests.fixtures.permissions import cli_without_root_rights
from tests.store.conftest import observed_run, seed_ernest_runs


@pytest.mark.postgres
def test_a_read_only_postgresql_role_reads_and_its_writes_are_a_clear_error(
    postgres_url: str, read_only_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before session 25 a write raised SQLAlchemy's ProgrammingError (a traceback of the whole
    INSERT from `bellamy history import`)."""
    owner = Bellamy(postgres_url)
    owner.record_run(**observed_run())
    reader = Bellamy(read_only_url)
    assert reader.count_runs() == 1
    with pytest.raises(StoreError, match="permission denied for table runs") as err:
        reader.record_run(**observed_run(try_number=2))
    role = make_url(read_only_url)
    assert f"{role.username}:***@" in str(err.value) and str(role.password) not in str(err.value)
    capsys.readouterr()
    assert main(["--store-url", read_only_url, "history", "import", "--traces", "bell"]) == 2
    assert "refused this user while recording runs" in capsys.readouterr().err
    assert owner.count_runs() == 1


def test_a_sqlite_store_in_a_read_only_folder_is_a_clear_error(tmp_path: Path) -> None:
    """SQLite in WAL mode writes -wal/-shm beside the file even to read: the message says so
    rather than only "attempt to write a readonly database" while reading."""
    folder = tmp_path / "ro"
    path = folder / "bellamy.db"
    Bellamy(f"sqlite:///{path}").record_run(**observed_run())
    from airflow_provider_bellamy.store.engine import dispose_engines

    dispose_engines()  # the last connection closing removes -wal and -shm
    assert sorted(p.name for p in folder.iterdir()) == ["bellamy.db", "bellamy.db.migrate-lock"]
    path.chmod(0o444)
    folder.chmod(0o555)
    try:
        for command in (["history", "list"], ["history", "import", "--traces", "bell"]):
            proc = cli_without_root_rights(str(path), *command)
            assert proc.returncode == 2, proc.stderr
            assert "Traceback" not in proc.stderr
            assert f"cannot write {path} or its folder {folder}" in proc.stderr
    finally:
        folder.chmod(0o755)
        path.chmod(0o644)
    assert Bellamy(f"sqlite:///{path}").count_runs() == 1


# `bellamy size` of seed_ernest_runs' context (its candidates and the framework of its runs)
SIZE_ETL = [
    "size", "etl", "--set", "machine_type=emr-m5", "--set", "cores=4", "--set", "data_size_mb=512",
    "--framework", "spark", "--scale-outs", "2,4,8,16",
]  # fmt: skip


@pytest.mark.postgres
def test_bellamy_size_on_a_read_only_store_prints_its_answer_and_says_it_was_not_stored(
    postgres_url: str, read_only_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Until session 32 the command printed only the store's error and exited 2, the answer it had
    computed lost. The status is the answer's (0 met, 3 not), as the operators launch it; stderr
    says the decision was not stored and why; stdout is the answer as on a store that writes."""
    owner = Bellamy(postgres_url)
    seed_ernest_runs(owner)
    capsys.readouterr()

    assert main(["--store-url", read_only_url, *SIZE_ETL, "--target", "300"]) == 0
    out, err = capsys.readouterr()
    assert "▶" in out and "decision not stored: 4 —" in out.replace("\n", " ")
    assert "bellamy: warning: this decision was not stored" in err and "permission denied for table" in err
    assert "Traceback" not in err and str(make_url(read_only_url).password) not in err

    assert main(["--store-url", read_only_url, *SIZE_ETL, "--target", "300", "--json"]) == 0
    out, err = capsys.readouterr()
    answer = json.loads(out)
    assert (answer["chosen_scale_out"], answer["decision_id"], answer["feasible"]) == (4, None, True)
    assert "this decision was not stored" in err

    assert main(["--store-url", read_only_url, *SIZE_ETL, "--target", "60"]) == 3  # no size meets it
    out, err = capsys.readouterr()
    assert "decision not stored: 16 —" in out.replace("\n", " ") and "not stored" in err
    assert owner.list_decisions(limit=None) == []  # nothing pretends it was stored
    # the owner's store gives the same answer, and stores it
    assert main(["--store-url", postgres_url, *SIZE_ETL, "--target", "300"]) == 0
    out, err = capsys.readouterr()
    assert ": 4 —" in out and "not stored" not in out + err
    assert len(owner.list_decisions(limit=None)) == 1


def test_bellamy_size_on_a_read_only_sqlite_file_prints_its_answer_and_says_it_was_not_stored(
    tmp_path: Path,
) -> None:
    """The embedded store's case: a file this user may read, not write (its folder writable)."""
    path = tmp_path / "bellamy.db"
    owner = Bellamy(f"sqlite:///{path}")
    seed_ernest_runs(owner)
    from airflow_provider_bellamy.store.engine import dispose_engines

    dispose_engines()
    path.chmod(0o444)
    try:
        proc = cli_without_root_rights(str(path), *SIZE_ETL, "--target", "300")
    finally:
        path.chmod(0o644)
    assert proc.returncode == 0, proc.stderr
    assert "decision not stored: 4 —" in proc.stdout
    assert "this decision was not stored" in proc.stderr and "readonly database" in proc.stderr
    assert owner.list_decisions(limit=None) == []
