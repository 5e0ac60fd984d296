"""``Bellamy``: the one object the CLI, the operators and users' scripts go through.

It records runs, trains and versions models, predicts runtimes and sizes launches,
and stores every decision. Importing this module is cheap: torch, pandas and the
model code load only when a call needs a model.

Model resolution for ``predict``/``size`` (job type J, context C):
1. the active general model of J — or, where J has none, the model of "all" job types
   (``train("all")``) when it can read C — fine-tuned on C's successful runs; the fine-tuned
   copy is stored (scope "context") and reused until C gets new runs or the general model changes;
2. no general model: Ernest fitted on C's runs when they cover >= 2 distinct scale-outs;
3. otherwise (``size`` only): a default decision at ``default_scale_out``.
Every fallback is named in the prediction's/decision's ``fallback_reason``.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_bellamy.decisions import Prediction, SizingDecision
from airflow_provider_bellamy.exceptions import InvalidInputError, ModelFileError, UnknownJobTypeError
from airflow_provider_bellamy.records import (
    PROVENANCE_COLUMNS,
    REQUIRED_COLUMNS,
    RUN_SOURCES,
    RUN_STATUSES,
    batch_kinds,
    conform_context,
    context_fingerprint,
    successful_runs,
    validate_label,
    validate_runtime,
    validate_scale_out,
)
from airflow_provider_bellamy.spec import ALL_JOB_TYPES, SizingSpec, parse_job_type
from airflow_provider_bellamy.store import (
    DecisionRepository,
    ModelRepository,
    ModelVersion,
    Run,
    RunRepository,
    SchemaStatus,
    Store,
)
from airflow_provider_bellamy.store.engine import DEFAULT_CONNECT_TIMEOUT_S

if TYPE_CHECKING:
    import pandas as pd
    from sqlalchemy.orm import Session

PROVENANCE_KEYS: tuple[str, ...] = ("dag_id", "task_id", "run_id", "map_index", "try_number")
# Share of a job type's newest successful runs held out to compare a new model with the active one.
DEFAULT_HOLDOUT_FRACTION = 0.15
# Below this many runs a hold-out would be too small to mean anything: train on all, promote.
MIN_RUNS_FOR_HOLDOUT = 20
# Training and fine-tuning read a window of the history, not all of it, so that their cost stops
# growing with the store (docs/architecture.md, "A store of a million runs"): the newest runs of
# each (job type, context, scale-out), and of those the newest overall. Recent runs weigh more
# by being kept whole while older repetitions are left out.
TRAINING_RUNS_PER_SCALE_OUT = 20
MAX_TRAINING_RUNS = 20_000
# Fine-tuning's cost grows faster than linearly with its runs (on a loaded 2-core machine, 0.35 s
# with 55 runs, 0.6-8 s with 110; docs/benchmarks.md "Scale"): a context's newest few per scale-out.
FINETUNE_RUNS_PER_SCALE_OUT = 5
MAX_FINETUNE_RUNS = 50
# Pre-training's time budget per job type when none is given: it stops early (keeping the best
# epoch) rather than hold a retraining task for as long as a large store would take.
DEFAULT_TRAIN_BUDGET_S = 120.0
# Of what is left of the budget when pre-training starts, the share kept for what follows it; and
# the least pre-training gets, even when reading the runs took the whole budget.
TRAIN_RESERVE = 0.15
TRAIN_MIN_SHARE = 0.05

# Loaded models (and Ernest fits, and models found unreadable) keyed by what identifies them
# in the store, so a new Bellamy object in the same process does not load them again.
_MODEL_CACHE: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
_MODEL_CACHE_SIZE = 32
_CACHE_LOCK = threading.Lock()
# Property kinds of a job type's stored runs, keyed by (store, job type, newest run id).
_KINDS_CACHE: dict[tuple[Any, ...], dict[str, str]] = {}
_KINDS_CACHE_SIZE = 256
_RUN_FIELDS = frozenset(REQUIRED_COLUMNS) | frozenset(PROVENANCE_COLUMNS)


def _cache_get(key: tuple[Any, ...]) -> Any:
    with _CACHE_LOCK:
        model = _MODEL_CACHE.get(key)
        if model is not None:
            _MODEL_CACHE.move_to_end(key)
        return model


def _cache_put(key: tuple[Any, ...], model: Any) -> None:
    with _CACHE_LOCK:
        _MODEL_CACHE[key] = model
        _MODEL_CACHE.move_to_end(key)
        while len(_MODEL_CACHE) > _MODEL_CACHE_SIZE:
            _MODEL_CACHE.popitem(last=False)


def clear_model_cache() -> None:
    """Forget the models loaded in this process (the next call reads them from the store)."""
    with _CACHE_LOCK:
        _MODEL_CACHE.clear()


@dataclass
class TrainReport:
    """What ``Bellamy.train`` did for one job type."""

    job_type: str
    outcome: str  # "promoted" | "kept_active" | "up_to_date"
    reason: str
    version_id: int | None = None
    version: int | None = None
    active_version_id: int | None = None
    train_rows: int = 0
    holdout_rows: int = 0
    seconds: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)

    @property
    def promoted(self) -> bool:
        return self.outcome == "promoted"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Request:
    job_type: str
    context: dict[str, str | float]
    fingerprint: str
    scale_outs: list[int]
    confidence: float
    framework: str | None


@dataclass
class _Resolved:
    model: Any | None
    version_id: int | None
    label: str | None
    method: str
    fallback_reason: str | None


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
        self._store_key = self.store.url.render_as_string(hide_password=False)

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
        return self._record(self._prepare_runs(runs))

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
        rows = self._prepare_runs(runs)
        datasets = sorted({r["dataset"] for r in rows if r.get("dataset") is not None})

        def check(session: Session) -> bool:
            repo = RunRepository(session)
            repo.lock_datasets(datasets)
            for name in datasets:
                stored = repo.count(dataset=name)
                if stored and not skip_stored:
                    raise InvalidInputError(
                        "dataset",
                        name,
                        f"already has {stored} stored runs; pass append=True (--append) to add again",
                    )
                if stored:
                    return False
            return True

        return self._record(rows, before=None if append else check)

    def _record(self, rows: list[dict[str, Any]], *, before: Any = None) -> list[int]:
        def work(session: Session) -> list[int]:
            if before is not None and not before(session):
                return []
            results = RunRepository(session).add_many(rows)
            decisions = DecisionRepository(session)
            for row, (row_id, created) in zip(rows, results, strict=True):
                if created and row.get("decision_id") is not None:
                    # A stale or foreign decision id must not cost the run itself.
                    decisions.try_link(row["decision_id"], row_id)
            return [row_id for row_id, _ in results]

        return self.store.write(work, what="recording runs")

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
        record: dict[str, Any] = {
            "context": context,
            "job_type": job_type,
            "framework": framework,
            "scale_out": scale_out,
            "runtime_s": runtime_s,
            "status": status,
            "dag_id": dag_id,
            "task_id": task_id,
            "run_id": run_id,
            "map_index": map_index,
            "try_number": try_number,
            "started_at": started_at,
            "ended_at": ended_at,
            "external_id": external_id,
            "decision_id": decision_id,
            "source": source,
            "dataset": dataset,
            "queue_s": queue_s,
            "requested_scale_out": requested_scale_out,
            "excluded_reason": excluded_reason,
        }
        return self.record_runs([record])[0]

    def _prepare_runs(self, runs: Any) -> list[dict[str, Any]]:
        if _is_dataframe(runs):
            from airflow_provider_bellamy.records import check_complete_properties, validate_runs

            frame = validate_runs(runs, where="runs")
            check_complete_properties(frame, where="runs")
            # NaN is how a frame says "this run has no such property" (checked just above)
            records = [
                {k: v for k, v in rec.items() if not _missing(v)} for rec in frame.to_dict(orient="records")
            ]
            where = "runs row {}"
        elif isinstance(runs, Sequence) and not isinstance(runs, (str, bytes)):
            records = list(runs)
            if not records:
                raise InvalidInputError("runs", "<empty>", "no runs given")
            where = "runs row {}"
        else:
            raise InvalidInputError(
                "runs", type(runs).__name__, "must be a pandas DataFrame or a list of dicts"
            )
        flat = [_flatten_run(rec, where.format(i)) for i, rec in enumerate(records)]
        by_job: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for i, rec in enumerate(flat):
            job = _job_type(rec.get("job_type"), where=where.format(i))
            props = {k: v for k, v in rec.items() if k not in _RUN_FIELDS}
            by_job.setdefault(job, []).append((where.format(i), props))
        stored = self._stored_kinds(by_job)
        kinds = {}
        for job, contexts in by_job.items():
            # properties the store has no runs of yet take their kind from this batch
            new = [(w, {k: v for k, v in c.items() if k not in stored[job]}) for w, c in contexts]
            kinds[job] = {**batch_kinds(new), **stored[job]}
        return [_prepare_run(rec, where.format(i), kinds) for i, rec in enumerate(flat)]

    def _stored_kinds(self, job_types: Iterable[str]) -> dict[str, dict[str, str]]:
        """What the stored runs of each job type hold for each property (number or text), which
        user input is converted to (records.conform_property); cached until new runs arrive."""
        out: dict[str, dict[str, str]] = {}
        with self.store.read("reading property kinds") as session:
            for job in job_types:
                if session is None:
                    out[job] = {}
                    continue
                repo = RunRepository(session)
                key = (self._store_key, job, repo.newest_id(job))
                with _CACHE_LOCK:
                    kinds = _KINDS_CACHE.get(key)
                if kinds is None:
                    kinds = repo.property_kinds(job)
                    with _CACHE_LOCK:
                        if len(_KINDS_CACHE) > _KINDS_CACHE_SIZE:
                            _KINDS_CACHE.clear()
                        _KINDS_CACHE[key] = kinds
                out[job] = kinds
        return out

    def _conform(self, job_type: str, context: Any, *, where: str = "context") -> dict[str, str | float]:
        conform_context(context, where=where)  # refuse bad input before the store is read
        return conform_context(context, self._stored_kinds([job_type])[job_type], where=where)

    def link_decision(self, decision_id: int, run_row_id: int) -> None:
        """Attach the run a sizing decision led to."""
        decision_id = _positive_int(decision_id, "decision_id")
        run_row_id = _positive_int(run_row_id, "run_row_id")
        self.store.write(
            lambda s: DecisionRepository(s).link(decision_id, run_row_id), what="linking a decision"
        )

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

        ``job_type="all"``: one model on every job type's runs, for job types without a model
        of their own (see the module docstring). ``time_budget_s``: per job type, the whole
        call's (reading the runs included), default ``DEFAULT_TRAIN_BUDGET_S``. It trains on a window of the history, not all of it: the
        newest ``TRAINING_RUNS_PER_SCALE_OUT`` runs of each context and scale-out, at most
        ``MAX_TRAINING_RUNS`` of them (the newest).

        The newest ``holdout_fraction`` of a job type's successful runs that the active
        model has not seen are held out; candidate and active model are compared on
        them by mean relative error. A job type whose runs did not change since the
        active model was trained is reported ``up_to_date`` (``force`` retrains).
        """
        if job_type is not None:
            job_type = validate_label(job_type, "job_type")
        if not isinstance(holdout_fraction, (int, float)) or not 0 <= holdout_fraction < 1:
            raise InvalidInputError("holdout_fraction", holdout_fraction, "must be in [0, 1)")
        if time_budget_s is not None and (
            not isinstance(time_budget_s, (int, float))
            or not math.isfinite(time_budget_s)
            or time_budget_s <= 0
        ):
            raise InvalidInputError("time_budget_s", time_budget_s, "must be a number of seconds > 0")
        if time_budget_s is None:
            time_budget_s = DEFAULT_TRAIN_BUDGET_S
        with self.store.read("listing job types") as session:
            if session is None:
                known: list[str] = []
                trainable: list[str] = []
            else:
                repo = RunRepository(session)
                known = repo.job_types()
                trainable = repo.job_types(successful_only=True)
        if job_type == ALL_JOB_TYPES:
            trainable = [ALL_JOB_TYPES] if trainable else []
        elif job_type is not None:
            if job_type not in known:
                raise UnknownJobTypeError(job_type, known)
            if job_type not in trainable:
                raise InvalidInputError("job_type", job_type, "has no successful runs to train on")
            trainable = [job_type]
        if not trainable:
            raise InvalidInputError(
                "runs", "<none>", "the store holds no successful runs; record or import runs first"
            )
        return [
            self._train_one(
                jt,
                seed=seed,
                time_budget_s=time_budget_s,
                holdout=holdout_fraction,
                force=force,
                config=config,
            )
            for jt in trainable
        ]

    def _train_one(
        self,
        job_type: str,
        *,
        seed: int,
        time_budget_s: float | None,
        holdout: float,
        force: bool,
        config: Any,
    ) -> TrainReport:
        from airflow_provider_bellamy.model import RuntimeModel

        started = time.monotonic()
        selected = None if job_type == ALL_JOB_TYPES else job_type
        with self.store.read("loading training runs") as session:
            assert session is not None
            run_repo = RunRepository(session)
            total, newest = run_repo.training_summary(selected)
            active = ModelRepository(session).active(job_type)
            latest = ModelRepository(session).latest(job_type)
            if (
                latest is not None
                and not force
                and latest.metrics.get("data_newest_run_id") == newest
                and latest.metrics.get("data_rows") == total
            ):
                runs: list[Run] = []
            else:
                runs = run_repo.recent_training_runs(
                    selected, per_scale_out=TRAINING_RUNS_PER_SCALE_OUT, limit=MAX_TRAINING_RUNS
                )
        if not runs:
            assert latest is not None
            # Also when the latest was kept as a candidate: the same runs would give the same verdict.
            return TrainReport(
                job_type,
                "up_to_date",
                f"no new runs since {latest.label} ({latest.status}) was trained",
                version_id=latest.id,
                version=latest.version,
                active_version_id=active.id if active is not None else None,
                metrics=dict(latest.metrics),
            )
        held = self._holdout(runs, active, holdout)
        held_ids = {r.id for r in held}
        train_runs = [r for r in runs if r.id not in held_ids]
        frame = _runs_frame(train_runs)
        model = RuntimeModel.pretrain(
            frame, seed=seed, time_budget_s=_pretrain_budget(time_budget_s, started), config=config
        )
        metrics: dict[str, Any] = {
            "data_rows": total,
            "data_newest_run_id": newest,
            "window_rows": len(runs),
            "train_rows": len(train_runs),
            "holdout_rows": len(held),
            "holdout_mre": None,
            "active_holdout_mre": None,
            "active_version_id": active.id if active is not None else None,
            "validation_mre": model.metadata.get("validation_mre"),
            "unseen_job_type_validation_mre": model.unseen_job_type_mre,
            "train_seconds": model.metadata.get("train_seconds"),
            "job_types": list(model.job_types),
            "seed": seed,
        }
        promote = True
        if active is None:
            reason = "first model of this job type"
        elif not held:
            promote = False
            reason = f"no runs unseen by the active {active.label} to compare on; kept as candidate"
        else:
            reason = ""
        if held:
            metrics["holdout_mre"], covered = _mre(model, held)
            if active is not None:
                active_model = self._model_for(active)
                metrics["active_holdout_mre"], active_covered = _mre(active_model, held)
                both = covered & active_covered
                if metrics["active_holdout_mre"] is None or not both:
                    reason = f"active {active.label} cannot predict the held-out runs"
                else:
                    cand, act = (
                        _mre(model, [r for r in held if r.id in both])[0],
                        _mre(active_model, [r for r in held if r.id in both])[0],
                    )
                    assert cand is not None and act is not None
                    promote = cand <= act
                    verdict = "not worse, promoted" if promote else "worse, kept active"
                    reason = (
                        f"hold-out mean relative error {cand:.3%} vs active {active.label} {act:.3%} "
                        f"on {len(both)} newest runs: {verdict}"
                    )
        weights = model.to_bytes()

        def store_it(session: Session) -> ModelVersion:
            repo = ModelRepository(session)
            mv = repo.add(
                job_type=job_type,
                scope="general",
                weights=weights,
                train_rows=len(train_runs),
                newest_run_id=train_runs[-1].id if train_runs else None,
                metrics=metrics,
                blob_writer=self.store.write_blob,
                blob_threshold_bytes=self.store.blob_threshold_bytes,
            )
            if promote:
                repo.promote(mv.id)
            return mv

        mv = self.store.write(store_it, what="storing a model version")
        _cache_put((self._store_key, mv.id, mv.weights_sha256), model)
        return TrainReport(
            job_type,
            "promoted" if promote else "kept_active",
            reason,
            version_id=mv.id,
            version=mv.version,
            active_version_id=mv.id if promote else (active.id if active is not None else None),
            train_rows=len(train_runs),
            holdout_rows=len(held),
            seconds=round(time.monotonic() - started, 3),
            metrics=metrics,
        )

    @staticmethod
    def _holdout(runs: list[Run], active: ModelVersion | None, fraction: float) -> list[Run]:
        if len(runs) < MIN_RUNS_FOR_HOLDOUT or fraction <= 0:
            return []
        size = max(1, round(fraction * len(runs)))
        candidates = runs if active is None else [r for r in runs if r.id > (active.newest_run_id or 0)]
        return candidates[-size:]

    # ================================================================ models

    def list_models(
        self, job_type: str | None = None, *, scope: str | None = "general", status: str | None = None
    ) -> list[dict[str, Any]]:
        with self.store.read("listing models") as session:
            if session is None:
                return []
            return [
                mv.to_dict()
                for mv in ModelRepository(session).list(job_type=job_type, scope=scope, status=status)
            ]

    def prune_models(self, *, keep: int = 3, job_type: str | None = None) -> dict[str, Any]:
        """Delete the model versions nothing uses (see :meth:`ModelRepository.prune`): never an
        active general version, nor a context's copy of it; ``keep`` older general versions per
        job type stay for rollback. Returns what was deleted, per scope, and the files removed."""
        keep = _positive_int(keep, "keep", minimum=0)
        if job_type is not None:
            job_type = validate_label(job_type, "job_type")

        def work(session: Session) -> list[dict[str, Any]]:
            return [
                {"id": mv.id, "label": mv.label, "scope": mv.scope, "weights_path": mv.weights_path}
                for mv in ModelRepository(session).prune(keep=keep, job_type=job_type)
            ]

        if not self.store.ensure_schema(write=False):
            return {"general": 0, "context": 0, "files": 0, "deleted": []}
        deleted = self.store.write(work, what="pruning model versions")
        files = {d["weights_path"] for d in deleted if d["weights_path"]}
        if files:
            with self.store.read("checking model files") as session:
                assert session is not None
                still_used = ModelRepository(session).referenced_weight_files(files)
            for path in sorted(files - still_used):
                Path(path).unlink(missing_ok=True)
        return {
            "general": sum(d["scope"] == "general" for d in deleted),
            "context": sum(d["scope"] == "context" for d in deleted),
            "files": len(files) - len(files & still_used) if files else 0,
            "deleted": [d["label"] for d in deleted],
        }

    def promote(self, version_id: int) -> dict[str, Any]:
        """Make a stored model version the active one of its job type (atomic)."""
        version_id = _positive_int(version_id, "version_id")
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
            repo = ModelRepository(session) if session is not None else None
            if version_id is not None:
                mv = repo.get(_positive_int(version_id, "version_id")) if repo else None
                if mv is None:
                    raise InvalidInputError("version_id", version_id, "no such model version")
            else:
                if job_type is None:
                    raise InvalidInputError("job_type", None, "give a job type or a version id")
                mv = repo.active(job_type) if repo else None
                if mv is None:
                    raise InvalidInputError("job_type", job_type, "has no active model; run `bellamy train`")
            assert repo is not None
            return self._model_for(mv, repo)

    def _model_for(self, mv: ModelVersion, repo: ModelRepository | None = None) -> Any:
        """The model of a stored version, from this process's cache or deserialised once."""
        key = (self._store_key, mv.id, mv.weights_sha256)
        cached = _cache_get(key)
        if isinstance(cached, ModelFileError):
            raise cached  # found unreadable before: do not read and parse it on every call
        if cached is not None:
            return cached
        from airflow_provider_bellamy.model import RuntimeModel

        try:
            if repo is None:
                with self.store.read("loading a model") as session:
                    assert session is not None
                    data = ModelRepository(session).weights(mv)
            else:
                data = repo.weights(mv)
            model = RuntimeModel.from_bytes(data, source=f"model version {mv.id} ({mv.label})")
        except ModelFileError as exc:
            _cache_put(key, exc)
            raise
        _cache_put(key, model)
        return model

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
        decision.requested_confidence = req.confidence
        values = {
            "job_type": req.job_type,
            "framework": req.framework,
            "context": req.context,
            "context_fingerprint": req.fingerprint,
            "candidates": decision.to_dict()["candidates"],
            "target_s": decision.target_s,
            # what the band honours (a q the calibration cannot resolve is capped; the reason says so)
            "confidence": decision.confidence,
            "objective": decision.objective,
            "price_per_node_hour": decision.price_per_node_hour,
            "chosen_scale_out": decision.chosen_scale_out,
            "feasible": bool(decision.feasible),
            "reason": decision.reason,
            "shortfall_s": decision.shortfall_s,
            "model_version": decision.model_version,
            "model_version_id": model_version_id,
            "fallback_reason": decision.fallback_reason,
            "requested_confidence": req.confidence,
            "extrapolation": decision.extrapolation,
            "band_note": decision.band_note,
            **prov,
        }
        row = self.store.write(lambda s: DecisionRepository(s).add(values), what="storing a decision")
        decision.decision_id = row.id
        decision.created_at = row.created_at.isoformat()
        return decision

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
        """The prediction of the resolved model, or of the fallback where it predicts NaN or
        infinity (weights gone bad with a valid checksum): such a band would size nothing."""
        if resolved.model is None:
            return None, resolved
        prediction = self._band(req, resolved)
        values = [*prediction.mean_s, *prediction.lower_s, *prediction.upper_s]
        if all(math.isfinite(v) for v in values):
            return prediction, resolved
        bad = sorted(
            {
                n
                for n, *v in zip(
                    prediction.scale_outs,
                    prediction.mean_s,
                    prediction.lower_s,
                    prediction.upper_s,
                    strict=True,
                )
                if not all(map(math.isfinite, v))
            }
        )
        why = f"{resolved.label or resolved.method} predicted non-finite runtimes at scale-outs {bad}"
        if resolved.method != "bellamy":
            return None, _Resolved(None, None, None, "default", f"{why}: default scale-out")
        with self.store.read("finding a fallback model") as session:
            assert session is not None
            runs = RunRepository(session)
            newest = runs.newest_training_id(req.job_type, req.fingerprint)
            fallback = self._fallback(req, runs, newest, why=why)
        return self._finite_band(req, fallback)

    def _band(self, req: _Request, resolved: _Resolved) -> Prediction:
        confidence, extra = req.confidence, {}
        if hasattr(resolved.model, "band"):  # Bellamy's model: where it extrapolates, a capped q
            band = resolved.model.band(_model_context(req), req.scale_outs, req.confidence)
            mean, lower, upper, confidence = band.mean, band.lower, band.upper, band.confidence
            extra = {
                "requested_confidence": band.requested_confidence if band.capped else None,
                "extrapolation": band.extrapolation.to_dict(),
                "band_note": band.calibrated_for if band.extrapolation.extrapolating else None,
            }
        else:
            mean, lower, upper = resolved.model.predict_band(_model_context(req), req.scale_outs, confidence)
        return Prediction(
            job_type=req.job_type,
            scale_outs=list(req.scale_outs),
            mean_s=[float(v) for v in mean],
            lower_s=[float(v) for v in lower],
            upper_s=[float(v) for v in upper],
            confidence=confidence,
            model_version=resolved.label,
            fallback_reason=resolved.fallback_reason,
            method=resolved.method,
            **extra,
        )

    def _resolve(self, req: _Request) -> _Resolved:
        """Pick (and fine-tune, load or fit) the model for a request; see the module docstring."""
        with self.store.read("finding a model") as session:
            if session is None:
                raise UnknownJobTypeError(req.job_type, [])
            runs = RunRepository(session)
            models = ModelRepository(session)
            general = models.active(req.job_type)
            # only a job type without a model of its own costs the look-up of its runs
            known = general is not None or runs.has_job_type(req.job_type)
            if general is None and known:
                general = models.active(ALL_JOB_TYPES)
            # Not the context's count of runs: that reads every run of it, on every launch. Runs
            # are only ever added, so the newest one tells whether the fine-tuned copy is current.
            newest = runs.newest_training_id(req.job_type, req.fingerprint)
            if general is None:
                if not known:
                    raise UnknownJobTypeError(req.job_type, runs.job_types())
                return self._fallback(req, runs, newest)
            try:
                base = self._model_for(general, models)
            except ModelFileError as exc:
                # A launch must not fail because the model cannot be read (written by an
                # incompatible version, corrupt file): size it like a job without a model and
                # say why in the stored decision.
                detail = str(exc).splitlines()[0][:200]
                why = f"active model {general.label} cannot be read ({detail})"
                return self._fallback(req, runs, newest, why=why)
            if general.job_type == ALL_JOB_TYPES:
                unreadable = base.cannot_read(_model_context(req))
                if unreadable is None and newest is None and req.job_type not in base.job_types:
                    # a job type it never saw, read from its name and properties alone: a guess
                    unreadable = "never saw this job type run, and this context has no runs yet"
                if unreadable is not None:
                    why = f"no model of job type {req.job_type!r}, and {general.label} {unreadable}"
                    return self._fallback(req, runs, newest, why=why)
            if newest is None:
                return _Resolved(
                    base,
                    general.id,
                    general.label,
                    "bellamy",
                    "no runs of this context yet: general model, not fine-tuned",
                )
            tuned = models.active(general.job_type, scope="context", fingerprint=req.fingerprint)
            if tuned is not None and tuned.parent_id == general.id and tuned.newest_run_id == newest:
                try:
                    return _Resolved(
                        self._model_for(tuned, models),
                        tuned.id,
                        f"{tuned.label} (from {general.label})",
                        "bellamy",
                        None,
                    )
                except ModelFileError:
                    pass  # only a cache: fine-tune again below
            ctx_runs = _context_window(runs, req)
        return self._finetune(req, general, base, ctx_runs)

    def _finetune(self, req: _Request, general: ModelVersion, base: Any, ctx_runs: list[Run]) -> _Resolved:
        frame = _runs_frame(ctx_runs)
        tuned_model = base.finetune(frame)
        weights = tuned_model.to_bytes()

        def store_it(session: Session) -> ModelVersion:
            repo = ModelRepository(session)
            mv = repo.add(
                job_type=general.job_type,
                scope="context",
                context_fingerprint=req.fingerprint,
                parent_id=general.id,
                weights=weights,
                # the runs it was fine-tuned on (the window): counting all of the context's
                # would read every one of them on the launch path
                train_rows=len(ctx_runs),
                newest_run_id=ctx_runs[-1].id,
                metrics={"scale_outs": sorted({r.scale_out for r in ctx_runs}), "context": req.context},
                status="active",
                blob_writer=self.store.write_blob,
                blob_threshold_bytes=self.store.blob_threshold_bytes,
            )
            # One copy per new run of the context would pile up: keep the active one and one before.
            repo.prune_context(general.job_type, req.fingerprint)
            return mv

        mv = self.store.write(store_it, what="storing a fine-tuned model")
        _cache_put((self._store_key, mv.id, mv.weights_sha256), tuned_model)
        return _Resolved(tuned_model, mv.id, f"{mv.label} (from {general.label})", "bellamy", None)

    def _fallback(
        self, req: _Request, runs: RunRepository, newest: int | None, *, why: str | None = None
    ) -> _Resolved:
        why = why or f"no trained model for job type {req.job_type!r}"
        key = ("ernest", self._store_key, req.job_type, req.fingerprint, newest)
        fitted = _cache_get(key)
        if fitted is None:
            ctx_runs = _context_window(runs, req) if newest is not None else []
            distinct = sorted({r.scale_out for r in ctx_runs})
            model = None
            if len(distinct) >= 2:
                from airflow_provider_bellamy.model import ErnestModel

                model = ErnestModel.fit(_runs_frame(ctx_runs))
            fitted = (model, len(ctx_runs), distinct)
            _cache_put(key, fitted)
        model, n_runs, distinct = fitted
        if model is not None:
            return _Resolved(
                model,
                None,
                None,
                "ernest",
                f"{why}: Ernest fitted on this context's {n_runs} runs at scale-outs {distinct} "
                "(run `bellamy train` for the Bellamy model)",
            )
        seen = f"runs at only scale-out {distinct[0]}" if distinct else "no runs"
        return _Resolved(
            None,
            None,
            None,
            "default",
            f"{why} and this context has {seen} (Ernest needs >= 2 scale-outs): default scale-out",
        )

    # ================================================================ decisions

    def list_decisions(self, job_type: str | None = None, *, limit: int | None = 50) -> list[dict[str, Any]]:
        with self.store.read("listing decisions") as session:
            if session is None:
                return []
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
        decision_id = _positive_int(decision_id, "decision_id")
        with self.store.read("reading a decision") as session:
            row = DecisionRepository(session).get(decision_id) if session is not None else None
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
            if session is None:
                return []
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
            if session is None:
                return 0
            return RunRepository(session).count(
                job_type=job_type, status=status, source=source, dataset=dataset
            )

    def job_types(self) -> list[str]:
        with self.store.read("listing job types") as session:
            return RunRepository(session).job_types() if session is not None else []

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
        with self.store.read("loading runs") as session:
            if session is None:
                rows: list[Run] = []
            elif successful_only:
                rows = RunRepository(session).training_runs(job_type, fingerprint=fingerprint)
            else:
                rows = RunRepository(session).list(job_type=job_type, newest_first=False)
                if fingerprint is not None:
                    rows = [r for r in rows if r.context_fingerprint == fingerprint]
        return _runs_frame(rows, provenance=not successful_only)

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


