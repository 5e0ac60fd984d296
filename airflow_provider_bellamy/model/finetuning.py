"""Fine-tuning one context: a Bayesian fit of the head's output correction Δh, in numpy.

Fine-tuning the head for ONE context changes its output h = W z + b only through
Δh = ΔW z + Δb, so with a pull towards the pre-trained weights it is exactly a
Gaussian-prior fit of Δh: Δ ~ N(0, Σ), log runtime ~ N(pred(h0 + Δ), σ²). Six numbers
per member: solved in milliseconds, batched over members (fine-tuning) or over many
held-out contexts at once (calibration), without torch.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from airflow_provider_bellamy.model.features import scale_out_basis
from airflow_provider_bellamy.model.inference import log_runtime, logsumexp

if TYPE_CHECKING:
    from airflow_provider_bellamy.model.extrapolation import Extrapolation

# Prior sd of a pure rescaling of the curve (log space), added to the learned covariance.
# The learned part only knows how contexts of the training data differ; a context from
# another environment (other hardware, a laptop, a different cluster manager) can be off
# by a constant factor the training data never showed. One sd = a factor of e.
RESCALE_PRIOR_SD = 1.0

# Prior probability that a context comes from an environment the training data never showed.
OTHER_ENVIRONMENT_PRIOR = 0.02
# ... and for a context with a property value the model never saw (a machine type, an environment):
# it does come from elsewhere, and its runs' level says by how much; the learned prior only knows
# how training contexts differ among themselves (measurement: docs/model.md, "Behind the constants").
UNSEEN_VALUE_PRIOR = 0.5


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def fit_delta(
    h0: np.ndarray,
    basis: np.ndarray,
    log_y: np.ndarray,
    weight: np.ndarray,
    *,
    noise_sd: float,
    prior_precision: np.ndarray,
    iterations: int = 12,
) -> np.ndarray:
    """MAP estimate of Δ for a batch of independent problems, by Gauss–Newton.

    h0 [B,F], basis [B,K,F], log_y [B,K], weight [B,K] (0 for padding),
    prior_precision [F,F] → Δ [B,F].
    """
    h0 = np.asarray(h0, dtype=np.float64)
    delta = np.zeros_like(h0)
    if weight.sum() == 0:
        return delta
    log_phi = np.log(np.maximum(basis, 1e-12))
    inv_noise = 1.0 / noise_sd**2
    for _ in range(iterations):
        logits = (h0 + delta)[:, None, :] + log_phi  # [B,K,F]
        pred = logsumexp(logits, axis=-1)  # [B,K]
        jac = _softmax(logits)  # d pred / d delta
        resid = (pred - log_y) * weight
        jtj = np.einsum("bki,bkj,bk->bij", jac, jac, weight) * inv_noise + prior_precision
        grad = np.einsum("bki,bk->bi", jac, resid) * inv_noise + delta @ prior_precision
        delta = delta - np.linalg.solve(jtj, grad[..., None])[..., 0]
    return delta


def other_environment_covariance(learned_cov: np.ndarray) -> np.ndarray:
    """The learned covariance plus a broad rescale direction: along Δ = c·(1, …, 1) every
    term moves together, i.e. the curve is multiplied by e^c."""
    ones = np.ones((learned_cov.shape[0], 1))
    return learned_cov + RESCALE_PRIOR_SD**2 * (ones @ ones.T)


def log_evidence(
    h0: np.ndarray,
    log_phi: np.ndarray,
    log_y: np.ndarray,
    weight: np.ndarray,
    cov: np.ndarray,
    noise_sd: float,
) -> np.ndarray:
    """log p(runs | prior) of the model linearised at Δ = 0, per problem: r ~ N(0, J Σ Jᵀ + σ² I)."""
    logits = h0[:, None, :] + log_phi
    resid = (log_y - logsumexp(logits, axis=-1)) * weight
    jac = _softmax(logits) * weight[..., None]
    k = log_y.shape[1]
    # padded points: unit variance, zero residual → they add nothing
    cov_y = jac @ cov @ np.swapaxes(jac, 1, 2) + np.eye(k) * (
        noise_sd**2 * weight[..., None] + (1 - weight)[..., None]
    )
    chol = np.linalg.cholesky(cov_y)
    alpha = np.linalg.solve(cov_y, resid[..., None])[..., 0]
    return -0.5 * (resid * alpha).sum(-1) - np.log(np.diagonal(chol, axis1=1, axis2=2)).sum(-1)


def fit_delta_averaged(
    h0: np.ndarray,
    basis: np.ndarray,
    log_y: np.ndarray,
    weight: np.ndarray,
    *,
    noise_sd: float,
    learned_cov: np.ndarray,
    other_prior: float | np.ndarray = OTHER_ENVIRONMENT_PRIOR,
) -> tuple[np.ndarray, np.ndarray]:
    """Fine-tuning under two hypotheses, averaged by how well each explains the runs.

    "like the training contexts": the learned prior. "another environment": the learned
    prior plus a broad rescale (``RESCALE_PRIOR_SD``). A context off by 10× (a laptop, a
    different cluster) is explained only by the second, and one run rescales the curve;
    ordinary noise is explained better by the first, and a single noisy run cannot drag
    the curve away. Weights: prior odds (``other_prior``) × marginal likelihoods (Bayesian model
    averaging). Returns (Δ [B,F], posterior probability of "another environment" [B]).
    """
    h0 = np.asarray(h0, dtype=np.float64)
    if weight.sum() == 0:
        return np.zeros_like(h0), np.zeros(h0.shape[0])
    log_phi = np.log(np.maximum(basis, 1e-12))
    fits, log_post = [], []
    for cov, prior in (
        (learned_cov, 1 - other_prior),
        (other_environment_covariance(learned_cov), other_prior),
    ):
        fits.append(
            fit_delta(h0, basis, log_y, weight, noise_sd=noise_sd, prior_precision=np.linalg.inv(cov))
        )
        log_post.append(log_evidence(h0, log_phi, log_y, weight, cov, noise_sd) + np.log(prior))
    w = _softmax(np.stack(log_post, axis=-1))  # [B, 2]
    return w[:, :1] * fits[0] + w[:, 1:] * fits[1], w[:, 1]


def empirical_prior_covariance(deltas: np.ndarray, floor_sd: float = 0.02) -> np.ndarray:
    """Covariance of the head corrections that fully observed contexts needed.

    Shrunk half-way towards its diagonal (few contexts estimate a 6×6 matrix poorly)
    and floored, so that it stays invertible.
    """
    centred = deltas - deltas.mean(0, keepdims=True)
    cov = centred.T @ centred / max(deltas.shape[0] - 1, 1)
    cov = 0.5 * cov + 0.5 * np.diag(np.diag(cov))
    return cov + np.eye(cov.shape[0]) * floor_sd**2


# Prior probability that the parametric curve (Ernest's terms, fitted to the context's own runs
# alone) describes a context better than the network's shape. Low: on contexts like the training
# data the network's shape wins (C3O: a 2-node memory cliff no 4-term curve bends to); a context
# from an environment the network never saw (other hardware, 5× the trained scale-outs) can
# still switch to it when its runs, predicted leave-one-scale-out, clearly say so.
PARAMETRIC_PRIOR = 0.02
# ... and for a context fine-tuning judges to come from another environment: even odds.
OTHER_ENVIRONMENT_PARAMETRIC_PRIOR = 0.5
# With fewer distinct scale-outs a leave-one-out fit of the parametric curve is one or two
# points: its error says nothing about its shape.
MIN_SCALE_OUTS_TO_COMPARE = 3


@functools.cache
def _supports(p: int) -> tuple[tuple[int, ...], ...]:
    """Every non-empty set of ``p`` columns, smallest first."""
    return tuple(s for r in range(1, p + 1) for s in itertools.combinations(range(p), r))


def pseudo_bma_weight(
    sq_kept: np.ndarray, sq_other: np.ndarray, noise_sd: float, prior: float | np.ndarray
) -> np.ndarray:
    """The weight of another curve against the one kept, from their leave-one-scale-out squared
    errors at the same runs (pseudo-Bayesian model averaging: Gaussian predictive likelihoods of
    width ``noise_sd``) and the other curve's prior probability ``prior``."""
    log_odds = (sq_kept - sq_other) / (2 * noise_sd**2) + np.log(prior / (1 - prior))
    return 1.0 / (1.0 + np.exp(-np.clip(log_odds, -50, 50)))


