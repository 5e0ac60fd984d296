"""The canonical run record (DESIGN.md) and its validation.

A run is ``job_type``, ``framework``, ``scale_out`` (int >= 1), ``runtime_s``
(float > 0) and any number of context properties. Provenance fields travel with
observed runs and are not part of the context. Kept free of pandas at import time:
the Airflow layers use it while parsing DAG files.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import re
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
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
    "ti_id",  # store revision 0006: Airflow's id of the task instance try
    "started_at",
    "ended_at",
    "status",
    "source",
    "external_id",
    "dataset",
    "decision_id",
    "id",
    "recorded_at",
    # Run timing (store revision 0002_run_timing): never context properties.
    "queue_s",
    "requested_scale_out",
    "excluded_reason",
)

# DataFrame.attrs keys of a frame read from a file: its path and each row's line in it (a
# mapping from index label to line).
SOURCE_ATTR = "bellamy_source"
SOURCE_LINES_ATTR = "bellamy_lines"

# Properties that would make a "context" depend on the scale-out: a cluster total.
FORBIDDEN_CONTEXT_KEYS: frozenset[str] = frozenset({"scale_out", "runtime_s"})

# The most candidate scale-outs one request may weigh: each becomes a row of the stored
# decision (about 190 bytes), and no cluster is sized among more sizes than this.
MAX_CANDIDATES = 4096

RUN_STATUSES: tuple[str, ...] = ("success", "failed")
RUN_SOURCES: tuple[str, ...] = ("trace", "observed")


def context_columns(columns: Iterable[str]) -> list[str]:
    """The context properties among a frame's columns, in a stable order."""
    skip = set(REQUIRED_COLUMNS) | set(PROVENANCE_COLUMNS)
    return sorted(c for c in columns if c not in skip)


def successful_runs(frame: pd.DataFrame) -> pd.DataFrame:
    """The runs a model may learn from: failed runs and runs with an ``excluded_reason`` are kept
    in the store but never trained on (a missing status counts as a success)."""
    if "status" in frame.columns:
        frame = frame[frame["status"].fillna("success") == "success"]
    if "excluded_reason" in frame.columns:
        frame = frame[frame["excluded_reason"].isna()]
    return frame


def validate_int(value: Any, field: str, *, minimum: int = 1, where: str | None = None) -> int:
    """An integer >= ``minimum``; floats that are whole numbers are accepted (CSV readers make them)."""
    problem = f"must be an integer >= {minimum}"
    if isinstance(value, bool):
        raise InvalidInputError(field, value, problem, where=where)
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(field, value, problem, where=where) from None
    if math.isnan(as_float) or as_float != int(as_float) or as_float < minimum:
        raise InvalidInputError(field, value, problem, where=where)
    return int(as_float)


def validate_ti_id(value: Any, field: str = "ti_id", *, where: str | None = None) -> str | None:
    """Airflow's id of a task instance try (a UUID, as ``ti.id`` gives it or as text), in its
    canonical text form; None when absent."""
    if is_missing(value):
        return None
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, str):
        try:
            return str(uuid.UUID(value.strip()))
        except ValueError:
            pass
    raise InvalidInputError(field, value, "must be a UUID (Airflow's task instance id, ti.id)", where=where)


def validate_scale_out(value: Any, *, field: str = "scale_out", where: str | None = None) -> int:
    """An integer >= 1."""
    return validate_int(value, field, where=where)


def validate_runtime(value: Any, *, field: str = "runtime_s", where: str | None = None) -> float:
    """A finite float > 0."""
    return _seconds(value, field, where, positive=True)


def _seconds(value: Any, field: str, where: str | None, *, positive: bool) -> float:
    bound = "> 0" if positive else ">= 0"
    if isinstance(value, bool):
        raise InvalidInputError(field, value, f"must be a number of seconds {bound}", where=where)
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(field, value, f"must be a number of seconds {bound}", where=where) from None
    if not math.isfinite(as_float) or as_float < 0 or (positive and as_float == 0):
        raise InvalidInputError(field, value, f"must be a finite number of seconds {bound}", where=where)
    return as_float