# ==================================================================== helpers


def _is_dataframe(value: Any) -> bool:
    # Avoid importing pandas just to answer "no" for a list of dicts.
    return type(value).__name__ == "DataFrame" and type(value).__module__.startswith("pandas")


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return type(value).__name__ in ("NaTType", "NAType")


def _positive_int(value: Any, field: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool):
        raise InvalidInputError(field, value, f"must be an integer >= {minimum}")
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(field, value, f"must be an integer >= {minimum}") from None
    if math.isnan(as_float) or as_float != int(as_float) or as_float < minimum:
        raise InvalidInputError(field, value, f"must be an integer >= {minimum}")
    return int(as_float)


def _optional_text(value: Any, field: str, where: str) -> str | None:
    if _missing(value):
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    return validate_label(value, field, where=where)


def _optional_seconds(value: Any, field: str, where: str) -> float | None:
    """A finite number of seconds >= 0, or None when absent."""
    if _missing(value):
        return None
    if isinstance(value, bool):
        raise InvalidInputError(field, value, "must be a number of seconds >= 0", where=where)
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise InvalidInputError(field, value, "must be a number of seconds >= 0", where=where) from None
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidInputError(field, value, "must be a finite number of seconds >= 0", where=where)
    return seconds


def _timestamp(value: Any, field: str, where: str) -> dt.datetime | None:
    if _missing(value):
        return None
    if isinstance(value, dt.datetime):
        stamp = value
    elif isinstance(value, str):
        try:
            stamp = dt.datetime.fromisoformat(value.strip())
        except ValueError:
            raise InvalidInputError(field, value, "must be an ISO 8601 timestamp", where=where) from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        stamp = dt.datetime.fromtimestamp(float(value), tz=dt.timezone.utc)
    else:
        raise InvalidInputError(field, value, "must be a datetime or an ISO 8601 timestamp", where=where)
    if hasattr(stamp, "to_pydatetime"):  # pandas Timestamp
        stamp = stamp.to_pydatetime()
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.timezone.utc)  # naive times are taken as UTC
    return stamp


