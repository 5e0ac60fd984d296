"""``BellamySizingOperator`` and the sizing logic every Bellamy operator shares.

Sizing at launch, in order:

1. the runtime target: ``target`` (seconds / timedelta), ``deadline`` (absolute,
   templated), or ``use_dag_deadline`` (the DAG's DeadlineAlert recomputed in the
   task), minus ``reserve`` for the tasks after this one (``airflow_provider_bellamy.deadlines``);
2. the decision from the store's model (``Bellamy.size``), stored with the task's
   provenance; the store and the model are given ``connect_timeout_s`` +
   ``sizing_timeout_s`` at most, so a dead store never hangs the task;
3. when no model can answer (store unreachable, model broken, unknown job type):
   ``default_scale_out`` if given, else ``on_infeasible`` decides (``fail`` raises, the others
   launch the largest candidate: nothing predicted a runtime) — the reason is logged and
   kept in the decision's ``fallback_reason``;
4. when the model answers but no candidate meets the target: ``on_infeasible``
   ``fail`` raises ``InfeasibleTargetError``, ``warn`` logs and launches the candidate
   most likely to meet it, ``run-likely`` the smallest predicted to meet the target (the confidence given
   up, not the target; by ``objective``), ``run-max`` the largest scale-out. The decision is
   made, and stored, by the policy's rule (``sizing.ON_INFEASIBLE_RULES``).

Importing this module imports neither torch nor pandas.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator
from airflow.sdk.bases.operator import BaseOperatorMeta

from airflow_provider_bellamy.exceptions import (
    DecisionNotStoredError,
    InfeasibleTargetError,
    InvalidInputError,
    StoreError,
)
from airflow_provider_bellamy.recording import BellamyRecordingMixin
from airflow_provider_bellamy.spec import (
    RESERVE_AUTO,
    SIZING_ARGUMENTS,
    TEMPLATED_ARGUMENTS,
    SizingSpec,
    parse_duration,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_bellamy.config import JobConfig
    from airflow_provider_bellamy.deadlines import RuntimeTarget
    from airflow_provider_bellamy.decisions import SizingDecision

SIZING_TEMPLATE_FIELDS: tuple[str, ...] = TEMPLATED_ARGUMENTS

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


class BellamySizingMixin(BellamyRecordingMixin, metaclass=BaseOperatorMeta):
    """The sizing arguments and the launch-time sizing shared by the Bellamy operators.

    A cooperative ``__init__``: it takes the sizing arguments (``SizingSpec``'s, plus the store
    connection and the time budget) and hands the others on. Values templates may fill are
    checked once rendered (``sizing_spec`` in ``execute``); the others now, so a broken DAG fails
    at parse time. The metaclass applies the DAG's ``default_args`` to these arguments as to any
    operator's own.

    :param job_type: the job's name in the model store, e.g. ``"grep"``.
    :param scale_outs: the candidate scale-outs: a list, a range ``{"min": 1, "max": 8}``, or a
        template rendering to one.
    :param properties: the context (per-node values, data size, job arguments …).
    :param framework: ``spark`` | ``flink`` (the launching operators fix their own).
    :param target: runtime target: seconds, ``timedelta`` or text like ``"15m"``.
    :param deadline: absolute deadline (aware datetime or ISO-8601 string; templated), or
        ``"dag"``: the DAG's ``DeadlineAlert`` (as ``use_dag_deadline=True``).
    :param use_dag_deadline: take the deadline from the DAG's ``DeadlineAlert``
        (``deadline_alert_name`` picks one of several; refused without it).
    :param reserve: a duration to leave for the tasks after the sized one, or ``"auto"``:
        predicted from their durations in earlier runs (Airflow's task instances, else the
        store; ``default_task_reserve`` for a task with neither, refused without ``"auto"``).
        Only with a deadline. A ``target`` that is empty or white space (a template that rendered
        nothing) is no target.
    :param confidence: the probability the chosen size meets the target, in [0.5, 1).
    :param objective: ``min_scale_out`` | ``min_cost`` (needs ``price_per_node_hour``) | ``fastest`` |
        ``fewest_nodes`` (see docs/sizing.md).
    :param on_infeasible: what to launch when no scale-out meets the target at ``confidence``:
        ``fail`` (raise) | ``warn`` (the most likely to meet it; default) | ``run-likely`` (the smallest predicted
        to meet the target, the least node-hours of them with ``min_cost``: the confidence is
        given up, the decision says by how much) | ``run-max`` (the largest).
    :param default_scale_out: the size to use when no model can answer.
    :param bellamy_conn_id: the store's connection; ``connect_timeout_s`` bounds opening it and
        ``sizing_timeout_s`` the sizing after it.
    """

    _bellamy_sizing: ClassVar[bool] = True
    # the framework an operator launches (None: the ``framework`` argument, default spark)
    bellamy_framework: ClassVar[str | None] = None
    # the candidates may be left to launch time (the Flink operator reads the cluster's slots)
    bellamy_candidates_at_launch: ClassVar[bool] = False

    def __init__(
        self,
        *,
        job_type: str,
        scale_outs: Sequence[int] | Mapping[str, int] | str | None = None,
        properties: Mapping[str, Any] | str | None = None,
        framework: str | None = None,
        target: float | dt.timedelta | str | None = None,
        deadline: Any = None,
        use_dag_deadline: bool = False,
        deadline_alert_name: str | None = None,
        reserve: float | dt.timedelta | str = 0.0,
        default_task_reserve: float | dt.timedelta | str = 0.0,
        confidence: float | str = 0.9,
        objective: str = "min_scale_out",
        price_per_node_hour: float | str | None = None,
        on_infeasible: str = "warn",
        default_scale_out: int | str | None = None,
        bellamy_conn_id: str = "bellamy_default",
        connect_timeout_s: float | str | None = None,
        sizing_timeout_s: float | dt.timedelta | str = DEFAULT_SIZING_TIMEOUT_S,
        **kwargs: Any,
    ) -> None:
        fixed = self.bellamy_framework
        if fixed is not None and framework not in (None, fixed):
            raise InvalidInputError("framework", framework, f"{type(self).__name__} launches {fixed} jobs")
        framework = framework or fixed or "spark"
        given = locals()  # the arguments above, by name: SizingSpec's list is the one list
        arguments = {name: given[name] for name in SIZING_ARGUMENTS}
        SizingSpec.parse(
            arguments, defer_templates=True, require_scale_outs=not self.bellamy_candidates_at_launch
        )
        super().__init__(**kwargs)
        for name, value in arguments.items():
            setattr(self, name, value)
        if properties is None:
            self.properties = {}
        self.bellamy_conn_id = bellamy_conn_id
        # checked now (as the store's hook reads it), so "ten" or -1 fails the DAG at parse
        self.connect_timeout_s = (
            None if connect_timeout_s is None else parse_duration(connect_timeout_s, "connect_timeout_s")
        )
        # not a template field: checked now, so "30s" or -1 fails the DAG at parse, not the launch
        self.sizing_timeout_s = parse_duration(sizing_timeout_s, "sizing_timeout_s")

    @classmethod
    def from_config(cls, job: JobConfig, **kwargs: Any) -> Any:
        """An operator for ``job`` of a pipeline config; ``kwargs`` override or add arguments
        (``task_id`` defaults to the job's name for the operators that launch the job)."""
        return cls(**{**job.operator_kwargs(cls.bellamy_framework, cls.__name__), **kwargs})

    def sizing_spec(self) -> SizingSpec:
        """The sizing arguments as rendered for this try, parsed (refused naming field and value).

        One parse per launch: ``size_for_launch`` parses them and keeps the spec, which the
        façade sizes with (``Bellamy.size_spec``, not parsed again) and the write-back records the
        properties of. A try that did not size here (resumed after deferring, in a fresh operator;
        reattached to an earlier try's job) parses the rendered fields on its first call."""
        spec = getattr(self, "_bellamy_spec", None)
        if spec is None:
            arguments = {name: getattr(self, name) for name in SIZING_ARGUMENTS}
            at_launch = self.bellamy_candidates_at_launch
            if at_launch and arguments["scale_outs"] in ("", []):
                arguments["scale_outs"] = None  # left to launch, as the operator reads them
            spec = SizingSpec.parse(arguments, require_scale_outs=not at_launch)
            self._bellamy_spec = spec
        return spec

    # -- launch-time sizing ------------------------------------------------------------

    def resolve_target(
        self, context: Context, facade: Any | None = None, spec: SizingSpec | None = None
    ) -> RuntimeTarget:
        """The runtime target in seconds for this launch (see ``deadlines``)."""
        from airflow_provider_bellamy import deadlines

        spec = spec or self.sizing_spec()
        dag_deadline_at = None
        if spec.use_dag_deadline:
            dag = context.get("dag") or getattr(self, "dag", None)
            dag_deadline_at = deadlines.dag_deadline(dag, context, alert_name=spec.deadline_alert_name)
        reserve_s = 0.0
        unknown: list[str] = []
        sources: dict[str, str] = {}
        has_deadline = spec.deadline is not None or dag_deadline_at is not None
        if has_deadline and spec.reserve == RESERVE_AUTO:
            reserve_s, unknown, sources = self._predicted_reserve(
                context, facade, spec.default_task_reserve_s
            )
        elif has_deadline:
            reserve_s = float(spec.reserve)
        return deadlines.runtime_target(
            target=spec.target_s,
            deadline=spec.deadline,
            dag_deadline_at=dag_deadline_at,
            reserve_s=reserve_s,
            unknown_reserve_tasks=unknown,
            reserve_sources=sources,
        )

    def _predicted_reserve(
        self, context: Context, facade: Any | None, default_s: float
    ) -> tuple[float, list[str], dict[str, str]]:
        """The longest downstream path, each task costing the p90 of its last durations: first
        Airflow's own task instances (``task_history``), else the runs recorded in the store,
        else ``default_task_reserve``. Returns (seconds, tasks without a figure, where each
        task's figure came from)."""
        from airflow_provider_bellamy import deadlines
        from airflow_provider_bellamy.task_history import airflow_task_durations

        task = context.get("task") or self
        dag = getattr(task, "dag", None)
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
        from airflow_provider_bellamy.callbacks import ti_id_of

        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        return {
            "dag_id": ti.dag_id,
            "task_id": ti.task_id,
            "run_id": ti.run_id,
            "map_index": -1 if map_index is None else map_index,
            "try_number": ti.try_number,
            # which incarnation of the run (one deleted and created again keeps its run_id)
            "ti_id": ti_id_of(ti),
        }

    def _fallback(self, reason: str, spec: SizingSpec, target_s: float | None) -> Any:
        """The decision when no model answered: nothing checked it against the target, so it is
        not ``feasible`` (as ``sizing.default_decision``)."""
        from airflow_provider_bellamy.decisions import SizingDecision

        assert spec.scale_outs is not None
        if spec.default_scale_out is not None:
            chosen = spec.default_scale_out
            why = f"no model answer ({reason}); using default_scale_out={chosen}"
        elif spec.on_infeasible == "fail":
            raise InfeasibleTargetError(
                f"job {spec.job_type!r}: no model answer ({reason}), "
                "no default_scale_out and on_infeasible=fail"
            )
        else:
            chosen = max(spec.scale_outs)
            why = (
                f"no model answer ({reason}); on_infeasible={spec.on_infeasible}: largest scale-out {chosen}"
            )
        self.log.warning("Bellamy: %s", why)
        return SizingDecision(
            job_type=spec.job_type,
            chosen_scale_out=chosen,
            feasible=False,
            reason=why,
            target_s=target_s,
            confidence=spec.confidence,
            objective=spec.objective,
            candidates=[],
            context=dict(spec.properties),
            framework=spec.framework,
            fallback_reason=reason,
            price_per_node_hour=spec.price_per_node_hour,
            created_at=dt.datetime.now(dt.timezone.utc).isoformat(),
        )

    def size_for_launch(self, context: Context) -> tuple[SizingDecision, RuntimeTarget, Any | None]:
        """Decide the scale-out for this try; returns (decision, target, façade or None when unusable)."""
        started = time.monotonic()
        _prefetch_model_code()
        self._bellamy_spec = None  # parsed from the fields as rendered for this launch
        spec = self.sizing_spec()
        assert spec.scale_outs is not None  # an operator choosing them at launch sets them first

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
        target = self.resolve_target(context, facade, spec)
        self.log.info("Bellamy: runtime target for %s: %s", spec.job_type, target.explanation)

        decision = None
        refused = False  # the store did not take the decision sizing made: not asked again
        if facade is not None:
            try:
                decision = _run_with_timeout(
                    lambda: facade.size_spec(
                        spec, target_s=target.target_s, provenance=self._provenance(context)
                    ),
                    budget,
                    "sizing",
                )
            except DecisionNotStoredError as exc:
                # The model answered; only its row is missing (a read-only role or replica). Its
                # answer launches: a fallback would launch the largest candidate instead.
                decision, refused = exc.decision, True
                self.log.warning("Bellamy: this decision could not be stored (%s)", exc)
            except InvalidInputError as exc:
                # an unknown job type is a model problem the fallback covers; other bad
                # inputs are the DAG author's and must fail loudly
                if type(exc).__name__ != "UnknownJobTypeError":
                    raise
                decision = self._fallback(str(exc), spec, target.target_s)
            except Exception as exc:
                decision = self._fallback(f"{type(exc).__name__}: {exc}", spec, target.target_s)
                if isinstance(exc, (SizingTimeoutError, StoreError)):
                    facade = None  # asking it again to store the decision would wait as long
        else:
            decision = self._fallback("the store could not be opened", spec, target.target_s)
        if decision.decision_id is None and not refused:
            self._store_fallback(decision, facade, spec, context, hook.connect_timeout_s + 5.0)

        if decision.fallback_reason and decision.candidates:
            self.log.warning("Bellamy: sizing fell back: %s", decision.fallback_reason)
        if not decision.feasible and decision.shortfall_s is not None:
            # the model answered and no candidate meets the target (a default decision, made
            # without a model, has no shortfall: its size is the configured default's)
            self._apply_infeasible_policy(decision, spec, target)
        if target.deadline_passed:
            late_s = -(target.remaining_s or 0.0)
            decision.reason = (
                f"the deadline {target.deadline.isoformat() if target.deadline else '?'} had already passed "
                f"when the task started ({late_s:.0f} s earlier); {decision.reason}"
            )
        self.log.info(
            "Bellamy: %s → scale-out %s (%s) in %.3f s",
            spec.job_type,
            decision.chosen_scale_out,
            decision.reason,
            time.monotonic() - started,
        )
        return decision, target, facade

    def _store_fallback(
        self,
        decision: SizingDecision,
        facade: Any | None,
        spec: SizingSpec,
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
                lambda: facade.record_decision(decision, provenance=self._provenance(context), spec=spec),
                timeout_s,
                "storing the decision",
            )
        except Exception as exc:  # the launch goes on; the log says what is missing
            self.log.warning("Bellamy: this decision could not be stored (%s: %s)", type(exc).__name__, exc)

    def _apply_infeasible_policy(
        self, decision: SizingDecision, spec: SizingSpec, target: RuntimeTarget
    ) -> None:
        scale_outs = spec.scale_outs or [decision.chosen_scale_out]
        shortfall = decision.shortfall_s
        if shortfall is not None and math.isinf(shortfall):
            short = " (the band has no upper bound: the context lies too far outside the training data)"
        else:
            short = f" (short by {shortfall:.1f} s)" if shortfall else ""
        msg = (
            f"job {spec.job_type!r}: no scale-out in {scale_outs} meets the target "
            f"{target.target_s if target.target_s is None else round(target.target_s, 1)} s at confidence "
            f"{decision.confidence}{short}; {target.explanation}"
        )
        if spec.on_infeasible == "fail":
            raise InfeasibleTargetError(msg + "; on_infeasible=fail")
        # the decision was made (and stored) by the policy's rule (sizing.ON_INFEASIBLE_RULES); its
        # reason says which size that rule took and why (run-likely: the confidence given up, by how
        # much; or, with no size predicted to meet the target under a bounded band, the likeliest)
        launching = (
            f"on_infeasible={spec.on_infeasible}: launching {decision.chosen_scale_out}: {decision.reason}"
        )
        self.log.warning("Bellamy: %s; %s", msg, launching)


def _templated(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


class BellamySizingOperator(BellamySizingMixin, BaseOperator):
    """Size a job and return the decision as XCom, for any operator to use through templating.

    The XCom is ``SizingDecision.to_dict()`` plus ``target`` (how the runtime target
    was obtained) and ``sized_task_id``. Use it as
    ``"{{ ti.xcom_pull('size')['chosen_scale_out'] }}"`` (with
    ``render_template_as_native_obj=True`` on the DAG the value stays an int).

    Takes the sizing arguments of ``BellamySizingMixin`` and:

    :param sized_task_id: the task that runs the sized job; its runtime is written back
        by ``record_runtime`` or the listener plugin.
    """

    template_fields: Sequence[str] = SIZING_TEMPLATE_FIELDS
    template_fields_renderers: ClassVar[dict[str, str]] = {"properties": "json"}
    ui_color = "#d7ecfa"

    def __init__(self, *, sized_task_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sized_task_id = sized_task_id

    def execute(self, context: Context) -> dict[str, Any]:
        decision, target, _ = self.size_for_launch(context)
        out = decision.to_dict()
        out["target"] = target.to_dict()
        out["sized_task_id"] = self.sized_task_id
        return out
