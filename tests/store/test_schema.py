"""Schema management: create, migrate, detect outdated stores, never migrate on a read."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from airflow_provider_bellamy.exceptions import SchemaOutdatedError, StoreError
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.store import HEAD_REVISION, Base, Store, alembic_head
from airflow_provider_bellamy.store import store as store_module
from airflow_provider_bellamy.store.store import VERSION_TABLE, alembic_config, forget_verified


def test_head_constant_is_alembics_head() -> None:
    assert alembic_head() == HEAD_REVISION


def test_upgrade_from_empty_matches_the_orm(store_url: str) -> None:
    s = Store(store_url)
    assert s.schema_status().state in ("missing", "empty")
    before, after = s.upgrade()
    assert (before, after) == (None, HEAD_REVISION)
    assert s.schema_status().state == "current"
    with s.engine.connect() as conn:
        diffs = compare_metadata(
            MigrationContext.configure(conn, opts={"compare_type": True, "version_table": VERSION_TABLE}),
            Base.metadata,
        )
        indexes = {ix["name"] for ix in sa.inspect(conn).get_indexes("runs")}
    assert diffs == [], f"migrations and ORM disagree: {diffs}"
    assert "uq_runs_airflow_try" in indexes
    # A second upgrade is a no-op.
    assert s.upgrade() == (HEAD_REVISION, HEAD_REVISION)


def test_downgrade_and_upgrade_round_trip(store_url: str) -> None:
    s = Store(store_url)
    s.upgrade()
    with s.engine.begin() as conn:
        command.downgrade(alembic_config(conn), "base")  # type: ignore[arg-type]
    with s.engine.connect() as conn:
        assert not {"runs", "model_versions", "decisions"} & set(sa.inspect(conn).get_table_names())
    s.upgrade()
    assert s.schema_status().state == "current"


def test_embedded_store_is_created_on_first_write_only(tmp_path: Path) -> None:
    path = tmp_path / "home" / "bellamy.db"
    b = Bellamy(f"sqlite:///{path}")
    # Reads of a store that does not exist see an empty store and create nothing.
    assert b.list_runs() == []
    assert b.count_runs() == 0
    assert b.list_models() == []
    assert not path.exists()
    b.record_run(job_type="grep", framework="spark", scale_out=2, runtime_s=10.0, context={"a": 1})
    assert path.exists()
    assert b.schema_status().state == "current"
    assert b.count_runs() == 1


def test_default_store_lives_under_airflow_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "af"))
    b = Bellamy()
    assert b.store.sqlite_file == tmp_path / "af" / "bellamy" / "bellamy.db"
    b.record_run(job_type="grep", framework="spark", scale_out=2, runtime_s=10.0)
    assert (tmp_path / "af" / "bellamy" / "bellamy.db").exists()


@pytest.mark.postgres
def test_postgres_is_never_migrated_implicitly(postgres_url: str) -> None:
    b = Bellamy(postgres_url)
    with pytest.raises(SchemaOutdatedError, match="db upgrade"):
        b.record_run(job_type="grep", framework="spark", scale_out=2, runtime_s=10.0)
    with pytest.raises(SchemaOutdatedError, match="db upgrade"):
        b.list_runs()
    assert b.schema_status().state == "empty"


def _with_newer_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend the code ships a second migration (a new column) that the store lacks."""
    migrations = tmp_path / "migrations"
    shutil.copytree(store_module.MIGRATIONS_DIR, migrations)
    (migrations / "versions" / "9999_test_note.py").write_text(
        '"""add a column"""\n'
        "import sqlalchemy as sa\nfrom alembic import op\n\n"
        f'revision = "9999_test_note"\ndown_revision = "{HEAD_REVISION}"\n'
        "branch_labels = None\ndepends_on = None\n\n\n"
        "def upgrade():\n"
        '    with op.batch_alter_table("runs") as batch:\n'
        '        batch.add_column(sa.Column("note", sa.String(50)))\n\n\n'
        "def downgrade():\n"
        '    with op.batch_alter_table("runs") as batch:\n'
        '        batch.drop_column("note")\n'
    )
    monkeypatch.setattr(store_module, "MIGRATIONS_DIR", migrations)
    monkeypatch.setattr(store_module, "HEAD_REVISION", "9999_test_note")
    forget_verified()


def test_outdated_store_is_detected_and_upgraded_on_request(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = Bellamy(store_url)
    old.upgrade()
    run_id = old.record_run(job_type="grep", framework="spark", scale_out=2, runtime_s=10.0)
    _with_newer_code(tmp_path, monkeypatch)

    new = Bellamy(store_url)
    assert new.schema_status().state == "outdated"
    for action in (
        new.list_runs,
        lambda: new.record_run(job_type="grep", framework="spark", scale_out=3, runtime_s=9),
    ):
        with pytest.raises(SchemaOutdatedError, match=r"bellamy .*db upgrade"):
            action()
    # The read path did not migrate anything.
    assert new.schema_status().revision == HEAD_REVISION

    assert new.upgrade() == (HEAD_REVISION, "9999_test_note")
    with new.store.engine.connect() as conn:
        assert "note" in {c["name"] for c in sa.inspect(conn).get_columns("runs")}
    assert [r["id"] for r in new.list_runs()] == [run_id]  # nothing lost by the migration


def test_store_from_newer_code_is_refused(store_url: str) -> None:
    s = Store(store_url)
    s.upgrade()
    with s.engine.begin() as conn:
        conn.execute(sa.text(f"UPDATE {VERSION_TABLE} SET version_num = '0099_future'"))
    forget_verified()
    assert s.schema_status().state == "unknown"
    with pytest.raises(StoreError, match="does not know"):
        Bellamy(store_url).list_runs()
    with pytest.raises(StoreError, match="does not know"):
        s.upgrade()


def test_shares_a_database_with_another_alembic_app(store_url: str) -> None:
    """Airflow keeps its own revision in `alembic_version`; the store must not read it as its own."""
    s = Store(store_url)
    if s.sqlite_file is not None:
        s.sqlite_file.parent.mkdir(parents=True)
    with s.engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS alembic_version (version_num VARCHAR(32) NOT NULL)"))
        conn.execute(sa.text("INSERT INTO alembic_version VALUES ('abcdef123456')"))
    forget_verified()
    assert s.schema_status().state == "empty"
    s.upgrade()
    assert s.schema_status().state == "current"
    with s.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar() == "abcdef123456"


def test_foreign_tables_are_not_taken_for_a_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'other.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE runs (id INTEGER PRIMARY KEY, something TEXT)"))
    engine.dispose()
    s = Store(url)
    assert s.schema_status().state == "foreign"
    with pytest.raises(StoreError, match="not a Bellamy store"):
        Bellamy(url).record_run(job_type="grep", framework="spark", scale_out=2, runtime_s=10.0)
    with pytest.raises(StoreError, match="no schema version"):
        s.upgrade()