def _flatten_run(record: Any, where: str) -> dict[str, Any]:
    """One run as flat fields: a context given as one mapping is merged into the run's fields."""
    if not isinstance(record, Mapping):
        raise InvalidInputError("run", record, "each run must be a mapping of field to value", where=where)
    nested = record.get("context")
    if nested is not None and not _missing(nested):
        # Context given as one mapping (record_run's style) rather than as flat columns.
        if not isinstance(nested, Mapping):
            raise InvalidInputError(
                "context", nested, "must be a mapping of property name to value", where=where
            )
        clash = sorted(set(nested) & (set(REQUIRED_COLUMNS) | set(PROVENANCE_COLUMNS)))
        if clash:
            raise InvalidInputError(
                "context", clash, "these names are run fields, not context properties", where=where
            )
        record = {**{k: v for k, v in record.items() if k != "context"}, **nested}
    elif "context" in record:
        record = {k: v for k, v in record.items() if k != "context"}
    return dict(record)


def _prepare_run(
    record: dict[str, Any], where: str, kinds: Mapping[str, Mapping[str, str]]
) -> dict[str, Any]:
    """Validate one flat run (canonical fields, context, provenance) into store columns; ``kinds``:
    per job type, the kind of each property (records.conform_property)."""
    job_type = _job_type(record.get("job_type"), where=where)
    framework = validate_label(record.get("framework"), "framework", where=where).lower()
    scale_out = validate_scale_out(record.get("scale_out"), where=where)
    runtime_s = validate_runtime(record.get("runtime_s"), where=where)
    context = conform_context(record, kinds.get(job_type), where=where)
    status = "success" if _missing(record.get("status")) else record.get("status")
    if status not in RUN_STATUSES:
        raise InvalidInputError("status", status, f"must be one of {list(RUN_STATUSES)}", where=where)
    dag_id = _optional_text(record.get("dag_id"), "dag_id", where)
    task_id = _optional_text(record.get("task_id"), "task_id", where)
    run_id = _optional_text(record.get("run_id"), "run_id", where)
    source = record.get("source")
    if _missing(source):
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
        "dataset": _optional_text(record.get("dataset"), "dataset", where),
        "external_id": _optional_text(record.get("external_id"), "external_id", where),
        "started_at": _timestamp(record.get("started_at"), "started_at", where),
        "ended_at": _timestamp(record.get("ended_at"), "ended_at", where),
        "decision_id": None
        if _missing(record.get("decision_id"))
        else _positive_int(record.get("decision_id"), "decision_id"),
        "queue_s": _optional_seconds(record.get("queue_s"), "queue_s", where),
        "requested_scale_out": None
        if _missing(record.get("requested_scale_out"))
        else validate_scale_out(record.get("requested_scale_out"), field="requested_scale_out", where=where),
        "excluded_reason": _optional_text(record.get("excluded_reason"), "excluded_reason", where),
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
            map_index=-1 if _missing(map_index) else _int_at_least(map_index, "map_index", -1, where),
            try_number=1 if _missing(try_number) else _int_at_least(try_number, "try_number", 0, where),
        )
    else:
        # Trace rows carry no Airflow try; a stray dag_id would not make them unique anyway.
        if dag_id is not None:
            raise InvalidInputError(
                "source", source, "a trace row has no dag_id; use source='observed'", where=where
            )
    return row