def twin_prior(misfit: float, run_sd: float) -> float:
    """The prior probability that a known context's twin (``twin_curve``) draws its curve
    better than the tuned network: only a measured curve the head's basis cannot draw within the
    training runs' own noise (``misfit``, ``basis_misfit``; ``run_sd``, calibration's noise_sd)
    claims a shape the network lacks (s21's ×1.8 memory-spill step), and then the two start even
    as a curve from another environment does; else it is one more curve from elsewhere."""
    return OTHER_ENVIRONMENT_PARAMETRIC_PRIOR if misfit > run_sd else PARAMETRIC_PRIOR


def basis_misfit(basis: np.ndarray, log_runtime: np.ndarray) -> float:
    """RMS log misfit of the best non-negative mix of ``basis``'s columns [K, F] (the head's
    scale-out basis at a curve's scale-outs) to the measured mean curve ``log_runtime`` [K]:
    exact NNLS of the relative error, which is the log error to first order."""
    runtime = np.exp(np.asarray(log_runtime, dtype=np.float64))
    relative = (np.asarray(basis, dtype=np.float64) / runtime[:, None])[None]
    mix = fit_nonnegative(relative, np.ones((1, len(runtime))), np.ones((1, len(runtime))))[0]
    fitted = np.maximum(basis @ mix, 1e-12)
    return float(np.sqrt(np.mean((np.log(fitted) - log_runtime) ** 2)))


def parametric_basis(scale_outs: np.ndarray) -> np.ndarray:
    """Ernest's terms (1, 1/n, log n, n) for one context (its input size is a constant factor)."""
    n = np.asarray(scale_outs, dtype=np.float64)
    return np.stack([np.ones_like(n), 1.0 / n, np.log(n), n], axis=-1)


def parametric_log_runtime(theta: np.ndarray, scale_outs: np.ndarray) -> np.ndarray:
    """log runtime of the parametric curve; theta [..., 4] and scale_outs broadcast."""
    return np.log(np.maximum(np.sum(parametric_basis(scale_outs) * theta, axis=-1), 1e-3))


def blend_log_runtime(
    network: np.ndarray, theta: np.ndarray, share: float, scale_outs: np.ndarray
) -> np.ndarray:
    """A tuned context's log runtime: the network's, mixed in log space with its parametric curve
    by the weight fine-tuning gave that curve (no parametric term where the weight is 0)."""
    if share <= 0:
        return network
    return (1 - share) * network + share * parametric_log_runtime(theta, scale_outs)


# Runs at one scale-out only say the curve's level is off there, which fine-tuning already
# corrects; a bend needs runs at two.
MIN_SCALE_OUTS_TO_CORRECT = 2


