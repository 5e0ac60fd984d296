"""Pipeline configs: one YAML file describes the jobs of a pipeline and how to size them.

.. code-block:: yaml

    defaults:                    # optional; merged under every job (properties, spark:
      framework: spark           # and flink: key by key, the job's own keys winning)
      confidence: 0.9
    jobs:
      daily_grep:                # the job's name (used by from_config)
        job_type: grep           # default: the job's name
        properties:              # the context (per node, never cluster totals)
          machine_type: local-2c
          data_size_mb: 64
        scale_out: {min: 1, max: 4}   # or 1-4, a list [1, 2, 4]; flink jobs: default 1 … the slots
        target: 15m              # seconds, or 90s / 15m / 1h30m / 0:15:00 (h:mm:ss); or …
        # deadline: "2025-01-01T06:00:00+00:00" | dag | "{{ templated }}"
        # deadline_alert_name: sla  # with deadline: dag, which of the DAG's alerts
        # reserve: 10m | auto    # time the downstream tasks still need
        # default_task_reserve: 30s  # with reserve: auto, a task with no recorded duration
        confidence: 0.9
        objective: min_scale_out # min_scale_out | min_cost | fastest | fewest_nodes
        price_per_node_hour: 0.2
        on_infeasible: warn      # fail | warn | run-likely | run-max
        default_scale_out: 2     # used when no model can answer
        spark:                   # arguments for BellamySparkSubmitOperator
          application: ../jobs/grep.py   # relative to this file
          application_args: [--lines, "200000"]
        # flink:                 # or for BellamyFlinkOperator (framework: flink)
        #   application: ../jobs/flink_wordcount.py

The sizing keys are ``SizingSpec``'s arguments (``spec.py``), parsed by it as the operators'.

Every error names the file, the job and the key: ``pipeline.yaml: jobs.daily_grep.confidence=1.5: …``.
A value a job took from ``defaults:`` is named there: ``defaults.confidence=1.5: … (for jobs.daily_grep)``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.records import validate_label
from airflow_provider_bellamy.spec import (
    LAUNCHED_FRAMEWORKS,
    SIZING_ARGUMENTS,
    SizingSpec,
    parse_argument_list,
    parse_conf,
)

# The sizing arguments under the names a config gives them: one scale-out range per job.
_YAML_NAMES: dict[str, str] = {"scale_outs": "scale_out"}

JOB_KEYS: frozenset[str] = frozenset(
    {_YAML_NAMES.get(a, a) for a in SIZING_ARGUMENTS} | {"spark", "flink", "description"}
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
# The same for BellamyFlinkOperator.
FLINK_KEYS: frozenset[str] = frozenset(
    {
        "application",
        "application_args",
        "conf",
        "entry_class",
        "flink_conn_id",
        "wait_for_completion",
        "deferrable",
        "poll_interval_s",
        "job_timeout_s",
        "submit_timeout_s",
        "reattach",
        "cancel_on_kill",
        "record",
        "unreachable_grace_s",
    }
)


@dataclass(frozen=True)
class JobConfig:
    """One job of a pipeline config, validated: its sizing ``spec`` (whose fields read as the
    job's own, ``job.target_s``) and the arguments of the operator that runs it."""

    name: str
    spec: SizingSpec
    spark: dict[str, Any] = field(default_factory=dict)
    flink: dict[str, Any] = field(default_factory=dict)
    description: str | None = None
    source: str = "<memory>"

    def __getattr__(self, name: str) -> Any:
        spec = self.__dict__.get("spec")
        if spec is None or name.startswith("_"):
            raise AttributeError(name)
        return getattr(spec, name)

    def sizing_kwargs(self) -> dict[str, Any]:
        """Keyword arguments shared by every Bellamy sizing operator."""
        return self.spec.arguments()

    def operator_kwargs(self, framework: str | None, operator: str) -> dict[str, Any]:
        """Arguments for ``operator``: the sizing ones and, for an operator launching ``framework``
        jobs, the config's block of that name (``spark:``, ``flink:``) and ``task_id`` = the
        job's name."""
        if framework is None:
            return self.sizing_kwargs()
        if self.spec.framework != framework:
            raise InvalidInputError(
                f"jobs.{self.name}.framework",
                self.spec.framework,
                f"{operator} needs {framework}",
                where=self.source,
            )
        return {"task_id": self.name, **self.sizing_kwargs(), **getattr(self, framework)}


@dataclass(frozen=True)
class PipelineConfig:
    path: str
    jobs: dict[str, JobConfig]

    def job(self, name: str) -> JobConfig:
        if name not in self.jobs:
            raise InvalidInputError("job", name, f"not in {self.path} (jobs: {', '.join(sorted(self.jobs))})")
        return self.jobs[name]


def _refuse_unknown_keys(mapping: Mapping[str, Any], allowed: frozenset[str], p: str, where: str) -> None:
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise InvalidInputError(
            f"{p}.{unknown[0]}",
            mapping[unknown[0]],
            f"unknown key; allowed: {', '.join(sorted(allowed))}",
            where=where,
        )


def _operator_arguments(
    data: Mapping[str, Any], key: str, allowed: frozenset[str], p: str, where: str
) -> dict[str, Any]:
    """The ``spark:`` / ``flink:`` block of a job: arguments of the operator that runs it."""
    block = data.get(key, {}) or {}
    if not isinstance(block, Mapping):
        raise InvalidInputError(f"{p}.{key}", block, "must be a mapping of operator arguments", where=where)
    _refuse_unknown_keys(block, allowed, f"{p}.{key}", where)
    if "application_args" in block:
        args = block["application_args"]
        if not isinstance(args, list):  # a YAML list: text here is a value of the file, not a render
            raise InvalidInputError(f"{p}.{key}.application_args", args, "must be a list", where=where)
        block = {**block, "application_args": parse_argument_list(args, f"{p}.{key}.application_args", where)}
    if "conf" in block:
        block = {**block, "conf": parse_conf(block["conf"], f"{p}.{key}.conf", where)}
    application = block.get("application")
    if application is not None:
        if not isinstance(application, str) or not application.strip():
            raise InvalidInputError(f"{p}.{key}.application", application, "must be a file path", where=where)
        if "{{" not in application:
            # relative to the config file, so a pipeline folder can be moved as a whole
            resolved = (Path(where).resolve().parent / application).resolve()
            if not resolved.is_file():
                raise InvalidInputError(
                    f"{p}.{key}.application", application, f"no such file ({resolved})", where=where
                )
            block = {**block, "application": str(resolved)}
    return dict(block)


# Settings that are mappings of independent keys: a job's block adds to the defaults' block key by
# key (its own keys winning), so a job naming its application keeps the defaults' connection and
# a job giving its data size keeps the defaults' machine type. ``scale_out`` is not one: a job's
# range replaces the defaults' whole.
_MERGED_KEYS: frozenset[str] = frozenset({"properties", "spark", "flink"})


def _merged(under: Any, over: Any) -> Any:
    """``over`` laid over ``under``, mappings key by key (``conf`` inside an operator block too);
    an empty YAML block (``spark:`` alone, None) leaves the defaults' block as it is."""
    if over is None and isinstance(under, Mapping):
        return under
    if not isinstance(under, Mapping) or not isinstance(over, Mapping):
        return over
    return {**under, **{key: _merged(under.get(key), value) for key, value in over.items()}}


_MISSING = object()


def _leading_key(rest: str, *nodes: Any) -> str | None:
    """The key of ``nodes`` (mappings) that the path ``rest`` starts with: the longest, since an
    option's name holds dots itself (``spark.conf.spark.eventLog.dir``)."""
    names = {str(k) for node in nodes if isinstance(node, Mapping) for k in node}
    found = [k for k in names if rest == k or rest.startswith((f"{k}.", f"{k}["))]
    return max(found, key=len) if found else None


def _from_defaults(rest: str, raw: Mapping[str, Any], defaults: Mapping[str, Any]) -> bool:
    """Whether the value at ``rest`` (a path into a job's settings) is the defaults': walks the
    job's block and the defaults' side by side as ``_merged`` lays one over the other, at any depth."""
    own: Any = raw
    base: Any = defaults
    top = True
    while True:
        key = _leading_key(rest, own, base)
        if key is None:
            return False
        mine = own.get(key, _MISSING) if isinstance(own, Mapping) else _MISSING
        theirs = base.get(key, _MISSING) if isinstance(base, Mapping) else _MISSING
        if mine is _MISSING:
            return theirs is not _MISSING
        if top and key not in _MERGED_KEYS:
            return False  # the job's own value replaces the defaults' whole
        if mine is None and isinstance(theirs, Mapping):
            return True  # an empty block keeps the defaults' (_merged)
        rest = rest[len(key) + 1 :]
        if not (isinstance(mine, Mapping) and isinstance(theirs, Mapping)) or not rest:
            return False  # the job's value (or the merged mapping as a whole)
        own, base, top = mine, theirs, False


def _named_where_written(
    exc: InvalidInputError, p: str, raw: Mapping[str, Any], defaults: Mapping[str, Any]
) -> InvalidInputError:
    """An error about a value the job took from ``defaults:``, named there (the job has no such
    key to find), with the job it was refused for; one the job's own block sets stays the job's."""
    rest = exc.field.removeprefix(f"{p}.")
    if exc.field == rest or not _from_defaults(rest, raw, defaults):
        return exc
    return InvalidInputError(f"defaults.{rest}", exc.value, f"{exc.problem} (for {p})", where=exc.where)


def _validate_job(name: str, raw: Any, defaults: Mapping[str, Any], where: str) -> JobConfig:
    p = f"jobs.{name}"
    if not isinstance(raw, Mapping):
        raise InvalidInputError(p, raw, "must be a mapping of settings", where=where)
    data = {
        **defaults,
        **{
            key: _merged(defaults.get(key), value) if key in _MERGED_KEYS else value
            for key, value in raw.items()
        },
    }
    _refuse_unknown_keys(data, JOB_KEYS, p, where)
    if data.get("framework") is None:
        raise InvalidInputError(
            f"{p}.framework", None, f"is required ({' or '.join(LAUNCHED_FRAMEWORKS)})", where=where
        )
    arguments = {a: data[_YAML_NAMES.get(a, a)] for a in SIZING_ARGUMENTS if _YAML_NAMES.get(a, a) in data}
    arguments.setdefault("job_type", name)
    try:
        spec = SizingSpec.parse(
            arguments,
            where=where,
            prefix=f"{p}.",
            names=_YAML_NAMES,
            defer_templates=True,
            # as BellamyFlinkOperator's: without scale_out, 1 … the cluster's task slots at launch
            require_scale_outs=str(data["framework"]).strip().lower() != "flink",
        )
    except InvalidInputError as exc:
        raise _named_where_written(exc, p, raw, defaults) from None

    try:
        spark = _operator_arguments(data, "spark", SPARK_KEYS, p, where)
        flink = _operator_arguments(data, "flink", FLINK_KEYS, p, where)
    except InvalidInputError as exc:
        raise _named_where_written(exc, p, raw, defaults) from None
    description = data.get("description")
    if description is not None:
        description = validate_label(description, f"{p}.description", where=where)
    return JobConfig(
        name=name, spec=spec, spark=dict(spark), flink=dict(flink), description=description, source=where
    )


@functools.cache
def _yaml_loader() -> Any:
    """PyYAML's safe loader with numbers read as YAML 1.2 reads them. YAML 1.1 reads ``15:00`` as
    900 (base 60: ``target: 15:00`` became 15 minutes while the text ``"15:00"`` is refused, 15
    minutes or 15 hours?) and ``010`` as 8 (octal). Here both stay text, for ``spec`` to read as
    a template's text is read: a duration ``"1:30:00"`` is 5400 s, ``"15:00"`` refused, a property
    ``"010"`` the number 10 where the job type's runs hold numbers, the text where they hold text."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    int_tag, float_tag = "tag:yaml.org,2002:int", "tag:yaml.org,2002:float"
    Loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in (int_tag, float_tag)]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    # PyYAML's own patterns less the base-60 and octal forms
    integer = r"[-+]?0b[0-1_]+|[-+]?0x[0-9a-fA-F_]+|[-+]?(?:0|[1-9][0-9_]*)"
    real = (
        r"[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9_]+(?:[eE][-+][0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)"
    )
    Loader.add_implicit_resolver(int_tag, re.compile(f"^(?:{integer})$"), list("-+0123456789"))
    Loader.add_implicit_resolver(float_tag, re.compile(f"^(?:{real})$"), list("-+0123456789."))
    return Loader


def load_pipeline_config(path: str | Path) -> PipelineConfig:
    """Read and validate a pipeline YAML file; raises ``InvalidInputError`` naming file, job and key."""
    import yaml

    p = Path(path)
    where = str(p)
    if not p.is_file():
        raise InvalidInputError("path", where, "no such pipeline config file")
    try:
        raw = yaml.load(p.read_text(encoding="utf-8"), Loader=_yaml_loader())
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
    # named where it is written: merged into a job, a typo here read as the job's own key
    _refuse_unknown_keys(defaults, JOB_KEYS, "defaults", where)
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
