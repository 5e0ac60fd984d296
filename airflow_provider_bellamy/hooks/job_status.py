"""The status of a submitted cluster job, from its REST/JSON endpoint: the protocol, sans I/O.

One status protocol serves three sources, each a plain REST/JSON endpoint:

``flink``
    the JobManager REST API: ``GET /jobs/<id>`` (state, duration, vertices) and, for a job
    that failed, ``GET /jobs/<id>/exceptions`` (Flink's failure cause);
``spark-master``
    a Spark standalone master's ``GET /json/``: an application id (``app-…``) is looked up in
    ``activeapps``/``completedapps``, a driver id (``driver-…``, cluster deploy mode) in
    ``activedrivers``/``completeddrivers``;
``spark-history``
    a Spark history server's ``GET /api/v1/applications/<id>``.

The requests to make and the parsing are written once, as generators that yield the paths
they need and receive the answers (HTTP status, decoded JSON). ``hooks.job.JobStatusHook``
drives them, blocking (operators, sensors in poke mode) or on asyncio (``BellamyJobTrigger``),
so every mode agrees on every state and duration. Nothing here opens a connection.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Generator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_provider_bellamy.exceptions import (
    InvalidInputError,
    JobAnswerUnparsedError,
    JobEndpointUnreachableError,
    UnknownJobIdError,
)

JOB_KINDS: tuple[str, ...] = ("flink", "spark-master", "spark-history")
SPARK_APP_TERMINAL = frozenset({"FINISHED", "FAILED", "KILLED"})
SPARK_DRIVER_TERMINAL = frozenset({"FINISHED", "FAILED", "KILLED", "ERROR"})

# Globally terminal states: the job will not change any more. SUSPENDED is not among them.
FLINK_TERMINAL_STATES: frozenset[str] = frozenset({"FINISHED", "FAILED", "CANCELED"})
FLINK_JOB_ID_RE = re.compile(r"^[0-9a-fA-F]{32}$")

# A generator step: yields a path to GET, receives (HTTP status, decoded JSON or None).
Response = tuple[int, Any]
Steps = Generator[str, Response, Any]
StatusSteps = Generator[str, Response, "JobStatus"]


@dataclass(frozen=True)
class FlinkJob:
    """What the JobManager reports about one job (``GET /jobs/<id>``)."""

    job_id: str
    name: str
    state: str
    start_time_ms: int
    end_time_ms: int
    duration_ms: int
    vertex_parallelism: dict[str, int] = field(default_factory=dict)
    job_type: str | None = None
    # When the job switched to RUNNING (``timestamps.RUNNING``): before it, it was queued.
    running_time_ms: int | None = None
    # Fields of the answer that did not parse (read as not reported), e.g. ``duration='n/a'``.
    unreadable: tuple[str, ...] = ()
    # False when neither ``duration`` nor end-time − start-time could be read.
    duration_known: bool = True

    @property
    def terminal(self) -> bool:
        return self.state in FLINK_TERMINAL_STATES

    @property
    def succeeded(self) -> bool:
        return self.state == "FINISHED"

    @property
    def parallelism(self) -> int | None:
        """The largest vertex parallelism: what ``-p`` sets (sources may be capped lower)."""
        values = [p for p in self.vertex_parallelism.values() if p > 0]
        return max(values) if values else None

    @property
    def queue_ms(self) -> int | None:
        """Milliseconds from the job's start (submission) until it was RUNNING."""
        if self.running_time_ms is None or self.start_time_ms <= 0:
            return None
        return max(0, self.running_time_ms - self.start_time_ms)

    @property
    def runtime_s(self) -> float:
        """The time the job ran, in seconds to the millisecond: RUNNING → its end, as Flink
        measured it (its whole duration when Flink reports no RUNNING time)."""
        queue = self.queue_ms
        if queue is None or not self.terminal:
            return self.duration_ms / 1000
        return max(0, self.duration_ms - queue) / 1000

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["parallelism"] = self.parallelism
        return data


def validate_job_id(job_id: Any) -> str:
    if not isinstance(job_id, str) or not FLINK_JOB_ID_RE.match(job_id.strip()):
        raise InvalidInputError("job_id", job_id, "a Flink job id is 32 hexadecimal characters")
    return job_id.strip().lower()


