"""Result types shared by the sizing engine, the façade, the store and the operators.

Pure dataclasses with JSON round trips: a decision travels through XCom as a dict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

OBJECTIVES: tuple[str, ...] = ("min_scale_out", "min_cost", "fastest", "fewest_nodes")


def format_confidence(q: float) -> str:
    """``q`` as a percentage with the digits it needs (0.9 → "90%", 0.925 → "92.5%",
    0.999999 → "99.9999%"): never rounded up to "100%", which no band can claim."""
    text = f"{q * 100:.0f}"
    for digits in range(0, 7):
        text = f"{q * 100:.{digits}f}"
        if float(text) < 100 and abs(float(text) - q * 100) < 0.05:
            break
    return f"{text}%"


def band_holds(candidates: Sequence[Mapping[str, Any]], scale_out: int, runtime_s: float) -> bool | None:
    """Whether ``runtime_s`` at ``scale_out`` lies in the band a decision's candidates (as stored:
    JSON, an unbounded side None) claimed there; None where no candidate had a prediction there."""
    cand = next((c for c in candidates if c.get("scale_out") == scale_out), None)
    if cand is None or cand.get("predicted_s") is None:
        return None
    lower = cand.get("lower_s")
    upper = cand.get("upper_s")
    return (0.0 if lower is None else lower) <= runtime_s <= (math.inf if upper is None else upper)


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
    # the confidence asked for where the band could not honour it (``confidence`` is the cap)
    requested_confidence: float | None = None
    # model/extrapolation.Extrapolation.to_dict() where the model knows its training domain
    extrapolation: dict[str, Any] | None = None
    # what the band was calibrated on, where the context lies outside the training data
    band_note: str | None = None
    # the largest scale-out the model knows this context's curve at, where candidates lie beyond it
    beyond_scale_out: int | None = None
    # the smallest, where candidates lie below it
    below_scale_out: int | None = None

    @property
    def notes(self) -> list[str]:
        """What a reader of the band must know: extrapolation, a capped confidence."""
        out = []
        ext = self.extrapolation or {}
        if ext and not ext.get("known", True):
            out.append(f"no extrapolation signals: {ext.get('sentence')}")
        elif ext.get("sentence") and (ext.get("kinds") or ext.get("job_type_unseen")):
            out.append(
                f"extrapolating: {ext['sentence']}" + (f" (band: {self.band_note})" if self.band_note else "")
            )
        if self.beyond_scale_out is not None:
            out.append(
                f"scale-outs above {self.beyond_scale_out} lie beyond every run the model knows of this "
                "job: its curve continues from there as a + b/n, the band spans the network's extrapolation"
            )
        if self.below_scale_out is not None:
            out.append(
                f"scale-outs below {self.below_scale_out} lie below every run the model knows of this "
                "job: its curve continues down from there halfway between a + b/n and the network's "
                "extrapolation, the band spans both (a memory cliff no run showed is not in it)"
            )
        if self.requested_confidence is not None and self.requested_confidence > self.confidence:
            out.append(
                f"confidence {format_confidence(self.requested_confidence)} asked, capped at "
                f"{format_confidence(self.confidence)}: the calibration's residuals cannot resolve more"
            )
        return out

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
    # the confidence asked for; ``confidence`` is what the band honours (lower where it was capped).
    # None: a decision stored before the store recorded it (schema revision 0004).
    requested_confidence: float | None = None
    extrapolation: dict[str, Any] | None = None  # see Prediction.extrapolation
    band_note: str | None = None  # see Prediction.band_note

    @property
    def capped(self) -> bool:
        """The band could not honour the confidence asked for (``confidence`` is the cap)."""
        return self.requested_confidence is not None and self.requested_confidence > self.confidence

    @property
    def extrapolating(self) -> bool | None:
        """Whether the model extrapolated for this context (None: not known, see ``extrapolation``)."""
        ext = self.extrapolation
        if not ext or not ext.get("known", True):
            return None
        return bool(ext.get("kinds") or ext.get("job_type_unseen"))

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
        if isinstance(data["shortfall_s"], float) and not math.isfinite(data["shortfall_s"]):
            data["shortfall_s"] = None  # (short of an unbounded band: by no figure)
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