def validate_scale_out_list(values: Any, *, field: str = "scale_outs") -> list[int]:
    """Candidate scale-outs, in the order given: a non-empty list (or tuple, range, array) of integers >= 1."""
    if hasattr(values, "tolist") and not isinstance(values, (str, bytes)):
        values = values.tolist()  # numpy arrays, pandas Series
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, (Sequence, range)):
        raise InvalidInputError(field, values, "must be a list of integers >= 1")
    if len(values) > MAX_CANDIDATES:
        raise InvalidInputError(
            field,
            f"<{len(values):,} scale-outs from {values[0]!r}>",
            f"more than {MAX_CANDIDATES:,} candidates; each is weighed and stored with the decision",
        )
    out = [validate_scale_out(v, field=field) for v in values]
    if not out:
        raise InvalidInputError(field, list(values), "must not be empty")
    return out


# The band's upper bound is the q-quantile of the runtime and its lower bound the (1 − q)-quantile:
# below q = 0.5 they swap (lower > upper); at q = 1 the upper bound is the quantile no runtime passes,
# which a runtime distribution with no ceiling does not have. A q the calibration cannot resolve
# near 1 is capped by the model, with the reason in the decision (RuntimeModel.band).
CONFIDENCE_RANGE = "must be a probability from 0.5 up to (not including) 1, e.g. 0.9"
CONFIDENCE_TOO_HIGH = (
    f"{CONFIDENCE_RANGE}: at 1 or above the band would be unbounded (no finite runtime is certain)"
)
CONFIDENCE_TOO_LOW = f"{CONFIDENCE_RANGE}: below 0.5 the band's lower bound would pass its upper"


def validate_confidence(confidence: Any, *, field: str = "confidence", where: str | None = None) -> float:
    """A probability in [0.5, 1)."""
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or math.isnan(confidence):
        raise InvalidInputError(field, confidence, CONFIDENCE_RANGE, where=where)
    if confidence >= 1:
        raise InvalidInputError(field, confidence, CONFIDENCE_TOO_HIGH, where=where)
    if confidence < 0.5:
        raise InvalidInputError(field, confidence, CONFIDENCE_TOO_LOW, where=where)
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


# The two kinds of property value the model reads: numbers and text (see conform_context).
NUMBER = "number"
TEXT = "text"
MIXED = "mixed"  # a store written before values were conformed may hold both for one property
_DECIMAL = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_NON_FINITE = frozenset(sign + word for sign in ("", "+", "-") for word in ("nan", "inf", "infinity"))


@dataclasses.dataclass(frozen=True)
class StoredKinds:
    """What a job type's stored runs hold for each property: its kind (``number``, ``text``,
    ``mixed``) and, for a text property, its stored texts that read as numbers, keyed by the number
    they read as (built once per job type, so that conforming a value is a lookup): a number given
    for the property becomes the one text reading as it (``1.0`` where the runs hold ``"1.0"``,
    see conform_property). Read-only: the store's cache hands one instance to every reader."""

    kinds: Mapping[str, str] = dataclasses.field(default_factory=lambda: MappingProxyType({}))
    number_texts: Mapping[str, Mapping[float, tuple[str, ...]]] = dataclasses.field(
        default_factory=lambda: MappingProxyType({})
    )

    @classmethod
    def of(cls, kinds: Mapping[str, str], texts: Mapping[str, Iterable[str]] | None = None) -> StoredKinds:
        """Kinds and, per text property, its stored texts reading as numbers (``_DECIMAL``)."""
        lookup: dict[str, Mapping[float, tuple[str, ...]]] = {}
        for key, values in (texts or {}).items():
            by_number: dict[float, list[str]] = {}
            for text in values:
                by_number.setdefault(float(text), []).append(text)
            lookup[key] = MappingProxyType({n: tuple(sorted(t)) for n, t in by_number.items()})
        return cls(MappingProxyType(dict(kinds)), MappingProxyType(lookup))

    def kind(self, key: str) -> str | None:
        return self.kinds.get(key)

    def texts_of(self, key: str) -> Mapping[float, tuple[str, ...]]:
        return self.number_texts.get(key, _NO_TEXTS)

    def with_new(self, kinds: Mapping[str, str]) -> StoredKinds:
        """These kinds, and ``kinds`` for properties no stored run has (a batch's new ones)."""
        merged = {**kinds, **self.kinds}
        return StoredKinds(MappingProxyType(merged), self.number_texts)