def parse_flink_job(payload: Mapping[str, Any]) -> FlinkJob:
    """A ``GET /jobs/<id>`` answer as a :class:`FlinkJob`.

    A timing or parallelism field that does not parse is read as not reported and named in
    ``unreadable``: the job's state is what a wait needs, and a job that finished must not fail
    its task (nor, on a retry, be waited for again) over one malformed figure."""
    unreadable: list[str] = []

    def number(source: Mapping[str, Any], key: str) -> int | None:
        value = source.get(key)
        if value is None or value == "":
            return None
        try:
            return int(value)
        except (TypeError, ValueError, OverflowError):
            unreadable.append(f"{key}={str(value)[:40]!r}")
            return None

    vertices: dict[str, int] = {}
    for vertex in payload.get("vertices") or []:
        if isinstance(vertex, Mapping):
            name = str(vertex.get("name") or vertex.get("id"))
            vertices[name] = number(vertex, "parallelism") or 0
    timestamps = payload.get("timestamps")
    start = number(payload, "start-time") or 0
    end = number(payload, "end-time")
    end = -1 if end is None else end
    duration = number(payload, "duration")
    duration_known = True
    if duration is None:
        # unreadable or not reported: Flink's duration is end-time − start-time for an ended job
        # (a missing one read as 0 stored a finished job as a 1 ms run)
        duration_known = start > 0 and end > start
        duration = end - start if duration_known else 0
    return FlinkJob(
        job_id=str(payload.get("jid")),
        name=str(payload.get("name", "")),
        state=str(payload.get("state", "UNKNOWN")),
        start_time_ms=start,
        end_time_ms=end,
        duration_ms=duration,
        vertex_parallelism=vertices,
        job_type=payload.get("job-type"),
        running_time_ms=(number(timestamps, "RUNNING") if isinstance(timestamps, Mapping) else None) or None,
        unreadable=tuple(unreadable),
        duration_known=duration_known,
    )


def summarize_flink_exceptions(payload: Mapping[str, Any], *, limit: int = 4000) -> str:
    """Flink's failure cause from ``GET /jobs/<id>/exceptions``, readable in a task log.

    The root entry is often a wrapper ("Recovery is suppressed by ..."): the real cause is in
    its ``Caused by:`` chain and in the task failures listed as concurrent exceptions, so all of
    those lines are kept and the stack frames dropped.
    """
    lines: list[str] = []

    def add_trace(trace: str | None, task: str | None = None) -> None:
        if not trace:
            return
        kept = [ln.strip() for ln in trace.splitlines() if ln.strip() and not ln.strip().startswith("at ")]
        kept = [ln for ln in kept if not ln.startswith("...")]
        if not kept:
            return
        head = kept[0] if task is None else f"{kept[0]} (in task {task})"
        for line in [head, *[ln for ln in kept[1:] if ln.startswith("Caused by:")]]:
            if line not in lines:
                lines.append(line)

    history = (payload.get("exceptionHistory") or {}).get("entries") or []
    for entry in history:
        add_trace(entry.get("stacktrace") or entry.get("exceptionName"), entry.get("taskName"))
        for concurrent in entry.get("concurrentExceptions") or []:
            add_trace(
                concurrent.get("stacktrace") or concurrent.get("exceptionName"), concurrent.get("taskName")
            )
    if not lines:
        # Flink < 1.20 still reports the older fields.
        add_trace(payload.get("root-exception"))
        for item in payload.get("all-exceptions") or []:
            add_trace(item.get("exception"), item.get("task"))
    text = "\n".join(lines) if lines else "Flink reported no exception for this job"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class JobStatus:
    """One job's state as its cluster reports it; JSON-serialisable for trigger events."""

    kind: str
    job_id: str
    state: str
    terminal: bool
    succeeded: bool
    start_time_ms: int | None = None
    end_time_ms: int | None = None
    duration_ms: int | None = None
    parallelism: int | None = None
    name: str | None = None
    cause: str | None = None
    # When the job had its resources and ran (Flink: RUNNING); None when the cluster does not say.
    running_time_ms: int | None = None
    # What the cluster answered that did not parse (read as not reported), for the log.
    unreadable: str | None = None

    @property
    def queue_s(self) -> float | None:
        """Seconds from the job's start until it ran (waiting for slots/executors), when known."""
        if self.running_time_ms is None or self.start_time_ms is None:
            return None
        return max(0, self.running_time_ms - self.start_time_ms) / 1000

    @property
    def runtime_s(self) -> float | None:
        """The time the job ran, in seconds to the millisecond: the cluster's duration less the
        queueing before it ran (``queue_s``); None when the cluster gave no duration."""
        if self.duration_ms is None:
            return None
        queued_ms = (
            0
            if self.running_time_ms is None or self.start_time_ms is None
            else (max(0, self.running_time_ms - self.start_time_ms))
        )
        return max(0, self.duration_ms - queued_ms) / 1000

    @property
    def started_at(self) -> dt.datetime | None:
        return _ms_to_datetime(self.start_time_ms)

    @property
    def ended_at(self) -> dt.datetime | None:
        return _ms_to_datetime(self.end_time_ms)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobStatus:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})


def _ms_to_datetime(value: int | None) -> dt.datetime | None:
    if value is None or value <= 0:
        return None
    return dt.datetime.fromtimestamp(value / 1000, tz=dt.timezone.utc)


