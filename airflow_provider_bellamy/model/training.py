"""Pre-training, fine-tuning and calibration of the Bellamy ensemble.

The ensemble is a K-fold over *contexts*: member m never sees the contexts of fold m,
so its predictions for them are honest out-of-fold predictions. They serve three
purposes at once: early stopping, the prior width used by fine-tuning, and the
split-conformal residuals that make the confidence of a sizing decision mean what it
says.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from airflow_provider_bellamy.model.features import FeatureSchema, scale_out_basis
from airflow_provider_bellamy.model.network import BellamyNet, log_runtime

MAX_K = 5  # fine-tuning sizes the calibration tables cover; more points use MAX_K's table
QUANTILE_GRID = np.linspace(0.0, 1.0, 201)


@dataclass
class TrainingConfig:
    members: int = 5
    max_epochs: int = 3000
    min_epochs: int = 300
    patience: int = 400
    eval_every: int = 10
    lr: float = 4e-3
    weight_decay: float = 1e-5
    huber_delta: float = 0.03
    ae_weight: float = 0.1
    code: int = 6
    hidden: int = 48
    time_budget_s: float | None = None
    device: str = "auto"

    def resolve_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        return torch.device(self.device)


@dataclass
class EncodedRuns:
    """Runs grouped by context, encoded once."""

    vectors: torch.Tensor  # [C, P, D]
    mask: torch.Tensor  # [C, P]
    ctx_index: torch.Tensor  # [N] context of each run
    basis: torch.Tensor  # [N, N_BASIS]
    log_y: torch.Tensor  # [N]
    scale_out: np.ndarray  # [N]
    context_keys: list[str] = field(default_factory=list)


@contextmanager
def single_thread() -> Iterator[None]:
    """Run torch on one intra-op thread for the duration.

    The networks are tiny: their cost is per-operation overhead, and a second thread
    only adds synchronisation. On a loaded 2-core machine, measured 20x slower with two.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def encode_runs(
    schema: FeatureSchema,
    contexts: Sequence[dict[str, str | float]],
    context_keys: Sequence[str],
    scale_outs: np.ndarray,
    runtimes: np.ndarray,
    device: torch.device,
) -> EncodedRuns:
    uniq: dict[str, int] = {}
    ctx_list: list[dict[str, str | float]] = []
    idx = np.empty(len(context_keys), dtype=np.int64)
    for i, key in enumerate(context_keys):
        if key not in uniq:
            uniq[key] = len(ctx_list)
            ctx_list.append(contexts[i])
        idx[i] = uniq[key]
    vectors, mask = schema.encode(ctx_list)
    return EncodedRuns(
        vectors=torch.as_tensor(vectors, device=device),
        mask=torch.as_tensor(mask, device=device),
        ctx_index=torch.as_tensor(idx, device=device),
        basis=torch.as_tensor(scale_out_basis(scale_outs), dtype=torch.float32, device=device),
        log_y=torch.as_tensor(np.log(runtimes), dtype=torch.float32, device=device),
        scale_out=np.asarray(scale_outs),
        context_keys=list(uniq),
    )


