"""``BellamySizingOperator`` and the sizing logic every Bellamy operator shares.

Sizing at launch, in order:

1. the runtime target: ``target`` (seconds / timedelta), ``deadline`` (absolute,
   templated), or ``use_dag_deadline`` (the DAG's DeadlineAlert recomputed in the
   task), minus ``reserve`` for the tasks after this one (``airflow_provider_bellamy.deadlines``);
2. the decision from the store's model (``Bellamy.size``), stored with the task's
   provenance; the store and the model are given ``connect_timeout_s`` +
   ``sizing_timeout_s`` at most, so a dead store never hangs the task;
3. when no model can answer (store unreachable, model broken, unknown job type):
   ``default_scale_out`` if given, else ``on_infeasible`` decides (``fail`` raises,
   ``warn`` / ``run-max`` launch the largest candidate) — the reason is logged and
   kept in the decision's ``fallback_reason``;
4. when the model answers but no candidate meets the target: ``on_infeasible``
   ``fail`` raises ``InfeasibleTargetError``, ``warn`` logs and launches the fastest
   candidate, ``run-max`` launches the largest scale-out.

Importing this module imports neither torch nor pandas.
"""

from __future__ import annotations

import ast
import contextlib
import datetime as dt
import json
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

from airflow_provider_bellamy.config import ON_INFEASIBLE
from airflow_provider_bellamy.decisions import OBJECTIVES
from airflow_provider_bellamy.exceptions import InfeasibleTargetError, InvalidInputError, StoreError
from airflow_provider_bellamy.recording import BellamyRecordingMixin

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_bellamy.config import JobConfig
    from airflow_provider_bellamy.deadlines import RuntimeTarget
    from airflow_provider_bellamy.decisions import SizingDecision

SIZING_TEMPLATE_FIELDS: tuple[str, ...] = (
    "job_type",
    "properties",
    "scale_outs",
    "target",
    "deadline",
    "reserve",
    "confidence",
    "default_scale_out",
)

DEFAULT_SIZING_TIMEOUT_S = 60.0


class SizingTimeoutError(Exception):
    """Sizing did not answer within its time budget."""


