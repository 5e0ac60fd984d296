"""What one launch costs the store, counted instead of timed (timings are the benchmark's, on a
quiet machine): the statements a cached ``size()`` and a recorded run issue, and the work the
database does for them, which must not grow with the history. SQLite counts its virtual-machine
steps (a progress handler); PostgreSQL the rows its plans read (``EXPLAIN ANALYZE``)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from airflow_provider_bellamy import resolution
from airflow_provider_bellamy.benchmarks.scale import StoreWork, store_work
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.model import TrainingConfig
from airflow_provider_bellamy.records import context_fingerprint, normalize_context
from airflow_provider_bellamy.store import DecisionRepository, RunRepository, Store

from .conftest import add_decision

TINY = TrainingConfig(members=2, max_epochs=40, min_epochs=10, patience=10, hidden=8)
MEASURED = {"machine_type": "m5.xlarge", "data_size_mb": 1000.0}
SCALE_OUTS = [2, 4, 6, 8]
# What a cached size() and a recorded run may issue (SELECT/INSERT/UPDATE/DELETE/WITH): the
# property kinds' check, the general model, the context's newest run, its copy, the decision;
# the kinds' check, the insert, linking the decision (two keyed updates).
MAX_CACHED_SIZE_STATEMENTS = 5
MAX_RECORD_STATEMENTS = 4
# The history below grows 40-fold; a launch's work may grow by a few index levels, not with it.
MAX_WORK_GROWTH = 1.5


@pytest.fixture(autouse=True)
def _small_window(monkeypatch: pytest.MonkeyPatch) -> None:
    # the window test_scale.py fine-tunes on with TINY models (the window's size is not measured here)
    monkeypatch.setattr(resolution, "FINETUNE_RUNS_PER_SCALE_OUT", 1)
    monkeypatch.setattr(resolution, "MAX_FINETUNE_RUNS", 3)


def _runs(contexts: int, repeats: int) -> list[dict[str, Any]]:
    """``repeats`` runs of the measured context and of ``contexts - 1`` others, at each scale-out."""
    sizes = [1000.0] + [1500.0 + 500.0 * i for i in range(contexts - 1)]
    return [
        {
            "job_type": "grep",
            "framework": "spark",
            "scale_out": n,
            "runtime_s": size / 10 * 4 / n + 10 + rep % 3,
            "machine_type": "m5.xlarge",
            "data_size_mb": size,
        }
        for rep in range(repeats)
        for size in sizes
        for n in SCALE_OUTS
    ]


def _rows_read(store: Store, statements: list[tuple[str, Any]]) -> int:
    """PostgreSQL: the rows the plans of ``statements`` read from ``runs`` and ``decisions`` (every
    scan node's actual rows times its loops, EXPLAIN ANALYZE in a transaction rolled back)."""

    def walk(node: dict[str, Any]) -> int:
        own = 0
        if node.get("Relation Name") in ("runs", "decisions"):
            own = int(node.get("Actual Rows", 0)) * int(node.get("Actual Loops", 1))
            own += int(node.get("Rows Removed by Filter", 0)) * int(node.get("Actual Loops", 1))
        return own + sum(walk(child) for child in node.get("Plans", []))

    total = 0
    with store.engine.connect() as conn:
        for statement, params in statements:
            if not statement.lstrip().upper().startswith(("SELECT", "WITH", "UPDATE")):
                continue  # inserts read nothing of the history
            with conn.begin() as tx:
                raw = conn.exec_driver_sql("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params).scalar()
                tx.rollback()
            plan = raw if isinstance(raw, list) else json.loads(raw)
            total += walk(plan[0]["Plan"])
    return total


def _cost(store: Store, work: StoreWork) -> int:
    return work.vm_steps if store.dialect == "sqlite" else _rows_read(store, work.statements)


def _analyze(store: Store) -> None:
    """PostgreSQL: the statistics autovacuum would keep after a bulk insert (without them the
    planner takes a large table for a tiny one)."""
    if store.dialect == "postgresql":
        with store.engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE runs")
            conn.exec_driver_sql("ANALYZE decisions")
            conn.commit()


def _launch(bellamy: Bellamy, store: Store, tag: str) -> tuple[StoreWork, StoreWork, str]:
    """A cached size() of the measured context, then recording its run: what each cost."""
    _analyze(store)
    first = bellamy.size("grep", MEASURED, SCALE_OUTS, 200.0)  # its copy is current after this
    with store_work(store) as sized:
        decision = bellamy.size("grep", MEASURED, SCALE_OUTS, 200.0)
    assert decision.model_version == first.model_version and "ctx-" in (decision.model_version or "")
    with store_work(store) as recorded:
        bellamy.record_run(
            job_type="grep", framework="spark", scale_out=4, runtime_s=110.0, context=MEASURED,
            dag_id="d", task_id="t", run_id=tag, decision_id=decision.decision_id,
            ti_id=str(uuid.uuid4()),  # as a task records it: with Airflow's id of the try
        )  # fmt: skip
    return sized, recorded, decision.model_version or ""


def _costs(store: Store, *works: StoreWork) -> list[int]:
    return [_cost(store, w) for w in works]


def test_a_launch_costs_a_few_statements_and_no_more_as_the_history_grows(
    bellamy: Bellamy, store: Store
) -> None:
    bellamy.record_runs(_runs(contexts=3, repeats=4))  # 48 runs
    bellamy.train("grep", config=TINY)
    small_size, small_record, _ = _launch(bellamy, store, "small")
    # PostgreSQL's rows are counted by running the plans again: now, on the small history
    small_costs = _costs(store, small_size, small_record)

    bellamy.record_runs(_runs(contexts=10, repeats=80))  # 3,200 more: the measured context 40 times more
    big_size, big_record, _ = _launch(bellamy, store, "big")
    big_costs = _costs(store, big_size, big_record)

    for work in (small_size, big_size):
        assert len(work.statements) <= MAX_CACHED_SIZE_STATEMENTS, [s for s, _ in work.statements]
    for work in (small_record, big_record):
        assert len(work.statements) <= MAX_RECORD_STATEMENTS, [s for s, _ in work.statements]
    for what, small, big in zip(("cached size()", "record a run"), small_costs, big_costs, strict=True):
        assert big <= MAX_WORK_GROWTH * small + 20, f"{what}: {small} -> {big} ({store.dialect})"


def test_a_new_run_is_seen_by_the_next_launch_of_another_process(bellamy: Bellamy, store: Store) -> None:
    """The cheap check (the context's newest run) still sees a run another worker recorded, and a
    failed or excluded run (never trained on) leaves the copy current."""
    bellamy.record_runs(_runs(contexts=3, repeats=4))
    bellamy.train("grep", config=TINY)
    first = bellamy.size("grep", MEASURED, SCALE_OUTS, 200.0).model_version
    other = Bellamy(store.url)  # same process here, but nothing cached on the object matters
    for status, excluded in (("failed", None), ("success", "spot instance reclaimed")):
        other.record_run(
            job_type="grep", framework="spark", scale_out=4, runtime_s=90.0, context=MEASURED,
            status=status, excluded_reason=excluded,
        )  # fmt: skip
        assert bellamy.size("grep", MEASURED, SCALE_OUTS, 200.0).model_version == first
    other.record_run(job_type="grep", framework="spark", scale_out=12, runtime_s=40.0, context=MEASURED)
    second = bellamy.size("grep", MEASURED, SCALE_OUTS, 200.0).model_version
    assert second != first and second is not None and second.endswith("/v2 (from grep/v1)")
    fp = context_fingerprint("grep", normalize_context(MEASURED))
    with store.read() as s:
        assert s is not None
        repo = RunRepository(s)
        newest = repo.newest_training_id("grep", fp)
        trainable = repo.training_runs("grep", fingerprint=fp)
        assert newest == trainable[-1].id  # the scale-out 12 run: a scale-out the context never ran at
        assert repo.newest_id("grep") == max(r.id for r in repo.list())
        assert repo.newest_training_id("grep", "0" * 16) is None


def _linked_run(store: Store, decision_id: int) -> int | None:
    with store.read() as s:
        assert s is not None
        row = DecisionRepository(s).get(decision_id)
        assert row is not None
        return row.run_row_id


def test_recording_links_the_decision_and_a_retry_wins(bellamy: Bellamy, store: Store) -> None:
    did = add_decision(store, context=MEASURED)
    common = {"job_type": "grep", "framework": "spark", "scale_out": 4, "context": MEASURED}
    common |= {"dag_id": "d", "task_id": "t", "run_id": "r"}
    first = bellamy.record_run(runtime_s=100.0, try_number=1, decision_id=did, **common)
    assert _linked_run(store, did) == first
    retry = bellamy.record_run(runtime_s=90.0, try_number=2, decision_id=did, **common)
    assert _linked_run(store, did) == retry  # the newest try wins
    with store.read() as s:
        assert s is not None
        repo = DecisionRepository(s)
        assert repo.try_link(did, first) is False  # an older try does not take it back
        assert repo.try_link(did + 1000, first) is False  # no such decision
    other = add_decision(store, job_type="sort", context=MEASURED)
    sort_run = bellamy.record_run(runtime_s=80.0, try_number=3, decision_id=other, **common)
    assert _linked_run(store, other) is None  # a grep run: not linked
    assert [r["decision_id"] for r in bellamy.list_runs(limit=1)] == [other]
    assert sort_run > retry


@pytest.mark.parametrize("per_scale_out", [1, 3])
def test_the_context_window_is_the_newest_runs_per_scale_out(
    bellamy: Bellamy, store: Store, per_scale_out: int
) -> None:
    bellamy.record_runs(_runs(contexts=3, repeats=4))
    bellamy.record_run(job_type="grep", framework="spark", scale_out=6, runtime_s=5.0, context=MEASURED,
                       excluded_reason="bad timing")  # fmt: skip
    fp = context_fingerprint("grep", normalize_context(MEASURED))
    with store.read() as s:
        assert s is not None
        repo = RunRepository(s)
        every = repo.training_runs("grep", fingerprint=fp)
        window = repo.recent_training_runs("grep", fingerprint=fp, per_scale_out=per_scale_out, limit=3)
        expected = sorted(
            i for n in SCALE_OUTS for i in sorted(r.id for r in every if r.scale_out == n)[-per_scale_out:]
        )[-3:]
        assert [r.id for r in window] == expected


def test_reading_one_context_s_runs_does_not_read_the_job_type_s_others(
    bellamy: Bellamy, store: Store
) -> None:
    """``runs_frame(job_type, context=...)``, trainable runs or every run: the context's rows
    found in ``ix_runs_context``, not the job type's history filtered (in Python, or row by row
    through ``ix_runs_training``)."""

    def others(contexts: int, repeats: int) -> list[dict[str, Any]]:
        return [r for r in _runs(contexts, repeats) if r["data_size_mb"] != MEASURED["data_size_mb"]]

    measured = _runs(contexts=1, repeats=2)  # 8 runs of the measured context
    bellamy.record_runs([*measured, {**measured[0], "status": "failed"}, *others(3, 4)])  # + 32 others

    def read() -> tuple[list[StoreWork], list[int]]:
        _analyze(store)
        bellamy.runs_frame("grep", context=MEASURED)  # the property kinds, read per context, cached
        works, sizes = [], []
        for successful_only in (True, False):
            with store_work(store) as work:
                frame = bellamy.runs_frame("grep", successful_only=successful_only, context=MEASURED)
            works.append(work)
            sizes.append(len(frame))
        return works, sizes

    small, small_sizes = read()
    small_costs = _costs(store, *small)
    bellamy.record_runs(others(10, 80))  # 2,880 more runs, none of the measured context
    big, big_sizes = read()
    big_costs = _costs(store, *big)
    assert small_sizes == big_sizes == [8, 9]  # its runs, the failed one among every run
    for what, before, after in zip(("trainable runs", "every run"), small_costs, big_costs, strict=True):
        assert after <= MAX_WORK_GROWTH * before + 20, f"{what}: {before} -> {after} ({store.dialect})"


def test_an_unknown_job_type_s_launch_does_not_read_every_run(bellamy: Bellamy, store: Store) -> None:
    """Its refusal names the known job types (and ``train`` lists them): a few seeks per job type,
    not a DISTINCT over every run."""
    from airflow_provider_bellamy.exceptions import UnknownJobTypeError

    other = {"framework": "spark", "scale_out": 2, "runtime_s": 10.0, "machine_type": "m5.xlarge"}
    bellamy.record_runs(
        [
            *_runs(contexts=3, repeats=4),
            {**other, "job_type": "sort", "status": "failed"},
            {**other, "job_type": "wc"},
        ]
    )

    def launch() -> StoreWork:
        _analyze(store)
        with store_work(store) as work:
            with pytest.raises(UnknownJobTypeError, match="grep") as refused:
                bellamy.size("etl", MEASURED, SCALE_OUTS, 200.0)
            with store.read() as session:
                repo = RunRepository(session)
                assert repo.job_types() == ["grep", "sort", "wc"]
                assert repo.job_types(successful_only=True) == ["grep", "wc"]
        assert "sort" in str(refused.value)
        return work

    small = _cost(store, launch())
    bellamy.record_runs(_runs(contexts=10, repeats=80))  # 3,200 more runs of grep
    big = _cost(store, launch())
    assert big <= MAX_WORK_GROWTH * small + 20, f"{small} -> {big} ({store.dialect})"


def test_a_job_type_s_newest_runs_are_read_without_sorting_its_history(
    bellamy: Bellamy, store: Store
) -> None:
    """``bellamy history list --job-type``: the newest runs of each status, merged."""
    runs = _runs(contexts=3, repeats=4)
    bellamy.record_runs(runs[:-2] + [{**r, "status": "failed"} for r in runs[-2:]])

    def newest() -> tuple[StoreWork, list[tuple[int, str]]]:
        _analyze(store)
        with store_work(store) as work:
            rows = bellamy.list_runs("grep", limit=5)
        return work, [(r["id"], r["status"]) for r in rows]

    small, listed = newest()
    assert [status for _, status in listed] == ["failed", "failed", "success", "success", "success"]
    assert [i for i, _ in listed] == sorted((r["id"] for r in bellamy.list_runs(limit=None)), reverse=True)[
        :5
    ]
    small_cost = _cost(store, small)
    bellamy.record_runs(_runs(contexts=10, repeats=80))  # 3,200 more
    big, listed = newest()
    assert [status for _, status in listed] == ["success"] * 5
    big_cost = _cost(store, big)
    assert big_cost <= MAX_WORK_GROWTH * small_cost + 20, f"{small_cost} -> {big_cost} ({store.dialect})"


def test_the_newest_observed_runs_are_read_without_sorting_them_all(bellamy: Bellamy, store: Store) -> None:
    """``list_runs(source="observed")``: a walk down ix_runs_source, where SQLite sorted every
    observed run (found in ix_runs_dataset) for the first few."""

    def observed(runs: list[dict[str, Any]], tag: str) -> list[dict[str, Any]]:
        return [{**r, "dag_id": "d", "task_id": "t", "run_id": f"{tag}-{i}"} for i, r in enumerate(runs)]

    bellamy.record_runs(observed(_runs(contexts=3, repeats=4), "small"))
    bellamy.record_runs(_runs(contexts=3, repeats=1))  # traces, newer: passed over

    def newest() -> tuple[StoreWork, list[int]]:
        _analyze(store)
        with store_work(store) as work:
            rows = bellamy.list_runs(source="observed", limit=5)
        assert {r["source"] for r in rows} == {"observed"}
        return work, [r["id"] for r in rows]

    def expected() -> list[int]:
        ids = [r["id"] for r in bellamy.list_runs(limit=None) if r["source"] == "observed"]
        return sorted(ids, reverse=True)[:5]

    small, listed = newest()
    assert listed == expected()
    small_cost = _cost(store, small)
    bellamy.record_runs(observed(_runs(contexts=10, repeats=80), "big"))  # 3,200 more
    big, listed = newest()
    assert listed == expected()
    big_cost = _cost(store, big)
    assert big_cost <= MAX_WORK_GROWTH * small_cost + 20, f"{small_cost} -> {big_cost} ({store.dialect})"
