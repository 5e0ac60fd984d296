"""Calibration: what fine-tuning should trust, and how wide a band must be, from
out-of-fold predictions of the pre-trained members (numpy only).

Each member never saw the contexts of its fold, so simulating fine-tuning on k of their
runs and predicting the rest gives honest residuals: they choose the fine-tuning prior
and likelihood widths (empirical Bayes) and become split-conformal quantile tables per k,
which make the confidence of a sizing decision mean what it says.
"""

from __future__ import annotations

import copy
import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from statistics import NormalDist
from typing import Any

import numpy as np

from airflow_provider_bellamy.model.finetuning import (
    OTHER_ENVIRONMENT_PRIOR,
    PARAMETRIC_PRIOR,
    empirical_prior_covariance,
    fit_context,
    fit_delta,
    mix_twin,
    run_level,
    tuned_log_runtime,
    twin_log_runtime,
)
from airflow_provider_bellamy.model.inference import log_runtime

MAX_K = 5  # fine-tuning sizes the calibration tables cover; more points use MAX_K's table
QUANTILE_GRID = np.linspace(0.0, 1.0, 201)
DEFAULT_PRIOR_SD = 0.2
# Calibration keeps the smallest clusters apart: at the smallest trained scale-outs (≤ 1.5 × the
# minimum) memory pressure makes runtimes erratic (C3O: 3× to 25× jumps at 2 nodes), and one
# pooled residual table would widen every other scale-out's band by their spread.
SMALLEST_SCALE_OUT_FACTOR = 1.5
MIN_BUCKET_RESIDUALS = 20
# A scale-out within this factor of one the context was tuned on is predicted from its own runs
# close by; farther out the prediction rests on the curve's shape. Their errors differ, so each gets
# its own tables ("near", "far"; "others" holds both). Farther out the error keeps growing with the
# distance (docs/model.md, "Behind the constants"): the far table holds residuals divided by their
# log distance in units of log NEAR_FACTOR, and a band multiplies them back (normalised conformal
# scores).
NEAR_FACTOR = 1.5
# An environment (the ``environment`` property: a cluster, a cloud service) gets its own tables
# once this many of its contexts were predicted out of fold: fewer describe single jobs.
MIN_ENVIRONMENT_CONTEXTS = 2
# A model of several job types pools their residuals in one table, though some job types' runtimes
# are harder to predict than others': a job type whose out-of-fold residuals on a side of the
# prediction are larger than the pool's gets that side of its band widened by the ratio (Mondrian
# conformal, one way: a scale never narrows the pooled band — pagerank's tail is heavier than its
# mean says, and narrowed it fell under its level, docs/model.md). The scale rests on a job type's
# out-of-fold contexts, whose residuals share their context's error: below MIN_JOB_CONTEXTS of them
# it stays 1, above it is shrunk towards 1 as if JOB_SCALE_PRIOR_CONTEXTS more contexts had the
# pool's scale.
MIN_JOB_CONTEXTS = 5
JOB_SCALE_PRIOR_CONTEXTS = 5
# The spread of the residuals grows with the context's predicted level (the contexts predicted
# slowest spill more, the others are right): per job type, per side, the slope of the log mean
# residual on the level (``level_spreads``), shrunk by the contexts it rests on as a job scale is
LEVEL_SPREAD_PRIOR_CONTEXTS = JOB_SCALE_PRIOR_CONTEXTS
# a context with no residual on a side counts at this share of its job type's mean there (the
# log of 0 would decide the slope alone)
LEVEL_SPREAD_FLOOR = 0.25
PRIOR_SCALES = (0.25, 0.5, 1.0, 2.0)  # × the empirical prior covariance's standard deviations
LIKELIHOOD_FACTORS = (1.0, 2.0, 4.0)
# The residual correction's settings to choose from (see finetuning.residual_correction):
# amplitude (× the likelihood width) and length (log scale-out: 0.35 ≈ a factor 1.4, 0.7 ≈ 2).
# (0, ·) is no correction: a training set whose out-of-fold runs it does not help keeps the
# curves as they are.
CORRECTIONS = ((0.0, 0.5), *((a, length) for a in (0.5, 1.0, 2.0, 4.0) for length in (0.35, 0.7)))
_CALIBRATION_DRAWS = 4
# The scale-out buckets of a k's tables (see _bucket_tables).
BUCKETS = ("smallest", "others", "near", "far")
# The kinds of extrapolation the out-of-distribution pass measures (extrapolation.held_out_folds).
EXTRAPOLATION_KINDS = ("categorical", "numeric")
# A fine-tuned context's own leave-one-scale-out residuals (its "checks") rescale its band
# (``band.check_scale``, ``check_factor``). Fewer than MIN_CHECKS say nothing about a
# context's error (one residual cannot tell a bad curve from one noisy run): the table alone
# decides. PRIOR_CHECKS: the weight of the tables' error scale against the checks, in residuals:
# weak, so a handful of a context's runs can overrule it both ways.
MIN_CHECKS = 2
PRIOR_CHECKS = 2.0
# Signals measured besides the groups' kinds: held-out contexts that lacked a property their
# member's job always had, or whose job their member knew only from other environments
# (extrapolation.signal_kinds; their tables in ExtrapolationTables.tables too).
SIGNAL_KINDS = ("missing", "environment")


# ---------------------------------------------------------------------- the typed calibration
# Each part reads itself from a model file's header in one ``from_dict``, which checks the values
# and raises ValueError naming the field (RuntimeModel.from_bytes turns it into a ModelFileError).


def _field(data: object, key: str, where: str) -> Any:
    if not isinstance(data, Mapping):
        raise ValueError(f"{where} is {type(data).__name__}, not a mapping")
    if key not in data:
        raise ValueError(f"{where}.{key} is missing")
    return data[key]


def _real(value: object, where: str, low: float = -math.inf, *, finite: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where} = {value!r} is not a number")
    number = float(value)
    if math.isnan(number) or (finite and not math.isfinite(number)) or number < low:
        raise ValueError(f"{where} = {value!r} is out of range")
    return number


def _count(value: object, where: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{where} = {value!r} is not a count >= {low}")
    return value


def _mre(value: object, where: str) -> float:
    """A mean relative error: a number ≥ 0, or NaN where nothing was measured."""
    if isinstance(value, float) and math.isnan(value):
        return value
    return _real(value, where, 0.0, finite=False)


def _per_k(values: object, where: str) -> list[Any]:
    if not isinstance(values, list) or len(values) != MAX_K + 1:
        found = f"{len(values)} entries" if isinstance(values, list) else type(values).__name__
        raise ValueError(f"{where} has {found}, not a list of {MAX_K + 1} (k = 0..{MAX_K})")
    return values


@dataclass(frozen=True)
class QuantileTables:
    """One k's residual tables for one group of contexts (all, or one environment's): per
    scale-out bucket (``BUCKETS``) the residuals' quantiles at ``QUANTILE_GRID`` and how many
    residuals there were. Empty where no residual was measured at this k (the calibration contexts
    ran at too few scale-outs to hold k + 1 out): the Gaussian band answers."""

    quantiles: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    counts: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, tables: Mapping[str, list[float]], counts: Mapping[str, int]) -> QuantileTables:
        """``_bucket_tables``' result (empty tables where it measured nothing)."""
        if not any(tables.values()):
            return cls()
        return cls({b: tuple(tables[b]) for b in BUCKETS}, {b: int(counts[b]) for b in BUCKETS})

    def to_dict(self) -> dict[str, Any]:
        return {"quantiles": {b: list(t) for b, t in self.quantiles.items()}, "counts": dict(self.counts)}

    @classmethod
    def from_dict(cls, data: object, where: str) -> QuantileTables:
        quantiles, counts = _field(data, "quantiles", where), _field(data, "counts", where)
        if not isinstance(quantiles, Mapping) or not isinstance(counts, Mapping):
            raise ValueError(f"{where}: quantiles and counts must be mappings of bucket to values")
        if not quantiles and not counts:
            return cls()
        if set(quantiles) != set(BUCKETS) or set(counts) != set(BUCKETS):
            raise ValueError(f"{where} has buckets {sorted(quantiles)}, not {sorted(BUCKETS)}")
        tables = {}
        for bucket in BUCKETS:
            values = quantiles[bucket]
            if not isinstance(values, list) or len(values) != len(QUANTILE_GRID):
                raise ValueError(f"{where}.quantiles.{bucket} is not a list of {len(QUANTILE_GRID)} numbers")
            tables[bucket] = tuple(_real(v, f"{where}.quantiles.{bucket}") for v in values)
        return cls(tables, {b: _count(counts[b], f"{where}.counts.{b}", 1) for b in BUCKETS})


