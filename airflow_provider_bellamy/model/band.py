"""The prediction band and its composition, step by step (``RuntimeModel.band`` gathers the model's
state and calls ``compose_band``; docs/model.md, "Uncertainty" and "Contexts unlike the training data").

The band is the prediction's curve(s) in log seconds plus the log offsets of the calibration tables
that answer for the context (``band_sources``, ``quantiles``), widened past the edges of the known
scale-outs (``past_edge_offsets``), spanning the guesses no run compared (``spanned_curves``), widened
where a context from elsewhere has too few runs to tell (``edge_miss``, ``own_miss``,
``missing_widening``) and narrowed to the run-to-run noise where it has run (``at_runs_narrowing``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from airflow_provider_bellamy.model.calibration import (
    DEFAULT_PRIOR_SD,
    EXTRAPOLATION_KINDS,
    MAX_K,
    MIN_CHECKS,
    NEAR_FACTOR,
    PRIOR_CHECKS,
    SIGNAL_KINDS,
    Calibration,
    ExtrapolationTables,
    check_factor,
    far_scale,
    log_distance,
    max_confidence,
    predictive_inflation,
    residual_quantiles,
    student_t_quantile,
    table_scale,
    widened,
)
from airflow_provider_bellamy.model.edges import (
    OVERHEAD_POINTS,
    Continuation,
    edge_growth,
    overhead_log_runtime,
)
from airflow_provider_bellamy.model.extrapolation import (
    MIN_SPAN_DECADES,
    SIGNAL_WORDS,
    DistanceWidening,
    Extrapolation,
    guessed_shape,
    never_varied,
    signal_kinds,
    signals,
)
from airflow_provider_bellamy.model.features import scale_out_array
from airflow_provider_bellamy.model.finetuning import job_distances

if TYPE_CHECKING:
    from airflow_provider_bellamy.model.runtime_model import RuntimeModel

# Fewer held-out contexts than this cannot say how far off a context from elsewhere is (two
# training contexts, one per machine type, are each other's only out-of-distribution evidence).
MIN_HELD_OUT_CONTEXTS = 5


@dataclass(frozen=True)
class Band:
    """A prediction band and what it rests on (``RuntimeModel.band``)."""

    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    confidence: float  # what the band honours: the requested one, or the cap
    requested_confidence: float
    extrapolation: Extrapolation
    calibrated_for: str
    # the largest scale-out the context's curve is known at (its job's training runs, its own),
    # where some asked for lie beyond it: there the curve is continued (``continued_log_runtime``)
    beyond: int | None = None
    # the smallest, where some asked for lie below it: there the curve is continued the same way
    below: int | None = None

    @property
    def capped(self) -> bool:
        return self.confidence < self.requested_confidence


def compose_band(
    model: RuntimeModel, ctx: dict[str, str | float], ext: Extrapolation, ns: np.ndarray, requested: float
) -> Band:
    """The band of ``model`` (the one that answers for ``ctx``'s job type) at the validated
    scale-outs ``ns``, at the validated ``requested`` confidence: the steps below, in order."""
    job = str(ctx["job_type"])
    network, mean, past = model._curves(ctx, ns, ext)
    tuned = model._is_tuned_for(ctx)
    environment = ctx.get("environment")
    environment = None if environment is None else str(environment)
    observed = model.observed_scale_outs if tuned else ()
    k = min(model.tuned_points if tuned else 0, MAX_K)
    sources, calibrated_for, outside = band_sources(model, ext)
    honoured = min([requested, *(max_confidence(cal, k, environment) for cal, _ in sources)])
    lo_q, hi_q = table_offsets(
        model, sources, ext, k, honoured, ns, environment, observed, tuned, outside, job, ctx
    )
    spanned = unpaired_scale_outs(ns, observed, outside)
    beyond = below = None
    if past is not None:
        # Beyond every scale-out its curve is known at, the prediction continues it (Amdahl's
        # a + b / n from the edge, ``_curves``) and the network extrapolates its basis: two
        # guesses at a shape nothing measured (C3O pre-trained on 2-6 nodes: the network's band
        # held 43-60 % of the runs at 8-12 nodes above its lower bound). The band spans both.
        # Below every one the same holds, mirrored (docs/model.md, "Scale-outs smaller than any
        # trained").
        edges = past.edges
        spanned |= past.below | past.beyond
        beyond = edges[1] if past.beyond.any() else None
        below = edges[0] if past.below.any() else None
        lo_q, hi_q = past_edge_offsets(model, job, past, ns, lo_q, hi_q, honoured)
    low, high = spanned_curves(model, ctx, ext, ns, mean, network, spanned, past)
    if outside and not tuned and ext.kinds == {"numeric"}:
        # Before a context outside the training data by its numbers alone (beyond a trained
        # range, every value known) has runs, the miss the model keeps at its job's training
        # contexts nearest to it (the edge it extrapolates from) is the one measure of its
        # curve's error there: the numeric tables rest on two held-out ends, predicted well where
        # the model's own curve at the edge was not (C3O leave-size-out, sort beyond 15,408 MB:
        # the model 0.21 in log under its edge contexts' runs, the held-out ends' tables
        # ±0.05-0.21, the runs beyond 0.31-0.43 over the prediction). On its side, as the tuned
        # context's own miss below; its runs then take over. (A new value besides: the tables of
        # values held out whole measured that, misses at their edges included.)
        below_edge, above_edge = edge_miss(model, ctx)
        lo_q, hi_q = lo_q - below_edge, hi_q + above_edge
        if below_edge or above_edge:
            side = "over" if above_edge else "under"
            calibrated_for += (
                f"; before its first run widened by the model's miss at its nearest training "
                f"contexts (their runs {side} its curve by ×{math.exp(below_edge + above_edge):.3g})"
            )
    if outside and tuned and model.check_count < MIN_CHECKS:
        # Before a context from elsewhere has checks of its own, the miss its tuned curve keeps
        # at its own runs is the one measure of its error the tables did not take (their
        # held-out contexts were fitted to within a few per cent; leave-size-out's largest sorts
        # were left 16 % under their run, with a band of ±5 %): the band adds it on its side.
        below_runs, above_runs = own_miss(model, ctx)
        lo_q, hi_q = lo_q - below_runs, hi_q + above_runs
    with np.errstate(over="ignore", invalid="ignore"):
        lower, upper = np.exp(low + lo_q), np.exp(high + hi_q)
    described = calibrated_for
    if outside and not tuned and ext.missing:
        lower, upper, described = missing_widening(
            model, job, ext, honoured, low, high, lo_q, hi_q, lower, upper, described
        )
    if outside and tuned and ext.guessing and len(set(observed)) == 1:
        # one scale-out run: the level is the context's, the shape still a guess
        ran_at = observed[0]
        low_s, high_s = guessed_shape(
            ns, ran_at, float(np.exp(model._log_curves(ctx, scale_out_array([ran_at]))[1][0]))
        )
        lower, upper = np.minimum(lower, low_s), np.maximum(upper, high_s)
    if outside and not tuned and ext.guessing:
        # no bound at any candidate (a widened table may overflow at some and not at others:
        # sizing would take the one with a finite astronomic bound), on either side: the lower
        # bound is as much a guess (the demo's sort ran 0.3× its prediction, under the tables'
        # lower bound); its runs bring bounds back
        lower, upper = np.zeros(len(ns)), np.full(len(ns), np.inf)
    if outside and tuned:
        lower, upper, described = at_runs_narrowing(model, ctx, ext, ns, honoured, lower, upper, described)
    # Residuals that all lie on one side of a curve (a bucket where the model is biased) would put
    # the band beside its own prediction; the band always holds it (only ever wider).
    point = np.exp(mean)
    return Band(
        point,
        np.minimum(lower, point),
        np.maximum(upper, point),
        honoured,
        requested,
        ext,
        described,
        beyond,
        below,
    )


def band_sources(
    model: RuntimeModel, ext: Extrapolation
) -> tuple[list[tuple[Calibration, DistanceWidening]], str, bool]:
    """The calibrations whose tables answer for a context (the widest of them per bound), each
    with how its bounds grow with the context's distance beyond the trained ranges, what they
    were measured on, and whether the context lies outside the training data."""
    own = model.calibration
    if own.unseen_job_type:
        return [(own, DistanceWidening())], "job types held out whole", False
    if not ext.kinds:
        return [(own, DistanceWidening())], "contexts like the training contexts", False
    extrapolation = own.extrapolation or ExtrapolationTables(held_out=())
    tables = extrapolation.tables
    # a kind whose calibration held out too few contexts cannot say how far off a new one is
    enough = {
        kind for kind in EXTRAPOLATION_KINDS if tables.get(kind) and tables[kind].n >= MIN_HELD_OUT_CONTEXTS
    }
    enough_signals = {
        kind for kind in SIGNAL_KINDS if tables.get(kind) and tables[kind].n >= MIN_HELD_OUT_CONTEXTS
    }
    # (a kind of extrapolation training had no variation in: the other kind's tables)
    kinds = sorted(ext.kinds & enough) or sorted(enough)
    if kinds:
        sources = [
            (
                own.answering(tables[kind], extrapolation.groups(kind)),
                # (a numeric extrapolation no numeric table answers grows with its distance too,
                # beyond the distance the table's held-out contexts lay at)
                DistanceWidening(
                    scaled=kind == "numeric" or "numeric" not in kinds,
                    reference=1.0 if kind == "numeric" else extrapolation.held_out_distance[kind],
                ),
            )
            for kind in kinds
        ]
        described = f"contexts held out whole ({', '.join(kinds)})"
        unmeasured = never_varied(model.metadata.get("domain"), ext)
        if unmeasured:
            # a new value of a property no held-out group varied: the uncalibrated band too
            # (its Gaussian, not multiplied by the distance: the tables account for that)
            sources.append((own.answering(None), DistanceWidening(scaled=False)))
            described += f"; uncalibrated for a new {', '.join(unmeasured)} (one value in training)"
        # A context that lacks a property or whose job ran only elsewhere: the tables of the
        # held-out contexts that showed the same signal to their member, beside the groups'.
        # Where too few did, the groups' tables measured other kinds of distance only: the
        # uncalibrated Gaussian too, as where nothing could be held out (widened by the
        # distance before the first run, then the prior of the context's own check).
        measured, guessed = [], []
        for kind in sorted(signal_kinds(ext)):
            if kind in enough_signals:
                sources.append(
                    (
                        own.answering(tables[kind]),
                        DistanceWidening(
                            scaled="numeric" not in kinds,
                            reference=extrapolation.held_out_distance[kind],
                        ),
                    )
                )
                measured.append(kind)
            else:
                guessed.append(SIGNAL_WORDS[kind](ext))
        if measured:
            described += f"; held-out contexts showing the same signal ({', '.join(measured)})"
        if guessed:
            sources.append((own.answering(None), DistanceWidening(untuned_only=True)))
            described += f"; uncalibrated for {' and '.join(guessed)} (too few held-out contexts showed it)"
        return sources, described, True
    # Nothing to measure it on: the uncalibrated band (the Gaussian of a model without
    # out-of-fold data), never narrower than the training contexts' tables.
    # (the model's own tables held out contexts at some distance too; the Gaussian is a guess
    # of the error before the context has runs, its distance unmeasured: see DistanceWidening)
    return (
        [
            (own, DistanceWidening(reference=extrapolation.own_held_out_distance, settles=True)),
            (own.answering(None), DistanceWidening(untuned_only=True)),
        ],
        "uncalibrated: too few contexts to hold out whole",
        True,
    )


def table_offsets(
    model: RuntimeModel,
    sources: list[tuple[Calibration, DistanceWidening]],
    ext: Extrapolation,
    k: int,
    honoured: float,
    ns: np.ndarray,
    environment: str | None,
    observed: Sequence[int],
    tuned: bool,
    outside: bool,
    job: str,
    ctx: dict[str, str | float],
) -> tuple[np.ndarray, np.ndarray]:
    """The band's lower and upper log offsets from the calibrations that answer (``band_sources``):
    each source's ``quantiles``, grown with the context's distance where it lies ``outside`` the
    training data; the widest bound of them per side."""
    bounds = []
    for cal, widening in sources:
        scale = widening.factor(ext.distance_scale, k) if outside else 1.0
        weighed = widening.prior_distance(ext.distance_scale, k) if outside else 1.0
        answering = [(cal, (1.0, 1.0))]
        levelled = None if outside or cal.tables is None else cal.tables.levelled
        if levelled is not None:
            # The contexts predicted slowest spill more than the pooled tables say (their errors'
            # spread grows with the level): their tables of residuals divided by σ(level), times
            # the context's σ, answer too. Only ever wider: σ < 1 (a fast context) would narrow
            # a band the pooled tables had right, so the pooled one stands beside it.
            source = cal.answering(levelled, cal.groups)
            answering.append((source, model.level_spread(source, ctx)))
        bounds.extend(
            quantiles(
                model,
                source,
                k,
                honoured,
                ns,
                environment,
                observed,
                tuned,
                scale,
                outside,
                weighed,
                job_type=job,
                guess=widening.untuned_only,
                settles=widening.settles,
                spread=spread,
            )
            for source, spread in answering
        )
    # the widest bound of the calibrations that answer
    lo_q = np.minimum.reduce([lo for lo, _ in bounds])
    hi_q = np.maximum.reduce([hi for _, hi in bounds])
    return lo_q, hi_q


def quantiles(
    model: RuntimeModel,
    calibration: Calibration,
    k: int,
    confidence: float,
    ns: np.ndarray,
    environment: str | None,
    observed: Sequence[int],
    tuned: bool,
    distance_scale: float = 1.0,
    outside: bool = False,
    prior_distance: float | None = None,
    *,
    job_type: str | None = None,
    guess: bool = False,
    settles: bool = False,
    spread: tuple[float, float] = (1.0, 1.0),
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper log offsets of the band from ``calibration``'s tables, widened on both
    sides by ``distance_scale`` (≥ 1: ``Extrapolation.distance_scale``) where ``outside``
    and updated by the context's own leave-one-scale-out check. ``outside``: the context
    lies outside the training data (its check counts at every scale-out). ``job_type``: the
    context's, whose scales (per side) the tables' offsets are multiplied by (``job_scales``).
    ``guess``: the source is the uncalibrated guess of a context's error before its runs (the
    Gaussian that widens with the distance until its first run: ``DistanceWidening.untuned_only``),
    which a tuned context's runs leave only the shape's part of (``_guess_profile``).
    ``settles``: the distance widens the source only until the context's first run, above the
    training data's smallest scale-outs (``DistanceWidening.settles``). ``spread``: the context's
    level spread (below, above) its offsets and its checks' prior are multiplied by (the levelled
    tables' source: ``RuntimeModel.level_spread``; (1, 1) the pooled tables)."""
    lo_q, hi_q = residual_quantiles(
        calibration, k, confidence, ns, environment, observed, job_type=job_type, spread=spread
    )
    # The uncalibrated guess of a tuned context outside: the part its runs leave, growing with
    # the distance from them (_guess_profile). (The Gaussian of a new value of a property that
    # never varied stands beside tables at every k, for an error nothing measured: left whole.)
    shaped = guess and outside and tuned and calibration.tables is None and len(observed) > 0
    profile = guess_profile(model, ns, observed) if shaped else np.ones(len(ns))
    lo_q, hi_q = lo_q * profile, hi_q * profile
    # the distance measured the level's error, which the runs re-fit: above the smallest
    # scale-outs (memory cliffs, which keep it) a settled source is the tables as measured
    settled = (ns > model._smallest_max) if outside and settles and tuned and len(observed) else None
    if outside:
        lo_w, hi_w = widened(lo_q, hi_q, distance_scale)
        if settled is not None:
            lo_1, hi_1 = widened(lo_q, hi_q)
            lo_w, hi_w = np.where(settled, lo_1, lo_w), np.where(settled, hi_1, hi_w)
        lo_q, hi_q = lo_w, hi_w
    if tuned and model.check_count >= MIN_CHECKS:
        # The tables give the error scale of a typical training context (the uncalibrated
        # Gaussian's sd where no table answers), times the distance widening: the prior for
        # this one, in its own units. Its own leave-one-scale-out errors update it (a
        # scaled-inverse-χ² posterior with PRIOR_CHECKS pseudo-residuals): wider for a context
        # unlike the training data, tighter for one its runs show to be predictable. (The
        # check is measured on the context itself: the distance does not multiply it.) The
        # tables measured contexts at most about a width beyond their members' ranges: at
        # distance_scale d the prior's error is theirs extrapolated d times as far, a guess
        # no residual measured. Its PRIOR_CHECKS / d² pseudo-residuals keep the squared
        # error the tables measured (PRIOR_CHECKS × their scale²), so a far context's own
        # runs decide its band as soon as it has a few (inside: d = 1, unchanged).
        prior = table_scale(calibration, k - 1, environment, job_type, spread) * distance_scale
        if 0 < prior < math.inf:
            far = distance_scale if prior_distance is None else prior_distance
            weight = PRIOR_CHECKS / far**2
            scale = answering_scale(model, prior, weight, ns, observed, confidence, outside, settles)
            if settled is not None:
                # (where the distance no longer widens the source, its prior is the tables' scale)
                unwidened = answering_scale(
                    model, prior / distance_scale, weight, ns, observed, confidence, outside, settles
                )
                scale = np.where(settled, unwidened, scale)
            if shaped:
                # the checks measured the guess where they were (its profile there, RMS): in
                # those units they rescale it above the smallest scale-outs; there the whole
                # guess stands, rescaled as before
                at_checks = answering_scale(
                    model,
                    prior * check_profile(model, observed),
                    weight,
                    ns,
                    observed,
                    confidence,
                    outside,
                    settles,
                )
                scale = np.where(ns <= model._smallest_max, scale, at_checks)
            # the training data's smallest scale-outs (memory cliffs) keep their own tables;
            # a context from elsewhere has only its own runs to say where its cliffs are
            own = np.full(len(ns), True) if outside else ns > model._smallest_max
            lo_q, hi_q = np.where(own, lo_q * scale, lo_q), np.where(own, hi_q * scale, hi_q)
    return lo_q, hi_q


def answering_scale(
    model: RuntimeModel,
    prior: float,
    weight: float,
    ns: np.ndarray,
    observed: Sequence[int],
    confidence: float,
    outside: bool,
    settles: bool = False,
) -> np.ndarray:
    """``check_scale`` per scale-out with the checks its source's tables were measured with.

    A context from outside the training data is checked at every scale-out it ran at (its cliffs
    need not be the training data's). The model's own tables (the ``settles`` source, where too
    few contexts could be held out whole) were measured on its own out-of-fold contexts as
    inside: checked above the training data's smallest scale-outs only, and above them divided
    by the factor of those checks (``calibration.check_normalised_tables``). Read above those
    scale-outs, they take the checks they were measured with: the context's checks there
    (``TunedContext.above_checks``; fewer than MIN_CHECKS: none, as in the tables). (C3O
    leave-machine-type-out, kmeans on r4.2xlarge tuned on 2 and 8 nodes: the miss at 2 nodes, a
    memory cliff, multiplied the band at 4-12 nodes by 1.4-3.3 where its runs needed none of it:
    a second run made the band wider than one.) Other sources (tables of groups held out whole,
    not normalised; the uncalibrated guess) count every check everywhere, as before."""
    scale = check_scale(model, prior, weight, ns, observed, confidence, outside)
    above = model.above_checks if outside and settles else None
    if above is None:
        return scale
    smallest = model._smallest_max
    if above[1] >= MIN_CHECKS:
        at = [n for n in observed if n > smallest]
        high = check_scale(model, prior, weight, ns, at, confidence, outside, checks=above)
    else:
        high = np.ones(len(ns))
    return np.where(np.asarray(ns) > smallest, high, scale)


def check_scale(
    model: RuntimeModel,
    prior: float,
    weight: float,
    ns: np.ndarray,
    observed: Sequence[int],
    confidence: float,
    outside: bool,
    checks: tuple[float, int] | None = None,
) -> np.ndarray:
    """Per scale-out, what the context's own checks multiply a band source's offsets by: the
    posterior of its error scale over ``prior`` (``weight`` pseudo-residuals at it). ``checks``:
    (RMS, count) of the checks that answer, the context's whole check where not given; ``observed``:
    the scale-outs they were left out at."""
    rms, count_all = (model.check_rms, model.check_count) if checks is None else checks
    factor = check_factor(prior, weight, count_all, rms)
    # Outside, the prior counts little and a few checks set the scale: its quantile is
    # Student's t over weight + checks residuals, not the normal's of a known scale
    # (Bell, 2-4 checks: the lower bound held 73-85 % of the runs without this).
    # Inside, the tables and their 2 pseudo-residuals were measured as they are.
    if outside:
        factor *= predictive_inflation(weight + count_all, confidence)
    scale = np.full(len(ns), factor)
    squares, count = model._replicate_checks() if outside else (0.0, 0)
    if count:
        # Repeated runs at one scale-out check only each other (its noise), not how it
        # scales: elsewhere only its leave-one-scale-out checks may narrow the band (a
        # daily job run at one size, then sized at another: the demo's grep, two runs at
        # 3 workers, then a miss at 2); its noise may still widen it. Those checks count
        # once per scale-out left out (its runs there share one shape).
        m = count_all - count
        shape_rms = math.sqrt(max(count_all * rms**2 - squares, 0.0) / max(m, 1))
        distinct = len(observed)
        shape = (
            check_factor(prior, weight, distinct, shape_rms)
            * predictive_inflation(weight + distinct, confidence)
            if m and distinct >= MIN_CHECKS
            else 1.0
        )
        ran = [n for n, _ in model.run_residuals]
        repeated = [n for n in observed if ran.count(n) > 1]
        scale = np.where(np.isin(ns, repeated), factor, max(shape, factor))
    return scale


def guess_profile(model: RuntimeModel, ns: np.ndarray, observed: Sequence[int]) -> np.ndarray:
    """The uncalibrated Gaussian of a tuned context, per scale-out, over its untuned size (≤ 1).

    Untuned, the guess (``gaussian_sd``: run noise and twice the default prior width) stands for
    the error of a curve with nothing to anchor it. Once the context's runs have re-fitted its
    level, what is left of that error is the shape's, and a shape's error grows with the
    distance from the runs it was fitted to: the run noise and the guess times the log
    distance over the trained scale-outs' log span (the whole guess from one end of them to
    the other; within NEAR_FACTOR of a run, as far as that bucket reaches). C3O
    leave-machine-type-out, two training contexts, one width for all scale-outs: its 90 % upper
    bound held 99-100 % of the runs within 1.5 × of a run and 60-100 % of those farther out."""
    grid = [float(n) for n in (model.metadata.get("curves") or {}).get("scale_outs", [])]
    span = math.log(max(grid) / min(grid)) if len(grid) > 1 and min(grid) > 0 else 0.0
    if span <= 0:
        return np.ones(len(ns))
    noise = float(model.calibration.noise_sd)
    shape = 2 * DEFAULT_PRIOR_SD
    # (within NEAR_FACTOR of a run as far as the near bucket reaches: the tables' convention,
    # far_scale; at a run's own scale-out the tuned curve still misses its runs by its misfit)
    near_unit = math.log(NEAR_FACTOR)
    reach = np.minimum(far_scale(log_distance(np.asarray(ns), np.asarray(observed))) * near_unit / span, 1.0)
    profile = np.hypot(noise, shape * reach) / math.hypot(noise, shape)
    # the training data's smallest scale-outs keep the whole guess, as the tables keep a bucket
    # of their own there: memory cliffs, which no distance from the runs describes
    return np.where(np.asarray(ns) <= model._smallest_max, 1.0, profile)


def check_profile(model: RuntimeModel, observed: Sequence[int]) -> float:
    """The guess's profile where the context's leave-one-scale-out checks were measured (each
    run from the others: at its distance from the nearest other scale-out), RMS: the prior's
    scale there, so that the checks rescale the guess in its own units."""
    distinct = np.array(sorted(set(observed)), dtype=np.float64)
    if len(distinct) < 2:
        return 1.0
    at = [guess_profile(model, np.array([n]), [m for m in distinct if m != n])[0] for n in distinct]
    return float(np.sqrt(np.mean(np.square(at))))


def unpaired_scale_outs(ns: np.ndarray, observed: Sequence[int], outside: bool) -> np.ndarray:
    """Where the band spans both the network's curve and the blended one (before the edges'
    own guesses, ``past_edge_offsets``): where the context's runs never compared the two."""
    # Below the smallest observed scale-out the runs never compared the two curves (the
    # parametric share was earned on the observed range), and that is where memory cliffs
    # live: the network learned them from training contexts that had them, Ernest's four
    # terms cannot bend to them. The band spans both curves there. Outside the training data
    # it does above the largest too: there neither curve's shape beyond the runs was learned
    # from contexts like this one (Bell's sgd ran 20-37 % under the blend at 36-60 nodes,
    # its runs at <= 32), so the blend's share, earned inside the runs, is one guess of two.
    # (Inside, the network's shape there was learned from contexts like it: unchanged.)
    spanned = ns < min(observed, default=0)
    if outside:
        spanned |= ns > max(observed, default=math.inf)
    return spanned


def past_edge_offsets(
    model: RuntimeModel,
    job: str,
    past: Continuation,
    ns: np.ndarray,
    lo_q: np.ndarray,
    hi_q: np.ndarray,
    honoured: float,
) -> tuple[np.ndarray, np.ndarray]:
    """The log offsets past the edges of the scale-outs the context's curve is known at, grown
    with the distance past the edge (docs/model.md, "Past the edges")."""
    edges = past.edges
    # The offsets grow with the distance past the edge: by the convention, widths of the known
    # range (as a number's beyond its trained range: ``OutOfRange.widths``) × half the band's log
    # width, and, where enough of the job's training runs lay past the edges of their own
    # scale-outs, by how far the same guesses missed them per octave (``edge_misses``, per side
    # and direction), in quadrature
    grow_lo, grow_hi = np.zeros(len(ns)), np.zeros(len(ns))
    span = max(math.log10(edges[1] / edges[0]), MIN_SPAN_DECADES)
    tables = model._edge_table(job)
    for side, there in ((0, past.below), (1, past.beyond)):
        if not there.any():
            continue
        # (how far past the edge, as a ratio of scale-outs > 1 on either side)
        ratio = np.where(there, ns, 1) / edges[1] if side else edges[0] / np.where(there, ns, 1)
        with np.errstate(invalid="ignore", divide="ignore"):
            widths = np.log10(ratio) / span * (hi_q - lo_q) / 2
        convention = np.where(there, widths, 0.0)
        table = tables[side]
        if table is None:
            grow_lo, grow_hi = grow_lo + convention, grow_hi + convention
            continue
        octaves = np.where(there, np.log2(ratio), 0.0)
        # The convention stands for the error of the model's own curve up to the edge,
        # growing with the distance (the offset, measured inside the range, plus it: as
        # before); the table for what the guesses miss past an edge of a curve known
        # exactly up to it. Errors of different sources: in quadrature.
        for offset, table_misses, grow in (
            (-lo_q, table.lower, grow_lo),
            (hi_q, table.upper, grow_hi),
        ):
            level = np.maximum(np.where(np.isfinite(offset), offset, 0.0), 0.0)
            shape = edge_growth(table_misses, table.octaves, octaves, honoured)
            grow += np.where(there, np.hypot(level + convention, shape) - level, 0.0)
    return lo_q - grow_lo, hi_q + grow_hi


def spanned_curves(
    model: RuntimeModel,
    ctx: dict[str, str | float],
    ext: Extrapolation,
    ns: np.ndarray,
    mean: np.ndarray,
    network: np.ndarray,
    spanned: np.ndarray,
    past: Continuation | None,
) -> tuple[np.ndarray, np.ndarray]:
    """The lowest and the highest of the curves the band spans, in log seconds: the prediction;
    where ``spanned``, the network's curve too; past the edges, the edges' guesses."""
    low = np.where(spanned, np.minimum(mean, network), mean)
    high = np.where(spanned, np.maximum(mean, network), mean)
    if past is not None:
        # a third guess there: the curve keeping the rate it falls at over the octave at the
        # edge (a power law), which a job still far from its serial part follows further than
        # Amdahl's curve does (C3O's grep at 10-12 nodes, fitted on 2-8: the band's lower bound
        # held 83-87 % of its runs with the two); below the edge also the model's own curve, which
        # the prediction lies halfway to
        guesses = list(past.guesses)
        if past.beyond.any():
            # beyond the largest, one more: Ernest's four terms fitted over the whole known
            # range, whose overhead terms (log n, n) may rise where every other guess flattens
            # or falls (a job whose coordination cost grows with the cluster; docs/model.md)
            whole = np.geomspace(*past.edges, OVERHEAD_POINTS)
            at_whole = model._model_log_curves(ctx, whole, ext)[1]
            if np.isfinite(at_whole).all():
                guesses.append(np.where(past.beyond, overhead_log_runtime(ns, whole, at_whole), np.nan))
        for guess in guesses:
            there = np.isfinite(guess)
            low = np.where(there, np.minimum(low, guess), low)
            high = np.where(there, np.maximum(high, guess), high)
    return low, high


def own_miss(model: RuntimeModel, ctx: dict[str, str | float]) -> tuple[float, float]:
    """How far the tuned prediction lies above the lowest and below the highest of the
    context's own runs, in log units (0 where it meets them): its runs' residuals from the
    uncorrected curve less what the residual correction moved it by."""
    ran = np.array([n for n, _ in model.run_residuals], dtype=np.int64)
    if not len(ran):
        return 0.0, 0.0
    uncorrected = model._log_curves(ctx, ran, corrected=False)[1]
    miss = np.array([r for _, r in model.run_residuals]) + uncorrected - model._log_curves(ctx, ran)[1]
    return max(0.0, -float(miss.min())), max(0.0, float(miss.max()))


def edge_miss(model: RuntimeModel, ctx: dict[str, str | float]) -> tuple[float, float]:
    """How far the untuned prediction lies above and below the runs of the training contexts of
    ``ctx``'s job nearest to it (``finetuning.property_distance`` over the properties it gives with
    values the model knows; the nearest, ties pooled), in log units (0 on a side it does not miss):
    their mean log runtime's mean miss over the scale-outs each ran at, averaged."""
    curves = model.metadata.get("curves") or {}
    grid = [int(n) for n in curves.get("scale_outs", [])]
    same = [
        (i, c)
        for i, c in enumerate(curves.get("contexts", []))
        if c["context"].get("job_type") == ctx.get("job_type")
    ]
    if not same:
        return 0.0, 0.0
    distances = job_distances(ctx, [c for _, c in same], model._nearest_names(ctx))
    nearest = min(distances)
    misses = []
    for (i, entry), distance in zip(same, distances, strict=True):
        if distance > nearest:
            continue
        if i not in model._edge_misses:
            # (the untuned model's miss of a training context: the same for every copy and context)
            observed = [(n, v) for n, v in zip(grid, entry["log_runtime"], strict=True) if v is not None]
            other = model._normalise(entry["context"])
            ns = scale_out_array([n for n, _ in observed])
            _, mean = model._log_curves(other, ns, signals(model.metadata["domain"], other))
            model._edge_misses[i] = float(np.mean([v for _, v in observed] - mean)) if observed else math.nan
        if math.isfinite(model._edge_misses[i]):
            misses.append(model._edge_misses[i])
    if not misses:
        return 0.0, 0.0
    miss = float(np.mean(misses))
    return max(0.0, -miss), max(0.0, miss)


def missing_widening(
    model: RuntimeModel,
    job: str,
    ext: Extrapolation,
    honoured: float,
    low: np.ndarray,
    high: np.ndarray,
    lo_q: np.ndarray,
    hi_q: np.ndarray,
    lower: np.ndarray,
    upper: np.ndarray,
    described: str,
) -> tuple[np.ndarray, np.ndarray, str]:
    """(lower, upper, what the band rests on) of an untuned context from outside that lacks a
    property, widened by how far the model misses its job's training contexts without it."""
    # A property the context lacks is read as unknown. Before its first run the band
    # widens by how far the model's curve lies from its job's training contexts once the
    # same properties are taken from them (Bell's pagerank, recorded without pages,
    # links and convergence_criterion: C3O's pagerank runs lay up to 1.7 in log above the
    # curve without them); added in quadrature (another source of error than the tables'
    # distance) and on both sides (only its size carries over: with the sign of a context's
    # shift unknown, each side holds q of the contexts where |error| has its 2q - 1
    # quantile). Its runs then set the level.
    errors = missing_errors(model, job, ext.missing)
    if len(errors):
        s = float(np.quantile(errors, max(2 * honoured - 1, 0.0)))
        hi_q = np.sqrt(np.maximum(hi_q, 0.0) ** 2 + s**2)
        lo_q = -np.sqrt(np.minimum(lo_q, 0.0) ** 2 + s**2)
        lower, upper = np.exp(low + lo_q), np.exp(high + hi_q)
        described += (
            f"; before its first run widened by the job's training contexts without "
            f"{', '.join(ext.missing)} ({len(errors)} runtimes, ×{math.exp(s):.3g})"
        )
    return lower, upper, described


def missing_errors(model: RuntimeModel, job_type: str, missing: tuple[str, ...]) -> np.ndarray:
    """|log residual| of the job's training contexts' mean runtimes (``metadata["curves"]``)
    against this model's untuned prediction for them without the ``missing`` properties."""
    key = (job_type, missing)
    if key not in model._missing_cache:
        curves = model.metadata.get("curves") or {}
        grid = [int(n) for n in curves.get("scale_outs", [])]
        errors: list[float] = []
        for entry in curves.get("contexts", []):
            ctx = entry["context"]
            if ctx.get("job_type") != job_type or not all(p in ctx for p in missing):
                continue
            observed = [(n, v) for n, v in zip(grid, entry["log_runtime"], strict=True) if v is not None]
            if not observed:
                continue
            without = model._normalise({k: v for k, v in ctx.items() if k not in missing})
            ns = [n for n, _ in observed]
            _, mean = model._log_curves(
                without, scale_out_array(ns), signals(model.metadata["domain"], without)
            )
            errors.extend(abs(v - m) for (_, v), m in zip(observed, mean, strict=True))
        model._missing_cache[key] = np.array(errors)
    return model._missing_cache[key]


def at_runs_narrowing(
    model: RuntimeModel,
    ctx: dict[str, str | float],
    ext: Extrapolation,
    ns: np.ndarray,
    honoured: float,
    lower: np.ndarray,
    upper: np.ndarray,
    described: str,
) -> tuple[np.ndarray, np.ndarray, str]:
    """(lower, upper, what the band rests on) of a tuned context from outside, narrowed at the
    scale-outs it ran at to the run-to-run noise of its runs there (``at_runs``)."""
    # At a scale-out the context has run at, the next run misses its runs there by its
    # noise, not by a shape: the check and the distance widen the band for how a curve
    # from elsewhere bends between its runs, which at a run says nothing (C3O
    # leave-machine-type-out: 99 % of the other runs there inside, the band as wide as far
    # from them). Where the runs' band is narrower it answers, per side (docs/model.md,
    # "At the scale-outs a context ran at").
    elsewhere = bool(ext.environments) or ext.job_type_unseen or "environment" in ext.missing
    at_lo, at_hi = at_runs(model, ctx, ns, honoured, elsewhere)
    with np.errstate(over="ignore", invalid="ignore"):
        at_lower, at_upper = np.exp(at_lo), np.exp(at_hi)
        # where the two bands do not overlap they disagree on where the next run lies: the
        # intersection would be empty (lower above upper), so the band from before answers
        use = np.isfinite(at_lo) & (at_lower <= upper) & (at_upper >= lower)
        narrowed = use & ((at_lower > lower) | (at_upper < upper))
        lower = np.where(use, np.maximum(lower, at_lower), lower)
        upper = np.where(use, np.minimum(upper, at_upper), upper)
    if narrowed.any():
        described += "; at the scale-outs it ran at, the run-to-run noise of its runs there"
    return lower, upper, described


def at_runs(
    model: RuntimeModel,
    ctx: dict[str, str | float],
    ns: np.ndarray,
    confidence: float,
    elsewhere: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Per scale-out, the log bounds of the next run where the context has run (NaN elsewhere):
    the mean of its m runs there ± Student's t quantile × the noise × √(1 + 1/m). The noise: the
    training data's run-to-run spread (``noise_sd``, measured on its repeats) as the prior, with
    ``PRIOR_CHECKS`` pseudo-residuals, updated by the context's own repeats (their squared
    deviations from their scale-out's mean, m − 1 degrees of freedom each): a cluster of its own
    may be noisier, and its repeats say so."""
    lo, hi = np.full(len(ns), np.nan), np.full(len(ns), np.nan)
    ran = np.array([n for n, _ in model.run_residuals], dtype=np.int64)
    if not len(ran) or confidence <= 0.5:
        return lo, hi
    # the runs' log runtimes: residuals from the uncorrected curve (``finetune``) plus it; a run
    # doubted as a straggler counts at its weighted residual, nearer the curve (one slow run at a
    # scale-out would otherwise centre the band on itself)
    log_y = np.array([r for _, r in model.run_residuals]) + model._log_curves(ctx, ran, corrected=False)[1]
    squares, dof = 0.0, 0
    for n in np.unique(ran):
        y = log_y[ran == n]
        squares, dof = squares + float(np.sum((y - y.mean()) ** 2)), dof + len(y) - 1
    if elsewhere and not dof:
        # the training data's noise was measured on other clusters: one of its own may be
        # several times noisier (Bell's pagerank on its yarn cluster: 0.19 against C3O's 0.03 to
        # 0.06), and only its own repeats can say so
        return lo, hi
    prior = float(model.calibration.noise_sd)
    # On another cluster the training data's noise is a floor, not evidence: its repeats alone
    # say how noisy it is, with their own degrees of freedom (the demo's loopback cluster under
    # load: grep's two runs at 3 executors 28.1 and 30.0 s, then 32.3 s, out of a band that
    # counted C3O's noise as two more repeats; docs/model.md, "At the scale-outs a context ran at").
    weight = 0.0 if elsewhere else PRIOR_CHECKS
    # (its repeats may show more noise than the training data's, never less: a few runs that
    # agree, to the second they are rounded to, say little of a tail of stragglers)
    sd = max(math.sqrt((weight * prior**2 + squares) / (weight + dof)), prior)
    t = student_t_quantile(confidence, weight + dof)
    for i, n in enumerate(ns):
        y = log_y[ran == n]
        if len(y):
            half = t * sd * math.sqrt(1 + 1 / len(y))
            lo[i], hi[i] = y.mean() - half, y.mean() + half
    return lo, hi
