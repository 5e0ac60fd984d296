"""Launch-time sizing: fallbacks when the store or the model cannot answer, and the
on_infeasible policies — each decided fast, never hanging past the connection timeout."""

from __future__ import annotations

import datetime as dt
import math
import socket
import threading
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_provider_bellamy.exceptions import InfeasibleTargetError, InvalidInputError
from airflow_provider_bellamy.operators.sizing import BellamySizingOperator
from tests.fixtures.airflow import connection_json

CONTEXT = {"machine_type": "m5.xlarge", "cores": 4, "data_size_mb": 2048.0}


def _context(op: Any) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="d", task_id=op.task_id, run_id="manual__1", map_index=-1, try_number=1)
    return {"ti": ti, "task": op}


def _op(**kwargs: Any) -> BellamySizingOperator:
    args: dict[str, Any] = {
        "task_id": "size",
        "job_type": "wc",
        "properties": CONTEXT,
        "scale_outs": [1, 2, 4],
    }
    args.update(kwargs)
    return BellamySizingOperator(**args)


# Connections each silent server accepted, by port: how often a hung store was asked.
ACCEPTED: dict[int, list[socket.socket]] = {}


@pytest.fixture
def silent_server() -> Iterator[int]:  # the connections it accepted: ACCEPTED[port]
    """A TCP server on 127.0.0.1 that accepts connections and never answers (a hung database)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    ACCEPTED[srv.getsockname()[1]] = held
    yield srv.getsockname()[1]
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    srv.close()


def _use_hung_store(monkeypatch: pytest.MonkeyPatch, port: int, *, connect_timeout: int) -> None:
    """Connection ``bellamy_hung``: a PostgreSQL store URL on a port that accepts and never answers."""
    url = f"postgresql+psycopg://bellamy@127.0.0.1:{port}/bellamy"
    monkeypatch.setenv(
        "AIRFLOW_CONN_BELLAMY_HUNG",
        connection_json("bellamy", extra={"store_url": url, "connect_timeout": connect_timeout}),
    )


@pytest.mark.timeout(300)  # without its connect timeout the call would hang on the silent server
def test_hung_store_falls_back_within_the_connection_timeout(
    silent_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use_hung_store(monkeypatch, silent_server, connect_timeout=2)
    op = _op(bellamy_conn_id="bellamy_hung", default_scale_out=2)
    decision = op.execute(_context(op))
    assert decision["chosen_scale_out"] == 2
    assert decision["fallback_reason"] and not decision["feasible"]
    # the connect timeout ended its one attempt (pytest-timeout guards against a hang)
    assert len(ACCEPTED[silent_server]) == 1

    strict = _op(bellamy_conn_id="bellamy_hung", on_infeasible="fail")
    with pytest.raises(InfeasibleTargetError, match="on_infeasible=fail"):
        strict.execute(_context(strict))


def test_refused_store_runs_max_without_default(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql+psycopg://bellamy@127.0.0.1:{port}/bellamy"
    monkeypatch.setenv("AIRFLOW_CONN_BELLAMY_DOWN", connection_json("bellamy", extra={"store_url": url}))
    op = _op(bellamy_conn_id="bellamy_down", on_infeasible="run-max")
    decision = op.execute(_context(op))
    assert decision["chosen_scale_out"] == 4
    assert "largest scale-out" in decision["reason"]


def test_broken_model_follows_the_fallback(bellamy_store: Any) -> None:
    from airflow_provider_bellamy.store import ModelRepository

    bellamy_store.record_run(job_type="wc", framework="spark", scale_out=2, runtime_s=50.0, context=CONTEXT)
    bellamy_store.store.write(
        lambda s: ModelRepository(s).add(
            job_type="wc", scope="general", weights=b"not a model", status="active"
        ),
        what="planting a broken model",
    )
    op = _op(default_scale_out=1)
    decision = op.execute(_context(op))
    assert decision["chosen_scale_out"] == 1
    assert "ModelFileError" in decision["fallback_reason"] or "model" in decision["fallback_reason"].lower()


def _seed_ernest(facade: Any) -> None:
    rows = [
        {"job_type": "wc", "framework": "spark", "scale_out": n, "runtime_s": t, **CONTEXT}
        for n, t in ((1, 300.0), (2, 160.0), (4, 90.0), (1, 305.0), (2, 158.0), (4, 92.0))
    ]
    facade.record_runs(rows)


def test_infeasible_target_policies(bellamy_store: Any) -> None:
    _seed_ernest(bellamy_store)
    ok = _op(target=dt.timedelta(minutes=10))
    assert ok.execute(_context(ok))["chosen_scale_out"] == 1  # 300 s fits 10 min at n=1

    with pytest.raises(InfeasibleTargetError, match="no scale-out"):
        strict = _op(target=10, on_infeasible="fail")
        strict.execute(_context(strict))

    warn = _op(target=10, on_infeasible="warn", scale_outs=[1, 2])
    decision = warn.execute(_context(warn))
    assert not decision["feasible"] and decision["shortfall_s"] > 0
    # the most likely to meet the target: Ernest's bands, one relative width, make it the fastest
    fastest = min(decision["candidates"], key=lambda c: c["upper_s"])["scale_out"]
    assert decision["chosen_scale_out"] == fastest and "the most likely to meet it" in decision["reason"]

    run_max = _op(target=10, on_infeasible="run-max", scale_outs=[1, 2])
    assert run_max.execute(_context(run_max))["chosen_scale_out"] == 2
    stored = bellamy_store.list_decisions("wc")
    assert len(stored) == 4  # every sized launch left its decision in the store


def test_templated_values_are_validated_after_rendering(bellamy_store: Any) -> None:
    op = _op(scale_outs="[1, 2, 4]", confidence="0.8", default_scale_out="2", target="300")
    decision = op.execute(_context(op))
    assert decision["confidence"] == 0.8 and decision["chosen_scale_out"] == 2
    with pytest.raises(InvalidInputError, match="scale_outs"):
        _op(scale_outs="[1, two]")  # a plain value is checked when the DAG is parsed
    bad = _op(scale_outs="{{ params.sizes }}")
    bad.scale_outs = "[1, two]"  # what a template could render to
    with pytest.raises(InvalidInputError, match="scale_outs"):
        bad.execute(_context(bad))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"objective": "cheapest"}, "objective"),
        ({"on_infeasible": "panic"}, "on_infeasible"),
        ({"objective": "min_cost"}, "price_per_node_hour"),
        ({"scale_outs": []}, "scale_outs"),
        ({"confidence": 1.5}, "confidence"),
        ({"job_type": " "}, "job_type"),
        # taken and ignored until session 32: read only with reserve="auto" / the DAG's DeadlineAlert
        ({"target": 300, "default_task_reserve": 60}, "default_task_reserve"),
        ({"target": "5m", "deadline_alert_name": "sla"}, "deadline_alert_name"),
    ],
)
def test_bad_arguments_fail_at_parse_time(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        _op(**kwargs)
    assert err.value.field == field


def _chain_dag(**size_kwargs: Any) -> Any:
    """size → load → publish, and size → audit: the reserve is the longer branch."""
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    with DAG("d", schedule=None, start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)) as dag:
        size = _op(**size_kwargs)
        load, publish, audit = (EmptyOperator(task_id=t) for t in ("load", "publish", "audit"))
        size >> load >> publish
        size >> audit
    return dag


def test_auto_reserve_from_recorded_durations(bellamy_store: Any) -> None:
    rows = []
    for i, seconds in enumerate(range(10, 101, 10)):  # publish: 10 … 100 s, p90 (nearest rank) = 90
        rows.append({"task_id": "publish", "runtime_s": float(seconds), "try_number": 1, "run_id": f"r{i}"})
    rows.append({"task_id": "load", "runtime_s": 40.0, "try_number": 1, "run_id": "r0"})
    rows.append({"task_id": "audit", "runtime_s": 500.0, "try_number": 1, "run_id": "r0", "status": "failed"})
    bellamy_store.record_runs(
        [{"job_type": "etl", "framework": "spark", "scale_out": 1, "dag_id": "d", **r} for r in rows]
    )
    deadline = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    dag = _chain_dag(
        deadline=deadline.isoformat(), reserve="auto", default_task_reserve=5, default_scale_out=2
    )
    op = dag.get_task("size")
    decision = op.execute(_context(op))
    target = decision["target"]
    # load (40) + publish (p90 = 90) = 130 beats audit (only a failed run: no duration → 5 s default)
    assert target["reserve_s"] == 130
    assert target["unknown_reserve_tasks"] == ["audit"]
    assert 3600 - 130 - 60 < decision["target_s"] <= 3600 - 130


@pytest.mark.timeout(300)
def test_auto_reserve_with_a_hung_store_does_not_wait_per_task(
    silent_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    _use_hung_store(monkeypatch, silent_server, connect_timeout=1)
    deadline = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    dag = _chain_dag(
        bellamy_conn_id="bellamy_hung",
        deadline=deadline.isoformat(),
        reserve="auto",
        default_task_reserve=60,
        default_scale_out=1,
    )
    op = dag.get_task("size")
    decision = op.execute(_context(op))
    assert decision["chosen_scale_out"] == 1 and decision["fallback_reason"]
    assert decision["target"]["reserve_s"] == 120  # two default-cost tasks on the longest path
    assert sorted(decision["target"]["unknown_reserve_tasks"]) == ["audit", "load", "publish"]
    # one connection for the downstream tasks' durations, one for sizing; not one per task (3)
    assert len(ACCEPTED[silent_server]) <= 2, "the store was asked once per downstream task"


def _stored_decision(facade: Any, decision: dict[str, Any]) -> dict[str, Any]:
    assert decision["decision_id"] is not None, decision
    [row] = [d for d in facade.list_decisions(limit=None) if d["id"] == decision["decision_id"]]
    assert (row["dag_id"], row["task_id"], row["run_id"], row["try_number"]) == ("d", "size", "manual__1", 1)
    assert row["chosen_scale_out"] == decision["chosen_scale_out"]
    return row


def test_a_store_that_knows_no_job_types_yet_stores_the_fallback_decision(bellamy_store: Any) -> None:
    op = _op(default_scale_out=2)
    decision = op.execute(_context(op))
    row = _stored_decision(bellamy_store, decision)
    assert row["chosen_scale_out"] == 2 and row["candidates"] == [] and not row["feasible"]
    assert row["fallback_reason"] == "job_type='wc': unknown job type (no job types are known yet)"
    assert "using default_scale_out=2" in row["reason"]
    assert row["context"] == CONTEXT and row["framework"] == "spark"


def test_an_unknown_job_type_stores_the_fallback_decision(bellamy_store: Any) -> None:
    bellamy_store.record_run(job_type="sort", framework="spark", scale_out=2, runtime_s=50.0, context=CONTEXT)
    op = _op(on_infeasible="run-max")  # no default: the largest candidate
    decision = op.execute(_context(op))
    row = _stored_decision(bellamy_store, decision)
    assert row["chosen_scale_out"] == 4 and not row["feasible"]
    assert "unknown job type (known job types: sort)" in row["fallback_reason"]
    assert "on_infeasible=run-max: largest scale-out 4" in row["reason"]


def test_a_job_type_without_a_model_stores_the_default_decision(bellamy_store: Any) -> None:
    # runs at one scale-out only: no Ernest fit either, the default scale-out
    bellamy_store.record_run(job_type="wc", framework="spark", scale_out=2, runtime_s=50.0, context=CONTEXT)
    op = _op(default_scale_out=1)
    decision = op.execute(_context(op))
    row = _stored_decision(bellamy_store, decision)
    assert row["chosen_scale_out"] == 1
    assert row["fallback_reason"].startswith("no trained model for job type 'wc'")
    assert "only scale-out 2" in row["fallback_reason"]


def test_an_unreadable_model_stores_the_fallback_decision(bellamy_store: Any) -> None:
    from airflow_provider_bellamy.store import ModelRepository

    bellamy_store.record_run(job_type="wc", framework="spark", scale_out=2, runtime_s=50.0, context=CONTEXT)
    bellamy_store.store.write(
        lambda s: ModelRepository(s).add(job_type="wc", scope="general", weights=b"garbage", status="active"),
        what="planting a broken model",
    )
    op = _op(default_scale_out=1)
    row = _stored_decision(bellamy_store, op.execute(_context(op)))
    assert row["fallback_reason"].startswith("active model wc/v1 cannot be read")


def test_an_unreachable_store_cannot_store_the_decision_and_the_log_says_so(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgresql+psycopg://bellamy@127.0.0.1:{port}/bellamy"
    monkeypatch.setenv("AIRFLOW_CONN_BELLAMY_DOWN", connection_json("bellamy", extra={"store_url": url}))
    op = _op(bellamy_conn_id="bellamy_down", default_scale_out=2)
    decision = op.execute(_context(op))
    assert decision["chosen_scale_out"] == 2 and decision["decision_id"] is None
    out, err = capfd.readouterr()
    logged = "\n".join((caplog.text, out, err))
    assert "this decision is not stored: the store could not be reached" in logged, logged


def test_a_default_decision_of_the_store_launches_its_default_whatever_on_infeasible(
    bellamy_store: Any,
) -> None:
    # runs at one scale-out only: Bellamy.size answers with the default scale-out (feasible=False,
    # no shortfall); on_infeasible is for sizes a model found too slow, not for this one
    bellamy_store.record_run(job_type="wc", framework="spark", scale_out=2, runtime_s=50.0, context=CONTEXT)
    for policy in ("fail", "run-max", "warn"):
        op = _op(default_scale_out=1, on_infeasible=policy, target="10m")
        decision = op.execute(_context(op))
        assert decision["chosen_scale_out"] == 1 and not decision["feasible"], policy
        assert decision["decision_id"] is not None and decision["fallback_reason"]


def test_an_unbounded_band_is_not_short_by_infinity() -> None:
    """A context too far outside the training data has no upper bound at any size: the policy's
    message says so instead of "short by inf s"."""
    from airflow_provider_bellamy.deadlines import RuntimeTarget
    from airflow_provider_bellamy.decisions import Prediction
    from airflow_provider_bellamy.sizing import decide

    inf = math.inf
    prediction = Prediction("wc", [1, 2], [100.0, 60.0], [1.0, 1.0], [inf, inf], 0.9)
    decision = decide(prediction, target_s=50.0)
    assert not decision.feasible and decision.shortfall_s == inf
    op = _op(target=50, on_infeasible="fail", scale_outs=[1, 2])
    target = RuntimeTarget(50.0, "target", dt.datetime.now(dt.UTC), explanation="target 50 s")
    with pytest.raises(InfeasibleTargetError, match="the band has no upper bound") as refused:
        op._apply_infeasible_policy(decision, op.sizing_spec(), target)
    assert "short by inf" not in str(refused.value)


def test_run_likely_where_no_size_is_predicted_to_meet_the_target_launches_as_warn(
    bellamy_store: Any,
) -> None:
    _seed_ernest(bellamy_store)  # 300 / 160 / 90 s at 1 / 2 / 4: nothing is predicted to meet 10 s
    warn = _op(target=10)
    likely = _op(target=10, on_infeasible="run-likely")
    by_warn, by_likely = warn.execute(_context(warn)), likely.execute(_context(likely))
    assert by_likely["chosen_scale_out"] == by_warn["chosen_scale_out"] == 4
    assert by_likely["reason"] == by_warn["reason"] and not by_likely["feasible"]
