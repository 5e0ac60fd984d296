"""Deadline-aware runtime targets: turn "must be done by X" into "may run for T seconds".

The arithmetic, for a task that is about to launch a job at ``now``::

    target_s = (deadline - now) - reserve_s

``deadline`` is absolute: given as a datetime (pendulum or aware ``datetime``; a
templated ISO-8601 string is parsed), or recomputed in the task from the DAG's
``DeadlineAlert`` as ``reference + interval``. ``reserve_s`` is the time the tasks
downstream of this one still need after it: a number of seconds / ``timedelta``,
or ``"auto"`` — the longest downstream path, each task costing the given quantile
of its durations in earlier runs (Airflow's task instances, else the store: the
operators' ``_predicted_reserve``; tasks with neither cost ``default_task_reserve_s``
and are named in the explanation). A plain target
(seconds or ``timedelta``) is used as is; the reserve is not subtracted from it.

A deadline already behind ``now`` when the task starts (a late DAG run) is said first
and plainly in the explanation, and ``deadline_passed`` is set.

When ``deadline - now - reserve_s <= 0`` the deadline can no longer be met by any
size: the target is clamped to ``MIN_TARGET_S`` so that sizing reports the launch
as infeasible (``shortfall_s`` set) and the operator's ``on_infeasible`` policy
decides — fail, warn, or run at the largest scale-out.

Which ``DeadlineAlert`` references can be recomputed inside a task
(the task SDK gives a task its DAG run, but no metadata-database session):

* ``DeadlineReference.FIXED_DATETIME(dt)`` — exactly: ``dt + interval``.
* ``DeadlineReference.DAGRUN_LOGICAL_DATE`` — exactly, from the run's logical date;
  a run without a logical date (a manual run triggered with none) cannot.
* ``DeadlineReference.DAGRUN_QUEUED_AT`` — approximately: the task API does not
  expose ``queued_at``, so the run's ``run_after`` is used. ``run_after`` is never
  later than ``queued_at``, so the recomputed deadline is never later than the
  scheduler's: the target errs on the safe (shorter) side by the queueing delay.
* ``DeadlineReference.AVERAGE_RUNTIME(...)`` — cannot: it averages earlier DAG runs'
  durations in the metadata database, which a task cannot query.
* custom references (``@deadline_reference``) — cannot: they evaluate with a
  database session.

Intervals may be a ``timedelta`` or a ``VariableInterval`` (read from the Airflow
Variable, in seconds, at task run time).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_bellamy.exceptions import InvalidInputError

# Smallest runtime target handed to sizing: a deadline already missed still
# produces a decision (infeasible, the candidate most likely to meet it) instead of an invalid target.
MIN_TARGET_S = 0.001


class DeadlineNotRecomputableError(InvalidInputError):
    """The DAG's DeadlineAlert uses a reference that a running task cannot evaluate."""


@dataclass(frozen=True)
class RuntimeTarget:
    """How a runtime target was obtained, kept with the decision for auditing."""

    target_s: float | None
    source: str  # "none" | "target" | "deadline" | "dag_deadline"
    now: dt.datetime
    deadline: dt.datetime | None = None
    reserve_s: float = 0.0
    remaining_s: float | None = None
    missed_by_s: float | None = None
    unknown_reserve_tasks: list[str] = field(default_factory=list)
    # task id -> where its share of the reserve came from ("12.3 s: p90 of 4 Airflow task instances")
    reserve_sources: dict[str, str] = field(default_factory=dict)
    # the deadline was already behind ``now`` when the task started (a late or re-run DAG run)
    deadline_passed: bool = False
    explanation: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "target_s": self.target_s,
            "source": self.source,
            "now": self.now.isoformat(),
            "deadline": self.deadline.isoformat() if self.deadline else None,
            "reserve_s": self.reserve_s,
            "remaining_s": self.remaining_s,
            "missed_by_s": self.missed_by_s,
            "unknown_reserve_tasks": list(self.unknown_reserve_tasks),
            "reserve_sources": dict(self.reserve_sources),
            "deadline_passed": self.deadline_passed,
            "explanation": self.explanation,
        }


def utcnow() -> dt.datetime:
    """The current time, timezone-aware (frozen by time-machine in tests)."""
    return dt.datetime.now(dt.timezone.utc)


def to_seconds(value: Any, field: str, *, allow_zero: bool = False) -> float:
    """Seconds from a number, a ``timedelta`` or text (``"90"``, ``"15m"``: templates render text)."""
    from airflow_provider_bellamy.spec import parse_duration

    return parse_duration(value, field, allow_zero=allow_zero)


