"""Errors the provider raises on purpose.

Every error about user input is a ``ValueError`` subclass that names the field and
the offending value, so callers can catch the standard type and users can read the
message without a traceback.
"""

from __future__ import annotations

from typing import Any


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


class SchemaOutdatedError(StoreError):
    """The store's schema is older than the code; the user must run the migration command."""


class InfeasibleTargetError(BellamyError):
    """No candidate scale-out meets the runtime target and the policy says to fail."""