def _int_at_least(value: Any, field: str, minimum: int, where: str) -> int:
    try:
        return _positive_int(value, field, minimum=minimum)
    except InvalidInputError as exc:
        raise InvalidInputError(field, value, exc.problem, where=where) from None


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


def _job_type(value: Any, where: str | None = None) -> str:
    return parse_job_type(value, "job_type", where)


def _model_context(req: _Request) -> dict[str, Any]:
    """What a model reads for a request: the context, its job type and framework."""
    ctx: dict[str, Any] = {**req.context, "job_type": req.job_type}
    if req.framework is not None:
        ctx.setdefault("framework", req.framework)
    return ctx


def _provenance(value: Any) -> dict[str, Any]:
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
        out[key] = _optional_text(value.get(key), f"provenance.{key}", "provenance")
    if not _missing(value.get("map_index")):
        out["map_index"] = _int_at_least(value["map_index"], "provenance.map_index", -1, "provenance")
    if not _missing(value.get("try_number")):
        out["try_number"] = _int_at_least(value["try_number"], "provenance.try_number", 0, "provenance")
    return out


def _pretrain_budget(budget_s: float | None, started: float, now: float | None = None) -> float | None:
    """What is left of ``train()``'s budget for pre-training: the budget is the whole call's, so
    reading the runs and importing torch (tens of seconds on a loaded machine) count against it,
    and a share is kept for what follows (the hold-out comparison, storing the model)."""
    if budget_s is None:
        return None
    from airflow_provider_bellamy.model import training  # noqa: F401 - torch: imported on the clock

    left = budget_s - ((time.monotonic() if now is None else now) - started)
    return max(TRAIN_MIN_SHARE * budget_s, (1.0 - TRAIN_RESERVE) * left)


