"""Splits and baselines shared by the accuracy and sizing benchmarks (DESIGN.md protocols)."""

from __future__ import annotations

import functools
import hashlib
import math
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from airflow_provider_bellamy.datasets import load_runs_file, load_traces
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.model import ErnestModel, RuntimeModel, TrainingConfig
from airflow_provider_bellamy.model.calibration import pick_points
from airflow_provider_bellamy.records import context_columns, context_fingerprint, successful_runs

K_VALUES = (0, 1, 2, 3, 4, 5)
N_FOLDS = 5
# percentile-bootstrap resamples behind the reports' 95 % intervals
BOOTSTRAP_RESAMPLES = 2000

T = TypeVar("T")


def quick_config() -> TrainingConfig:
    """Smaller ensemble and shorter schedule: what --quick trades for time."""
    return TrainingConfig(members=2, max_epochs=500, patience=150, min_epochs=150)


def with_context_ids(frame: pd.DataFrame) -> pd.DataFrame:
    cols = context_columns(frame.columns)
    out = frame.copy()
    props = out[cols].to_dict(orient="records")
    out["context_id"] = [context_fingerprint(j, p) for j, p in zip(out["job_type"], props, strict=True)]
    return out


@dataclass
class HeldOutTask:
    """One pre-training split: train on ``train``, evaluate the contexts in ``held_out``
    (``held_out_value``: the machine type / environment a transfer protocol holds out)."""

    algorithm: str
    fold: int
    train: pd.DataFrame
    held_out: pd.DataFrame
    held_out_value: str | None = None
    # the scale-out protocols: the held-out job type's kept scale-out nearest the held-out ones (its
    # largest for larger-scale-outs, its smallest for smaller-scale-outs); the held-out contexts are
    # fine-tuned on runs at the kept scale-outs and tested on their runs past the cut, on ``side``
    # ("above" or "below"), none of which (nor any training run past it) the model saw
    cut: int | None = None
    side: str = "above"

    def label(self) -> str:
        """Which split this is, for progress lines."""
        base = f"fold {self.fold}" if self.held_out_value is None else f"held out {self.held_out_value}"
        return (
            base
            if self.cut is None
            else f"{base}, scale-out {'>' if self.side == 'above' else '<'} {self.cut}"
        )

    def past_cut(self, scale_out: Any) -> Any:
        """Whether ``scale_out`` (a number or a Series) lies on the held-out side of the cut."""
        return _past(scale_out, self.cut, self.side)

    def draw(
        self, context_runs: pd.DataFrame, k: int, rng: np.random.Generator
    ) -> tuple[pd.DataFrame, pd.DataFrame]:
        """A held-out context's k fine-tuning runs and its test runs (``draw_points``); with a
        ``cut``, the k runs are drawn among the kept ones (the same draw on those runs) and every
        run past the cut is tested."""
        if self.cut is None:
            return draw_points(context_runs, k, rng)
        kept = ~self.past_cut(context_runs["scale_out"])
        points, _ = draw_points(context_runs[kept], k, rng)
        return points, context_runs[~kept]

    def draws_fall_short(self, points: pd.DataFrame, k: int) -> bool:
        """Whether a draw of k runs found fewer than k scale-outs to draw from, and a scale-out
        protocol leaves the context out at that k (it reports the k its kept scale-outs allow, not a smaller
        draw under k's name). The other protocols keep every draw as before: there a short draw
        leaves no run to test."""
        return self.cut is not None and len(points) < k


