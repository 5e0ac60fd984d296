"""Result types shared by the sizing engine, the façade, the store and the operators.

Pure dataclasses with JSON round trips: a decision travels through XCom as a dict.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

OBJECTIVES: tuple[str, ...] = ("min_scale_out", "min_cost", "fastest")


@dataclass(frozen=True)
class Prediction:
    """Predicted runtime per candidate scale-out, with a band at ``confidence``.

    ``lower_s``/``upper_s`` bound the runtime: P(runtime <= upper_s) ≈ confidence
    (one-sided upper quantile, what sizing uses) and symmetrically for ``lower_s``.
    """

    job_type: str
    scale_outs: list[int]
    mean_s: list[float]
    lower_s: list[float]
    upper_s: list[float]
    confidence: float
    model_version: str | None = None
    fallback_reason: str | None = None
    method: str = "bellamy"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Candidate:
    scale_out: int
    predicted_s: float
    lower_s: float
    upper_s: float
    node_hours: float
    cost: float | None
    meets_target: bool


@dataclass
class SizingDecision:
    """The answer to "which scale-out should this launch use?", auditable afterwards."""

    job_type: str
    chosen_scale_out: int
    feasible: bool
    reason: str
    target_s: float | None
    confidence: float
    objective: str
    candidates: list[Candidate] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    framework: str | None = None
    model_version: str | None = None
    fallback_reason: str | None = None
    shortfall_s: float | None = None
    price_per_node_hour: float | None = None
    decision_id: int | None = None
    created_at: str | None = None

    @property
    def chosen(self) -> Candidate | None:
        return next((c for c in self.candidates if c.scale_out == self.chosen_scale_out), None)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        # JSON has no infinity: an unbounded band is written as None.
        for cand in data["candidates"]:
            for key in ("predicted_s", "lower_s", "upper_s", "node_hours", "cost"):
                value = cand.get(key)
                if isinstance(value, float) and not math.isfinite(value):
                    cand[key] = None
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SizingDecision:
        payload = dict(data)
        cands = []
        for c in payload.pop("candidates", []) or []:
            c = dict(c)
            for key in ("predicted_s", "lower_s", "upper_s", "node_hours"):
                if c.get(key) is None:
                    c[key] = math.inf
            cands.append(Candidate(**c))
        known = set(cls.__dataclass_fields__)
        return cls(candidates=cands, **{k: v for k, v in payload.items() if k in known})
