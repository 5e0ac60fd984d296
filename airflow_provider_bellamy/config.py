"""Pipeline configs: one YAML file describes the jobs of a pipeline and how to size them.

.. code-block:: yaml

    defaults:                    # optional; merged under every job
      framework: spark
      confidence: 0.9
    jobs:
      daily_grep:                # the job's name (used by from_config)
        job_type: grep           # default: the job's name
        properties:              # the context (per node, never cluster totals)
          machine_type: local-2c
          data_size_mb: 64
        scale_out: {min: 1, max: 4}   # or a list [1, 2, 4]
        target: 15m              # seconds, or 90s / 15m / 1h30m; or …
        # deadline: "2025-01-01T06:00:00+00:00" | dag | "{{ templated }}"
        # reserve: 10m | auto    # time the downstream tasks still need
        confidence: 0.9
        objective: min_scale_out # min_scale_out | min_cost | fastest
        price_per_node_hour: 0.2
        on_infeasible: warn      # fail | warn | run-max
        default_scale_out: 2     # used when no model can answer
        spark:                   # arguments for BellamySparkSubmitOperator
          application: ../jobs/grep.py   # relative to this file
          application_args: [--lines, "200000"]

Every error names the file, the job and the key: ``pipeline.yaml: jobs.daily_grep.confidence=1.5: …``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_bellamy.decisions import OBJECTIVES
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.records import MAX_CANDIDATES, conform_property, validate_confidence

ON_INFEASIBLE: tuple[str, ...] = ("fail", "warn", "run-max")

JOB_KEYS: frozenset[str] = frozenset(
    {
        "job_type",
        "framework",
        "properties",
        "scale_out",
        "target",
        "deadline",
        "reserve",
        "default_task_reserve",
        "confidence",
        "objective",
        "price_per_node_hour",
        "on_infeasible",
        "default_scale_out",
        "spark",
        "flink",
        "description",
    }
)

# Arguments a config may hand to BellamySparkSubmitOperator; the sizing ones are
# set by the operator itself and refused here so that one file cannot say two things.
SPARK_KEYS: frozenset[str] = frozenset(
    {
        "application",
        "application_args",
        "conf",
        "conn_id",
        "executor_cores",
        "executor_memory",
        "driver_memory",
        "name",
        "py_files",
        "files",
        "jars",
        "packages",
        "env_vars",
        "java_class",
        "verbose",
    }
)

_DURATION_RE = re.compile(r"^\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*$")


@dataclass(frozen=True)
class JobConfig:
    """One job of a pipeline config, validated."""

    name: str
    job_type: str
    framework: str
    properties: dict[str, Any]
    scale_outs: list[int]
    target_s: float | None = None
    deadline: str | None = None  # ISO-8601, a template, or "dag" (the DAG's DeadlineAlert)
    reserve: float | str = 0.0  # seconds or "auto"
    default_task_reserve_s: float = 0.0
    confidence: float = 0.9
    objective: str = "min_scale_out"
    price_per_node_hour: float | None = None
    on_infeasible: str = "warn"
    default_scale_out: int | None = None
    spark: dict[str, Any] = field(default_factory=dict)
    flink: dict[str, Any] = field(default_factory=dict)
    description: str | None = None
    source: str = "<memory>"

    @property
    def use_dag_deadline(self) -> bool:
        return self.deadline == "dag"

    def sizing_kwargs(self) -> dict[str, Any]:
        """Keyword arguments shared by every Bellamy sizing operator."""
        return {
            "job_type": self.job_type,
            "framework": self.framework,
            "properties": dict(self.properties),
            "scale_outs": list(self.scale_outs),
            "target": self.target_s,
            "deadline": None if self.use_dag_deadline else self.deadline,
            "use_dag_deadline": self.use_dag_deadline,
            "reserve": self.reserve,
            "default_task_reserve": self.default_task_reserve_s,
            "confidence": self.confidence,
            "objective": self.objective,
            "price_per_node_hour": self.price_per_node_hour,
            "on_infeasible": self.on_infeasible,
            "default_scale_out": self.default_scale_out,
        }


@dataclass(frozen=True)
class PipelineConfig:
    path: str
    jobs: dict[str, JobConfig]

    def job(self, name: str) -> JobConfig:
        if name not in self.jobs:
            raise InvalidInputError("job", name, f"not in {self.path} (jobs: {', '.join(sorted(self.jobs))})")
        return self.jobs[name]


def parse_duration(value: Any, field: str, where: str, *, allow_zero: bool = False) -> float:
    """Seconds from a number or a string like ``90``, ``90s``, ``15m``, ``1h30m``."""
    if isinstance(value, bool):
        raise InvalidInputError(
            field, value, "must be a duration (seconds, or e.g. 90s, 15m, 1h30m)", where=where
        )
    seconds: float | None = None
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        m = _DURATION_RE.match(value)
        if m and any(m.groups()):
            h, mi, s = (float(g) if g else 0.0 for g in m.groups())
            seconds = h * 3600 + mi * 60 + s
    if seconds is None or not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        raise InvalidInputError(
            field, value, "must be a positive duration (seconds, or e.g. 90s, 15m, 1h30m)", where=where
        )
    return seconds


def _int_ge1(value: Any, field: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(field, value, "must be an integer >= 1", where=where)
    return value


def _scale_outs(value: Any, field: str, where: str) -> list[int]:
    if isinstance(value, Mapping):
        extra = set(value) - {"min", "max", "step"}
        if extra:
            raise InvalidInputError(
                f"{field}.{sorted(extra)[0]}", value, "allowed keys: min, max, step", where=where
            )
        for key in ("min", "max"):
            if key not in value:
                raise InvalidInputError(f"{field}.{key}", None, "is required in a range", where=where)
        lo = _int_ge1(value["min"], f"{field}.min", where)
        hi = _int_ge1(value["max"], f"{field}.max", where)
        step = _int_ge1(value.get("step", 1), f"{field}.step", where)
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
    if isinstance(value, list):
        if not value:
            raise InvalidInputError(field, value, "needs at least one scale-out", where=where)
        if len(value) > MAX_CANDIDATES:
            raise InvalidInputError(
                field, f"<{len(value):,} scale-outs>", f"more than {MAX_CANDIDATES:,} candidates", where=where
            )
        out = [_int_ge1(v, f"{field}[{i}]", where) for i, v in enumerate(value)]
        if len(set(out)) != len(out):
            raise InvalidInputError(field, value, "has duplicate scale-outs", where=where)
        return sorted(out)
    raise InvalidInputError(field, value, "must be a list of integers or {min: .., max: ..}", where=where)


def _validate_job(name: str, raw: Any, defaults: Mapping[str, Any], where: str) -> JobConfig:
    p = f"jobs.{name}"
    if not isinstance(raw, Mapping):
        raise InvalidInputError(p, raw, "must be a mapping of settings", where=where)
    data = {**defaults, **raw}
    unknown = sorted(set(data) - JOB_KEYS)
    if unknown:
        raise InvalidInputError(
            f"{p}.{unknown[0]}",
            data[unknown[0]],
            f"unknown key; allowed: {', '.join(sorted(JOB_KEYS))}",
            where=where,
        )

    def text(key: str, default: str | None) -> str | None:
        value = data.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise InvalidInputError(f"{p}.{key}", value, "must be a non-empty string", where=where)
        return value.strip()

    job_type = text("job_type", name)
    framework = (text("framework", None) or "").lower()
    if not framework:
        raise InvalidInputError(f"{p}.framework", None, "is required (spark or flink)", where=where)

    properties = data.get("properties", {}) or {}
    if not isinstance(properties, Mapping):
        raise InvalidInputError(
            f"{p}.properties", properties, "must be a mapping of property to value", where=where
        )
    for key, value in properties.items():
        if key in ("scale_out", "runtime_s"):
            raise InvalidInputError(
                f"{p}.properties.{key}", value, "is not a context property (it is set by sizing)", where=where
            )
        # refused here what no job type's runs could make acceptable; the conversion to what
        # the job type's runs hold happens when the operator sizes (records.conform_context)
        conform_property(value, None, field=f"{p}.properties.{key}", where=where)

    if "scale_out" not in data:
        raise InvalidInputError(
            f"{p}.scale_out", None, "is required: a list or {min: .., max: ..}", where=where
        )
    scale_outs = _scale_outs(data["scale_out"], f"{p}.scale_out", where)

    target_s = None
    if data.get("target") is not None:
        target_s = parse_duration(data["target"], f"{p}.target", where)
    deadline = data.get("deadline")
    if deadline is not None:
        if hasattr(deadline, "isoformat"):  # YAML timestamps arrive as datetimes
            from airflow_provider_bellamy.deadlines import parse_deadline

            try:
                deadline = parse_deadline(deadline, f"{p}.deadline").isoformat()
            except InvalidInputError as exc:
                raise InvalidInputError(f"{p}.deadline", data["deadline"], exc.problem, where=where) from None
        elif not isinstance(deadline, str) or not deadline.strip():
            raise InvalidInputError(
                f"{p}.deadline", deadline, "must be an ISO-8601 datetime, a template, or 'dag'", where=where
            )
        elif deadline != "dag" and "{{" not in deadline:
            from airflow_provider_bellamy.deadlines import parse_deadline

            try:
                deadline = parse_deadline(deadline, f"{p}.deadline").isoformat()
            except InvalidInputError as exc:
                raise InvalidInputError(f"{p}.deadline", data["deadline"], exc.problem, where=where) from None
    if target_s is not None and deadline is not None:
        raise InvalidInputError(
            f"{p}.deadline", deadline, "give either target or deadline, not both", where=where
        )

    reserve: float | str = 0.0
    if data.get("reserve") is not None:
        if data["reserve"] == "auto":
            reserve = "auto"
        else:
            reserve = parse_duration(data["reserve"], f"{p}.reserve", where, allow_zero=True)
        if deadline is None:
            raise InvalidInputError(
                f"{p}.reserve", data["reserve"], "only applies with a deadline", where=where
            )
    default_task_reserve_s = 0.0
    if data.get("default_task_reserve") is not None:
        default_task_reserve_s = parse_duration(
            data["default_task_reserve"], f"{p}.default_task_reserve", where, allow_zero=True
        )

    confidence = validate_confidence(data.get("confidence", 0.9), field=f"{p}.confidence", where=where)
    objective = data.get("objective", "min_scale_out")
    if objective not in OBJECTIVES:
        raise InvalidInputError(
            f"{p}.objective", objective, f"must be one of {', '.join(OBJECTIVES)}", where=where
        )
    price = data.get("price_per_node_hour")
    if price is not None and (
        isinstance(price, bool)
        or not isinstance(price, (int, float))
        or not math.isfinite(price)
        or price < 0
    ):
        raise InvalidInputError(f"{p}.price_per_node_hour", price, "must be a number >= 0", where=where)
    if objective == "min_cost" and price is None:
        raise InvalidInputError(
            f"{p}.price_per_node_hour", None, "is required with objective min_cost", where=where
        )
    on_infeasible = str(data.get("on_infeasible", "warn")).replace("_", "-")
    if on_infeasible not in ON_INFEASIBLE:
        raise InvalidInputError(
            f"{p}.on_infeasible",
            data.get("on_infeasible"),
            f"must be one of {', '.join(ON_INFEASIBLE)}",
            where=where,
        )
    default_scale_out = data.get("default_scale_out")
    if default_scale_out is not None:
        default_scale_out = _int_ge1(default_scale_out, f"{p}.default_scale_out", where)
        if default_scale_out not in scale_outs:
            raise InvalidInputError(
                f"{p}.default_scale_out",
                default_scale_out,
                f"must be one of scale_out {scale_outs}",
                where=where,
            )

    spark = data.get("spark", {}) or {}
    if not isinstance(spark, Mapping):
        raise InvalidInputError(f"{p}.spark", spark, "must be a mapping of operator arguments", where=where)
    bad = sorted(set(spark) - SPARK_KEYS)
    if bad:
        raise InvalidInputError(
            f"{p}.spark.{bad[0]}",
            spark[bad[0]],
            f"unknown key; allowed: {', '.join(sorted(SPARK_KEYS))}",
            where=where,
        )
    if "application_args" in spark and not isinstance(spark["application_args"], list):
        raise InvalidInputError(
            f"{p}.spark.application_args", spark["application_args"], "must be a list", where=where
        )
    if "conf" in spark and not isinstance(spark["conf"], Mapping):
        raise InvalidInputError(f"{p}.spark.conf", spark["conf"], "must be a mapping", where=where)
    application = spark.get("application")
    if application is not None:
        if not isinstance(application, str) or not application.strip():
            raise InvalidInputError(f"{p}.spark.application", application, "must be a file path", where=where)
        if "{{" not in application:
            # relative to the config file, so a pipeline folder can be moved as a whole
            resolved = (Path(where).resolve().parent / application).resolve()
            if not resolved.is_file():
                raise InvalidInputError(
                    f"{p}.spark.application", application, f"no such file ({resolved})", where=where
                )
            spark = {**spark, "application": str(resolved)}
    flink = data.get("flink", {}) or {}
    if not isinstance(flink, Mapping):
        raise InvalidInputError(f"{p}.flink", flink, "must be a mapping of operator arguments", where=where)

    return JobConfig(
        name=name,
        job_type=job_type or name,
        framework=framework,
        properties=dict(properties),
        scale_outs=scale_outs,
        target_s=target_s,
        deadline=deadline,
        reserve=reserve,
        default_task_reserve_s=default_task_reserve_s,
        confidence=float(confidence),
        objective=objective,
        price_per_node_hour=None if price is None else float(price),
        on_infeasible=on_infeasible,
        default_scale_out=default_scale_out,
        spark=dict(spark),
        flink=dict(flink),
        description=text("description", None),
        source=where,
    )


def load_pipeline_config(path: str | Path) -> PipelineConfig:
    """Read and validate a pipeline YAML file; raises ``InvalidInputError`` naming file, job and key."""
    import yaml

    p = Path(path)
    where = str(p)
    if not p.is_file():
        raise InvalidInputError("path", where, "no such pipeline config file")
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        raise InvalidInputError(
            "path", where, f"is not valid YAML{line}: {getattr(exc, 'problem', exc)}"
        ) from None
    except UnicodeDecodeError as exc:
        raise InvalidInputError("path", where, f"is not UTF-8 text: {exc}") from None
    if not isinstance(raw, Mapping):
        raise InvalidInputError("<top level>", raw, "must be a mapping with a 'jobs' key", where=where)
    unknown = sorted(set(raw) - {"jobs", "defaults"})
    if unknown:
        raise InvalidInputError(
            unknown[0], raw[unknown[0]], "unknown top-level key; allowed: defaults, jobs", where=where
        )
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, Mapping):
        raise InvalidInputError("defaults", defaults, "must be a mapping of job settings", where=where)
    jobs = raw.get("jobs")
    if not isinstance(jobs, Mapping) or not jobs:
        raise InvalidInputError(
            "jobs", jobs, "must be a non-empty mapping of job name to settings", where=where
        )
    out: dict[str, JobConfig] = {}
    for name, job in jobs.items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
            raise InvalidInputError("jobs", name, "job names must be letters, digits, _ . -", where=where)
        out[name] = _validate_job(name, job, defaults, where)
    return PipelineConfig(path=where, jobs=out)
