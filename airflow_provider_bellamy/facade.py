"""``Bellamy``: the one object the CLI, the operators and users' scripts go through.

A delegate: each call checks what only it takes and hands the work to the module named for it —
``spec`` (the sizing arguments), ``records`` (a run's fields), ``run_history`` (the store's runs),
``resolution`` (which model answers a request, the size/predict path), ``decision_log`` (the
stored decisions), ``model_cache`` (models loaded in this process), ``retraining`` (training,
promotion, pruning). See docs/architecture.md. Importing this module is cheap: torch, pandas
and the model code load only when a call needs a model.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_bellamy import decision_log, resolution, retraining, run_history
from airflow_provider_bellamy.decisions import Prediction, SizingDecision
from airflow_provider_bellamy.exceptions import InfeasibleTargetError, InvalidInputError
from airflow_provider_bellamy.model_cache import clear_model_cache, load_stored
from airflow_provider_bellamy.records import run_record, validate_provenance
from airflow_provider_bellamy.retraining import DEFAULT_HOLDOUT_FRACTION, TrainReport
from airflow_provider_bellamy.spec import SizingSpec, parse_api_arguments
from airflow_provider_bellamy.store import SchemaStatus, Store
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
        timeout = connect_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
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
        """Store runs (canonical columns + provenance), all validated first, in one transaction;
        returns their row ids in input order (an Airflow try stored already: its row's id)."""
        return run_history.record(self.store, run_history.prepare(self.store, runs))

    def import_runs(
        self,
        runs: pd.DataFrame | Sequence[Mapping[str, Any]],
        *,
        append: bool = False,
        skip_stored: bool = False,
    ) -> list[int]:
        """Record a data set of past runs (a file, a trace set) once: ``run_history.record_data_set``."""
        rows = run_history.prepare(self.store, runs)
        return run_history.record_data_set(self.store, rows, append=append, skip_stored=skip_stored)

    def record_run(self, **fields: Any) -> int:
        """Store one run given as keyword arguments (``records.RECORD_RUN_FIELDS``: ``job_type``,
        ``framework``, ``scale_out``, ``runtime_s`` required; ``context`` a mapping); returns its row id."""
        return self.record_runs([run_record(fields)])[0]

    def link_decision(self, decision_id: int, run_row_id: int) -> None:
        """Attach the run a sizing decision led to."""
        decision_log.link(self.store, decision_id, run_row_id)

    def recorded_job_run(self, framework: str, external_id: str) -> int | None:
        """The run row already stored for a cluster job (any Airflow try), if any."""
        return run_history.recorded_job(self.store, framework, external_id)

    def task_durations(self, dag_id: str, task_id: str, *, last: int = 20) -> list[float]:
        """An Airflow task's last ``last`` successful runtimes recorded in the store, newest first."""
        return run_history.task_durations(self.store, dag_id, task_id, last=last)

    # ================================================================ training and models

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
        """Pre-train a general model per job type (``"all"``: one on every job type's runs), store
        it and promote it if it is not worse on held-out runs; see ``retraining.train``."""
        return retraining.train(
            self.store,
            job_type,
            seed=seed,
            time_budget_s=time_budget_s,
            holdout_fraction=holdout_fraction,
            force=force,
            config=config,
        )

    def list_models(
        self, job_type: str | None = None, *, scope: str | None = "general", status: str | None = None
    ) -> list[dict[str, Any]]:
        return retraining.list_models(self.store, job_type, scope=scope, status=status)

    def prune_models(self, *, keep: int = 3, job_type: str | None = None) -> dict[str, Any]:
        """Delete the model versions nothing uses, keeping ``keep`` older general versions per job
        type for rollback (``retraining.prune_models``)."""
        return retraining.prune_models(self.store, keep=keep, job_type=job_type)

    def promote(self, version_id: int) -> dict[str, Any]:
        """Make a stored model version the active one of its job type (atomic)."""
        return retraining.promote(self.store, version_id)

    def rollback(self, job_type: str) -> dict[str, Any]:
        """Re-activate the general version that was active before the current one (atomic)."""
        return retraining.rollback(self.store, job_type)

    def load_model(self, version_id: int | None = None, *, job_type: str | None = None) -> Any:
        """A stored model by version id, or the active general model of ``job_type``."""
        return load_stored(self.store, version_id, job_type=job_type)

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
        """Runtime per candidate scale-out with a band at ``confidence`` (docs/sizing.md)."""
        spec = parse_api_arguments(job_type, context, scale_outs, confidence=confidence, framework=framework)
        return resolution.predict(self.store, spec)

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
        *,
        on_infeasible: str = "warn",
    ) -> SizingDecision:
        """Choose a scale-out for the target and store the decision (``decision_id`` set).

        ``on_infeasible``, where the model answers and no candidate meets the target at
        ``confidence`` (``feasible=False``, ``shortfall_s`` set): ``warn`` the most likely to meet it, ``run-likely``
        the smallest predicted to meet it (the confidence given up; the reason says by how much),
        ``run-max`` the largest; ``fail`` raises ``InfeasibleTargetError`` once the decision is
        stored, as the operators do."""
        spec = parse_api_arguments(
            job_type,
            context,
            scale_outs,
            target=target_s,
            confidence=confidence,
            objective=objective,
            price_per_node_hour=price_per_node_hour,
            default_scale_out=default_scale_out,
            framework=framework,
            on_infeasible=on_infeasible,
        )
        decision = self.size_spec(spec, provenance=provenance)
        if spec.on_infeasible == "fail" and not decision.feasible and decision.shortfall_s is not None:
            raise InfeasibleTargetError(
                f"job {decision.job_type!r}: {decision.reason} (decision {decision.decision_id}); "
                "on_infeasible=fail"
            )
        return decision

    def size_spec(
        self,
        spec: SizingSpec,
        *,
        target_s: float | None = None,
        provenance: Mapping[str, Any] | None = None,
    ) -> SizingDecision:
        """:meth:`size` for a ``SizingSpec`` parsed already (an operator's, once per launch), not
        parsed again; ``target_s``: the target its deadline resolved to (default: its own)."""
        if not isinstance(spec, SizingSpec):
            raise InvalidInputError("spec", spec, "must be a SizingSpec (SizingSpec.parse)")
        spec.check_sizable(prefix="spec.")
        prov = validate_provenance(provenance)
        target = spec.target_s if target_s is None else target_s
        return resolution.size(self.store, spec, target, prov)

    def record_decision(
        self,
        decision: SizingDecision,
        scale_outs: Sequence[int] | None = None,
        provenance: Mapping[str, Any] | None = None,
        *,
        spec: SizingSpec | None = None,
    ) -> SizingDecision:
        """Store a decision made without :meth:`size` (chosen among ``scale_outs``, or the
        candidates of ``spec`` it was made for) and set its ``decision_id``: a launch's fallback
        where sizing could not answer, so that every launch has its decision row."""
        if spec is None:
            spec = parse_api_arguments(
                decision.job_type,
                decision.context,
                scale_outs,
                confidence=decision.confidence,
                framework=decision.framework,
            )
        req = resolution.request(self.store, spec)
        return decision_log.store_decision(self.store, decision, req, None, validate_provenance(provenance))

    # ================================================================ decisions

    def list_decisions(self, job_type: str | None = None, *, limit: int | None = 50) -> list[dict[str, Any]]:
        return decision_log.listing(self.store, job_type, limit=limit)

    def prune_decisions(self, older_than: dt.timedelta | float | str, *, keep_linked: bool = False) -> int:
        """Delete the decisions older than ``older_than`` (a timedelta, seconds, or text like ``90d``); returns how
        many. Their runs stay, unlinked; ``keep_linked`` keeps those that led to a run."""
        return decision_log.prune(self.store, older_than, keep_linked=keep_linked)

    def get_decision(self, decision_id: int) -> SizingDecision:
        return decision_log.get(self.store, decision_id)

    # ================================================================ listing runs

    def list_runs(
        self,
        job_type: str | None = None,
        *,
        status: str | None = None,
        source: str | None = None,
        limit: int | None = 50,
    ) -> list[dict[str, Any]]:
        return run_history.listing(self.store, job_type, status=status, source=source, limit=limit)

    def count_runs(
        self,
        job_type: str | None = None,
        *,
        status: str | None = None,
        source: str | None = None,
        dataset: str | None = None,
    ) -> int:
        return run_history.count(self.store, job_type=job_type, status=status, source=source, dataset=dataset)

    def job_types(self) -> list[str]:
        return run_history.job_types(self.store)

    def runs_frame(
        self,
        job_type: str | None = None,
        *,
        successful_only: bool = True,
        context: Mapping[str, Any] | None = None,
    ) -> pd.DataFrame:
        """Stored runs as a canonical DataFrame (plus ``id``), oldest first; ``context``: one context's."""
        return run_history.frame(self.store, job_type, successful_only=successful_only, context=context)

    def export_runs(
        self,
        path: str | Path,
        job_type: str | None = None,
        *,
        successful_only: bool = False,
        overwrite: bool = False,
    ) -> int:
        """Write the stored runs with their provenance to a CSV/TSV file, as ``history import`` and
        ``benchmark --traces`` read them; returns the runs written (none stored: an error)."""
        return run_history.export(
            self.store, path, job_type, successful_only=successful_only, overwrite=overwrite
        )

    def import_traces(self, name: str = "all", *, append: bool = False) -> dict[str, int]:
        """Record a bundled trace set ("c3o", "bell" or "all") once unless ``append``; returns
        runs added per set."""
        return run_history.import_traces(self.store, name, append=append)
