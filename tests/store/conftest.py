"""Helpers shared by the store tests (the backends come from tests/fixtures/postgres.py)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.store import DecisionRepository, Store


@pytest.fixture
def store(store_url: str) -> Store:
    """A migrated, empty store on the parametrised backend."""
    s = Store(store_url)
    s.upgrade()
    return s


@pytest.fixture
def bellamy(store: Store, store_url: str) -> Bellamy:
    return Bellamy(store_url)


def observed_run(**overrides: Any) -> dict[str, Any]:
    run: dict[str, Any] = {
        "job_type": "grep",
        "framework": "spark",
        "scale_out": 4,
        "runtime_s": 120.5,
        "context": {"machine_type": "m5.xlarge", "data_size_mb": 1000.0},
        "dag_id": "etl",
        "task_id": "grep_logs",
        "run_id": "scheduled__2025-01-01",
        "map_index": -1,
        "try_number": 1,
    }
    run.update(overrides)
    return run


def add_decision(store: Store, *, age: dt.timedelta = dt.timedelta(0), **overrides: Any) -> int:
    """Store a minimal sizing decision made ``age`` ago; returns its id."""
    values: dict[str, Any] = {
        "job_type": "grep",
        "context": {"a": 1},
        "context_fingerprint": "f" * 32,
        "candidates": [],
        "confidence": 0.9,
        "objective": "min_scale_out",
        "chosen_scale_out": 4,
        "feasible": True,
        "reason": "test",
        "created_at": dt.datetime.now(dt.timezone.utc) - age,
        **overrides,
    }
    return store.write(lambda s: DecisionRepository(s).add(values).id)
