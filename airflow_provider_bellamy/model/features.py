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
from typing import Any

import numpy as np

from airflow_provider_bellamy.exceptions import InvalidInputError, UnknownJobTypeError
from airflow_provider_bellamy.records import normalize_context, validate_scale_out_list

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


# The job type is what a model of several job types tells them apart by: it is always known (a job
# type the model never saw is read by its name's n-grams, see ``FeatureSchema.required_for``).
ALWAYS_KNOWN = ("job_type",)


@dataclass
class FeatureSchema:
    """Which properties a model reads, which values of them it knows, and what a context must give.

    ``categories`` / ``ranges``: the string values each property had in training, and the
    smallest and largest number. A model
    pre-trained with property dropout (``unknown_as_absent``) learned what a context predicts
    when a property is absent, so a value it cannot have learned anything about (a machine type,
    an environment never seen; a number where training only ever saw another) is read as unknown,
    not extrapolated from a vector the network never saw, and a context may lack any property.
    """

    properties: list[str]
    required: dict[str, list[str]]  # job type → properties every run of it had
    categories: dict[str, list[str]]
    ranges: dict[str, list[float]]
    # job type → the properties whose values tell its training contexts apart
    distinguishing: dict[str, list[str]]
    unknown_as_absent: bool = False

    @classmethod
    def from_contexts(
        cls, job_types: Sequence[str], contexts: Sequence[Mapping[str, object]]
    ) -> FeatureSchema:
        """Required for a job type: the properties every one of its training runs had AND every
        training run of any job type had. A property some runs lacked was seen absent in training
        (the network has a presence input for it), so a context may lack it too; one that no run
        ever lacked was never seen absent, and a context without it is an error (unless the model
        is pre-trained with property dropout: ``unknown_as_absent``)."""
        props: set[str] = set()
        seen: dict[str, list[set[str]]] = {}
        values: dict[str, set[str | float]] = {}
        by_job: dict[str, dict[str, set[str | float | None]]] = {}
        for job, ctx in zip(job_types, contexts, strict=True):
            keys = set(ctx)
            props |= keys
            seen.setdefault(job, []).append(keys)
            for name, value in ctx.items():
                values.setdefault(name, set()).add(value)
        for job, ctx in zip(job_types, contexts, strict=True):
            for name in props:
                by_job.setdefault(job, {}).setdefault(name, set()).add(ctx.get(name))
        everywhere = set.intersection(*(s for sets in seen.values() for s in sets))
        required = {job: sorted(set.intersection(*sets) & everywhere) for job, sets in seen.items()}
        categories = {
            name: sorted(str(v) for v in vals if isinstance(v, str))
            for name, vals in values.items()
            if any(isinstance(v, str) for v in vals)
        }
        numbers = {name: [float(v) for v in vals if not isinstance(v, str)] for name, vals in values.items()}
        ranges = {name: [min(nums), max(nums)] for name, nums in numbers.items() if nums}
        distinguishing = {
            job: sorted(name for name, vals in per.items() if len(vals) > 1 and name not in ALWAYS_KNOWN)
            for job, per in by_job.items()
        }
        return cls(
            properties=sorted(props),
            required=required,
            categories=categories,
            ranges=ranges,
            distinguishing=distinguishing,
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "properties": self.properties,
            "required": self.required,
            "categories": self.categories,
            "ranges": self.ranges,
            "distinguishing": self.distinguishing,
            "unknown_as_absent": self.unknown_as_absent,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeatureSchema:
        """Raises KeyError/TypeError/ValueError where a part is missing or malformed."""
        unknown_as_absent = data["unknown_as_absent"]
        if not isinstance(unknown_as_absent, bool):
            raise ValueError(f"schema.unknown_as_absent = {unknown_as_absent!r} is not true or false")
        return cls(
            properties=list(data["properties"]),
            required={k: list(v) for k, v in data["required"].items()},
            categories={k: list(v) for k, v in data["categories"].items()},
            ranges={k: [float(x) for x in v] for k, v in data["ranges"].items()},
            distinguishing={k: list(v) for k, v in data["distinguishing"].items()},
            unknown_as_absent=unknown_as_absent,
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

    def is_known(self, name: str, value: str | float) -> bool:
        """Whether the network learned anything about ``value`` of property ``name``: a string seen
        in training, a number of a property that took more than one value (or that one; beyond the
        range the number's encoding extrapolates, see ``encode_number``). Always
        true for a model not pre-trained to read unknown values as absent."""
        if not self.unknown_as_absent or name in ALWAYS_KNOWN:
            return True
        if isinstance(value, str):
            return value in self.categories.get(name, ())
        span = self.ranges.get(name)
        if span is None:  # a property training only saw as strings
            return False
        # one value in training: the network cannot have learned what another one does
        return span[0] < span[1] or float(value) == span[0]

    def constant(self, name: str) -> str | float | None:
        """The one value property ``name`` took in training where every training context gave it
        that value (None: it varied, or some contexts lacked it). The network cannot have learned
        what another value, or its absence, does: a context with another value (or none) is read
        as having it, the training contexts' answer (``encode``)."""
        if name in ALWAYS_KNOWN:
            return None
        strings = self.categories.get(name, [])
        span = self.ranges.get(name)
        given_by_all = any(name in props for props in self.required.values())
        if not given_by_all:
            return None
        if len(strings) == 1 and span is None:
            return strings[0]
        if not strings and span is not None and span[0] == span[1]:
            return span[0]
        return None

    def hidden_in_training(self, name: str) -> bool:
        """Whether property dropout hides ``name`` in pre-training: a property whose values the
        model may meet unknown and must then answer without (a string that took several values: a
        machine type, an environment). A number that varied is read by its value wherever it lies
        (its encoding extrapolates), a property with one value as that value (``constant``), and
        one some training contexts lacked was seen absent already."""
        if name in ALWAYS_KNOWN or name not in self.categories:
            return False
        return self.constant(name) is None and any(name in props for props in self.required.values())

    def unknown_properties(self, context: Mapping[str, str | float]) -> list[str]:
        """The properties ``context`` gives that the model reads as unknown (see ``is_known``)."""
        return sorted(
            name
            for name in self.properties
            if context.get(name) is not None and not self.is_known(name, context[name])
        )

    def check_context(self, job_type: str, context: Mapping[str, str | float]) -> None:
        """Refuse a context the model cannot answer for, naming a property it should give.

        A model that reads absent properties as unknown (``unknown_as_absent``) answers for a
        context of a job type it knows lacking some of them; only one that gives none of what tells
        the job's training contexts apart would get the job's average for an answer, and is refused.
        Otherwise, and for a job type the model never saw (its answers were calibrated with those
        properties given), the context must give what every training run had."""
        if self.unknown_as_absent and job_type in self.distinguishing:
            self._check_distinguished(job_type, context)
            return
        missing = [p for p in self.required_for(job_type) if p not in context]
        if missing:
            raise InvalidInputError(
                f"context.{missing[0]}",
                None,
                f"the model for job type {job_type!r} was trained with this property; "
                f"the context must give it (missing: {', '.join(missing)})",
            )

    def _check_distinguished(self, job_type: str, context: Mapping[str, str | float]) -> None:
        telling = self.distinguishing[job_type]
        if telling and not any(context.get(p) is not None and self.is_known(p, context[p]) for p in telling):
            # a DERIVED ratio tells contexts apart only where its inputs do: name what a user gives
            givable = [p for p in telling if p not in DERIVED] or telling
            raise InvalidInputError(
                f"context.{givable[0]}",
                None,
                f"the context gives none of the properties that tell job type {job_type!r}'s "
                f"training contexts apart, with a value the model knows (give one of: {', '.join(givable)})",
            )

    def encode(self, contexts: Sequence[Mapping[str, str | float]]) -> tuple[np.ndarray, np.ndarray]:
        """(vectors [B, P, D], presence mask [B, P]) for a batch of normalised contexts; a value the
        model cannot read (``is_known``) is encoded as absent, or as the one value its property
        took in training (``constant``; also where the context does not give it)."""
        b, p = len(contexts), len(self.properties)
        vectors = np.zeros((b, p, PROPERTY_DIM), dtype=np.float32)
        mask = np.zeros((b, p), dtype=np.float32)
        cache: dict[str | float, np.ndarray] = {}
        for i, ctx in enumerate(contexts):
            for j, name in enumerate(self.properties):
                value = ctx.get(name)
                if value is None or not self.is_known(name, value):
                    value = self.constant(name) if self.unknown_as_absent else None
                    if value is None:
                        continue
                if value not in cache:
                    cache[value] = encode_value(value)
                vectors[i, j] = cache[value]
                mask[i, j] = 1.0
        return vectors, mask


# Properties derived from others, where a context gives both: how many times one node's memory
# the input is, and the input per core of a node. Where a memory cliff sits (C3O's sgd and kmeans
# run 3× to 25× slower on 2 nodes than on 4: their working set no longer fits) is a matter of the
# input per node's memory, which a network shown two or three machine types cannot learn from
# data size and memory apart. The scale-out stays out of them: it enters through the basis only.
DERIVED = {
    "data_per_node_memory": ("data_size_mb", "memory_mb"),
    "data_per_core_mb": ("data_size_mb", "cores"),
}


def context_of(job_type: str, record: Mapping[str, object]) -> dict[str, str | float]:
    """The model's view of a context: normalised properties, the job type itself, and the
    ``DERIVED`` ratios of the numbers it gives."""
    ctx = normalize_context({k: v for k, v in record.items() if k not in DERIVED})
    ctx["job_type"] = job_type
    for name, (numerator, denominator) in DERIVED.items():
        top, bottom = ctx.get(numerator), ctx.get(denominator)
        # new input is refused at or below 0 (records.PHYSICAL_PROPERTIES); a run stored before
        # that rule may hold such a value and trains without the ratio rather than fail
        if isinstance(top, float) and isinstance(bottom, float) and bottom > 0:
            ctx[name] = top / bottom
    return ctx


def scale_out_array(values: Sequence[int]) -> np.ndarray:
    """Validated scale-outs (``validate_scale_out_list``) as an int64 array."""
    return np.array(validate_scale_out_list(values), dtype=np.int64)
