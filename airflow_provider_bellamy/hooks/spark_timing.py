"""How long a Spark application ran at the size it was granted, and how long it waited for it.

A standalone master reports an application's duration from its registration; an application
that waited for cores (``Initial job has not accepted any resources``) has that wait in it.
What the runtime model must learn is the time the job ran at the executors it held, so the
timing is split:

``queue_s``
    registration → the first executor granted (no task can run before);
``runtime_s``
    the first executor granted → the application's end; ``queue_s + runtime_s`` is the
    cluster's duration;
``granted``
    the most executors the application held at once (recorded as the run's scale-out).

Executors that arrived in steps (the largest set later than the first executor by more than
``STEP_TOLERANCE`` of the runtime) make a run whose scale-out is neither number: it is kept
with an ``excluded_reason`` and never trained on.

Three sources: a history server's ``/api/v1/applications/<id>/allexecutors`` (executor add
and remove times, exact), samples of the standalone master's ``/json/`` taken while the
application runs (``MasterGrantSampler``; resolution: its poll interval), and the application's
own event log (``timing_from_event_log``: the events the history server reads, exact).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

# A run counts as "at one size" when its largest executor set came within this share of its runtime.
STEP_TOLERANCE = 0.10
MASTER_POLL_INTERVAL_S = 0.5
# Why a cluster-mode run timed only by the wall time around spark-submit is not trained on.
WALL_TIME_IN_CLUSTER_MODE = (
    "runtime is the wall time around spark-submit in cluster deploy mode (the driver's submission, "
    "its wait for a worker and the status polls besides the job); the cluster reported no runtime"
)


@dataclass(frozen=True)
class RunTiming:
    """A finished application's timing, split at the moment it got its executors."""

    duration_s: float
    queue_s: float
    runtime_s: float
    granted: int
    excluded_reason: str | None = None
    source: str = ""


@dataclass(frozen=True)
class ObservedRun:
    """What is recorded for a finished application: its runtime at ``scale_out`` and the wait."""

    runtime_s: float
    source: str
    scale_out: int
    queue_s: float | None = None
    excluded_reason: str | None = None

    @classmethod
    def wall_time(cls, wall_s: float, source: str, scale_out: int, *, cluster_mode: bool) -> ObservedRun:
        """The last source: the wall time around spark-submit, when the cluster reported nothing.
        In cluster deploy mode that time holds the driver's submission, its wait for a worker
        (queued behind other drivers and applications) and the status polls besides the job: kept
        (stored, exported) but out of training (``WALL_TIME_IN_CLUSTER_MODE``), as a run that
        waited in steps for its executors is."""
        return cls(
            runtime_s=wall_s,
            source=source,
            scale_out=scale_out,
            excluded_reason=WALL_TIME_IN_CLUSTER_MODE if cluster_mode else None,
        )

    @classmethod
    def of(cls, duration_s: float, timing: RunTiming | None, source: str, requested: int) -> ObservedRun:
        """The cluster's ``duration_s`` split by ``timing``; without one, the whole duration at
        the ``requested`` size (nothing says it got another)."""
        if timing is None:
            return cls(runtime_s=duration_s, source=source, scale_out=requested)
        return cls(
            runtime_s=timing.runtime_s,
            source=f"{source}; {timing.source}",
            scale_out=timing.granted,
            queue_s=timing.queue_s,
            excluded_reason=timing.excluded_reason,
        )


def timing_from_grants(
    duration_s: float, steps: Sequence[tuple[float, int]], *, source: str
) -> RunTiming | None:
    """``steps``: (seconds after the application started, executors held from then on), in time
    order. None when no executor was ever granted (the caller keeps the plain duration)."""
    held = [(max(0.0, min(offset, duration_s)), n) for offset, n in steps if n > 0]
    if not held:
        return None
    first = held[0][0]
    granted = max(n for _, n in held)
    full = next(offset for offset, n in held if n == granted)
    runtime = max(duration_s - first, 1e-3)
    reason = None
    if full - first > STEP_TOLERANCE * runtime:
        counts = ", ".join(f"{n} at +{offset:.1f} s" for offset, n in _changes(held))
        reason = (
            f"executors arrived in steps ({counts} of a {duration_s:.1f} s application): "
            f"the run was at no single scale-out"
        )
    return RunTiming(
        duration_s=duration_s,
        queue_s=first,
        runtime_s=runtime,
        granted=granted,
        excluded_reason=reason,
        source=source,
    )