_NO_TEXTS: Mapping[float, tuple[str, ...]] = MappingProxyType({})
NO_KINDS = StoredKinds()


def property_kinds(contexts: Iterable[Mapping[str, Any]]) -> StoredKinds:
    """The kind of each property among normalised (stored) contexts: ``number``, ``text`` or ``mixed``."""
    kinds: dict[str, str] = {}
    texts: dict[str, set[str]] = {}
    for context in contexts:
        for key, value in context.items():
            if value is None:
                continue
            kind = TEXT if isinstance(value, str) else NUMBER
            kinds[key] = kind if kinds.get(key, kind) == kind else MIXED
            if kind == TEXT and _DECIMAL.fullmatch(value):
                texts.setdefault(key, set()).add(value)
    return StoredKinds.of(kinds, {k: v for k, v in texts.items() if kinds[k] == TEXT})


def _raw_kind(value: Any) -> str | None:
    """How a value given by a user reads: a number, text that reads as a number, or other text."""
    if value is None or isinstance(value, bool):
        return None if value is None else TEXT
    if hasattr(value, "item") and not isinstance(value, str):
        value = value.item()
    if isinstance(value, (int, float)):
        return NUMBER
    text = str(value).strip()
    # "nan"/"inf" read as numbers here, so that conform_property refuses them by name
    return "numeric text" if _DECIMAL.fullmatch(text) or text.lower() in _NON_FINITE else TEXT


def batch_kinds(contexts: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, str]:
    """Kinds of properties a batch of user contexts (``(where, context)``) introduces.

    A property whose values are all numbers, or text reading as numbers, is a number; one
    whose values are all text is text (``"42"`` next to ``"m5.xlarge"`` stays text, as a CSV
    reader keeps such a column). Numbers next to text that is no number: refused.
    """
    seen: dict[str, dict[str, tuple[str, Any]]] = {}
    for where, context in contexts:
        for key, value in context.items():
            kind = _raw_kind(value)
            if kind is not None:
                seen.setdefault(key, {}).setdefault(kind, (where, value))
    out: dict[str, str] = {}
    for key, found in seen.items():
        if TEXT in found and NUMBER in found:
            where, value = found[TEXT]
            raise InvalidInputError(
                key,
                value,
                f"is text while other runs give numbers for it (e.g. {found[NUMBER][1]!r})",
                where=where,
            )
        out[key] = TEXT if TEXT in found else NUMBER
    return out


# Properties the project itself reads as physical quantities, each with its least value and whether
# that value is allowed: model.features.DERIVED divides the input by a node's memory and by its
# cores, Ernest scales by the input size. A value no cluster has (``cores=-8``, ``memory_mb=0``) would
# drop a ratio and change what the prediction means without a word. Zero is an input size (a job that
# reads nothing, e.g. one that generates its data: its ratios are 0, well defined) but no node's
# memory or cores. Checked where input comes in (conform_property) and never on a store read: runs
# stored before the rule keep training as they are. Other numbers (iterations, lines, k) are a job's
# parameters, which the model reads as given and the project does not interpret.
PHYSICAL_PROPERTIES: Mapping[str, tuple[float, bool, str]] = {
    "data_size_mb": (0.0, True, "the job's input size in MB"),
    "memory_mb": (0.0, False, "a node's memory in MB"),
    "cores": (0.0, False, "a node's cores"),
}


def check_physical(name: str, number: float, value: Any, *, field: str, where: str | None = None) -> None:
    """Refuse a number ``PHYSICAL_PROPERTIES`` says the property ``name`` cannot have."""
    rule = PHYSICAL_PROPERTIES.get(name)
    if rule is None:
        return
    least, inclusive, meaning = rule
    if number < least or (number == least and not inclusive):
        bound = f">= {least:g}" if inclusive else f"> {least:g}"
        raise InvalidInputError(field, value, f"is {meaning}: must be {bound}", where=where)


