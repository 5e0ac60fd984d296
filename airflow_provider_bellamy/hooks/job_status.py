"""The status of a submitted cluster job, from its REST/JSON endpoint.

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

The requests to make and the parsing are written once (a generator that yields the paths it
needs and receives the answers) and driven by a blocking client for sensors in poke mode and
by an asyncio client for ``BellamyJobTrigger``, so both modes agree on every state and
duration. No Airflow trigger machinery is imported here: DAG files import the sensor, which
uses this module.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Generator
from dataclasses import asdict, dataclass
from typing import Any

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.hooks.flink import (
    FLINK_TERMINAL_STATES,
    JobEndpointUnreachableError,
    UnknownJobIdError,
    parse_flink_job,
    summarize_flink_exceptions,
    validate_job_id,
)

JOB_KINDS: tuple[str, ...] = ("flink", "spark-master", "spark-history")
SPARK_APP_TERMINAL = frozenset({"FINISHED", "FAILED", "KILLED"})
SPARK_DRIVER_TERMINAL = frozenset({"FINISHED", "FAILED", "KILLED", "ERROR"})

# A generator step: yields a path to GET, receives (HTTP status, decoded JSON or None).
Response = tuple[int, Any]
StatusSteps = Generator[str, Response, "JobStatus"]


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


def flink_status_steps(job_id: str, where: str) -> StatusSteps:
    code, body = yield f"/jobs/{job_id}"
    if code == 404:
        raise UnknownJobIdError(job_id, where)
    _expect_ok(code, body, where, f"/jobs/{job_id}")
    job = parse_flink_job(body)
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
        duration_ms=job.duration_ms if job.terminal else None,
        parallelism=job.parallelism,
        name=job.name,
        cause=cause,
        running_time_ms=job.running_time_ms if job.start_time_ms else None,
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


def _expect_ok(code: int, body: Any, where: str, path: str) -> None:
    if code != 200 or not isinstance(body, dict):
        raise JobEndpointUnreachableError(where, f"GET {path} answered HTTP {code}: {str(body)[:300]}")


def status_steps(kind: str, job_id: str, endpoint: str) -> StatusSteps:
    kind = validate_kind(kind)
    if kind == "flink":
        return flink_status_steps(validate_job_id(job_id), f"the Flink JobManager at {endpoint}")
    if kind == "spark-master":
        return spark_master_status_steps(validate_spark_id(job_id), f"the Spark master at {endpoint}")
    return spark_history_status_steps(validate_spark_id(job_id), f"the Spark history server at {endpoint}")


# -- drivers ------------------------------------------------------------------------------------


def _decode(response: Any) -> Any:
    try:
        return response.json() if response.content else None
    except ValueError:
        return response.text


def fetch_status(kind: str, job_id: str, endpoint: str, *, timeout_s: float = 10.0) -> JobStatus:
    """The job's status now (blocking; for sensors in poke/reschedule mode)."""
    import httpx

    endpoint = validate_endpoint(endpoint)
    steps = status_steps(kind, job_id, endpoint)
    with httpx.Client(timeout=timeout_s, follow_redirects=True) as client:
        try:
            path = next(steps)
            while True:
                try:
                    response = client.get(f"{endpoint}{path}")
                except httpx.HTTPError as exc:
                    raise JobEndpointUnreachableError(endpoint, f"{type(exc).__name__}: {exc}") from exc
                path = steps.send((response.status_code, _decode(response)))
        except StopIteration as done:
            return done.value


def _new_async_client(timeout_s: float) -> Any:
    import httpx

    return httpx.AsyncClient(timeout=timeout_s, follow_redirects=True)


async def open_async_client(timeout_s: float = 10.0) -> Any:
    """An ``httpx.AsyncClient`` built in a worker thread.

    Building one is synchronous work (the first ``import httpx``, loading the CA bundle into an
    SSL context) that took 0.68 s on a busy triggerer: on the event loop it would block every
    other trigger. A trigger opens one client per run and reuses its connections every poll.
    """
    return await asyncio.to_thread(_new_async_client, timeout_s)


async def fetch_status_async(
    kind: str, job_id: str, endpoint: str, *, timeout_s: float = 10.0, client: Any = None
) -> JobStatus:
    """The job's status now, without blocking the triggerer's event loop.

    ``client``: an ``httpx.AsyncClient`` to reuse (see ``open_async_client``); without one, a
    client is opened for this call only.
    """
    if client is None:
        async with await open_async_client(timeout_s) as own:
            return await fetch_status_async(kind, job_id, endpoint, timeout_s=timeout_s, client=own)
    import httpx  # already imported by open_async_client: a dictionary lookup here

    endpoint = validate_endpoint(endpoint)
    steps = status_steps(kind, job_id, endpoint)
    try:
        path = next(steps)
        while True:
            try:
                response = await client.get(f"{endpoint}{path}", timeout=timeout_s)
            except httpx.HTTPError as exc:
                raise JobEndpointUnreachableError(endpoint, f"{type(exc).__name__}: {exc}") from exc
            path = steps.send((response.status_code, _decode(response)))
    except StopIteration as done:
        return done.value
