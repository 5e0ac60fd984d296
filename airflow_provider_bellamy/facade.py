"""``Bellamy``: the one object the CLI, the operators and users' scripts go through.

It records runs, trains and versions models, predicts runtimes and sizes launches, and stores
every decision. Each of these lives in a module named for it, which this class delegates to:
``records`` (validating runs), ``run_history`` (the store's runs), ``resolution`` (which model
answers a request, fine-tuning, fallbacks; see its docstring), ``model_cache`` (models loaded in
this process), ``retraining`` (training, promotion, pruning), ``sizing`` (the policy).
Importing this module is cheap: torch, pandas and the model code load only when a call needs a model.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_bellamy import resolution, retraining, run_history
from airflow_provider_bellamy.decisions import Prediction, SizingDecision
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.model_cache import clear_model_cache, load_version
from airflow_provider_bellamy.records import (
    context_fingerprint,
    prepare_runs,
    successful_runs,
    validate_int,
    validate_label,
)

# the names size(), predict() and _request() below use
from airflow_provider_bellamy.records import validate_provenance as _provenance
from airflow_provider_bellamy.resolution import Request as _Request
from airflow_provider_bellamy.resolution import Resolved as _Resolved
from airflow_provider_bellamy.retraining import DEFAULT_HOLDOUT_FRACTION, TrainReport
from airflow_provider_bellamy.spec import SizingSpec
from airflow_provider_bellamy.store import (
    DecisionRepository,
    ModelRepository,
    RunRepository,
    SchemaStatus,
    Store,
)
from airflow_provider_bellamy.store.engine import DEFAULT_CONNECT_TIMEOUT_S

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Bellamy", "TrainReport", "clear_model_cache"]


class Bellamy:
    """Façade over the store, the model and the sizing policy (see docs/architecture.md)."""

    def __init__(
        self,
        store_url: str | None = None,
        *,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        blob_threshold_bytes: int | None = None,
    ) -> None:
        if not isinstance(connect_timeout_s, (int, float)) or isinstance(connect_timeout_s, bool):
            raise InvalidInputError("connect_timeout_s", connect_timeout_s, "must be a number of seconds > 0")
        if not math.isfinite(connect_timeout_s) or connect_timeout_s <= 0:
            raise InvalidInputError("connect_timeout_s", connect_timeout_s, "must be a number of seconds > 0")
        kwargs: dict[str, Any] = {"connect_timeout_s": float(connect_timeout_s)}
        if blob_threshold_bytes is not None:
            kwargs["blob_threshold_bytes"] = int(blob_threshold_bytes)
        self.store = Store(store_url, **kwargs)

    def __repr__(self) -> str:
        return f"Bellamy(store_url={self.store.display_url!r})"

    # ================================================================ schema

    def upgrade(self) -> tuple[str | None, str | None]:
        """Create or migrate the store's schema (what ``bellamy db upgrade`` runs)."""
        return self.store.upgrade()

    def schema_status(self) -> SchemaStatus:
        return self.store.schema_status()

    # ================================================================ runs

    def record_runs(self, runs: pd.DataFrame | Sequence[Mapping[str, Any]]) -> list[int]:
        """Store runs (canonical columns + provenance); returns their row ids in input order.

        Every row is validated before anything is written, and all rows go in one
        transaction. Recording the same Airflow try (dag_id, task_id, run_id,
        map_index, try_number) again returns the stored row's id and adds nothing.
        """
        return run_history.record(self.store, prepare_runs(runs, self._stored_kinds))

    def import_runs(
        self,
        runs: pd.DataFrame | Sequence[Mapping[str, Any]],
        *,
        append: bool = False,
        skip_stored: bool = False,
    ) -> list[int]:
        """Record a data set of past runs (a file, a trace set) exactly once: where a ``dataset`` of
        the runs already has stored runs, refuse (or, with ``skip_stored``, add nothing and return
        []) unless ``append``. The check runs in the write transaction, so two imports of one file
        at once store it once."""
        rows = prepare_runs(runs, self._stored_kinds)
        return run_history.record_data_set(self.store, rows, append=append, skip_stored=skip_stored)

    def record_run(
        self,
        *,
        job_type: str,
        framework: str,
        scale_out: int,
        runtime_s: float,
        context: Mapping[str, Any] | None = None,
        status: str = "success",
        dag_id: str | None = None,
        task_id: str | None = None,
        run_id: str | None = None,
        map_index: int = -1,
        try_number: int = 1,
        started_at: dt.datetime | str | None = None,
        ended_at: dt.datetime | str | None = None,
        external_id: str | None = None,
        decision_id: int | None = None,
        source: str | None = None,
        dataset: str | None = None,
        queue_s: float | None = None,
        requested_scale_out: int | None = None,
        excluded_reason: str | None = None,
    ) -> int:
        """Store one run (see :meth:`record_runs`); returns its row id.

        ``runtime_s`` is the time the job ran at ``scale_out`` (what the cluster granted);
        ``queue_s`` the time it waited for that before; ``requested_scale_out`` what was asked
        for; ``excluded_reason`` keeps the run out of training (it stays stored and exported)."""
        record = {name: value for name, value in locals().items() if name != "self"}
        return self.record_runs([record])[0]

    def _stored_kinds(self, job_types: Iterable[str]) -> dict[str, dict[str, str]]:
        return run_history.stored_kinds(self.store, job_types)

    def _conform(self, job_type: str, context: Any, *, where: str = "context") -> dict[str, str | float]:
        return run_history.conform(self.store, job_type, context, where=where)

    def link_decision(self, decision_id: int, run_row_id: int) -> None:
        """Attach the run a sizing decision led to."""
        decision_id = validate_int(decision_id, "decision_id")
        run_row_id = validate_int(run_row_id, "run_row_id")
        self.store.write(
            lambda s: DecisionRepository(s).link(decision_id, run_row_id), what="linking a decision"
        )

    def recorded_job_run(self, framework: str, external_id: str) -> int | None:
        """The run row already stored for a cluster job (any Airflow try), if any."""
        with self.store.read("looking up a recorded job") as session:
            return RunRepository(session).id_of_job(framework, external_id)

    def task_durations(self, dag_id: str, task_id: str, *, last: int = 20) -> list[float]:
        """An Airflow task's last ``last`` successful runtimes recorded in the store, newest first."""
        with self.store.read("reading recorded task durations") as session:
            return RunRepository(session).task_runtimes(dag_id, task_id, limit=last)

    # ================================================================ training

    def train(
        self,
        job_type: str | None = None,
        *,
        seed: int = 0,
        time_budget_s: float | None = None,
        holdout_fraction: float = DEFAULT_HOLDOUT_FRACTION,
        force: bool = False,
        config: Any = None,
    ) -> list[TrainReport]:
        """Pre-train a general model per job type, store it, promote it if it is not worse.

        ``job_type="all"``: one model on every job type's runs, for job types without a model of
        their own (see ``resolution``). ``time_budget_s``: per job type, the whole call's (reading
        the runs included), default ``retraining.DEFAULT_TRAIN_BUDGET_S``. It trains on a window of
        the history, not all of it: the newest ``TRAINING_RUNS_PER_SCALE_OUT`` runs of each context
        and scale-out, at most ``MAX_TRAINING_RUNS`` of them (the newest).

        The newest ``holdout_fraction`` of a job type's successful runs that the active
        model has not seen are held out; candidate and active model are compared on
        them by mean relative error. A job type whose runs did not change since the
        active model was trained is reported ``up_to_date`` (``force`` retrains).
        """
        return retraining.train(
            self.store,
            job_type,
            seed=seed,
            time_budget_s=time_budget_s,
            holdout_fraction=holdout_fraction,
            force=force,
            config=config,
        )

    # ================================================================ models

    def list_models(
        self, job_type: str | None = None, *, scope: str | None = "general", status: str | None = None
    ) -> list[dict[str, Any]]:
        with self.store.read("listing models") as session:
            models = ModelRepository(session).list(job_type=job_type, scope=scope, status=status)
            return [mv.to_dict() for mv in models]

    def prune_models(self, *, keep: int = 3, job_type: str | None = None) -> dict[str, Any]:
        """Delete the model versions nothing uses (see :meth:`ModelRepository.prune`): never an
        active general version, nor a context's copy of it; ``keep`` older general versions per
        job type stay for rollback. Returns what was deleted, per scope, and the files removed."""
        keep = validate_int(keep, "keep", minimum=0)
        if job_type is not None:
            job_type = validate_label(job_type, "job_type")
        return retraining.prune_models(self.store, keep=keep, job_type=job_type)

    def promote(self, version_id: int) -> dict[str, Any]:
        """Make a stored model version the active one of its job type (atomic)."""
        version_id = validate_int(version_id, "version_id")
        return self.store.write(lambda s: ModelRepository(s).promote(version_id).to_dict(), what="promoting")

    def rollback(self, job_type: str) -> dict[str, Any]:
        """Re-activate the general version that was active before the current one (atomic)."""
        job_type = validate_label(job_type, "job_type")
        return self.store.write(
            lambda s: ModelRepository(s).rollback(job_type).to_dict(), what="rolling back"
        )

    def load_model(self, version_id: int | None = None, *, job_type: str | None = None) -> Any:
        """A stored model by version id, or the active general model of ``job_type``."""
        with self.store.read("loading a model") as session:
            repo = ModelRepository(session)
            if version_id is not None:
                mv = repo.get(validate_int(version_id, "version_id"))
                if mv is None:
                    raise InvalidInputError("version_id", version_id, "no such model version")
            else:
                if job_type is None:
                    raise InvalidInputError("job_type", None, "give a job type or a version id")
                mv = repo.active(job_type)
                if mv is None:
                    raise InvalidInputError("job_type", job_type, "has no active model; run `bellamy train`")
            return load_version(self.store, mv, repo)

    # ================================================================ predict / size

    def predict(
        self,
        job_type: str,
        context: Mapping[str, Any],
        scale_outs: Sequence[int],
        confidence: float = 0.9,
        *,
        framework: str | None = None,
    ) -> Prediction:
        """Runtime per candidate scale-out with a band at ``confidence``."""
        req = self._request(
            _spec(
                job_type=job_type,
                properties=context,
                scale_outs=scale_outs,
                confidence=confidence,
                framework=framework,
            )
        )
        prediction, resolved = self._finite_band(req, self._resolve(req))
        if prediction is None:
            why = (resolved.fallback_reason or "no model").removesuffix(": default scale-out")
            raise InvalidInputError(
                "context",
                req.context,
                f"cannot predict: {why}; run `bellamy train` or record runs at more scale-outs",
            )
        return prediction

    def size(
        self,
        job_type: str,
        context: Mapping[str, Any],
        scale_outs: Sequence[int],
        target_s: float | None,
        confidence: float = 0.9,
        objective: str = "min_scale_out",
        price_per_node_hour: float | None = None,
        default_scale_out: int | None = None,
        framework: str | None = None,
        provenance: Mapping[str, Any] | None = None,
    ) -> SizingDecision:
        """Choose a scale-out for the target and store the decision (``decision_id`` set)."""
        from airflow_provider_bellamy import sizing

        spec = _spec(
            job_type=job_type,
            properties=context,
            scale_outs=scale_outs,
            target=target_s,
            confidence=confidence,
            objective=objective,
            price_per_node_hour=price_per_node_hour,
            default_scale_out=default_scale_out,
            framework=framework,
        )
        target, objective, price = spec.target_s, spec.objective, spec.price_per_node_hour
        default_scale_out = spec.default_scale_out
        prov = _provenance(provenance)
        req = self._request(spec)
        prediction, resolved = self._finite_band(req, self._resolve(req))
        if prediction is not None:
            decision = sizing.decide(
                prediction,
                target_s=target,
                objective=objective,
                price_per_node_hour=price,
                context=req.context,
                framework=req.framework,
            )
        else:
            decision = sizing.default_decision(
                req.job_type,
                req.scale_outs,
                default_scale_out if default_scale_out is not None else max(req.scale_outs),
                resolved.fallback_reason or "no model",
                target_s=target,
                confidence=req.confidence,
                objective=objective,
                price_per_node_hour=price,
                context=req.context,
                framework=req.framework,
            )
        if decision.fallback_reason is None and resolved.fallback_reason is not None:
            decision.fallback_reason = resolved.fallback_reason
        if decision.model_version is None:
            decision.model_version = resolved.label
        return self._store_decision(decision, req, resolved.version_id, prov)

    def record_decision(
        self,
        decision: SizingDecision,
        scale_outs: Sequence[int],
        provenance: Mapping[str, Any] | None = None,
    ) -> SizingDecision:
        """Store a decision made without :meth:`size` (chosen among ``scale_outs``) and set its
        ``decision_id``: a launch's fallback where sizing could not answer (a job type the store
        does not know, sizing that failed), so that every launch has its decision row."""
        req = self._request(
            _spec(
                job_type=decision.job_type,
                properties=decision.context,
                scale_outs=scale_outs,
                confidence=decision.confidence,
                framework=decision.framework,
            )
        )
        return self._store_decision(decision, req, None, _provenance(provenance))

    def _store_decision(
        self, decision: SizingDecision, req: _Request, model_version_id: int | None, prov: dict[str, Any]
    ) -> SizingDecision:
        return resolution.store_decision(self.store, decision, req, model_version_id, prov)

    def _request(self, spec: SizingSpec) -> _Request:
        """A parsed request, its context conformed to what the job type's stored runs hold."""
        assert spec.scale_outs is not None  # required by _spec
        ctx = self._conform(spec.job_type, spec.properties)
        return _Request(
            spec.job_type,
            ctx,
            context_fingerprint(spec.job_type, ctx),
            spec.scale_outs,
            spec.confidence,
            spec.framework,
        )

    def _finite_band(self, req: _Request, resolved: _Resolved) -> tuple[Prediction | None, _Resolved]:
        return resolution.finite_band(self.store, req, resolved)

    def _resolve(self, req: _Request) -> _Resolved:
        return resolution.resolve(self.store, req)

    # ================================================================ decisions

    def list_decisions(self, job_type: str | None = None, *, limit: int | None = 50) -> list[dict[str, Any]]:
        with self.store.read("listing decisions") as session:
            return [d.to_dict() for d in DecisionRepository(session).list(job_type=job_type, limit=limit)]

    def prune_decisions(self, older_than: dt.timedelta | float, *, keep_linked: bool = False) -> int:
        """Delete the decisions made more than ``older_than`` (a timedelta, or seconds) ago;
        returns how many. Their runs stay, unlinked; ``keep_linked`` keeps the decisions that
        led to a recorded run. Deleted in batches, each its own short transaction, so launches
        recording decisions meanwhile are not held up."""
        seconds = older_than.total_seconds() if isinstance(older_than, dt.timedelta) else older_than
        if (
            isinstance(seconds, bool)
            or not isinstance(seconds, (int, float))
            or not math.isfinite(seconds)
            or seconds <= 0
        ):
            raise InvalidInputError("older_than", older_than, "must be a duration > 0")
        cutoff = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds)
        if not self.store.ensure_schema(write=False):
            return 0
        deleted = 0
        while True:
            done = self.store.write(
                lambda s: DecisionRepository(s).prune_batch(cutoff, keep_linked=keep_linked),
                what="pruning decisions",
            )
            deleted += done
            if done == 0:
                return deleted

    def get_decision(self, decision_id: int) -> SizingDecision:
        decision_id = validate_int(decision_id, "decision_id")
        with self.store.read("reading a decision") as session:
            row = DecisionRepository(session).get(decision_id)
            if row is None:
                raise InvalidInputError("decision_id", decision_id, "no such decision")
            data = row.to_dict()
        return SizingDecision.from_dict(data)

    # ================================================================ listing runs

    def list_runs(
        self,
        job_type: str | None = None,
        *,
        status: str | None = None,
        source: str | None = None,
        limit: int | None = 50,
    ) -> list[dict[str, Any]]:
        with self.store.read("listing runs") as session:
            rows = RunRepository(session).list(job_type=job_type, status=status, source=source, limit=limit)
            return [r.to_dict() for r in rows]

    def count_runs(
        self,
        job_type: str | None = None,
        *,
        status: str | None = None,
        source: str | None = None,
        dataset: str | None = None,
    ) -> int:
        with self.store.read("counting runs") as session:
            return RunRepository(session).count(
                job_type=job_type, status=status, source=source, dataset=dataset
            )

    def job_types(self) -> list[str]:
        with self.store.read("listing job types") as session:
            return RunRepository(session).job_types()

    def runs_frame(
        self,
        job_type: str | None = None,
        *,
        successful_only: bool = True,
        context: Mapping[str, Any] | None = None,
    ) -> pd.DataFrame:
        """Stored runs as a canonical DataFrame (plus ``id``), oldest first."""
        fingerprint = None
        if context is not None:
            if job_type is None:
                raise InvalidInputError("job_type", None, "needed to select the runs of one context")
            job_type = validate_label(job_type, "job_type")
            fingerprint = context_fingerprint(job_type, self._conform(job_type, context))
        return run_history.read_frame(
            self.store, job_type, successful_only=successful_only, fingerprint=fingerprint
        )

    def export_runs(
        self,
        path: str | Path,
        job_type: str | None = None,
        *,
        successful_only: bool = False,
        overwrite: bool = False,
    ) -> int:
        """Write the stored runs (one job type's, or all) with their provenance to a CSV/TSV file
        in the canonical columns — what ``history import`` and ``benchmark --traces`` read; returns
        the runs written. Nothing stored → an error, and no file."""
        from airflow_provider_bellamy.datasets import write_runs_file

        frame = self.runs_frame(job_type, successful_only=False).drop(columns=["id"])
        if successful_only:
            frame = successful_runs(frame)
        if frame.empty:
            field, value = (
                ("job_type", job_type) if job_type is not None else ("store", self.store.display_url)
            )
            raise InvalidInputError(field, value, "has no stored runs to export")
        return write_runs_file(frame, path, overwrite=overwrite)

    def import_traces(self, name: str = "all", *, append: bool = False) -> dict[str, int]:
        """Record a bundled trace set ("c3o", "bell" or "all"); returns runs added per set.

        A set already in the store is skipped unless ``append`` (traces have genuine
        duplicate rows, so they cannot be de-duplicated row by row).
        """
        from airflow_provider_bellamy.datasets import available_traces, load_traces

        sets = sorted(available_traces())
        if name != "all" and name not in sets:
            raise InvalidInputError("traces", name, f"choose one of {[*sets, 'all']}")
        added: dict[str, int] = {}
        for set_name in sets if name == "all" else [name]:
            added[set_name] = len(self.import_runs(load_traces(set_name), append=append, skip_stored=True))
        return added


# The façade's arguments that are named otherwise than the operators' (in its errors).
_FACADE_NAMES = {"properties": "context", "target": "target_s"}


def _spec(**arguments: Any) -> SizingSpec:
    """The sizing arguments of a ``size``/``predict`` call, parsed as the operators' and the YAML's."""
    try:
        return SizingSpec.parse(arguments, names=_FACADE_NAMES)
    except InvalidInputError as exc:
        if not exc.field.startswith("scale_outs["):
            raise
        # the API names the argument it was given, with the whole list (as records' checks do)
        raise InvalidInputError(
            "scale_outs", arguments["scale_outs"], f"{exc.field}: {exc.problem}"
        ) from None