def context_folds(n_contexts: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    order = rng.permutation(n_contexts)
    return [np.sort(order[i::k]) for i in range(k)]


def _init_head(net: BellamyNet, mean_log_y: torch.Tensor, ref_n: float) -> None:
    # Start every context at its member's mean runtime, split over the terms at a typical n.
    phi = scale_out_basis(np.array([ref_n]))[0]
    phi[phi <= 0] = 1.0
    offset = torch.as_tensor(-np.log(len(phi) * phi), dtype=torch.float32)
    with torch.no_grad():
        net.head.weight.mul_(0.1)
        net.head.bias.copy_(mean_log_y.unsqueeze(1).cpu() + offset)


def train_ensemble(
    data: EncodedRuns,
    folds: list[np.ndarray],
    *,
    seed: int,
    config: TrainingConfig,
    deadline: float | None,
) -> tuple[BellamyNet, list[dict[str, float]]]:
    """Train ``config.members`` members at once; member m holds out the contexts of fold m
    (cyclically) and stops early on them; with one fold of no contexts, on its training loss."""
    device = data.vectors.device
    m_count, n_ctx = config.members, data.vectors.shape[0]
    net = BellamyNet(
        data.vectors.shape[1],
        members=m_count,
        code=config.code,
        hidden=config.hidden,
        seeds=[seed * 1000 + m for m in range(m_count)],
    ).to(device)
    held = torch.zeros(m_count, n_ctx, dtype=torch.bool, device=device)
    for m in range(m_count):
        fold = folds[m % len(folds)]
        if len(fold):
            held[m, torch.as_tensor(fold, device=device)] = True
    w_val = held[:, data.ctx_index].float()  # [M, N]
    w_tr = 1.0 - w_val
    has_val = bool(w_val.sum(1).min() > 0)
    _init_head(net, (data.log_y * w_tr).sum(1) / w_tr.sum(1), float(np.median(data.scale_out)))
    params = dict(net.named_parameters())
    opt = torch.optim.Adam(params.values(), lr=config.lr, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=15, min_lr=config.lr / 50)
    best = {k: v.detach().clone() for k, v in params.items()}
    best_val = torch.full((m_count,), float("inf"))
    best_epoch = torch.zeros(m_count)
    basis = data.basis.unsqueeze(0)
    delta = config.huber_delta
    epoch = 0
    for epoch in range(1, config.max_epochs + 1):
        opt.zero_grad(set_to_none=True)
        h, recon = net.log_weights(data.vectors, data.mask)
        err = log_runtime(h[:, data.ctx_index], basis) - data.log_y  # [M, N]
        absolute = err.abs()
        huber = torch.where(absolute < delta, 0.5 * err**2, delta * (absolute - 0.5 * delta))
        # a sum over members of per-member means: each member learns as if trained alone
        loss = ((huber * w_tr).sum(1) / w_tr.sum(1)).sum() + config.ae_weight * recon
        loss.backward()
        opt.step()
        if epoch % config.eval_every:
            continue
        with torch.no_grad():
            if has_val:
                h, _ = net.log_weights(data.vectors, data.mask)
                err = log_runtime(h[:, data.ctx_index], basis) - data.log_y
                val = ((err.abs() * w_val).sum(1) / w_val.sum(1)).cpu()
            else:
                val = ((absolute * w_tr).sum(1) / w_tr.sum(1)).detach().cpu()
            sched.step(float(val.mean()))
            improved = val < best_val - 1e-5
            if improved.any():
                sel = improved.to(device)
                for k, v in params.items():
                    best[k][sel] = v.detach()[sel]
                best_val = torch.where(improved, val, best_val)
                best_epoch = torch.where(improved, torch.full_like(best_epoch, epoch), best_epoch)
        if epoch >= config.min_epochs and bool(((epoch - best_epoch) >= config.patience).all()):
            break
        if deadline is not None and time.monotonic() > deadline:
            break
    with torch.no_grad():
        for k, v in params.items():
            v.copy_(best[k])
    net.eval()
    stats = [
        {"epochs": float(epoch), "best_epoch": float(best_epoch[m]), "val_mae_log": float(best_val[m])}
        for m in range(m_count)
    ]
    return net, stats


def fit_delta(
    h0: torch.Tensor,
    basis: torch.Tensor,
    log_y: torch.Tensor,
    weight: torch.Tensor,
    *,
    noise_sd: float,
    prior_precision: torch.Tensor,
    iterations: int = 12,
) -> torch.Tensor:
    """MAP estimate of the head correction Δ for a batch of independent problems.

    Fine-tuning the head for ONE context changes its output h = W z + b only through
    Δh = ΔW z + Δb, so with a pull towards the pre-trained weights it is exactly a
    Gaussian-prior fit of Δh: Δ ~ N(0, P⁻¹), log runtime ~ N(pred, noise_sd²).
    Solved by Gauss–Newton, batched.

    h0 [B,F], basis [B,K,F], log_y [B,K], weight [B,K] (0 for padding),
    prior_precision [F,F] → Δ [B,F].
    """
    delta = torch.zeros_like(h0)
    if weight.sum() == 0:
        return delta
    log_phi = torch.log(basis.clamp(min=1e-12))
    prec = prior_precision.to(h0)
    inv_noise = 1.0 / noise_sd**2
    for _ in range(iterations):
        logits = (h0 + delta).unsqueeze(1) + log_phi  # [B,K,F]
        pred = torch.logsumexp(logits, dim=-1)  # [B,K]
        jac = torch.softmax(logits, dim=-1)  # d pred / d delta
        resid = (pred - log_y) * weight
        jtj = torch.einsum("bki,bkj,bk->bij", jac, jac, weight) * inv_noise + prec
        grad = torch.einsum("bki,bk->bi", jac, resid) * inv_noise + delta @ prec
        step = torch.linalg.solve(jtj, grad.unsqueeze(-1)).squeeze(-1)
        delta = delta - step
    return delta


# Prior sd of a pure rescaling of the curve (log space), added to the learned covariance.
# The learned part only knows how contexts of the training data differ; a context from
# another environment (other hardware, a laptop, a different cluster manager) can be off
# by a constant factor the training data never showed. One sd = a factor of e.
RESCALE_PRIOR_SD = 1.0


# Prior probability that a context comes from an environment the training data never showed.
OTHER_ENVIRONMENT_PRIOR = 0.02


def other_environment_covariance(learned_cov: torch.Tensor) -> torch.Tensor:
    """The learned covariance plus a broad rescale direction: along Δ = c·(1, …, 1) every
    term moves together, i.e. the curve is multiplied by e^c."""
    ones = torch.ones(learned_cov.shape[0], 1, dtype=learned_cov.dtype)
    return learned_cov + RESCALE_PRIOR_SD**2 * (ones @ ones.T)


def _log_evidence(
    h0: torch.Tensor,
    log_phi: torch.Tensor,
    log_y: torch.Tensor,
    weight: torch.Tensor,
    cov: torch.Tensor,
    noise_sd: float,
) -> torch.Tensor:
    """log p(runs | prior) of the model linearised at Δ = 0, per problem: r ~ N(0, J Σ Jᵀ + σ² I)."""
    logits = h0.unsqueeze(1) + log_phi
    resid = (log_y - torch.logsumexp(logits, dim=-1)) * weight
    jac = torch.softmax(logits, dim=-1) * weight.unsqueeze(-1)
    k = log_y.shape[1]
    eye = torch.eye(k, dtype=h0.dtype, device=h0.device)
    # padded points: unit variance, zero residual → they add nothing
    cov_y = jac @ cov.to(h0) @ jac.transpose(1, 2) + eye * (
        noise_sd**2 * weight.unsqueeze(-1) + (1 - weight).unsqueeze(-1)
    )
    chol = torch.linalg.cholesky(cov_y)
    alpha = torch.cholesky_solve(resid.unsqueeze(-1), chol).squeeze(-1)
    return -0.5 * (resid * alpha).sum(-1) - torch.log(torch.diagonal(chol, dim1=1, dim2=2)).sum(-1)


def fit_delta_averaged(
    h0: torch.Tensor,
    basis: torch.Tensor,
    log_y: torch.Tensor,
    weight: torch.Tensor,
    *,
    noise_sd: float,
    learned_cov: torch.Tensor,
) -> torch.Tensor:
    """Fine-tuning under two hypotheses, averaged by how well each explains the runs.

    "like the training contexts": the learned prior. "another environment": the learned
    prior plus a broad rescale (``RESCALE_PRIOR_SD``). A context off by 10× (a laptop, a
    different cluster) is explained only by the second, and one run rescales the curve;
    ordinary noise is explained better by the first, and a single noisy run cannot drag
    the curve away. Weights: prior odds × marginal likelihoods (Bayesian model averaging).
    """
    if weight.sum() == 0:
        return torch.zeros_like(h0)
    other_cov = other_environment_covariance(learned_cov)
    fits, log_post = [], []
    log_phi = torch.log(basis.clamp(min=1e-12))
    for cov, prior in ((learned_cov, 1 - OTHER_ENVIRONMENT_PRIOR), (other_cov, OTHER_ENVIRONMENT_PRIOR)):
        fits.append(
            fit_delta(h0, basis, log_y, weight, noise_sd=noise_sd, prior_precision=torch.linalg.inv(cov))
        )
        log_post.append(_log_evidence(h0, log_phi, log_y, weight, cov, noise_sd) + float(np.log(prior)))
    w = torch.softmax(torch.stack(log_post, dim=-1), dim=-1)  # [B, 2]
    return w[:, :1] * fits[0] + w[:, 1:] * fits[1]


def empirical_prior_covariance(deltas: torch.Tensor, floor_sd: float = 0.02) -> torch.Tensor:
    """Covariance of the head corrections that fully observed contexts needed.

    Shrunk half-way towards its diagonal (few contexts estimate a 6×6 matrix poorly)
    and floored, so that it stays invertible.
    """
    centred = deltas - deltas.mean(0, keepdim=True)
    cov = centred.T @ centred / max(deltas.shape[0] - 1, 1)
    cov = 0.5 * cov + 0.5 * torch.diag(torch.diag(cov))
    return cov + torch.eye(cov.shape[0]) * floor_sd**2


def pick_points(scale_outs: np.ndarray, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Indices of one run at each of k distinct random scale-outs, and of the runs at the others."""
    distinct = np.unique(scale_outs)
    chosen = rng.choice(distinct, size=min(k, len(distinct)), replace=False) if k else np.array([])
    picked = np.array([rng.choice(np.flatnonzero(scale_outs == s)) for s in chosen], dtype=np.int64)
    test = np.flatnonzero(~np.isin(scale_outs, chosen))
    return picked, test


def quantile_table(residuals: np.ndarray) -> list[float]:
    return [float(v) for v in np.quantile(residuals, QUANTILE_GRID)] if len(residuals) else []


def noise_sd_of(data: EncodedRuns) -> float:
    """Run-to-run noise of log runtime: spread of repetitions at one (context, scale-out)."""
    keys = data.ctx_index.cpu().numpy() * 1_000_003 + data.scale_out.astype(np.int64)
    y = data.log_y.cpu().numpy()
    devs = []
    for key in np.unique(keys):
        sel = y[keys == key]
        if len(sel) > 1:
            devs.extend(sel - sel.mean())
    if len(devs) < 5:
        return 0.05
    return float(np.clip(np.std(devs), 0.01, 0.5))