def parse_deadline(value: Any, field: str = "deadline") -> dt.datetime:
    """An aware datetime from a datetime/pendulum value or an ISO-8601 string (rendered template).

    A naive datetime is refused: a deadline without a timezone is ambiguous by hours.
    """
    if isinstance(value, dt.datetime):
        parsed = value
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            raise InvalidInputError(
                field, value, "must be an ISO-8601 datetime with a timezone, e.g. 2025-01-01T06:00:00+00:00"
            ) from None
    else:
        raise InvalidInputError(field, value, "must be a timezone-aware datetime or an ISO-8601 string")
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise InvalidInputError(field, value, "has no timezone; give an aware datetime (e.g. pendulum, UTC)")
    return parsed


def _interval_seconds(interval: Any, where: str) -> dt.timedelta:
    if isinstance(interval, dt.timedelta):
        return interval
    key = getattr(interval, "key", None)
    if key is not None:  # VariableInterval: resolved when the task runs, as the scheduler would
        from airflow.sdk import Variable

        raw = Variable.get(key)
        return dt.timedelta(seconds=to_seconds(raw, f"{where}.interval (Variable {key!r})", allow_zero=True))
    raise DeadlineNotRecomputableError(
        f"{where}.interval", interval, "is neither a timedelta nor a VariableInterval"
    )


def _context_get(context: Mapping[str, Any], name: str) -> Any:
    value = context.get(name)
    if value is None and context.get("dag_run") is not None:
        value = getattr(context["dag_run"], name, None)
    return value


def deadline_from_alert(
    alert: Any, context: Mapping[str, Any], *, where: str = "DeadlineAlert"
) -> dt.datetime:
    """Recompute ``reference + interval`` for one ``DeadlineAlert`` inside a running task.

    Raises ``DeadlineNotRecomputableError`` for references the task cannot evaluate
    (see the module docstring).
    """
    reference = alert.reference
    name = type(reference).__name__
    interval = _interval_seconds(alert.interval, where)
    if name == "FixedDatetimeDeadline":
        base = reference._datetime
    elif name == "DagRunLogicalDateDeadline":
        base = _context_get(context, "logical_date")
        if base is None:
            raise DeadlineNotRecomputableError(
                f"{where}.reference", "DAGRUN_LOGICAL_DATE", "this DAG run has no logical date"
            )
    elif name == "DagRunQueuedAtDeadline":
        # queued_at is not part of the task's view of the run; run_after <= queued_at,
        # so the deadline recomputed from it is never later than the scheduler's.
        dag_run = context.get("dag_run")
        base = getattr(dag_run, "run_after", None) if dag_run is not None else None
        if base is None:
            raise DeadlineNotRecomputableError(
                f"{where}.reference", "DAGRUN_QUEUED_AT", "the DAG run's run_after is not available"
            )
    elif name == "AverageRuntimeDeadline":
        raise DeadlineNotRecomputableError(
            f"{where}.reference",
            "AVERAGE_RUNTIME",
            "averages earlier DAG runs in the metadata database, which a task cannot query; "
            "give the operator `deadline=` or `target=` instead",
        )
    else:
        raise DeadlineNotRecomputableError(
            f"{where}.reference",
            name,
            "custom deadline references evaluate with a database session and cannot be recomputed "
            "in a task; give the operator `deadline=` or `target=` instead",
        )
    return parse_deadline(base, f"{where}.reference") + interval


def dag_deadline(dag: Any, context: Mapping[str, Any], *, alert_name: str | None = None) -> dt.datetime:
    """The deadline of the DAG's ``DeadlineAlert`` (the earliest one, or the one named ``alert_name``)."""
    alerts = getattr(dag, "deadline", None) or []
    if not isinstance(alerts, (list, tuple)):
        alerts = [alerts]
    dag_id = getattr(dag, "dag_id", "?")
    if alert_name is not None:
        alerts = [a for a in alerts if getattr(a, "name", None) == alert_name]
        if not alerts:
            raise InvalidInputError(
                "deadline_alert_name", alert_name, f"DAG {dag_id!r} has no DeadlineAlert of that name"
            )
    if not alerts:
        raise InvalidInputError(
            "use_dag_deadline", True, f"DAG {dag_id!r} declares no DeadlineAlert (DAG(deadline=...))"
        )
    deadlines: list[dt.datetime] = []
    errors: list[DeadlineNotRecomputableError] = []
    for i, alert in enumerate(alerts):
        try:
            deadlines.append(deadline_from_alert(alert, context, where=f"DAG {dag_id!r} deadline[{i}]"))
        except DeadlineNotRecomputableError as exc:
            errors.append(exc)
    if not deadlines:
        raise errors[0]
    return min(deadlines)


