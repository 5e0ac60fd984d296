"""The held-out calibrations pre-training runs: what the members' answers are worth on contexts
they never saw (numpy, but for the extra ensembles' training, which imports torch).

``RuntimeModel.pretrain`` calibrates its own members out of fold (``calibrate_members``), then trains
and calibrates two more ensembles whose members hold out more than a context: whole job types
(``unseen_job_calibration``) and whole groups of contexts, a machine type, an environment, the
ends of a numeric range (``extrapolation_calibration``). Those ensembles are dropped; what they
measured stays in the model's ``Calibration``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from airflow_provider_bellamy.model import inference
from airflow_provider_bellamy.model.calibration import (
    EXTRAPOLATION_KINDS,
    SIGNAL_KINDS,
    Calibration,
    ExtrapolationTables,
    calibrate,
)
from airflow_provider_bellamy.model.extrapolation import Extrapolation, signal_kinds, signals, training_domain
from airflow_provider_bellamy.model.features import FeatureSchema
from airflow_provider_bellamy.model.finetuning import OTHER_ENVIRONMENT_PRIOR, UNSEEN_VALUE_PRIOR

if TYPE_CHECKING:
    from airflow_provider_bellamy.model.training import EncodedRuns, TrainingConfig


class RunsArrays:
    """The encoded training runs as numpy arrays (calibration works without torch)."""

    def __init__(self, data: EncodedRuns) -> None:
        self.vectors = data.vectors.cpu().numpy()
        self.mask = data.mask.cpu().numpy()
        self.ctx_index = data.ctx_index.cpu().numpy()
        self.basis = data.basis.cpu().numpy().astype(np.float64)
        self.log_y = data.log_y.cpu().numpy().astype(np.float64)
        self.scale_out = np.asarray(data.scale_out)


def calibrate_members(
    h_members: np.ndarray,
    folds: list[np.ndarray],
    data: RunsArrays,
    noise_sd: float,
    rng: np.random.Generator,
    deadline: float | None,
    environments: list[str | None],
    jobs: list[str | None] | None = None,
    h_out_of_fold: np.ndarray | None = None,
    twins: Sequence[tuple[np.ndarray, np.ndarray, float] | None] | None = None,
) -> Calibration:
    """``calibrate`` on the members' out-of-fold predictions; the fine-tuning likelihood width is
    the members' training misfit where calibration has no better choice. ``jobs``: the contexts'
    job types, for per-job scales of the tables (not where job types are held out whole).
    ``h_out_of_fold`` [M, C, F]: the heads the band's tables read for each member's fold (default
    ``h_members``, which choose the fine-tuning settings either way: ``calibrate``'s ``h_tables``).
    ``twins`` [C]: each context's known twin among the others (``calibrate``'s ``twins``)."""
    likelihood_sd = max(noise_sd, training_rms(h_members, data, folds))
    return calibrate(
        h_members,
        folds,
        data.ctx_index,
        data.basis,
        data.log_y,
        data.scale_out,
        likelihood_sd,
        rng,
        deadline,
        environments,
        noise_sd=noise_sd,
        jobs=jobs,
        h_tables=h_out_of_fold,
        twins=twins,
    )


def unseen_job_calibration(
    data: EncodedRuns,
    runs_np: RunsArrays,
    jobs: list[str | None],
    cfg: TrainingConfig,
    seed: int,
    rng: np.random.Generator,
    noise_sd: float,
    environments: list[str | None],
    train_deadline: float | None,
    deadline: float | None,
) -> Calibration:
    """What the model's answers for a job type it never saw are worth: a second ensemble whose
    members each hold out whole job types, calibrated like the first (fine-tuning prior,
    likelihood width, residual correction, band tables). The ensemble itself is dropped: the
    model answers with its own members, which saw every job type but the new one.

    The first ensemble's folds hold out contexts, whose job type the other folds still show; a
    job type that no fold showed is harder (docs/model.md, "Behind the constants"), and only
    members that never saw a job type measure by how much.
    """
    from airflow_provider_bellamy.model.training import job_folds, train_ensemble

    names = [str(j) for j in jobs]
    folds = job_folds(names, min(cfg.members, len(set(names))), rng)
    net, _ = train_ensemble(
        data, folds, seed=seed, config=replace(cfg, members=len(folds)), deadline=train_deadline
    )
    params = {name: value.detach().cpu().numpy() for name, value in net.state_dict().items()}
    # A property only the held-out job types have was never seen present by their member; the
    # model drops a property it was not trained with, so the member does not read it either.
    h_members = np.stack(
        [
            inference.log_weights(
                params,
                runs_np.vectors,
                runs_np.mask * (runs_np.mask[np.setdiff1d(np.arange(len(names)), fold)].max(axis=0) > 0),
            )[m]
            for m, fold in enumerate(folds)
        ]
    )
    return replace(
        calibrate_members(h_members, folds, runs_np, noise_sd, rng, deadline, environments),
        unseen_job_type=True,
        job_folds=tuple(tuple(sorted({names[c] for c in fold})) for fold in folds),
    )


def extrapolation_calibration(
    schema: FeatureSchema,
    data: EncodedRuns,
    runs_np: RunsArrays,
    contexts: Sequence[Mapping[str, str | float]],
    held_out: list[tuple[str, np.ndarray]],
    calibration: Calibration,
    cfg: TrainingConfig,
    seed: int,
    rng: np.random.Generator,
    environments: list[str | None],
    train_deadline: float | None,
    deadline: float | None,
) -> ExtrapolationTables:
    """What the model's bands are worth outside its training data: a third ensemble whose members
    each hold out a whole group of contexts (a machine type, an environment, the ends of a
    numeric range; ``extrapolation.held_out_folds``), calibrated per kind of group with the
    model's own fine-tuning settings (so the tables measure what the model will do). Each
    out-of-fold context's residuals are divided by its ``Extrapolation.distance_scale`` beyond its
    member's training ranges (normalised scores: a band multiplies them back by its own context's). The
    ensemble is dropped; the tables stay (``Calibration.extrapolation``).

    The first ensemble's folds hold out contexts whose machine type and input sizes other folds
    still show: those tables are too narrow for a context from elsewhere (docs/model.md, "Behind
    the constants").
    """
    from airflow_provider_bellamy.model.training import train_ensemble

    folds = [fold for _, fold in held_out]
    net, _ = train_ensemble(
        data, folds, seed=seed, config=replace(cfg, members=len(folds)), deadline=train_deadline
    )
    params = {name: value.detach().cpu().numpy() for name, value in net.state_dict().items()}
    everyone = np.arange(len(contexts))
    scales = []
    held_distances: list[list[float]] = []
    # which held-out contexts showed each signal kind (SIGNAL_KINDS) to their member
    showed: dict[str, list[np.ndarray]] = {kind: [] for kind in SIGNAL_KINDS}
    # Each held-out context as the model will read and fine-tune a context from elsewhere: a value
    # its member never saw read as unknown (FeatureSchema.encode), and fine-tuned with the prior of
    # a context from elsewhere (UNSEEN_VALUE_PRIOR). Encoded with the whole schema, the member
    # would read a machine type it never trained on by its name's n-grams, which the model never
    # does, and the tables would measure another model. Held-out contexts are disjoint across
    # folds, so one encoding serves every member.
    vectors, mask = runs_np.vectors.copy(), runs_np.mask.copy()
    other_priors = np.full(len(contexts), OTHER_ENVIRONMENT_PRIOR)
    for fold in folds:
        rest = [contexts[i] for i in np.setdiff1d(everyone, fold)]
        exts = fold_signals(contexts, fold)
        distances = [e.distance_scale for e in exts]
        held_distances.append(distances)
        for kind in SIGNAL_KINDS:
            showed[kind].append(fold[[kind in signal_kinds(e) for e in exts]] if len(fold) else fold)
        # (a sign the member never saw has no distance: its residual enters unscaled)
        scales.append(np.array([d if math.isfinite(d) else 1.0 for d in distances]))
        if not schema.unknown_as_absent:
            continue
        member = FeatureSchema.from_contexts([str(c["job_type"]) for c in rest], rest)
        view = replace(schema, categories=member.categories, ranges=member.ranges, required=member.required)
        held = [contexts[i] for i in fold]
        vectors[fold], mask[fold] = view.encode(held)
        other_priors[fold] = [
            UNSEEN_VALUE_PRIOR if view.unknown_properties(c) else OTHER_ENVIRONMENT_PRIOR for c in held
        ]
    h_members = inference.log_weights(params, vectors, mask)
    settings = calibration.fine_tuning
    tables = {}
    # A group held out whole measures every signal its contexts showed to their member: the kinds
    # of groups (a value, a range's end) and, besides, the held-out contexts that lacked a property
    # their member's job always had or whose job their member knew only from other environments
    # (a yarn cluster's jobs held out, known from EMR), each kind its own tables (after the groups'
    # kinds: their tables and draws are as before).
    for kind in (*EXTRAPOLATION_KINDS, *SIGNAL_KINDS):
        if kind in SIGNAL_KINDS:
            mine = showed[kind]
        else:
            mine = [fold if k == kind else fold[:0] for k, fold in held_out]
        if not any(len(f) for f in mine):
            continue
        measured = calibrate(
            h_members,
            mine,
            runs_np.ctx_index,
            runs_np.basis,
            runs_np.log_y,
            runs_np.scale_out,
            float(settings.likelihood_sd),
            rng,
            deadline,
            environments,
            settings=settings,
            # a new machine type inside every trained range is as far off as the held-out ones
            # were: only numeric extrapolation grows with its distance
            fold_scales=scales if kind == "numeric" else None,
            other_priors=other_priors,
            noise_sd=calibration.noise_sd,
        ).tables
        if measured is not None:
            tables[kind] = measured
    showed_all = {kind: {int(i) for f in showed[kind] for i in f} for kind in SIGNAL_KINDS}
    return ExtrapolationTables(
        held_out=tuple((kind, len(fold)) for kind, fold in held_out),
        tables=tables,
        # how far outside its member's training data a held-out context of each kind lay: its
        # unscaled residuals already hold that distance (DistanceWidening)
        held_out_distance={
            kind: typical_distance(
                [
                    d
                    for f, fold, (held, _) in zip(held_distances, folds, held_out, strict=True)
                    for i, d in zip(fold, f, strict=True)
                    if held == kind or (kind in SIGNAL_KINDS and i in showed_all[kind])
                ]
            )
            for kind in tables
        },
    )


def mre_by_k(calibration: Calibration) -> dict[str, float] | None:
    """A calibration's out-of-fold mean relative error per k, keyed "0".."5" (as retraining's
    metrics report it)."""
    if calibration.tables is None:
        return None
    return {str(k): v for k, v in enumerate(calibration.tables.validation_mre)}


def fold_distances(contexts: Sequence[Mapping[str, str | float]], fold: np.ndarray) -> list[float]:
    """Each of ``fold``'s contexts' ``Extrapolation.distance_scale`` beyond the training data of
    the member that held it out (every other context)."""
    return [e.distance_scale for e in fold_signals(contexts, fold)]


def fold_signals(contexts: Sequence[Mapping[str, str | float]], fold: np.ndarray) -> list[Extrapolation]:
    """What each of ``fold``'s contexts asks the member that held it out (trained on every other
    context) to extrapolate in."""
    rest = [contexts[i] for i in np.setdiff1d(np.arange(len(contexts)), fold)]
    domain = training_domain(rest)
    return [signals(domain, contexts[i]) for i in fold]


def typical_distance(distances: Sequence[float]) -> float:
    """The median of the finite distance scales (1: none)."""
    finite = [d for d in distances if math.isfinite(d)]
    return float(np.median(finite)) if finite else 1.0


def training_rms(h_members: np.ndarray, data: RunsArrays, folds: list[np.ndarray]) -> float:
    """RMS log error of the members on their own training runs: the basis' misfit plus noise."""
    err = inference.log_runtime(h_members[:, data.ctx_index], data.basis[None]) - data.log_y  # [M, N]
    sq = []
    for m in range(h_members.shape[0]):
        held = folds[m % len(folds)]
        train = ~np.isin(data.ctx_index, held)
        sq.append(float((err[m][train] ** 2).mean()))
    return float(np.sqrt(np.mean(sq)))