# How a benchmark splits its runs (DESIGN.md): "folds" holds out a fifth of a job type's contexts
# and pre-trains on the rest of that job type (C3O); "leave-job-out" holds out every context of a
# job type and pre-trains on every other run, the bundled traces included (Bell: one context per
# job, on a cluster the other traces never saw). The transfer protocols hold out one value of a
# context property whole: "leave-machine-type-out" per job type, pre-trained on the job type's
# runs on the other machine types (as the folds: what the job does elsewhere is what transfers);
# "leave-environment-out" per job type and environment, pre-trained on every run of another
# environment, the bundled traces included (as leave-job-out: a new cluster, everything else known).
# "leave-size-out" per job type holds out the contexts at the largest third of its input sizes, then
# those at the smallest third, each pre-trained on the job type's other runs (a deployment's data
# grows past, or a test run stays under, every size the model saw: numeric extrapolation).
# "larger-scale-outs" per job type holds out the largest third of its distinct scale-outs: the held-out
# contexts (the set's own split: C3O and a file by folds, Bell by leave-job-out) are fine-tuned on runs at
# the kept (smaller) scale-outs and tested at the larger ones, and no training run of any job type above
# the kept ones is pre-trained on (a deployment grows to clusters larger than any the model saw).
# "smaller-scale-outs" is its mirror: the smallest third held out, fine-tuned at the kept (larger)
# scale-outs, tested at the smaller ones, no training run below the kept ones (a team whose history
# is on large clusters asks whether a smaller, cheaper one still meets its deadline).
PROTOCOLS = (
    "folds",
    "leave-job-out",
    "leave-machine-type-out",
    "leave-environment-out",
    "leave-size-out",
    "larger-scale-outs",
    "smaller-scale-outs",
)
# the scale-out protocols and the side of the cut each holds out
SCALE_OUT_SIDE = {"larger-scale-outs": "above", "smaller-scale-outs": "below"}
# the context property each transfer protocol holds out whole
HELD_OUT_DIMENSION = {"leave-machine-type-out": "machine_type", "leave-environment-out": "environment"}
# what each bundled set may be split by: its own protocol first (the default, whose report stays
# as it was), then the transfer protocols its runs can serve (C3O ran on three machine types, one
# environment; Bell on one of each)
BUNDLED_PROTOCOLS = {
    "c3o": ("folds", "leave-machine-type-out", "leave-size-out", "larger-scale-outs", "smaller-scale-outs"),
    "bell": ("leave-job-out", "larger-scale-outs", "smaller-scale-outs"),
}
# the input size leave-size-out holds the ends of; a job type needs this many distinct sizes (an end
# held out, sizes left on both sides of the middle to pre-train on)
SIZE_PROPERTY = "data_size_mb"
MIN_SIZES = 3
# the scale-out protocols: a job type needs this many distinct scale-outs (a third held out at one
# end, at least two kept to fine-tune on and draw k from)
MIN_SCALE_OUTS = 3