def nearest_rank(values: Sequence[float], quantile: float) -> float:
    """The nearest-rank ``quantile`` of ``values`` (not empty): with few values it returns an
    observed one, never an extrapolation."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(quantile * len(ordered))))
    return float(ordered[rank - 1])


def downstream_reserve(
    task_id: str,
    downstream: Callable[[str], Sequence[str]],
    duration_of: Callable[[str], float | None],
    *,
    default_task_reserve_s: float = 0.0,
) -> tuple[float, list[str]]:
    """Seconds the tasks after ``task_id`` still need: the longest path through them.

    ``downstream(t)`` lists the direct downstream task ids of ``t``;
    ``duration_of(t)`` is a task's expected duration, or None when nothing is
    recorded for it (it then costs ``default_task_reserve_s``). Returns the reserve
    and the tasks that had no recorded duration.
    """
    memo: dict[str, float] = {}
    unknown: set[str] = set()

    def cost(t: str) -> float:
        d = duration_of(t)
        if d is None:
            unknown.add(t)
            return default_task_reserve_s
        return float(d)

    def longest_from(t: str, stack: frozenset[str]) -> float:
        # Longest path of the tasks strictly after t (DAGs are acyclic; the stack guards anyway).
        if t in memo:
            return memo[t]
        best = 0.0
        for child in downstream(t):
            if child in stack:
                continue
            best = max(best, cost(child) + longest_from(child, stack | {child}))
        memo[t] = best
        return best

    total = longest_from(task_id, frozenset({task_id}))
    return total, sorted(unknown)


def runtime_target(
    *,
    target: Any = None,
    deadline: Any = None,
    dag_deadline_at: dt.datetime | None = None,
    reserve_s: float = 0.0,
    unknown_reserve_tasks: Sequence[str] = (),
    reserve_sources: Mapping[str, str] | None = None,
    now: dt.datetime | None = None,
) -> RuntimeTarget:
    """Resolve exactly one of ``target`` / ``deadline`` / ``dag_deadline_at`` into seconds.

    ``target`` wins over deadlines only when they are not both given: giving two is
    an error, since the user's intent is then ambiguous.
    """
    now = now or utcnow()
    given = [
        n for n, v in (("target", target), ("deadline", deadline), ("dag deadline", dag_deadline_at)) if v
    ]
    if len(given) > 1:
        raise InvalidInputError(
            "target", target, f"give only one of target, deadline, use_dag_deadline (got {given})"
        )
    if target is not None and target != "":
        seconds = to_seconds(target, "target")
        return RuntimeTarget(seconds, "target", now, explanation=f"target {seconds:.1f} s given")
    if deadline is not None and deadline != "":
        at, source = parse_deadline(deadline, "deadline"), "deadline"
    elif dag_deadline_at is not None:
        at, source = dag_deadline_at, "dag_deadline"
    else:
        return RuntimeTarget(None, "none", now, explanation="no target or deadline: sizing by objective only")
    reserve_s = to_seconds(reserve_s, "reserve", allow_zero=True)
    remaining = (at - now).total_seconds()
    target_s = remaining - reserve_s
    text = (
        f"deadline {at.isoformat()} − now {now.isoformat()} = {remaining:.1f} s; "
        f"− reserve {reserve_s:.1f} s = {target_s:.1f} s"
    )
    if reserve_sources:
        text += " (reserve: " + "; ".join(f"{t} {why}" for t, why in sorted(reserve_sources.items())) + ")"
    elif unknown_reserve_tasks:
        text += f" (no recorded duration for {', '.join(unknown_reserve_tasks)})"
    missed = None
    passed = remaining <= 0
    if passed:
        # Said first and plainly: a DAG run that started late (unpaused after its schedule,
        # a backlog, a re-run) cannot meet a deadline that was over before it began.
        text = (
            f"the deadline {at.isoformat()} had already passed when this task started "
            f"({_duration_text(-remaining)} before now {now.isoformat()}): no size can meet it; {text}"
        )
    if target_s < MIN_TARGET_S:
        missed = -target_s
        if not passed:
            text += f"; the deadline cannot be met by any size (short by {missed:.1f} s)"
        target_s = MIN_TARGET_S
    return RuntimeTarget(
        target_s,
        source,
        now,
        deadline=at,
        reserve_s=reserve_s,
        remaining_s=remaining,
        missed_by_s=missed,
        unknown_reserve_tasks=list(unknown_reserve_tasks),
        reserve_sources=dict(reserve_sources or {}),
        deadline_passed=passed,
        explanation=text,
    )


def _duration_text(seconds: float) -> str:
    """``12 h 12 min`` / ``4 min 5 s`` / ``42.0 s``: a lateness a reader takes in at a glance."""
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f"{days} d {hours} h {minutes} min"
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s"
