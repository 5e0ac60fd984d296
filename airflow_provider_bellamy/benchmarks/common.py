"""Splits and baselines shared by the accuracy and sizing benchmarks (DESIGN.md protocols)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd

from airflow_provider_bellamy.datasets import load_traces
from airflow_provider_bellamy.model import ErnestModel, RuntimeModel, TrainingConfig
from airflow_provider_bellamy.model.calibration import pick_points
from airflow_provider_bellamy.records import context_columns, context_fingerprint

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


def held_out_tasks(dataset: str, seed: int) -> Iterator[HeldOutTask]:
    """C3O: per algorithm, 5 folds of contexts (seeded). Bell: each Bell job's one context is
    held out and the model is pre-trained on every other bundled run (C3O and other Bell jobs)."""
    everything = with_context_ids(load_traces())
    if dataset == "c3o":
        c3o = everything[everything["dataset"] == "c3o"]
        for algorithm, runs in c3o.groupby("job_type", sort=True):
            ctx = np.array(sorted(runs["context_id"].unique()))
            order = np.random.default_rng(seed).permutation(len(ctx))
            for fold in range(N_FOLDS):
                held = set(ctx[order[fold::N_FOLDS]])
                mask = runs["context_id"].isin(held)
                yield HeldOutTask(str(algorithm), fold, runs[~mask], runs[mask])
    elif dataset == "bell":
        bell = everything[everything["dataset"] == "bell"]
        for algorithm, runs in bell.groupby("job_type", sort=True):
            held = set(runs["context_id"])
            mask = everything["context_id"].isin(held)
            yield HeldOutTask(str(algorithm), 0, everything[~mask], everything[mask])
    else:
        raise ValueError(f"dataset={dataset!r}: choose c3o or bell")


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
    return RuntimeModel.pretrain(
        task.train.drop(columns=["context_id"]), seed=seed, config=quick_config() if quick else None
    )
