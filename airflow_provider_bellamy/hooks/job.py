"""``JobStatusHook``: the HTTP side of a cluster's job status endpoint, blocking and asyncio.

The protocol (which paths to GET, how to read the answers) lives sans I/O in
``hooks.job_status``; this hook sends its requests, decodes the answers once for every
caller, and gives the operators, the sensor and the trigger the same calls:

* ``get_status`` / ``a_get_status``: one job's ``JobStatus`` now;
* ``wait_for_status``: poll until the job ends (a worker's wait);
* ``poll``: ask a few times for a figure a cluster publishes a moment after a job ends;
* ``get_json`` / ``request``: a single call (``/overview``, a cancel).

An ``async with`` block holds one ``httpx.AsyncClient`` for all its calls (a trigger's whole
wait reuses its connections); the client is built off the event loop. ``httpx`` is imported
on first use: DAG files import the sensor and the operators, which import this module.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator
from typing import Any, Protocol, TypeVar

from airflow.sdk import BaseHook

from airflow_provider_bellamy.exceptions import (
    InvalidInputError,
    JobAnswerUnparsedError,
    JobEndpointUnreachableError,
    UnknownJobIdError,
)
from airflow_provider_bellamy.hooks.job_status import (
    JobStatus,
    Response,
    StatusSteps,
    status_steps,
    validate_endpoint,
    validate_kind,
)
from airflow_provider_bellamy.spec import parse_duration

T = TypeVar("T")
S = TypeVar("S", bound="_HasState")

_WHERE = {
    "flink": "the Flink JobManager",
    "spark-master": "the Spark master",
    "spark-history": "the Spark history server",
}


class _HasState(Protocol):
    @property
    def state(self) -> str: ...

    @property
    def terminal(self) -> bool: ...


# What an answer whose figures or structure do not parse raises while it is read: the same server
# answers the same next time, so the reader passes it over for the next source and names it.
# InvalidInputError is a ValueError too but means the request was ours and bad (a malformed id):
# every reader re-raises it first, as it is, since no answer and no other source mends it.
UNPARSED_ANSWER_ERRORS: tuple[type[Exception], ...] = (
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    IndexError,
    OverflowError,
)


def unparsed_answer_note(where: str, exc: BaseException) -> str:
    """How the log and ``runtime_source`` name an answer that did not parse."""
    return f"{where} answered figures that do not parse ({type(exc).__name__}: {str(exc)[:200]})"


def _status_read(kind: str, job_id: str, endpoint: str, where: str) -> StatusSteps:
    """``status_steps``, with an answer whose structure does not parse raised as
    ``JobAnswerUnparsedError`` naming the answer: every wait (the trigger, ``wait_until_terminal``,
    the sensor) then treats it as it treats an unreachable endpoint, instead of failing on a
    ``KeyError`` traceback. A bad id of ours (``InvalidInputError``) is raised as it is."""
    steps = status_steps(kind, job_id, endpoint)
    answer: Any = None
    try:
        path = next(steps)
        while True:
            response = yield path
            answer = response[1]
            path = steps.send(response)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    except InvalidInputError:
        raise
    except UNPARSED_ANSWER_ERRORS as exc:
        note = unparsed_answer_note(where, exc)
        raise JobAnswerUnparsedError(endpoint, f"{note}; the answer: {str(answer)[:200]}") from exc


def _decode(response: Any) -> Any:
    """The one decoder of every answer: JSON when it parses, else the text, None when empty."""
    try:
        return response.json() if response.content else None
    except ValueError:
        return response.text


def _new_client(timeout_s: float) -> Any:
    import httpx

    return httpx.Client(timeout=timeout_s, follow_redirects=True)


def _new_async_client(timeout_s: float) -> Any:
    import httpx

    return httpx.AsyncClient(timeout=timeout_s, follow_redirects=True)


# How long a wait rides out an endpoint that fails (UnreachableGrace), unless its task says otherwise.
DEFAULT_UNREACHABLE_GRACE_S = 60.0


def parse_unreachable_grace(value: Any) -> float:
    """``unreachable_grace_s`` as every waiting task takes it (a number, a ``timedelta``, a
    duration's text as a template renders it: ``"30"``, ``"2m"``); 0 fails at the first error."""
    return parse_duration(value, "unreachable_grace_s", allow_zero=True)


class UnreachableGrace:
    """The one rule of every wait for an endpoint that is unreachable or answers no status that
    parses (``JobEndpointUnreachableError``, ``JobAnswerUnparsedError``): ask again until it has
    been so for ``grace_s``, then its error stands. A JobManager restarting, or a proxy's page
    while a master does, must not fail a task whose job runs on.

    ``since`` is when the endpoint first failed, on ``clock``: ``time.monotonic`` within one
    process; a reschedule-mode sensor, whose pokes are processes apart, keeps it as a UTC
    timestamp (``time.time``) in the task state store.
    """

    def __init__(
        self, grace_s: float, *, since: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.grace_s = float(grace_s)
        self.since = since
        self._clock = clock

    def failed(self) -> bool:
        """Note that the endpoint failed now; True while the grace lasts (ask again), False once
        it has run out (raise the error)."""
        now = self._clock()
        if self.since is None:
            self.since = now
        return now - self.since < self.grace_s

    def answered(self) -> None:
        """The endpoint answered a status: the next failure starts a new grace."""
        self.since = None


def wait_until_terminal(
    get: Callable[[], S],
    *,
    what: str,
    poll_interval_s: float,
    timeout_s: float | None = None,
    on_poll: Callable[[S], None] | None = None,
    log: Any = None,
    unreachable_grace_s: float = DEFAULT_UNREACHABLE_GRACE_S,
) -> S:
    """Call ``get`` every ``poll_interval_s`` until what it returns is terminal.

    ``TimeoutError`` ("<what> still <state> after <timeout_s> s") when ``timeout_s`` runs out
    first; the job itself is left alone. ``log`` gets a line each time the state changes.
    An endpoint that stops answering, or answers something that is no status, is asked again
    for ``unreachable_grace_s`` (``UnreachableGrace``), as ``BellamyJobTrigger`` and
    ``BellamyJobSensor`` do; past ``timeout_s`` its error is raised at once.
    """
    deadline = None if timeout_s is None else time.monotonic() + float(timeout_s)
    last_state = None
    grace = UnreachableGrace(unreachable_grace_s)
    while True:
        try:
            current = get()
        except JobEndpointUnreachableError as exc:
            if not grace.failed() or (deadline is not None and time.monotonic() > deadline):
                raise
            if log is not None:
                log.warning("%s (retrying for up to %s s)", exc, unreachable_grace_s)
            time.sleep(poll_interval_s)
            continue
        grace.answered()
        if on_poll is not None:
            on_poll(current)
        if log is not None and current.state != last_state:
            log.info("%s is %s", what, current.state)
            last_state = current.state
        if current.terminal:
            return current
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"{what} still {current.state} after {timeout_s} s")
        time.sleep(poll_interval_s)


class JobStatusHook(BaseHook):
    """Reads one cluster's job status endpoint: a Flink JobManager's REST API (``flink``), a
    Spark standalone master's web UI (``spark-master``) or a Spark history server
    (``spark-history``), at ``endpoint`` (its base URL).

    Transport failures and non-200 answers raise ``JobEndpointUnreachableError`` (URL
    credentials masked); an id the cluster does not know raises ``UnknownJobIdError``.
    """

    hook_name = "Bellamy job status"

    def __init__(self, kind: str, endpoint: str, *, timeout_s: float = 10.0) -> None:
        super().__init__()
        self.kind = validate_kind(kind)
        self.endpoint = validate_endpoint(endpoint)
        self.timeout_s = float(timeout_s)
        self._async_client: Any = None

    @property
    def where(self) -> str:
        """The endpoint, named for error messages."""
        return f"{_WHERE[self.kind]} at {self.endpoint}"

    # -- blocking ----------------------------------------------------------------------------------

    def _send(self, client: Any, method: str, path: str) -> Response:
        import httpx

        try:
            response = client.request(method, f"{self.endpoint}{path}")
        except httpx.HTTPError as exc:
            raise JobEndpointUnreachableError(self.endpoint, f"{type(exc).__name__}: {exc}") from exc
        return response.status_code, _decode(response)

    def request(self, method: str, path: str) -> Response:
        """One request: (HTTP status, decoded body)."""
        with _new_client(self.timeout_s) as client:
            return self._send(client, method, path)

    def get_json(self, path: str) -> Any:
        """``GET path``; anything but HTTP 200 raises ``JobEndpointUnreachableError``."""
        code, body = self.request("GET", path)
        if code != 200:
            raise JobEndpointUnreachableError(
                self.endpoint, f"GET {path} answered HTTP {code}: {str(body)[:300]}"
            )
        return body

    def drive(self, steps: Generator[str, Response, T]) -> T:
        """Run a protocol generator of ``hooks.job_status`` over one client; its result."""
        with _new_client(self.timeout_s) as client:
            try:
                path = next(steps)
                while True:
                    path = steps.send(self._send(client, "GET", path))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def get_status(self, job_id: str) -> JobStatus:
        """The job's status now (``JobAnswerUnparsedError`` for an answer that is not one)."""
        return self.drive(_status_read(self.kind, job_id, self.endpoint, self.where))

    def wait_for_status(
        self,
        job_id: str,
        *,
        poll_interval_s: float,
        timeout_s: float | None = None,
        on_poll: Callable[[JobStatus], None] | None = None,
        unreachable_grace_s: float = DEFAULT_UNREACHABLE_GRACE_S,
    ) -> JobStatus:
        """Poll until the job has ended; ``TimeoutError`` past ``timeout_s``, the endpoint's
        error once it has been unreachable for ``unreachable_grace_s`` (see
        ``wait_until_terminal``). Each change of state is logged."""
        what = f"{'Flink' if self.kind == 'flink' else 'Spark'} job {job_id}"
        return wait_until_terminal(
            lambda: self.get_status(job_id),
            what=what,
            poll_interval_s=poll_interval_s,
            timeout_s=timeout_s,
            on_poll=on_poll,
            log=self.log,
            unreachable_grace_s=unreachable_grace_s,
        )

    def poll(
        self,
        steps: Callable[[], Generator[str, Response, T]],
        *,
        done: Callable[[T], bool],
        polls: int,
        interval_s: float,
        give_up_when_unreachable: bool = False,
        unread: list[str] | None = None,
    ) -> T | None:
        """Drive ``steps()`` up to ``polls`` times, ``interval_s`` apart, until ``done(result)``:
        for a figure a cluster publishes a moment after a job ends. Returns the last result (None
        when no call answered). An endpoint not answering yet, or not listing the job yet, is
        retried (except an unreachable one with ``give_up_when_unreachable``). An answer whose
        structure does not parse (``attempts`` not a list of objects, …) is not asked again: a
        server answers the same next time. It is logged and, named, added to ``unread`` for the
        caller to name the source it falls back to. A request of ours that is bad (a malformed id:
        ``InvalidInputError``) is raised as it is, naming the field, on the first try."""
        result: T | None = None
        for attempt in range(polls):
            try:
                result = self.drive(steps())
            except JobEndpointUnreachableError as exc:
                self.log.debug("%s not available: %s", self.where, exc)
                if give_up_when_unreachable:
                    return result
            except UnknownJobIdError as exc:
                self.log.debug("%s not ready: %s", self.where, exc)
            except InvalidInputError:
                raise  # our request is bad (UNPARSED_ANSWER_ERRORS): not the cluster's answer
            except UNPARSED_ANSWER_ERRORS as exc:
                note = unparsed_answer_note(self.where, exc)
                self.log.warning("Bellamy: %s; not asking it again", note)
                if unread is not None:
                    unread.append(note)
                return result
            except Exception as exc:
                self.log.debug("%s not ready: %s", self.where, exc)
            else:
                if done(result):
                    return result
            if attempt + 1 < polls:
                time.sleep(interval_s)
        return result

    # -- asyncio -----------------------------------------------------------------------------------

    async def __aenter__(self) -> JobStatusHook:
        # Building a client is synchronous work (the first `import httpx`, loading the CA bundle
        # into an SSL context) that took 0.68 s on a busy triggerer: on the event loop it would
        # block every other trigger.
        self._async_client = await asyncio.to_thread(_new_async_client, self.timeout_s)
        return self

    async def __aexit__(self, *exc: object) -> None:
        client, self._async_client = self._async_client, None
        if client is not None:
            await client.aclose()

    async def a_drive(self, steps: Generator[str, Response, T]) -> T:
        """``drive`` on the event loop, with the ``async with`` block's client (else one opened
        for this call only)."""
        if self._async_client is None:
            async with self:
                return await self.a_drive(steps)
        import httpx  # already imported when the client was built: a dictionary lookup here

        client = self._async_client
        try:
            path = next(steps)
            while True:
                try:
                    response = await client.get(f"{self.endpoint}{path}", timeout=self.timeout_s)
                except httpx.HTTPError as exc:
                    raise JobEndpointUnreachableError(self.endpoint, f"{type(exc).__name__}: {exc}") from exc
                path = steps.send((response.status_code, _decode(response)))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def a_get_status(self, job_id: str) -> JobStatus:
        """The job's status now, without blocking the event loop (``JobAnswerUnparsedError`` for
        an answer that is not one)."""
        return await self.a_drive(_status_read(self.kind, job_id, self.endpoint, self.where))
