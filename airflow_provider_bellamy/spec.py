"""``SizingSpec``: what to size and how, parsed and checked in one place.

The same arguments reach sizing from three doors: a pipeline YAML file (``config``), the
operators' keyword arguments (``operators.sizing.BellamySizingMixin``, parsed after Airflow
rendered the templates) and the façade's ``size()``/``predict()``. Each door hands them to
:meth:`SizingSpec.parse`, so a value means the same thing whichever door it came through, and a
bad one is refused with the field and the value named.

Values Jinja rendered as text are converted where that is unambiguous (``"8"`` → 8, ``"0.9"``
→ 0.9, ``"[1, 2, 4]"`` or ``"1,2,4"`` → ``[1, 2, 4]``, ``"1-4"`` → ``[1, 2, 3, 4]``, ``"15m"``, ``"0:15:00"`` (a rendered timedelta) or
``"PT15M"`` → 900 s wherever a duration is accepted) and refused otherwise. Pure: no Airflow, no store, no torch.
"""

from __future__ import annotations

import ast
import dataclasses
import datetime as dt
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_bellamy.decisions import OBJECTIVES
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.records import (
    FORBIDDEN_CONTEXT_KEYS,
    MAX_CANDIDATES,
    conform_property,
    validate_confidence,
    validate_job_type,
    validate_label,
    validate_property_name,
    validate_scale_out,
    validate_scale_out_list,
)

# What a launch does when no candidate meets the target at the confidence asked (docs/airflow.md):
# fail; warn, the most likely to meet it; run-likely, the smallest predicted to meet it (the confidence given up,
# not the target); run-max, the largest. sizing.ON_INFEASIBLE_RULES: the rule of each.
ON_INFEASIBLE: tuple[str, ...] = ("fail", "warn", "run-likely", "run-max")

# The frameworks the provider's operators launch. Another is sized only once runs of it are
# recorded (``resolution.check_framework``): a typo such as "sprak" would be an unseen property value.
LAUNCHED_FRAMEWORKS: tuple[str, ...] = ("spark", "flink")

# ``deadline: dag`` (or the operators' ``use_dag_deadline=True``): the DAG's DeadlineAlert.
DAG_DEADLINE = "dag"
RESERVE_AUTO = "auto"

# The arguments Airflow renders as templates (the operators' ``template_fields``).
TEMPLATED_ARGUMENTS: tuple[str, ...] = (
    "job_type",
    "properties",
    "scale_outs",
    "target",
    "deadline",
    "reserve",
    "confidence",
    "default_scale_out",
)

_NUMBER_RE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_AMOUNT = r"(\d+(?:\.\d+)?)"
# 2w, 1d12h, 1h30m, 90s: each unit once, largest first; a bare number alone is seconds ("1h30" is
# refused: minutes or seconds?)
_UNITS_RE = re.compile("".join(rf"(?:{_AMOUNT}\s*{unit}\s*)?" for unit in "wdhms"))
_UNIT_S = (604_800.0, 86_400.0, 3_600.0, 60.0, 1.0)  # w d h m s
# what Jinja renders a timedelta to (``str(timedelta)``): "0:15:00", "1 day, 2:00:00", "-1 day, 23:00:00"
_CLOCK_RE = re.compile(r"(?:([+-]?\d+) days?, )?(\d+):([0-5]\d):([0-5]\d(?:\.\d+)?)")
# ISO 8601 without years or months, whose length varies (pendulum's and Airflow's text): PT15M, P1DT2H
_ISO_RE = re.compile(rf"P(?:{_AMOUNT}W)?(?:{_AMOUNT}D)?(?:T(?:{_AMOUNT}H)?(?:{_AMOUNT}M)?(?:{_AMOUNT}S)?)?")
DURATION_PROBLEM = (
    "must be a duration: seconds, a timedelta, or text like 90, 90s, 15m, 1h30m, 2d, 0:15:00 or PT15M"
)