def _changes(held: Sequence[tuple[float, int]]) -> list[tuple[float, int]]:
    out: list[tuple[float, int]] = []
    for offset, n in held:
        if not out or out[-1][1] != n:
            out.append((offset, n))
    return out


# -- history server ------------------------------------------------------------------------------


def _history_time(value: Any) -> float | None:
    """A history server timestamp (``2026-11-22T19:00:00.123GMT``) as epoch seconds."""
    if not value:
        return None
    text = str(value).replace("GMT", "+0000")
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def timing_from_history(
    attempt: dict[str, Any], executors: Sequence[dict[str, Any]], executor_cores: int
) -> RunTiming | None:
    """Timing of a completed attempt from its executors' add/remove times."""
    start = _history_time(attempt.get("startTime"))
    end = _history_time(attempt.get("endTime"))
    if start is None or end is None or end <= start:
        return None
    held = [
        ExecutorSpan(
            str(ex.get("id")), added, _history_time(ex.get("removeTime")), int(ex.get("totalCores") or 0)
        )
        for ex in executors
        if (added := _history_time(ex.get("addTime"))) is not None
    ]
    return timing_from_executors(start, end, held, executor_cores, source="history server executor add times")


@dataclass(frozen=True)
class ExecutorSpan:
    """One executor as Spark reports it: added and (maybe) removed, epoch seconds."""

    executor_id: str
    added: float
    removed: float | None
    cores: int


def timing_from_executors(
    start: float, end: float, executors: Sequence[ExecutorSpan], executor_cores: int, *, source: str
) -> RunTiming | None:
    """The split of ``start``..``end`` (epoch seconds) at the executors Spark added and removed:
    what a history server and an event log both report (the same events). The driver is no
    executor, except in local mode, where it is the only one and its cores are the threads the
    job ran on (``local[n]``: n, the scale-out); its addition comes after the SparkContext's own
    start-up, which is then no runtime either. One reported without its cores counts
    ``executor_cores``."""
    remote = [ex for ex in executors if ex.executor_id != "driver"]
    local = [ex for ex in executors if ex.executor_id == "driver" and ex.cores > 0]
    events: list[tuple[float, int]] = []
    if not remote:
        events = [(ex.added - start, ex.cores) for ex in local[:1]]
    for ex in remote:
        cores = ex.cores or executor_cores
        weight = max(1, round(cores / max(executor_cores, 1)))
        events.append((ex.added - start, weight))
        if ex.removed is not None and ex.removed < end:
            events.append((ex.removed - start, -weight))
    events.sort(key=lambda e: (e[0], -e[1]))
    steps: list[tuple[float, int]] = []
    held = 0
    for offset, delta in events:
        held += delta
        steps.append((offset, held))
    return timing_from_grants(end - start, steps, source=source)


# -- event log -----------------------------------------------------------------------------------


class EventLogUnreadableError(ValueError):
    """An event log whose figures cannot be read (partial, not Spark's JSON lines); the message
    names lines and events, never their content (the log holds the application's conf)."""


# Spark's JsonProtocol writes the event name first: a line of the log starts so.
_EVENT_PREFIX = '{"Event":"'
_WANTED = (
    "SparkListenerApplicationStart",
    "SparkListenerApplicationEnd",
    "SparkListenerExecutorAdded",
    "SparkListenerExecutorRemoved",
)