@dataclass(frozen=True)
class BandTables:
    """The band's tables from one calibration pass (split conformal): per k = 0..MAX_K the tables
    of all out-of-fold contexts and of each environment with enough of them (group-conditional),
    over ``n`` contexts predicted out of fold; scale-outs up to ``smallest_max_scale_out`` take the
    smallest-scale-out bucket. ``validation_mre``: per k the out-of-fold mean relative error (NaN:
    no residual at that k)."""

    per_k: tuple[QuantileTables, ...]
    environments: Mapping[str, tuple[QuantileTables, ...]]
    n: int
    smallest_max_scale_out: float
    validation_mre: tuple[float, ...]
    # per job type, per k: the scales (below, above the prediction, each ≥ 1) its band multiplies
    # the pooled tables' negative and positive offsets by (``job_scales``); empty for a model of one
    # job type (and in model files written before them: 1)
    job_scales: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    # per job type, per side (below, above): (slope ≥ 0, centre) of the spread σ = exp(slope ×
    # (level − centre)) its contexts' residuals entered the tables divided by, the level being the
    # untuned prediction's mean log seconds over ``level_scale_outs`` (``level_spreads``); the
    # centre makes the calibration contexts' mean σ 1. Empty (the pooled tables): σ = 1
    level_spreads: Mapping[str, tuple[tuple[float, float], tuple[float, float]]] = field(default_factory=dict)
    level_scale_outs: tuple[float, ...] = ()
    # the same residuals each divided by its context's σ (with the spreads): a context inside the
    # training data reads them times its σ beside these, the wider per side (``band.table_offsets``).
    # None: no spread measured (a file written before it: the pooled band alone)
    levelled: BandTables | None = None

    def job_scale(self, job_type: str | None, k: int) -> tuple[float, float]:
        """What a band of ``job_type`` after k points multiplies the tables' negative and positive
        offsets by ((1, 1): a job type the tables hold no scales of)."""
        scales = self.job_scales.get(job_type) if job_type is not None else None
        return scales[min(k, MAX_K)] if scales else (1.0, 1.0)

    def level_spread(self, job_type: str | None, level: float | None) -> tuple[float, float]:
        """σ (below, above the prediction) of a context of ``job_type`` inside the training data
        whose untuned predicted level is ``level`` ((1, 1): no level, no spread of the job type)."""
        pair = self.level_spreads.get(job_type) if job_type is not None and level is not None else None
        return spread_at(pair, level) if pair and level is not None else (1.0, 1.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "per_k": [t.to_dict() for t in self.per_k],
            "environments": {env: [t.to_dict() for t in ts] for env, ts in self.environments.items()},
            "n": self.n,
            "smallest_max_scale_out": self.smallest_max_scale_out,
            "validation_mre": list(self.validation_mre),
            "job_scales": {job: [list(pair) for pair in s] for job, s in self.job_scales.items()},
            "level_spreads": {job: [list(side) for side in s] for job, s in self.level_spreads.items()},
            "level_scale_outs": list(self.level_scale_outs),
            "levelled": None if self.levelled is None else self.levelled.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: object, where: str) -> BandTables:
        environments = _field(data, "environments", where)
        if not isinstance(environments, Mapping):
            raise ValueError(f"{where}.environments is not a mapping of environment to tables")
        # (optional: a file written before per-job scales has none, and its bands stay as they were)
        job_scales = data.get("job_scales", {}) if isinstance(data, Mapping) else {}
        if not isinstance(job_scales, Mapping):
            raise ValueError(f"{where}.job_scales is not a mapping of job type to scales")
        # (optional too: a file written before the level spread has none, σ = 1)
        level_spreads, level_scale_outs = _level_spreads_of(data, where)
        levelled = data.get("levelled") if isinstance(data, Mapping) else None
        if levelled is not None:
            levelled = cls.from_dict(levelled, f"{where}.levelled")
            if not levelled.level_spreads or levelled.levelled is not None:
                raise ValueError(f"{where}.levelled holds no level_spreads, or tables levelled again")
        return cls(
            per_k=tuple(
                QuantileTables.from_dict(t, f"{where}.per_k[{k}]")
                for k, t in enumerate(_per_k(_field(data, "per_k", where), f"{where}.per_k"))
            ),
            environments={
                str(env): tuple(
                    QuantileTables.from_dict(t, f"{where}.environments.{env}[{k}]")
                    for k, t in enumerate(_per_k(ts, f"{where}.environments.{env}"))
                )
                for env, ts in environments.items()
            },
            n=_count(_field(data, "n", where), f"{where}.n", 1),
            smallest_max_scale_out=_real(
                _field(data, "smallest_max_scale_out", where), f"{where}.smallest_max_scale_out", 0.0
            ),
            validation_mre=tuple(
                _mre(v, f"{where}.validation_mre[{k}]")
                for k, v in enumerate(
                    _per_k(_field(data, "validation_mre", where), f"{where}.validation_mre")
                )
            ),
            job_scales={
                str(job): _side_scales(scales, f"{where}.job_scales.{job}")
                for job, scales in job_scales.items()
            },
            level_spreads=level_spreads,
            level_scale_outs=level_scale_outs,
            levelled=levelled,
        )


def spread_at(pair: tuple[tuple[float, float], tuple[float, float]], level: float) -> tuple[float, float]:
    """σ (below, above) at ``level`` of one job type's spread ((slope, centre) per side)."""
    (b_lo, c_lo), (b_hi, c_hi) = pair
    return (math.exp(b_lo * (level - c_lo)), math.exp(b_hi * (level - c_hi)))


def _level_spreads_of(
    data: object, where: str
) -> tuple[dict[str, tuple[tuple[float, float], tuple[float, float]]], tuple[float, ...]]:
    """``BandTables``' optional level spreads and the scale-outs their level is measured over."""
    spreads = data.get("level_spreads", {}) if isinstance(data, Mapping) else {}
    scale_outs = data.get("level_scale_outs", []) if isinstance(data, Mapping) else []
    if not isinstance(spreads, Mapping):
        raise ValueError(f"{where}.level_spreads = {spreads!r} is not a mapping of job type to spreads")
    if not isinstance(scale_outs, list):
        raise ValueError(f"{where}.level_scale_outs = {scale_outs!r} is not a list of scale-outs")
    if spreads and not scale_outs:
        raise ValueError(f"{where}.level_scale_outs = [] but level_spreads has {sorted(spreads)}")
    out = {}
    for job, sides in spreads.items():
        name = f"{where}.level_spreads.{job}"
        if not isinstance(sides, list) or len(sides) != 2:
            raise ValueError(f"{name} = {sides!r} is not [[slope, centre] below, [slope, centre] above]")
        pairs = []
        for s, side in enumerate(sides):
            if not isinstance(side, list) or len(side) != 2:
                raise ValueError(f"{name}[{s}] = {side!r} is not [slope, centre]")
            pairs.append((_real(side[0], f"{name}[{s}].slope", 0.0), _real(side[1], f"{name}[{s}].centre")))
        out[str(job)] = (pairs[0], pairs[1])
    return out, tuple(_real(n, f"{where}.level_scale_outs", 1e-9) for n in scale_outs)


def _side_scales(values: object, where: str) -> tuple[tuple[float, float], ...]:
    pairs = []
    for k, pair in enumerate(_per_k(values, where)):
        if not isinstance(pair, list) or len(pair) != 2:
            raise ValueError(f"{where}[{k}] = {pair!r} is not [below, above]")
        pairs.append((_real(pair[0], f"{where}[{k}]", 1e-6), _real(pair[1], f"{where}[{k}]", 1e-6)))
    return tuple(pairs)


def _times(a: tuple[float, float], b: Sequence[float]) -> tuple[float, float]:
    """Two per-side scales (below, above) multiplied side by side."""
    return (a[0] * float(b[0]), a[1] * float(b[1]))


def _by_side(offsets: np.ndarray, scales: tuple[float, float]) -> np.ndarray:
    """Offsets (log residuals, table bounds) below the prediction times the first scale, above it
    times the second."""
    return np.where(offsets < 0, offsets * scales[0], offsets * scales[1])


