"""A store whose schema was changed outside its migrations (issue 18, D4): named, not misreported.

Alembic's comparison of the live schema with the code's models finds what differs; the store
refuses to be used with what it lacks, says what differs, and `bellamy db upgrade` re-creates
what can be re-created (or records a lost revision) without losing a run.
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from airflow_provider_bellamy.cli import main
from airflow_provider_bellamy.exceptions import SchemaOutdatedError
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.store import Store
from airflow_provider_bellamy.store.store import HEAD_REVISION, VERSION_TABLE, forget_verified
from tests.store.conftest import observed_run


def _altered(store_url: str, *statements: str) -> None:
    """A store with three runs, then changed by ``statements`` outside its migrations."""
    b = Bellamy(store_url)
    b.upgrade()
    b.record_runs([observed_run(try_number=i, runtime_s=100.0 + i) for i in range(1, 4)])
    with b.store.engine.begin() as conn:
        for statement in statements:
            conn.execute(sa.text(statement))
    forget_verified()


def test_a_fresh_store_matches_the_models(store: Store) -> None:
    status = store.schema_status()
    assert status.state == "current" and status.differences == () and status.extra == ()


def test_a_dropped_column_is_named_and_re_created(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _altered(store_url, "DROP INDEX ix_runs_external", "ALTER TABLE runs DROP COLUMN external_id")
    assert main(["--store-url", store_url, "db", "current"]) == 1
    out = capsys.readouterr().out
    assert "state:    drifted" in out and "up to date" not in out
    assert "column runs.external_id is missing" in out and "index ix_runs_external on runs is missing" in out
    assert "db upgrade` to re-create them" in out
    with pytest.raises(SchemaOutdatedError, match=r"column runs\.external_id is missing"):
        Bellamy(store_url).size("grep", {"machine_type": "m5.xlarge"}, [2, 4], 300.0)
    assert main(["--store-url", store_url, "db", "upgrade"]) == 0
    assert "re-created what it lacked" in capsys.readouterr().out
    assert Store(store_url).schema_status().state == "current"
    assert Bellamy(store_url).count_runs() == 3  # nothing lost
    assert Bellamy(store_url).size("grep", {"machine_type": "m5.xlarge"}, [2, 4], 300.0).decision_id


def test_an_empty_version_table_is_named_and_recorded_again(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _altered(store_url, f"DELETE FROM {VERSION_TABLE}")
    assert Store(store_url).schema_status().state == "unversioned"
    with pytest.raises(SchemaOutdatedError, match="no revision recorded"):
        Bellamy(store_url).size("grep", {"machine_type": "m5.xlarge"}, [2, 4], 300.0)
    assert main(["--store-url", store_url, "db", "current"]) == 1
    assert "db upgrade` to record it" in capsys.readouterr().out
    assert main(["--store-url", store_url, "db", "upgrade"]) == 0
    assert f"recorded schema revision {HEAD_REVISION}" in capsys.readouterr().out
    assert Bellamy(store_url).count_runs() == 3


def test_a_dropped_required_column_cannot_be_re_created(
    store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _altered(store_url, "DROP INDEX ix_decisions_job", "ALTER TABLE decisions DROP COLUMN job_type")
    assert main(["--store-url", store_url, "db", "upgrade"]) == 2
    err = capsys.readouterr().err
    assert "column decisions.job_type is missing" in err and "restore it from a backup" in err


def test_an_extra_index_is_noted_not_refused(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    _altered(store_url, "CREATE INDEX ix_dba_own ON runs (recorded_at)")
    assert main(["--store-url", store_url, "db", "current"]) == 0
    assert "note:     index ix_dba_own on runs is not the code's" in capsys.readouterr().out
    assert Bellamy(store_url).count_runs() == 3


def test_a_dropped_table_is_named(store_url: str) -> None:
    _altered(store_url, "DROP TABLE decisions")
    with pytest.raises(SchemaOutdatedError, match="table decisions is missing"):
        Bellamy(store_url).count_runs()
    assert Store(store_url).upgrade() == (HEAD_REVISION, HEAD_REVISION)
    assert Store(store_url).schema_status().state == "current"
    assert Bellamy(store_url).count_runs() == 3