def timing_from_event_log(
    lines: Iterable[str], executor_cores: int, *, app_id: str | None = None
) -> tuple[float, RunTiming | None]:
    """(the application's duration in seconds, its split at the executor grants or None) from the
    JSON lines of a Spark event log: ``SparkListenerApplicationStart``/``End`` timestamps and
    ``SparkListenerExecutorAdded``/``Removed``. The duration is the SparkContext's life, the
    figure a history server reports for the same log.

    Raises ``EventLogUnreadableError`` for a log that is not whole: a line that is no listener
    event (garbage, a line cut off by a killed driver), no start or no end (the driver ended
    without stopping its SparkContext), an end not after the start, or another application's
    log (``app_id``)."""
    start: float | None = None
    end: float | None = None
    added: dict[str, tuple[float, int]] = {}
    removed: dict[str, float] = {}
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line:
            continue
        if not line.startswith(_EVENT_PREFIX):
            raise EventLogUnreadableError(f"line {number} is not a Spark listener event")
        name = line[len(_EVENT_PREFIX) : line.find('"', len(_EVENT_PREFIX))]
        if name not in _WANTED:
            continue
        try:
            event = json.loads(line)
            stamp = float(event["Timestamp"]) / 1000.0
            if not math.isfinite(stamp):
                raise ValueError("not a finite timestamp")
            if name == "SparkListenerApplicationStart":
                if app_id is not None and event.get("App ID") != app_id:
                    raise EventLogUnreadableError(
                        f"line {number}: the log of another application than {app_id}"
                    )
                start = stamp if start is None else start
            elif name == "SparkListenerApplicationEnd":
                end = stamp
            elif name == "SparkListenerExecutorAdded":
                cores = int(event.get("Executor Info", {}).get("Total Cores") or 0)
                added[str(event["Executor ID"])] = (stamp, cores)
            else:
                removed[str(event["Executor ID"])] = stamp
        except EventLogUnreadableError:
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise EventLogUnreadableError(
                f"line {number} ({name}) does not parse ({type(exc).__name__})"
            ) from None
    if start is None:
        raise EventLogUnreadableError("no SparkListenerApplicationStart")
    if end is None:
        raise EventLogUnreadableError(
            "no SparkListenerApplicationEnd: the log is partial (the driver ended without stopping "
            "its SparkContext)"
        )
    if end <= start:
        raise EventLogUnreadableError(f"the application ended {start - end:.3f} s before it started")
    spans = [ExecutorSpan(ex_id, at, removed.get(ex_id), cores) for ex_id, (at, cores) in added.items()]
    timing = timing_from_executors(start, end, spans, executor_cores, source="event log executor add times")
    return end - start, timing


# -- standalone master ---------------------------------------------------------------------------


@dataclass
class MasterGrantSampler:
    """Samples, in a background thread, the cores a standalone master has granted one application.

    ``app_id`` is called on each poll and returns the application's id once known (spark-submit
    logs it at registration); samples start when the master lists that application. Offsets are
    measured on this machine's monotonic clock from the first sample that saw the application,
    so the master's clock never mixes in.
    """

    fetch: Callable[[], dict[str, Any]]
    app_id: Callable[[], str | None]
    executor_cores: int = 1
    interval_s: float = MASTER_POLL_INTERVAL_S
    samples: list[tuple[float, int]] = field(default_factory=list)
    errors: int = 0
    _first_seen: float | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> MasterGrantSampler:
        self._thread = threading.Thread(target=self._loop, name="bellamy-master-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self.interval_s)

    def poll_once(self) -> None:
        app_id = self.app_id()
        if not app_id:
            return
        try:
            status = self.fetch()
            app = next((a for a in status.get("activeapps") or [] if a.get("id") == app_id), None)
            if app is None:
                return
            executors = int(app.get("cores") or 0) // max(self.executor_cores, 1)
        except Exception:  # a missed sample only coarsens the timing (uncaught, it ends the thread)
            self.errors += 1
            return
        now = time.monotonic()
        if self._first_seen is None:
            self._first_seen = now
        self.samples.append((now - self._first_seen, executors))

    def timing(self, duration_s: float) -> RunTiming | None:
        """The split of the application's ``duration_s`` (the master's own figure)."""
        if not self.samples:
            return None
        return timing_from_grants(
            duration_s,
            self.samples,
            source=f"standalone master /json/ samples every {self.interval_s:g} s",
        )
