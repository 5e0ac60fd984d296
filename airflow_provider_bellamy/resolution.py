"""Which model answers a request, and its band: the launch path of ``predict`` and ``size``
(``Bellamy`` hands them a parsed ``SizingSpec``; ``predict``/``size`` below run the whole path).

For job type J and context C:
1. the active general model of J — or, where J has none, the model of "all" job types
   (``train("all")``) when it can read C — fine-tuned on C's newest successful runs; the
   fine-tuned copy is stored (scope "context") and reused until C gets new runs or the general
   model changes (a store that refuses the write, read-only, gets the copy unstored);
2. no general model: Ernest fitted on C's runs when they cover >= 2 distinct scale-outs;
3. otherwise (``size`` only): a default decision at ``default_scale_out``.
Every fallback is named in the prediction's/decision's ``fallback_reason``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_bellamy import decision_log, run_history
from airflow_provider_bellamy.decisions import Prediction
from airflow_provider_bellamy.exceptions import (
    DecisionNotStoredError,
    InvalidInputError,
    ModelFileError,
    StoreError,
    UnknownJobTypeError,
)
from airflow_provider_bellamy.model_cache import cache_get, cache_put, load_version, version_key
from airflow_provider_bellamy.records import ALL_JOB_TYPES, context_fingerprint, runs_frame
from airflow_provider_bellamy.spec import LAUNCHED_FRAMEWORKS
from airflow_provider_bellamy.store import ModelRepository, ModelVersion, Run, RunRepository

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from airflow_provider_bellamy.decisions import SizingDecision
    from airflow_provider_bellamy.spec import SizingSpec
    from airflow_provider_bellamy.store import Store

log = logging.getLogger(__name__)

# Fine-tuning's cost grows faster than linearly with its runs (on a loaded 2-core machine, 0.35 s
# with 55 runs, 0.6-8 s with 110; docs/benchmarks.md "Scale"): a context's newest few per scale-out.
FINETUNE_RUNS_PER_SCALE_OUT = 5
MAX_FINETUNE_RUNS = 50


@dataclass
class Request:
    """A validated ``predict``/``size`` request."""

    job_type: str
    context: dict[str, str | float]
    fingerprint: str
    scale_outs: list[int]
    confidence: float
    framework: str | None


@dataclass
class Resolved:
    """The model that answers a request (None: the default scale-out) and why that one."""

    model: Any | None
    version_id: int | None
    label: str | None
    method: str
    fallback_reason: str | None


def model_context(req: Request) -> dict[str, Any]:
    """What a model reads for a request: the context, its job type and framework."""
    ctx: dict[str, Any] = {**req.context, "job_type": req.job_type}
    if req.framework is not None:
        ctx.setdefault("framework", req.framework)
    return ctx


def context_window(runs: RunRepository, req: Request) -> list[Run]:
    """The newest runs of a request's context that fine-tuning (or Ernest) reads, oldest first."""
    return runs.recent_training_runs(
        req.job_type,
        fingerprint=req.fingerprint,
        per_scale_out=FINETUNE_RUNS_PER_SCALE_OUT,
        limit=MAX_FINETUNE_RUNS,
    )


def resolve(store: Store, req: Request) -> Resolved:
    """Pick (and fine-tune, load or fit) the model for a request; see the module docstring."""
    with store.read("finding a model") as session:
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
            return fallback(store, req, runs, newest)
        try:
            base = load_version(store, general, models)
        except ModelFileError as exc:
            # A launch must not fail because the model cannot be read (written by an
            # incompatible version, corrupt file): size it like a job without a model and
            # say why in the stored decision.
            detail = str(exc).splitlines()[0][:200]
            why = f"active model {general.label} cannot be read ({detail})"
            return fallback(store, req, runs, newest, why=why)
        if general.job_type == ALL_JOB_TYPES:
            unreadable = base.cannot_read(model_context(req))
            if unreadable is None and newest is None and req.job_type not in base.job_types:
                # a job type it never saw, read from its name and properties alone: a guess
                unreadable = "never saw this job type run, and this context has no runs yet"
            if unreadable is not None:
                why = f"no model of job type {req.job_type!r}, and {general.label} {unreadable}"
                return fallback(store, req, runs, newest, why=why)
        if newest is None:
            return Resolved(
                base,
                general.id,
                general.label,
                "bellamy",
                "no runs of this context yet: general model, not fine-tuned",
            )
        tuned = models.active(general.job_type, scope="context", fingerprint=req.fingerprint)
        if tuned is not None and tuned.parent_id == general.id and tuned.newest_run_id == newest:
            try:
                return Resolved(
                    load_version(store, tuned, models),
                    tuned.id,
                    f"{tuned.label} (from {general.label})",
                    "bellamy",
                    None,
                )
            except ModelFileError:
                pass  # only a cache: fine-tune again below
        ctx_runs = context_window(runs, req)
    return finetune(store, req, general, base, ctx_runs)