def conform_property(
    value: Any,
    kind: str | None,
    *,
    field: str,
    where: str | None = None,
    number_texts: Mapping[float, tuple[str, ...]] = _NO_TEXTS,
    name: str | None = None,
) -> str | float | None:
    """A property value given by a user (an API call, a file, a rendered template, ``--set``) as the
    store and the model read it, converted to ``kind`` where that is unambiguous.

    ``kind`` is what the job type's stored runs hold for the property (``None``: it has none yet).
    Text reading as a decimal number becomes the number where the runs hold numbers, or hold
    nothing yet (as Jinja renders ``8`` as ``"8"``); an integer becomes its text (``42`` → ``"42"``)
    where the runs hold text, unless one stored text (``number_texts``: the stored texts by the number
    they read as, StoredKinds) reads as the number given:
    then that text (``1.0`` is ``"1.0"`` where the runs hold it, as YAML reads ``version: 1.0``);
    several: refused, naming them. Everything else that does not fit is refused, so that a value
    never silently changes the context's identity or the prediction. NaN and infinity are refused;
    None means "not given". ``name``: the property's, whose value, where it reads as a number, must
    be one ``PHYSICAL_PROPERTIES`` allows whatever the kind (``"-8"`` as ``-8``).
    """
    if value is None:
        return None
    if hasattr(value, "item") and not isinstance(value, (str, bool)):
        value = value.item()  # numpy scalar
    own_text: str | None = None
    if isinstance(value, bool):
        text: str | None = str(value).lower()
        number = None
    elif isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise InvalidInputError(
                field, value, "must be a finite number (NaN and infinity are not values)", where=where
            )
        text, number = None, float(value)
        # an integer's text is the text given; a float's (1.0, 1.1 from 1.10) may not be
        own_text = str(value) if isinstance(value, int) else None
    elif isinstance(value, str):
        text, number = value.strip(), None
        if not text:
            if kind is None:
                return None
            raise InvalidInputError(
                field, value, f"is empty; the job type's runs have {kind} values for it", where=where
            )
        if text.lower() in _NON_FINITE and kind != TEXT:
            raise InvalidInputError(
                field, value, "must be a finite number (NaN and infinity are not values)", where=where
            )
    else:
        raise InvalidInputError(field, value, "must be a number or a string", where=where)
    if name is not None:
        reading = number if number is not None else float(text) if text and _DECIMAL.fullmatch(text) else None
        if reading is not None:
            check_physical(name, reading, value, field=field, where=where)
    if kind == TEXT:
        if text is not None:
            return text
        assert number is not None
        same = number_texts.get(number, ())
        if own_text is not None and own_text in same:
            return own_text
        if len(same) == 1:
            return same[0]
        if same:
            raise InvalidInputError(
                field,
                value,
                f"reads as each of the job type's stored texts {', '.join(map(repr, same))}; "
                "give the one meant, as text",
                where=where,
            )
        if number.is_integer() and abs(number) < 2**53:
            return str(int(number))
        raise InvalidInputError(
            field,
            value,
            "the job type's runs have text for this property, not numbers; give it as text",
            where=where,
        )
    if number is not None:
        return number
    assert text is not None
    if kind == MIXED or not _DECIMAL.fullmatch(text):
        if kind == NUMBER:
            raise InvalidInputError(
                field,
                value,
                "must be a number (the job type's runs have numbers for this property)",
                where=where,
            )
        return text
    number = float(text)
    if not math.isfinite(number):
        raise InvalidInputError(field, value, "must be a finite number", where=where)
    return number


def validate_property_name(key: Any, field: str, *, where: str | None = None) -> str:
    """A context property's name as a user gives it: a non-empty string without spaces around it
    (``" cores"`` would be another property than ``cores``, whose runs it would never find)."""
    if not isinstance(key, str) or not key.strip():
        raise InvalidInputError(field, key, "property names must be non-empty strings", where=where)
    if key != key.strip():
        raise InvalidInputError(
            field, key, f"has spaces around the name; did you mean {key.strip()!r}?", where=where
        )
    return key


def conform_context(
    context: Any,
    kinds: StoredKinds = NO_KINDS,
    *,
    where: str | None = None,
    prefix: str = "context.",
    physical: bool = True,
) -> dict[str, str | float]:
    """A context given by a user, checked and converted property by property (see
    :func:`conform_property`) against ``kinds`` (what the job type's stored runs hold); the one
    place user input becomes a context. ``physical=False``: a context that selects stored runs,
    which may hold a value ``PHYSICAL_PROPERTIES`` refuses in new input (stored before the rule)."""
    if not isinstance(context, Mapping):
        raise InvalidInputError(
            "context", context, "must be a mapping of property name to value", where=where
        )
    skip = set(REQUIRED_COLUMNS) | set(PROVENANCE_COLUMNS)
    out: dict[str, str | float] = {}
    for key, value in context.items():
        validate_property_name(key, "context key", where=where)
        if key in skip:
            continue
        norm = conform_property(
            value,
            kinds.kind(key),
            field=f"{prefix}{key}",
            where=where,
            number_texts=kinds.texts_of(key),
            name=key if physical else None,
        )
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


