"""What fine-tuning learned of one context, as a fine-tuned model keeps and writes it
(``RuntimeModel.finetune`` builds it; the model file's header carries it, ``delta`` as a tensor)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class NearestCurve:
    """For a context with a value the model reads as unknown: the curve of the training contexts of
    its job nearest to it in the properties it gives, rescaled to its runs (``log_n`` increasing,
    ``log_runtime`` there), and its ``weight`` in the prediction (see finetuning.nearest_curve)."""

    log_n: tuple[float, ...]
    log_runtime: tuple[float, ...]
    weight: float

    def to_dict(self) -> dict[str, Any]:
        return {"log_n": list(self.log_n), "log_runtime": list(self.log_runtime), "weight": self.weight}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NearestCurve:
        """Raises ValueError/KeyError/TypeError on a malformed curve."""
        curve = cls(
            tuple(float(v) for v in data["log_n"]),
            tuple(float(v) for v in data["log_runtime"]),
            float(data["weight"]),
        )
        if not (
            len(curve.log_n) == len(curve.log_runtime) >= 2
            and np.all(np.diff(curve.log_n) > 0)
            and np.all(np.isfinite(curve.log_runtime))
            and 0 <= curve.weight <= 1
        ):
            raise ValueError(f"nearest curve {dict(data)}")
        return curve


@dataclass(frozen=True, eq=False)
class TunedContext:
    """What fine-tuning learned of one context: the network's correction, the context's parametric
    curve and its share, its own leave-one-scale-out check of the band, its runs' residuals (the
    residual correction's data) and, for a context the model reads values of as unknown, the
    nearest training contexts' curve; for one it knows, its twins' curve."""

    context: dict[str, str | float]  # as the model normalises it (predict() must see the same)
    delta: np.ndarray  # [M, F] correction of each member's head output
    theta: np.ndarray  # [4] parametric (Ernest) coefficients
    parametric_weight: float  # the parametric curve's share in log space
    # the context's leave-one-scale-out error: its band is never narrower than it says
    check_rms: float
    check_count: int
    # (scale-out, log residual of the uncorrected tuned curve × the run's weight in the fit) per run:
    # a run fine-tuning doubted as a straggler (``straggler_weights``) keeps only its weighted part
    run_residuals: tuple[tuple[float, float], ...]
    nearest: NearestCurve | None
    # (RMS, count) of the checks above the training data's smallest scale-outs, for a context
    # from outside it, whose check counts at every scale-out (``band.answering_scale``); None:
    # the check answers everywhere (inside, or a file from before)
    above_checks: tuple[float, int] | None = None
    # for a context the model knows: its twins' measured curve at its runs' level, and its share in
    # the prediction (``finetuning.twin_curve``, ``fit_context``'s twin weight); None: none, or 0
    twin: NearestCurve | None = None

    @property
    def observed_scale_outs(self) -> tuple[int, ...]:
        """The distinct scale-outs its runs were at: the band is near or far from them, and below
        the smallest it spans both curves."""
        return tuple(sorted({int(n) for n, _ in self.run_residuals}))

    @property
    def points(self) -> int:
        """How many scale-outs it was tuned on: the calibration table that answers."""
        return len(self.observed_scale_outs)

    def to_dict(self) -> dict[str, Any]:
        """The header's part (``delta`` travels as a tensor)."""
        return {
            "context": self.context,
            "theta": [float(v) for v in self.theta],
            "parametric_weight": self.parametric_weight,
            "check_rms": self.check_rms,
            "check_count": self.check_count,
            "run_residuals": [list(pair) for pair in self.run_residuals],
            "nearest": None if self.nearest is None else self.nearest.to_dict(),
            "above_checks": None if self.above_checks is None else list(self.above_checks),
            "twin": None if self.twin is None else self.twin.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], delta: np.ndarray) -> TunedContext:
        """Raises ValueError/KeyError/TypeError where a value is out of its domain."""
        theta = np.asarray(data["theta"], dtype=np.float64)
        weight = float(data["parametric_weight"])
        residuals = tuple((float(n), float(r)) for n, r in data["run_residuals"])
        check_rms, check_count = float(data["check_rms"]), int(data["check_count"])
        above = data.get("above_checks")
        above_checks = None if above is None else (float(above[0]), int(above[1]))
        if not (
            theta.shape == (4,)
            and 0 <= weight <= 1
            and residuals
            and all(n > 0 and math.isfinite(r) for n, r in residuals)
            and check_rms >= 0
            and check_count >= 0
            and (above_checks is None or (above_checks[0] >= 0 and 0 <= above_checks[1] <= check_count))
            and isinstance(data["context"], dict)
        ):
            raise ValueError(f"tuned context {dict(data)}")
        nearest, twin = data["nearest"], data.get("twin")
        return cls(
            context=data["context"],
            delta=delta.astype(np.float64),
            theta=theta,
            parametric_weight=weight,
            check_rms=check_rms,
            check_count=check_count,
            run_residuals=residuals,
            nearest=None if nearest is None else NearestCurve.from_dict(nearest),
            above_checks=above_checks,
            twin=None if twin is None else NearestCurve.from_dict(twin),
        )