@dataclass(frozen=True)
class BenchmarkRuns:
    """What a benchmark replays: every run it may pre-train on (``runs``, with ``context_id``),
    which of them it evaluates (``evaluated``, a mask over ``runs``), and how it splits them."""

    name: str
    protocol: str
    runs: pd.DataFrame
    evaluated: np.ndarray
    bundled: bool = False

    @property
    def dimension(self) -> str | None:
        """The context property the protocol holds out whole (None: folds, leave-job-out)."""
        return HELD_OUT_DIMENSION.get(self.protocol)

    @property
    def structure(self) -> str:
        """Which contexts a task holds out: the protocol's own split, or for the scale-out protocols
        the set's (Bell: leave-job-out, its one context per job; C3O and a file: folds)."""
        if self.protocol not in SCALE_OUT_SIDE:
            return self.protocol
        return "leave-job-out" if self.bundled and self.name == "bell" else "folds"

    def _values(self, runs: pd.DataFrame) -> list[str]:
        """The held-out dimension's values among ``runs`` (a missing value is none of them)."""
        return sorted(map(str, runs[self.dimension].dropna().unique()))

    def job_types_skipped(self) -> dict[str, str]:
        """Evaluated job types no split can hold out, and why."""
        skipped = {}
        for job, runs in self.runs[self.evaluated].groupby("job_type", sort=True):
            if self.protocol in SCALE_OUT_SIDE and runs["scale_out"].nunique() < MIN_SCALE_OUTS:
                third = "larger" if SCALE_OUT_SIDE[self.protocol] == "above" else "smaller"
                skipped[str(job)] = (
                    f"{runs['scale_out'].nunique()} scale-out(s): fewer than {MIN_SCALE_OUTS}, no {third} "
                    "third to hold out with scale-outs left to fine-tune on"
                )
            elif (
                self.protocol in SCALE_OUT_SIDE
                and self.structure == "leave-job-out"
                and (why := self._unservable(runs))
            ):
                skipped[str(job)] = why
            elif self.structure == "folds" and runs["context_id"].nunique() < 2:
                skipped[str(job)] = "one context: nothing of its job type left to pre-train on"
            elif self.structure == "leave-job-out" and (self.runs["job_type"] == job).all():
                skipped[str(job)] = "no run of another job type to pre-train on"
            elif self.protocol == "leave-size-out" and len(_sizes(runs)) < MIN_SIZES:
                skipped[str(job)] = (
                    f"{len(_sizes(runs))} input size(s) ({SIZE_PROPERTY}): fewer than {MIN_SIZES}, "
                    "no end to hold out with sizes left to pre-train on"
                )
            elif self.dimension is not None and not self._values(runs):
                skipped[str(job)] = f"no run with any {self.dimension} to hold out"
            elif self.protocol == "leave-machine-type-out":
                same_job = self.runs[self.runs["job_type"] == job]
                if len(self._values(same_job)) < 2:
                    skipped[str(job)] = "one machine type: no run of its job type on another to pre-train on"
        return skipped

    def _unservable(self, runs: pd.DataFrame) -> str | None:
        """Why the runs left to pre-train on, a job type's held out as leave-job-out holds them with
        every run past its cut gone, cannot serve it (None: they can). The cut can leave few other
        job types (Bell's smaller-scale-outs: C3O ran at 2..12, all below Bell's cut), and a model
        refuses a job type it never saw where it knows one job type only, or where the job type
        lacks a property every training run gives (``FeatureSchema.required_for``)."""
        side = SCALE_OUT_SIDE[self.protocol]
        cut, _ = _scale_out_cut(runs, side)
        others = self.runs[~self.runs["context_id"].isin(set(runs["context_id"]))]
        train = others[~_past(others["scale_out"], cut, side)]
        kept = (
            f"the other job types' runs {'at or below' if side == 'above' else 'at or above'} the cut, {cut}"
        )
        if train["job_type"].nunique() < 2:
            return f"fewer than two job types among {kept}: the model refuses a job type it never saw"
        given = [c for c in context_columns(train.columns) if train[c].notna().all()]
        lacking = [c for c in given if c not in runs.columns or runs[c].isna().any()]
        if lacking:
            return (
                f"lacks {', '.join(lacking)}, which every run left to pre-train on ({kept}) gives: "
                "the model refuses a job type it never saw without it"
            )
        return None

    def values_skipped(self) -> dict[str, dict[str, str]]:
        """Per job type, the runs a transfer protocol evaluates but cannot hold out (no value of
        the held-out dimension), and why: they are pre-trained on, never tested."""
        dimension = SIZE_PROPERTY if self.protocol == "leave-size-out" else self.dimension
        if dimension is None:
            return {}
        skipped: dict[str, dict[str, str]] = {}
        for job, runs in self.runs[self.evaluated].groupby("job_type", sort=True):
            missing = int(runs[dimension].isna().sum())
            if missing and runs[dimension].notna().any():
                skipped[str(job)] = {
                    "(missing)": f"{missing} run(s) with no {dimension}: pre-trained on, never held out"
                }
        return skipped

    def report_fields(self) -> dict[str, Any]:
        """What a report adds beyond a bundled set's default protocol: how it was split, which job
        types (and, for a transfer protocol, which runs) were left out. The bundled sets' default
        reports stay as they were."""
        if self.bundled and self.protocol == BUNDLED_PROTOCOLS[self.name][0]:
            return {}
        fields: dict[str, Any] = {"protocol": self.protocol, "skipped_job_types": self.job_types_skipped()}
        if self.dimension is not None:
            fields["held_out_dimension"] = self.dimension
            fields["skipped_held_out"] = self.values_skipped()
        elif self.protocol == "leave-size-out":
            fields["held_out_property"] = SIZE_PROPERTY
            fields["skipped_held_out"] = self.values_skipped()
        elif self.protocol in SCALE_OUT_SIDE:
            skipped = self.job_types_skipped()
            fields["held_out_scale_outs"] = {
                str(job): _scale_out_cut(runs, SCALE_OUT_SIDE[self.protocol])[1]
                for job, runs in self.runs[self.evaluated].groupby("job_type", sort=True)
                if str(job) not in skipped
            }
        return fields


def render_skipped(report: dict[str, Any]) -> None:
    """Name the job types (and held-out values) a report left out, and why; the scale-out protocols:
    the scale-outs each job type held out."""
    from rich.console import Console

    held = report.get("held_out_scale_outs") or {}
    if held:
        Console().print(
            "held out (tested only: no run at them pre-trained or fine-tuned on): "
            + "; ".join(f"{job} scale-outs {', '.join(map(str, ns))}" for job, ns in held.items())
        )
    for job, why in (report.get("skipped_job_types") or {}).items():
        Console().print(f"[yellow]left out[/yellow] {job}: {why}")
    for job, values in (report.get("skipped_held_out") or {}).items():
        for value, why in values.items():
            Console().print(f"[yellow]left out[/yellow] {job} {value}: {why}")


def protocol_title(report: dict[str, Any]) -> str:
    """The protocol for a report's title, where the report names one (not a bundled set's default)."""
    return f", {report['protocol']}" if report.get("protocol") else ""