def validate_runs(
    frame: pd.DataFrame,
    *,
    where: str = "runs",
    line_offset: int = 0,
    lines: Sequence[int] | None = None,
) -> pd.DataFrame:
    """Check a frame of runs row by row and return a normalised copy.

    ``line_offset`` turns a row position into a file line number in messages
    (2 for a file with one header line); ``lines`` gives each row's line where
    they are not consecutive. Raises on the first bad value.
    """

    def location(pos: int) -> str:
        if lines is not None:
            return f"{where} line {lines[pos]}"
        return f"{where} line {pos + line_offset}" if line_offset else f"{where} row {pos}"

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
        loc = location(pos)
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
                raise InvalidInputError(col, value, exc.problem, where=location(pos)) from None
    return out


def check_complete_properties(
    frame: pd.DataFrame, *, where: str = "runs", lines: Sequence[int] | None = None
) -> None:
    """Refuse a frame of new runs where a property is empty (NaN) in a run while another run of
    the job type with the same other properties gives it: dropping the empty value would
    silently file the run under another context than its twin's.

    A run whose other properties differ is another context, which may lack the property (a job
    type's runs may have different property sets, as an export of them does). ``lines`` maps
    row positions to file lines for the messages.
    """
    if "job_type" not in frame.columns:
        return
    columns = context_columns(frame.columns)
    keyed = frame[["job_type", *columns]].astype(object).where(frame[["job_type", *columns]].notna(), None)
    for col in columns:
        missing = frame[col].isna()
        if not missing.any() or missing.all():
            continue
        others = ["job_type", *(c for c in columns if c != col)]
        given = set(keyed.loc[~missing, others].itertuples(index=False, name=None))
        for pos in missing[missing].index:
            if tuple(keyed.loc[pos, others]) in given:
                row = frame.index.get_loc(pos)
                loc = f"{where} line {lines[row]}" if lines is not None else f"{where} row {row}"
                raise InvalidInputError(
                    col,
                    "<empty>",
                    f"has no value while another run of job type {frame['job_type'][pos]!r} with the "
                    "same other properties has one; give it (an empty property would file this run "
                    "under another context), or leave the column out",
                    where=loc,
                )


# ---------------------------------------------------------------- runs on their way into the store

# The job type of the one model pre-trained on every job type's runs (``Bellamy.train("all")``):
# it sizes a job type that has runs but no model of its own yet (a new pipeline), reading the job
# type as one property among the others. Reserved: no run may carry it.
ALL_JOB_TYPES = "all"
PROVENANCE_KEYS: tuple[str, ...] = ("dag_id", "task_id", "run_id", "map_index", "try_number", "ti_id")
_RUN_FIELDS = frozenset(REQUIRED_COLUMNS) | frozenset(PROVENANCE_COLUMNS)


# What ``Bellamy.record_run`` takes, as keyword arguments: the canonical fields (required), the
# context as one mapping, and the provenance a caller sets (``runtime_s`` is the time the job ran at
# ``scale_out``, what the cluster granted; ``queue_s`` the wait before; ``requested_scale_out`` what
# sizing asked for; ``excluded_reason`` keeps the run out of training, stored and exported still).
RECORD_RUN_FIELDS: tuple[str, ...] = (
    *REQUIRED_COLUMNS,
    "context",
    *(name for name in PROVENANCE_COLUMNS if name not in ("id", "recorded_at")),
)


def run_record(fields: Mapping[str, Any]) -> dict[str, Any]:
    """``record_run``'s keyword arguments as one run for ``prepare_runs`` (which checks the values);
    a name it does not take, or a required one missing, is a ``TypeError`` as for any call."""
    unknown = sorted(set(fields) - set(RECORD_RUN_FIELDS))
    if unknown:
        raise TypeError(f"record_run() got an unexpected keyword argument {unknown[0]!r}")
    missing = [name for name in REQUIRED_COLUMNS if name not in fields]
    if missing:
        raise TypeError(f"record_run() missing required keyword argument {missing[0]!r}")
    return dict(fields)