@dataclass(frozen=True)
class FineTuning:
    """Fine-tuning's settings as calibration chose them by out-of-fold error (empirical Bayes),
    with the search's scores. ``prior_covariance`` None: no out-of-fold data to estimate it from
    (a single training context; ``DEFAULT_PRIOR_SD``); ``residual_correction`` (amplitude,
    length), None: calibration had nothing to choose it on."""

    likelihood_sd: float
    prior_covariance: tuple[tuple[float, ...], ...] | None = None
    residual_correction: tuple[float, float] | None = None
    prior_scale: float | None = None
    # "prior scale/likelihood width" and "amplitude/length" → out-of-fold error
    prior_scores: Mapping[str, float] = field(default_factory=dict)
    residual_correction_scores: Mapping[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "likelihood_sd": self.likelihood_sd,
            "prior_covariance": None
            if self.prior_covariance is None
            else [list(r) for r in self.prior_covariance],
            "residual_correction": None
            if self.residual_correction is None
            else list(self.residual_correction),
            "prior_scale": self.prior_scale,
            "prior_scores": dict(self.prior_scores),
            "residual_correction_scores": dict(self.residual_correction_scores),
        }

    @classmethod
    def from_dict(cls, data: object, where: str) -> FineTuning:
        cov = _field(data, "prior_covariance", where)
        if cov is not None:
            if (
                not isinstance(cov, list)
                or not cov
                or any(not isinstance(r, list) or len(r) != len(cov) for r in cov)
            ):
                raise ValueError(f"{where}.prior_covariance is not a square matrix")
            cov = tuple(tuple(_real(v, f"{where}.prior_covariance") for v in row) for row in cov)
            if any(cov[i][i] < 0 for i in range(len(cov))):
                raise ValueError(f"{where}.prior_covariance has a negative variance")
        correction = _field(data, "residual_correction", where)
        if correction is not None:
            if not isinstance(correction, list) or len(correction) != 2:
                raise ValueError(f"{where}.residual_correction = {correction!r} is not [amplitude, length]")
            correction = (
                _real(correction[0], f"{where}.residual_correction.amplitude", 0.0),
                _real(correction[1], f"{where}.residual_correction.length", 0.0),
            )
        prior_scale = _field(data, "prior_scale", where)
        scores = {}
        for key in ("prior_scores", "residual_correction_scores"):
            values = _field(data, key, where)
            if not isinstance(values, Mapping):
                raise ValueError(f"{where}.{key} is not a mapping")
            scores[key] = {str(k): _real(v, f"{where}.{key}.{k}", finite=False) for k, v in values.items()}
        return cls(
            likelihood_sd=_real(_field(data, "likelihood_sd", where), f"{where}.likelihood_sd", 0.0),
            prior_covariance=cov,
            residual_correction=correction,
            prior_scale=None if prior_scale is None else _real(prior_scale, f"{where}.prior_scale", 0.0),
            **scores,
        )


@dataclass(frozen=True)
class Calibration:
    """What calibration measured, as fine-tuning and the band read it: the run noise (the
    Gaussian band's, where no table answers), fine-tuning's settings and the band's tables
    (None: no out-of-fold data).

    A model's own calibration also holds, where pre-training measured them, the calibration of a
    job type it never saw (``unseen_job``: measured on job types held out whole,
    ``unseen_job_type`` True, with its ``job_folds``) and the tables of contexts outside its
    training data (``extrapolation``). ``groups``: the tables hold the residuals of this many
    groups held out whole (a band source made by ``answering``; None: contexts)."""

    noise_sd: float
    fine_tuning: FineTuning
    tables: BandTables | None = None
    unseen_job: Calibration | None = None
    extrapolation: ExtrapolationTables | None = None
    unseen_job_type: bool = False
    job_folds: tuple[tuple[str, ...], ...] = ()
    groups: int | None = None

    def answering(self, tables: BandTables | None, groups: int | None = None) -> Calibration:
        """These settings and run noise with other tables: what a band reads (a band source)."""
        return Calibration(self.noise_sd, self.fine_tuning, tables, groups=groups)

    def to_dict(self) -> dict[str, Any]:
        return {
            "noise_sd": self.noise_sd,
            "fine_tuning": self.fine_tuning.to_dict(),
            "tables": None if self.tables is None else self.tables.to_dict(),
            "unseen_job": None if self.unseen_job is None else self.unseen_job.to_dict(),
            "extrapolation": None if self.extrapolation is None else self.extrapolation.to_dict(),
            "unseen_job_type": self.unseen_job_type,
            "job_folds": [list(fold) for fold in self.job_folds],
            "groups": self.groups,
        }

    @classmethod
    def from_dict(cls, data: object, where: str = "calibration") -> Calibration:
        """Raises ValueError naming the field where a value is missing or out of its domain."""
        tables, unseen, extrapolation = (
            _field(data, key, where) for key in ("tables", "unseen_job", "extrapolation")
        )
        flag, folds, groups = (_field(data, key, where) for key in ("unseen_job_type", "job_folds", "groups"))
        if not isinstance(flag, bool):
            raise ValueError(f"{where}.unseen_job_type = {flag!r} is not true or false")
        if not isinstance(folds, list) or not all(
            isinstance(f, list) and all(isinstance(j, str) for j in f) for f in folds
        ):
            raise ValueError(f"{where}.job_folds = {folds!r} is not a list of lists of job types")
        return cls(
            noise_sd=_real(_field(data, "noise_sd", where), f"{where}.noise_sd", 0.0),
            fine_tuning=FineTuning.from_dict(_field(data, "fine_tuning", where), f"{where}.fine_tuning"),
            tables=None if tables is None else BandTables.from_dict(tables, f"{where}.tables"),
            unseen_job=None if unseen is None else cls.from_dict(unseen, f"{where}.unseen_job"),
            extrapolation=None
            if extrapolation is None
            else ExtrapolationTables.from_dict(extrapolation, f"{where}.extrapolation"),
            unseen_job_type=flag,
            job_folds=tuple(tuple(f) for f in folds),
            groups=None if groups is None else _count(groups, f"{where}.groups", 1),
        )


@dataclass(frozen=True)
class ExtrapolationTables:
    """The band tables of contexts held out whole (the out-of-distribution pass, measured with the
    model's own fine-tuning settings), per kind of extrapolation (``EXTRAPOLATION_KINDS``: a value
    never seen, a number beyond a trained range), and the groups held out: (kind, contexts) each."""

    held_out: tuple[tuple[str, int], ...]
    tables: Mapping[str, BandTables] = field(default_factory=dict)
    # the median ``Extrapolation.distance_scale`` at which each kind's held-out contexts lay beyond
    # their member's training data (their unscaled residuals hold it), and the model's own
    # out-of-fold contexts' (extrapolation.DistanceWidening)
    held_out_distance: Mapping[str, float] = field(default_factory=dict)
    own_held_out_distance: float = 1.0

    def groups(self, kind: str) -> int | None:
        """How many groups of ``kind`` were held out whole (None: none)."""
        return sum(1 for held, _ in self.held_out if held == kind) or None

    def to_dict(self) -> dict[str, Any]:
        return {
            "held_out": [[kind, n] for kind, n in self.held_out],
            "tables": {kind: t.to_dict() for kind, t in self.tables.items()},
            "held_out_distance": dict(self.held_out_distance),
            "own_held_out_distance": self.own_held_out_distance,
        }

    @classmethod
    def from_dict(cls, data: object, where: str) -> ExtrapolationTables:
        held_out, tables = _field(data, "held_out", where), _field(data, "tables", where)
        if not isinstance(held_out, list) or not all(
            isinstance(h, list) and len(h) == 2 and h[0] in EXTRAPOLATION_KINDS for h in held_out
        ):
            raise ValueError(f"{where}.held_out = {held_out!r} is not a list of [kind, contexts]")
        if not isinstance(tables, Mapping) or not set(tables) <= {*EXTRAPOLATION_KINDS, *SIGNAL_KINDS}:
            raise ValueError(
                f"{where}.tables is not a mapping of "
                f"{' or '.join((*EXTRAPOLATION_KINDS, *SIGNAL_KINDS))} to tables"
            )
        distances = _field(data, "held_out_distance", where)
        if not isinstance(distances, Mapping) or set(distances) != set(tables):
            raise ValueError(
                f"{where}.held_out_distance = {distances!r} does not name one distance per table"
            )
        return cls(
            held_out=tuple((kind, _count(n, f"{where}.held_out.{kind}", 1)) for kind, n in held_out),
            tables={kind: BandTables.from_dict(t, f"{where}.tables.{kind}") for kind, t in tables.items()},
            held_out_distance={
                kind: _real(d, f"{where}.held_out_distance.{kind}", 1.0) for kind, d in distances.items()
            },
            own_held_out_distance=_real(
                _field(data, "own_held_out_distance", where), f"{where}.own_held_out_distance", 1.0
            ),
        )


