"""Splits and baselines shared by the accuracy and sizing benchmarks (DESIGN.md protocols)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from airflow_provider_bellamy.datasets import load_runs_file, load_traces
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.model import ErnestModel, RuntimeModel, TrainingConfig
from airflow_provider_bellamy.model.calibration import pick_points
from airflow_provider_bellamy.records import context_columns, context_fingerprint, successful_runs

K_VALUES = (0, 1, 2, 3, 4, 5)
N_FOLDS = 5


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
    """One pre-training split: train on ``train``, evaluate the contexts in ``held_out``."""

    algorithm: str
    fold: int
    train: pd.DataFrame
    held_out: pd.DataFrame


# How a benchmark splits its runs (DESIGN.md): "folds" holds out a fifth of a job type's contexts
# and pre-trains on the rest of that job type (C3O); "leave-job-out" holds out every context of a
# job type and pre-trains on every other run, the bundled traces included (Bell: one context per
# job, on a cluster the other traces never saw).
PROTOCOLS = ("folds", "leave-job-out")


@dataclass(frozen=True)
class BenchmarkRuns:
    """What a benchmark replays: every run it may pre-train on (``runs``, with ``context_id``),
    which of them it evaluates (``evaluated``, a mask over ``runs``), and how it splits them."""

    name: str
    protocol: str
    runs: pd.DataFrame
    evaluated: np.ndarray
    bundled: bool = False

    def job_types_skipped(self) -> dict[str, str]:
        """Evaluated job types no split can hold out, and why."""
        skipped = {}
        for job, runs in self.runs[self.evaluated].groupby("job_type", sort=True):
            if self.protocol == "folds" and runs["context_id"].nunique() < 2:
                skipped[str(job)] = "one context: nothing of its job type left to pre-train on"
            elif self.protocol == "leave-job-out" and (self.runs["job_type"] == job).all():
                skipped[str(job)] = "no run of another job type to pre-train on"
        return skipped

    def report_fields(self) -> dict[str, Any]:
        """What a traces file's report adds: how it was split, which job types were left out (the
        bundled sets' reports stay as they were)."""
        if self.bundled:
            return {}
        return {"protocol": self.protocol, "skipped_job_types": self.job_types_skipped()}


def render_skipped(report: dict[str, Any]) -> None:
    """Name the job types a report left out, and why."""
    from rich.console import Console

    for job, why in (report.get("skipped_job_types") or {}).items():
        Console().print(f"[yellow]left out[/yellow] {job}: {why}")


def benchmark_runs(
    dataset: str = "c3o", *, traces: str | Path | None = None, protocol: str | None = None
) -> BenchmarkRuns:
    """The bundled set ``dataset`` ("c3o": folds, "bell": leave-job-out), or the runs of a user's
    ``traces`` file (canonical columns, as ``bellamy history import`` reads them; failed runs left
    out) split by ``protocol`` (default "folds"). With "leave-job-out" a file's held-out job is
    pre-trained on the file's other job types and on the bundled traces."""
    if traces is None:
        if protocol is not None:
            raise InvalidInputError(
                "protocol", protocol, "applies to a traces file; the bundled sets have their own"
            )
        everything = with_context_ids(load_traces())
        if dataset == "c3o":
            c3o = everything[everything["dataset"] == "c3o"]
            return BenchmarkRuns("c3o", "folds", c3o, np.ones(len(c3o), dtype=bool), bundled=True)
        if dataset == "bell":
            bell = (everything["dataset"] == "bell").to_numpy()
            return BenchmarkRuns("bell", "leave-job-out", everything, bell, bundled=True)
        raise InvalidInputError("dataset", dataset, "choose c3o or bell, or give a traces file")
    protocol = "folds" if protocol is None else protocol
    if protocol not in PROTOCOLS:
        raise InvalidInputError("protocol", protocol, f"choose one of {', '.join(PROTOCOLS)}")
    own = successful_runs(load_runs_file(traces))
    if own.empty:
        raise InvalidInputError("traces", str(traces), "holds no successful run")
    own = with_context_ids(own)
    if protocol == "folds":
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
    together, pre-trained on every other run. Job types ``job_types_skipped`` names are left out.
    """
    data = source if isinstance(source, BenchmarkRuns) else benchmark_runs(source)
    skipped = data.job_types_skipped()
    for algorithm, runs in data.runs[data.evaluated].groupby("job_type", sort=True):
        if str(algorithm) in skipped:
            continue
        if data.protocol == "folds":
            ctx = np.array(sorted(runs["context_id"].unique()))
            order = np.random.default_rng(seed).permutation(len(ctx))
            folds = min(N_FOLDS, len(ctx))
            for fold in range(folds):
                held = set(ctx[order[fold::folds]])
                mask = runs["context_id"].isin(held)
                yield HeldOutTask(str(algorithm), fold, runs[~mask], runs[mask])
        else:
            # a held-out context's runs leave the training data wherever they stand (a file may
            # repeat bundled runs); only the evaluated copies are replayed
            mask = data.runs["context_id"].isin(set(runs["context_id"]))
            yield HeldOutTask(str(algorithm), 0, data.runs[~mask], data.runs[mask & data.evaluated])


def draw_points(
    context_runs: pd.DataFrame, k: int, rng: np.random.Generator
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """k runs at k distinct scale-outs (fine-tuning data) and every run at the other scale-outs."""
    picked, test = pick_points(context_runs["scale_out"].to_numpy(), k, rng)
    return context_runs.iloc[picked], context_runs.iloc[test]


def ernest_predict(points: pd.DataFrame, scale_outs: np.ndarray) -> np.ndarray | None:
    if points.empty:
        return None
    size = float(points["data_size_mb"].iloc[0]) if "data_size_mb" in points else 1.0
    model = ErnestModel.fit_points(points["scale_out"].to_numpy(), points["runtime_s"].to_numpy(), size)
    return model.predict(None, scale_outs)


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


def pretrain(task: HeldOutTask, seed: int, quick: bool) -> RuntimeModel:
    # the unseen-job calibration only where the held-out job type is one (leave-job-out of a job
    # the other runs never show); Bell's held-out jobs run in C3O too
    return RuntimeModel.pretrain(
        task.train.drop(columns=["context_id"]),
        seed=seed,
        config=quick_config() if quick else None,
        unseen_job_types=task.algorithm not in set(task.train["job_type"]),
    )