def is_dataframe(value: Any) -> bool:
    # Avoid importing pandas just to answer "no" for a list of dicts.
    return type(value).__name__ == "DataFrame" and type(value).__module__.startswith("pandas")


def is_missing(value: Any) -> bool:
    """None, NaN, or pandas' NaT/NA: how records and frames say "not given"."""
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return type(value).__name__ in ("NaTType", "NAType")


def validate_job_type(value: Any, where: str | None = None, *, field: str = "job_type") -> str:
    """A job type a run or a request may name: a label, not the reserved ``ALL_JOB_TYPES``."""
    job = validate_label(value, field, where=where)
    if job == ALL_JOB_TYPES:
        raise InvalidInputError(field, job, "is reserved: it names the model of every job type", where=where)
    return job


def optional_label(value: Any, field: str, where: str | None) -> str | None:
    if is_missing(value):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    return validate_label(value, field, where=where)


def optional_seconds(value: Any, field: str, where: str | None) -> float | None:
    """A finite number of seconds >= 0, or None when absent."""
    return None if is_missing(value) else _seconds(value, field, where, positive=False)


def validate_timestamp(value: Any, field: str, where: str | None) -> dt.datetime | None:
    """A timezone-aware datetime (naive times are taken as UTC), or None when absent.

    A number, or text that is one, is seconds since the epoch: a CSV column mixing epoch seconds
    and ISO text reaches here as text, and each value must mean what it means in a column of its
    own kind (a column of numbers alone arrives as numbers). Text that reads both ways (``20231114``,
    an ISO basic date) is refused rather than guessed.
    """
    if is_missing(value):
        return None
    problem = "must be a datetime, an ISO 8601 timestamp or seconds since the epoch"
    seconds: Any = value
    if isinstance(value, str):
        try:
            seconds = float(value.strip())
        except ValueError:
            seconds = None
        else:
            try:
                as_date = dt.datetime.fromisoformat(value.strip())
            except ValueError:
                pass
            else:
                raise InvalidInputError(
                    field,
                    value,
                    f"reads both as the date {as_date.date().isoformat()} and as {value.strip()} seconds "
                    "since the epoch: write the date with dashes or the seconds as a number",
                    where=where,
                )
    if isinstance(value, dt.datetime):
        stamp = value
    elif isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        try:
            if not math.isfinite(seconds):
                raise ValueError
            stamp = dt.datetime.fromtimestamp(float(seconds), tz=dt.timezone.utc)
        except (ValueError, OverflowError, OSError):
            raise InvalidInputError(field, value, problem, where=where) from None
    elif isinstance(value, str):
        try:
            stamp = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise InvalidInputError(field, value, problem, where=where) from None
    else:
        raise InvalidInputError(field, value, problem, where=where)
    if hasattr(stamp, "to_pydatetime"):  # pandas Timestamp
        stamp = stamp.to_pydatetime()
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.timezone.utc)
    return stamp


def validate_provenance(value: Any) -> dict[str, Any]:
    """The Airflow try a decision was made for (``PROVENANCE_KEYS``); {} when not given."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidInputError(
            "provenance", value, f"must be a mapping with keys among {list(PROVENANCE_KEYS)}"
        )
    unknown = sorted(set(value) - set(PROVENANCE_KEYS))
    if unknown:
        raise InvalidInputError("provenance", unknown, f"unknown key(s); allowed: {list(PROVENANCE_KEYS)}")
    out: dict[str, Any] = {}
    for key in ("dag_id", "task_id", "run_id"):
        out[key] = optional_label(value.get(key), f"provenance.{key}", "provenance")
    if not is_missing(value.get("map_index")):
        out["map_index"] = validate_int(
            value["map_index"], "provenance.map_index", minimum=-1, where="provenance"
        )
    if not is_missing(value.get("try_number")):
        out["try_number"] = validate_int(
            value["try_number"], "provenance.try_number", minimum=0, where="provenance"
        )
    ti_id = validate_ti_id(value.get("ti_id"), "provenance.ti_id", where="provenance")
    if ti_id is not None:
        out["ti_id"] = ti_id
    return out


def flatten_run(record: Any, where: str) -> dict[str, Any]:
    """One run as flat fields: a context given as one mapping is merged into the run's fields."""
    if not isinstance(record, Mapping):
        raise InvalidInputError("run", record, "each run must be a mapping of field to value", where=where)
    nested = record.get("context")
    if nested is not None and not is_missing(nested):
        # Context given as one mapping (record_run's style) rather than as flat columns.
        if not isinstance(nested, Mapping):
            raise InvalidInputError(
                "context", nested, "must be a mapping of property name to value", where=where
            )
        clash = sorted(set(nested) & _RUN_FIELDS)
        if clash:
            raise InvalidInputError(
                "context", clash, "these names are run fields, not context properties", where=where
            )
        record = {**{k: v for k, v in record.items() if k != "context"}, **nested}
    elif "context" in record:
        record = {k: v for k, v in record.items() if k != "context"}
    return dict(record)