def benchmark_runs(
    dataset: str = "c3o", *, traces: str | Path | None = None, protocol: str | None = None
) -> BenchmarkRuns:
    """The bundled set ``dataset`` ("c3o": folds or leave-machine-type-out; "bell":
    leave-job-out), or the runs of a user's ``traces`` file (canonical columns, as ``bellamy
    history import`` reads them; failed runs left out) split by ``protocol`` (default "folds").
    With "leave-job-out" and "leave-environment-out" a file's held-out runs are pre-trained on the
    file's other runs and on the bundled traces (see ``PROTOCOLS``)."""
    if protocol is not None and protocol not in PROTOCOLS:
        raise InvalidInputError("protocol", protocol, f"choose one of {', '.join(PROTOCOLS)}")
    if traces is None:
        if dataset not in BUNDLED_PROTOCOLS:
            raise InvalidInputError("dataset", dataset, "choose c3o or bell, or give a traces file")
        allowed = BUNDLED_PROTOCOLS[dataset]
        protocol = allowed[0] if protocol is None else protocol
        if protocol not in allowed:
            raise InvalidInputError(
                "protocol",
                protocol,
                f"does not fit the bundled set {dataset}: choose {' or '.join(allowed)}, "
                "or give a traces file",
            )
        everything = with_context_ids(load_traces())
        if dataset == "c3o":
            c3o = everything[everything["dataset"] == "c3o"]
            return BenchmarkRuns("c3o", protocol, c3o, np.ones(len(c3o), dtype=bool), bundled=True)
        bell = (everything["dataset"] == "bell").to_numpy()
        return BenchmarkRuns("bell", protocol, everything, bell, bundled=True)
    protocol = "folds" if protocol is None else protocol
    own = successful_runs(load_runs_file(traces))
    if own.empty:
        raise InvalidInputError("traces", str(traces), "holds no successful run")
    dimension = SIZE_PROPERTY if protocol == "leave-size-out" else HELD_OUT_DIMENSION.get(protocol)
    if dimension is not None and dimension not in own.columns:
        raise InvalidInputError(
            "protocol",
            protocol,
            f"holds out {dimension} values, and {Path(traces).name} has no {dimension} column",
        )
    own = with_context_ids(own)
    if protocol in ("folds", "leave-machine-type-out", "leave-size-out", *SCALE_OUT_SIDE):
        runs, evaluated = own.reset_index(drop=True), np.ones(len(own), dtype=bool)
    else:
        bundled = with_context_ids(load_traces())
        runs = pd.concat([bundled, own], ignore_index=True)
        evaluated = np.r_[np.zeros(len(bundled), dtype=bool), np.ones(len(own), dtype=bool)]
    data = BenchmarkRuns(Path(traces).name, protocol, runs, evaluated)
    skipped = data.job_types_skipped()
    if len(skipped) == data.runs[evaluated]["job_type"].nunique():
        raise InvalidInputError(
            "traces", str(traces), f"no job type can be held out under {protocol}: {skipped}"
        )
    return data


def held_out_tasks(source: BenchmarkRuns | str, seed: int) -> Iterator[HeldOutTask]:
    """The pre-training splits of ``source`` (a ``BenchmarkRuns`` or a bundled set's name).

    folds: per job type, 5 folds of its contexts (seeded; fewer contexts, as many folds), each
    pre-trained on the job type's other folds. leave-job-out: each job type's contexts held out
    together, pre-trained on every other run. leave-machine-type-out: per job type, each machine
    type's runs held out together (fold = its place in sorted order), pre-trained on the job
    type's runs on the other machine types. leave-environment-out: per job type, each
    environment's runs held out together, pre-trained on every run of another environment.
    leave-size-out: per job type, the contexts at its largest third of input sizes held out
    together (fold 0), then those at its smallest third (fold 1), each pre-trained on the job
    type's other runs (runs without a size are trained on). larger-scale-outs: per job type, the
    largest third of its distinct scale-outs held out (``_scale_out_cut``); the set's own split
    (``BenchmarkRuns.structure``: the folds' seeded folds, or the job type's contexts held out
    together) with every training run above the cut left out, and of a held-out split the
    contexts with a run above the cut (fine-tuned below it, tested above it: ``HeldOutTask.draw``).
    smaller-scale-outs: the same with the smallest third held out (fine-tuned above the cut,
    tested below it, no training run below it).
    Job types ``job_types_skipped`` names are left out.
    """
    data = source if isinstance(source, BenchmarkRuns) else benchmark_runs(source)
    skipped = data.job_types_skipped()
    for algorithm, runs in data.runs[data.evaluated].groupby("job_type", sort=True):
        if str(algorithm) in skipped:
            continue
        if data.protocol in SCALE_OUT_SIDE:
            yield from _scale_out_tasks(data, str(algorithm), runs, seed)
        elif data.protocol == "folds":
            ctx = np.array(sorted(runs["context_id"].unique()))
            order = np.random.default_rng(seed).permutation(len(ctx))
            folds = min(N_FOLDS, len(ctx))
            for fold in range(folds):
                held = set(ctx[order[fold::folds]])
                mask = runs["context_id"].isin(held)
                yield HeldOutTask(str(algorithm), fold, runs[~mask], runs[mask])
        elif data.protocol == "leave-size-out":
            for fold, (label, held) in enumerate(_size_ends(runs)):
                yield HeldOutTask(str(algorithm), fold, runs[~held], runs[held], label)
        elif data.protocol == "leave-job-out":
            # a held-out context's runs leave the training data wherever they stand (a file may
            # repeat bundled runs); only the evaluated copies are replayed
            mask = data.runs["context_id"].isin(set(runs["context_id"]))
            yield HeldOutTask(str(algorithm), 0, data.runs[~mask], data.runs[mask & data.evaluated])
        else:
            dim = str(data.dimension)
            pool = data.runs[data.runs["job_type"] == algorithm] if dim == "machine_type" else data.runs
            for fold, value in enumerate(data._values(runs)):
                # the value leaves the training data whole, wherever its runs stand (a file may
                # repeat bundled runs; its other job types' runs on it too); runs without a value
                # are trained on
                held = pool[dim].astype(str).eq(value) & pool[dim].notna()
                evaluated = held & pd.Series(data.evaluated, index=data.runs.index).loc[pool.index]
                yield HeldOutTask(
                    str(algorithm),
                    fold,
                    pool[~held],
                    pool[evaluated & (pool["job_type"] == algorithm)],
                    value,
                )


