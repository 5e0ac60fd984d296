"""The trained network's forward pass in numpy: what predicting and fine-tuning need.

Training needs autograd and lives in torch (``network.py``); a launch only evaluates the
network once per context, so it runs here without importing torch (≈ 1–2 s of a fresh
task process, more than everything else a sizing decision costs). ``network.py`` and
this module compute the same function; ``tests/model`` checks that they agree.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

# torch.nn.SELU's constants
_SELU_ALPHA = 1.6732632423543772
_SELU_SCALE = 1.0507009873554805

LAYERS = ("enc1", "enc2", "dec1", "dec2", "body1", "body2", "head")


def _selu(x: np.ndarray) -> np.ndarray:
    return _SELU_SCALE * np.where(x > 0, x, _SELU_ALPHA * np.expm1(np.minimum(x, 0.0)))


def _linear(params: Mapping[str, np.ndarray], layer: str, x: np.ndarray) -> np.ndarray:
    """M independent linear layers: [M, B, in] → [M, B, out]."""
    return np.matmul(x, params[f"{layer}.weight"]) + params[f"{layer}.bias"][:, None, :]


def log_weights(params: Mapping[str, np.ndarray], vectors: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """h [M, C, N_BASIS] for contexts vectors [C, P, D] / presence mask [C, P] (float64)."""
    members = params["head.bias"].shape[0]
    c, p, d = vectors.shape
    x = np.broadcast_to(vectors.reshape(1, c * p, d).astype(np.float64), (members, c * p, d))
    code = np.tanh(_linear(params, "enc2", _selu(_linear(params, "enc1", x))))
    mk = mask.reshape(1, c * p, 1).astype(np.float64)
    code = code * mk
    flat = np.concatenate([code, np.broadcast_to(mk, (members, c * p, 1))], axis=-1).reshape(members, c, -1)
    z = _selu(_linear(params, "body2", _selu(_linear(params, "body1", flat))))
    return _linear(params, "head", z)


def logsumexp(x: np.ndarray, axis: int = -1) -> np.ndarray:
    top = np.max(x, axis=axis, keepdims=True)
    return np.squeeze(top, axis=axis) + np.log(np.sum(np.exp(x - top), axis=axis))


def log_runtime(h: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """log Σ_i exp(h_i) φ_i(n); h and basis broadcast over leading dims (φ ≥ 0)."""
    return logsumexp(h + np.log(np.maximum(basis, 1e-12)), axis=-1)
