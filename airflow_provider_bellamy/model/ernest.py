"""Ernest (Venkataraman et al., NSDI 2016): the parametric fallback and a benchmark baseline.

runtime(n) = θ0 + θ1·size/n + θ2·log n + θ3·n with θ ≥ 0, fitted by non-negative least
squares on one context's runs. Used when a job type has no pre-trained model yet.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.records import (
    successful_runs,
    validate_confidence,
    validate_runs,
    validate_scale_out_list,
)

if TYPE_CHECKING:
    import pandas as pd

# With fewer points than parameters the fit interpolates: its error on new scale-outs is
# not measurable from the points themselves, so the band falls back to this relative
# spread (documented in docs/sizing.md).
UNMEASURED_RELATIVE_SD = 0.25


def ernest_features(scale_outs: np.ndarray, size: float) -> np.ndarray:
    n = np.asarray(scale_outs, dtype=np.float64)
    return np.stack([np.ones_like(n), size / n, np.log(n), n], axis=-1)


class ErnestModel:
    def __init__(self, theta: np.ndarray, size: float, relative_sd: float, n_points: int) -> None:
        self.theta = theta
        self.size = size
        self.relative_sd = relative_sd
        self.n_points = n_points

    @classmethod
    def fit_points(
        cls, scale_outs: Sequence[int], runtimes: Sequence[float], size: float = 1.0
    ) -> ErnestModel:
        # scipy.optimize costs ~0.5 s to import: only fitting pays it, not predicting
        from scipy.optimize import nnls

        n = np.asarray(scale_outs, dtype=np.float64)
        y = np.asarray(runtimes, dtype=np.float64)
        if len(n) == 0:
            raise InvalidInputError("runs", "<empty>", "Ernest needs at least one run")
        x = ernest_features(n, size)
        # scale columns so NNLS is well conditioned; undo afterwards
        scale = np.abs(x).max(axis=0)
        scale[scale == 0] = 1.0
        theta, _ = nnls(x / scale, y)
        theta = theta / scale
        distinct = len(np.unique(n))
        rel_sd = UNMEASURED_RELATIVE_SD
        if distinct > x.shape[1]:
            pred = x @ theta
            rel = (y - pred) / np.maximum(pred, 1e-9)
            dof = max(len(y) - x.shape[1], 1)
            rel_sd = max(float(np.sqrt((rel**2).sum() / dof)), 0.01)
        return cls(theta, size, rel_sd, distinct)

    @classmethod
    def fit(cls, context_runs: pd.DataFrame) -> ErnestModel:
        frame = validate_runs(context_runs, where="context_runs")
        frame = successful_runs(frame)
        size = 1.0
        if "data_size_mb" in frame.columns and frame["data_size_mb"].notna().all():
            size = float(frame["data_size_mb"].iloc[0])
        if frame["scale_out"].nunique() < 2:
            raise InvalidInputError(
                "context_runs",
                f"{frame['scale_out'].nunique()} distinct scale-out(s)",
                "Ernest needs runs at >= 2 distinct scale-outs",
            )
        return cls.fit_points(frame["scale_out"].to_numpy(), frame["runtime_s"].to_numpy(), size)

    def predict(self, context: Mapping[str, object] | None, scale_outs: Sequence[int]) -> np.ndarray:
        ns = np.array(validate_scale_out_list(scale_outs), dtype=np.float64)
        return np.maximum(ernest_features(ns, self.size) @ self.theta, 1e-3)

    def predict_band(
        self, context: Mapping[str, object] | None, scale_outs: Sequence[int], confidence: float = 0.9
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        confidence = validate_confidence(confidence)
        mean = self.predict(context, scale_outs)
        z = NormalDist().inv_cdf(confidence)
        spread = math.exp(z * self.relative_sd)
        return mean, mean / spread, mean * spread