def _scale_out_cut(runs: pd.DataFrame, side: str) -> tuple[int, list[int]]:
    """One job type's cut at one end of its distinct scale-outs: the third at ``side`` ("above":
    the largest, "below": the smallest; at least one) held out, and the kept scale-out next to them
    (the cut), with the held-out ones ascending."""
    scale_outs = sorted(int(n) for n in runs["scale_out"].unique())
    held = math.ceil(len(scale_outs) / 3)
    if side == "above":
        return scale_outs[-held - 1], scale_outs[-held:]
    return scale_outs[held], scale_outs[:held]


def _past(scale_out: Any, cut: Any, side: str) -> Any:
    """Whether ``scale_out`` (a number or a Series) lies past ``cut`` on ``side``."""
    return scale_out > cut if side == "above" else scale_out < cut


def _scale_out_tasks(
    data: BenchmarkRuns, algorithm: str, runs: pd.DataFrame, seed: int
) -> Iterator[HeldOutTask]:
    """The scale-out protocol's tasks of one job type (its evaluated ``runs``): its contexts held out
    as the set's own split holds them, no training run past the cut. A held-out context without a
    run past the cut has nothing to test and is left out of the task (and of its training data)."""
    side = SCALE_OUT_SIDE[data.protocol]
    cut, _ = _scale_out_cut(runs, side)
    if data.structure == "folds":
        ctx = np.array(sorted(runs["context_id"].unique()))
        order = np.random.default_rng(seed).permutation(len(ctx))
        folds = min(N_FOLDS, len(ctx))
        splits = [
            (fold, runs, runs["context_id"].isin(set(ctx[order[fold::folds]]))) for fold in range(folds)
        ]
        evaluated = pd.Series(True, index=runs.index)
    else:
        # as leave-job-out: the held-out contexts leave the training data wherever they stand
        pool = data.runs
        splits = [(0, pool, pool["context_id"].isin(set(runs["context_id"])))]
        evaluated = pd.Series(data.evaluated, index=pool.index)
    for fold, pool, held in splits:
        train = pool[~held & ~_past(pool["scale_out"], cut, side)]
        held_out = pool[held & evaluated.loc[pool.index]]
        tested = held_out.loc[_past(held_out["scale_out"], cut, side), "context_id"].unique()
        held_out = held_out[held_out["context_id"].isin(set(tested))]
        if not held_out.empty:
            yield HeldOutTask(algorithm, fold, train, held_out, cut=cut, side=side)


def _sizes(runs: pd.DataFrame) -> list[float]:
    """The distinct input sizes among ``runs``, ascending."""
    if SIZE_PROPERTY not in runs.columns:
        return []
    return sorted(float(v) for v in pd.to_numeric(runs[SIZE_PROPERTY], errors="coerce").dropna().unique())


def _size_ends(runs: pd.DataFrame) -> list[tuple[str, pd.Series]]:
    """leave-size-out's two held-out groups of one job type's runs: (label, mask) for the largest
    third of its distinct input sizes (at least one), then the smallest third."""
    sizes = _sizes(runs)
    n = max(1, round(len(sizes) / 3))
    size = pd.to_numeric(runs[SIZE_PROPERTY], errors="coerce")
    return [
        (f"{SIZE_PROPERTY} >= {sizes[-n]:g}", size >= sizes[-n]),
        (f"{SIZE_PROPERTY} <= {sizes[n - 1]:g}", size <= sizes[n - 1]),
    ]