def is_template(value: Any) -> bool:
    """A value Airflow has not rendered yet: a Jinja template, or an XCom reference (anything
    with ``iter_references``, as Airflow's ``ResolveMixin``: ``task.output``)."""
    return (isinstance(value, str) and "{{" in value) or hasattr(value, "iter_references")


def _absent(value: Any) -> bool:
    # a template rendering nothing ("{{ params.deadline or '' }}") means "not given"
    return value is None or (isinstance(value, str) and not value.strip())


def _number(value: Any, field: str, problem: str, where: str | None) -> float:
    """A finite number from a number or from text that is one (as Jinja renders it)."""
    if isinstance(value, bool):
        raise InvalidInputError(field, value, problem, where=where)
    if isinstance(value, (int, float)) or (isinstance(value, str) and _NUMBER_RE.fullmatch(value.strip())):
        number = float(value)
    else:
        raise InvalidInputError(field, value, problem, where=where)
    if not math.isfinite(number):
        raise InvalidInputError(field, value, problem, where=where)
    return number


def _duration_text(text: str) -> float | None:
    """Seconds from text one of the duration forms reads unambiguously, else None."""
    text = text.strip()
    if _NUMBER_RE.fullmatch(text):
        return float(text)
    clock = _CLOCK_RE.fullmatch(text)
    if clock:
        days, hours, minutes, seconds = clock.groups()
        return int(days or 0) * 86_400.0 + int(hours) * 3_600.0 + int(minutes) * 60.0 + float(seconds)
    iso = _ISO_RE.fullmatch(text.upper()) if text[:1] in "Pp" else None
    units = None if iso else _UNITS_RE.fullmatch(text)
    match = iso or units
    if match is None or not any(match.groups()):
        return None
    # both forms name weeks, days, hours, minutes, seconds in this order
    return sum(float(a) * unit for a, unit in zip(match.groups(), _UNIT_S, strict=True) if a)


