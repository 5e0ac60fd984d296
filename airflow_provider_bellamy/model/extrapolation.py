"""Where a context lies relative to what a model was trained on (pure: numpy, no Airflow).

Pre-training records the training domain in the model file's header: per job type, each
property's vocabulary (categorical) or range (numeric), the properties every context had, and the
environments the job type ran in. For a context, ``signals`` lists what the model has to
extrapolate in: a categorical value it never saw, a number outside the trained range (and by how
far), a property the context lacks, a job type known only from other environments. The band uses
the kinds (``Extrapolation.kinds``) to choose its out-of-distribution calibration; the decision
quotes the sentence.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from airflow_provider_bellamy.model.features import DERIVED

# A categorical property with more distinct values than this is an identifier (a path, a job's
# argument string): its vocabulary is not kept, and a new value of it is not a signal.
MAX_VOCABULARY = 200
# Beyond this factor outside its trained range a number's prediction is a guess, and the sentence
# says so in words.
FAR_FACTOR = 1000.0
# The distance beyond a trained range is counted in widths of that range (log10 units): 3 decades
# beyond a range 0.3 decades wide is a far larger extrapolation than 3 decades beyond one 3 decades
# wide. A range narrower than a factor of 2 (one value: width 0) counts as that wide, so a number
# beyond a property that barely varied still has a finite distance (its band can learn from runs).
MIN_SPAN_DECADES = math.log10(2.0)
# Properties that are not features of the context's distribution (the job type has its own
# calibration, see calibration.Calibration.unseen_job), and the derived ratios, which restate numbers the
# context gives: its signals name those numbers.
_NOT_DOMAIN = ("job_type", *DERIVED)


def training_domain(contexts: Iterable[Mapping[str, str | float]]) -> dict[str, Any]:
    """The header's ``domain``: per job type, per property, the vocabulary or the range; the
    properties every context of the job had; the environments it ran in."""
    by_job: dict[str, list[Mapping[str, str | float]]] = {}
    for ctx in contexts:
        by_job.setdefault(str(ctx.get("job_type")), []).append(ctx)
    return {"jobs": {job: _job_domain(ctxs) for job, ctxs in sorted(by_job.items())}}


def _job_domain(contexts: list[Mapping[str, str | float]]) -> dict[str, Any]:
    values: dict[str, set[str | float]] = {}
    for ctx in contexts:
        for name, value in ctx.items():
            if name not in _NOT_DOMAIN:
                values.setdefault(name, set()).add(value)
    properties: dict[str, dict[str, Any]] = {}
    for name, seen in sorted(values.items()):
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in seen):
            properties[name] = {"min": float(min(seen)), "max": float(max(seen))}  # type: ignore[type-var]
        else:
            vocabulary = sorted(str(v) for v in seen)
            properties[name] = {"values": vocabulary if len(vocabulary) <= MAX_VOCABULARY else None}
    always = sorted(set.intersection(*(set(ctx) for ctx in contexts)) - set(_NOT_DOMAIN))
    environments = sorted({str(c["environment"]) for c in contexts if c.get("environment") is not None})
    return {"properties": properties, "always": always, "environments": environments}


@dataclass(frozen=True)
class OutOfRange:
    """A number outside the trained range: ``factor`` × below the smallest / above the largest."""

    property: str
    value: float
    side: str  # "below" | "above"
    bound: float
    factor: float  # ≥ 1 (see _factor_beyond)
    span: float = 0.0  # the trained range's width in log10 units (see _span)

    @property
    def decades(self) -> float:
        return math.log10(self.factor) if math.isfinite(self.factor) else math.inf

    @property
    def widths(self) -> float:
        """The distance beyond the range in widths of the range (``MIN_SPAN_DECADES`` at least)."""
        return self.decades / max(self.span, MIN_SPAN_DECADES)

    def describe(self) -> str:
        edge = "smallest" if self.side == "below" else "largest"
        if self.value * self.bound <= 0:
            return f"{self.property} {_number(self.value)} lies outside the trained range (the {edge} is {_number(self.bound)})"
        far = " — far outside everything the model was trained on" if self.factor >= FAR_FACTOR else ""
        return (
            f"{self.property} {_number(self.value)} is {_factor(self.factor)} {self.side} "
            f"the {edge} trained ({_number(self.bound)}){far}"
        )


@dataclass(frozen=True)
class Extrapolation:
    """What a context asks the model to extrapolate in (empty: inside the training data)."""

    unseen: tuple[tuple[str, str], ...] = ()  # (property, value) never seen for the job type
    unseen_anywhere: tuple[str, ...] = ()  # of those properties, the ones whose value no job had
    out_of_range: tuple[OutOfRange, ...] = ()
    missing: tuple[str, ...] = ()  # properties every training context of the job type had
    job_type_unseen: bool = False
    environments: tuple[str, ...] = ()  # set when the job type ran only in other environments
    kinds: frozenset[str] = field(default_factory=frozenset)  # "categorical", "numeric"

    @property
    def extrapolating(self) -> bool:
        return bool(self.kinds) or self.job_type_unseen

    @property
    def decades(self) -> float:
        """The farthest a number lies outside its trained range, in log10 units (0 if none)."""
        return max((o.decades for o in self.out_of_range), default=0.0)

    @property
    def guessing(self) -> bool:
        """A number lies ``FAR_FACTOR`` or more beyond its trained range: the prediction is a
        guess (the sentence says so); before the context has runs its band has no upper bound."""
        return any(o.factor >= FAR_FACTOR for o in self.out_of_range)

    @property
    def distance_scale(self) -> float:
        """What a numeric extrapolation's band offsets are multiplied by, and what the numeric
        calibration divided its held-out contexts' residuals by (one function for both):
        1 + the farthest distance beyond a trained range, in widths of that range (≥ 1; inf
        where a number is infinitely far)."""
        return 1.0 + max((o.widths for o in self.out_of_range), default=0.0)

    def sentence(self) -> str:
        """One plain sentence, e.g. ``machine_type 'x' never seen; data_size_mb 24 is 40× below
        the smallest trained (960)``; empty inside the training data."""
        parts = []
        if self.job_type_unseen:
            parts.append("job type never seen")
        for name, value in self.unseen:
            if name == "environment" and self.environments:
                continue
            where = "" if name in self.unseen_anywhere else " with this job type"
            parts.append(f"{name} {value!r} never seen{where}")
        if self.environments:
            env = dict(self.unseen).get("environment")
            parts.append(
                f"job type known only from environment(s) {', '.join(self.environments)}, not {env!r}"
            )
        parts.extend(o.describe() for o in self.out_of_range)
        if self.missing:
            parts.append(f"context lacks {', '.join(self.missing)} (every trained context had it)")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["kinds"] = sorted(self.kinds)
        out["decades"] = None if math.isinf(self.decades) else self.decades
        out["sentence"] = self.sentence()
        for o in out["out_of_range"]:
            if not math.isfinite(o["factor"]):
                o["factor"] = None
        return json.loads(json.dumps(out))  # JSON's own types: equal after a round trip


INSIDE = Extrapolation()


def signals(domain: Mapping[str, Any], context: Mapping[str, str | float]) -> Extrapolation:
    """Where ``context`` (normalised, with its ``job_type``) lies relative to ``domain``
    (``training_domain``'s result)."""
    jobs: Mapping[str, Any] = domain.get("jobs") or {}
    job = str(context.get("job_type"))
    everywhere = _merge(jobs.values())
    own = jobs.get(job)
    job_unseen = own is None
    if own is None:  # a job type never seen: compared with everything the model saw
        own = everywhere
    unseen: list[tuple[str, str]] = []
    anywhere: list[str] = []
    out: list[OutOfRange] = []
    for name, value in sorted(context.items()):
        if name in _NOT_DOMAIN:
            continue
        spec = (own.get("properties") or {}).get(name)
        if spec is None:
            continue  # a property the job type never had: the model does not read it for the job
        if "values" in spec:
            vocabulary = spec["values"]
            if vocabulary is not None and str(value) not in vocabulary:
                unseen.append((name, str(value)))
                wide = (everywhere["properties"].get(name) or {}).get("values")
                if wide is not None and str(value) not in wide:
                    anywhere.append(name)
            continue
        if isinstance(value, str):
            unseen.append((name, value))
            anywhere.append(name)
            continue
        low, high = float(spec["min"]), float(spec["max"])
        v = float(value)
        if v < low:
            out.append(
                OutOfRange(name, v, "below", low, _factor_beyond(v, low, high - low), _span(low, high))
            )
        elif v > high:
            out.append(
                OutOfRange(name, v, "above", high, _factor_beyond(v, high, high - low), _span(low, high))
            )
    missing = () if job_unseen else tuple(p for p in own.get("always", []) if p not in context)
    environments: tuple[str, ...] = ()
    env = context.get("environment")
    trained_envs = tuple(own.get("environments") or ())
    if env is not None and trained_envs and str(env) not in trained_envs and not job_unseen:
        environments = trained_envs
    kinds = set()
    if unseen or missing:
        kinds.add("categorical")
    if out:
        kinds.add("numeric")
    return Extrapolation(
        unseen=tuple(unseen),
        unseen_anywhere=tuple(anywhere),
        out_of_range=tuple(out),
        missing=missing,
        job_type_unseen=job_unseen,
        environments=environments,
        kinds=frozenset(kinds),
    )


def guessed_shape(scale_outs: np.ndarray, ran_at: float, level_s: float) -> tuple[np.ndarray, np.ndarray]:
    """The runtimes a guessed context can take at ``scale_outs`` once it ran at one scale-out
    only (``level_s`` seconds there): anything from perfect speed-up (∝ 1/n) to perfect slow-down
    (∝ n) from that run. Its shape is the training contexts' seen from ``FAR_FACTOR`` or more
    away: one run fixes its level, not how it scales (the demo's sort, 1,588× below the smallest
    trained input: C3O's curve put 1 worker at 2.5× its run at 3; on 2 cores it ran 0.6×)."""
    n = np.asarray(scale_outs, dtype=np.float64)
    ratio = np.maximum(n, ran_at) / np.minimum(n, ran_at)
    return level_s / ratio, level_s * ratio


def signal_kinds(ext: Extrapolation) -> frozenset[str]:
    """The signals besides a value never seen or a number out of range that a context shows
    (calibration.SIGNAL_KINDS): "missing" (it lacks a property every trained context of its job
    had), "environment" (its job ran only in other environments)."""
    out = set()
    if ext.missing:
        out.add("missing")
    if ext.environments:
        out.add("environment")
    return frozenset(out)


def never_varied(domain: Mapping[str, Any] | None, ext: Extrapolation) -> tuple[str, ...]:
    """Of the properties whose value ``ext`` says the model never saw, those with a single value
    in all the training data (C3O's ``environment``): the out-of-distribution pass held out no
    value of them (``held_out_folds``), so nothing measured how far off a new one is."""
    if not domain or not ext.unseen:
        return ()
    everywhere = _merge((domain.get("jobs") or {}).values())["properties"]
    out = set()
    for name, _ in ext.unseen:
        values = (everywhere.get(name) or {}).get("values")
        if isinstance(values, list) and len(values) < 2:
            out.add(name)
    return tuple(sorted(out))


# What the band's reason calls a signal no held-out context showed (band.band_sources).
SIGNAL_WORDS = {
    "missing": lambda ext: f"a context lacking {', '.join(ext.missing)}",
    "environment": lambda ext: f"a job known only from {', '.join(ext.environments)}",
}


@dataclass(frozen=True)
class DistanceWidening:
    """How a band source's offsets grow with a context's distance beyond the training data.

    Outside a trained range the error grows with the distance. Numeric tables hold residuals
    divided by their held-out contexts' distance scale: the whole distance multiplies them back.
    A table whose residuals are not divided (a machine type held out whole: its memory lay outside
    its member's range; the model's own out-of-fold contexts) already holds the distance its
    held-out contexts lay at (``reference``, their median): only the distance beyond it widens
    it, or it counts twice (C3O leave-machine-type-out: held-out machine types at distance 2-3,
    a 90 % band covering 97-99.6 %). The uncalibrated Gaussian measured nothing: the distance
    widens it only before the context has runs (``untuned_only``); from its first run on, its own
    check updates it (``band.quantiles``), weighing the Gaussian as a prior that far out
    (``prior_distance``). ``scaled`` False: a source the distance does
    not widen (the Gaussian beside tables that account for it). ``settles``: the model's own
    tables where too few contexts could be held out whole widen only until the context's first
    run, except at the training data's smallest scale-outs (``band.quantiles``): the
    distance measures how far off the level is, and the runs re-fit the level (C3O
    leave-machine-type-out above 3 nodes: the untuned |log error| grows with the distance, corr.
    0.56 for sgd, median 0.49 at 3.5-6; tuned on 1-3 runs it does not, median 0.03-0.06 at every
    distance). Their weight against the context's checks still counts the distance."""

    scaled: bool = True
    reference: float = 1.0
    untuned_only: bool = False
    settles: bool = False

    def factor(self, distance_scale: float, k: int) -> float:
        """The multiplier of the source's offsets for a context ``distance_scale`` outside the
        training data, tuned on ``k`` points (≥ 1)."""
        if not self.scaled or (self.untuned_only and k > 0):
            return 1.0
        return max(1.0, distance_scale / self.reference)

    def prior_distance(self, distance_scale: float, k: int) -> float:
        """How far out the context lies when its own checks weigh against the source's scale
        (``band.quantiles``: the prior counts PRIOR_CHECKS / distance² pseudo-residuals).
        A table: as far as it widens. The uncalibrated Gaussian, from the first run on: the whole
        distance. It no longer widens there (its sd is a guess for any distance), but it is no
        better a guess than a table extrapolated that far: at full weight its 2 pseudo-residuals
        outweighed the context's own checks (C3O leave-machine-type-out, contexts at distance 2-3.3:
        a 90 % band covering 95-100 % from k = 3 on while its checks' RMS was a fifth of its sd)."""
        if self.untuned_only and k > 0:
            return max(1.0, distance_scale)
        return self.factor(distance_scale, k)


def _merge(job_domains: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One domain from several job types': vocabularies joined, ranges spanned."""
    properties: dict[str, dict[str, Any]] = {}
    always: set[str] | None = None
    environments: set[str] = set()
    for dom in job_domains:
        for name, spec in (dom.get("properties") or {}).items():
            have = properties.get(name)
            if have is None:
                properties[name] = dict(spec)
            elif "values" in have and "values" in spec:
                joined = (
                    None
                    if have["values"] is None or spec["values"] is None
                    else sorted(set(have["values"]) | set(spec["values"]))
                )
                have["values"] = joined if joined is None or len(joined) <= MAX_VOCABULARY else None
            elif "min" in have and "min" in spec:
                have["min"], have["max"] = min(have["min"], spec["min"]), max(have["max"], spec["max"])
            else:  # numbers for one job, strings for another: any value is plausible
                properties[name] = {"values": None}
        keys = set(dom.get("always") or ())
        always = keys if always is None else always & keys
        environments |= set(dom.get("environments") or ())
    return {"properties": properties, "always": sorted(always or ()), "environments": sorted(environments)}


def _factor_beyond(value: float, bound: float, span: float) -> float:
    """How far ``value`` lies beyond ``bound`` as a factor ≥ 1: their ratio where both have the
    same sign; across or at 0 (a ratio means nothing there) 1 + the gap over the bound's size
    (or over the trained span where the bound is 0). 1e308 vs 2e4: 5e303."""
    if value * bound > 0:
        ratio = value / bound
        return ratio if ratio >= 1 else 1 / ratio
    scale = abs(bound) or span or 1.0
    return 1.0 + abs(value - bound) / scale


def _span(low: float, high: float) -> float:
    """A trained range's width in the units of ``_factor_beyond``'s log10: the decades between
    its ends where both are positive, else log10 of 1 + the width over the larger end's size."""
    if low > 0:
        return math.log10(high / low)
    return math.log10(1.0 + (high - low) / (max(abs(low), abs(high)) or 1.0))


def _number(value: float) -> str:
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        return f"{value:.3g}"
    return f"{value:,.6g}"


def _factor(factor: float) -> str:
    if factor < 10:
        return f"{factor:.1f}×"
    if factor < 1e4:
        return f"{factor:,.0f}×"
    return f"{factor:.0e}×".replace("e+0", "e").replace("e+", "e")


def held_out_folds(
    contexts: Sequence[Mapping[str, str | float]], members: int, rng: np.random.Generator
) -> list[tuple[str, np.ndarray]]:
    """Folds for the out-of-distribution calibration, each (kind, sorted context indices) held
    out whole by one member: the values of each categorical property that varies (a machine type,
    an environment: "categorical"), and per job type the contexts at the smallest and at the
    largest value of its widest-ranging numeric property ("numeric"). Up to ``members`` folds:
    two numeric ones where there are numeric ends, categorical groups (drawn at random where
    there are more) for the rest. Empty where nothing varies."""
    groups: list[frozenset[int]] = []
    names = sorted({k for c in contexts for k in c} - set(_NOT_DOMAIN))
    for name in names:
        values = [c.get(name) for c in contexts]
        present = {v for v in values if v is not None}
        if len(present) < 2 or len(present) > MAX_VOCABULARY:
            continue
        if all(isinstance(v, (int, float)) for v in present):
            continue
        for value in sorted(present, key=str):
            group = frozenset(i for i, v in enumerate(values) if v == value)
            if group not in groups:
                groups.append(group)
    low: set[int] = set()
    high: set[int] = set()
    by_job: dict[str, list[int]] = {}
    for i, c in enumerate(contexts):
        by_job.setdefault(str(c.get("job_type")), []).append(i)
    for indices in by_job.values():
        widest, spread = None, 0.0
        for name in names:
            vals = [contexts[i].get(name) for i in indices]
            nums = {float(v) for v in vals if isinstance(v, (int, float)) and not isinstance(v, bool)}
            if len(nums) < 3 or len(nums) != len({v for v in vals if v is not None}) or min(nums) <= 0:
                continue
            s = math.log10(max(nums) / min(nums))
            if s > spread:
                widest, spread = name, s
        if widest is None:
            continue
        vals = {i: float(contexts[i][widest]) for i in indices if contexts[i].get(widest) is not None}
        low |= {i for i, v in vals.items() if v == min(vals.values())}
        high |= {i for i, v in vals.items() if v == max(vals.values())}
    numeric = [("numeric", np.array(sorted(g))) for g in (low, high) if g]
    n_cat = max(members - len(numeric), 1) if groups else 0
    order = rng.permutation(len(groups)) if groups else np.array([], dtype=np.int64)
    # groups beyond the members' count are left out rather than merged: two values of one
    # property merged could hold out every context
    categorical = [("categorical", np.array(sorted(groups[j]))) for j in order[:n_cat]]
    return (categorical + numeric)[:members] if members >= 2 else []