def validate_count(name: str, value: Any) -> int:
    """``value`` if a whole number >= 1, else InvalidInputError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInputError(name, value, "must be a whole number >= 1")
    return value


def validate_workers(workers: Any) -> int:
    return validate_count("workers", workers)


def evaluate_held_out_tasks(
    work: Callable[..., T],
    *,
    dataset: str,
    traces: str | Path | None,
    protocol: str | None,
    seeds: int,
    confidence: float,
    workers: int,
    progress: Callable[[str], None] | None,
    **kwargs: Any,
) -> tuple[BenchmarkRuns, list[T]]:
    """What the accuracy and sizing benchmarks share: ``seeds`` and ``workers`` checked before the
    first model is pre-trained (not a minute into the run), the runs split (``benchmark_runs``), and
    ``work(data, seed, task, confidence=…, **kwargs)`` over every held-out task
    (``map_held_out_tasks``); the runs and the results in task order. ``confidence``: as the caller
    validated it (its value goes in the report)."""
    validate_count("seeds", seeds)
    validate_workers(workers)
    data = cached_benchmark_runs(dataset, traces, protocol)
    results = map_held_out_tasks(
        work,
        seeds,
        dataset=dataset,
        traces=traces,
        protocol=protocol,
        workers=workers,
        progress=progress,
        confidence=confidence,
        **kwargs,
    )
    return data, results


def map_held_out_tasks(
    work: Callable[..., T],
    seeds: int,
    *,
    dataset: str,
    traces: str | Path | None,
    protocol: str | None,
    workers: int = 1,
    progress: Callable[[str], None] | None = None,
    **kwargs: Any,
) -> list[T]:
    """``work(data, seed, task, **kwargs)`` for every held-out task of seeds 0..seeds-1 of the runs
    ``benchmark_runs(dataset, traces=…, protocol=…)`` splits, in that order. With ``workers`` > 1 the
    tasks run in as many fresh processes, each on its share of the cores: every task is seeded by
    itself, so the results and their order are the sequential ones (``work`` must be a module-level
    function)."""
    workers = validate_workers(workers)
    runs = {"dataset": dataset, "traces": None if traces is None else str(traces), "protocol": protocol}
    data = cached_benchmark_runs(**runs)
    order = [(seed, i, task) for seed in range(seeds) for i, task in enumerate(held_out_tasks(data, seed))]
    if workers == 1:
        results = []
        for seed, _, task in order:
            if progress:
                progress(f"seed {seed} · {task.algorithm} · {task.label()}")
            results.append(work(data, seed, task, **kwargs))
        return results
    threads = max(1, (os.cpu_count() or 1) // workers)
    done: dict[int, T] = {}
    with ProcessPoolExecutor(
        max_workers=workers, mp_context=get_context("spawn"), initializer=_limit_threads, initargs=(threads,)
    ) as pool:
        futures = {
            pool.submit(_work_on_task, work, runs, seed, i, kwargs): n for n, (seed, i, _) in enumerate(order)
        }
        for future in as_completed(futures):
            n = futures[future]
            done[n] = future.result()
            if progress:
                seed, _, task = order[n]
                progress(f"{len(done)}/{len(order)} done: seed {seed} · {task.algorithm} · {task.label()}")
    return [done[n] for n in range(len(order))]


def cached_benchmark_runs(dataset: str, traces: str | Path | None, protocol: str | None) -> BenchmarkRuns:
    """``benchmark_runs``, read once per process for the same arguments: a benchmark checks them
    before it starts and its tasks (in this process or a worker) split the same runs."""
    return _runs_of(dataset, None if traces is None else str(traces), protocol)


@functools.lru_cache(maxsize=4)
def _runs_of(dataset: str, traces: str | None, protocol: str | None) -> BenchmarkRuns:
    return benchmark_runs(dataset, traces=traces, protocol=protocol)


def _limit_threads(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def _work_on_task(
    work: Callable[..., T], runs: dict[str, Any], seed: int, index: int, kwargs: dict[str, Any]
) -> T:
    data = _runs_of(**runs)
    for i, task in enumerate(held_out_tasks(data, seed)):
        if i == index:
            return work(data, seed, task, **kwargs)
    raise IndexError(f"seed {seed} has no held-out task {index}")


def draw_points(
    context_runs: pd.DataFrame, k: int, rng: np.random.Generator
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """k runs at k distinct scale-outs (fine-tuning data) and every run at the other scale-outs."""
    picked, test = pick_points(context_runs["scale_out"].to_numpy(), k, rng)
    return context_runs.iloc[picked], context_runs.iloc[test]


def ernest_band(
    points: pd.DataFrame, scale_outs: np.ndarray, confidence: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Ernest fitted on ``points``: (mean, lower, upper) at ``scale_outs``; None without points."""
    if points.empty:
        return None
    size = float(points["data_size_mb"].iloc[0]) if "data_size_mb" in points else 1.0
    model = ErnestModel.fit_points(points["scale_out"].to_numpy(), points["runtime_s"].to_numpy(), size)
    return model.predict_band(None, scale_outs.tolist(), confidence)


