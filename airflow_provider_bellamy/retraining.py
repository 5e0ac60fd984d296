"""Pre-training general models on the store's runs, promoting them when not worse than the
active one, and deleting the versions nothing uses (``Bellamy.train`` / ``prune_models``).

The model itself (``model/training.py``) knows nothing of the store; this module decides what it
is trained on, compares it with the active version on held-out runs and stores it."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_bellamy.exceptions import InvalidInputError, ModelFileError, UnknownJobTypeError
from airflow_provider_bellamy.model_cache import cache_put, load_version, version_key
from airflow_provider_bellamy.records import ALL_JOB_TYPES, runs_frame, validate_int, validate_label
from airflow_provider_bellamy.store import ModelRepository, ModelVersion, Run, RunRepository

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from airflow_provider_bellamy.store import Store

# Share of a job type's newest successful runs held out to compare a new model with the active one.
DEFAULT_HOLDOUT_FRACTION = 0.15
# Below this many runs a hold-out would be too small to mean anything: train on all, promote.
MIN_RUNS_FOR_HOLDOUT = 20
# Training reads a window of the history, not all of it, so that its cost stops growing with the
# store (docs/architecture.md, "A store of a million runs"): the newest runs of each (job type,
# context, scale-out), and of those the newest overall. Recent runs weigh more by being kept
# whole while older repetitions are left out.
TRAINING_RUNS_PER_SCALE_OUT = 20
MAX_TRAINING_RUNS = 20_000
# Pre-training's time budget per job type when none is given: it stops early (keeping the best
# epoch) rather than hold a retraining task for as long as a large store would take.
DEFAULT_TRAIN_BUDGET_S = 120.0
# Of what is left of the budget when pre-training starts, the share kept for what follows it; and
# the least pre-training gets, even when reading the runs took the whole budget.
TRAIN_RESERVE = 0.15
TRAIN_MIN_SHARE = 0.05


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


def train(
    store: Store,
    job_type: str | None,
    *,
    seed: int,
    time_budget_s: float | None,
    holdout_fraction: float,
    force: bool,
    config: Any,
) -> list[TrainReport]:
    """Pre-train a general model per job type, store it, promote it if it is not worse.

    ``job_type="all"``: one model on every job type's runs, for job types without a model of their
    own (see ``resolution``). ``time_budget_s``: per job type, the whole call's (reading the runs
    included), default ``DEFAULT_TRAIN_BUDGET_S``. It trains on a window of the history: the newest
    ``TRAINING_RUNS_PER_SCALE_OUT`` runs of each context and scale-out, at most
    ``MAX_TRAINING_RUNS`` of them (the newest). The newest ``holdout_fraction`` of a job type's
    successful runs that the active model has not seen are held out; candidate and active model
    are compared on them by mean relative error. A job type whose runs did not change since the
    active model was trained is reported ``up_to_date`` (``force`` retrains).
    """
    if job_type is not None:
        job_type = validate_label(job_type, "job_type")
    if not isinstance(holdout_fraction, (int, float)) or not 0 <= holdout_fraction < 1:
        raise InvalidInputError("holdout_fraction", holdout_fraction, "must be in [0, 1)")
    if time_budget_s is not None and (
        not isinstance(time_budget_s, (int, float)) or not math.isfinite(time_budget_s) or time_budget_s <= 0
    ):
        raise InvalidInputError("time_budget_s", time_budget_s, "must be a number of seconds > 0")
    if time_budget_s is None:
        time_budget_s = DEFAULT_TRAIN_BUDGET_S
    with store.read("listing job types") as session:
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
        train_one(
            store,
            jt,
            seed=seed,
            time_budget_s=time_budget_s,
            holdout=holdout_fraction,
            force=force,
            config=config,
        )
        for jt in trainable
    ]


def _unreadable(store: Store, mv: ModelVersion, repo: ModelRepository | None = None) -> str | None:
    """Why this version of the provider cannot read ``mv``'s weights (None: it can)."""
    try:
        load_version(store, mv, repo)
    except ModelFileError as exc:
        return str(exc).splitlines()[0][:200]
    return None


