"""The Bellamy network.

property vectors ──► shared auto-encoder (code per property) ──► MLP ──► head ──► h (5 log-weights)
runtime(n) = Σ_i exp(h_i) · φ_i(n),  φ(n) = (1, 1/n, 1/n², log n, n)

The network maps a *context* to the coefficients of Ernest's scale-out basis. Keeping
the scale-out out of the MLP is deliberate: whatever the context, the predicted curve
is a non-negative mix of the terms distributed dataflow jobs are known to follow
(fixed cost, parallel work, coordination, per-node overhead), so extrapolation beyond
the scale-outs seen in training stays physically plausible, and fine-tuning a context
is a small, well-posed problem over the 5 head outputs.
"""

from __future__ import annotations

import torch
from torch import nn

from airflow_provider_bellamy.model.features import PROPERTY_DIM

N_BASIS = 5


class PropertyAutoEncoder(nn.Module):
    def __init__(self, dim: int = PROPERTY_DIM, hidden: int = 16, code: int = 6) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, hidden), nn.SELU(), nn.Linear(hidden, code), nn.Tanh())
        self.decoder = nn.Sequential(nn.Linear(code, hidden), nn.SELU(), nn.Linear(hidden, dim))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        code = self.encoder(x)
        return code, self.decoder(code)


class BellamyNet(nn.Module):
    def __init__(self, n_properties: int, *, code: int = 6, hidden: int = 48) -> None:
        super().__init__()
        self.n_properties = n_properties
        self.code = code
        self.hidden = hidden
        self.autoencoder = PropertyAutoEncoder(code=code)
        # one extra input per property: presence, so "absent" differs from a zero code
        self.body = nn.Sequential(
            nn.Linear(n_properties * (code + 1), hidden),
            nn.SELU(),
            nn.Linear(hidden, hidden),
            nn.SELU(),
        )
        self.head = nn.Linear(hidden, N_BASIS)

    def context_features(
        self, vectors: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(hidden representation [B, H], reconstruction error of present properties)."""
        code, recon = self.autoencoder(vectors)
        m = mask.unsqueeze(-1)
        code = code * m
        recon_err = (((recon - vectors) ** 2).mean(-1) * mask).sum() / mask.sum().clamp(min=1.0)
        flat = torch.cat([code, m], dim=-1).flatten(1)
        return self.body(flat), recon_err

    def log_weights(self, vectors: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        z, recon_err = self.context_features(vectors, mask)
        return self.head(z), recon_err


def log_runtime(h: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """log Σ_i exp(h_i) φ_i(n), computed stably. h: [..., 5], basis: [..., 5] (φ ≥ 0)."""
    return torch.logsumexp(h + torch.log(basis.clamp(min=1e-12)), dim=-1)
