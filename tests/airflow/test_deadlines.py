"""Deadline arithmetic with frozen time: target = deadline − now − reserve."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pendulum
import pytest
import time_machine
from airflow.sdk import DAG, DeadlineAlert, DeadlineReference, SyncCallback
from airflow.sdk.definitions.deadline import VariableInterval

from airflow_provider_bellamy import deadlines
from airflow_provider_bellamy.deadlines import MIN_TARGET_S, DeadlineNotRecomputableError, runtime_target
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.operators.sizing import BellamySizingOperator

NOW = dt.datetime(2025, 3, 1, 5, 0, 0, tzinfo=dt.timezone.utc)
CB = SyncCallback("builtins.print")


def alert(reference, minutes: float, name: str | None = None) -> DeadlineAlert:
    return DeadlineAlert(reference=reference, interval=dt.timedelta(minutes=minutes), callback=CB, name=name)


@time_machine.travel(NOW, tick=False)
def test_absolute_deadline_minus_now_minus_reserve() -> None:
    t = runtime_target(deadline=pendulum.datetime(2025, 3, 1, 6, 0, tz="UTC"), reserve_s=600)
    assert t.source == "deadline"
    assert t.remaining_s == 3600
    assert t.target_s == 3000
    assert "3600.0 s" in t.explanation and "3000.0 s" in t.explanation


@time_machine.travel(NOW, tick=False)
def test_templated_iso_string_and_other_timezone() -> None:
    # 07:30 in UTC+2 is 05:30 UTC: 1800 s left
    t = runtime_target(deadline="2025-03-01T07:30:00+02:00")
    assert t.target_s == 1800


@time_machine.travel(NOW, tick=False)
def test_time_passes_between_calls() -> None:
    first = runtime_target(deadline="2025-03-01T06:00:00Z").target_s
    with time_machine.travel(NOW + dt.timedelta(minutes=20), tick=False):
        later = runtime_target(deadline="2025-03-01T06:00:00Z").target_s
    assert first - later == 1200


def test_plain_target_ignores_reserve_and_accepts_timedelta() -> None:
    assert runtime_target(target=dt.timedelta(minutes=2), reserve_s=50).target_s == 120
    assert runtime_target(target="90").target_s == 90
    assert runtime_target().target_s is None


@time_machine.travel(NOW, tick=False)
def test_missed_deadline_is_clamped_and_reported() -> None:
    t = runtime_target(deadline=NOW + dt.timedelta(seconds=100), reserve_s=160)
    assert t.target_s == MIN_TARGET_S
    assert t.missed_by_s == pytest.approx(60)
    assert "cannot be met" in t.explanation


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"deadline": dt.datetime(2025, 3, 1, 6, 0)}, "deadline"),  # naive
        ({"deadline": "tomorrow"}, "deadline"),
        ({"target": -5}, "target"),
        ({"target": "soon"}, "target"),
        ({"target": 10, "deadline": "2025-03-01T06:00:00Z"}, "target"),
        ({"deadline": "2025-03-01T06:00:00Z", "reserve_s": -1}, "reserve"),
    ],
)
def test_bad_inputs_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        runtime_target(now=NOW, **kwargs)
    assert err.value.field == field


def _ctx(logical_date=NOW, run_after=NOW) -> dict:
    return {
        "logical_date": logical_date,
        "dag_run": SimpleNamespace(logical_date=logical_date, run_after=run_after),
    }


def test_recomputable_references() -> None:
    fixed = alert(DeadlineReference.FIXED_DATETIME(dt.datetime(2025, 3, 1, 7, tzinfo=dt.timezone.utc)), 30)
    assert deadlines.deadline_from_alert(fixed, {}) == dt.datetime(2025, 3, 1, 7, 30, tzinfo=dt.timezone.utc)
    logical = alert(DeadlineReference.DAGRUN_LOGICAL_DATE, 90)
    assert deadlines.deadline_from_alert(logical, _ctx()) == NOW + dt.timedelta(minutes=90)
    queued = alert(DeadlineReference.DAGRUN_QUEUED_AT, 10)
    run_after = NOW + dt.timedelta(minutes=3)
    assert deadlines.deadline_from_alert(queued, _ctx(run_after=run_after)) == run_after + dt.timedelta(
        minutes=10
    )


def test_references_that_cannot_be_recomputed() -> None:
    with pytest.raises(DeadlineNotRecomputableError, match="AVERAGE_RUNTIME"):
        deadlines.deadline_from_alert(alert(DeadlineReference.AVERAGE_RUNTIME(5), 10), _ctx())
    with pytest.raises(DeadlineNotRecomputableError, match="no logical date"):
        deadlines.deadline_from_alert(
            alert(DeadlineReference.DAGRUN_LOGICAL_DATE, 10), _ctx(logical_date=None)
        )


def test_variable_interval_is_read_at_run_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW_VAR_BELLAMY_TEST_SLA", "1800")
    a = DeadlineAlert(
        reference=DeadlineReference.DAGRUN_LOGICAL_DATE,
        interval=VariableInterval("bellamy_test_sla"),
        callback=CB,
    )
    assert deadlines.deadline_from_alert(a, _ctx()) == NOW + dt.timedelta(seconds=1800)


def test_dag_deadline_takes_earliest_recomputable_or_named() -> None:
    dag = DAG(
        "dl",
        schedule=None,
        deadline=[
            alert(DeadlineReference.AVERAGE_RUNTIME(5), 1),
            alert(DeadlineReference.DAGRUN_LOGICAL_DATE, 60, name="sla"),
            alert(DeadlineReference.DAGRUN_LOGICAL_DATE, 45, name="early"),
        ],
    )
    assert deadlines.dag_deadline(dag, _ctx()) == NOW + dt.timedelta(minutes=45)
    assert deadlines.dag_deadline(dag, _ctx(), alert_name="sla") == NOW + dt.timedelta(minutes=60)
    with pytest.raises(InvalidInputError, match="no DeadlineAlert of that name"):
        deadlines.dag_deadline(dag, _ctx(), alert_name="nope")
    with pytest.raises(InvalidInputError, match="declares no DeadlineAlert"):
        deadlines.dag_deadline(DAG("none", schedule=None), _ctx())


def test_downstream_reserve_is_the_longest_path() -> None:
    #        ┌─ b (100) ─ d (50) ┐
    #  a ────┤                   ├─ f (10)
    #        └─ c (30) ─ e (?) ──┘
    graph = {"a": ["b", "c"], "b": ["d"], "c": ["e"], "d": ["f"], "e": ["f"], "f": []}
    durations = {"b": 100.0, "c": 30.0, "d": 50.0, "f": 10.0}
    reserve, unknown = deadlines.downstream_reserve(
        "a", graph.__getitem__, durations.get, default_task_reserve_s=200.0
    )
    assert unknown == ["e"]
    assert reserve == 30 + 200 + 10  # the unknown task's default makes the lower path the longest
    reserve, _ = deadlines.downstream_reserve("a", graph.__getitem__, durations.get)
    assert reserve == 100 + 50 + 10


@time_machine.travel(NOW, tick=False)
def test_operator_recomputes_the_dag_deadline_alert_in_the_task() -> None:
    with DAG(
        "sla_dag",
        schedule=None,
        deadline=alert(DeadlineReference.DAGRUN_LOGICAL_DATE, 60),
    ) as dag:
        op = BellamySizingOperator(
            task_id="size",
            job_type="grep",
            scale_outs=[1, 2],
            use_dag_deadline=True,
            reserve=dt.timedelta(minutes=5),
        )
    logical = NOW - dt.timedelta(minutes=20)  # the run started 20 min ago: 40 min left, 35 after reserve
    t = op.resolve_target({**_ctx(logical_date=logical), "dag": dag, "task": op})
    assert t.source == "dag_deadline"
    assert t.target_s == 35 * 60
    assert t.deadline == NOW + dt.timedelta(minutes=40)


@time_machine.travel(NOW, tick=False)
def test_a_deadline_already_past_when_the_task_starts_is_said_plainly() -> None:
    # a scheduled run started 12 h after its run_after (the DAG was unpaused late)
    run_after = NOW - dt.timedelta(hours=12, minutes=12, seconds=22)
    t = runtime_target(deadline=run_after + dt.timedelta(minutes=15), reserve_s=30)
    assert t.deadline_passed and t.target_s == MIN_TARGET_S
    assert t.explanation.startswith(
        "the deadline 2025-02-28T17:02:38+00:00 had already passed when this task started "
        "(11 h 57 min before now 2025-03-01T05:00:00+00:00): no size can meet it"
    )
    assert t.to_dict()["deadline_passed"] is True
    # still ahead, but not far enough for the reserve: not "already passed"
    soon = runtime_target(deadline=NOW + dt.timedelta(seconds=10), reserve_s=30)
    assert not soon.deadline_passed and "already passed" not in soon.explanation
    assert "cannot be met by any size (short by 20.0 s)" in soon.explanation
