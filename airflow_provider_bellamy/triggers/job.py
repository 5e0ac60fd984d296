"""Waiting for a submitted job without holding a worker slot: ``BellamyJobTrigger``.

The status protocol (Flink REST, Spark master JSON, Spark history server) lives in
``airflow_provider_bellamy.hooks.job_status``; the trigger asks ``JobStatusHook`` (asyncio).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_provider_bellamy.exceptions import (
    InvalidInputError,
    JobAnswerUnparsedError,
    JobEndpointUnreachableError,
)
from airflow_provider_bellamy.hooks.job import (
    DEFAULT_UNREACHABLE_GRACE_S,
    JobStatusHook,
    UnreachableGrace,
    parse_unreachable_grace,
)
from airflow_provider_bellamy.hooks.job_status import JOB_KINDS, JobStatus, validate_endpoint, validate_kind

__all__ = ["JOB_KINDS", "BellamyJobTrigger", "JobStatus", "validate_endpoint", "validate_kind"]


def _json_value(value: Any) -> Any:
    """A refused value as an event carries it (events are JSON): itself, else its text."""
    return value if value is None or isinstance(value, (str, int, float, bool)) else repr(value)


def _parse_deadline(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(str(value))
    except ValueError:
        raise InvalidInputError("deadline_at", value, "must be an ISO 8601 timestamp") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.timezone.utc)


def unreachable_event(exc: JobEndpointUnreachableError) -> dict[str, Any]:
    """The ``{"status": "error"}`` event of an endpoint whose grace ran out: ``error_from_event``
    raises it again in the task as the same class and message a poke raises."""
    error_type = "unparsed" if isinstance(exc, JobAnswerUnparsedError) else "unreachable"
    return {
        "status": "error",
        "error": str(exc),
        "error_type": error_type,
        "url": exc.url,
        "reason": exc.reason,
    }


def error_from_event(event: dict[str, Any], endpoint: str) -> Exception:
    """The error an ``{"status": "error"}`` event of ``BellamyJobTrigger`` stands for, for the
    task resuming from it to raise: the endpoint unreachable or answering no status that parses,
    or the input refused as it was (field, value and problem; an event of an older trigger: its
    text under ``job_id``)."""
    # an older trigger's event has no "url" nor "reason": its "error" is the whole message
    url, reason = str(event.get("url", endpoint)), str(event.get("reason", event.get("error")))
    if event.get("error_type") == "unparsed":
        return JobAnswerUnparsedError(url, reason)
    if event.get("error_type") == "unreachable":
        return JobEndpointUnreachableError(url, reason)
    if "field" in event:
        return InvalidInputError(str(event["field"]), event.get("value"), str(event.get("problem")))
    return InvalidInputError("job_id", event.get("job_id"), str(event.get("error")))


class BellamyJobTrigger(BaseTrigger):
    """Polls a Flink job or Spark application until it ends, then fires one event.

    Event payloads (JSON): ``{"status": "done", "job": <JobStatus dict>}`` when the job reached
    a terminal state (successful or not: the task decides), ``{"status": "error", "error": ...,
    "error_type": ...}`` for an unknown job id (``invalid``), an endpoint that stayed unreachable
    (``unreachable``) or kept answering something that is no status (``unparsed``), and
    ``{"status": "timeout", "job": <last status or None>}`` past ``deadline_at`` (ISO 8601).

    :param unreachable_grace_s: how long the endpoint may stay unreachable, or answer no status
        that parses, before giving up (a JobManager restarting for a few seconds, or a proxy's
        page while it does, should not fail a long wait).
    """

    def __init__(
        self,
        *,
        kind: str,
        job_id: str,
        endpoint: str,
        poll_interval_s: float = 5.0,
        deadline_at: str | None = None,
        unreachable_grace_s: float = DEFAULT_UNREACHABLE_GRACE_S,
        request_timeout_s: float = 10.0,
    ) -> None:
        super().__init__()
        self.kind = validate_kind(kind)
        self.job_id = job_id
        self.endpoint = validate_endpoint(endpoint)
        if poll_interval_s <= 0:
            raise InvalidInputError("poll_interval_s", poll_interval_s, "must be > 0 seconds")
        self.poll_interval_s = float(poll_interval_s)
        # An absolute time, not a duration: a triggerer restart must not extend the wait.
        self.deadline_at = deadline_at
        self._deadline = _parse_deadline(deadline_at)
        self.unreachable_grace_s = parse_unreachable_grace(unreachable_grace_s)
        self.request_timeout_s = float(request_timeout_s)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "kind": self.kind,
                "job_id": self.job_id,
                "endpoint": self.endpoint,
                "poll_interval_s": self.poll_interval_s,
                "deadline_at": self.deadline_at,
                "unreachable_grace_s": self.unreachable_grace_s,
                "request_timeout_s": self.request_timeout_s,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        # One client for the whole wait: its connections are reused by every poll, and it is
        # built off the event loop (see JobStatusHook.__aenter__).
        async with JobStatusHook(self.kind, self.endpoint, timeout_s=self.request_timeout_s) as hook:
            async for event in self._poll(hook):
                yield event

    async def _poll(self, hook: JobStatusHook) -> AsyncIterator[TriggerEvent]:
        """Poll until one event; the last thing it does is yield it."""
        grace = UnreachableGrace(self.unreachable_grace_s)
        last: JobStatus | None = None
        while True:
            try:
                last = await hook.a_get_status(self.job_id)
                grace.answered()
            except JobEndpointUnreachableError as exc:
                if not grace.failed():
                    # the job's id: a runner resuming with the event alone still knows which job runs on
                    yield TriggerEvent({**unreachable_event(exc), "job_id": self.job_id})
                    return
                self.log.warning("%s (retrying for up to %s s)", exc, self.unreachable_grace_s)
            except InvalidInputError as exc:
                # the refusal itself, not its text: the task raises it again as it was
                refused = {"field": exc.field, "value": _json_value(exc.value), "problem": exc.problem}
                yield TriggerEvent({"status": "error", "error": str(exc), "error_type": "invalid", **refused})
                return
            if last is not None and last.terminal:
                yield TriggerEvent({"status": "done", "job": last.to_dict()})
                return
            if self._deadline is not None and dt.datetime.now(dt.timezone.utc) >= self._deadline:
                yield TriggerEvent({"status": "timeout", "job": last.to_dict() if last else None})
                return
            if last is not None:
                self.log.info("%s job %s is %s", self.kind, self.job_id, last.state)
            await asyncio.sleep(self.poll_interval_s)