def parse_duration(value: Any, field: str, *, where: str | None = None, allow_zero: bool = False) -> float:
    """Seconds from a number, a ``timedelta``, or text: ``90``, ``90s``, ``15m``, ``1h30m``, ``1d12h``,
    ``2w``; ``0:15:00`` or ``1 day, 2:00:00`` (a timedelta as Jinja renders it); ISO 8601 ``PT15M``.

    The one reader of durations: sizing targets and reserves, pipeline files, the CLI's
    ``--older-than``, the store's retention."""
    seconds: float | None = None
    if isinstance(value, dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        seconds = _duration_text(value)
    if seconds is None:
        raise InvalidInputError(field, value, DURATION_PROBLEM, where=where)
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise InvalidInputError(field, value, f"must be a finite duration {bound} seconds", where=where)
    return seconds


def _rendered_literal(text: str, field: str, problem: str, where: str | None) -> Any:
    """The value a template rendered as text: JSON, or a Python literal, as Jinja renders a list or
    dict (``"{'cores': 8}"``); never code (``ast.literal_eval`` reads literals only)."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise InvalidInputError(field, text, problem, where=where) from None


SCALE_OUTS_PROBLEM = (
    "must be candidate scale-outs: a list of integers >= 1 or its text (1,2,4 or [1, 2, 4]), "
    "or a range: {min: 1, max: 8, step: 1} or its text 1-8 (2-12:2 every second)"
)
# Candidates as text, where a template, a shell or a pipeline file gives them: integers joined by
# commas ("2,4,8"; one candidate "8,") or a range "2-12" / "2-12:2" (min-max:step, both ends
# included). Other text is read as a literal. One number alone is refused, as text or not: the
# only candidate, or all up to it ("{{ params.max_nodes }}")? Either guess would size silently wrong.
_SCALE_OUT_ITEMS_RE = re.compile(r"(?:\d+\s*,\s*)+\d*")
_SCALE_OUT_RANGE_RE = re.compile(r"(\d+)\s*-\s*(\d+)(?:\s*:\s*(\d+))?")


def parse_scale_outs(value: Any, field: str = "scale_outs", where: str | None = None) -> list[int]:
    """Candidate scale-outs, sorted without repeats, from a list (tuple, range, array), a range
    ``{min, max, step}``, or text: ``"1,2,4"``, ``"[1, 2, 4]"`` (a list as a template renders it),
    ``"1-8"`` or ``"2-12:2"``. The one reader of candidates: the operators, pipeline files, the
    façade and the CLI's ``--scale-outs``."""
    given = value
    if isinstance(value, str):
        text = value.strip()
        span = _SCALE_OUT_RANGE_RE.fullmatch(text)
        if span:
            lo, hi, step = span.groups()
            bounds = {"min": int(lo), "max": int(hi), "step": int(step or 1)}
            try:
                return _scale_out_range(bounds, field, where)
            except InvalidInputError as exc:  # named by the text given, not by a key it has not
                key = exc.field.removeprefix(f"{field}.")
                problem = exc.problem if exc.problem.startswith("gives") else f"{key} {exc.problem}"
                raise InvalidInputError(field, value, problem, where=where) from None
        if _SCALE_OUT_ITEMS_RE.fullmatch(text):
            value = [int(item) for item in text.split(",") if item.strip()]
        else:
            value = _rendered_literal(text, field, SCALE_OUTS_PROBLEM, where)
            if isinstance(value, str):
                raise InvalidInputError(field, text, SCALE_OUTS_PROBLEM, where=where)
    if isinstance(value, Mapping):
        return _scale_out_range(value, field, where)
    if isinstance(value, int) and not isinstance(value, bool):
        raise InvalidInputError(
            field,
            given,
            f"is one number: give [{value}] (or {value},) for one candidate, or 1-{value} for 1 to {value}",
            where=where,
        )
    if isinstance(value, (list, tuple)) and len(value) <= MAX_CANDIDATES:
        for i, item in enumerate(value):  # named by position (the list's own checks name the list)
            validate_scale_out(item, field=f"{field}[{i}]", where=where)
    try:
        values = validate_scale_out_list(value, field=field)
    except InvalidInputError as exc:
        raise InvalidInputError(exc.field, exc.value, exc.problem, where=where) from None
    return sorted(set(values))


def _scale_out_range(value: Mapping[str, Any], field: str, where: str | None) -> list[int]:
    extra = set(value) - {"min", "max", "step"}
    if extra:
        raise InvalidInputError(
            f"{field}.{sorted(extra)[0]}", value, "allowed keys: min, max, step", where=where
        )
    for key in ("min", "max"):
        if key not in value:
            raise InvalidInputError(f"{field}.{key}", None, "is required in a range", where=where)
    lo, hi, step = (
        validate_scale_out(value.get(key, 1), field=f"{field}.{key}", where=where)
        for key in ("min", "max", "step")
    )
    if hi < lo:
        raise InvalidInputError(f"{field}.max", hi, f"must be >= min ({lo})", where=where)
    candidates = range(lo, hi + 1, step)
    if len(candidates) > MAX_CANDIDATES:
        raise InvalidInputError(
            f"{field}.max",
            hi,
            f"gives {len(candidates):,} candidate scale-outs, more than {MAX_CANDIDATES:,}; "
            "narrow the range or give a step",
            where=where,
        )
    return list(candidates)


def parse_confidence(value: Any, field: str = "confidence", where: str | None = None) -> float:
    number = float(value) if isinstance(value, str) and _NUMBER_RE.fullmatch(value.strip()) else value
    try:
        return validate_confidence(number, field=field, where=where)
    except InvalidInputError as exc:
        raise InvalidInputError(field, value, exc.problem, where=where) from None  # the value as given


def parse_objective(value: Any, field: str = "objective", where: str | None = None) -> str:
    if value not in OBJECTIVES:
        raise InvalidInputError(field, value, f"must be one of {', '.join(OBJECTIVES)}", where=where)
    return str(value)


def parse_price(value: Any, field: str = "price_per_node_hour", where: str | None = None) -> float | None:
    if _absent(value):
        return None
    price = _number(value, field, "must be a finite number >= 0", where)
    if price < 0:
        raise InvalidInputError(field, value, "must be a finite number >= 0", where=where)
    return price


def parse_target(value: Any, field: str = "target_s", where: str | None = None) -> float | None:
    """A runtime target in seconds (> 0), or None."""
    return None if _absent(value) else parse_duration(value, field, where=where)


def parse_properties(value: Any, field: str = "properties", where: str | None = None) -> dict[str, Any]:
    """The context as given: a mapping (or its text, JSON or as a template renders a dict). Values are only
    checked here; they are converted where the job type's stored runs are known
    (``records.conform_context``), so that ``"08"`` keeps its identity where runs hold text."""
    value = parse_mapping(value, field, where, what="a mapping of property to value")
    for key, item in value.items():
        validate_property_name(key, f"{field} key", where=where)
        if key in FORBIDDEN_CONTEXT_KEYS:
            raise InvalidInputError(
                f"{field}.{key}", item, "is not a context property (it is set by sizing)", where=where
            )
        if not is_template(item):
            conform_property(item, None, field=f"{field}.{key}", where=where, name=key)
    return value


def parse_argument_list(value: Any, field: str = "application_args", where: str | None = None) -> list[Any]:
    """A launched program's arguments: a list (or tuple), or a list's text as a template renders it.
    One string is refused, never split: arguments are passed as a list, never through a shell."""
    problem = "must be a list of arguments (one string is never split into arguments)"
    if value is None:
        return []
    if isinstance(value, str):
        text = value.strip()
        value = _rendered_literal(text, field, problem, where) if text[:1] in "[(" else text
    if not isinstance(value, (list, tuple)):
        raise InvalidInputError(field, value, problem, where=where)
    for i, item in enumerate(value):
        # None (a YAML item left empty), a list or a mapping would be passed on as its Python text
        if item is None or isinstance(item, (list, tuple, Mapping)):
            raise InvalidInputError(
                f"{field}[{i}]", item, "must be one argument (text or a number)", where=where
            )
    # an item still to be rendered (a template, an XCom reference) is left for rendering
    return [item if is_template(item) else str(item) for item in value]


def parse_mapping(
    value: Any, field: str, where: str | None = None, *, what: str = "a mapping"
) -> dict[str, Any]:
    """Settings such as an operator's ``conf``: a mapping, or its text as a template renders it (JSON,
    or a Python literal; never code)."""
    if value is None:
        return {}
    if isinstance(value, str):
        value = _rendered_literal(value.strip(), field, "must be a mapping (or its text)", where)
    if not isinstance(value, Mapping):
        raise InvalidInputError(field, value, f"must be {what}", where=where)
    return dict(value)


def parse_conf(value: Any, field: str = "conf", where: str | None = None) -> dict[str, Any]:
    """A launched program's options (``conf``: ``--conf k=v`` for Spark, ``-D k=v`` for Flink): a
    mapping (or its text) of option name to one value. A value that is no scalar (``None`` from a
    YAML key left empty, a nested mapping or list) would reach the cluster as its Python text
    (``k=None``), and a name with ``=`` would split at the wrong place: both refused, named."""
    conf = parse_mapping(value, field, where)
    for key, item in conf.items():
        if not isinstance(key, str) or not key.strip() or "=" in key or key != key.strip():
            raise InvalidInputError(
                f"{field}.{key}",
                key,
                "is no option name (non-empty, without '=' or spaces around)",
                where=where,
            )
        if is_template(item):
            continue
        if isinstance(item, float) and not math.isfinite(item):
            raise InvalidInputError(f"{field}.{key}", item, "must be a finite number", where=where)
        if not isinstance(item, (str, int, float)):
            raise InvalidInputError(
                f"{field}.{key}", item, "must be one value (text, a number or a boolean)", where=where
            )
    return conf


def parse_job_type(value: Any, field: str = "job_type", where: str | None = None) -> str:
    """A job type's name (records' one rule: ``all`` is reserved for the model of every job type)."""
    return validate_job_type(value, where, field=field)


def _parse_text(value: Any, field: str, where: str | None) -> str | None:
    return None if value is None else validate_label(value, field, where=where)


def _parse_framework(value: Any, field: str, where: str | None) -> str | None:
    return None if value is None else validate_label(value, field, where=where).lower()


def _parse_deadline(value: Any, field: str, where: str | None) -> str | None:
    """An aware deadline as ISO-8601 text, ``"dag"``, or None."""
    if _absent(value):
        return None
    if value == DAG_DEADLINE:
        return DAG_DEADLINE
    from airflow_provider_bellamy.deadlines import parse_deadline

    try:
        return parse_deadline(value, field).isoformat()
    except InvalidInputError as exc:
        raise InvalidInputError(field, value, exc.problem, where=where) from None


def _parse_flag(value: Any, field: str, where: str | None) -> bool:
    if not isinstance(value, bool):
        raise InvalidInputError(field, value, "must be True or False", where=where)
    return value


def _parse_reserve(value: Any, field: str, where: str | None) -> float | str:
    if _absent(value):
        return 0.0
    if isinstance(value, str) and value.strip() == RESERVE_AUTO:
        return RESERVE_AUTO
    return parse_duration(value, field, where=where, allow_zero=True)


def _parse_default_task_reserve(value: Any, field: str, where: str | None) -> float:
    return 0.0 if _absent(value) else parse_duration(value, field, where=where, allow_zero=True)


def _parse_on_infeasible(value: Any, field: str, where: str | None) -> str:
    policy = str(value).strip().replace("_", "-")
    if policy not in ON_INFEASIBLE:
        raise InvalidInputError(field, value, f"must be one of {', '.join(ON_INFEASIBLE)}", where=where)
    return policy


def _parse_candidates(value: Any, field: str, where: str | None) -> list[int] | None:
    return None if value is None else parse_scale_outs(value, field, where)


def _parse_default_scale_out(value: Any, field: str, where: str | None) -> int | None:
    return None if _absent(value) else validate_scale_out(value, field=field, where=where)


def _arg(name: str, parse: Callable[[Any, str, str | None], Any]) -> dict[str, Any]:
    """A spec field's metadata: the argument it is given as, and its parser."""
    return {"argument": name, "parse": parse}


@dataclass(frozen=True)
class SizingSpec:
    """What to size and how: every sizing argument of the operators, the YAML and the façade.

    ``scale_outs`` None: the candidates are decided at launch (the Flink operator reads them from
    the cluster). ``deadline`` is aware ISO-8601 text; ``use_dag_deadline`` takes it from the DAG's
    ``DeadlineAlert``. ``reserve`` is seconds or ``"auto"``.
    """

    job_type: str = field(metadata=_arg("job_type", parse_job_type))
    framework: str | None = field(default=None, metadata=_arg("framework", _parse_framework))
    properties: dict[str, Any] = field(default_factory=dict, metadata=_arg("properties", parse_properties))
    scale_outs: list[int] | None = field(default=None, metadata=_arg("scale_outs", _parse_candidates))
    target_s: float | None = field(default=None, metadata=_arg("target", parse_target))
    deadline: str | None = field(default=None, metadata=_arg("deadline", _parse_deadline))
    use_dag_deadline: bool = field(default=False, metadata=_arg("use_dag_deadline", _parse_flag))
    deadline_alert_name: str | None = field(default=None, metadata=_arg("deadline_alert_name", _parse_text))
    reserve: float | str = field(default=0.0, metadata=_arg("reserve", _parse_reserve))
    default_task_reserve_s: float = field(
        default=0.0, metadata=_arg("default_task_reserve", _parse_default_task_reserve)
    )
    confidence: float = field(default=0.9, metadata=_arg("confidence", parse_confidence))
    objective: str = field(default="min_scale_out", metadata=_arg("objective", parse_objective))
    price_per_node_hour: float | None = field(default=None, metadata=_arg("price_per_node_hour", parse_price))
    on_infeasible: str = field(default="warn", metadata=_arg("on_infeasible", _parse_on_infeasible))
    default_scale_out: int | None = field(
        default=None, metadata=_arg("default_scale_out", _parse_default_scale_out)
    )
    # arguments still holding an unrendered template (kept verbatim); empty once rendered
    templated: frozenset[str] = field(default=frozenset(), compare=False)

    @classmethod
    def parse(
        cls,
        arguments: Mapping[str, Any],
        *,
        where: str | None = None,
        prefix: str = "",
        names: Mapping[str, str] | None = None,
        defer_templates: bool = False,
        require_scale_outs: bool = True,
    ) -> SizingSpec:
        """The spec of ``arguments`` (keyword arguments as the operators take them; absent ones
        take their defaults). Errors name ``prefix`` + the argument (renamed by ``names``, e.g.
        ``{"scale_outs": "scale_out"}`` for the YAML) and the value, at ``where``.

        ``defer_templates``: arguments Airflow renders that still hold a template are kept
        verbatim (listed in ``templated``) and checked once rendered; checks spanning them wait.
        """
        names = names or {}
        unknown = sorted(set(arguments) - set(SIZING_ARGUMENTS))
        if unknown:
            raise InvalidInputError(
                prefix + unknown[0], arguments[unknown[0]], "is no sizing argument", where=where
            )

        def name(argument: str) -> str:
            return prefix + names.get(argument, argument)

        values: dict[str, Any] = {}
        deferred: set[str] = set()
        for spec_field in _FIELDS:
            argument = spec_field.metadata["argument"]
            if argument not in arguments:
                if argument == "job_type":
                    raise InvalidInputError(name(argument), None, "is required", where=where)
                continue
            raw = arguments[argument]
            if defer_templates and argument in TEMPLATED_ARGUMENTS and is_template(raw):
                values[spec_field.name] = raw
                deferred.add(argument)
                continue
            values[spec_field.name] = spec_field.metadata["parse"](raw, name(argument), where)
        spec = cls(**values, templated=frozenset(deferred))
        spec._check_together(name, arguments, where, require_scale_outs)
        if spec.deadline == DAG_DEADLINE:
            spec = dataclasses.replace(spec, deadline=None, use_dag_deadline=True)
        return spec

    def _check_together(
        self,
        name: Callable[[str], str],
        arguments: Mapping[str, Any],
        where: str | None,
        require_scale_outs: bool,
    ) -> None:
        """The rules between arguments (each only once its arguments are rendered)."""
        ready = lambda *args: not set(args) & self.templated  # noqa: E731
        if require_scale_outs and self.scale_outs is None:
            raise InvalidInputError(
                name("scale_outs"), None, "is required: a list of integers or {min: .., max: ..}", where=where
            )
        if self.use_dag_deadline and self.deadline not in (None, DAG_DEADLINE):
            raise InvalidInputError(
                name("use_dag_deadline"),
                True,
                "give either deadline or use_dag_deadline, not both",
                where=where,
            )
        has_deadline = self.deadline is not None or self.use_dag_deadline
        if self.target_s is not None and has_deadline:
            raw = arguments.get("deadline") if self.deadline is not None else True
            argument = "deadline" if self.deadline is not None else "use_dag_deadline"
            raise InvalidInputError(
                name(argument), raw, "give either target or deadline, not both", where=where
            )
        if self.reserve not in (0.0, None) and not has_deadline and ready("reserve", "deadline"):
            raise InvalidInputError(
                name("reserve"), arguments.get("reserve"), "only applies with a deadline", where=where
            )
        # Settings read only in one combination would otherwise be taken and ignored without a word.
        if self.default_task_reserve_s and self.reserve != RESERVE_AUTO and ready("reserve"):
            raise InvalidInputError(
                name("default_task_reserve"),
                arguments.get("default_task_reserve"),
                f"only applies with {name('reserve')}='auto' (a deadline's reserve predicted from "
                "the downstream tasks' durations: the cost of a task with none recorded)",
                where=where,
            )
        dag_deadline = self.use_dag_deadline or self.deadline == DAG_DEADLINE
        if self.deadline_alert_name is not None and not dag_deadline and ready("deadline"):
            raise InvalidInputError(
                name("deadline_alert_name"),
                self.deadline_alert_name,
                f"only applies with the DAG's DeadlineAlert ({name('deadline')}='dag' or use_dag_deadline=True)",
                where=where,
            )
        if self.on_infeasible == "run-likely" and self.objective == "fastest":
            raise InvalidInputError(
                name("on_infeasible"),
                arguments.get("on_infeasible"),
                "chooses among the sizes predicted to meet the target by the objective; with "
                "objective fastest it would launch the fastest, as warn",
                where=where,
            )
        if self.objective == "min_cost" and self.price_per_node_hour is None:
            raise InvalidInputError(
                name("price_per_node_hour"), None, "is required with objective min_cost", where=where
            )
        if (
            self.default_scale_out is not None
            and self.scale_outs is not None
            and ready("default_scale_out", "scale_outs")
            and self.default_scale_out not in self.scale_outs
        ):
            raise InvalidInputError(
                name("default_scale_out"),
                self.default_scale_out,
                f"must be one of {name('scale_outs')} {self.scale_outs}",
                where=where,
            )

    def check_sizable(self, *, prefix: str = "") -> None:
        """Refuse a spec that cannot be sized as it is: no candidates, or an argument that is still
        a template (parsed with ``defer_templates`` before Airflow rendered it)."""
        if self.scale_outs is None:
            raise InvalidInputError(f"{prefix}scale_outs", None, "is required to size")
        if self.templated:
            name = sorted(self.templated)[0]
            raise InvalidInputError(
                f"{prefix}{name}", self.arguments()[name], "is a template not rendered yet"
            )

    def arguments(self) -> dict[str, Any]:
        """The spec as the operators' keyword arguments (``from_config`` passes them on)."""
        out = {f.metadata["argument"]: getattr(self, f.name) for f in _FIELDS}
        out["properties"] = dict(self.properties)
        if isinstance(self.scale_outs, list):
            out["scale_outs"] = list(self.scale_outs)
        return out


_FIELDS: tuple[dataclasses.Field[Any], ...] = tuple(f for f in dataclasses.fields(SizingSpec) if f.metadata)

# The sizing arguments, as the operators and the YAML (``scale_out`` there) take them.
SIZING_ARGUMENTS: tuple[str, ...] = tuple(f.metadata["argument"] for f in _FIELDS)


# ``Bellamy.size``/``predict`` name two arguments otherwise than the operators (in their errors).
_API_NAMES = {"properties": "context", "target": "target_s"}


def parse_api_arguments(job_type: Any, context: Any, scale_outs: Any, **more: Any) -> SizingSpec:
    """The sizing arguments of a ``Bellamy.size``/``predict`` call (``more``: the others, by their
    operator names), parsed as the operators' and the YAML's."""
    arguments = {"job_type": job_type, "properties": context, "scale_outs": scale_outs, **more}
    try:
        return SizingSpec.parse(arguments, names=_API_NAMES)
    except InvalidInputError as exc:
        if not exc.field.startswith("scale_outs["):
            raise
        # the API names the argument it was given, with the whole list (as records' checks do)
        raise InvalidInputError(
            "scale_outs", arguments["scale_outs"], f"{exc.field}: {exc.problem}"
        ) from None