def validate_kind(kind: Any) -> str:
    if kind not in JOB_KINDS:
        raise InvalidInputError("kind", kind, f"must be one of {list(JOB_KINDS)}")
    return str(kind)


def validate_endpoint(endpoint: Any, field: str = "endpoint") -> str:
    if not isinstance(endpoint, str) or not endpoint.startswith(("http://", "https://")):
        raise InvalidInputError(field, endpoint, "must be an http(s) URL of the REST endpoint")
    return endpoint.rstrip("/")


def validate_spark_id(job_id: Any) -> str:
    if not isinstance(job_id, str) or not job_id.strip() or any(c in job_id for c in "/?#% "):
        raise InvalidInputError("job_id", job_id, "a Spark application or driver id (app-…/driver-…)")
    return job_id.strip()


# -- status steps (sans I/O) ---------------------------------------------------------------------


def flink_job_steps(job_id: str, where: str) -> Generator[str, Response, FlinkJob | None]:
    """The job as the JobManager reports it; None when it does not know the id."""
    code, body = yield f"/jobs/{job_id}"
    if code == 404:
        return None
    _expect_ok(code, body, where, f"/jobs/{job_id}")
    return parse_flink_job(body)


def flink_status_steps(job_id: str, where: str) -> StatusSteps:
    job = yield from flink_job_steps(job_id, where)
    if job is None:
        raise UnknownJobIdError(job_id, where)
    cause = None
    if job.state in FLINK_TERMINAL_STATES and job.state != "FINISHED":
        code, body = yield f"/jobs/{job_id}/exceptions"
        cause = summarize_flink_exceptions(body) if code == 200 and isinstance(body, dict) else None
        if job.state == "CANCELED" and (cause is None or cause.startswith("Flink reported no exception")):
            cause = "the job was cancelled"
    return JobStatus(
        kind="flink",
        job_id=job.job_id,
        state=job.state,
        terminal=job.terminal,
        succeeded=job.succeeded,
        start_time_ms=job.start_time_ms or None,
        end_time_ms=job.end_time_ms if job.end_time_ms > 0 else None,
        duration_ms=job.duration_ms if job.terminal and job.duration_known else None,
        parallelism=job.parallelism,
        name=job.name,
        cause=cause,
        running_time_ms=job.running_time_ms if job.start_time_ms else None,
        unreadable=", ".join(job.unreadable) or None,
    )


def spark_master_status_steps(job_id: str, where: str) -> StatusSteps:
    code, body = yield "/json/"
    _expect_ok(code, body, where, "/json/")
    if job_id.startswith("driver-"):
        for section in ("activedrivers", "completeddrivers"):
            for driver in body.get(section) or []:
                if driver.get("id") == job_id:
                    return _spark_driver_status(driver, body)
    else:
        for section in ("activeapps", "completedapps"):
            for app in body.get(section) or []:
                if app.get("id") == job_id:
                    return _spark_app_status(app)
    raise UnknownJobIdError(job_id, where)


def _spark_app_status(app: dict[str, Any]) -> JobStatus:
    state = str(app.get("state", "UNKNOWN"))
    terminal = state in SPARK_APP_TERMINAL
    start = int(app.get("starttime") or 0) or None
    duration = int(app.get("duration") or 0) if terminal else None
    return JobStatus(
        kind="spark-master",
        job_id=str(app.get("id")),
        state=state,
        terminal=terminal,
        succeeded=state == "FINISHED",
        start_time_ms=start,
        end_time_ms=start + duration if start is not None and duration is not None else None,
        duration_ms=duration,
        parallelism=int(app["cores"]) if app.get("cores") is not None else None,
        name=app.get("name"),
        cause=None if state in ("FINISHED", "RUNNING", "WAITING") else f"the application ended {state}",
    )


def _spark_driver_status(driver: dict[str, Any], master: dict[str, Any]) -> JobStatus:
    """A cluster-mode driver. The master JSON does not link drivers to the application they start,
    so the duration is the driver's own application, found as the one application that started
    after the driver and ran on this master; without a unique match no duration is given."""
    state = str(driver.get("state", "UNKNOWN"))
    terminal = state in SPARK_DRIVER_TERMINAL
    start = int(driver.get("starttime") or 0) or None
    app_status: JobStatus | None = None
    if terminal and start is not None:
        candidates = [
            a
            for a in master.get("completedapps") or []
            if int(a.get("starttime") or 0) >= start and a.get("state") in SPARK_APP_TERMINAL
        ]
        main_class = str(driver.get("mainclass") or "")
        named = [a for a in candidates if main_class and str(a.get("name", "")) in main_class]
        pick = named if len(named) == 1 else candidates
        if len(pick) == 1:
            app_status = _spark_app_status(pick[0])
    return JobStatus(
        kind="spark-master",
        job_id=str(driver.get("id")),
        state=state,
        terminal=terminal,
        succeeded=state == "FINISHED" and (app_status is None or app_status.succeeded),
        start_time_ms=app_status.start_time_ms if app_status else start,
        end_time_ms=app_status.end_time_ms if app_status else None,
        duration_ms=app_status.duration_ms if app_status else None,
        parallelism=app_status.parallelism if app_status else None,
        name=app_status.name if app_status else str(driver.get("mainclass") or "") or None,
        cause=None
        if state in ("FINISHED", "RUNNING", "SUBMITTED", "RELAUNCHING")
        else f"the driver ended {state}",
    )


