"""The canonical run record (DESIGN.md) and its validation.

A run is ``job_type``, ``framework``, ``scale_out`` (int >= 1), ``runtime_s``
(float > 0) and any number of context properties. Provenance fields travel with
observed runs and are not part of the context. Kept free of pandas at import time:
the Airflow layers use it while parsing DAG files.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_bellamy.exceptions import InvalidInputError

if TYPE_CHECKING:
    import pandas as pd

REQUIRED_COLUMNS: tuple[str, ...] = ("job_type", "framework", "scale_out", "runtime_s")

PROVENANCE_COLUMNS: tuple[str, ...] = (
    "dag_id",
    "task_id",
    "run_id",
    "map_index",
    "try_number",
    "started_at",
    "ended_at",
    "status",
    "source",
    "external_id",
    "dataset",
    "decision_id",
    "id",
    "recorded_at",
)

# Properties that would make a "context" depend on the scale-out: a cluster total.
FORBIDDEN_CONTEXT_KEYS: frozenset[str] = frozenset({"scale_out", "runtime_s"})

RUN_STATUSES: tuple[str, ...] = ("success", "failed")
RUN_SOURCES: tuple[str, ...] = ("trace", "observed")


def context_columns(columns: Iterable[str]) -> list[str]:
    """The context properties among a frame's columns, in a stable order."""
    skip = set(REQUIRED_COLUMNS) | set(PROVENANCE_COLUMNS)
    return sorted(c for c in columns if c not in skip)


def successful_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """The runs a model may learn from: failed runs are kept in the store but never trained on (a
    missing status counts as a success)."""
    if "status" not in frame.columns:
        return frame
    return frame[frame["status"].fillna("success") == "success"]


def validate_scale_out(value: Any, *, field: str = "scale_out", where: str | None = None) -> int:
    """An integer >= 1; floats that are whole numbers are accepted (CSV readers make them)."""
    if isinstance(value, bool):
        raise InvalidInputError(field, value, "must be an integer >= 1", where=where)
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(field, value, "must be an integer >= 1", where=where) from None
    if math.isnan(as_float) or as_float != int(as_float) or as_float < 1:
        raise InvalidInputError(field, value, "must be an integer >= 1", where=where)
    return int(as_float)


def validate_runtime(value: Any, *, field: str = "runtime_s", where: str | None = None) -> float:
    """A finite float > 0."""
    if isinstance(value, bool):
        raise InvalidInputError(field, value, "must be a number of seconds > 0", where=where)
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(field, value, "must be a number of seconds > 0", where=where) from None
    if not math.isfinite(as_float) or as_float <= 0:
        raise InvalidInputError(field, value, "must be a finite number of seconds > 0", where=where)
    return as_float


def validate_scale_out_list(values: Any, *, field: str = "scale_outs") -> list[int]:
    """Candidate scale-outs, in the order given: a non-empty list (or tuple, range, array) of integers >= 1."""
    if hasattr(values, "tolist") and not isinstance(values, (str, bytes)):
        values = values.tolist()  # numpy arrays, pandas Series
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, (Sequence, range)):
        raise InvalidInputError(field, values, "must be a list of integers >= 1")
    out = [validate_scale_out(v, field=field) for v in values]
    if not out:
        raise InvalidInputError(field, list(values), "must not be empty")
    return out


# The band's upper bound is the q-quantile of the runtime and its lower bound the (1 − q)-quantile:
# below q = 0.5 they swap (lower > upper). A q the calibration cannot resolve near 1 is capped by
# the model, with the reason in the decision (RuntimeModel.band).
CONFIDENCE_PROBLEM = "must be a probability from 0.5 up to (not including) 1, e.g. 0.9: below 0.5 the band's lower bound would pass its upper"