def _run_with_timeout(fn: Any, timeout_s: float, what: str) -> Any:
    """Run ``fn`` in a daemon thread and give up after ``timeout_s``.

    A daemon thread (not an executor) so that a store stuck in a socket read can
    neither hold the task past its budget nor block the interpreter's exit.
    """
    box: dict[str, Any] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name=f"bellamy-{what}", daemon=True).start()
    if not done.wait(timeout_s):
        raise SizingTimeoutError(f"{what} did not answer within {timeout_s:.1f} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


def _prefetch_model_code() -> None:
    """Start importing the model code (numpy, safetensors) in the background.

    Started first, the import overlaps reading the connection, opening the store and
    resolving the target.
    """

    def load() -> None:
        # a failure here is reported by the sizing call itself
        with contextlib.suppress(Exception):
            from airflow_provider_bellamy.model import RuntimeModel  # noqa: F401

    threading.Thread(target=load, name="bellamy-prefetch-model", daemon=True).start()


# The reserve for the tasks after a sized one: a high quantile of their last durations, because
# the reserve protects the deadline and an average would be short half the time.
RESERVE_QUANTILE = 0.9
RESERVE_HISTORY = 20


def coerce_scale_outs(value: Any, field: str = "scale_outs") -> list[int]:
    """Candidate scale-outs from a list, a range, or a rendered template string like ``"[1, 2, 4]"``."""
    if isinstance(value, str):
        text = value.strip()
        try:
            value = json.loads(text)
        except ValueError:
            try:
                value = ast.literal_eval(text)
            except (ValueError, SyntaxError):
                raise InvalidInputError(field, text, "must be a list of integers >= 1") from None
    if isinstance(value, range):
        value = list(value)
    if not isinstance(value, (list, tuple)) or not value:
        raise InvalidInputError(field, value, "must be a non-empty list of integers >= 1")
    out: list[int] = []
    for i, item in enumerate(value):
        try:
            number = int(item) if not isinstance(item, bool) else None
        except (TypeError, ValueError):
            number = None
        if number is None or number < 1 or str(item).strip() not in (str(number), f"{number}.0"):
            raise InvalidInputError(f"{field}[{i}]", item, "must be an integer >= 1")
        out.append(number)
    if len(set(out)) != len(out):
        raise InvalidInputError(field, value, "has duplicate scale-outs")
    return sorted(out)


def _coerce_float(value: Any, field: str, lo: float | None = None, hi: float | None = None) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(field, value, "must be a number") from None
    if (lo is not None and number <= lo) or (hi is not None and number >= hi):
        raise InvalidInputError(field, value, f"must be in ({lo}, {hi})")
    return number


def _coerce_properties(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise InvalidInputError("properties", value, "must be a mapping (or its JSON)") from None
    if not isinstance(value, Mapping):
        raise InvalidInputError("properties", value, "must be a mapping of property to value")
    return dict(value)


class BellamySizingMixin(BellamyRecordingMixin):
    """Sizing parameters and the launch-time sizing shared by the Bellamy operators."""

    _bellamy_sizing: ClassVar[bool] = True

    def _init_sizing(
        self,
        *,
        job_type: str,
        framework: str,
        properties: Mapping[str, Any] | str | None,
        scale_outs: Sequence[int] | str,
        target: float | dt.timedelta | str | None,
        deadline: Any,
        use_dag_deadline: bool,
        deadline_alert_name: str | None,
        reserve: float | dt.timedelta | str,
        default_task_reserve: float | dt.timedelta,
        confidence: float | str,
        objective: str,
        price_per_node_hour: float | None,
        on_infeasible: str,
        default_scale_out: int | str | None,
        bellamy_conn_id: str,
        connect_timeout_s: float | None,
        sizing_timeout_s: float,
    ) -> None:
        if not isinstance(job_type, str) or not job_type.strip():
            raise InvalidInputError("job_type", job_type, "must be a non-empty string")
        if objective not in OBJECTIVES:
            raise InvalidInputError("objective", objective, f"must be one of {', '.join(OBJECTIVES)}")
        on_infeasible = str(on_infeasible).replace("_", "-")
        if on_infeasible not in ON_INFEASIBLE:
            raise InvalidInputError(
                "on_infeasible", on_infeasible, f"must be one of {', '.join(ON_INFEASIBLE)}"
            )
        if objective == "min_cost" and price_per_node_hour is None:
            raise InvalidInputError("price_per_node_hour", None, "is required with objective min_cost")
        # Values that templates may fill are validated after rendering (in execute);
        # plain values are checked now so a broken DAG fails at parse time.
        if not _templated(scale_outs):
            coerce_scale_outs(scale_outs)
        if not _templated(confidence):
            _coerce_float(confidence, "confidence", 0.0, 1.0)
        self.job_type = job_type
        self.framework = framework
        self.properties = properties if properties is not None else {}
        self.scale_outs = scale_outs
        self.target = target
        self.deadline = deadline
        self.use_dag_deadline = use_dag_deadline
        self.deadline_alert_name = deadline_alert_name
        self.reserve = reserve
        self.default_task_reserve = default_task_reserve
        self.confidence = confidence
        self.objective = objective
        self.price_per_node_hour = price_per_node_hour
        self.on_infeasible = on_infeasible
        self.default_scale_out = default_scale_out
        self.bellamy_conn_id = bellamy_conn_id
        self.connect_timeout_s = connect_timeout_s
        self.sizing_timeout_s = sizing_timeout_s

    # -- launch-time sizing ------------------------------------------------------------

    def resolve_target(self, context: Context, facade: Any | None = None) -> RuntimeTarget:
        """The runtime target in seconds for this launch (see ``deadlines``)."""
        from airflow_provider_bellamy import deadlines

        dag_deadline_at = None
        if self.use_dag_deadline:
            dag = context.get("dag") or getattr(self, "dag", None)
            dag_deadline_at = deadlines.dag_deadline(dag, context, alert_name=self.deadline_alert_name)
        reserve_s = 0.0
        unknown: list[str] = []
        sources: dict[str, str] = {}
        has_deadline = bool(self.deadline) or dag_deadline_at is not None
        if has_deadline and self.reserve == deadlines.RESERVE_AUTO:
            reserve_s, unknown, sources = self._predicted_reserve(context, facade)
        elif has_deadline and self.reserve not in (None, ""):
            reserve_s = deadlines.to_seconds(self.reserve, "reserve", allow_zero=True)
        return deadlines.runtime_target(
            target=self.target,
            deadline=self.deadline,
            dag_deadline_at=dag_deadline_at,
            reserve_s=reserve_s,
            unknown_reserve_tasks=unknown,
            reserve_sources=sources,
        )

    def _predicted_reserve(
        self, context: Context, facade: Any | None
    ) -> tuple[float, list[str], dict[str, str]]:
        """The longest downstream path, each task costing the p90 of its last durations: first
        Airflow's own task instances (``task_history``), else the runs recorded in the store,
        else ``default_task_reserve``. Returns (seconds, tasks without a figure, where each
        task's figure came from)."""
        from airflow_provider_bellamy import deadlines
        from airflow_provider_bellamy.task_history import airflow_task_durations

        task = context.get("task") or self
        dag = getattr(task, "dag", None)
        default_s = deadlines.to_seconds(
            self.default_task_reserve or 0, "default_task_reserve", allow_zero=True
        )
        if dag is None:
            return 0.0, [], {}

        def downstream(task_id: str) -> list[str]:
            return sorted(dag.get_task(task_id).downstream_task_ids)

        dag_run = context.get("dag_run")
        logical_date = context.get("logical_date") or getattr(dag_run, "logical_date", None)
        q = f"p{round(RESERVE_QUANTILE * 100)}"
        timeout_s = self._bellamy_store_hook().connect_timeout_s + 5.0

        def from_store(task_id: str) -> list[float]:
            if facade is None:
                return []
            return _run_with_timeout(
                lambda: facade.task_durations(dag.dag_id, task_id, last=RESERVE_HISTORY),
                timeout_s,
                "reading recorded task durations",
            )

        readers = (
            (
                "Airflow task instances",
                lambda t: airflow_task_durations(dag.dag_id, t, logical_date, last=RESERVE_HISTORY),
            ),
            ("runs in the Bellamy store", from_store),
        )
        sources: dict[str, str] = {}
        # a source that failed once is not asked again: a dead store would otherwise cost
        # one connect timeout per downstream task
        failed: set[str] = set()

        def duration_of(task_id: str) -> float | None:
            for label, read in readers:
                if label in failed:
                    continue
                try:
                    values = read(task_id)
                except Exception as exc:  # a reserve estimate must not stop the launch
                    failed.add(label)
                    self.log.warning("Bellamy: %s unavailable for the reserve (%s)", label, exc)
                    continue
                if values:
                    seconds = deadlines.nearest_rank(values, RESERVE_QUANTILE)
                    sources[task_id] = f"{seconds:.1f} s: {q} of its last {len(values)} successful {label}"
                    return seconds
            sources[task_id] = f"{default_s:.1f} s: default_task_reserve (no successful run recorded)"
            return None

        reserve_s, unknown = deadlines.downstream_reserve(
            task.task_id, downstream, duration_of, default_task_reserve_s=default_s
        )
        return reserve_s, unknown, sources

    def _provenance(self, context: Context) -> dict[str, Any]:
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        return {
            "dag_id": ti.dag_id,
            "task_id": ti.task_id,
            "run_id": ti.run_id,
            "map_index": -1 if map_index is None else map_index,
            "try_number": ti.try_number,
        }

    def _fallback(self, reason: str, scale_outs: list[int], target_s: float | None, confidence: float) -> Any:
        from airflow_provider_bellamy.decisions import SizingDecision

        if self.default_scale_out not in (None, ""):
            chosen = int(self.default_scale_out)
            why = f"no model answer ({reason}); using default_scale_out={chosen}"
        elif self.on_infeasible == "fail":
            raise InfeasibleTargetError(
                f"job {self.job_type!r}: no model answer ({reason}), "
                "no default_scale_out and on_infeasible=fail"
            )
        else:
            chosen = max(scale_outs)
            why = (
                f"no model answer ({reason}); on_infeasible={self.on_infeasible}: largest scale-out {chosen}"
            )
        self.log.warning("Bellamy: %s", why)
        return SizingDecision(
            job_type=self.job_type,
            chosen_scale_out=chosen,
            feasible=False,
            reason=why,
            target_s=target_s,
            confidence=confidence,
            objective=self.objective,
            candidates=[],
            context=_coerce_properties(self.properties),
            framework=self.framework,
            fallback_reason=reason,
            price_per_node_hour=self.price_per_node_hour,
            created_at=dt.datetime.now(dt.timezone.utc).isoformat(),
        )

    def size_for_launch(self, context: Context) -> tuple[SizingDecision, RuntimeTarget, Any | None]:
        """Decide the scale-out for this try; returns (decision, target, façade or None when unusable)."""
        started = time.monotonic()
        _prefetch_model_code()
        scale_outs = coerce_scale_outs(self.scale_outs)
        confidence = _coerce_float(self.confidence, "confidence", 0.0, 1.0)
        properties = _coerce_properties(self.properties)
        if self.default_scale_out not in (None, ""):
            try:
                default = int(self.default_scale_out)
            except (TypeError, ValueError):
                raise InvalidInputError(
                    "default_scale_out", self.default_scale_out, "must be an integer"
                ) from None
            if default not in scale_outs:
                raise InvalidInputError(
                    "default_scale_out", default, f"must be one of scale_outs {scale_outs}"
                )
            self.default_scale_out = default

        hook = self._bellamy_store_hook()
        budget = hook.connect_timeout_s + float(self.sizing_timeout_s)
        facade = None
        try:
            facade = _run_with_timeout(
                hook.get_facade, hook.connect_timeout_s + 5.0, "opening the Bellamy store"
            )
        except Exception as exc:
            self.log.warning("Bellamy: store unusable: %s", exc)
            facade = None
        target = self.resolve_target(context, facade)
        self.log.info("Bellamy: runtime target for %s: %s", self.job_type, target.explanation)

        decision = None
        if facade is not None:
            try:
                decision = _run_with_timeout(
                    lambda: facade.size(
                        self.job_type,
                        properties,
                        scale_outs,
                        target.target_s,
                        confidence=confidence,
                        objective=self.objective,
                        price_per_node_hour=self.price_per_node_hour,
                        default_scale_out=self.default_scale_out,
                        framework=self.framework,
                        provenance=self._provenance(context),
                    ),
                    budget,
                    "sizing",
                )
            except InvalidInputError as exc:
                # an unknown job type is a model problem the fallback covers; other bad
                # inputs are the DAG author's and must fail loudly
                if type(exc).__name__ != "UnknownJobTypeError":
                    raise
                decision = self._fallback(str(exc), scale_outs, target.target_s, confidence)
            except Exception as exc:
                decision = self._fallback(
                    f"{type(exc).__name__}: {exc}", scale_outs, target.target_s, confidence
                )
                if isinstance(exc, (SizingTimeoutError, StoreError)):
                    facade = None  # asking it again to store the decision would wait as long
        else:
            decision = self._fallback(
                "the store could not be opened", scale_outs, target.target_s, confidence
            )
        if decision.decision_id is None:
            self._store_fallback(decision, facade, scale_outs, context, hook.connect_timeout_s + 5.0)

        if decision.fallback_reason and decision.candidates:
            self.log.warning("Bellamy: sizing fell back: %s", decision.fallback_reason)
        if not decision.feasible and decision.candidates:
            self._apply_infeasible_policy(decision, scale_outs, target)
        if target.deadline_passed:
            late_s = -(target.remaining_s or 0.0)
            decision.reason = (
                f"the deadline {target.deadline.isoformat() if target.deadline else '?'} had already passed "
                f"when the task started ({late_s:.0f} s earlier); {decision.reason}"
            )
        self.log.info(
            "Bellamy: %s → scale-out %s (%s) in %.3f s",
            self.job_type,
            decision.chosen_scale_out,
            decision.reason,
            time.monotonic() - started,
        )
        return decision, target, facade

    def _store_fallback(
        self,
        decision: SizingDecision,
        facade: Any | None,
        scale_outs: list[int],
        context: Context,
        timeout_s: float,
    ) -> None:
        """Every launch has its decision row: ``size`` stores the model's answer (and its own
        fallbacks), this one the decisions made here when sizing could not answer."""
        if facade is None:
            self.log.warning(
                "Bellamy: this decision is not stored: the store could not be reached (%s)",
                decision.fallback_reason,
            )
            return
        try:
            _run_with_timeout(
                lambda: facade.record_decision(decision, scale_outs, self._provenance(context)),
                timeout_s,
                "storing the decision",
            )
        except Exception as exc:  # the launch goes on; the log says what is missing
            self.log.warning("Bellamy: this decision could not be stored (%s: %s)", type(exc).__name__, exc)

    def _apply_infeasible_policy(
        self, decision: SizingDecision, scale_outs: list[int], target: RuntimeTarget
    ) -> None:
        short = f" (short by {decision.shortfall_s:.1f} s)" if decision.shortfall_s else ""
        msg = (
            f"job {self.job_type!r}: no scale-out in {scale_outs} meets the target "
            f"{target.target_s if target.target_s is None else round(target.target_s, 1)} s at confidence "
            f"{decision.confidence}{short}; {target.explanation}"
        )
        if self.on_infeasible == "fail":
            raise InfeasibleTargetError(msg + "; on_infeasible=fail")
        if self.on_infeasible == "run-max":
            decision.chosen_scale_out = max(scale_outs)
            decision.reason = f"{decision.reason}; on_infeasible=run-max: largest scale-out"
            self.log.warning(
                "Bellamy: %s; launching the largest scale-out %s", msg, decision.chosen_scale_out
            )
        else:
            self.log.warning(
                "Bellamy: %s; launching the fastest candidate %s", msg, decision.chosen_scale_out
            )


def _templated(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


class BellamySizingOperator(BellamySizingMixin, BaseOperator):
    """Size a job and return the decision as XCom, for any operator to use through templating.

    The XCom is ``SizingDecision.to_dict()`` plus ``target`` (how the runtime target
    was obtained) and ``sized_task_id``. Use it as
    ``"{{ ti.xcom_pull('size')['chosen_scale_out'] }}"`` (with
    ``render_template_as_native_obj=True`` on the DAG the value stays an int).

    :param job_type: the job's name in the model store, e.g. ``"grep"``.
    :param properties: the context (per-node values, data size, job arguments …).
    :param scale_outs: the candidate scale-outs (a list, or a template rendering to one).
    :param target: runtime target, seconds or ``timedelta``.
    :param deadline: absolute deadline (aware datetime or ISO-8601 string; templated).
    :param use_dag_deadline: take the deadline from the DAG's ``DeadlineAlert``.
    :param reserve: seconds (or ``timedelta``) to leave for the tasks after the sized
        one, or ``"auto"``: predicted from their durations in earlier runs (Airflow's task
        instances, else the store; see ``_predicted_reserve``).
    :param sized_task_id: the task that runs the sized job; its runtime is written back
        by ``record_runtime`` or the listener plugin.
    :param on_infeasible: ``fail`` | ``warn`` | ``run-max``.
    :param default_scale_out: the size to use when no model can answer.
    """

    template_fields: Sequence[str] = SIZING_TEMPLATE_FIELDS
    template_fields_renderers: ClassVar[dict[str, str]] = {"properties": "json"}
    ui_color = "#d7ecfa"

    def __init__(
        self,
        *,
        job_type: str,
        scale_outs: Sequence[int] | str,
        properties: Mapping[str, Any] | str | None = None,
        framework: str = "spark",
        target: float | dt.timedelta | str | None = None,
        deadline: Any = None,
        use_dag_deadline: bool = False,
        deadline_alert_name: str | None = None,
        reserve: float | dt.timedelta | str = 0.0,
        default_task_reserve: float | dt.timedelta = 0.0,
        confidence: float | str = 0.9,
        objective: str = "min_scale_out",
        price_per_node_hour: float | None = None,
        on_infeasible: str = "warn",
        default_scale_out: int | str | None = None,
        sized_task_id: str | None = None,
        bellamy_conn_id: str = "bellamy_default",
        connect_timeout_s: float | None = None,
        sizing_timeout_s: float = DEFAULT_SIZING_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._init_sizing(
            job_type=job_type,
            framework=framework,
            properties=properties,
            scale_outs=scale_outs,
            target=target,
            deadline=deadline,
            use_dag_deadline=use_dag_deadline,
            deadline_alert_name=deadline_alert_name,
            reserve=reserve,
            default_task_reserve=default_task_reserve,
            confidence=confidence,
            objective=objective,
            price_per_node_hour=price_per_node_hour,
            on_infeasible=on_infeasible,
            default_scale_out=default_scale_out,
            bellamy_conn_id=bellamy_conn_id,
            connect_timeout_s=connect_timeout_s,
            sizing_timeout_s=sizing_timeout_s,
        )
        self.sized_task_id = sized_task_id

    @classmethod
    def from_config(cls, job: JobConfig, **kwargs: Any) -> BellamySizingOperator:
        """An operator sizing ``job`` from a pipeline config; ``kwargs`` override or add arguments."""
        return cls(**{**job.sizing_kwargs(), **kwargs})

    def execute(self, context: Context) -> dict[str, Any]:
        decision, target, _ = self.size_for_launch(context)
        out = decision.to_dict()
        out["target"] = target.to_dict()
        out["sized_task_id"] = self.sized_task_id
        return out