class GbmBaseline:
    """Gradient boosting on (scale-out, context properties) → log runtime, trained on the
    other folds' runs plus the held-out contexts' k fine-tuning points."""

    def __init__(self, train: pd.DataFrame, seed: int) -> None:
        self.columns = [
            c for c in context_columns(train.columns) if c != "context_id" and train[c].notna().any()
        ]
        self.categories: dict[str, list[str]] = {}
        self.train = train
        self.seed = seed

    def _matrix(self, frame: pd.DataFrame) -> np.ndarray:
        cols = [frame["scale_out"].to_numpy(dtype=float)]
        for col in self.columns:
            values = frame[col] if col in frame else pd.Series([np.nan] * len(frame))
            numeric = pd.to_numeric(values, errors="coerce")
            if numeric.notna().sum() == values.notna().sum():
                cols.append(numeric.to_numpy(dtype=float))
            else:
                cats = self.categories.setdefault(col, sorted(map(str, values.dropna().unique())))
                cols.append(
                    np.array([cats.index(str(v)) if str(v) in cats else -1 for v in values], dtype=float)
                )
        return np.stack(cols, axis=1)

    def fit_predict(self, extra: pd.DataFrame, test: pd.DataFrame) -> np.ndarray:
        from sklearn.ensemble import HistGradientBoostingRegressor
        from threadpoolctl import threadpool_limits

        train = pd.concat([self.train, extra], ignore_index=True) if not extra.empty else self.train
        self.categories = {}
        x_train = self._matrix(train)
        model = HistGradientBoostingRegressor(max_iter=300, learning_rate=0.1, random_state=self.seed)
        # one OpenMP thread: on small data the second thread costs more than it brings
        with threadpool_limits(1):
            model.fit(x_train, np.log(train["runtime_s"].to_numpy()))
            return np.exp(model.predict(self._matrix(test)))


@dataclass(frozen=True)
class _Curve:
    """A training context's runtime curve: mean log runtime at each of its scale-outs."""

    value: str
    properties: dict[str, Any]
    log_n: np.ndarray
    log_runtime: np.ndarray

    def at(self, scale_outs: np.ndarray) -> np.ndarray:
        """Log runtime at ``scale_outs``, linear in log-log space between the measured scale-outs
        and along the end segments beyond them (a power law); one scale-out: a flat line."""
        x = np.log(np.asarray(scale_outs, dtype=float))
        if len(self.log_n) == 1:
            return np.full(len(x), self.log_runtime[0])
        inside = np.interp(x, self.log_n, self.log_runtime)
        lo = (self.log_runtime[1] - self.log_runtime[0]) / (self.log_n[1] - self.log_n[0])
        hi = (self.log_runtime[-1] - self.log_runtime[-2]) / (self.log_n[-1] - self.log_n[-2])
        below = self.log_runtime[0] + lo * (x - self.log_n[0])
        above = self.log_runtime[-1] + hi * (x - self.log_n[-1])
        return np.where(x < self.log_n[0], below, np.where(x > self.log_n[-1], above, inside))


def _same(a: Any, b: Any) -> bool:
    return (pd.isna(a) and pd.isna(b)) or (not pd.isna(a) and not pd.isna(b) and a == b)


def _distance(a: Any, b: Any) -> float:
    """How far apart two values of one property are: |log ratio| for positive numbers (a factor
    e counts 1), else 0 when equal and 1 when not (a category, a sign, a missing value)."""
    if _same(a, b):
        return 0.0
    try:
        x, y = float(a), float(b)
    except (TypeError, ValueError):
        return 1.0
    return abs(float(np.log(x / y))) if x > 0 and y > 0 else 1.0


