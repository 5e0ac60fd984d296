"""Encoding of scale-outs and context properties into fixed-size vectors.

Every property value becomes one vector of ``PROPERTY_DIM`` floats, whatever its type,
so one auto-encoder can compress all of them:

* slot 0 marks a string, slot 1 a number;
* strings: signed hashed character 1–3-grams (stable crc32, not Python's salted hash);
* numbers: sign, a zero flag, log10|x| scaled, and soft one-hot bumps over decades
  1e-6 … 1e12 so that values an order of magnitude apart land on different units while
  values close together share them (interpolation between seen sizes stays smooth).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from airflow_provider_bellamy.exceptions import InvalidInputError, UnknownJobTypeError
from airflow_provider_bellamy.records import normalize_context

PROPERTY_DIM = 40
_STRING_SLOTS = PROPERTY_DIM - 2
_DECADES = np.arange(-6.0, 13.0)  # 19 bump centres
_BUMP_WIDTH = 0.6
_NUMBER_OFFSET = 2  # after the two type flags


def encode_string(value: str) -> np.ndarray:
    vec = np.zeros(PROPERTY_DIM, dtype=np.float32)
    vec[0] = 1.0
    text = f"^{value.lower()}$"
    grams = [text[i : i + n] for n in (1, 2, 3) for i in range(len(text) - n + 1)]
    for gram in grams:
        h = zlib.crc32(gram.encode("utf-8"))
        slot = 2 + h % _STRING_SLOTS
        vec[slot] += 1.0 if (h >> 31) & 1 else -1.0
    norm = float(np.linalg.norm(vec[2:]))
    if norm > 0:
        vec[2:] /= norm
    return vec


def encode_number(value: float) -> np.ndarray:
    vec = np.zeros(PROPERTY_DIM, dtype=np.float32)
    vec[1] = 1.0
    o = _NUMBER_OFFSET
    if value == 0:
        vec[o + 1] = 1.0
        return vec
    magnitude = math.log10(abs(value))
    vec[o] = 1.0 if value > 0 else -1.0
    vec[o + 2] = magnitude / 6.0
    bumps = np.exp(-((magnitude - _DECADES) ** 2) / (2 * _BUMP_WIDTH**2))
    vec[o + 3 : o + 3 + len(_DECADES)] = bumps
    return vec


def encode_value(value: str | float) -> np.ndarray:
    return encode_string(value) if isinstance(value, str) else encode_number(float(value))


def scale_out_basis(scale_outs: np.ndarray, steep_floor: float = 1.0) -> np.ndarray:
    """The scale-out basis, one row per n: Ernest's (1, 1/n, log n, n) plus 1/n² and 1/n⁴.

    The steep terms carry the super-linear slow-down of small clusters whose working set
    no longer fits in memory: C3O's sgd and kmeans run 3× to 25× slower at 2 nodes than
    at 4, a jump no combination of Ernest's terms can bend to.

    ``steep_floor``: below the smallest scale-out the model was trained on, 1/n⁴ stays at
    its value there. Fitted on 2..12, the term would otherwise predict another 16× jump
    from 2 to 1 that no training run supports.
    """
    n = np.asarray(scale_outs, dtype=np.float64)
    steep = np.maximum(n, steep_floor)
    return np.stack([np.ones_like(n), 1.0 / n, 1.0 / n**2, 1.0 / steep**4, np.log(n), n], axis=-1)


@dataclass
class FeatureSchema:
    """Which properties a model reads, and which of them each job type must supply."""

    properties: list[str]
    required: dict[str, list[str]]  # job type → properties every run of it had

    @classmethod
    def from_contexts(
        cls, job_types: Sequence[str], contexts: Sequence[Mapping[str, object]]
    ) -> FeatureSchema:
        """Required for a job type: the properties every one of its training runs had AND every
        training run of any job type had. A property some runs lacked was seen absent in training
        (the network has a presence input for it), so a context may lack it too; one that no run
        ever lacked was never seen absent, and a context without it is an error."""
        props: set[str] = set()
        seen: dict[str, list[set[str]]] = {}
        for job, ctx in zip(job_types, contexts, strict=True):
            keys = set(ctx)
            props |= keys
            seen.setdefault(job, []).append(keys)
        everywhere = set.intersection(*(s for sets in seen.values() for s in sets))
        required = {job: sorted(set.intersection(*sets) & everywhere) for job, sets in seen.items()}
        return cls(properties=sorted(props), required=required)

    def to_dict(self) -> dict[str, object]:
        return {"properties": self.properties, "required": self.required}

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> FeatureSchema:
        return cls(
            properties=list(data["properties"]), required={k: list(v) for k, v in data["required"].items()}
        )

    def required_for(self, job_type: str) -> list[str]:
        """The properties a context of ``job_type`` must give.

        A job type the model never saw: a model of several job types learned the job type as one
        property among the others and reads a new one as it reads any value it never saw (by its
        name's character n-grams, with the context's other properties); it needs what every
        training run had. A model of one job type never saw the job type vary: it refuses.
        """
        if job_type in self.required:
            return self.required[job_type]
        if len(self.required) < 2:
            raise UnknownJobTypeError(job_type, list(self.required))
        return sorted(set.intersection(*(set(props) for props in self.required.values())))

    def check_context(self, job_type: str, context: Mapping[str, str | float]) -> None:
        missing = [p for p in self.required_for(job_type) if p not in context]
        if missing:
            raise InvalidInputError(
                f"context.{missing[0]}",
                None,
                f"the model for job type {job_type!r} was trained with this property; "
                f"the context must give it (missing: {', '.join(missing)})",
            )

    def encode(self, contexts: Sequence[Mapping[str, str | float]]) -> tuple[np.ndarray, np.ndarray]:
        """(vectors [B, P, D], presence mask [B, P]) for a batch of normalised contexts."""
        b, p = len(contexts), len(self.properties)
        vectors = np.zeros((b, p, PROPERTY_DIM), dtype=np.float32)
        mask = np.zeros((b, p), dtype=np.float32)
        cache: dict[str | float, np.ndarray] = {}
        for i, ctx in enumerate(contexts):
            for j, name in enumerate(self.properties):
                value = ctx.get(name)
                if value is None:
                    continue
                if value not in cache:
                    cache[value] = encode_value(value)
                vectors[i, j] = cache[value]
                mask[i, j] = 1.0
        return vectors, mask


def context_of(job_type: str, record: Mapping[str, object]) -> dict[str, str | float]:
    """The model's view of a context: normalised properties plus the job type itself."""
    ctx = normalize_context(record)
    ctx["job_type"] = job_type
    return ctx