def prepare_runs(
    runs: Any, stored_kinds: Callable[[Iterable[str]], Mapping[str, StoredKinds]]
) -> list[dict[str, Any]]:
    """Validate runs (a DataFrame or a list of mappings) into store rows, every row before any is
    written. ``stored_kinds``: per job type, what its stored runs hold for each property
    (conform_property); properties no stored run has yet take their kind from this batch."""
    source, lines = "runs", None
    if is_dataframe(runs):
        # A frame read from a file (datasets.load_runs_file) names its file and each row's line
        # (by index label, so a filtered or sorted frame still finds its rows' lines), so that a
        # bad provenance value is reported where the user can find it.
        file_lines = runs.attrs.get(SOURCE_LINES_ATTR)
        if (
            runs.attrs.get(SOURCE_ATTR)
            and isinstance(file_lines, Mapping)
            and all(label in file_lines for label in runs.index)
        ):
            source, lines = str(runs.attrs[SOURCE_ATTR]), [file_lines[label] for label in runs.index]
        frame = validate_runs(runs, where=source, lines=lines)
        check_complete_properties(frame, where=source, lines=lines)
        # NaN is how a frame says "this run has no such property" (checked just above)
        records = [
            {k: v for k, v in rec.items() if not is_missing(v)} for rec in frame.to_dict(orient="records")
        ]
    elif isinstance(runs, Sequence) and not isinstance(runs, (str, bytes)):
        records = list(runs)
        if not records:
            raise InvalidInputError("runs", "<empty>", "no runs given")
    else:
        raise InvalidInputError("runs", type(runs).__name__, "must be a pandas DataFrame or a list of dicts")

    def where(i: int) -> str:
        return f"{source} line {lines[i]}" if lines is not None else f"{source} row {i}"

    flat = [flatten_run(rec, where(i)) for i, rec in enumerate(records)]
    by_job: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for i, rec in enumerate(flat):
        job = validate_job_type(rec.get("job_type"), where=where(i))
        props = {k: v for k, v in rec.items() if k not in _RUN_FIELDS}
        by_job.setdefault(job, []).append((where(i), props))
    stored = stored_kinds(by_job)
    kinds: dict[str, StoredKinds] = {}
    for job, contexts in by_job.items():
        new = [(w, {k: v for k, v in c.items() if k not in stored[job].kinds}) for w, c in contexts]
        kinds[job] = stored[job].with_new(batch_kinds(new))
    return [prepare_run(rec, where(i), kinds) for i, rec in enumerate(flat)]