def validate_confidence(confidence: Any, *, field: str = "confidence", where: str | None = None) -> float:
    """A probability in [0.5, 1)."""
    if (
        isinstance(confidence, bool)
        or not isinstance(confidence, (int, float))
        or not 0.5 <= float(confidence) < 1
    ):
        raise InvalidInputError(field, confidence, CONFIDENCE_PROBLEM, where=where)
    return float(confidence)


def validate_label(value: Any, field: str, *, where: str | None = None) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(field, value, "must be a non-empty string", where=where)
    return value.strip()


def normalize_property(value: Any) -> str | float | None:
    """A context property as the model sees it: a string, a float, or None when absent."""
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        f = float(value)
        if math.isnan(f):
            return None
        if not math.isfinite(f):
            raise InvalidInputError("property", value, "numbers must be finite")
        return f
    if hasattr(value, "item") and not isinstance(value, str):  # numpy scalar
        return normalize_property(value.item())
    text = str(value).strip()
    return text if text else None


def normalize_context(context: Mapping[str, Any], *, where: str | None = None) -> dict[str, str | float]:
    """Drop provenance/required keys, normalise values, drop absent ones."""
    if not isinstance(context, Mapping):
        raise InvalidInputError(
            "context", context, "must be a mapping of property name to value", where=where
        )
    out: dict[str, str | float] = {}
    skip = set(REQUIRED_COLUMNS) | set(PROVENANCE_COLUMNS)
    for key, value in context.items():
        if not isinstance(key, str) or not key:
            raise InvalidInputError(
                "context key", key, "property names must be non-empty strings", where=where
            )
        if key in skip:
            continue
        try:
            norm = normalize_property(value)
        except InvalidInputError as exc:
            raise InvalidInputError(f"context.{key}", value, exc.problem, where=where) from None
        if norm is not None:
            out[key] = norm
    return out


def context_fingerprint(job_type: str, context: Mapping[str, Any]) -> str:
    """A stable identifier of (job type, context): equal contexts give equal fingerprints."""
    import hashlib
    import json

    norm = normalize_context(context)
    payload = json.dumps([job_type, sorted(norm.items())], sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def validate_runs(frame: pd.DataFrame, *, where: str = "runs", line_offset: int = 0) -> pd.DataFrame:
    """Check a frame of runs row by row and return a normalised copy.

    ``line_offset`` turns a row position into a file line number in messages
    (2 for a file with one header line). Raises on the first bad value.
    """
    import pandas as pd

    if not isinstance(frame, pd.DataFrame):
        raise InvalidInputError(where, type(frame).__name__, "must be a pandas DataFrame")
    if frame.empty:
        raise InvalidInputError(where, "<empty>", "no runs given (the frame has no rows)")
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise InvalidInputError(
            "columns",
            ", ".join(missing),
            f"missing required column(s); have {list(frame.columns)}",
            where=where,
        )
    out = frame.copy().reset_index(drop=True)
    scale_outs: list[int] = []
    runtimes: list[float] = []
    for pos, rec in enumerate(out[list(REQUIRED_COLUMNS)].to_dict(orient="records")):
        loc = f"{where} line {pos + line_offset}" if line_offset else f"{where} row {pos}"
        validate_label(rec.get("job_type"), "job_type", where=loc)
        validate_label(rec.get("framework"), "framework", where=loc)
        scale_outs.append(validate_scale_out(rec.get("scale_out"), where=loc))
        runtimes.append(validate_runtime(rec.get("runtime_s"), where=loc))
    out["scale_out"] = pd.array(scale_outs, dtype="int64")
    out["runtime_s"] = pd.array(runtimes, dtype="float64")
    out["job_type"] = out["job_type"].astype(str).str.strip()
    out["framework"] = out["framework"].astype(str).str.strip().str.lower()
    for col in context_columns(out.columns):
        for pos, value in enumerate(out[col].tolist()):
            try:
                normalize_property(value)
            except InvalidInputError as exc:
                loc = f"{where} line {pos + line_offset}" if line_offset else f"{where} row {pos}"
                raise InvalidInputError(col, value, exc.problem, where=loc) from None
    return out
