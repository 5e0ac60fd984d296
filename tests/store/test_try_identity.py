"""An Airflow try is its ``ti_id`` (Airflow's id of the task instance try, revision 0006): a DAG run
deleted and created again under the same run_id starts again at try 1 and is a run of its own, the
same try recorded twice is still one row, and a run recorded without a ti_id keeps the provenance
key. The migration from 0005 keeps every run and decision, on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command

from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.store import Store
from airflow_provider_bellamy.store.store import alembic_config, forget_verified
from tests.store.conftest import add_decision, observed_run, store_at

OLD_RUN, NEW_RUN = str(uuid.uuid4()), str(uuid.uuid4())


def test_a_recreated_run_is_its_own_try_and_each_decision_keeps_its_run(
    bellamy: Bellamy, store: Store
) -> None:
    old_decision = add_decision(
        store, ti_id=OLD_RUN, dag_id="etl", task_id="grep_logs", run_id="scheduled__2025-01-01"
    )
    new_decision = add_decision(
        store, ti_id=NEW_RUN, dag_id="etl", task_id="grep_logs", run_id="scheduled__2025-01-01"
    )
    old = bellamy.record_run(**observed_run(ti_id=OLD_RUN, decision_id=old_decision))
    # the DagRun deleted and created again: same run_id, try 1 again, another ti_id
    new = bellamy.record_run(**observed_run(ti_id=NEW_RUN, runtime_s=80.0, decision_id=new_decision))
    assert new != old
    bellamy.link_decision(new_decision, new)  # as write_back links it
    runs = {r["id"]: r for r in bellamy.list_runs(limit=None)}
    assert (runs[old]["runtime_s"], runs[old]["ti_id"]) == (120.5, OLD_RUN)  # the first kept
    assert (runs[new]["runtime_s"], runs[new]["ti_id"]) == (80.0, NEW_RUN)
    assert (runs[old]["decision_id"], runs[new]["decision_id"]) == (old_decision, new_decision)
    decisions = {d["id"]: d for d in bellamy.list_decisions(limit=None)}
    assert decisions[old_decision]["run_row_id"] == old
    assert decisions[new_decision]["run_row_id"] == new
    assert (decisions[old_decision]["ti_id"], decisions[new_decision]["ti_id"]) == (OLD_RUN, NEW_RUN)

    # the same try again (a callback and the operator, a retried write): its row, nothing added
    assert bellamy.record_run(**observed_run(ti_id=NEW_RUN, runtime_s=999.0)) == new
    assert bellamy.record_runs([observed_run(ti_id=OLD_RUN), observed_run(ti_id=OLD_RUN)]) == [old, old]
    # a ti_id given as Airflow gives it (a UUID) is the same try as its text
    assert bellamy.record_run(**observed_run(ti_id=uuid.UUID(NEW_RUN))) == new
    # a caller that does not know the ti_id names the try by its key: the newest run of it
    assert bellamy.record_run(**observed_run(runtime_s=5.0)) == new
    assert bellamy.count_runs() == 2


def test_runs_without_a_ti_id_keep_the_provenance_key(bellamy: Bellamy) -> None:
    first = bellamy.record_run(**observed_run())
    assert bellamy.record_run(**observed_run(runtime_s=999.0)) == first
    assert bellamy.record_runs([observed_run(task_id="z"), observed_run(task_id="z")]) == [first + 1] * 2
    # a try recorded with its ti_id after one recorded without: Airflow's id says it is another
    # incarnation of the run (the row without one cannot say which it was)
    assert bellamy.record_run(**observed_run(ti_id=NEW_RUN)) not in (first, first + 1)
    assert bellamy.count_runs() == 3


def _predicates(conn: sa.Connection) -> dict[str, str]:
    """The WHERE clause of each unique index on ``runs``, as the database keeps it, lower case and
    without quotes, brackets or casts, so SQLite's and PostgreSQL's forms compare."""
    if conn.dialect.name == "sqlite":
        rows = conn.execute(
            sa.text("SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs'")
        )
    else:
        rows = conn.execute(sa.text("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'runs'"))
    out = {}
    for name, sql in rows:
        if name.startswith("uq_") and sql:
            where = sql.split(" WHERE ", 1)[1].lower()
            for junk in ("(", ")", "'", '"', "::text", "::character varying"):
                where = where.replace(junk, "")
            out[name] = " ".join(where.split())
    return out


def _rows(conn: sa.Connection, table: str) -> list[dict[str, Any]]:
    t = sa.Table(table, sa.MetaData(), autoload_with=conn)
    return [dict(r._mapping) for r in conn.execute(sa.select(t).order_by(t.c.id))]


def test_a_store_at_0005_upgrades_keeps_its_runs_and_takes_a_recreated_run(store_url: str) -> None:
    s = store_at(store_url, "0005_runs_source_index")
    with s.engine.begin() as conn:
        runs = sa.Table("runs", sa.MetaData(), autoload_with=conn)
        assert "ti_id" not in runs.c
        for try_number in (1, 2):
            conn.execute(
                sa.insert(runs).values(
                    job_type="grep", framework="spark", scale_out=4, runtime_s=100.0 + try_number,
                    context={"machine_type": "m5.xlarge"}, context_fingerprint="0" * 32, status="success",
                    source="observed", dag_id="etl", task_id="grep_logs", run_id="scheduled__2025-01-01",
                    map_index=-1, try_number=try_number, recorded_at=dt.datetime(2025, 1, 1, try_number),
                )
            )  # fmt: skip
        assert _predicates(conn) == {"uq_runs_airflow_try": "source = observed"}
        before = {"runs": _rows(conn, "runs"), "decisions": _rows(conn, "decisions")}

    s.upgrade()
    b = Bellamy(store_url)
    with s.engine.connect() as conn:
        after = _rows(conn, "runs")
        assert _predicates(conn) == {
            "uq_runs_airflow_try": "source = observed and ti_id is null",
            "uq_runs_ti_id": "ti_id is not null",
        }
    assert [{k: r[k] for k in before["runs"][0]} for r in after] == before["runs"]
    assert [r["ti_id"] for r in after] == [None, None]  # nothing inferred for runs stored before
    # a row stored before keeps the old key: its try recorded again is that row
    assert b.record_run(**observed_run(runtime_s=999.0)) == after[0]["id"]
    # the run deleted and created again, recorded with its try's id: a run of its own
    again = b.record_run(**observed_run(ti_id=NEW_RUN, runtime_s=90.0))
    assert again not in {r["id"] for r in after} and b.count_runs() == 3
    assert b.record_run(**observed_run(ti_id=NEW_RUN)) == again

    # down to 0005: refused while two runs share the old key, naming it; nothing changed
    with (
        s.engine.begin() as conn,
        pytest.raises(RuntimeError, match=r"2 observed runs share the try key dag_id='etl'"),
    ):
        command.downgrade(alembic_config(conn), "0005_runs_source_index")  # type: ignore[arg-type]
    forget_verified()
    assert s.schema_status().state == "current" and b.count_runs() == 3
    with s.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM runs WHERE id = :id"), {"id": again})
        command.downgrade(alembic_config(conn), "0005_runs_source_index")  # type: ignore[arg-type]
        assert _predicates(conn) == {"uq_runs_airflow_try": "source = observed"}
        assert _rows(conn, "runs") == before["runs"]
        assert "ti_id" not in {c["name"] for c in sa.inspect(conn).get_columns("decisions")}
    forget_verified()
    Store(store_url).upgrade()
    forget_verified()