def _context_window(runs: RunRepository, req: _Request) -> list[Run]:
    """The newest runs of a request's context that fine-tuning (or Ernest) reads, oldest first."""
    return runs.recent_training_runs(
        req.job_type,
        fingerprint=req.fingerprint,
        per_scale_out=FINETUNE_RUNS_PER_SCALE_OUT,
        limit=MAX_FINETUNE_RUNS,
    )


def _runs_frame(rows: Sequence[Run], *, provenance: bool = False) -> pd.DataFrame:
    """Store rows as the canonical frame the model takes (context properties as columns, plus ``id``)."""
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


def _mre(model: Any, runs: Sequence[Run]) -> tuple[float | None, set[int]]:
    """Mean relative error of a general model on runs, and the ids it could predict."""
    groups: dict[str, list[Run]] = {}
    for r in runs:
        groups.setdefault(r.context_fingerprint, []).append(r)
    errors: list[float] = []
    covered: set[int] = set()
    for group in groups.values():
        ctx: dict[str, Any] = {
            **group[0].context,
            "job_type": group[0].job_type,
            "framework": group[0].framework,
        }
        try:
            predicted = model.predict(ctx, [r.scale_out for r in group])
        except InvalidInputError:
            continue  # a context this model cannot encode (e.g. a property it never saw)
        for r, p in zip(group, predicted, strict=True):
            errors.append(abs(float(p) - r.runtime_s) / r.runtime_s)
            covered.add(r.id)
    return (sum(errors) / len(errors) if errors else None), covered
