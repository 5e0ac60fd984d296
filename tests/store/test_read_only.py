"""A store this user may read but not write: a read-only PostgreSQL role, a SQLite file or folder
without write permission. Writes are refused naming the store and the cause; nothing stored is lost."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from airflow_provider_bellamy.cli import main
from airflow_provider_bellamy.exceptions import StoreError
from airflow_provider_bellamy.facade import Bellamy
from tests.fixtures.permissions import cli_without_root_rights
from tests.store.conftest import observed_run


@pytest.mark.postgres
def test_a_read_only_postgresql_role_reads_and_its_writes_are_a_clear_error(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before session 25 a write raised SQLAlchemy's ProgrammingError (a traceback of the whole
    INSERT from `bellamy history import`)."""
    owner = Bellamy(postgres_url)
    owner.upgrade()
    owner.record_run(**observed_run())
    database = make_url(postgres_url).database
    admin = sa.create_engine(postgres_url)
    with admin.begin() as conn:
        conn.execute(sa.text("CREATE ROLE bellamy_reader LOGIN PASSWORD 's3cret'"))
        conn.execute(sa.text(f'GRANT CONNECT ON DATABASE "{database}" TO bellamy_reader'))
        conn.execute(sa.text("GRANT SELECT ON ALL TABLES IN SCHEMA public TO bellamy_reader"))
    try:
        url = make_url(postgres_url).set(username="bellamy_reader", password="s3cret")
        reader = Bellamy(url.render_as_string(hide_password=False))
        assert reader.count_runs() == 1
        with pytest.raises(StoreError, match="permission denied for table runs") as err:
            reader.record_run(**observed_run(try_number=2))
        assert "bellamy_reader:***@" in str(err.value) and "s3cret" not in str(err.value)
        capsys.readouterr()
        argv = [
            "--store-url",
            url.render_as_string(hide_password=False),
            "history",
            "import",
            "--traces",
            "bell",
        ]
        assert main(argv) == 2
        assert "refused this user while recording runs" in capsys.readouterr().err
        assert owner.count_runs() == 1
    finally:
        with admin.begin() as conn:
            conn.execute(sa.text("DROP OWNED BY bellamy_reader"))
            conn.execute(sa.text("DROP ROLE bellamy_reader"))
        admin.dispose()


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