class NearestCurves:
    """The "nearest curves" baseline of the transfer protocols: a held-out context's runtime is
    the curve of the training contexts of its job type that share its job parameters, on each
    other value of the held-out ``dimension`` (machine type, environment), interpolated in log-log
    space to the scale-outs asked, shifted in log space to the context's k runs (k = 0: no shift)
    and averaged in log space (a geometric mean) across those values.

    Job parameters: every context property but ``dimension`` and the properties that go with it,
    i.e. those one value of ``dimension`` fixes in every known context of the job type (a machine
    type's cores and memory). On a value where no context shares them all, the nearest contexts by
    the summed ``_distance`` of the parameters that differ stand in (ties averaged)."""

    def __init__(self, train: pd.DataFrame, dimension: str, held_out: pd.DataFrame) -> None:
        self.dimension = dimension
        self.curves: dict[str, list[_Curve]] = {}
        self.parameters: dict[str, list[str]] = {}
        every = pd.concat([train, held_out], ignore_index=True)
        for job, known in every.groupby("job_type", sort=True):
            columns = [
                c
                for c in context_columns(known.columns)
                if c not in ("context_id", dimension) and known[c].notna().any()
            ]
            contexts = known.drop_duplicates("context_id")
            contexts = contexts[contexts[dimension].notna()]
            per_value = contexts.groupby(contexts[dimension].astype(str))
            fixed = {c for c in columns if per_value[c].nunique(dropna=False).max() <= 1}
            self.parameters[str(job)] = [c for c in columns if c not in fixed]
        for (job, _cid), runs in train.groupby(["job_type", "context_id"], sort=True):
            value = runs[dimension].iloc[0]
            if pd.isna(value):
                continue
            by_n = np.log(runs["runtime_s"].to_numpy(dtype=float))
            n = runs["scale_out"].to_numpy(dtype=float)
            scale_outs = np.unique(n)
            self.curves.setdefault(str(job), []).append(
                _Curve(
                    str(value),
                    runs.iloc[0][self.parameters[str(job)]].to_dict(),
                    np.log(scale_outs),
                    np.array([by_n[n == x].mean() for x in scale_outs]),
                )
            )

    def predict(
        self, context: dict[str, Any], points: pd.DataFrame, scale_outs: np.ndarray
    ) -> np.ndarray | None:
        """Runtimes of ``context`` at ``scale_outs`` given its k fine-tuning ``points``; None when
        no training context of its job type stands on another value of the dimension."""
        job = str(context["job_type"])
        own = context.get(self.dimension)
        params = self.parameters.get(job, [])
        by_value: dict[str, list[_Curve]] = {}
        for curve in self.curves.get(job, []):
            if pd.isna(own) or curve.value != str(own):
                by_value.setdefault(curve.value, []).append(curve)
        if not by_value:
            return None
        chosen: list[_Curve] = []
        for curves in by_value.values():
            far = [sum(_distance(context.get(p), c.properties[p]) for p in params) for c in curves]
            chosen.extend(c for c, d in zip(curves, far, strict=True) if d == min(far))
        # every chosen curve counts once within its value, every value once in the average
        weights = np.array([1.0 / sum(c.value == x.value for x in chosen) for c in chosen])
        ns = np.asarray(scale_outs, dtype=float)
        log_pred = np.average([c.at(ns) for c in chosen], axis=0, weights=weights)
        if not points.empty:
            at_points = np.average(
                [c.at(points["scale_out"].to_numpy(dtype=float)) for c in chosen], axis=0, weights=weights
            )
            log_pred = log_pred + float(
                np.mean(np.log(points["runtime_s"].to_numpy(dtype=float)) - at_points)
            )
        return np.exp(log_pred)


def pretrain(
    task: HeldOutTask, seed: int, quick: bool, model_cache: str | Path | None = None
) -> RuntimeModel:
    """The held-out task's pre-trained model. With ``model_cache`` (a folder) a model pre-trained
    before on the same runs, seed, config and model code is read back instead: ``accuracy`` and
    ``sizing`` on the same splits then pre-train once."""
    train = task.train.drop(columns=["context_id"])
    # the unseen-job calibration only where the held-out job type is one (leave-job-out of a job
    # the other runs never show); Bell's held-out jobs run in C3O too
    unseen = task.algorithm not in set(task.train["job_type"])
    config = quick_config() if quick else TrainingConfig()
    path = None
    if model_cache is not None:
        key = hashlib.sha256()
        key.update(_model_code_digest())
        key.update(repr((seed, unseen, config)).encode())
        key.update(pd.util.hash_pandas_object(train.sort_index(axis=1), index=False).to_numpy().tobytes())
        path = Path(model_cache) / f"{key.hexdigest()[:32]}.safetensors"
        if path.is_file():
            return RuntimeModel.load(path)
    model = RuntimeModel.pretrain(train, seed=seed, config=config, unseen_job_types=unseen)
    if path is not None:
        model.save(path)
    return model


@functools.cache
def _model_code_digest() -> bytes:
    """The model package's source: a cached model of other code is never read back."""
    digest = hashlib.sha256()
    for source in sorted((Path(__file__).parents[1] / "model").glob("*.py")):
        digest.update(source.read_bytes())
    return digest.digest()
