"""Migration 0004: decisions keep what they claimed (the confidence asked for, where the model
extrapolated, what the widened band was calibrated on), and a store at 0003 holding decisions and
runs upgrades without losing any of them; on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command

from airflow_provider_bellamy.cli import main
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.store import DecisionRepository, Store
from airflow_provider_bellamy.store.repositories import _json_safe
from airflow_provider_bellamy.store.store import alembic_config, forget_verified
from tests.store.conftest import decision_values, observed_run, store_at

_BEFORE = "0003_scale_indexes"
_EXTRAPOLATION = {
    "known": True,
    "unseen": [["machine_type", "loopback-1c1g"]],
    "unseen_anywhere": ["machine_type"],
    "out_of_range": [],
    "missing": [],
    "job_type_unseen": False,
    "environments": [],
    "kinds": ["categorical"],
    "decades": 0.0,
    "sentence": "machine_type 'loopback-1c1g' never seen",
}


def _old_decision(i: int) -> dict[str, Any]:
    """A decision's columns as the 0003 code wrote them (candidates' JSON without infinities)."""
    values = decision_values(
        context={"machine_type": "m5.xlarge", "data_size_mb": 1000.0 + i},
        context_fingerprint=f"{i:032d}",
        reason=f"decided under 0003, number {i} [confidence 99.9999% asked, capped at 99.8%]",
        created_at=dt.datetime(2026, 11, 1, 12, i),
    )
    return {**values, "candidates": _json_safe(values["candidates"])}


def _rows(conn: sa.Connection, table: str) -> list[dict[str, Any]]:
    t = sa.Table(table, sa.MetaData(), autoload_with=conn)
    return [dict(r._mapping) for r in conn.execute(sa.select(t).order_by(t.c.id))]


def test_a_store_at_0003_with_decisions_upgrades_and_loses_nothing(store_url: str) -> None:
    s = store_at(store_url, _BEFORE)
    assert s.schema_status().state == "outdated"
    # rows written the way the 0003 code wrote them (its columns only)
    with s.engine.begin() as conn:
        meta = sa.MetaData()
        runs = sa.Table("runs", meta, autoload_with=conn)
        decisions = sa.Table("decisions", meta, autoload_with=conn)
        assert "requested_confidence" not in decisions.c
        ids = [
            conn.execute(sa.insert(decisions).values(**_old_decision(i))).inserted_primary_key[0]
            for i in range(3)
        ]
        run = conn.execute(
            sa.insert(runs).values(
                job_type="grep",
                framework="spark",
                scale_out=4,
                runtime_s=151.5,
                context={"machine_type": "m5.xlarge", "data_size_mb": 1000.0},
                context_fingerprint="0" * 32,
                status="success",
                source="observed",
                dag_id="etl",
                task_id="grep_logs",
                run_id="scheduled__2026-11-01",
                map_index=-1,
                try_number=1,
                decision_id=ids[0],
                recorded_at=dt.datetime(2026, 11, 1, 12, 5),
            )
        ).inserted_primary_key[0]
        conn.execute(sa.update(decisions).where(decisions.c.id == ids[0]).values(run_row_id=run))
        before = {"decisions": _rows(conn, "decisions"), "runs": _rows(conn, "runs")}

    s.upgrade()
    assert s.schema_status().state == "current"
    with s.engine.connect() as conn:
        after = {"decisions": _rows(conn, "decisions"), "runs": _rows(conn, "runs")}
    # every column the 0003 run had, unchanged (later revisions add theirs: 0006 ti_id, NULL)
    assert [{k: r[k] for k in before["runs"][0]} for r in after["runs"]] == before["runs"]
    assert [r["ti_id"] for r in after["runs"]] == [None]
    assert len(after["decisions"]) == 3
    for old, new in zip(before["decisions"], after["decisions"], strict=True):
        # every column the 0003 row had, unchanged; the claims are not inferred from the reason
        assert {k: new[k] for k in old} == old
        assert (new["requested_confidence"], new["extrapolation"], new["band_note"]) == (None, None, None)

    b = Bellamy(store_url)
    old = b.get_decision(ids[0])
    assert old.requested_confidence is None and old.extrapolation is None and old.extrapolating is None
    assert old.candidates[0].upper_s == float("inf") and old.reason.startswith("decided under 0003, number 0")
    assert b.list_decisions(limit=None)[-1]["run_row_id"] == run
    # the store takes new decisions with their claims, and links runs as before
    new_id = s.write(
        lambda session: (
            DecisionRepository(session)
            .add(
                {
                    **_old_decision(9),
                    "created_at": dt.datetime.now(dt.timezone.utc),
                    "confidence": 0.998,
                    "requested_confidence": 0.999999,
                    "extrapolation": _EXTRAPOLATION,
                    "band_note": "contexts held out whole (categorical)",
                }
            )
            .id
        )
    )
    new = b.get_decision(new_id)
    assert new.capped and new.confidence == 0.998 and new.requested_confidence == 0.999999
    assert new.extrapolation == _EXTRAPOLATION and new.extrapolating is True
    assert new.band_note == "contexts held out whole (categorical)"
    run2 = b.record_run(**observed_run(decision_id=new_id, try_number=2))
    assert b.list_decisions(limit=1)[0]["run_row_id"] == run2

    # and back down to 0003: the rows stay, only the claims go
    with s.engine.begin() as conn:
        command.downgrade(alembic_config(conn), _BEFORE)  # type: ignore[arg-type]
        down = _rows(conn, "decisions")
    forget_verified()
    assert [d["id"] for d in down] == [*ids, new_id]
    assert "requested_confidence" not in down[0]
    assert {k: down[0][k] for k in before["decisions"][0]} == before["decisions"][0]


def test_the_store_refuses_a_requested_confidence_outside_0_1(store: Store) -> None:
    with pytest.raises(sa.exc.IntegrityError, match=r"(?i)ck_decisions_requested_confidence|check"):
        store.write(
            lambda s: DecisionRepository(s).add(
                {
                    **_old_decision(1),
                    "created_at": dt.datetime.now(dt.timezone.utc),
                    "requested_confidence": 1.5,
                }
            )
        )


def test_decisions_list_and_show_say_what_was_claimed(
    store: Store, store_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "250")  # one table row per line
    now = dt.datetime.now(dt.timezone.utc)
    base = {**_old_decision(1), "created_at": now, "reason": "r"}
    old = store.write(lambda s: DecisionRepository(s).add(base).id)
    inside = store.write(
        lambda s: (
            DecisionRepository(s)
            .add(
                {
                    **base,
                    "requested_confidence": 0.9,
                    "extrapolation": {**_EXTRAPOLATION, "kinds": [], "unseen": []},
                }
            )
            .id
        )
    )
    capped = store.write(
        lambda s: (
            DecisionRepository(s)
            .add(
                {
                    **base,
                    "confidence": 0.998,
                    "requested_confidence": 0.999999,
                    "extrapolation": _EXTRAPOLATION,
                }
            )
            .id
        )
    )
    assert main(["--store-url", store_url, "decisions", "list"]) == 0
    out = capsys.readouterr().out
    lines = {
        int(line.split("│")[1]): line
        for line in out.splitlines()
        if line.count("│") > 5 and line.split("│")[1].strip().isdigit()
    }
    assert "99.8% (asked 99.9999%)" in lines[capped] and "categorical" in lines[capped]
    assert "(asked" not in lines[inside] and "│ -" in lines[inside].replace("  ", " ")
    assert "?" in lines[old]
    assert main(["--store-url", store_url, "decisions", "show", str(capped)]) == 0
    shown = capsys.readouterr().out
    assert '"requested_confidence": 0.999999' in shown and "loopback-1c1g" in shown