def check_factor(prior: float, weight: float, count: int, rms: float) -> float:
    """The band's scale from a context's own checks: the posterior of its error scale (scaled
    inverse χ², ``weight`` pseudo-residuals at ``prior``) over the prior."""
    return math.sqrt((weight * prior**2 + count * rms**2) / ((weight + count) * prior**2))


def pick_points(scale_outs: np.ndarray, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Indices of one run at each of k distinct random scale-outs, and of the runs at the others."""
    distinct = np.unique(scale_outs)
    chosen = rng.choice(distinct, size=min(k, len(distinct)), replace=False) if k else np.array([])
    picked = np.array([rng.choice(np.flatnonzero(scale_outs == s)) for s in chosen], dtype=np.int64)
    test = np.flatnonzero(~np.isin(scale_outs, chosen))
    return picked, test


def quantile_table(residuals: np.ndarray) -> list[float]:
    return [float(v) for v in np.quantile(residuals, QUANTILE_GRID)] if len(residuals) else []


def _padded(
    groups: list[np.ndarray], basis: np.ndarray, log_y: np.ndarray, scale_out: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Batch the runs of each group: (basis [B,K,F], log_y, weight, scale-outs [B,K]); padding
    weighs 0."""
    kmax = max(len(g) for g in groups)
    b = np.ones((len(groups), kmax, basis.shape[1]))
    yy = np.zeros((len(groups), kmax))
    w = np.zeros((len(groups), kmax))
    ns = np.ones((len(groups), kmax))
    for i, g in enumerate(groups):
        b[i, : len(g)], yy[i, : len(g)], w[i, : len(g)], ns[i, : len(g)] = (
            basis[g],
            log_y[g],
            1.0,
            scale_out[g],
        )
    return b, yy, w, ns


def calibrate(
    h_members: np.ndarray,
    folds: list[np.ndarray],
    ctx_index: np.ndarray,
    basis: np.ndarray,
    log_y: np.ndarray,
    scale_out: np.ndarray,
    likelihood_sd: float,
    rng: np.random.Generator,
    deadline: float | None = None,
    environments: list[str | None] | None = None,
    settings: FineTuning | None = None,
    fold_scales: Sequence[np.ndarray] | None = None,
    other_priors: np.ndarray | None = None,
    *,
    noise_sd: float,
    jobs: Sequence[str | None] | None = None,
    h_tables: np.ndarray | None = None,
    twins: Sequence[tuple[np.ndarray, np.ndarray, float] | None] | None = None,
) -> Calibration:
    """Out-of-fold residuals after simulated fine-tuning with k = 0..MAX_K points.

    ``h_members`` [M, C, F]: every member's head output for every training context;
    runs: ``ctx_index``, ``basis``, ``log_y``, ``scale_out`` [N].

    Also picks the fine-tuning prior width and likelihood width by out-of-fold error
    (empirical Bayes on the training data itself, never on the data evaluated later):
    the likelihood must cover the basis' structural misfit, not only run noise, or a
    few points on a smooth-looking job drag the curve into interpolating them.

    ``environments`` [C] (the contexts' ``environment`` property): besides the pooled tables,
    each environment with enough out-of-fold contexts gets tables of its own contexts'
    residuals (group-conditional conformal). Pooled tables are dominated by the environment
    with most training runs; a context of a rarer one is as hard to predict as its own
    environment's contexts were, and its band says so.

    ``settings`` (a calibration's fine-tuning settings): fine-tune with these instead of choosing
    them, so the tables measure the fine-tuning the model will actually do (the
    out-of-distribution pass).
    ``fold_scales`` [per fold, one per context]: each out-of-fold context's residuals are divided
    by its scale (≥ 1) before they enter the tables (normalised conformal scores; a band
    multiplies the bounds back by its context's scale).
    ``other_priors`` [C]: each context's prior probability of "another environment" in
    fine-tuning (``finetuning.fit_delta_averaged``), as the model will fine-tune it (default: the
    model's default for a context it knows). ``noise_sd``: the run noise of the training data,
    what the band falls back on where no table measured the error (``gaussian_sd``).
    ``jobs`` [C] (the contexts' job types): with two or more, the tables keep each job type's
    scale relative to the pool, per side (``job_scales``, ≥ 1), which its band multiplies by.

    ``h_tables`` [M, C, F]: the heads whose out-of-fold residuals make the band's tables, where
    they are not ``h_members`` (``training.train_ensemble``'s ``cross_fitted``: each from an epoch
    its context did not choose). The fine-tuning settings are chosen on ``h_members`` as before (a
    choice by the ranking of errors, and what the model's predictions follow); the tables, a claim
    on the errors' size, read the heads no selection was fitted to, on the same draws of points.

    With ``jobs`` and no ``settings``: per job type, the spread of the untuned residuals against
    the contexts' predicted level (``level_spreads``, on the tables' heads); beside the pooled
    tables, ``BandTables.levelled`` holds the residuals each divided by its context's σ on its side,
    with the spreads, for the band.

    ``twins`` [C]: each context's known twin among the other training contexts (log scale-outs,
    mean log runtime, prior: ``finetuning.known_twin``), None for one without. The residual
    correction's choice and the tables then measure what fine-tuning does with it: its curve at the
    picked runs (beyond its scale-outs the untuned head's shape, as ``RuntimeModel._known_twin``)
    weighed in ``fit_context``, and at the test runs (beyond them the tuned head's shape) moved to
    the picked runs' level and mixed in (``finetuning.mix_twin``) as the prediction does. The prior
    and likelihood search does not see it (the settings the network's fine-tuning needs, which the
    twin's weight is judged under).

    No context out of fold: no tables, ``likelihood_sd`` as given (or ``settings``).
    """
    h_oof: list[np.ndarray] = []
    ctx_ids: list[int] = []
    divisors: list[float] = []
    for m, fold in enumerate(folds):
        if m >= h_members.shape[0] or len(fold) == 0:
            continue
        h_oof.append(
            h_members[m, fold] if h_tables is None else np.stack([h_members[m, fold], h_tables[m, fold]])
        )
        ctx_ids.extend(int(c) for c in fold)
        divisors.extend(
            np.ones(len(fold)) if fold_scales is None else np.asarray(fold_scales[m], dtype=float)
        )
    if not ctx_ids:
        return Calibration(noise_sd, settings or FineTuning(likelihood_sd))
    divisor = np.asarray(divisors)
    # (with ``h_tables``: [2, contexts, F], the settings' heads and the tables')
    h_pair = np.concatenate(h_oof, axis=-2).astype(np.float64)
    h_all = h_pair if h_tables is None else h_pair[0]
    h_tables_of = h_pair if h_tables is None else h_pair[1]
    run_ids = [np.flatnonzero(ctx_index == c) for c in ctx_ids]
    env_of = [None if environments is None else environments[c] for c in ctx_ids]
    prior_of = OTHER_ENVIRONMENT_PRIOR if other_priors is None else np.asarray(other_priors)[ctx_ids]
    small_max = SMALLEST_SCALE_OUT_FACTOR * float(scale_out.min())
    twin_of = [None] * len(ctx_ids) if twins is None else [twins[c] for c in ctx_ids]
    # (a basis row of one run at each scale-out: the basis depends on the scale-out only; a twin's
    # scale-outs are the training runs')
    row_at = {int(n): int(np.flatnonzero(scale_out == n)[0]) for n in np.unique(scale_out)}

    def twin_at(i: int, head: np.ndarray, runs: np.ndarray) -> np.ndarray:
        """Context ``i``'s twin's curve at ``runs``; beyond its scale-outs ``head``'s shape."""
        log_n, log_twin, _ = twin_of[i]  # type: ignore[misc]
        return twin_log_runtime(
            log_n,
            log_twin,
            scale_out[runs],
            lambda at: log_runtime(head, basis[[row_at[round(float(n))] for n in at]]),
            log_runtime(head, basis[runs]),
        )

    def residuals(
        k: int,
        cov: np.ndarray,
        lik_sd: float,
        draws: int,
        corrections: Sequence[tuple[float, float]] = ((0.0, 0.5),),
        heads: np.ndarray = h_all,
        gen: np.random.Generator = rng,
        robust: bool = True,
        check: tuple[float, float] | None = None,
        twinned: bool = False,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Out-of-fold log residuals at the test runs ([one row per residual correction] ×
        runs), the scale-outs they were at, the index (into ``ctx_ids``) of their context,
        their log distance to the nearest picked scale-out (of ``heads``, points drawn by
        ``gen``; ``robust``: ``fit_context``'s straggler weights) and, per residual, the RMS and
        count of its context's checks (leave-one-scale-out residuals above the smallest
        scale-outs, with ``check`` the residual correction (amplitude, length), as ``finetune``
        measures them). ``twinned``: contexts with a twin (``twins``) fine-tuned and predicted
        with it."""
        out: list[np.ndarray] = []
        at: list[np.ndarray] = []
        owner: list[np.ndarray] = []
        distance: list[np.ndarray] = []
        check_rms: list[np.ndarray] = []
        check_count: list[np.ndarray] = []
        for _ in range(draws):
            picks, tests = [], []
            for runs in run_ids:
                p, t = pick_points(scale_out[runs], k, gen)
                picks.append(runs[p])
                tests.append(runs[t])
            delta = np.zeros_like(heads)
            theta, share = np.zeros((len(heads), 4)), np.zeros(len(heads))
            run_weight = np.ones((len(heads), k))
            rms, count = np.zeros(len(heads)), np.zeros(len(heads), dtype=np.int64)
            twin_weight, twin_runs = np.zeros(len(heads)), None
            with_twin = twinned and k > 0 and any(t is not None for t in twin_of)
            if k:
                b, yy, w, ns = _padded(picks, basis, log_y, scale_out)
                twin_prior = np.full(len(heads), PARAMETRIC_PRIOR)
                if with_twin:
                    # (NaN: no twin, which ``fit_context`` gives no weight)
                    twin_runs = np.full(yy.shape, np.nan)
                    for i, p in enumerate(picks):
                        if twin_of[i] is not None:
                            twin_runs[i, : len(p)] = twin_at(i, heads[i], p)
                            twin_prior[i] = twin_of[i][2]  # type: ignore[index]
                fit = fit_context(
                    heads[:, None, :],
                    b,
                    ns,
                    yy,
                    w,
                    noise_sd=lik_sd,
                    learned_cov=cov,
                    other_prior=prior_of,
                    robust=robust,
                    check_above=small_max,
                    correction=check,
                    twin=twin_runs,
                    twin_prior=twin_prior,
                )
                delta, theta, share = fit.delta[:, 0], fit.theta, fit.parametric_weight
                run_weight = fit.run_weight
                rms, count = fit.check_rms, fit.check_count
                if with_twin and fit.twin_weight is not None:
                    twin_weight = fit.twin_weight
            hh = heads + delta
            for i, t in enumerate(tests):
                if len(t) == 0:
                    continue
                p = picks[i]
                at_picks = (
                    tuned_log_runtime(
                        log_runtime(hh[i], basis[p]), scale_out[p], theta[i], share[i], actual=log_y[p]
                    )[0]
                    * run_weight[i, : len(p)]
                )
                rows = tuned_log_runtime(
                    log_runtime(hh[i], basis[t]),
                    scale_out[t],
                    theta[i],
                    share[i],
                    runs=(scale_out[p], at_picks),
                    corrections=[(amplitude * lik_sd, length) for amplitude, length in corrections],
                    noise_sd=lik_sd,
                    actual=log_y[t],
                )
                if twin_weight[i] > 0:
                    # (as ``RuntimeModel.finetune`` and ``_model_log_curves``: the twin at the
                    # level of the runs the fit used, mixed into the corrected curve. ``rows`` are
                    # what the runs lie above that curve: the curves are mixed, as the prediction
                    # mixes them, and the runs' distance above the mix is the residual)
                    used = run_weight[i, : len(p)] > 0
                    level = run_level(twin_runs[i, None, : len(p)], log_y[p][None], used[None])[0]  # type: ignore[index]
                    rows = log_y[t] - mix_twin(log_y[t] - rows, twin_at(i, hh[i], t) + level, twin_weight[i])
                out.append(rows)
                at.append(scale_out[t])
                owner.append(np.full(len(t), i))
                distance.append(log_distance(scale_out[t], scale_out[p]))
                check_rms.append(np.full(len(t), rms[i]))
                check_count.append(np.full(len(t), count[i]))
        if not out:
            return (
                np.zeros((len(corrections), 0)),
                np.array([]),
                np.array([], dtype=np.int64),
                np.array([]),
                np.array([]),
                np.array([], dtype=np.int64),
            )
        return (
            np.concatenate(out, axis=1),
            np.concatenate(at),
            np.concatenate(owner),
            np.concatenate(distance),
            np.concatenate(check_rms),
            np.concatenate(check_count),
        )

    # Empirical Bayes prior: the corrections each out-of-fold context needs when all of
    # its runs are known, fitted under a weak prior.
    if settings is not None:
        tables = _fixed_tables(settings, residuals, env_of, scale_out, len(ctx_ids), divisor, deadline)
        return Calibration(noise_sd, settings, tables)
    b, yy, w, _ = _padded(run_ids, basis, log_y, scale_out)
    full = fit_delta(h_all, b, yy, w, noise_sd=likelihood_sd, prior_precision=np.eye(h_all.shape[1]))
    cov = empirical_prior_covariance(full)
    scores: dict[tuple[float, float], float] = {}
    # the middle of the grid first: if the time budget ends the search early, it has the safest guess
    grid = sorted(
        ((p, f) for p in PRIOR_SCALES for f in LIKELIHOOD_FACTORS),
        key=lambda pf: (abs(np.log(pf[0])) + abs(np.log(pf[1] / 2.0)), pf),
    )
    for scale, factor in grid:
        if scores and deadline is not None and time.monotonic() > deadline:
            break
        lik = likelihood_sd * factor
        scores[(scale, lik)] = _out_of_fold_error(
            [residuals(k, cov * scale**2, lik, 1, robust=False)[0][0] for k in (1, 2, 3, 5)]
        )
    prior_scale, lik_sd = min(scores, key=lambda p: (scores[p], p))
    prior_cov = cov * prior_scale**2
    draws = 1 if deadline is not None and time.monotonic() > deadline else _CALIBRATION_DRAWS
    # (the tables' heads draw the same points: their generator's copy, the model's one left as is)
    twin = copy.deepcopy(rng)
    # The settings are chosen with every run at full weight, the tables measure the straggler-
    # weighted fit the model does. With the weights in the choice, a training context whose
    # out-of-fold network misses its shape has those misses doubted as stragglers, their share
    # of the residual correction shrinks, and the choice makes up for it with a stronger
    # correction, which a context whose runs all agree then gets in full (C3O leave-machine-type-
    # out kmeans: 4 × the amplitude, 2 × the length; docs/model.md, session 23).
    per_k = [
        residuals(k, prior_cov, lik_sd, draws, CORRECTIONS, robust=False, twinned=True)
        for k in range(MAX_K + 1)
    ]
    # the residual correction that predicts the out-of-fold runs best, as the prior was chosen
    errors = [_out_of_fold_error([rows[g] for rows, *_ in per_k[1:]]) for g in range(len(CORRECTIONS))]
    best = min(range(len(CORRECTIONS)), key=lambda g: (errors[g], g))
    amplitude, length = CORRECTIONS[best]
    fine_tuning = FineTuning(
        likelihood_sd=lik_sd,
        prior_covariance=tuple(tuple(row) for row in prior_cov.tolist()),
        residual_correction=(amplitude * lik_sd, length),
        prior_scale=prior_scale,
        prior_scores={f"{p}/{lik:.4f}": v for (p, lik), v in scores.items()},
        residual_correction_scores={f"{a}/{ln}": e for (a, ln), e in zip(CORRECTIONS, errors, strict=True)},
    )
    # (the checks as fine-tuning measures them: with the chosen residual correction, if any)
    check = (amplitude * lik_sd, length) if amplitude > 0 else None
    measured = [
        residuals(
            k, prior_cov, lik_sd, draws, (CORRECTIONS[best],), h_tables_of, twin, check=check, twinned=True
        )
        for k in range(MAX_K + 1)
    ]
    chosen = [(rows[0], at, owner, d) for rows, at, owner, d, _, _ in measured]
    checks = [(rms, count) for *_, rms, count in measured]
    job_of = None if jobs is None else [jobs[c] for c in ctx_ids]
    spreads: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {}
    sigma = None
    level_grid = np.unique(scale_out).astype(np.float64)
    if job_of is not None:
        # (the basis rows of one run at each scale-out: the basis depends on the scale-out only)
        grid_basis = basis[[int(np.flatnonzero(scale_out == n)[0]) for n in level_grid]]
        level = untuned_level(h_tables_of, grid_basis)
        untuned = [log_y[r] - log_runtime(h_tables_of[i], basis[r]) for i, r in enumerate(run_ids)]
        spreads = level_spreads(level, untuned, job_of)
        if spreads:
            sigma = np.array(
                [
                    spread_at(spreads[str(j)], float(x))
                    if j is not None and str(j) in spreads
                    else (1.0, 1.0)
                    for j, x in zip(job_of, level, strict=True)
                ]
            )
    tables = check_normalised_tables(chosen, checks, env_of, job_of, small_max, len(ctx_ids), noise_sd)
    if spreads:
        levelled = check_normalised_tables(
            chosen, checks, env_of, job_of, small_max, len(ctx_ids), noise_sd, spread=sigma
        )
        tables = replace(
            tables,
            levelled=replace(levelled, level_spreads=spreads, level_scale_outs=tuple(level_grid.tolist())),
        )
    return Calibration(noise_sd, fine_tuning, tables)


def untuned_level(heads: np.ndarray, grid_basis: np.ndarray) -> np.ndarray:
    """Each head's curve's level ([..., F] → [...]): its mean log runtime over the scale-outs of
    ``grid_basis`` [G, F]."""
    return log_runtime(heads[..., None, :], grid_basis).mean(axis=-1)


def level_spreads(
    level: np.ndarray, residuals: Sequence[np.ndarray], job_of: Sequence[str | None]
) -> dict[str, tuple[tuple[float, float], tuple[float, float]]]:
    """Per job type, per side of the prediction (below, above): (slope, centre) of a spread σ =
    exp(slope × (level − centre)) of its contexts' untuned log ``residuals`` against their
    predicted ``level``. The slope is the least-squares one of the log of each context's mean
    residual on that side (max(−r, 0), max(r, 0); at least ``LEVEL_SPREAD_FLOOR`` × the job type's
    mean) on its centred level, contexts counting, not runs, shrunk towards 0 by n / (n +
    ``LEVEL_SPREAD_PRIOR_CONTEXTS``) and never below 0; a job type of fewer than
    ``MIN_JOB_CONTEXTS`` contexts takes the pooled slope (every job type's contexts, each centred
    on its own). The centre makes the job type's contexts' mean σ 1: the tables keep the pool's
    width on average, and move it towards the contexts whose errors were larger. No slope above
    0 on either side: no entry (σ = 1)."""
    jobs = np.array(["" if j is None else str(j) for j in job_of], dtype=object)
    names = sorted(set(jobs.tolist()))
    side_means = np.array(
        [[float(np.maximum(-r, 0.0).mean()), float(np.maximum(r, 0.0).mean())] for r in residuals]
    )
    x = np.zeros(len(level))
    y = np.zeros((len(level), 2))
    for job in names:
        mine = jobs == job
        x[mine] = level[mine] - level[mine].mean()
        floor = np.maximum(LEVEL_SPREAD_FLOOR * side_means[mine].mean(axis=0), 1e-12)
        logs = np.log(np.maximum(side_means[mine], floor))
        y[mine] = logs - logs.mean(axis=0)

    def slopes(mine: np.ndarray) -> np.ndarray:
        n = int(mine.sum())
        spread = float(x[mine] @ x[mine])
        if spread <= 0:
            return np.zeros(2)
        return np.maximum(x[mine] @ y[mine] / spread * n / (n + LEVEL_SPREAD_PRIOR_CONTEXTS), 0.0)

    pooled = slopes(np.ones(len(level), dtype=bool))
    out = {}
    for job in names:
        mine = jobs == job
        b = slopes(mine) if int(mine.sum()) >= MIN_JOB_CONTEXTS else pooled
        if not (b > 0).any() or not job:
            continue
        centres = []
        for side in (0, 1):
            if b[side] <= 0:
                centres.append(0.0)
                continue
            m = float(level[mine].mean())
            # mean over the contexts of exp(b (level − centre)) = 1
            centres.append(m + float(np.log(np.mean(np.exp(b[side] * (level[mine] - m))))) / float(b[side]))
        out[job] = ((float(b[0]), centres[0]), (float(b[1]), centres[1]))
    return out


def _scores(r: np.ndarray, at: np.ndarray, distance: np.ndarray, small_max: float) -> np.ndarray:
    """Residuals in the units of their bucket's table: far ones divided by ``far_scale``."""
    return np.where(at <= small_max, r, r / far_scale(distance))


def job_scales(
    per_k: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    job_of: Sequence[str | None] | None,
    small_max: float,
) -> dict[str, tuple[tuple[float, float], ...]]:
    """Per job type, per k (residuals, their scale-outs, owners, distances), per side of the
    prediction: the mean of its scores' part on that side (max(−score, 0), max(score, 0)) over the
    pool's, shrunk towards 1 in log by its out-of-fold contexts n as n / (n +
    ``JOB_SCALE_PRIOR_CONTEXTS``), and never below 1; 1 below ``MIN_JOB_CONTEXTS``. Per side,
    because a job type the model is biased on misses on one side only; a mean rather than a root
    mean square, so that one context's outliers weigh less. Empty with fewer than two job types:
    the pool is the job type."""
    if job_of is None or len({j for j in job_of if j is not None}) < 2:
        return {}
    names = sorted({j for j in job_of if j is not None})
    out: dict[str, list[tuple[float, float]]] = {job: [] for job in names}
    for r, at, owner, distance in per_k:
        score = _scores(r, at, distance, small_max)
        sides = (np.maximum(-score, 0.0), np.maximum(score, 0.0))
        pooled = [float(side.mean()) if len(side) else 0.0 for side in sides]
        owner_job = np.array([job_of[i] for i in owner], dtype=object)
        for job in names:
            mine = owner_job == job
            n = len(set(owner[mine].tolist()))
            shrink = n / (n + JOB_SCALE_PRIOR_CONTEXTS)
            pair = []
            for side, pool in zip(sides, pooled, strict=True):
                if n < MIN_JOB_CONTEXTS or pool <= 0:
                    pair.append(1.0)
                    continue
                ratio = max(float(side[mine].mean()) / pool, 1.0)
                pair.append(float(np.exp(shrink * np.log(ratio))))
            out[job].append((pair[0], pair[1]))
    return {job: tuple(s) for job, s in out.items()}


def _tables_per_k(
    per_k: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    env_of: Sequence[str | None],
    small_max: float,
    n_contexts: int,
    divisor: np.ndarray | None = None,
    job_scales: Mapping[str, tuple[tuple[float, float], ...]] | None = None,
    per_residual: Sequence[np.ndarray] | None = None,
) -> BandTables:
    """Per k (residuals, their scale-outs, owners, distances): pooled and per-environment
    bucket tables, their counts and the mean relative error; residuals divided by their owner's
    ``divisor`` where given, and by their own (per k, per residual: ``per_residual``).
    ``job_scales``: kept with the tables for the band (``job_scale``)."""
    pooled: list[QuantileTables] = []
    by_env: dict[str, list[QuantileTables]] = {}
    mre: list[float] = []
    env_names = _environment_names(env_of)
    for k, (raw, at, owner, distance) in enumerate(per_k):
        r = raw if divisor is None else raw / divisor[owner]
        r = r if per_residual is None else r / per_residual[k]
        small = at <= small_max
        tables, counts = _bucket_tables(r, small, distance)
        pooled.append(QuantileTables.of(tables, counts))
        for env in env_names:
            mine = np.array([env_of[i] == env for i in owner], dtype=bool)
            t, c = _bucket_tables(r[mine], small[mine], distance[mine], fallback=(tables, counts))
            by_env.setdefault(env, []).append(QuantileTables.of(t, c))
        mre.append(float(np.mean(np.abs(np.expm1(-raw)))) if len(raw) else math.nan)
    return BandTables(
        per_k=tuple(pooled),
        environments={env: tuple(ts) for env, ts in by_env.items()},
        n=n_contexts,
        smallest_max_scale_out=small_max,
        validation_mre=tuple(mre),
        job_scales=dict(job_scales or {}),
    )


def _environment_names(env_of: Sequence[str | None]) -> list[str]:
    """The environments with tables of their own (``MIN_ENVIRONMENT_CONTEXTS`` contexts or more)."""
    return sorted(e for e, n in Counter(env_of).items() if e is not None and n >= MIN_ENVIRONMENT_CONTEXTS)


def check_normalised_tables(
    per_k: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    checks: Sequence[tuple[np.ndarray, np.ndarray]],
    env_of: Sequence[str | None],
    job_of: Sequence[str | None] | None,
    small_max: float,
    n_contexts: int,
    noise_sd: float,
    spread: np.ndarray | None = None,
) -> BandTables:
    """``_tables_per_k`` (with ``job_scales``) of the residuals as the band will read them: a
    fine-tuned context's band is its k tables' offsets times its checks' factor (``check_factor``
    of the (k − 1) tables' scale, ``table_scale``, and its ``checks`` (RMS, count) per residual;
    above the smallest scale-outs, from ``MIN_CHECKS`` on), so each residual there enters the k
    tables divided by the factor its context's checks gave (normalised conformal scores). The
    tables then measure the band the model gives, rescaling included: a table of raw residuals
    covers q of them, but the factor narrows the band of a context whose checks happen to be small
    and widens that of one whose checks are large (a straggler among its k runs lifts its whole
    curve), and that pair of bands covered less, or more, than q (docs/model.md, session 24).
    Built k by k: the factor at k reads the (k − 1) tables built before it, as the band does.
    ``spread`` [contexts, 2]: each context's level spread σ (below, above: ``level_spreads``); a
    residual enters divided by its side's σ too, and the prior its checks update is σ times the
    tables' scale, as the band's is."""
    gaussian = gaussian_sd(Calibration(noise_sd, FineTuning(1.0)))
    names = set(_environment_names(env_of))
    sigma = np.ones((n_contexts, 2)) if spread is None else np.asarray(spread, dtype=np.float64)
    divisors: list[np.ndarray] = []
    previous: BandTables | None = None
    for (r, at, owner, distance), (rms, count) in zip(per_k, checks, strict=True):
        divisor = np.where(r < 0, sigma[owner, 0], sigma[owner, 1])
        if previous is not None:
            # the prior each context's band would read: its environment's tables (or the pooled
            # ones) of k − 1 points, times its job type's scales and its level spread
            prior = np.array(
                [
                    _spread(
                        previous.environments[env_of[i]][0] if env_of[i] in names else previous.per_k[0],
                        _times(previous.job_scale(None if job_of is None else job_of[i], 0), sigma[i]),
                        gaussian,
                    )
                    for i in range(n_contexts)
                ]
            )
            for j in np.flatnonzero((count >= MIN_CHECKS) & (at > small_max)):
                p = float(prior[owner[j]])
                if 0 < p < math.inf:
                    divisor[j] *= check_factor(p, PRIOR_CHECKS, int(count[j]), float(rms[j]))
        divisors.append(divisor)
        normed = [(r / divisor, at, owner, distance)]
        previous = _tables_per_k(
            normed, env_of, small_max, n_contexts, job_scales=job_scales(normed, job_of, small_max)
        )
    scores = [(r / div, at, owner, d) for (r, at, owner, d), div in zip(per_k, divisors, strict=True)]
    return _tables_per_k(
        per_k,
        env_of,
        small_max,
        n_contexts,
        job_scales=job_scales(scores, job_of, small_max),
        per_residual=divisors,
    )


def _fixed_tables(
    settings: FineTuning,
    residuals: Any,
    env_of: Sequence[str | None],
    scale_out: np.ndarray,
    n_contexts: int,
    divisor: np.ndarray,
    deadline: float | None,
) -> BandTables:
    """``calibrate``'s tables for fine-tuning with given settings (no search)."""
    lik_sd = float(settings.likelihood_sd)
    prior_cov = np.asarray(settings.prior_covariance, dtype=np.float64)
    amplitude, length = settings.residual_correction or (0.0, 0.5)
    correction = ((float(amplitude) / lik_sd, float(length)),)
    draws = 1 if deadline is not None and time.monotonic() > deadline else _CALIBRATION_DRAWS
    small_max = SMALLEST_SCALE_OUT_FACTOR * float(scale_out.min())
    per_k = [residuals(k, prior_cov, lik_sd, draws, correction) for k in range(MAX_K + 1)]
    return _tables_per_k(
        [(rows[0], at, owner, d) for rows, at, owner, d, _, _ in per_k],
        env_of,
        small_max,
        n_contexts,
        divisor,
    )


def _out_of_fold_error(per_k: Sequence[np.ndarray]) -> float:
    """What the empirical-Bayes choices minimise: the mean over k of the mean relative error of
    the out-of-fold log residuals. A k no context has enough scale-outs for gives no residuals:
    it cannot vote."""
    errors = [float(np.mean(np.abs(np.expm1(r)))) for r in per_k if len(r)]
    return float(np.mean(errors)) if errors else 0.0


def log_distance(scale_outs: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """Per scale-out: |log n − log m| to the nearest ``observed`` scale-out m (none observed: inf)."""
    if len(observed) == 0:
        return np.full(len(scale_outs), np.inf)
    ratio = (
        np.log(np.asarray(scale_outs, dtype=np.float64))[:, None]
        - np.log(np.asarray(observed, dtype=np.float64))[None, :]
    )
    return np.abs(ratio).min(axis=1)


def is_near(distance: np.ndarray) -> np.ndarray:
    return distance <= math.log(NEAR_FACTOR) + 1e-9


def far_scale(distance: np.ndarray) -> np.ndarray:
    """What a far residual is divided by in the far table: its log distance in units of
    log NEAR_FACTOR (≥ 1; none observed, as at k = 0: 1)."""
    d = np.where(np.isfinite(distance), distance, 0.0)
    return np.maximum(d / math.log(NEAR_FACTOR), 1.0)


def _bucket_tables(
    r: np.ndarray,
    small: np.ndarray,
    distance: np.ndarray,
    fallback: tuple[dict[str, list[float]], dict[str, int]] | None = None,
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Quantile tables and residual counts of the smallest scale-outs, the others, and the others
    split into near / far from the tuned scale-outs (the far ones divided by ``far_scale``); a
    bucket with too few residuals takes ``fallback``'s bucket (or the table of all residuals, in the
    bucket's units)."""
    near = is_near(distance)
    scaled = r / far_scale(distance)
    tables, counts = {}, {}
    for bucket, sel, values in (
        ("smallest", small, r),
        ("others", ~small, r),
        ("near", ~small & near, r),
        ("far", ~small & ~near, scaled),
    ):
        if sel.sum() >= MIN_BUCKET_RESIDUALS:
            tables[bucket], counts[bucket] = quantile_table(values[sel]), int(sel.sum())
        elif fallback is not None:
            tables[bucket], counts[bucket] = fallback[0][bucket], fallback[1][bucket]
        else:
            tables[bucket], counts[bucket] = quantile_table(values), len(values)
    return tables, counts


def _tables_for_environment(calibration: Calibration, environment: str | None) -> tuple[QuantileTables, ...]:
    """The tables (per k) that answer for a context: its environment's where calibration had
    enough of its contexts, the pooled ones otherwise (none: no out-of-fold data)."""
    tables = calibration.tables
    if tables is None:
        return ()
    own = tables.environments.get(environment) if environment is not None else None
    return own or tables.per_k


def answering_k(calibration: Calibration, k: int, environment: str | None = None) -> int:
    """The k whose tables answer for a model tuned on k points: k (MAX_K beyond it), or, where
    no residual was measured at k (the calibration contexts ran at too few scale-outs to hold
    k + 1 out: a scale-out protocol's, cut to four), the largest k below it that has tables, as
    MAX_K's answer for more points. A run more than calibration could hold out leaves the fit
    about as good, and the Gaussian, wider than any table on purpose, measured nothing: past
    the edges it made that k's band 2.3-5.2× as wide in log as the k before (docs/model.md,
    "The last k's band past the edges")."""
    source = _tables_for_environment(calibration, environment)
    top = min(k, MAX_K)
    if not source:
        return top
    return next((j for j in range(top, -1, -1) if source[j].quantiles), top)


def _tables(calibration: Calibration, k: int, environment: str | None = None) -> QuantileTables:
    """The residual quantile tables (per scale-out bucket) for a model tuned on k points
    (``answering_k``'s), and how many residuals each holds. Empty where no residual was
    measured at any k up to it: the Gaussian band answers."""
    source = _tables_for_environment(calibration, environment)
    return source[answering_k(calibration, k, environment)] if source else QuantileTables()


def gaussian_sd(calibration: Calibration) -> float:
    """The log-space sd of the band where no table measured the error (a single training context,
    too few contexts held out whole): run noise and twice the default prior width, wider than any
    calibrated band on purpose."""
    return math.hypot(float(calibration.noise_sd), 2 * DEFAULT_PRIOR_SD)


def residual_quantiles(
    calibration: Calibration,
    k: int,
    confidence: float,
    scale_outs: np.ndarray,
    environment: str | None = None,
    observed: Sequence[int] = (),
    groups: int | None = None,
    job_type: str | None = None,
    spread: tuple[float, float] = (1.0, 1.0),
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper log-residual quantiles per scale-out, for a model tuned on k points at the
    ``observed`` scale-outs (a context of ``environment`` and ``job_type``). ``groups``: the tables
    hold the residuals of this many groups held out whole (``calibration.groups`` where not
    given). ``spread``: the context's level spread (below, above; ``BandTables.level_spread``)."""
    groups = groups if groups is not None else calibration.groups
    tables = _tables(calibration, k, environment)
    if calibration.tables is None or not tables.quantiles:
        sd = gaussian_sd(calibration)
        z = NormalDist().inv_cdf(confidence)
        return np.full(len(scale_outs), -z * sd), np.full(len(scale_outs), z * sd)
    bounds = {}
    for bucket, t in tables.quantiles.items():
        # finite-sample conformal correction over the table's residuals: level ⌈(n+1)q⌉/n,
        # clipped to the table's range. (Counting contexts instead, ~20 per job type, turned a
        # 90 % band into a 95 % one: measured 95.5 % coverage on C3O's held-out runs.)
        n = max(tables.counts[bucket], 1)
        if groups and k == 0:
            # untuned, the residuals of one held-out group share its shift: they count as one
            # (group-conformal); a context's own runs re-fit its level, what is left varies per run
            n = min(n, groups)
        level = min(1.0, math.ceil((n + 1) * confidence) / n)
        bounds[bucket] = (
            float(np.interp(1.0 - level, QUANTILE_GRID, t)),
            float(np.interp(level, QUANTILE_GRID, t)),
        )
    small = scale_outs <= calibration.tables.smallest_max_scale_out
    lo = np.where(small, bounds["smallest"][0], bounds["others"][0])
    hi = np.where(small, bounds["smallest"][1], bounds["others"][1])
    if len(observed):
        distance = log_distance(scale_outs, np.asarray(observed))
        near = is_near(distance)
        scale = far_scale(distance)
        lo = np.where(small, lo, np.where(near, bounds["near"][0], bounds["far"][0] * scale))
        hi = np.where(small, hi, np.where(near, bounds["near"][1], bounds["far"][1] * scale))
    job = _times(calibration.tables.job_scale(job_type, answering_k(calibration, k, environment)), spread)
    return _by_side(lo, job), _by_side(hi, job)


def widened(lo: np.ndarray, hi: np.ndarray, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """A band's log offsets (lower, upper) for a context outside the training data: symmetric
    about the prediction, each side as far out as the farther of the two, times ``scale`` ≥ 1
    (the distance widening; normalised conformal scores multiplied back).

    The out-of-distribution tables hold residuals of a few groups held out whole (two or three
    machine types, the two ends of a range); each group's residuals share a shift, so a table's
    asymmetry is the direction those few groups happened to be off in. A new group's direction is
    not theirs (C3O sort, one machine type held out, the others' tables: the new one's runs lay
    below a lower bound that the tables put near the prediction, 32 % inside a 90 % band): only
    the size of the error carries over, on both sides. The result always contains the band it
    was given."""
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    size = np.maximum(np.maximum(-lo, hi), 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        # (an infinite scale of a zero offset: no growth rather than NaN)
        grown = np.where(size > 0, size * scale, 0.0)
    return -grown, grown


def max_confidence(calibration: Calibration, k: int, environment: str | None = None) -> float:
    """The highest confidence the k-point tables can honour: with n residuals the conformal level
    ⌈(n+1)q⌉/n passes 1 above q = n/(n+1), and every q beyond gives the same band (the largest
    residual). The smallest bucket decides; no table (the Gaussian band): 1."""
    tables = _tables(calibration, k, environment)
    if not tables.quantiles:
        return 1.0
    n = min(max(tables.counts[bucket], 1) for bucket in tables.quantiles)
    return n / (n + 1)


def table_scale(
    calibration: Calibration,
    k: int,
    environment: str | None = None,
    job_type: str | None = None,
    spread: tuple[float, float] = (1.0, 1.0),
) -> float:
    """A robust standard deviation of the k-point residual table above the smallest scale-outs:
    half the distance between its 16th and 84th percentiles (times ``job_type``'s scale and the
    context's level ``spread``, per side); without any table, the sd of the Gaussian band that
    answers then (``gaussian_sd``)."""
    job = (
        (1.0, 1.0)
        if calibration.tables is None
        else _times(calibration.tables.job_scale(job_type, answering_k(calibration, k, environment)), spread)
    )
    return _spread(_tables(calibration, k, environment), job, gaussian_sd(calibration))


def _spread(tables: QuantileTables, job: tuple[float, float], gaussian: float) -> float:
    """``table_scale`` of one k's tables: half the 16th-84th percentile distance of the "others"
    bucket times ``job`` (per side); ``gaussian`` where there is no table, 0 without the bucket."""
    if not tables.quantiles:
        return gaussian
    table = tables.quantiles.get("others")
    if not table:
        return 0.0
    low, high = _by_side(np.interp([0.16, 0.84], QUANTILE_GRID, table), job)
    return float(high - low) / 2


def student_t_quantile(q: float, dof: float) -> float:
    """The ``q`` quantile (0.5 ≤ q < 1) of Student's t with ``dof`` ≥ 1 degrees of freedom, real
    too (scipy.special costs ~1 s to import, and the band is on ``size()``'s path); relative error
    < 1e-4 up to q = 0.9999. Up to 30 degrees: with x = √dof · tan θ the density in θ is
    ∝ cos^(dof−1) θ, bounded on [0, π/2], integrated by the trapezoid rule on a fine grid and
    inverted by interpolation; beyond, the Cornish-Fisher expansion in 1/dof (the grid would
    miss the narrowing peak)."""
    if dof > 30:
        z = NormalDist().inv_cdf(q)
        terms = (
            (z**3 + z) / 4,
            (5 * z**5 + 16 * z**3 + 3 * z) / 96,
            (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384,
            (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160,
        )
        return z + sum(term / dof ** (i + 1) for i, term in enumerate(terms))
    theta = np.linspace(0.0, math.pi / 2, 4097)
    density = np.cos(theta) ** (dof - 1.0)
    cumulative = np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) / 2)])
    angle = float(np.interp(2 * q - 1, cumulative / cumulative[-1], theta))
    return math.sqrt(dof) * math.tan(angle)


def predictive_inflation(dof: float, confidence: float) -> float:
    """How much wider a one-sided ``confidence`` quantile is when the error scale is estimated
    from ``dof`` residuals than when it is known: Student's t's quantile over the normal's
    (the predictive distribution of a scaled-inverse-χ² posterior). 1 below the median."""
    if confidence <= 0.5:
        return 1.0
    return student_t_quantile(confidence, dof) / NormalDist().inv_cdf(confidence)
