"""Fine-tuning one context: a Bayesian fit of the head's output correction Δh, in numpy.

Fine-tuning the head for ONE context changes its output h = W z + b only through
Δh = ΔW z + Δb, so with a pull towards the pre-trained weights it is exactly a
Gaussian-prior fit of Δh: Δ ~ N(0, Σ), log runtime ~ N(pred(h0 + Δ), σ²). Six numbers
per member: solved in milliseconds, batched over members (fine-tuning) or over many
held-out contexts at once (calibration), without torch.
"""

from __future__ import annotations

import numpy as np

from airflow_provider_bellamy.model.inference import logsumexp

# Prior sd of a pure rescaling of the curve (log space), added to the learned covariance.
# The learned part only knows how contexts of the training data differ; a context from
# another environment (other hardware, a laptop, a different cluster manager) can be off
# by a constant factor the training data never showed. One sd = a factor of e.
RESCALE_PRIOR_SD = 1.0

# Prior probability that a context comes from an environment the training data never showed.
OTHER_ENVIRONMENT_PRIOR = 0.02


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
) -> np.ndarray:
    """Fine-tuning under two hypotheses, averaged by how well each explains the runs.

    "like the training contexts": the learned prior. "another environment": the learned
    prior plus a broad rescale (``RESCALE_PRIOR_SD``). A context off by 10× (a laptop, a
    different cluster) is explained only by the second, and one run rescales the curve;
    ordinary noise is explained better by the first, and a single noisy run cannot drag
    the curve away. Weights: prior odds × marginal likelihoods (Bayesian model averaging).
    """
    h0 = np.asarray(h0, dtype=np.float64)
    if weight.sum() == 0:
        return np.zeros_like(h0)
    log_phi = np.log(np.maximum(basis, 1e-12))
    fits, log_post = [], []
    for cov, prior in (
        (learned_cov, 1 - OTHER_ENVIRONMENT_PRIOR),
        (other_environment_covariance(learned_cov), OTHER_ENVIRONMENT_PRIOR),
    ):
        fits.append(
            fit_delta(h0, basis, log_y, weight, noise_sd=noise_sd, prior_precision=np.linalg.inv(cov))
        )
        log_post.append(log_evidence(h0, log_phi, log_y, weight, cov, noise_sd) + np.log(prior))
    w = _softmax(np.stack(log_post, axis=-1))  # [B, 2]
    return w[:, :1] * fits[0] + w[:, 1:] * fits[1]


def empirical_prior_covariance(deltas: np.ndarray, floor_sd: float = 0.02) -> np.ndarray:
    """Covariance of the head corrections that fully observed contexts needed.

    Shrunk half-way towards its diagonal (few contexts estimate a 6×6 matrix poorly)
    and floored, so that it stays invertible.
    """
    centred = deltas - deltas.mean(0, keepdims=True)
    cov = centred.T @ centred / max(deltas.shape[0] - 1, 1)
    cov = 0.5 * cov + 0.5 * np.diag(np.diag(cov))
    return cov + np.eye(cov.shape[0]) * floor_sd**2
