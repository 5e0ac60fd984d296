from __future__ import annotations

import pandas as pd
import pytest

from airflow_provider_bellamy.benchmarks.common import with_context_ids
from airflow_provider_bellamy.datasets import load_traces
from airflow_provider_bellamy.model import RuntimeModel, TrainingConfig

# Small but real: enough epochs for the model to learn the grep traces' shape.
FAST = TrainingConfig(members=2, max_epochs=400, min_epochs=100, patience=100)


@pytest.fixture(scope="session")
def grep_runs() -> pd.DataFrame:
    return with_context_ids(load_traces("c3o", "grep"))


@pytest.fixture(scope="session")
def held_out_context(grep_runs: pd.DataFrame) -> str:
    return sorted(grep_runs["context_id"].unique())[3]


@pytest.fixture(scope="session")
def held_out_properties(grep_runs: pd.DataFrame, held_out_context: str) -> dict[str, object]:
    """The held-out context's properties, as a caller gives them (no run fields)."""
    runs = grep_runs[grep_runs["context_id"] == held_out_context]
    return runs.drop(columns=["context_id", "runtime_s", "scale_out"]).iloc[0].to_dict()


@pytest.fixture(scope="session")
def grep_model(grep_runs: pd.DataFrame, held_out_context: str) -> RuntimeModel:
    train = grep_runs[grep_runs["context_id"] != held_out_context].drop(columns=["context_id"])
    return RuntimeModel.pretrain(train, seed=0, config=FAST)
