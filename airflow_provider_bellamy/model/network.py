"""The Bellamy network, as an ensemble of M independent members evaluated in one graph.

property vectors ──► shared auto-encoder (code per property) ──► MLP ──► head ──► h (N_BASIS = 6 log-weights)
runtime(n) = Σ_i exp(h_i) · φ_i(n),  φ(n) = (1, 1/n, 1/n², 1/n⁴, log n, n)  (features.scale_out_basis)

The network maps a *context* to the coefficients of a scale-out basis. Keeping the
scale-out out of the MLP is deliberate: whatever the context, the predicted curve is a
non-negative mix of the terms distributed dataflow jobs are known to follow (fixed
cost, parallel work, memory pressure, coordination, per-node overhead), so
extrapolation beyond the scale-outs seen in training stays plausible, and fine-tuning
a context is a small, well-posed problem over the head's outputs.

Members share nothing but the graph: every weight has a leading member dimension, so
training five members costs about as much as training one (the models are tiny and
the cost is per-operation overhead, not arithmetic).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from airflow_provider_bellamy.model.features import PROPERTY_DIM

N_BASIS = 6


class EnsembleLinear(nn.Module):
    """M independent linear layers: [M, B, in] → [M, B, out]."""

    def __init__(self, members: int, d_in: int, d_out: int, generators: list[torch.Generator]) -> None:
        super().__init__()
        bound = 1.0 / math.sqrt(d_in)
        weight = torch.stack(
            [torch.empty(d_in, d_out).uniform_(-bound, bound, generator=g) for g in generators]
        )
        bias = torch.stack([torch.empty(d_out).uniform_(-bound, bound, generator=g) for g in generators])
        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias.unsqueeze(1), x, self.weight)


class BellamyNet(nn.Module):
    def __init__(
        self,
        n_properties: int,
        *,
        members: int = 1,
        code: int = 6,
        hidden: int = 48,
        seeds: list[int] | None = None,
    ) -> None:
        super().__init__()
        self.n_properties = n_properties
        self.members = members
        self.code = code
        self.hidden = hidden
        gens = [torch.Generator().manual_seed(s) for s in (seeds or list(range(members)))]
        ae_hidden = 16
        self.enc1 = EnsembleLinear(members, PROPERTY_DIM, ae_hidden, gens)
        self.enc2 = EnsembleLinear(members, ae_hidden, code, gens)
        self.dec1 = EnsembleLinear(members, code, ae_hidden, gens)
        self.dec2 = EnsembleLinear(members, ae_hidden, PROPERTY_DIM, gens)
        # one extra input per property: presence, so "absent" differs from a zero code
        self.body1 = EnsembleLinear(members, n_properties * (code + 1), hidden, gens)
        self.body2 = EnsembleLinear(members, hidden, hidden, gens)
        self.head = EnsembleLinear(members, hidden, N_BASIS, gens)
        self.act = nn.SELU()

    def log_weights(
        self, vectors: torch.Tensor, mask: torch.Tensor, keep: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """h [M, C, N_BASIS] for contexts vectors [C, P, D] / mask [C, P], and the members'
        mean auto-encoder reconstruction error over present properties. ``keep`` [M, C, P]:
        per member, the present properties the MLP reads (property dropout in pre-training)."""
        m, (c, p, d) = self.members, vectors.shape
        x = vectors.reshape(1, c * p, d).expand(m, -1, -1)
        code = torch.tanh(self.enc2(self.act(self.enc1(x))))
        recon = self.dec2(self.act(self.dec1(code)))
        mk = mask.reshape(1, c * p)
        recon_err = (((recon - x) ** 2).mean(-1) * mk).sum() / (mk.sum().clamp(min=1.0) * m)
        if keep is not None:
            mk = mk * keep.reshape(m, c * p)
        code = code * mk.unsqueeze(-1)
        flat = torch.cat([code, mk.unsqueeze(-1).expand(m, -1, -1)], dim=-1).reshape(
            m, c, p * (self.code + 1)
        )
        z = self.act(self.body2(self.act(self.body1(flat))))
        return self.head(z), recon_err


def log_runtime(h: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """log Σ_i exp(h_i) φ_i(n), computed stably; h and basis broadcast over leading dims (φ ≥ 0)."""
    return torch.logsumexp(h + torch.log(basis.clamp(min=1e-12)), dim=-1)