def train_one(
    store: Store,
    job_type: str,
    *,
    seed: int,
    time_budget_s: float | None,
    holdout: float,
    force: bool,
    config: Any,
) -> TrainReport:
    """Pre-train one job type's general model on its training window; store it, promote it
    unless it is worse than the active one on the newest runs the active one has not seen."""
    from airflow_provider_bellamy.model import RuntimeModel

    started = time.monotonic()
    selected = None if job_type == ALL_JOB_TYPES else job_type
    with store.read("loading training runs") as session:
        run_repo = RunRepository(session)
        total, newest = run_repo.training_summary(selected)
        models = ModelRepository(session)
        active = models.active(job_type)
        latest = models.latest(job_type)
        if (
            latest is not None
            and not force
            and latest.metrics.get("data_newest_run_id") == newest
            and latest.metrics.get("data_rows") == total
            # a model this version cannot read (an older model format) is retrained on the same runs
            and _unreadable(store, latest, models) is None
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
    held = holdout_runs(runs, active, holdout)
    held_ids = {r.id for r in held}
    train_runs = [r for r in runs if r.id not in held_ids]
    model = RuntimeModel.pretrain(
        runs_frame(train_runs),
        seed=seed,
        time_budget_s=pretrain_budget(time_budget_s, started),
        config=config,
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
        "validation_mre": model.validation_mre,
        "unseen_job_type_validation_mre": model.unseen_job_type_mre,
        "train_seconds": model.metadata.get("train_seconds"),
        "job_types": list(model.job_types),
        "seed": seed,
    }
    unreadable = None if active is None else _unreadable(store, active)
    promote = True
    if active is None:
        reason = "first model of this job type"
    elif unreadable is not None:
        # (written by an older version, say): nothing to compare with, and launches fall back
        reason = f"active {active.label} cannot be read ({unreadable}): replaced"
    elif not held:
        promote = False
        reason = f"no runs unseen by the active {active.label} to compare on; kept as candidate"
    else:
        reason = ""
    if held:
        metrics["holdout_mre"], covered = mre(model, held)
        if active is not None and unreadable is None:
            active_model = load_version(store, active)
            metrics["active_holdout_mre"], active_covered = mre(active_model, held)
            both = covered & active_covered
            if metrics["active_holdout_mre"] is None or not both:
                reason = f"active {active.label} cannot predict the held-out runs"
            else:
                cand, act = (
                    mre(model, [r for r in held if r.id in both])[0],
                    mre(active_model, [r for r in held if r.id in both])[0],
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
            blob_writer=store.write_blob,
            blob_threshold_bytes=store.blob_threshold_bytes,
        )
        if promote:
            repo.promote(mv.id)
        return mv

    mv = store.write(store_it, what="storing a model version")
    cache_put(version_key(store, mv), model)
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


def holdout_runs(runs: list[Run], active: ModelVersion | None, fraction: float) -> list[Run]:
    """The newest ``fraction`` of the window that the active version has not been trained on."""
    if len(runs) < MIN_RUNS_FOR_HOLDOUT or fraction <= 0:
        return []
    size = max(1, round(fraction * len(runs)))
    candidates = runs if active is None else [r for r in runs if r.id > (active.newest_run_id or 0)]
    return candidates[-size:]


def pretrain_budget(budget_s: float | None, started: float, now: float | None = None) -> float | None:
    """What is left of ``train()``'s budget for pre-training: the budget is the whole call's, so
    reading the runs and importing torch (tens of seconds on a loaded machine) count against it,
    and a share is kept for what follows (the hold-out comparison, storing the model)."""
    if budget_s is None:
        return None
    from airflow_provider_bellamy.model import training  # noqa: F401 - torch: imported on the clock

    left = budget_s - ((time.monotonic() if now is None else now) - started)
    return max(TRAIN_MIN_SHARE * budget_s, (1.0 - TRAIN_RESERVE) * left)


def mre(model: Any, runs: Sequence[Run]) -> tuple[float | None, set[int]]:
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


def prune_models(store: Store, *, keep: Any, job_type: Any) -> dict[str, Any]:
    """Delete the versions nothing uses (``ModelRepository.prune``): never an active general version
    nor a context's copy of it; ``keep`` older general versions per job type stay for rollback.
    Returns what was deleted, per scope, and the files removed; a store that does not exist yet
    is not created for it."""
    keep = validate_int(keep, "keep", minimum=0)
    if job_type is not None:
        job_type = validate_label(job_type, "job_type")

    def work(session: Session) -> list[dict[str, Any]]:
        return [
            {"id": mv.id, "label": mv.label, "scope": mv.scope, "weights_path": mv.weights_path}
            for mv in ModelRepository(session).prune(keep=keep, job_type=job_type)
        ]

    if not store.ensure_schema(write=False):
        return {"general": 0, "context": 0, "files": 0, "deleted": []}
    deleted = store.write(work, what="pruning model versions")
    files = {d["weights_path"] for d in deleted if d["weights_path"]}
    still_used: set[str] = set()
    if files:
        with store.read("checking model files") as session:
            still_used = ModelRepository(session).referenced_weight_files(files)
        for path in sorted(files - still_used):
            Path(path).unlink(missing_ok=True)
    return {
        "general": sum(d["scope"] == "general" for d in deleted),
        "context": sum(d["scope"] == "context" for d in deleted),
        "files": len(files - still_used),
        "deleted": [d["label"] for d in deleted],
    }


def list_models(
    store: Store, job_type: str | None, *, scope: str | None, status: str | None
) -> list[dict[str, Any]]:
    with store.read("listing models") as session:
        models = ModelRepository(session).list(job_type=job_type, scope=scope, status=status)
        return [mv.to_dict() for mv in models]


def promote(store: Store, version_id: Any) -> dict[str, Any]:
    """Make a stored version the active one of its job type (atomic)."""
    version_id = validate_int(version_id, "version_id")
    return store.write(lambda s: ModelRepository(s).promote(version_id).to_dict(), what="promoting")


def rollback(store: Store, job_type: Any) -> dict[str, Any]:
    """Re-activate the general version that was active before the current one (atomic)."""
    job_type = validate_label(job_type, "job_type")
    return store.write(lambda s: ModelRepository(s).rollback(job_type).to_dict(), what="rolling back")