def prepare_run(record: dict[str, Any], where: str, kinds: Mapping[str, StoredKinds]) -> dict[str, Any]:
    """Validate one flat run (canonical fields, context, provenance) into store columns; ``kinds``:
    per job type, the kind of each property (conform_property)."""
    job_type = validate_job_type(record.get("job_type"), where=where)
    framework = validate_label(record.get("framework"), "framework", where=where).lower()
    scale_out = validate_scale_out(record.get("scale_out"), where=where)
    runtime_s = validate_runtime(record.get("runtime_s"), where=where)
    context = conform_context(record, kinds.get(job_type, NO_KINDS), where=where)
    status = "success" if is_missing(record.get("status")) else record.get("status")
    if status not in RUN_STATUSES:
        raise InvalidInputError("status", status, f"must be one of {list(RUN_STATUSES)}", where=where)
    dag_id = optional_label(record.get("dag_id"), "dag_id", where)
    task_id = optional_label(record.get("task_id"), "task_id", where)
    run_id = optional_label(record.get("run_id"), "run_id", where)
    source = record.get("source")
    if is_missing(source):
        source = "observed" if dag_id is not None else "trace"
    if source not in RUN_SOURCES:
        raise InvalidInputError("source", source, f"must be one of {list(RUN_SOURCES)}", where=where)
    row: dict[str, Any] = {
        "job_type": job_type,
        "framework": framework,
        "scale_out": scale_out,
        "runtime_s": runtime_s,
        "context": context,
        "context_fingerprint": context_fingerprint(job_type, context),
        "status": status,
        "source": source,
        "dataset": optional_label(record.get("dataset"), "dataset", where),
        "external_id": optional_label(record.get("external_id"), "external_id", where),
        "started_at": validate_timestamp(record.get("started_at"), "started_at", where),
        "ended_at": validate_timestamp(record.get("ended_at"), "ended_at", where),
        "decision_id": None
        if is_missing(record.get("decision_id"))
        else validate_int(record.get("decision_id"), "decision_id"),
        "queue_s": optional_seconds(record.get("queue_s"), "queue_s", where),
        "requested_scale_out": None
        if is_missing(record.get("requested_scale_out"))
        else validate_scale_out(record.get("requested_scale_out"), field="requested_scale_out", where=where),
        "excluded_reason": optional_label(record.get("excluded_reason"), "excluded_reason", where),
    }
    if row["started_at"] and row["ended_at"] and row["ended_at"] < row["started_at"]:
        raise InvalidInputError("ended_at", record.get("ended_at"), "is before started_at", where=where)
    if source == "observed":
        for name, value in (("dag_id", dag_id), ("task_id", task_id), ("run_id", run_id)):
            if value is None:
                raise InvalidInputError(
                    name,
                    record.get(name),
                    "an observed run needs its Airflow dag_id, task_id and run_id",
                    where=where,
                )
        map_index = record.get("map_index")
        try_number = record.get("try_number")
        row.update(
            dag_id=dag_id,
            task_id=task_id,
            run_id=run_id,
            map_index=-1
            if is_missing(map_index)
            else validate_int(map_index, "map_index", minimum=-1, where=where),
            try_number=1
            if is_missing(try_number)
            else validate_int(try_number, "try_number", minimum=0, where=where),
            ti_id=validate_ti_id(record.get("ti_id"), where=where),
        )
    elif dag_id is not None or not is_missing(record.get("ti_id")):
        # Trace rows carry no Airflow try; a stray dag_id would not make them unique anyway.
        raise InvalidInputError(
            "source", source, "a trace row has no dag_id or ti_id; use source='observed'", where=where
        )
    return row


def runs_frame(rows: Iterable[Any], *, provenance: bool = False) -> pd.DataFrame:
    """Stored runs (``store.Run`` rows) as the canonical frame the model takes: context properties
    as columns, plus ``id``; with ``provenance``, every stored field."""
    import pandas as pd

    records = []
    for r in rows:
        rec: dict[str, Any] = {
            **r.context,
            "id": r.id,
            "job_type": r.job_type,
            "framework": r.framework,
            "scale_out": r.scale_out,
            "runtime_s": r.runtime_s,
        }
        if provenance:
            rec.update(
                status=r.status,
                source=r.source,
                dataset=r.dataset,
                dag_id=r.dag_id,
                task_id=r.task_id,
                run_id=r.run_id,
                map_index=r.map_index,
                try_number=r.try_number,
                ti_id=r.ti_id,
                started_at=r.started_at,
                ended_at=r.ended_at,
                external_id=r.external_id,
                decision_id=r.decision_id,
                queue_s=r.queue_s,
                requested_scale_out=r.requested_scale_out,
                excluded_reason=r.excluded_reason,
            )
        records.append(rec)
    columns = ["id", *REQUIRED_COLUMNS]
    frame = pd.DataFrame.from_records(records) if records else pd.DataFrame(columns=columns)
    first = [c for c in columns if c in frame.columns]
    return frame[first + [c for c in frame.columns if c not in first]]
