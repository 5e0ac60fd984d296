"""Pre-training the Bellamy ensemble: the one part of the model that needs torch (autograd).

The ensemble is a K-fold over *contexts*: member m never sees the contexts of fold m,
so its predictions for them are honest out-of-fold predictions. They serve three
purposes at once: early stopping, the prior width used by fine-tuning, and the
split-conformal residuals that make the confidence of a sizing decision mean what it
says (``calibration.py``).
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
    # Probability that pre-training hides one property of one context from one member in an
    # epoch (independently), among the properties whose values the model may meet unknown and
    # must answer without (FeatureSchema.hidden_in_training: strings that took several values):
    # the network learns what a context predicts without it, so a value it never saw (a machine
    # type, an environment) is read as unknown rather than extrapolated (features.is_known).
    # Numbers that varied are always read by their value, a property with one value as that
    # value: hiding every property cost in-distribution accuracy (docs/model.md, "Behind the
    # constants").
    property_dropout: float = 0.1
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
    droppable: torch.Tensor | None = None  # [P] properties property dropout may hide


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
        droppable=torch.as_tensor(
            [schema.hidden_in_training(name) for name in schema.properties], dtype=torch.bool, device=device
        ),
    )


def context_folds(n_contexts: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    order = rng.permutation(n_contexts)
    return [np.sort(order[i::k]) for i in range(k)]


def job_folds(job_of_context: Sequence[str], k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """k folds of whole job types (context indices): the member of a fold never sees a run of
    its job types, so its predictions for them are what a job type the model never saw gets."""
    jobs = np.array(sorted(set(job_of_context)))
    order = rng.permutation(len(jobs))
    of_context = np.asarray(job_of_context)
    return [np.flatnonzero(np.isin(of_context, jobs[order[i::k]])) for i in range(k)]


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
    cross_fitted: list[np.ndarray] | None = None,
) -> tuple[BellamyNet, list[dict[str, float]]]:
    """Train ``config.members`` members at once; member m holds out the contexts of fold m
    (cyclically) and stops early on them; with one fold of no contexts, on its training loss.

    ``cross_fitted`` (a list): receives the members' out-of-fold heads [M, C, F] for calibration.
    A member keeps the epoch best on its whole fold, so that fold's errors at that epoch are the
    smallest of the epochs tried: residuals too small to calibrate a band on (the selection is
    fitted to them). Each fold is split into two halves (``split_fold``) whose best epochs are
    tracked apart, and a context's head comes from the epoch chosen on the other half: an error
    of an epoch chosen without it. The member's parameters stay those best on the whole fold.
    NaN where the kept parameters' heads stand: contexts outside the folds, and folds of one
    context (which cannot be split: their selection stays fitted to them).
    """
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
    # per half of each member's fold (0 or 1; -1: outside the fold or unsplit): the best error
    # on it so far and the heads at that epoch (``cross_fitted``)
    half = torch.full((m_count, n_ctx), -1, dtype=torch.long, device=device)
    if cross_fitted is not None:
        for m in range(m_count):
            first, second = split_fold(folds[m % len(folds)], seed * 1000 + m)
            if len(first) and len(second):
                half[m, torch.as_tensor(first, device=device)] = 0
                half[m, torch.as_tensor(second, device=device)] = 1
    w_half = [(half[:, data.ctx_index] == j).float() for j in (0, 1)]  # [M, N] each
    split = [bool((w.sum(1) > 0).any()) for w in w_half]
    best_half_val = [torch.full((m_count,), float("inf")) for _ in (0, 1)]
    best_half_h: list[torch.Tensor | None] = [None, None]
    basis = data.basis.unsqueeze(0)
    delta = config.huber_delta
    dropout = config.property_dropout if data.droppable is not None and bool(data.droppable.any()) else 0.0
    drop_gen = torch.Generator(device=device).manual_seed(seed * 1000 + 999)
    epoch = 0
    for epoch in range(1, config.max_epochs + 1):
        opt.zero_grad(set_to_none=True)
        keep = None
        if dropout > 0:
            draw = torch.rand((m_count, *data.mask.shape), generator=drop_gen, device=device)
            keep = ((draw >= dropout) | ~data.droppable).float()
        h, recon = net.log_weights(data.vectors, data.mask, keep)
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
                if all(split):
                    _track_halves(h, err.abs(), w_half, best_half_val, best_half_h)
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
    if cross_fitted is not None:
        heads = np.full((m_count, n_ctx, data.basis.shape[1]), np.nan)
        # a context of one half takes the heads of the epoch the other half chose
        for j in (0, 1):
            chosen = best_half_h[1 - j]
            if chosen is not None:
                mine = (half == j).cpu().numpy()
                heads[mine] = chosen.cpu().numpy().astype(np.float64)[mine]
        cross_fitted.append(heads)
    stats = [
        {"epochs": float(epoch), "best_epoch": float(best_epoch[m]), "val_mae_log": float(best_val[m])}
        for m in range(m_count)
    ]
    return net, stats


def split_fold(fold: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A fold's contexts in two random halves (sorted; the first the smaller); a fold of fewer
    than two contexts cannot be split: it is the first, the second is empty."""
    fold = np.asarray(fold, dtype=np.int64)
    if len(fold) < 2:
        return fold, fold[:0]
    order = np.random.default_rng([seed, 23]).permutation(len(fold))
    cut = len(fold) // 2
    return np.sort(fold[order[:cut]]), np.sort(fold[order[cut:]])


def _track_halves(
    h: torch.Tensor,
    absolute: torch.Tensor,
    w_half: list[torch.Tensor],
    best_val: list[torch.Tensor],
    best_h: list[torch.Tensor | None],
) -> None:
    """Per half of each member's fold: keep the heads of the epoch with the lowest mean absolute
    error on it (the same rule as the whole fold's); members whose fold is unsplit never improve."""
    for j, w in enumerate(w_half):
        val = ((absolute * w).sum(1) / w.sum(1).clamp(min=1.0)).cpu()
        improved = (val < best_val[j] - 1e-5) & (w.sum(1).cpu() > 0)
        if best_h[j] is None:
            best_h[j] = h.detach().clone()
        if improved.any():
            sel = improved.to(h.device)
            best_h[j][sel] = h.detach()[sel]  # type: ignore[index]
            best_val[j] = torch.where(improved, val, best_val[j])


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