def finetune(store: Store, req: Request, general: ModelVersion, base: Any, ctx_runs: list[Run]) -> Resolved:
    """Fine-tune the general model on the context's window and store the copy (scope "context")."""
    tuned_model = base.finetune(runs_frame(ctx_runs))
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
            blob_writer=store.write_blob,
            blob_threshold_bytes=store.blob_threshold_bytes,
        )
        # One copy per new run of the context would pile up: keep the active one and one before.
        repo.prune_context(general.job_type, req.fingerprint)
        return mv

    try:
        mv = store.write(store_it, what="storing a fine-tuned model")
    except StoreError as exc:
        # The stored copy is only a cache: a store that refuses writes (a read-only role or
        # replica) still gets the fine-tuned answer, not the general model's or a fallback.
        log.warning("Bellamy: the fine-tuned copy of %s is used unstored: %s", general.label, exc)
        return Resolved(
            tuned_model, None, f"{general.label}, fine-tuned on this context (not stored)", "bellamy", None
        )
    cache_put(version_key(store, mv), tuned_model)
    return Resolved(tuned_model, mv.id, f"{mv.label} (from {general.label})", "bellamy", None)


def fallback(
    store: Store, req: Request, runs: RunRepository, newest: int | None, *, why: str | None = None
) -> Resolved:
    """Ernest on the context's runs (>= 2 scale-outs), else the default scale-out."""
    why = why or f"no trained model for job type {req.job_type!r}"
    key = ("ernest", store.cache_key, req.job_type, req.fingerprint, newest)
    fitted = cache_get(key)
    if fitted is None:
        ctx_runs = context_window(runs, req) if newest is not None else []
        distinct = sorted({r.scale_out for r in ctx_runs})
        model = None
        if len(distinct) >= 2:
            from airflow_provider_bellamy.model import ErnestModel

            model = ErnestModel.fit(runs_frame(ctx_runs))
        fitted = (model, len(ctx_runs), distinct)
        cache_put(key, fitted)
    model, n_runs, distinct = fitted
    if model is not None:
        return Resolved(
            model,
            None,
            None,
            "ernest",
            f"{why}: Ernest fitted on this context's {n_runs} runs at scale-outs {distinct} "
            "(run `bellamy train` for the Bellamy model)",
        )
    seen = f"runs at only scale-out {distinct[0]}" if distinct else "no runs"
    return Resolved(
        None,
        None,
        None,
        "default",
        f"{why} and this context has {seen} (Ernest needs >= 2 scale-outs): default scale-out",
    )


def band(req: Request, resolved: Resolved) -> Prediction:
    """The resolved model's runtimes and band at the request's confidence."""
    confidence, extra = req.confidence, {}
    if hasattr(resolved.model, "band"):  # Bellamy's model: where it extrapolates, a capped q
        b = resolved.model.band(model_context(req), req.scale_outs, req.confidence)
        mean, lower, upper, confidence = b.mean, b.lower, b.upper, b.confidence
        extra = {
            "requested_confidence": b.requested_confidence if b.capped else None,
            "extrapolation": b.extrapolation.to_dict(),
            "band_note": b.calibrated_for if b.extrapolation.extrapolating else None,
            "beyond_scale_out": b.beyond,
            "below_scale_out": b.below,
        }
    else:
        assert resolved.model is not None
        mean, lower, upper = resolved.model.predict_band(model_context(req), req.scale_outs, confidence)
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


