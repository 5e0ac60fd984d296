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


# A context whose runs lie on Ernest's curve (runtime ~ 800/n): with no trained model, sizing fits
# Ernest to them; at a 300 s target 4 meets it and 2 does not.
ERNEST_CONTEXT: dict[str, Any] = {"machine_type": "emr-m5", "cores": 4, "data_size_mb": 512.0}
ERNEST_RUNS = [(2, 400.0), (4, 210.0), (8, 115.0), (2, 405.0), (4, 205.0), (8, 118.0)]


def seed_ernest_runs(b: Bellamy, job_type: str = "etl") -> None:
    for i, (n, runtime) in enumerate(ERNEST_RUNS):
        b.record_run(
            **observed_run(
                job_type=job_type, scale_out=n, runtime_s=runtime, context=ERNEST_CONTEXT, run_id=f"seed{i}"
            )
        )


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


def decision_values(**overrides: Any) -> dict[str, Any]:
    """A full sizing decision's columns as `DecisionRepository.add` takes them."""
    values: dict[str, Any] = {
        "job_type": "grep",
        "framework": "spark",
        "context": {"machine_type": "m5.xlarge", "data_size_mb": 1000.0},
        "context_fingerprint": "f" * 16,
        "candidates": [
            {
                "scale_out": 2,
                "predicted_s": 300.0,
                "lower_s": 280.0,
                "upper_s": float("inf"),
                "node_hours": 0.2,
                "cost": None,
                "meets_target": False,
            },
            {
                "scale_out": 4,
                "predicted_s": 150.0,
                "lower_s": 140.0,
                "upper_s": 170.0,
                "node_hours": 0.2,
                "cost": None,
                "meets_target": True,
            },
        ],
        "target_s": 200.0,
        "confidence": 0.9,
        "objective": "min_scale_out",
        "chosen_scale_out": 4,
        "feasible": True,
        "reason": "smallest scale-out whose upper band meets the target",
        "model_version": "grep/v1",
        "dag_id": "etl",
        "task_id": "grep_logs",
        "run_id": "scheduled__2025-01-01",
        "map_index": -1,
        "try_number": 1,
    }
    values.update(overrides)
    return values


def store_at(store_url: str, revision: str) -> Store:
    """A store migrated only up to ``revision`` (an older schema, as an earlier release left it)."""
    from alembic import command

    from airflow_provider_bellamy.store.store import alembic_config, forget_verified

    s = Store(store_url)
    if s.sqlite_file is not None:
        s.sqlite_file.parent.mkdir(parents=True, exist_ok=True)
    with s.engine.begin() as conn:
        command.upgrade(alembic_config(conn), revision)  # type: ignore[arg-type]
    forget_verified()
    return s