def residual_correction(
    observed_scale_outs: np.ndarray,
    residuals: np.ndarray,
    scale_outs: np.ndarray,
    *,
    amplitude: float,
    length: float,
    noise_sd: float,
) -> np.ndarray:
    """The posterior mean, at ``scale_outs``, of a Gaussian process over log scale-out fitted to a
    tuned curve's log residuals at the context's own runs.

    Both curves are stiff on purpose (a few numbers each, so one noisy run cannot bend them), and
    some real curves lie outside both families: Bell's sgd falls with -log n from 4 to 60 nodes,
    which no positive mix of the basis terms draws. Where several runs disagree with the curve
    the same way, the curve is wrong there, not the runs; the correction follows them close by
    (``length``, in log scale-out) and fades to the curve away from them. ``amplitude`` 0 turns
    it off.

    m runs at one scale-out are one observation of their mean residual with noise variance
    ``noise_sd``²/m (its sufficient statistic: the same posterior), so the cost grows with the
    distinct scale-outs, not with a context's years of daily runs.
    """
    query = np.asarray(scale_outs, dtype=np.float64)
    levels, index, count = np.unique(
        np.asarray(observed_scale_outs, dtype=np.float64), return_inverse=True, return_counts=True
    )
    if amplitude <= 0 or len(levels) < MIN_SCALE_OUTS_TO_CORRECT:
        return np.zeros(len(query))
    mean = np.bincount(index, weights=np.asarray(residuals, dtype=np.float64)) / count
    at = np.log(levels)

    def kernel(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return amplitude**2 * np.exp(-((a[:, None] - b[None, :]) ** 2) / (2 * length**2))

    gram = kernel(at, at) + np.diag(noise_sd**2 / count)
    return kernel(np.log(query), at) @ np.linalg.solve(gram, mean)


def tuned_log_runtime(
    network: np.ndarray,
    scale_outs: np.ndarray,
    theta: np.ndarray,
    share: float,
    *,
    runs: tuple[np.ndarray, np.ndarray] | None = None,
    corrections: Sequence[tuple[float, float]] = (),
    noise_sd: float = 0.0,
    actual: np.ndarray | None = None,
) -> np.ndarray:
    """A tuned context's curve at ``scale_outs``: the network's log runtime there (``network``)
    blended with the context's parametric curve, plus the residual correction towards its
    ``runs`` (their scale-outs, and their log residuals from the uncorrected curve) for each
    (amplitude, length) of ``corrections``: one row per correction (one row where none is given).

    With ``actual`` (log runtimes at ``scale_outs``): what they lie above that curve, computed as
    actual - blend - correction in that order (floating point: the same residuals, bit for bit, as
    the tables were always measured with). Prediction, calibration and fine-tuning's check all go
    through here, so the tables measure the curve that predicts."""
    blended = blend_log_runtime(network, theta, share, scale_outs)
    base = blended if actual is None else actual - blended
    if not corrections or runs is None:
        return base[None]
    rows = []
    for amplitude, length in corrections:
        correction = residual_correction(
            runs[0], runs[1], scale_outs, amplitude=amplitude, length=length, noise_sd=noise_sd
        )
        rows.append(base + correction if actual is None else base - correction)
    return np.stack(rows)


def fit_nonnegative(x: np.ndarray, y: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """Exact non-negative least squares for a batch of tiny problems: x [B,K,P], y, weight [B,K]
    (P up to the scale-out basis' few columns: 2^P - 1 supports).

    The NNLS optimum is the unconstrained fit on its own support, and every feasible support
    fit is a candidate: the best feasible one over all supports is the optimum. 15 supports for
    Ernest's 4 terms, each solved for the whole batch at once.
    """
    b, _, p = x.shape
    xw = x * weight[..., None]
    yw = y * weight
    best = np.zeros((b, p))
    best_sse = np.full(b, np.inf)
    for support in _supports(p):
        cols = list(support)
        xs = xw[..., cols]
        scale = np.abs(xs).max(axis=1, keepdims=True)
        scale[scale == 0] = 1.0
        theta = np.einsum("bpk,bk->bp", np.linalg.pinv(xs / scale), yw) / scale[:, 0, :]
        sse = np.sum((np.einsum("bkp,bp->bk", xs, theta) - yw) ** 2, axis=1)
        # strictly better only: on ties the smaller support (tried first) stays
        better = np.all(theta >= 0, axis=1) & (sse < best_sse * (1 - 1e-9))
        best_sse = np.where(better, sse, best_sse)
        full = np.zeros((b, p))
        full[:, cols] = theta
        best = np.where(better[:, None], full, best)
    return best


# Stragglers (a slow node, a retried task) make single runs 1.3-2× slower than their context's
# curve; nothing makes a run faster. A run above the curve its context's other runs predict by more
# than a limit weighs less in the fit, by (limit / its excess)²: the Cauchy-like descent of a
# heavy-tailed likelihood, on the slow side only. The limit: STRAGGLER_SDS likelihood widths, at
# most STRAGGLER_EXCESS (25 % slower) for a context like the training data. The width also holds
# how far the network's shape missed other contexts (0.4-0.5 in log on a job pre-trained on few),
# which says nothing of how far one context's runs scatter about their own curve. One run alone
# sets the level (a new context's shift is real); of two, the one slower than the other says is
# doubted, never the faster.
STRAGGLER_SDS = 2.0
STRAGGLER_EXCESS = math.log(1.25)
MIN_RUNS_TO_DOUBT = 2


def straggler_weights(
    h0: np.ndarray,
    basis: np.ndarray,
    scale_outs: np.ndarray,
    log_y: np.ndarray,
    weight: np.ndarray,
    *,
    noise_sd: float,
    learned_cov: np.ndarray,
    other_prior: float | np.ndarray = OTHER_ENVIRONMENT_PRIOR,
) -> np.ndarray:
    """``weight`` [B,K] with each context's stragglers down-weighted (see ``STRAGGLER_SDS``).

    Each run is predicted by the fit (``fit_delta_averaged``, the members' mean head h0 [B,M,F])
    of the context's other runs. A real memory spill makes runs several times slower from the
    smallest scale-outs up (C3O's kmeans and sgd at 2 nodes; on a machine type with less memory
    at 4 too), a shape the network need not know for this context: runs at a context's smallest
    scale-out are never doubted, and where they lie above what the others predict, no run is (the
    spill may reach up to it). A straggler elsewhere lies above the shape its neighbours and the
    network agree on, with the smallest scale-out's runs on it."""
    weight = np.asarray(weight, dtype=np.float64)
    present = weight > 0
    b = weight.shape[0]
    smallest = np.where(present, scale_outs, np.inf).min(axis=1, keepdims=True)
    candidates = present & (present.sum(axis=1, keepdims=True) >= MIN_RUNS_TO_DOUBT)
    if not (candidates & (scale_outs > smallest)).any():
        return weight
    rows, cols = np.nonzero(candidates)
    h = np.asarray(h0, dtype=np.float64).mean(axis=1)[rows]
    rest = weight[rows].copy()
    rest[np.arange(len(rows)), cols] = 0.0
    prior = np.broadcast_to(np.asarray(other_prior, dtype=np.float64), (b,))[rows]
    delta, _ = fit_delta_averaged(
        h, basis[rows], log_y[rows], rest, noise_sd=noise_sd, learned_cov=learned_cov, other_prior=prior
    )
    predicted = log_runtime((h + delta)[:, None, :], basis[rows, cols][:, None, :])[:, 0]
    excess = log_y[rows, cols] - predicted
    # a context with a value the model never saw (a raised ``other_prior``): the network's shape
    # there is a guess, and how far it may miss is the width's, all of it
    limit = np.where(
        prior <= OTHER_ENVIRONMENT_PRIOR,
        min(STRAGGLER_SDS * noise_sd, STRAGGLER_EXCESS),
        STRAGGLER_SDS * noise_sd,
    )
    above = np.zeros_like(weight)
    above[rows, cols] = excess / limit
    at_smallest = present & (scale_outs == smallest)
    spill = np.any(at_smallest & (above > 1), axis=1, keepdims=True)
    over = candidates & ~at_smallest & (above > 1)
    # a straggler is one run: where two lie above what their others predict, the context's curve
    # has a shape the network lacks (Bell's sgd, flatter between 4 and 20 nodes than C3O's)
    shape = over.sum(axis=1, keepdims=True) > 1
    doubted = over & ~spill & ~shape
    return np.where(doubted, weight / np.maximum(above, 1) ** 2, weight)


@dataclass
class ContextFit:
    """A fine-tuned context: the network's correction and, blended in, the parametric curve."""

    delta: np.ndarray  # [B, M, F]
    theta: np.ndarray  # [B, 4] parametric coefficients
    parametric_weight: np.ndarray  # [B] share of the parametric curve in log space
    # leave-one-scale-out log residuals of the blend above ``check_above`` (contexts with runs at
    # ≥ 2 scale-outs): root mean square and count, the context's own evidence for its band
    check_rms: np.ndarray  # [B]
    check_count: np.ndarray  # [B]
    # the same at scale-outs above ``also_above`` too, where it was given (None otherwise)
    above_check_rms: np.ndarray | None = None  # [B]
    above_check_count: np.ndarray | None = None  # [B]
    # each run's weight in the fit [B, K] (``straggler_weights``); the residual correction takes
    # a run's residual times its weight, so a straggler does not bend the curve there either
    run_weight: np.ndarray | None = None
    # the twin's share in log space (``fit_context``'s ``twin``) [B]; 0 where none was given
    twin_weight: np.ndarray | None = None


def fit_context(
    h0: np.ndarray,
    basis: np.ndarray,
    scale_outs: np.ndarray,
    log_y: np.ndarray,
    weight: np.ndarray,
    *,
    noise_sd: float,
    learned_cov: np.ndarray,
    check_above: float = 0.0,
    also_above: float | None = None,
    correction: tuple[float, float] | None = None,
    other_prior: float | np.ndarray = OTHER_ENVIRONMENT_PRIOR,
    learned_shape: bool = True,
    shape: np.ndarray | None = None,
    robust: bool = True,
    twin: np.ndarray | None = None,
    twin_prior: float | np.ndarray = PARAMETRIC_PRIOR,
) -> ContextFit:
    """Fine-tune B contexts of M members each: h0 [B,M,F]; runs basis [B,K,F], scale_outs,
    log_y, weight [B,K] (0 = padding).

    The network's correction comes from ``fit_delta_averaged``. Where a context has runs at
    ≥ MIN_SCALE_OUTS_TO_COMPARE scale-outs, both the tuned network and the parametric curve
    predict each scale-out's runs from the others' (leave-one-scale-out); their predictive
    log likelihoods, with the prior odds ``PARAMETRIC_PRIOR``, weigh the two curves
    (pseudo-Bayesian model averaging). The blend's own leave-one-scale-out residuals at
    scale-outs above ``check_above`` (from 2 scale-outs on; with 2 the network alone) are kept
    as the context's check of its band; with ``correction`` (amplitude, length) each left-out
    prediction is corrected as ``residual_correction`` corrects a prediction, from the residuals
    at the others, so the check measures the error of the curve that will be used.
    ``also_above``: the same check over the scale-outs above it too (``above_check_rms``).
    ``other_prior``: the prior probability of "another environment" (``fit_delta_averaged``),
    one for all contexts or one per context [B]. ``learned_shape=False``: the network's shape was
    learned far from these contexts (a guess, ``Extrapolation.guessing``), so it has no claim
    above the runs' own: the two curves compete at even odds from two scale-outs on (the
    parametric curve left out to one scale-out is flat, itself a shape the runs can refute).
    ``shape`` [B,K] (log runtime at the runs, NaN for none): the curve the prediction follows in
    place of the network's (a twin's measured curve, ``nearest_weight``); where given, it is what
    the parametric curve competes with and what the checks measure, each left-out scale-out
    predicted by it moved to the other runs' mean level (its runs set only the level).
    ``robust=False``: every run keeps its weight (no ``straggler_weights``; calibration's choice
    of the settings, see ``calibration.calibrate``).
    ``twin`` [B,K] (log runtime at the runs, NaN for none): a known context's twin's measured
    curve (``twin_curve``), moved to the runs' level. Where a context has runs at ≥
    MIN_SCALE_OUTS_TO_COMPARE scale-outs, each left-out scale-out is predicted by it at the other
    runs' mean level, and its leave-one-scale-out error weighs it against the blend's, as the
    parametric curve is weighed (``pseudo_bma_weight``, prior ``twin_prior``): ``twin_weight``.
    The checks then measure the mix the prediction follows.
    """
    h0 = np.asarray(h0, dtype=np.float64)
    if robust:
        weight = straggler_weights(
            h0,
            basis,
            scale_outs,
            log_y,
            weight,
            noise_sd=noise_sd,
            learned_cov=learned_cov,
            other_prior=other_prior,
        )
    b, m, f = h0.shape
    other_prior = np.repeat(np.broadcast_to(np.asarray(other_prior, dtype=np.float64), (b,)), m)

    def tune(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        flat, other = fit_delta_averaged(
            h0.reshape(b * m, f),
            np.repeat(basis, m, axis=0),
            np.repeat(log_y, m, axis=0),
            np.repeat(w, m, axis=0),
            noise_sd=noise_sd,
            learned_cov=learned_cov,
            other_prior=other_prior,
        )
        return flat.reshape(b, m, f), other.reshape(b, m).mean(axis=1)

    delta, other_environment = tune(weight)
    x = parametric_basis(scale_outs)
    theta = fit_nonnegative(x, np.exp(log_y), weight)
    present = weight > 0
    levels = [np.unique(scale_outs[i][present[i]]) for i in range(b)]
    compare_from = MIN_SCALE_OUTS_TO_COMPARE if learned_shape else 2
    compared = np.array([len(v) >= compare_from for v in levels])
    # two scale-outs already tell whether the tuned curve predicts one from the other
    loo = np.array([len(v) >= 2 for v in levels])
    share, check_rms, check_count = np.zeros(b), np.zeros(b), np.zeros(b, dtype=np.int64)
    twin_weight = np.zeros(b)
    above_rms, above_count = np.zeros(b), np.zeros(b, dtype=np.int64)
    if loo.any():
        r_network, r_parametric = np.zeros_like(log_y), np.zeros_like(log_y)
        left_out = np.zeros_like(present)
        folds = []
        r_twin = np.zeros_like(log_y)
        for j in range(max(len(v) for v in levels)):
            left = np.array([v[j] if len(v) > j else -1 for v in levels])
            out = present & (scale_outs == left[:, None]) & loo[:, None]
            if not out.any():
                continue
            rest = weight * ~out
            network = log_runtime((h0 + tune(rest)[0])[:, :, None, :], basis[:, None]).mean(axis=1)
            if shape is not None:
                given = np.all(np.isfinite(shape) | ~present, axis=1)
                level = np.sum(np.where(rest > 0, log_y - np.nan_to_num(shape), 0.0), axis=1) / np.maximum(
                    (rest > 0).sum(axis=1), 1
                )
                network = np.where(given[:, None], np.nan_to_num(shape) + level[:, None], network)
            loo_theta = fit_nonnegative(x, np.exp(log_y), rest)
            parametric = parametric_log_runtime(loo_theta[:, None, :], scale_outs)
            r_network = np.where(out, network - log_y, r_network)
            r_parametric = np.where(out, parametric - log_y, r_parametric)
            left_out |= out
            folds.append((out, rest > 0, network, loo_theta))
            if twin is not None:
                r_twin = np.where(out, _at_level(twin, log_y, rest > 0) - log_y, r_twin)
        sq_network, sq_parametric = np.sum(r_network**2, axis=1), np.sum(r_parametric**2, axis=1)
        # A context from another environment (fine-tuning's own verdict) takes the network's
        # knowledge of shapes with it: its cliffs and overheads need not transfer, and where the
        # runs cannot tell (extrapolating below the smallest observed scale-out) the two curves
        # start even.
        prior = PARAMETRIC_PRIOR + (OTHER_ENVIRONMENT_PARAMETRIC_PRIOR - PARAMETRIC_PRIOR) * other_environment
        if not learned_shape:
            prior = np.maximum(prior, OTHER_ENVIRONMENT_PARAMETRIC_PRIOR)
        share = np.where(compared, pseudo_bma_weight(sq_network, sq_parametric, noise_sd, prior), 0.0)
        blend = (1 - share[:, None]) * r_network + share[:, None] * r_parametric
        if correction is not None and correction[0] > 0:
            for out, rest, network, loo_theta in folds:
                for i in np.flatnonzero(out.any(axis=1)):
                    # the correction each left-out prediction gets from the residuals at the others
                    at = scale_outs[i][rest[i]]
                    missed = (
                        tuned_log_runtime(
                            network[i][rest[i]], at, loo_theta[i], share[i], actual=log_y[i][rest[i]]
                        )[0]
                        * weight[i][rest[i]]
                    )
                    blend[i, out[i]] += residual_correction(
                        at,
                        missed,
                        scale_outs[i][out[i]],
                        amplitude=correction[0],
                        length=correction[1],
                        noise_sd=noise_sd,
                    )
        if twin is not None:
            # (the same scale-outs as the parametric curve needs: a level left out of two says
            # nothing of a shape)
            has_twin = np.all(np.isfinite(twin) | ~present, axis=1) & np.array(
                [len(v) >= MIN_SCALE_OUTS_TO_COMPARE for v in levels]
            )
            sq_blend, sq_twin = (
                np.sum((blend * left_out) ** 2, axis=1),
                np.sum((r_twin * left_out) ** 2, axis=1),
            )
            twin_weight = np.where(has_twin, pseudo_bma_weight(sq_blend, sq_twin, noise_sd, twin_prior), 0.0)
            blend = np.where(twin_weight[:, None] > 0, mix_twin(blend, r_twin, twin_weight[:, None]), blend)
        checked = left_out & (scale_outs > check_above)
        check_count = checked.sum(axis=1)
        check_rms = np.sqrt(np.sum((blend * checked) ** 2, axis=1) / np.maximum(check_count, 1))
        if also_above is not None:
            above = left_out & (scale_outs > max(check_above, also_above))
            above_count = above.sum(axis=1)
            above_rms = np.sqrt(np.sum((blend * above) ** 2, axis=1) / np.maximum(above_count, 1))
    return ContextFit(
        delta=delta,
        theta=theta,
        parametric_weight=share,
        check_rms=check_rms,
        check_count=check_count,
        above_check_rms=None if also_above is None else above_rms,
        above_check_count=None if also_above is None else above_count,
        run_weight=weight,
        twin_weight=twin_weight,
    )


def run_level(curve: np.ndarray, log_y: np.ndarray, used: np.ndarray) -> np.ndarray:
    """How far (log) the runs ``used`` [B,K] lie above ``curve`` [B,K] at them, on the mean [B]:
    the level a twin's curve is moved to (its runs set only the level)."""
    return np.sum(np.where(used, log_y - np.nan_to_num(curve), 0.0), axis=1) / np.maximum(used.sum(axis=1), 1)


def _at_level(curve: np.ndarray, log_y: np.ndarray, used: np.ndarray) -> np.ndarray:
    """``curve`` [B,K] moved to the mean level of the runs ``used`` [B,K] (NaN stays NaN)."""
    return curve + run_level(curve, log_y, used)[:, None]


def mix_twin(curve: np.ndarray, twin: np.ndarray, weight: float | np.ndarray) -> np.ndarray:
    """The prediction of a context with a known twin: the tuned curve and the twin's curve at the
    runs' level (``run_level``), mixed in log space by the twin's weight (``fit_context``'s
    ``twin_weight``). Residuals mix alike where both are the curve's distance from the runs
    (prediction − runs, as ``fit_context``'s checks: the runs' log runtime cancels); a residual the
    other way round (runs − curve, ``tuned_log_runtime``'s) mixed with a twin's prediction − runs
    mixes the run's own noise with its negative."""
    return (1 - weight) * curve + weight * twin


def known_twin(
    context: Mapping[str, str | float],
    curves: Mapping[str, Any],
    names: Iterable[str],
    ratio_names: Iterable[str],
    steep_floor: float,
    run_sd: float,
) -> tuple[np.ndarray, np.ndarray, float] | None:
    """For a context the model knows: its twins' curve (``twin_curve`` over the training curves
    ``curves``, a model's ``metadata["curves"]``) as (log scale-outs, mean log runtime) and its
    prior against the tuned curve (``twin_prior``: whether the head's basis draws it within the
    training runs' noise ``run_sd``); None without a twin. Fine-tuning and calibration's
    simulation of it both take a context's twin from here."""
    found = twin_curve(context, curves.get("contexts", []), curves.get("scale_outs", []), names, ratio_names)
    if found is None:
        return None
    log_n, log_runtime = found
    misfit = basis_misfit(scale_out_basis(np.exp(log_n), steep_floor), log_runtime)
    return log_n, log_runtime, twin_prior(misfit, run_sd)


def with_replicates(
    scale_outs: np.ndarray, log_y: np.ndarray, check_rms: float, check_count: int
) -> tuple[float, int]:
    """A context's check (RMS, count of its leave-one-scale-out residuals) joined by its repeated
    runs (``replicate_checks``): their spread is the context's run-to-run noise, which
    leave-one-scale-out never sees (one scale-out run three times: no check at all)."""
    squares, count = replicate_checks(scale_outs, log_y)
    squares, count = squares + check_count * check_rms**2, count + check_count
    return (math.sqrt(squares / count) if count else 0.0), count


def replicate_checks(scale_outs: np.ndarray, log_y: np.ndarray) -> tuple[float, int]:
    """(sum of squares, count) of a context's repeated runs as checks of its noise: each run at a
    scale-out that ran more than once, predicted by the mean log runtime of the others there. The
    same from the runs' residuals to any one curve (it cancels at a scale-out)."""
    scale_outs, log_y = np.asarray(scale_outs), np.asarray(log_y, dtype=np.float64)
    squares, count = 0.0, 0
    for n in np.unique(scale_outs):
        y = log_y[scale_outs == n]
        if len(y) < 2:
            continue
        others = (y.sum() - y) / (len(y) - 1)
        squares += float(np.sum((y - others) ** 2))
        count += len(y)
    return squares, count


# A context with a property value the model never saw (another machine type, another cluster):
# the network reads that value as unknown and answers with what its training contexts have in
# common, a curve no context quite had. The curves of the training contexts of the same job
# nearest to it in the properties it does give (its job parameters, its input) carry the
# job's shape across. NEAREST_WEIGHT: the share of their curve, rescaled to the context's runs,
# in the prediction (log space). NEAREST_LENGTH: the distance (summed |log ratio| of numbers, 1
# per differing string) at which a training context's weight falls by a factor e.
NEAREST_WEIGHT = 0.75
NEAREST_LENGTH = 0.5
# The coordinates a training context's curve is carried to another context in (``nearest_curve``).
# None, by scale-out: the same job on as many nodes does as much work per node (sort, grep). By the
# input per node's memory (``features.DERIVED``): a memory cliff sits where that crosses the job's
# working set, so on nodes with twice the memory it sits at half the scale-out (C3O's kmeans, sgd:
# 2 nodes of r4.2xlarge spill as 4 of m4.2xlarge do). Which one carries a job is not known in
# advance: both curves are candidates and the context's runs weigh them (``combine_nearest``).
ALIGNMENTS: tuple[str | None, ...] = (None, "data_per_node_memory")


def property_distance(
    context: Mapping[str, str | float], other: Mapping[str, str | float], names: Iterable[str]
) -> float:
    """How far ``other`` lies from ``context`` in the properties ``names`` that ``context`` gives:
    |log ratio| of positive numbers, else 0 for equal values and 1 for different or absent ones."""
    total = 0.0
    for name in names:
        a, b = context.get(name), other.get(name)
        if a is None:
            continue
        if isinstance(a, str) or isinstance(b, str) or b is None:
            total += 0.0 if a == b else 1.0
        elif a > 0 and b > 0:
            total += abs(math.log(a / b))
        else:
            total += 0.0 if a == b else 1.0
    return total


def nearest_weight(distance: float | None) -> float:
    """The nearest training curve's share in a prediction, for a context whose nearest training
    context of its job lies ``distance`` away (``property_distance``; None: not known).

    1 for a twin (distance 0: a training context gave every property the context gives with a
    value the model knows — the same job, input and machine on another cluster, the context's
    new values read as unknown): the twin's measured curve is the context's but for the unknown
    value, whose effect the network never learned either, and the network's curve there is its
    fit of that same curve, misfit included (the synthetic trace's held-out environment, quick
    config: the network 20-58 % off its twins' measured curves at 8-32 nodes). Else
    ``NEAREST_WEIGHT``: the nearest contexts differ in what the network reads (another machine
    type's memory and cores), and its learned effect of them counts."""
    return 1.0 if distance == 0.0 else NEAREST_WEIGHT


def nearest_share(ext: Extrapolation, weight: float = NEAREST_WEIGHT) -> float:
    """The nearest training curves' share in a prediction before the context's first run:
    ``weight`` (``finetuning.nearest_weight``) while the context lies at most one trained span
    beyond the range of every number that varied in training (``OutOfRange.widths`` ≤ 1: no
    farther out than the training contexts lie apart), then falling as one over the distance in
    spans. Numbers with one trained value do not count: the network reads them as that value,
    the curves ignore them."""
    widths = max((o.widths for o in ext.out_of_range if o.span > 0), default=0.0)
    return weight * min(1.0, 1.0 / widths) if widths > 0 else weight


def nearest_distance(
    context: Mapping[str, str | float], curves: Sequence[Mapping[str, Any]], names: Iterable[str]
) -> float | None:
    """How far the nearest training context of ``context``'s job lies (``property_distance``
    over ``names``); None where the job has none."""
    found = job_distances(context, curves, names)
    return min(found) if found else None


def job_distances(
    context: Mapping[str, str | float], curves: Sequence[Mapping[str, Any]], names: Iterable[str]
) -> list[float]:
    """``property_distance`` over ``names`` from ``context`` to each training context of its job
    in ``curves`` (entries {"context": properties, ...}), in their order."""
    names = list(names)
    job = context.get("job_type")
    return [
        property_distance(context, c["context"], names) for c in curves if c["context"].get("job_type") == job
    ]


def nearest_curve(
    context: Mapping[str, str | float],
    curves: Sequence[Mapping[str, Any]],
    grid: Sequence[float],
    names: Iterable[str],
    align: str | None = None,
    twin_names: Iterable[str] | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """(log scale-outs, mean log runtime) of the training contexts of ``context``'s job type,
    weighted by exp(-distance / NEAREST_LENGTH) (``property_distance`` over ``names``), on the
    scale-outs of ``grid`` all of them measured; None without such contexts or common scale-outs.

    ``align``: a property (see ``ALIGNMENTS``) in whose ratio each training context's curve is
    carried over instead: at scale-out n ``context`` stands where a training context stood at
    n · its value / the context's value of ``align``. The curve then lies on the scale-outs every
    context that matters covers, at the points each of them measured (None where they overlap at
    fewer than two, or a context does not give ``align``).

    ``curves``: one entry per training context, {"context": properties, "log_runtime": mean log
    runtime per scale-out of ``grid`` (None where it had no run)}.

    ``twin_names``: the properties a twin agrees in (``nearest_weight``); where some training
    contexts lie at distance 0 in them, their curve alone: the others stand in for a measurement
    the twins are."""
    job = context.get("job_type")
    same = [c for c in curves if c["context"].get("job_type") == job]
    if not same:
        return None
    values = np.array([[np.nan if v is None else v for v in c["log_runtime"]] for c in same], dtype=float)
    distance = np.array(job_distances(context, same, names))
    weight = np.exp(-(distance - distance.min()) / NEAREST_LENGTH)
    # the scale-outs every context that matters measured (weight ≥ 1 %): one curve, one shape
    matters = weight >= 0.01
    if twin_names is not None:
        twins = np.array(job_distances(context, same, twin_names)) == 0
        matters = twins if twins.any() else matters
    log_grid = np.log(np.asarray(grid, dtype=float))
    if align is not None:
        return _aligned_curve(
            context,
            [c for c, m in zip(same, matters, strict=True) if m],
            values[matters],
            weight[matters],
            log_grid,
            align,
        )
    common = np.all(np.isfinite(values[matters]), axis=0)
    if common.sum() < 2:
        return None
    log_n = log_grid[common]
    mean = np.average(values[matters][:, common], axis=0, weights=weight[matters])
    return log_n, mean


def twin_curve(
    context: Mapping[str, str | float],
    curves: Sequence[Mapping[str, Any]],
    grid: Sequence[float],
    names: Iterable[str],
    ratio_names: Iterable[str],
) -> tuple[np.ndarray, np.ndarray] | None:
    """For a context the model knows: (log scale-outs, mean log runtime) of its twins, the training
    contexts of its job whose ``ratio_names`` (``features.DERIVED`` ratios the context gives: input
    per node's memory, per core) equal its own, weighted by how near they lie in ``names``
    (``nearest_curve``); None without one. Equal ratios put the same input on a worker at every
    scale-out, so a memory spill sets in at the same scale-out: the step a positive mix of the
    basis cannot draw (s21: ×1.8 once input per worker > 60 % of a node's memory) is measured
    there. (Other properties move the level, which the context's runs set, or the split of work,
    which the leave-one-scale-out weight judges.)"""
    ratio_names, names = list(ratio_names), list(names)
    if not ratio_names:
        return None
    twins = [
        c
        for c in curves
        if c["context"].get("job_type") == context.get("job_type")
        # (equal up to rounding: the same ratio of other inputs)
        and property_distance(context, c["context"], ratio_names) < 1e-9
        # not the context itself (a store's context trains the model it is then fine-tuned in):
        # its curve there is its runs, which would then check themselves
        and property_distance(context, c["context"], names) > 0
    ]
    return nearest_curve(context, twins, grid, names) if twins else None


def _aligned_curve(
    context: Mapping[str, str | float],
    same: Sequence[Mapping[str, Any]],
    values: np.ndarray,
    weight: np.ndarray,
    log_grid: np.ndarray,
    align: str,
) -> tuple[np.ndarray, np.ndarray] | None:
    own = context.get(align)
    theirs = [c["context"].get(align) for c in same]
    if not _positive(own) or not all(_positive(v) for v in theirs):
        return None
    shifts = np.log(np.asarray(theirs, dtype=float) / float(own))  # type: ignore[arg-type]
    points = [log_grid[np.isfinite(row)] - shift for row, shift in zip(values, shifts, strict=True)]
    if any(len(p) < 2 for p in points):
        return None
    lo, hi = max(p[0] for p in points), min(p[-1] for p in points)
    at = np.unique(np.concatenate(points).round(12))
    at = at[(at >= lo - 1e-9) & (at <= hi + 1e-9)]
    if len(at) < 2:
        return None
    rows = [np.interp(at, p, row[np.isfinite(row)]) for p, row in zip(points, values, strict=True)]
    return at, np.average(rows, axis=0, weights=weight)


def _positive(value: object) -> bool:
    return isinstance(value, float | int) and not isinstance(value, bool) and value > 0


def combine_nearest(
    candidates: Sequence[tuple[np.ndarray, np.ndarray]],
    network_at: Callable[[np.ndarray], np.ndarray],
    scale_outs: np.ndarray,
    log_y: np.ndarray,
    noise_sd: float,
    run_sd: float | None = None,
    refit_split: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """One curve (log scale-outs, log runtime) from candidate nearest curves, each rescaled to the
    runs (``scale_outs``, ``log_y``) and weighted by how well its shape then fits them:
    exp(-Σ residual² / (2 noise_sd²)), a likelihood with equal prior odds (one run fits every
    candidate exactly: a level says nothing of the shape, and they count alike). The rescaling
    weighs each run by 1 / (run_sd² + the candidates' disagreement on the shape there): ``run_sd``
    is the runs' own scatter (the training runs' run-to-run noise; ``noise_sd`` where not given),
    not fine-tuning's likelihood width, which also holds how far the network's curves missed
    out of fold (a job pre-trained on two contexts: 0.2-0.4 in log) and would drown the
    candidates' disagreement, letting a run where they disagree move the level as much as one
    where they agree.
    ``network_at``: the network's log runtime at given scale-outs, which each candidate follows
    beyond its own scale-outs (``nearest_log_runtime``). The result lies on the union of the
    candidates' points; beyond them every candidate follows the network's shape, and so does
    their mixture. ``refit_split``: runs a doubling apart re-fit each candidate's split of serial
    and parallel work (``amdahl_refit``); False for a twin's curve (``nearest_weight``), which
    did the context's own work."""
    ns = np.asarray(scale_outs, dtype=float)
    at = np.unique(np.concatenate([log_n for log_n, _ in candidates]))
    network_runs, network_points = network_at(ns), network_at(np.exp(at))
    ends = [network_at(np.exp(log_n[[0, -1]])) for log_n, _ in candidates]
    at_runs = np.stack(
        [
            nearest_log_runtime(log_n, curve, network_runs, end, ns)
            for (log_n, curve), end in zip(candidates, ends, strict=True)
        ]
    )
    # Where the candidates disagree on the shape (drawn from the largest scale-out run, where the
    # input per node's memory is least and the curves agree most) a run says less of the level:
    # a run in a cliff that only one candidate has must not shift the whole curve by its height.
    shape = at_runs - at_runs[:, [int(np.argmax(ns))]]
    variance = (noise_sd if run_sd is None else run_sd) ** 2 + shape.var(axis=0)
    # How far a cliff rises is the context's own (C3O's kmeans on one machine type: 2 to 7.5× from
    # 4 nodes to 2, with its input and k): a run where a candidate spills says how deep the cliff
    # is, not where the rest of the curve lies. Its level counts only when every run is in one.
    rises = np.array([superlinear_rise(log_n, curve, ns) for log_n, curve in candidates])
    spilling = np.any(rises > noise_sd, axis=0)
    # the candidates' weights: their own shapes' misfit (a re-fitted split fits any curve's runs)
    shapes_at_runs = at_runs
    if refit_split and len(np.unique(ns)) >= MIN_SCALE_OUTS_TO_CORRECT:
        # the split is read off runs no candidate sees a cliff at, at the runs' own noise (where one
        # does, a run says how deep the context's cliff is), and inside each candidate's points
        scatter = noise_sd if run_sd is None else run_sd
        clear = ~np.any(rises > scatter, axis=0)
        refits = [
            amdahl_refit(
                log_n,
                curve,
                fitted,
                ns,
                log_y,
                scatter,
                clear & (np.log(ns) >= log_n[0] - 1e-9) & (np.log(ns) <= log_n[-1] + 1e-9),
            )
            for (log_n, curve), fitted in zip(candidates, at_runs, strict=True)
        ]
        candidates = [
            (log_n, curve + on_curve)
            for (log_n, curve), (on_curve, _) in zip(candidates, refits, strict=True)
        ]
        at_runs = at_runs + np.stack([on_runs for _, on_runs in refits])
    if not spilling.all():
        variance = np.where(spilling, np.inf, variance)
    curves, misfit = [], []
    for (log_n, curve), end, fitted, shaped in zip(candidates, ends, at_runs, shapes_at_runs, strict=True):
        residual = log_y - shaped
        shift = float(np.sum(residual / variance) / np.sum(1 / variance))
        # the shape's evidence: its misfit after that level, at the runs' own noise
        misfit.append(float(np.sum((residual - shift) ** 2)))
        residual = log_y - fitted
        shift = float(np.sum(residual / variance) / np.sum(1 / variance))
        curves.append(nearest_log_runtime(log_n, curve, network_points, end, np.exp(at)) + shift)
    weight = _softmax(-np.asarray(misfit) / (2 * noise_sd**2))
    return at, weight @ np.stack(curves)


def _fit_serial_parallel(scale_outs: np.ndarray, runtime: np.ndarray, excess: np.ndarray) -> np.ndarray:
    """(serial, parallel) ≥ 0 with (serial + parallel / n) × ``excess`` closest to ``runtime`` in
    relative terms (each point's error over its runtime): exact non-negative least squares on two
    columns (both, either alone)."""
    x = np.stack([excess, excess / scale_outs], axis=-1) / runtime[:, None]
    y = np.ones_like(runtime)
    best, best_sse = np.zeros(2), np.inf
    for cols in ([0, 1], [0], [1]):
        theta = np.zeros(2)
        theta[cols] = np.linalg.lstsq(x[:, cols], y, rcond=None)[0]
        sse = float(np.sum((x @ theta - y) ** 2))
        if np.all(theta >= 0) and sse < best_sse * (1 - 1e-9):
            best, best_sse = theta, sse
    return best


def amdahl_refit(
    log_n: np.ndarray,
    log_runtime: np.ndarray,
    at_runs: np.ndarray,
    scale_outs: np.ndarray,
    log_y: np.ndarray,
    run_sd: float,
    usable: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """How far (log) a candidate nearest curve moves, at its points and at the runs, when the runs'
    own split of serial and parallel work replaces the candidate's: the candidate is read as
    (serial + parallel / n) × an excess (its cliffs, its overheads: what that split does not draw),
    the excess is kept and the split re-fitted to the runs (``at_runs``: the candidate at
    ``scale_outs``). Needs runs at two scale-outs; the split cannot scale a curve faster than
    linearly nor make it rise, so the runs' noise moves it within those bounds only."""
    ns = np.asarray(scale_outs, dtype=float)
    # the parallel part halves over a doubling of the scale-out: between closer runs the split
    # is within their noise, and extrapolated from them it is anything
    if not np.any(usable) or ns[usable].max() < 2 * ns[usable].min():
        return np.zeros_like(log_n), np.zeros_like(ns)
    n = np.exp(log_n)
    runtime = np.exp(log_runtime)
    own = _fit_serial_parallel(n, runtime, np.ones_like(n))

    def amdahl(theta: np.ndarray, at: np.ndarray) -> np.ndarray:
        return np.log(np.maximum(theta[0] + theta[1] / at, 1e-12))

    excess_runs = np.exp(at_runs - amdahl(own, ns))
    theirs = _fit_serial_parallel(ns[usable], np.exp(log_y[usable]), excess_runs[usable])
    if not np.any(theirs > 0):
        return np.zeros_like(log_n), np.zeros_like(ns)
    # the level is the combination's to fit (one shift per candidate): only the shape moves here
    move_runs = amdahl(theirs, ns) - amdahl(own, ns)
    level = float(np.mean(move_runs[usable]))

    def misfit(fitted: np.ndarray) -> float:
        residual = (log_y - fitted)[usable]
        return float(np.sum((residual - residual.mean()) ** 2))

    # Akaike weight of the re-fitted split (one parameter more) against the candidate's own, at the
    # runs' own scatter: runs its shape explains within their noise keep it
    gain = (misfit(at_runs) - misfit(at_runs + move_runs)) / run_sd**2 - 2.0
    weight = 1.0 / (1.0 + math.exp(-min(max(gain / 2, -50.0), 50.0)))
    return weight * (amdahl(theirs, n) - amdahl(own, n) - level), weight * (move_runs - level)


def superlinear_rise(log_n: np.ndarray, log_runtime: np.ndarray, scale_outs: np.ndarray) -> np.ndarray:
    """Per scale-out n of ``scale_outs``, how far a candidate curve (``log_n``, ``log_runtime``)
    falls faster than linearly from n to 2n (log units; 0 where it falls at most linearly, and
    where it does not reach from n to 2n).

    No job runs faster than linearly in its nodes; a curve that does was slowed at the smaller
    scale-out by something else: its input spilling out of memory. The span is a doubling, not
    the next measured point: a mean curve's neighbouring points differ by their noise too."""
    x = np.log(np.asarray(scale_outs, dtype=float))
    double = x + math.log(2.0)
    inside = (x >= log_n[0] - 1e-9) & (double <= log_n[-1] + 1e-9)
    fall = np.interp(x, log_n, log_runtime) - np.interp(double, log_n, log_runtime)
    return np.where(inside, np.maximum(fall - math.log(2.0), 0.0), 0.0)


def twin_log_runtime(
    log_n: np.ndarray,
    log_runtime: np.ndarray,
    scale_outs: np.ndarray,
    network_at: Callable[[np.ndarray], np.ndarray],
    network: np.ndarray | None = None,
) -> np.ndarray:
    """A twin's (or the nearest contexts') curve (log scale-outs, mean log runtime) at
    ``scale_outs``, beyond its scale-outs the network's shape (``nearest_log_runtime``):
    ``network_at`` gives the network's log runtime at given scale-outs (asked at the curve's first
    and last), ``network`` its values at ``scale_outs`` where the caller has them already. The
    one reading of a twin's curve that fine-tuning, the prediction and calibration's simulation
    of them share."""
    at = np.asarray(scale_outs, dtype=np.float64)
    ends = network_at(np.exp(log_n[[0, -1]]))
    return nearest_log_runtime(log_n, log_runtime, network_at(at) if network is None else network, ends, at)


def nearest_log_runtime(
    log_n: np.ndarray,
    log_runtime: np.ndarray,
    network: np.ndarray,
    network_ends: np.ndarray,
    scale_outs: np.ndarray,
) -> np.ndarray:
    """The nearest contexts' curve at ``scale_outs``: linear in log-log between their scale-outs,
    and beyond them the network's curve (``network`` at ``scale_outs``, ``network_ends`` at the
    first and last of ``log_n``) offset to meet it there: no power law is extrapolated from two
    end points."""
    x = np.log(np.asarray(scale_outs, dtype=float))
    out = np.interp(x, log_n, log_runtime)
    lo, hi = x < log_n[0], x > log_n[-1]
    out[lo] = network[lo] + (log_runtime[0] - network_ends[0])
    out[hi] = network[hi] + (log_runtime[-1] - network_ends[1])
    return out