def finite_band(store: Store, req: Request, resolved: Resolved) -> tuple[Prediction | None, Resolved]:
    """The prediction of the resolved model, or of the fallback where it predicts NaN or
    infinity (weights gone bad with a valid checksum): such a band would size nothing."""
    if resolved.model is None:
        return None, resolved
    prediction = band(req, resolved)
    values = [*prediction.mean_s, *prediction.lower_s, *prediction.upper_s]
    # (an upper bound of +inf around a finite prediction is a band unbounded above: a context
    # too far outside the training data for any bound; sizing takes the largest size and says why)
    if all(math.isfinite(v) or v == math.inf for v in values) and all(map(math.isfinite, prediction.mean_s)):
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
        return None, Resolved(None, None, None, "default", f"{why}: default scale-out")
    with store.read("finding a fallback model") as session:
        runs = RunRepository(session)
        newest = runs.newest_training_id(req.job_type, req.fingerprint)
        fell_back = fallback(store, req, runs, newest, why=why)
    return finite_band(store, req, fell_back)


def check_framework(store: Store, framework: str | None) -> None:
    """Refuse a framework the provider does not launch and no stored run has: the model reads the
    framework as a property, so a typo ("sprak") would be sized as an unseen value, silently. A
    framework of one's own is known once runs of it are recorded (``record_run``, imports)."""
    if framework is None or framework in LAUNCHED_FRAMEWORKS:
        return
    with store.read("checking the framework") as session:
        runs = RunRepository(session)
        if runs.has_framework(framework):
            return
        stored = runs.frameworks()
    raise InvalidInputError(
        "framework",
        framework,
        f"unknown framework (known: {', '.join(sorted({*LAUNCHED_FRAMEWORKS, *stored}))}); "
        "a framework of your own is known once runs of it are recorded",
    )


def request(store: Store, spec: SizingSpec) -> Request:
    """A parsed spec as a request, its context conformed to what the job type's stored runs hold."""
    assert spec.scale_outs is not None  # a request is sized among given candidates
    check_framework(store, spec.framework)
    ctx = run_history.conform(store, spec.job_type, spec.properties)
    return Request(
        spec.job_type,
        ctx,
        context_fingerprint(spec.job_type, ctx),
        spec.scale_outs,
        spec.confidence,
        spec.framework,
    )


def predict(store: Store, spec: SizingSpec) -> Prediction:
    """The runtime per candidate with its band; refused where no model can answer."""
    req = request(store, spec)
    prediction, resolved = finite_band(store, req, resolve(store, req))
    if prediction is None:
        why = (resolved.fallback_reason or "no model").removesuffix(": default scale-out")
        raise InvalidInputError(
            "context",
            req.context,
            f"cannot predict: {why}; run `bellamy train` or record runs at more scale-outs",
        )
    return prediction


def size(store: Store, spec: SizingSpec, target_s: float | None, prov: dict[str, Any]) -> SizingDecision:
    """The decision for ``target_s`` (the model's, else the default scale-out's), stored."""
    from airflow_provider_bellamy import sizing

    req = request(store, spec)
    prediction, resolved = finite_band(store, req, resolve(store, req))
    common = {
        "target_s": target_s,
        "objective": spec.objective,
        "price_per_node_hour": spec.price_per_node_hour,
        "context": req.context,
        "framework": req.framework,
    }
    if prediction is not None:
        decision = sizing.decide(prediction, infeasible=sizing.infeasible_rule(spec.on_infeasible), **common)
    else:
        default = spec.default_scale_out if spec.default_scale_out is not None else max(req.scale_outs)
        reason = resolved.fallback_reason or "no model"
        decision = sizing.default_decision(
            req.job_type, req.scale_outs, default, reason, confidence=req.confidence, **common
        )
    if decision.fallback_reason is None and resolved.fallback_reason is not None:
        decision.fallback_reason = resolved.fallback_reason
    if decision.model_version is None:
        decision.model_version = resolved.label
    try:
        return decision_log.store_decision(store, decision, req, resolved.version_id, prov)
    except StoreError as exc:
        # the answer stands without its row (a launch goes on with it: a fallback would drop it)
        raise DecisionNotStoredError(decision, exc) from exc
