"""A store of many runs: what training and fine-tuning read, the indexes the hot queries use,
and migration 0003 up and down, on SQLite and PostgreSQL."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy import event

from airflow_provider_bellamy import resolution, retraining
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.model import TrainingConfig
from airflow_provider_bellamy.records import context_fingerprint, normalize_context
from airflow_provider_bellamy.store import DecisionRepository, ModelRepository, RunRepository, Store
from airflow_provider_bellamy.store.store import alembic_config, forget_verified

from .conftest import add_decision, store_at

CONTEXTS = [{"machine_type": "m5.xlarge", "data_size_mb": float(size)} for size in (1000, 2000, 4000)]
TINY = TrainingConfig(members=2, max_epochs=40, min_epochs=10, patience=10, hidden=8)


def _runs(repeats: int) -> list[dict[str, Any]]:
    """``repeats`` runs of each context at each of 4 scale-outs, interleaved in time."""
    out = []
    for rep in range(repeats):
        for i, ctx in enumerate(CONTEXTS):
            for n in (2, 4, 6, 8):
                runtime = (100.0 + 50 * i) * 4 / n + 10 + rep % 3
                out.append(
                    {"job_type": "grep", "framework": "spark", "scale_out": n, "runtime_s": runtime, **ctx}
                )
    return out


def _expected_window(runs: list[Any], per_scale_out: int, limit: int) -> list[int]:
    """What the window should hold, computed in Python from every stored run."""
    groups: dict[tuple[str, str, int], list[int]] = {}
    for r in runs:
        if r.status == "success":
            groups.setdefault((r.job_type, r.context_fingerprint, r.scale_out), []).append(r.id)
    chosen = sorted(i for ids in groups.values() for i in sorted(ids)[-per_scale_out:])
    return chosen[-limit:]


def test_window_holds_the_newest_runs_of_each_context_and_scale_out(bellamy: Bellamy, store: Store) -> None:
    bellamy.record_runs(_runs(6))
    failed = bellamy.record_run(
        job_type="grep", framework="spark", scale_out=2, runtime_s=5.0, status="failed", context=CONTEXTS[0]
    )
    with store.read() as s:
        assert s is not None
        repo = RunRepository(s)
        every = repo.list(newest_first=False)
        for per, limit in ((2, 1000), (3, 20), (100, 1000)):
            window = repo.recent_training_runs("grep", per_scale_out=per, limit=limit)
            assert [r.id for r in window] == _expected_window(every, per, limit)
        fp = context_fingerprint("grep", normalize_context(CONTEXTS[0]))
        one = repo.recent_training_runs("grep", fingerprint=fp, per_scale_out=2, limit=1000)
        assert [r.id for r in one] == _expected_window(
            [r for r in every if r.context_fingerprint == fp], 2, 1000
        )
        assert failed not in {r.id for r in one}  # failed runs are never trained on


def test_training_on_a_store_larger_than_its_window(
    bellamy: Bellamy, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retraining, "TRAINING_RUNS_PER_SCALE_OUT", 2)
    monkeypatch.setattr(retraining, "MAX_TRAINING_RUNS", 20)
    bellamy.record_runs(_runs(5))  # 60 runs: 5 of each (context, scale-out)
    first = bellamy.train("grep", config=TINY)[0]
    assert first.outcome == "promoted"
    assert first.metrics["data_rows"] == 60 and first.metrics["window_rows"] == 20
    assert first.train_rows + first.holdout_rows == 20
    # the model knows which runs it read: no new runs, nothing to do, and nothing is loaded for it
    assert bellamy.train("grep", config=TINY)[0].outcome == "up_to_date"
    bellamy.record_runs(_runs(1)[:3])
    second = bellamy.train("grep", config=TINY)[0]
    assert second.outcome in ("promoted", "kept_active")
    assert second.metrics["data_rows"] == 63 and second.metrics["window_rows"] == 20
    # the newest runs are in the window: its hold-out is the 3 new ones (unseen by the active model)
    assert second.holdout_rows == 3


def test_pretraining_gets_what_is_left_of_the_budget() -> None:
    from airflow_provider_bellamy.model import training  # noqa: F401 - imported once, before the clock

    now = 1000.0  # a fixed clock: the split is arithmetic, not a measured duration
    # 40 s spent reading runs of a 100 s budget: pre-training gets 85 % of the 60 s left
    assert retraining.pretrain_budget(100.0, now - 40.0, now) == pytest.approx(51.0)
    # the reading took the whole budget: pre-training still gets its 5 %
    assert retraining.pretrain_budget(100.0, now - 500.0, now) == pytest.approx(5.0)
    assert retraining.pretrain_budget(None, now, now) is None


def test_fine_tuning_reads_a_window_and_its_copy_stays_current(
    bellamy: Bellamy, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resolution, "FINETUNE_RUNS_PER_SCALE_OUT", 1)
    monkeypatch.setattr(resolution, "MAX_FINETUNE_RUNS", 3)
    bellamy.record_runs(_runs(4))
    bellamy.train("grep", config=TINY)
    read: list[int] = []
    original = RunRepository.recent_training_runs

    def spy(self: RunRepository, *args: Any, **kwargs: Any) -> Any:
        rows = original(self, *args, **kwargs)
        read.append(len(rows))
        return rows

    monkeypatch.setattr(RunRepository, "recent_training_runs", spy)
    first = bellamy.size("grep", CONTEXTS[0], [2, 4, 6, 8], 200.0)
    assert read == [3]  # 16 runs of the context stored, 3 read
    assert first.model_version is not None and "ctx-" in first.model_version
    with store.read() as s:
        assert s is not None
        fp = context_fingerprint("grep", normalize_context(CONTEXTS[0]))
        tuned = ModelRepository(s).active("grep", scope="context", fingerprint=fp)
        assert tuned is not None and tuned.train_rows == 3  # fine-tuned on 3 of the 16
    second = bellamy.size("grep", CONTEXTS[0], [2, 4, 6, 8], 200.0)
    assert read == [3] and second.model_version == first.model_version  # the stored copy, reused


# ------------------------------------------------------------------------------ query plans


@contextmanager
def _statements(store: Store) -> Iterator[list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []

    def capture(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool) -> None:
        if not many and statement.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE", "WITH")):
            seen.append((statement, parameters))

    event.listen(store.engine, "before_cursor_execute", capture)
    try:
        yield seen
    finally:
        event.remove(store.engine, "before_cursor_execute", capture)


def _full_scans(store: Store, statements: list[tuple[str, Any]]) -> list[str]:
    """The statements whose plan reads all of ``runs`` or ``decisions`` (PostgreSQL: with
    sequential scans disabled, so a small test table cannot hide a missing index)."""
    bad = []
    with store.engine.connect() as conn:
        if store.dialect == "postgresql":
            conn.exec_driver_sql("SET enable_seqscan = off")
        for statement, params in statements:
            if store.dialect == "sqlite":
                plan = [row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement, params)]
                scans = [p for p in plan if re.match(r"SCAN (runs|decisions)\b", p) and "INDEX" not in p]
            else:
                plan = [row[0] for row in conn.exec_driver_sql("EXPLAIN " + statement, params)]
                scans = [p for p in plan if re.search(r"Seq Scan on (runs|decisions)\b", p)]
            if scans:
                bad.append(f"{statement}\n  -> {plan}")
    return bad


def test_hot_queries_use_indexes(bellamy: Bellamy, store: Store) -> None:
    ids = bellamy.record_runs(_runs(2))
    fp = context_fingerprint("grep", normalize_context(CONTEXTS[0]))

    general = store.write(
        lambda s: ModelRepository(s).add(job_type="grep", scope="general", weights=b"x", status="active").id
    )
    store.write(
        lambda s: ModelRepository(s).add(
            job_type="grep",
            scope="context",
            context_fingerprint=fp,
            parent_id=general,
            weights=b"y",
            status="active",
        )
    )
    did = add_decision(store, context=CONTEXTS[0], context_fingerprint=fp)
    store.write(lambda s: DecisionRepository(s).link(did, ids[0]))
    checks: list[Callable[[Any], Any]] = [
        # the launch path (size): the models, the context's summary and window; recording a run
        lambda s: ModelRepository(s).active("grep"),
        lambda s: ModelRepository(s).active("grep", scope="context", fingerprint=fp),
        lambda s: RunRepository(s).training_summary("grep", fp),
        lambda s: RunRepository(s).recent_training_runs("grep", fingerprint=fp, per_scale_out=5, limit=50),
        lambda s: RunRepository(s).has_job_type("grep"),
        lambda s: RunRepository(s).newest_id("grep"),
        lambda s: RunRepository(s).newest_training_id("grep", fp),
        lambda s: RunRepository(s).property_kinds("grep"),
        lambda s: ModelRepository(s).prune_context("grep", fp),
        # training's summary and window of a job type
        lambda s: RunRepository(s).training_summary("grep"),
        lambda s: RunRepository(s).recent_training_runs("grep", per_scale_out=20, limit=20_000),
        # reads outside the launch path: an unknown job type's refusal and train() (the job
        # types), history list --job-type, one context's runs (runs_frame)
        lambda s: RunRepository(s).job_types(successful_only=True),
        lambda s: RunRepository(s).list(job_type="grep", limit=20),
        lambda s: RunRepository(s).list(job_type="grep", fingerprint=fp, newest_first=False),
        lambda s: RunRepository(s).training_runs("grep", fingerprint=fp),
        # retention
        lambda s: DecisionRepository(s).prune_batch(dt.datetime(2000, 1, 1), keep_linked=False),
        lambda s: ModelRepository(s).prune(keep=3, job_type="grep"),
        lambda s: s.execute(sa.text("SELECT 1")),
    ]
    with _statements(store) as seen:
        for check in checks:
            store.write(check)
        bellamy.record_run(
            job_type="grep", framework="spark", scale_out=2, runtime_s=50.0, context=CONTEXTS[0],
            dag_id="d", task_id="t", run_id="r", decision_id=did,
        )  # fmt: skip
        # what pruning issues to clear the links to deleted rows, by the keys it deletes
        store.write(
            lambda s: s.execute(
                sa.text("UPDATE decisions SET model_version_id = NULL WHERE model_version_id = 0")
            )
        )
        store.write(
            lambda s: s.execute(sa.text("UPDATE runs SET decision_id = NULL WHERE decision_id IN (0, 1)"))
        )
    assert len(seen) > 10
    assert _full_scans(store, seen) == []


# ------------------------------------------------------------------------------ migration


def _indexes(store: Store) -> dict[str, list[str]]:
    with store.engine.connect() as conn:
        inspector = sa.inspect(conn)
        return {
            ix["name"]: list(ix["column_names"])
            for table in ("runs", "decisions", "model_versions")
            for ix in inspector.get_indexes(table)
        }


def _before_0003() -> str:
    """The revision 0003 follows (0001 on its branch; whatever the migrations are chained to)."""
    from alembic.script import ScriptDirectory

    previous = ScriptDirectory.from_config(alembic_config()).get_revision("0003_scale_indexes").down_revision  # type: ignore[arg-type]
    assert isinstance(previous, str)
    return previous


def test_migration_0003_up_and_down_keeps_the_data(store_url: str) -> None:
    previous = _before_0003()
    s = store_at(store_url, previous)
    before = _indexes(s)
    assert before["ix_runs_context"] == ["job_type", "context_fingerprint", "status", "id"]
    assert "ix_decisions_created" not in before
    assert s.schema_status().state == "outdated"
    s.upgrade()
    b = Bellamy(store_url)
    ids = b.record_runs(_runs(1))
    after = _indexes(s)
    assert after["ix_runs_context"] == ["job_type", "context_fingerprint", "status", "scale_out", "id"]
    for name in (
        "ix_runs_decision",
        "ix_decisions_created",
        "ix_decisions_model",
        "ix_decisions_run",
        "ix_model_parent",
    ):
        assert name in after
    with s.engine.begin() as conn:
        command.downgrade(alembic_config(conn), previous)  # type: ignore[arg-type]
    forget_verified()
    assert _indexes(s) == before
    s.upgrade()
    assert _indexes(s) == after
    assert [r["id"] for r in b.list_runs(limit=None)] == sorted(ids, reverse=True)
