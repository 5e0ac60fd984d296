"""``RuntimeModel``: pre-train across contexts, fine-tune on one, predict with a calibrated band."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from airflow_provider_bellamy.exceptions import InvalidInputError, ModelFileError, UnknownJobTypeError
from airflow_provider_bellamy.model import inference
from airflow_provider_bellamy.model.band import Band, band_sources, compose_band
from airflow_provider_bellamy.model.calibration import (
    DEFAULT_PRIOR_SD,
    Calibration,
    FineTuning,
    untuned_level,
)
from airflow_provider_bellamy.model.edges import (
    MIN_EDGE_POINTS,
    Continuation,
    EdgeMisses,
    continued_log_runtime,
    edge_misses,
    edge_octave,
    power_law_log_runtime,
)
from airflow_provider_bellamy.model.extrapolation import (
    Extrapolation,
    held_out_folds,
    signals,
    training_domain,
)
from airflow_provider_bellamy.model.features import (
    ALWAYS_KNOWN,
    DERIVED,
    PROPERTY_DIM,
    FeatureSchema,
    context_of,
    scale_out_array,
    scale_out_basis,
)
from airflow_provider_bellamy.model.finetuning import (
    ALIGNMENTS,
    OTHER_ENVIRONMENT_PRIOR,
    PARAMETRIC_PRIOR,
    UNSEEN_VALUE_PRIOR,
    combine_nearest,
    fit_context,
    known_twin,
    mix_twin,
    nearest_curve,
    nearest_distance,
    nearest_log_runtime,
    nearest_share,
    nearest_weight,
    replicate_checks,
    run_level,
    superlinear_rise,
    tuned_log_runtime,
    twin_log_runtime,
    with_replicates,
)
from airflow_provider_bellamy.model.held_out import (
    RunsArrays,
    calibrate_members,
    extrapolation_calibration,
    fold_distances,
    mre_by_k,
    training_rms,
    typical_distance,
    unseen_job_calibration,
)
from airflow_provider_bellamy.model.tuned import NearestCurve, TunedContext
from airflow_provider_bellamy.records import (
    context_columns,
    successful_runs,
    validate_confidence,
    validate_runs,
)

if TYPE_CHECKING:
    # pandas and torch only arrive with training data: a stored model predicts and
    # fine-tunes with numpy alone (a fresh task process skips a 1-2 s torch import)
    import pandas as pd

    from airflow_provider_bellamy.model.training import EncodedRuns, TrainingConfig

# Bump when tensors or header change meaning; a file of another format is refused (retrain it).
FORMAT = "bellamy-runtime-model/5"
_ARCHITECTURE = ("n_members", "n_properties", "code", "hidden")
# Members of the extrapolation pass, at least: two numeric ends and two categorical values (one
# held-out machine type shows the model's error in one direction only).
MIN_HELD_OUT_FOLDS = 4


def _context_key(ctx: Mapping[str, str | float]) -> str:
    return json.dumps(sorted(ctx.items()), default=str)


def _frame_contexts(frame: pd.DataFrame) -> list[dict[str, str | float]]:
    cols = context_columns(frame.columns)
    props = frame[cols].to_dict(orient="records") if cols else [{} for _ in range(len(frame))]
    return [
        context_of(job, {**p, "framework": fw})
        for job, fw, p in zip(frame["job_type"], frame["framework"], props, strict=True)
    ]


def _training_frame(runs: pd.DataFrame, what: str) -> pd.DataFrame:
    frame = validate_runs(runs, where=what)
    if "status" in frame.columns:
        frame = successful_runs(frame).reset_index(drop=True)
        if frame.empty:
            raise InvalidInputError(what, "<no successful runs>", "every run given has status 'failed'")
    return frame


class RuntimeModel:
    """A Bellamy ensemble, general or fine-tuned to one context.

    Holds the trained network as numpy arrays (``params``, named like the torch
    state dict) and its shape (``architecture``), the record of its training (``metadata``: what
    it was trained on, how, the training domain and curves), what calibration measured
    (``calibration``) and for a fine-tuned copy what fine-tuning learned (``tuned``); torch is
    needed to pre-train only.
    """

    def __init__(
        self,
        params: Mapping[str, np.ndarray],
        architecture: Mapping[str, int],
        schema: FeatureSchema,
        metadata: dict[str, Any],
        calibration: Calibration,
        tuned: TunedContext | None = None,
    ) -> None:
        self.params = dict(params)
        self.architecture = {k: int(architecture[k]) for k in _ARCHITECTURE}
        self.schema = schema
        self.metadata = metadata
        self.calibration = calibration
        self.tuned = tuned
        self._h_cache: dict[str, np.ndarray] = {}
        self._missing_cache: dict[tuple[str, tuple[str, ...]], np.ndarray] = {}
        self._trained_scale_outs: dict[str, tuple[int, ...]] = {}
        self._edge_tables: dict[str, tuple[EdgeMisses | None, EdgeMisses | None]] = {}
        # the untuned model's mean log miss of each training context's runs (band.edge_miss), by
        # its place in metadata["curves"]
        self._edge_misses: dict[int, float] = {}
        self._distance_cache: dict[str, float | None] = {}
        self._unseen_view: RuntimeModel | None = None

    # ------------------------------------------------------------------ properties
    @property
    def job_types(self) -> list[str]:
        return sorted(self.schema.required)

    @property
    def properties(self) -> list[str]:
        return list(self.schema.properties)

    @property
    def members(self) -> int:
        return self.architecture["n_members"]

    @property
    def _steep_floor(self) -> float:
        return float(self.metadata["min_scale_out"])

    @property
    def is_finetuned(self) -> bool:
        return self.tuned is not None

    # what the band and callers read of the tuned context (a general model: nothing observed)
    @property
    def tuned_context(self) -> dict[str, str | float] | None:
        return None if self.tuned is None else self.tuned.context

    @property
    def tuned_points(self) -> int:
        return 0 if self.tuned is None else self.tuned.points

    @property
    def observed_scale_outs(self) -> tuple[int, ...]:
        return () if self.tuned is None else self.tuned.observed_scale_outs

    @property
    def parametric_weight(self) -> float:
        return 0.0 if self.tuned is None else self.tuned.parametric_weight

    @property
    def check_rms(self) -> float:
        return 0.0 if self.tuned is None else self.tuned.check_rms

    @property
    def check_count(self) -> int:
        return 0 if self.tuned is None else self.tuned.check_count

    @property
    def above_checks(self) -> tuple[float, int] | None:
        return None if self.tuned is None else self.tuned.above_checks

    def _replicate_checks(self) -> tuple[float, int]:
        """(sum of squares, count) of the checks in ``check_count`` that are repeated runs."""
        if self.tuned is None:
            return 0.0, 0
        ns, residuals = zip(*self.tuned.run_residuals, strict=True)
        return replicate_checks(np.array(ns), np.array(residuals))

    @property
    def run_residuals(self) -> tuple[tuple[float, float], ...]:
        return () if self.tuned is None else self.tuned.run_residuals

    @property
    def validation_mre(self) -> dict[str, float] | None:
        """Out-of-fold mean relative error per k ("0".."5") of the training contexts (None: no
        out-of-fold data)."""
        return mre_by_k(self.calibration)

    @property
    def unseen_job_type_mre(self) -> dict[str, float] | None:
        """Out-of-fold mean relative error per k for a job type the model never saw (None: not
        calibrated for one)."""
        return None if self.calibration.unseen_job is None else mre_by_k(self.calibration.unseen_job)

    def _copy(self, tuned: TunedContext | None = None) -> RuntimeModel:
        copy = RuntimeModel(
            self.params, self.architecture, self.schema, self.metadata, self.calibration, tuned
        )
        copy._h_cache = self._h_cache  # the same network: the same head output per context
        copy._missing_cache = self._missing_cache  # (untuned predictions of training contexts)
        copy._trained_scale_outs = self._trained_scale_outs
        copy._edge_tables = self._edge_tables
        copy._edge_misses = self._edge_misses
        # (read from the schema and the training curves alone, which a copy shares: not the tuning)
        copy._distance_cache = self._distance_cache
        return copy

    def _for_job(self, job_type: str) -> RuntimeModel:
        """This model, or for a job type it never saw (where pre-training calibrated for one) the
        general model with that calibration in place of its own: fine-tuning prior, likelihood
        width, residual correction and band tables as measured on job types held out whole."""
        unseen = self.calibration.unseen_job
        if unseen is None or job_type in self.schema.required:
            return self
        if self._unseen_view is None:
            # (its tables measured job types held out whole: no extrapolation tables on top)
            self._unseen_view = RuntimeModel(
                self.params, self.architecture, self.schema, self.metadata, unseen
            )
        return self._unseen_view

    # ------------------------------------------------------------------ training
    @classmethod
    def pretrain(
        cls,
        runs: pd.DataFrame,
        *,
        seed: int = 0,
        time_budget_s: float | None = None,
        config: TrainingConfig | None = None,
        unseen_job_types: bool = True,
        extrapolation: bool = True,
    ) -> RuntimeModel:
        """Pre-train a general model on runs of one or many job types across contexts.

        ``unseen_job_types``: a model of several job types also calibrates how it answers for a
        job type it never saw (a second ensemble, trained with whole job types held out; about as
        long again as the first). Without it such a job type gets the bands of the job types it was
        trained on, which are narrower than its error until its runs widen them.

        ``extrapolation``: also calibrate the band of a context outside the training data (an
        ensemble whose members hold out whole machine types, environments, the ends of a numeric
        range; see ``extrapolation_calibration``). Without it such a context gets the
        uncalibrated wide band.
        """
        from airflow_provider_bellamy.model.training import TrainingConfig, single_thread

        cfg = config or TrainingConfig()
        if time_budget_s is not None:
            if not (isinstance(time_budget_s, (int, float)) and time_budget_s > 0):
                raise InvalidInputError("time_budget_s", time_budget_s, "must be a number of seconds > 0")
            cfg = TrainingConfig(**{**cfg.__dict__, "time_budget_s": float(time_budget_s)})
        with single_thread():
            return cls._pretrain(
                runs, seed=seed, cfg=cfg, unseen_job_types=unseen_job_types, extrapolation=extrapolation
            )

    @classmethod
    def _pretrain(
        cls,
        runs: pd.DataFrame,
        *,
        seed: int,
        cfg: TrainingConfig,
        unseen_job_types: bool,
        extrapolation: bool,
    ) -> RuntimeModel:
        from airflow_provider_bellamy.model.training import (
            context_folds,
            encode_runs,
            noise_sd_of,
            train_ensemble,
        )

        started = time.monotonic()
        frame = _training_frame(runs, "runs")
        device = cfg.resolve_device()
        contexts = _frame_contexts(frame)
        keys = [_context_key(c) for c in contexts]
        schema = FeatureSchema.from_contexts(list(frame["job_type"]), contexts)
        schema.unknown_as_absent = cfg.property_dropout > 0
        data = encode_runs(
            schema, contexts, keys, frame["scale_out"].to_numpy(), frame["runtime_s"].to_numpy(), device
        )
        n_ctx = data.vectors.shape[0]
        rng = np.random.default_rng(seed)
        k_folds = min(cfg.members, n_ctx) if n_ctx >= 2 else 1
        folds = context_folds(n_ctx, k_folds, rng) if k_folds > 1 else [np.array([], dtype=np.int64)]
        jobs = _context_property(data.context_keys, keys, contexts, "job_type")
        unseen = unseen_job_types and k_folds > 1 and len(set(jobs)) >= 2
        by_key = dict(zip(keys, contexts, strict=True))
        ordered = [by_key[k] for k in data.context_keys]
        # (its own generator: the model's calibration draws stay those of a model without it)
        held_out = (
            held_out_folds(ordered, max(cfg.members, MIN_HELD_OUT_FOLDS), np.random.default_rng([seed, 17]))
            if extrapolation and k_folds > 1
            else []
        )
        # each pass (the model, the unseen-job calibration, the extrapolation calibration) gets an
        # equal share of a time budget: 3/4 of it to train, calibration what is left (it shrinks
        # its search to fit)
        share = 1.0 / (1 + int(unseen) + int(bool(held_out)))

        def deadline(fraction: float) -> float | None:
            return started + fraction * cfg.time_budget_s if cfg.time_budget_s else None

        cross_fitted: list[np.ndarray] = []
        net, member_stats = train_ensemble(
            data, folds, seed=seed, config=cfg, deadline=deadline(0.75 * share), cross_fitted=cross_fitted
        )
        params = {name: value.detach().cpu().numpy() for name, value in net.state_dict().items()}
        architecture = {
            "n_members": net.members,
            "n_properties": net.n_properties,
            "code": net.code,
            "hidden": net.hidden,
        }
        runs_np = RunsArrays(data)
        h_members = inference.log_weights(params, runs_np.vectors, runs_np.mask)  # [M, C, F]
        # the out-of-fold heads the band's tables read: each from an epoch its context did not
        # choose (train_ensemble's ``cross_fitted``; the kept parameters' where its fold was unsplit)
        h_out_of_fold = np.where(np.isnan(cross_fitted[0]), h_members, cross_fitted[0])
        noise_sd = noise_sd_of(data)
        environments = _context_property(data.context_keys, keys, contexts, "environment")
        curves = _context_curves(data, runs_np, keys, contexts)
        calibration = (
            calibrate_members(
                h_members,
                folds,
                runs_np,
                noise_sd,
                rng,
                deadline(0.95 * share),
                environments,
                jobs,
                h_out_of_fold=h_out_of_fold,
                # each context's known twins among the others, as fine-tuning will find them
                twins=[
                    _known_twin_of(schema, c, curves, float(frame["scale_out"].min()), noise_sd)
                    for c in ordered
                ],
            )
            if k_folds > 1
            else Calibration(noise_sd, FineTuning(max(noise_sd, training_rms(h_members, runs_np, folds))))
        )
        if unseen:
            unseen_calibration = unseen_job_calibration(
                data,
                runs_np,
                jobs,
                cfg,
                seed,
                rng,
                noise_sd,
                environments,
                deadline(1.75 * share),
                deadline(1.95 * share),
            )
            calibration = replace(calibration, unseen_job=unseen_calibration)
        if held_out and calibration.fine_tuning.prior_covariance is not None:
            start = 1 + int(unseen)
            extrapolation_tables = extrapolation_calibration(
                schema,
                data,
                runs_np,
                ordered,
                held_out,
                calibration,
                cfg,
                seed,
                rng,
                environments,
                deadline((start + 0.75) * share),
                deadline((start + 0.95) * share),
            )
            calibration = replace(
                calibration,
                extrapolation=replace(
                    extrapolation_tables,
                    # the model's own out-of-fold contexts' distance, for its tables standing in
                    # where no kind held out enough contexts (band.band_sources)
                    own_held_out_distance=typical_distance(
                        [d for fold in folds for d in fold_distances(ordered, fold)]
                    ),
                ),
            )
        newest = int(frame["id"].max()) if "id" in frame.columns and frame["id"].notna().any() else None
        metadata = {
            "format": FORMAT,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "seed": seed,
            "job_types": sorted(set(frame["job_type"])),
            "n_runs": len(frame),
            "n_contexts": int(n_ctx),
            "min_scale_out": int(frame["scale_out"].min()),
            "newest_run_id": newest,
            "train_seconds": round(time.monotonic() - started, 3),
            "members": member_stats,
            "config": {k: v for k, v in cfg.__dict__.items() if k != "device"},
            # what extrapolation.signals compares a context with
            "domain": training_domain(ordered),
            "curves": curves,
        }
        return cls(params, architecture, schema, metadata, calibration)

    # ------------------------------------------------------------------ fine-tuning
    def finetune(self, context_runs: pd.DataFrame) -> RuntimeModel:
        """A copy fine-tuned to the one context of ``context_runs`` (0 rows → the general model)."""
        if getattr(context_runs, "empty", False):
            return self._copy()
        frame = _training_frame(context_runs, "context_runs")
        contexts = _frame_contexts(frame)
        keys = {_context_key(c) for c in contexts}
        if len(keys) > 1:
            raise InvalidInputError(
                "context_runs", f"{len(keys)} contexts", "fine-tuning takes the runs of exactly one context"
            )
        # the model's view of the context, as predict() will see it: properties the model was not
        # trained with are dropped here too, or the correction would never apply to its own context
        ctx = self._normalise(contexts[0])
        model = self._for_job(str(ctx["job_type"]))
        if model is not self:
            return model.finetune(context_runs)
        h0 = self._base_h(ctx)  # [M, N_BASIS]
        ext = signals(self.metadata["domain"], ctx)
        outside = band_sources(self, ext)[2]
        ns = frame["scale_out"].to_numpy()
        log_y = np.log(frame["runtime_s"].to_numpy(dtype=np.float64))
        known_twin = self._known_twin(ctx, ns)
        fit = fit_context(
            h0[None],
            scale_out_basis(ns, self._steep_floor)[None],
            ns[None],
            log_y[None],
            np.ones((1, len(log_y))),
            noise_sd=self._likelihood_sd,
            learned_cov=self._prior_covariance(),
            # a context from outside the training data is checked at every scale-out it ran at
            # (see band.quantiles): the training data's cliffs at its smallest scale-outs are not its
            check_above=0.0 if outside else self._smallest_max,
            # (and apart above the training data's smallest scale-outs, for the tables measured so:
            # band.answering_scale)
            also_above=self._smallest_max if outside else None,
            correction=self._correction,
            # a value the model never saw: the context comes from elsewhere (see finetuning)
            other_prior=UNSEEN_VALUE_PRIOR
            if self.schema.unknown_properties(ctx)
            else OTHER_ENVIRONMENT_PRIOR,
            # a guess: the network's shape was learned ≥ FAR_FACTOR away, its runs show their own
            learned_shape=not (outside and ext.guessing),
            # a twin's measured curve is what the prediction follows (``_nearest_for``)
            shape=None if (twin := self._twin_log(ctx, ns)) is None else twin[None],
            # a known context's twins' curve, weighed against the tuned one (``_known_twin``)
            twin=None if known_twin is None else known_twin[2][None],
            twin_prior=PARAMETRIC_PRIOR if known_twin is None else known_twin[3],
        )
        check_rms, check_count = float(fit.check_rms[0]), int(fit.check_count[0])
        above_checks = None
        if outside:
            # its run-to-run noise too: the tables measured the noise of other clusters (inside the
            # training data they measured contexts like it, noise included)
            check_rms, check_count = with_replicates(ns, log_y, check_rms, check_count)
            if fit.above_check_rms is not None and fit.above_check_count is not None:
                above_checks = with_replicates(
                    ns, log_y, float(fit.above_check_rms[0]), int(fit.above_check_count[0])
                )
        part = TunedContext(
            context=ctx,
            delta=fit.delta[0],
            theta=fit.theta[0],
            parametric_weight=float(fit.parametric_weight[0]),
            check_rms=check_rms,
            check_count=check_count,
            run_residuals=(),
            nearest=None,
            above_checks=above_checks,
        )
        part = replace(part, nearest=self._nearest_for(ctx, self._copy(part), ns, log_y))
        # the residual correction's data: what the tuned curve, before any correction, misses (the
        # curve knows the scale-outs the runs stand at: ``_one_scale_out_level``; they lie inside
        # the range it is known at, so the model's own curve: no continuation beyond an edge)
        ran = replace(part, run_residuals=tuple((float(n), 0.0) for n in ns))
        curve = self._copy(ran)._model_log_curves(ctx, ns.astype(np.int64), corrected=False)[1]
        residuals = tuple(
            (float(n), float(r)) for n, r in zip(ns, (log_y - curve) * fit.run_weight[0], strict=True)
        )
        # (after the residuals: the residual correction bends the tuned curve, the twin is mixed in after)
        twin_part = None
        if known_twin is not None and (share := float(fit.twin_weight[0])) > 0:
            log_n, log_runtime, at_runs, _ = known_twin
            level = float(run_level(at_runs[None], log_y[None], fit.run_weight[:1] > 0)[0])
            twin_part = NearestCurve(tuple(log_n.tolist()), tuple((log_runtime + level).tolist()), share)
        return self._copy(replace(part, run_residuals=residuals, twin=twin_part))

    def _nearest_for(
        self, ctx: dict[str, str | float], tuned: RuntimeModel, ns: np.ndarray, log_y: np.ndarray
    ) -> NearestCurve | None:
        """For a context with a value the model reads as unknown: the curve of the training
        contexts of its job nearest to it in the properties it gives, rescaled to its runs (None:
        a context the model knows, no such contexts)."""
        if not self.schema.unknown_properties(ctx):
            return None
        found = [
            curve for align in ALIGNMENTS if (curve := self._nearest_training_curve(ctx, align)) is not None
        ]
        if not found:
            return None

        def network_at(scale_outs: np.ndarray) -> np.ndarray:
            return tuned._network_log(ctx, np.asarray(scale_outs, dtype=np.float64))

        weight = nearest_weight(self._nearest_distance(ctx))
        log_n, log_runtime = combine_nearest(
            found,
            network_at,
            ns,
            log_y,
            self._likelihood_sd,
            run_sd=float(self.calibration.noise_sd),
            # a twin did the context's own work: its split of serial and parallel work is the context's
            refit_split=weight < 1.0,
        )
        return NearestCurve(tuple(log_n.tolist()), tuple(log_runtime.tolist()), weight)

    def _known_twin(
        self, ctx: dict[str, str | float], ns: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float] | None:
        """For a context the model knows with twins among the training contexts
        (``finetuning.twin_curve``): their curve (log scale-outs, mean log runtime), its log runtime
        at ``ns`` (beyond its scale-outs the network's shape, ``nearest_log_runtime``) and its prior
        against the tuned curve (``finetuning.twin_prior``: whether the head's basis draws it within
        the training runs' noise); None for any other context (one with a value read as unknown
        has ``_twin_log``)."""
        found = _known_twin_of(
            self.schema,
            ctx,
            self.metadata.get("curves") or {},
            self._steep_floor,
            float(self.calibration.noise_sd),
        )
        if found is None:
            return None
        log_n, log_runtime, prior = found
        return log_n, log_runtime, self._twin_curve(ctx, log_n, log_runtime, ns), prior

    def _twin_log(self, ctx: dict[str, str | float], ns: np.ndarray) -> np.ndarray | None:
        """For a context with a value the model reads as unknown and a twin among the training
        contexts (``finetuning.nearest_weight``: distance 0): the twins' mean log runtime at
        ``ns`` (beyond their scale-outs the network's shape, ``nearest_log_runtime``), the
        curve its prediction follows; None for any other context."""
        if self._nearest_distance(ctx) != 0.0:
            return None
        found = self._nearest_training_curve(ctx)
        if found is None:
            return None
        log_n, log_runtime = found
        return self._twin_curve(ctx, log_n, log_runtime, ns)

    def _twin_curve(
        self,
        ctx: dict[str, str | float],
        log_n: np.ndarray,
        log_runtime: np.ndarray,
        ns: np.ndarray,
        network: np.ndarray | None = None,
    ) -> np.ndarray:
        """A twin's curve at ``ns``, beyond its scale-outs this model's network for ``ctx``
        (``finetuning.twin_log_runtime``; ``network``: the network's curve at ``ns``, where
        known)."""
        return twin_log_runtime(log_n, log_runtime, ns, lambda at: self._network_log(ctx, at), network)

    def _nearest_training_curve(
        self, ctx: dict[str, str | float], align: str | None = None
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """(log scale-outs, mean log runtime) of the training contexts of ``ctx``'s job nearest to
        it in the properties it gives with a value the model knows, carried by scale-out or by the
        ratio of ``align`` (``finetuning.nearest_curve``)."""
        curves = self.metadata["curves"]
        return nearest_curve(
            ctx,
            curves["contexts"],
            curves["scale_outs"],
            self._nearest_names(ctx),
            align,
            self._twin_names(ctx) if self.schema.unknown_properties(ctx) else None,
        )

    def _nearest_names(self, ctx: dict[str, str | float]) -> list[str]:
        """The properties the nearest training contexts are found by: those ``ctx`` gives with a
        value the model knows."""
        return _nearest_names(self.schema, ctx)

    def _nearest_distance(self, ctx: dict[str, str | float]) -> float | None:
        """How far the training context of ``ctx``'s job nearest to it lies in those properties
        and in the derived ones the network reads (``finetuning.nearest_distance``; 0: a twin but
        for its unknown values). (A new machine type whose memory or cores alone differ, read as
        unknown where they never varied, still moves the input per node's memory or per core,
        whose effect the network learned: no twin, C3O's sgd on m4.2xlarge held out in a fold.)
        None for a context without such values: it is no twin of anything (one lacking a property
        is not either: what it lacks may differ)."""
        if not self.schema.unknown_properties(ctx):
            return None
        # (fine-tuning, its nearest curve and the untuned prediction each ask: computed once)
        key = _context_key(ctx)
        if key not in self._distance_cache:
            curves = self.metadata.get("curves") or {}
            if len(self._distance_cache) > 1024:
                self._distance_cache.clear()
            self._distance_cache[key] = nearest_distance(
                ctx, curves.get("contexts", []), self._twin_names(ctx)
            )
        return self._distance_cache[key]

    def _twin_names(self, ctx: dict[str, str | float]) -> list[str]:
        """What a twin agrees in: the properties ``ctx`` gives with known values and the derived
        ones the network reads (``_nearest_distance``)."""
        derived = [p for p in DERIVED if p in self.schema.properties and ctx.get(p) is not None]
        return self._nearest_names(ctx) + derived

    @property
    def _likelihood_sd(self) -> float:
        """Fine-tuning's likelihood width (calibrated; the residual correction's noise too)."""
        return float(self.calibration.fine_tuning.likelihood_sd)

    @property
    def _correction(self) -> tuple[float, float] | None:
        """The residual correction's (amplitude, length); None where calibration chose none (or
        had no out-of-fold data to choose from)."""
        setting = self.calibration.fine_tuning.residual_correction
        if setting is None or setting[0] <= 0:
            return None
        return setting

    @property
    def _smallest_max(self) -> float:
        tables = self.calibration.tables
        return 0.0 if tables is None else tables.smallest_max_scale_out

    def _prior_covariance(self) -> np.ndarray:
        cov = self.calibration.fine_tuning.prior_covariance
        n_basis = self.params["head.bias"].shape[1]
        if cov is None:  # a single training context: no out-of-fold data to estimate it from
            return np.eye(n_basis) * DEFAULT_PRIOR_SD**2
        return np.asarray(cov, dtype=np.float64)

    # ------------------------------------------------------------------ prediction
    def _normalise(self, context: Mapping[str, object]) -> dict[str, str | float]:
        if not isinstance(context, Mapping):
            raise InvalidInputError("context", context, "must be a mapping of property name to value")
        job = context.get("job_type")
        if job is None:
            if len(self.schema.required) != 1:
                raise InvalidInputError(
                    "context.job_type", None, f"this model covers several job types: {self.job_types}"
                )
            job = next(iter(self.schema.required))
        if not isinstance(job, str):
            raise UnknownJobTypeError(str(job), self.job_types)
        ctx = context_of(job, {k: v for k, v in context.items() if k in self.schema.properties})
        if "framework" in self.schema.properties and "framework" not in ctx:
            fw = context.get("framework")
            if fw is not None:
                ctx["framework"] = str(fw).lower()
        self.schema.check_context(job, ctx)
        return ctx

    def cannot_read(self, context: Mapping[str, object]) -> str | None:
        """Why the model cannot answer for ``context`` (a job type it refuses, a property it needs
        and the context lacks), or None where it can."""
        try:
            self._normalise(context)
        except (UnknownJobTypeError, InvalidInputError) as exc:
            return f"cannot read this context ({exc})"
        return None

    def _base_h(self, ctx: dict[str, str | float]) -> np.ndarray:
        key = _context_key(ctx)
        cached = self._h_cache.get(key)
        if cached is None:
            vectors, mask = self.schema.encode([ctx])
            cached = inference.log_weights(self.params, vectors, mask)[:, 0, :]  # [M, N_BASIS]
            if len(self._h_cache) > 1024:
                self._h_cache.clear()
            self._h_cache[key] = cached
        return cached

    def level_spread(self, calibration: Calibration, ctx: dict[str, str | float]) -> tuple[float, float]:
        """The level spread σ (below, above the prediction) ``calibration``'s tables hold for
        ``ctx`` inside the training data (``BandTables.levelled``): its job type's, at the level of
        the network's untuned prediction (the members' mean log seconds over the training
        scale-outs), as calibration measured its out-of-fold contexts' ((1, 1): tables without
        spreads)."""
        tables = calibration.tables
        if tables is None or str(ctx["job_type"]) not in tables.level_spreads:
            return (1.0, 1.0)
        return tables.level_spread(str(ctx["job_type"]), self.untuned_level(ctx, tables.level_scale_outs))

    def untuned_level(self, ctx: dict[str, str | float], scale_outs: Sequence[float]) -> float:
        """``ctx``'s untuned predicted level: the members' mean of their curves' mean log seconds
        over ``scale_outs`` (``calibration.untuned_level``, as calibration measures it)."""
        grid = scale_out_basis(np.asarray(scale_outs, dtype=np.float64), self._steep_floor)
        return float(untuned_level(self._base_h(ctx), grid).mean())

    def _tuned_for(self, ctx: dict[str, str | float]) -> TunedContext | None:
        return self.tuned if self.tuned is not None and ctx == self.tuned.context else None

    def _is_tuned_for(self, ctx: dict[str, str | float]) -> bool:
        return self._tuned_for(ctx) is not None

    def _log_curves(
        self,
        ctx: dict[str, str | float],
        ns: np.ndarray,
        ext: Extrapolation | None = None,
        *,
        corrected: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(the network's log seconds, the prediction's) per validated scale-out (``_curves``)."""
        network, curve, _ = self._curves(ctx, ns, ext, corrected=corrected)
        return network, curve

    def _curves(
        self,
        ctx: dict[str, str | float],
        ns: np.ndarray,
        ext: Extrapolation | None = None,
        *,
        corrected: bool = True,
    ) -> tuple[np.ndarray, np.ndarray, Continuation | None]:
        """(the network's log seconds, the prediction's, the continuation past the edges) per
        validated scale-out (``_model_log_curves``): past the smallest or the largest scale-out the
        job type was trained at and the context ran at (``_edges``), the prediction continues the
        curve from that edge (``continued_log_runtime``); None where every scale-out lies between."""
        network, curve = self._model_log_curves(ctx, ns, ext, corrected=corrected)
        edges = self._edges(ctx)
        if edges is None:
            return network, curve, None
        below, beyond = ns < edges[0], ns > edges[1]
        if not (below.any() or beyond.any()):
            return network, curve, None
        amdahl, power = np.full(len(ns), np.nan), np.full(len(ns), np.nan)
        for side, past in ((0, below), (1, beyond)):
            if not past.any():
                continue
            known = edge_octave(edges, side)
            at_known = self._model_log_curves(ctx, known, ext, corrected=corrected)[1]
            if not np.isfinite(at_known).all():  # (a curve that is itself a guess has no slope to follow)
                continue
            amdahl[past] = continued_log_runtime(ns[past], known, at_known)
            power[past] = power_law_log_runtime(ns[past], known, at_known)
        continued = np.isfinite(amdahl)
        # Beyond the edge the prediction is Amdahl's curve; below it, halfway (log) between that
        # and the model's own extrapolation: going down, a job may spill (the network's steep terms
        # rise) or keep scaling as Amdahl's curve does, and no run said which. Either alone missed
        # C3O's runs at 2-4 nodes, pre-trained on 6-12, by more (docs/model.md, "Scale-outs smaller
        # than any trained").
        point = np.where(continued, np.where(below, (amdahl + curve) / 2, amdahl), curve)
        own = np.where(continued & below, curve, np.nan)  # (beyond the edge no guess: not spanned)
        return network, point, Continuation(edges, below, beyond, (amdahl, power, own))

    def _edges(self, ctx: dict[str, str | float]) -> tuple[int, int] | None:
        """The smallest and the largest scale-out this context's curve is known at: its job type's
        training runs' (every job type's for one the model never saw) and its own runs' (None
        where that is a single one)."""
        job = str(ctx.get("job_type"))
        if job not in self._trained_scale_outs:
            grid, own = self._job_curves(job)
            self._trained_scale_outs[job] = tuple(
                sorted({n for e in own for n, v in zip(grid, e["log_runtime"], strict=True) if v is not None})
            )
        tuned = self._tuned_for(ctx)
        known = sorted(set(self._trained_scale_outs[job]) | set(tuned.observed_scale_outs if tuned else ()))
        return None if len(known) < 2 else (known[0], known[-1])

    def _job_curves(self, job: str) -> tuple[list[int], list[dict[str, Any]]]:
        """The training curves' scale-outs, and the curves of ``job``'s training contexts (every
        job type's for one the model never saw)."""
        curves = self.metadata.get("curves") or {}
        entries = curves.get("contexts", [])
        own = [e for e in entries if e["context"].get("job_type") == job] or entries
        return [int(n) for n in curves.get("scale_outs", [])], own

    def _edge_table(self, job: str) -> tuple[EdgeMisses | None, EdgeMisses | None]:
        """How far the guesses past an edge missed ``job``'s training runs (every job type's for
        one the model never saw, as ``_edges``) held out past the edges of each training context's
        own scale-outs: (below, beyond), None on a side with fewer than ``MIN_EDGE_POINTS`` runs."""
        if job not in self._edge_tables:
            grid, own = self._job_curves(job)
            rows = [e["log_runtime"] for e in own]
            tables = tuple(edge_misses(grid, rows, side) for side in (0, 1))
            self._edge_tables[job] = tuple(  # type: ignore[assignment]
                t if t is not None and len(t.octaves) >= MIN_EDGE_POINTS else None for t in tables
            )
        return self._edge_tables[job]

    def _model_log_curves(
        self,
        ctx: dict[str, str | float],
        ns: np.ndarray,
        ext: Extrapolation | None = None,
        *,
        corrected: bool = True,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(the network's log seconds, the model's) per validated scale-out: the prediction is
        the members' mean curve (for a context with a nearest curve, blended with it, and below its
        smallest run that curve's shape: ``_nearest_blend``), blended with
        the context's parametric curve by the share fine-tuning gave it, plus the residual
        correction towards the context's own runs (``finetuning.tuned_log_runtime``), mixed in log
        space with its twins' curve by the twin's weight where it has one (``_known_twin``).
        ``ext``: the context's ``signals``, where the caller has them already; ``corrected``
        False: without the residual correction nor the twin (the curve the runs' residuals are
        measured from)."""
        tuned = self._tuned_for(ctx)
        network = self._network_log(ctx, ns)
        if tuned is None:
            return network, self._untuned_log(ctx, ns, network, ext)
        shaped = network
        if tuned.nearest is not None:
            network, shaped = self._nearest_blend(ctx, tuned.nearest, tuned.observed_scale_outs, ns, network)
        correction = self._correction
        # (the twin is mixed into the prediction only: ``corrected`` False is the curve the run
        # residuals were measured from, which the band reads the runs back with)
        twinned = corrected and tuned.twin is not None
        corrected = corrected and bool(tuned.run_residuals) and correction is not None
        curve = tuned_log_runtime(
            shaped,
            ns,
            tuned.theta,
            tuned.parametric_weight,
            runs=tuple(np.array(tuned.run_residuals).T) if corrected else None,  # type: ignore[arg-type]
            corrections=[correction] if corrected and correction is not None else [],
            noise_sd=self._likelihood_sd,
        )[0]
        if twinned and tuned.twin is not None:
            log_n, log_runtime = np.asarray(tuned.twin.log_n), np.asarray(tuned.twin.log_runtime)
            twin = self._twin_curve(ctx, log_n, log_runtime, ns, network)
            curve = mix_twin(curve, twin, tuned.twin.weight)
        return network, curve

    def _nearest_blend(
        self,
        ctx: dict[str, str | float],
        nearest: NearestCurve,
        observed: Sequence[int],
        ns: np.ndarray,
        network: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """For a tuned context with a nearest curve: (the network's curve blended with it by its
        weight, what the prediction follows). They differ below the smallest scale-out the context
        ran at (of ``observed``): there the prediction takes the nearest curve's shape, offset to meet the blend at
        that scale-out. For a value the model never saw the network's shape below the runs is what
        its training contexts did at those scale-outs, a candidate the runs never weighed; the
        nearest curve holds that shape and the one carried by memory, weighed by the runs
        (``finetuning.combine_nearest``). The band still spans the blend there (``band``)."""
        log_n, log_runtime = np.asarray(nearest.log_n), np.asarray(nearest.log_runtime)
        ends = self._network_log(ctx, np.exp(log_n[[0, -1]]))
        near = nearest_log_runtime(log_n, log_runtime, network, ends, ns)
        level = self._one_scale_out_level(ctx, nearest, observed, ends)
        network = network + level
        blend = (1 - nearest.weight) * network + nearest.weight * near
        below = ns < min(observed, default=0)
        if not below.any():
            return blend, blend
        smallest = np.array([float(min(observed))])
        network_there = self._network_log(ctx, smallest) + level
        near_there = nearest_log_runtime(log_n, log_runtime, network_there, ends, smallest)
        offset = (1 - nearest.weight) * (network_there - near_there)
        return blend, np.where(below, near + offset, blend)

    def _one_scale_out_level(
        self, ctx: dict[str, str | float], nearest: NearestCurve, observed: Sequence[int], ends: np.ndarray
    ) -> float:
        """For a context with a nearest curve whose runs stand at one scale-out: how far (log) the
        nearest curve, which meets the runs, lies above the tuned network's curve there. Such runs say only the level; fine-tuning takes part of it (its
        likelihood width also holds the network's out-of-fold misfit, 0.2-0.4 in log for a job
        pre-trained on two contexts, so a run of a machine type it never saw moves it little), and
        the residual correction that takes the rest from runs at two scale-outs on takes none from
        one (``finetuning.MIN_SCALE_OUTS_TO_CORRECT``). So the network's share of the blend is
        offset to meet them too, unless they stand where the nearest curve spills. From two
        scale-outs on: 0, the curve as before."""
        if len(observed) != 1:
            return 0.0
        ran = np.array([float(observed[0])])
        network_ran = self._network_log(ctx, ran)
        log_n, log_runtime = np.asarray(nearest.log_n), np.asarray(nearest.log_runtime)
        # a run where the nearest curve spills says how deep the cliff is, not where the rest of
        # the curve lies (``finetuning.combine_nearest``, the same test): the network keeps its level
        if superlinear_rise(log_n, log_runtime, ran)[0] > self._likelihood_sd:
            return 0.0
        return float((nearest_log_runtime(log_n, log_runtime, network_ran, ends, ran) - network_ran)[0])

    def _untuned_log(
        self,
        ctx: dict[str, str | float],
        ns: np.ndarray,
        network: np.ndarray,
        ext: Extrapolation | None = None,
    ) -> np.ndarray:
        """The prediction before the context has runs: the network's curve, except for a context
        with a value the model reads as unknown (a new machine type...) or lacking one. There the
        network extrapolates from what its members saw, and a job type trained on a few contexts
        gave each member fewer still (with two, one each: a member cannot tell the contexts
        apart); the training contexts nearest to it measured their curves. The prediction blends
        the two in log space with the share the tuned prediction gives that curve
        (``finetuning.NEAREST_WEIGHT``), without the level shift it has no run for (its runs bring
        that, see ``_nearest_for``), and with less of it the farther the context lies beyond the
        trained range of a number that varied (``nearest_share``): a sort of 6 MB is not timed by
        curves measured at 10 GB, the network's learned size effect is the better guess there. A
        context the model knows keeps the network's curve."""
        # (a property every training run of the job had and the context lacks reads as unknown too)
        lacks = any(ctx.get(p) is None for p in self.schema.required.get(str(ctx["job_type"]), ()))
        if not lacks and not self.schema.unknown_properties(ctx):
            return network
        found = self._nearest_training_curve(ctx)
        if found is None:
            return network
        log_n, log_runtime = found
        near = nearest_log_runtime(
            log_n, log_runtime, network, self._network_log(ctx, np.exp(log_n[[0, -1]])), ns
        )
        weight = nearest_share(
            ext if ext is not None else signals(self.metadata["domain"], ctx),
            nearest_weight(self._nearest_distance(ctx)),
        )
        return (1 - weight) * network + weight * near

    def _network_log(self, ctx: dict[str, str | float], ns: np.ndarray) -> np.ndarray:
        """The members' mean log runtime at ``ns`` (the fine-tuned correction applied where tuned)."""
        h = self._base_h(ctx)
        tuned = self._tuned_for(ctx)
        if tuned is not None:
            h = h + tuned.delta
        basis = scale_out_basis(ns, self._steep_floor)
        return inference.log_runtime(h[:, None, :], basis[None, :, :]).mean(axis=0)

    def predict(self, context: Mapping[str, object], scale_outs: Sequence[int]) -> np.ndarray:
        """Predicted runtime in seconds at each scale-out (geometric mean of the members)."""
        return np.exp(self._log_curves(self._normalise(context), scale_out_array(scale_outs))[1])

    def extrapolation(self, context: Mapping[str, object]) -> Extrapolation:
        """What ``context`` asks this model to extrapolate in (see model/extrapolation.py)."""
        return signals(self.metadata["domain"], self._normalise(context))

    def predict_band(
        self, context: Mapping[str, object], scale_outs: Sequence[int], confidence: float = 0.9
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(mean, lower, upper) seconds; P(runtime ≤ upper) ≈ confidence, P(runtime ≥ lower) ≈ confidence.

        See ``band``, which also says what the band is calibrated for and at what confidence.
        """
        b = self.band(context, scale_outs, confidence)
        return b.mean, b.lower, b.upper

    def band(self, context: Mapping[str, object], scale_outs: Sequence[int], confidence: float = 0.9) -> Band:
        """The band and what it rests on.

        Split-conformal: quantiles of out-of-fold log residuals measured after fine-tuning
        on as many points as this model was tuned on (up to MAX_K). Below the smallest
        scale-out a tuned context was observed at (and, outside the training data, above the
        largest), the band spans both the network's curve and the blended one. A context
        outside the training data (``extrapolation``) takes the tables measured on contexts
        held out the same way (a value never seen, a number beyond the
        range), symmetric about the prediction and multiplied by its ``distance_scale`` beyond
        the distance the tables' held-out contexts lay at (``DistanceWidening``); until it has
        checks of its own, the miss its tuned curve keeps at its runs is added on that side
        (``band.own_miss``), and before its first run, for a context outside by its numbers
        alone, the model's miss at its nearest training contexts (``band.edge_miss``). A
        confidence above what the tables' residuals can resolve is capped (``Band.confidence``).
        The steps: model/band.py (``compose_band``).
        """
        requested = validate_confidence(confidence)
        ctx = self._normalise(context)
        model = self._for_job(str(ctx["job_type"]))
        if model is not self:
            return model.band(context, scale_outs, requested)
        ext = signals(self.metadata["domain"], ctx)
        return compose_band(self, ctx, ext, scale_out_array(scale_outs), requested)

    # ------------------------------------------------------------------ persistence
    def to_bytes(self) -> bytes:
        from safetensors.numpy import save

        tensors = {name: np.ascontiguousarray(value) for name, value in self.params.items()}
        if self.tuned is not None:
            tensors["delta"] = np.ascontiguousarray(self.tuned.delta)
        header = {
            "format": FORMAT,
            **self.architecture,
            "schema": self.schema.to_dict(),
            "metadata": self.metadata,
            "calibration": self.calibration.to_dict(),
            "tuned": None if self.tuned is None else self.tuned.to_dict(),
        }
        return save(tensors, metadata={"bellamy": json.dumps(header, default=_json_default)})

    @classmethod
    def from_bytes(cls, data: bytes, *, source: str = "<bytes>") -> RuntimeModel:
        from safetensors import SafetensorError
        from safetensors.numpy import load

        try:
            header_len = int.from_bytes(data[:8], "little")
            raw_header = json.loads(data[8 : 8 + header_len])
            header = json.loads(raw_header["__metadata__"]["bellamy"])
            tensors = load(data)
        except (
            SafetensorError,
            ValueError,
            KeyError,
            TypeError,
            json.JSONDecodeError,
            UnicodeDecodeError,
        ) as exc:
            raise ModelFileError(
                f"{source}: not a readable Bellamy model file ({exc.__class__.__name__}: {exc})"
            ) from None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            found = header.get("format") if isinstance(header, dict) else None
            raise ModelFileError(
                f"{source}: model format {found!r} is not {FORMAT!r} (written by another version of "
                "the provider); retrain with `bellamy train`"
            )
        try:
            architecture = {k: int(header[k]) for k in _ARCHITECTURE}
            delta = tensors.pop("delta", None)
            _check_shapes(tensors, architecture, delta)
            schema = FeatureSchema.from_dict(header["schema"])
            if (header["tuned"] is None) != (delta is None):
                raise ValueError("a fine-tuned model has a delta tensor and a tuned context, or neither")
            tuned = None if delta is None else TunedContext.from_dict(header["tuned"], delta)
            calibration = Calibration.from_dict(header["calibration"])
            metadata = header["metadata"]
            if not isinstance(metadata, dict):
                raise ValueError(f"metadata is {type(metadata).__name__}, not a mapping")
        except (KeyError, ValueError, TypeError) as exc:
            raise ModelFileError(f"{source}: model file is inconsistent ({exc})") from None
        return cls(tensors, architecture, schema, metadata, calibration, tuned)

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_bytes(self.to_bytes())
        tmp.replace(p)  # atomic: a reader never sees half a file
        return p

    @classmethod
    def load(cls, path: str | Path) -> RuntimeModel:
        p = Path(path)
        if not p.is_file():
            raise ModelFileError(f"{p}: no such model file")
        return cls.from_bytes(p.read_bytes(), source=str(p))


def _check_shapes(
    tensors: Mapping[str, np.ndarray], arch: Mapping[str, int], delta: np.ndarray | None
) -> None:
    """Every layer present with the shape the header's architecture implies."""
    m, p, code, hidden = arch["n_members"], arch["n_properties"], arch["code"], arch["hidden"]
    n_basis = int(tensors["head.bias"].shape[-1])
    ae = int(tensors["enc1.bias"].shape[-1])
    expected = {
        "enc1": (PROPERTY_DIM, ae),
        "enc2": (ae, code),
        "dec1": (code, ae),
        "dec2": (ae, PROPERTY_DIM),
        "body1": (p * (code + 1), hidden),
        "body2": (hidden, hidden),
        "head": (hidden, n_basis),
    }
    if set(tensors) != {f"{layer}.{kind}" for layer in inference.LAYERS for kind in ("weight", "bias")}:
        raise ValueError(f"unexpected tensors {sorted(tensors)}")
    for layer, (d_in, d_out) in expected.items():
        if tensors[f"{layer}.weight"].shape != (m, d_in, d_out) or tensors[f"{layer}.bias"].shape != (
            m,
            d_out,
        ):
            raise ValueError(f"layer {layer} has shape {tensors[f'{layer}.weight'].shape}")
    if delta is not None and delta.shape != (m, n_basis):
        raise ValueError(f"delta has shape {delta.shape}")


def _nearest_names(schema: FeatureSchema, ctx: Mapping[str, str | float]) -> list[str]:
    """``RuntimeModel._nearest_names`` (pre-training asks it too, before there is a model)."""
    return [
        p
        for p in schema.properties
        if p not in ALWAYS_KNOWN
        and p not in DERIVED
        and ctx.get(p) is not None
        and schema.is_known(p, ctx[p])
    ]


def _known_twin_of(
    schema: FeatureSchema,
    ctx: Mapping[str, str | float],
    curves: Mapping[str, Any],
    steep_floor: float,
    run_sd: float,
) -> tuple[np.ndarray, np.ndarray, float] | None:
    """A context's known twin (``finetuning.known_twin``: curve and prior) as the model finds it,
    for fine-tuning (``RuntimeModel._known_twin``) and for calibration's simulation of it
    (``_pretrain``); None for a context with a value the model reads as unknown (``_twin_log``)."""
    if schema.unknown_properties(ctx):
        return None
    ratios = [p for p in DERIVED if p in schema.properties and ctx.get(p) is not None]
    return known_twin(ctx, curves, _nearest_names(schema, ctx), ratios, steep_floor, run_sd)


def _context_property(
    ordered_keys: Sequence[str], keys: Sequence[str], contexts: Sequence[Mapping[str, str | float]], name: str
) -> list[str | None]:
    """Property ``name`` of each encoded context (in ``ordered_keys`` order), as a string."""
    by_key = dict(zip(keys, contexts, strict=True))
    return [None if by_key[k].get(name) is None else str(by_key[k][name]) for k in ordered_keys]


def _context_curves(
    data: EncodedRuns, runs_np: RunsArrays, keys: Sequence[str], contexts: Sequence[dict[str, str | float]]
) -> dict[str, Any]:
    """The training contexts' curves, for the nearest-curves component of a context the model
    reads values of as unknown: each context's properties and its mean log runtime at each
    scale-out of the training runs (None where it has none)."""
    by_key = dict(zip(keys, contexts, strict=True))
    grid = np.unique(runs_np.scale_out)
    column = np.searchsorted(grid, runs_np.scale_out)
    sums = np.zeros((len(data.context_keys), len(grid)))
    counts = np.zeros_like(sums)
    np.add.at(sums, (runs_np.ctx_index, column), runs_np.log_y)
    np.add.at(counts, (runs_np.ctx_index, column), 1.0)
    means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return {
        "scale_outs": [int(n) for n in grid],
        "contexts": [
            {
                "context": by_key[key],
                "log_runtime": [None if np.isnan(v) else round(float(v), 6) for v in row],
            }
            for key, row in zip(data.context_keys, means, strict=True)
        ],
    }


def _json_default(value: object) -> object:
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return str(value)