def spark_history_status_steps(job_id: str, where: str) -> StatusSteps:
    code, body = yield f"/api/v1/applications/{job_id}"
    if code == 404:
        raise UnknownJobIdError(job_id, where)
    _expect_ok(code, body, where, f"/api/v1/applications/{job_id}")
    attempts = body.get("attempts") or []
    if not attempts:
        return JobStatus("spark-history", job_id, "UNKNOWN", False, False, name=body.get("name"))
    last = attempts[-1]
    completed = bool(last.get("completed"))
    start = _history_ms(last, "startTime")
    end = _history_ms(last, "endTime") if completed else None
    duration = int(last["duration"]) if completed and last.get("duration") is not None else None
    # The history server does not report success; an application that completed is FINISHED.
    return JobStatus(
        kind="spark-history",
        job_id=job_id,
        state="FINISHED" if completed else "RUNNING",
        terminal=completed,
        succeeded=completed,
        start_time_ms=start,
        end_time_ms=end,
        duration_ms=duration,
        parallelism=body.get("cores_granted") or body.get("coresGranted"),
        name=body.get("name"),
    )


def _history_ms(attempt: dict[str, Any], key: str) -> int | None:
    epoch = attempt.get(f"{key}Epoch")
    if epoch is not None:
        return int(epoch)
    text = attempt.get(key)
    if not text:
        return None
    parsed = dt.datetime.strptime(str(text).replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
    return int(parsed.timestamp() * 1000)


def spark_master_completed_app_steps(
    app_id: str | None, name: str | None, where: str
) -> Generator[str, Response, dict[str, Any] | None]:
    """A finished application's entry in the master's ``completedapps`` (``duration`` in ms), by
    id, else by name; None while the master does not list it there with a duration yet."""
    code, body = yield "/json/"
    _expect_ok(code, body, where, "/json/")
    for app in body.get("completedapps") or []:
        match = app.get("id") == app_id if app_id else app.get("name") == name
        if match and app.get("duration"):
            return dict(app)
    return None


def spark_history_attempt_steps(
    app_id: str, where: str
) -> Generator[str, Response, tuple[dict[str, Any], list[dict[str, Any]]] | None]:
    """(the last completed attempt, the application's executors) from a history server; None
    while it has not picked the application's event log up (it does on its next scan)."""
    path = f"/api/v1/applications/{validate_spark_id(app_id)}"
    code, body = yield path
    if code == 404:
        return None
    _expect_ok(code, body, where, path)
    done = [a for a in body.get("attempts") or [] if a.get("completed") and a.get("duration")]
    if not done:
        return None
    code, executors = yield f"{path}/allexecutors"
    if code != 200:
        raise JobEndpointUnreachableError(
            where, f"GET {path}/allexecutors answered HTTP {code}: {str(executors)[:300]}"
        )
    if not isinstance(executors, list):
        raise JobAnswerUnparsedError(
            where, f"{where} answered GET {path}/allexecutors with no JSON list: {str(executors)[:300]}"
        )
    return done[-1], executors


def _expect_ok(code: int, body: Any, where: str, path: str) -> None:
    if code != 200:
        raise JobEndpointUnreachableError(where, f"GET {path} answered HTTP {code}: {str(body)[:300]}")
    if not isinstance(body, dict):
        # it answered, with no status object (a proxy's page while a master restarts): a wait
        # rides it out as it does an unreachable endpoint, and names it for what it is
        raise JobAnswerUnparsedError(
            where, f"{where} answered GET {path} with no JSON object: {str(body)[:300]}"
        )


def status_steps(kind: str, job_id: str, endpoint: str) -> StatusSteps:
    kind = validate_kind(kind)
    if kind == "flink":
        return flink_status_steps(validate_job_id(job_id), f"the Flink JobManager at {endpoint}")
    if kind == "spark-master":
        return spark_master_status_steps(validate_spark_id(job_id), f"the Spark master at {endpoint}")
    return spark_history_status_steps(validate_spark_id(job_id), f"the Spark history server at {endpoint}")
