"""Errors the provider raises on purpose.

Every error about user input is a ``ValueError`` subclass that names the field and
the offending value, so callers can catch the standard type and users can read the
message without a traceback.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_bellamy.masking import find_secrets, mask_text


class BellamyError(Exception):
    """Base class of every error raised on purpose by the provider."""


class InvalidInputError(BellamyError, ValueError):
    """A value given by the user is not acceptable.

    ``field`` and ``value`` are kept as attributes for programmatic handling.
    """

    def __init__(self, field: str, value: Any, problem: str, *, where: str | None = None) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        self.where = where
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}{field}={value!r}: {problem}")


class UnknownJobTypeError(InvalidInputError):
    """No model and no runs exist for the job type asked about."""

    def __init__(self, job_type: str, known: list[str] | None = None) -> None:
        hint = f"known job types: {', '.join(sorted(known))}" if known else "no job types are known yet"
        super().__init__("job_type", job_type, f"unknown job type ({hint})")


class ModelFileError(BellamyError, ValueError):
    """A stored model cannot be read: truncated, corrupt, or written by another format version."""


class StoreError(BellamyError):
    """The model store cannot be used (unreachable, or its schema is not the code's)."""


class DecisionNotStoredError(StoreError):
    """A model answered, but the store did not take the decision (a read-only role or replica, a
    store lost mid-sizing). ``decision`` is that answer, unstored (``decision_id`` None): a launch
    goes on with it rather than with a fallback made without the model."""

    def __init__(self, decision: Any, cause: StoreError) -> None:
        self.decision = decision
        super().__init__(str(cause))


class SchemaOutdatedError(StoreError):
    """The store's schema is older than the code; the user must run the migration command."""


class InfeasibleTargetError(BellamyError):
    """No candidate scale-out meets the runtime target and the policy says to fail."""


class JobEndpointUnreachableError(BellamyError):
    """A job status endpoint (Flink JobManager, Spark master or history server) did not answer."""

    def __init__(self, url: str, reason: str) -> None:
        # A URL may carry user:password@ (and the HTTP client's message repeats the URL).
        secrets = find_secrets(url)
        self.url = mask_text(url, secrets)
        self.reason = mask_text(reason, secrets)
        super().__init__(f"REST endpoint {self.url} is unreachable: {self.reason}")


class JobAnswerUnparsedError(JobEndpointUnreachableError):
    """A job status endpoint answered, but not with a status that parses (a proxy's page in place
    of a restarting master's JSON, an object of another shape). A wait treats it as unreachable,
    for the same grace: the endpoint may answer well again in a moment."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(url, reason)
        # the reason names the endpoint and the answer already (hooks.job.unparsed_answer_note)
        self.args = (self.reason,)


_JOB_LABELS = {
    "flink": "Flink job",
    "spark": "Spark job",
    "spark-master": "Spark job",
    "spark-history": "Spark job",
}


class JobFailedError(BellamyError):
    """A cluster job (a Flink job, a Spark application or driver) ended unsuccessfully.

    ``kind``: ``flink``, ``spark``, ``spark-master`` or ``spark-history`` (names the job in the
    message); None says just "job".
    """

    def __init__(self, job_id: str, state: str, cause: str, *, kind: str | None = None) -> None:
        self.job_id = job_id
        self.state = state
        self.cause = cause
        self.kind = kind
        super().__init__(f"{_JOB_LABELS.get(kind or '', 'job')} {job_id} ended {state}: {cause}")


class UnknownJobIdError(InvalidInputError):
    """The cluster has no job/application with the id asked about."""

    def __init__(self, job_id: str, where: str) -> None:
        super().__init__("job_id", job_id, f"no such job on {where}")
