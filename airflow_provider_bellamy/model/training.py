"""Pre-training, fine-tuning and calibration of the Bellamy ensemble.

The ensemble is a K-fold over *contexts*: member m never sees the contexts of fold m,
so its predictions for them are honest out-of-fold predictions. They serve three
purposes at once: early stopping, the prior width used by fine-tuning, and the
split-conformal residuals that make the confidence of a sizing decision mean what it
says.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

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


def _init_head(net: BellamyNet, mean_log_y: float, ref_n: float) -> None:
    # Start every context at the mean runtime, split over the four terms at a typical n.
    phi = scale_out_basis(np.array([ref_n]))[0]
    phi[phi <= 0] = 1.0
    with torch.no_grad():
        net.head.weight.mul_(0.1)
        net.head.bias.copy_(torch.as_tensor(mean_log_y - np.log(len(phi) * phi), dtype=torch.float32))


def train_member(
    data: EncodedRuns,
    train_ctx: np.ndarray,
    val_ctx: np.ndarray,
    *,
    seed: int,
    config: TrainingConfig,
    deadline: float | None,
) -> tuple[BellamyNet, dict[str, float]]:
    """Train one member on the runs of ``train_ctx``; stop early on ``val_ctx`` (if any)."""
    device = data.vectors.device
    torch.manual_seed(seed)
    net = BellamyNet(data.vectors.shape[1], code=config.code, hidden=config.hidden).to(device)
    in_train = torch.zeros(data.vectors.shape[0], dtype=torch.bool, device=device)
    in_train[torch.as_tensor(train_ctx, device=device)] = True
    run_train = in_train[data.ctx_index]
    run_val = ~run_train if len(val_ctx) else torch.zeros_like(run_train)
    y_tr = data.log_y[run_train]
    _init_head(net, float(y_tr.mean()), float(np.median(data.scale_out)))
    opt = torch.optim.Adam(net.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=15, min_lr=config.lr / 50)
    huber = nn.HuberLoss(delta=config.huber_delta)
    idx_tr, basis_tr = data.ctx_index[run_train], data.basis[run_train]
    idx_va, basis_va, y_va = data.ctx_index[run_val], data.basis[run_val], data.log_y[run_val]
    best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
    best_val, best_epoch, epoch = float("inf"), 0, 0
    for epoch in range(1, config.max_epochs + 1):
        net.train()
        opt.zero_grad(set_to_none=True)
        h, recon = net.log_weights(data.vectors, data.mask)
        pred = log_runtime(h[idx_tr], basis_tr)
        loss = huber(pred, y_tr) + config.ae_weight * recon
        loss.backward()
        opt.step()
        if epoch % config.eval_every == 0:
            with torch.no_grad():
                net.eval()
                if run_val.any():
                    h, _ = net.log_weights(data.vectors, data.mask)
                    val = float((log_runtime(h[idx_va], basis_va) - y_va).abs().mean())
                else:
                    val = float(loss)
            sched.step(val)
            if val < best_val - 1e-5:
                best_val, best_epoch = val, epoch
                best_state = {k: v.detach().clone() for k, v in net.state_dict().items()}
            elif epoch >= config.min_epochs and epoch - best_epoch >= config.patience:
                break
            if deadline is not None and time.monotonic() > deadline and epoch >= config.eval_every:
                break
    net.load_state_dict(best_state)
    net.eval()
    return net, {"epochs": float(epoch), "best_epoch": float(best_epoch), "val_mae_log": best_val}


def fit_delta(
    h0: torch.Tensor,
    basis: torch.Tensor,
    log_y: torch.Tensor,
    weight: torch.Tensor,
    *,
    noise_sd: float,
    prior_sd: float,
    iterations: int = 12,
) -> torch.Tensor:
    """MAP estimate of the head correction Δ for a batch of independent problems.

    Fine-tuning the head for ONE context changes its output h = W z + b only through
    Δh = ΔW z + Δb, so with an L2 pull towards the pre-trained weights it is exactly a
    Gaussian-prior fit of Δh ∈ R^N_BASIS. Solved by damped Gauss–Newton, batched.

    h0 [B,F], basis [B,K,F], log_y [B,K], weight [B,K] (0 for padding) → Δ [B,F].
    """
    delta = torch.zeros_like(h0)
    if weight.sum() == 0:
        return delta
    log_phi = torch.log(basis.clamp(min=1e-12))
    eye = torch.eye(h0.shape[-1], dtype=h0.dtype, device=h0.device)
    inv_noise, inv_prior = 1.0 / noise_sd**2, 1.0 / prior_sd**2
    for _ in range(iterations):
        logits = (h0 + delta).unsqueeze(1) + log_phi  # [B,K,F]
        pred = torch.logsumexp(logits, dim=-1)  # [B,K]
        jac = torch.softmax(logits, dim=-1)  # d pred / d delta
        resid = (pred - log_y) * weight
        jtj = torch.einsum("bki,bkj,bk->bij", jac, jac, weight) * inv_noise + eye * inv_prior
        grad = torch.einsum("bki,bk->bi", jac, resid) * inv_noise + delta * inv_prior
        step = torch.linalg.solve(jtj, grad.unsqueeze(-1)).squeeze(-1)
        delta = delta - step
    return delta


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
