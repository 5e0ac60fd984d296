"""A store that reads but refuses writes (a read-only PostgreSQL role; a hot standby the same) at
sizing time: the model's answer still launches, unstored, and nothing stored changes. Until
session 31 (prod31) the refused decision row threw the answer away: the operator launched its
fallback, the largest candidate (16 where the model chose 4), saying "no model answer", and a
context with runs could not even be predicted (the fine-tuned copy, a cache, was refused)."""

from __future__ import annotations

import datetime as dt

import pandas as pd
import pytest

from airflow_provider_bellamy.datasets import load_traces
from airflow_provider_bellamy.exceptions import DecisionNotStoredError
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.model import TrainingConfig
from airflow_provider_bellamy.records import context_columns
from tests.fixtures.airflow import connection_json, task_states, xcom_value
from tests.fixtures.airflow_db import run_dag_test
from tests.store.conftest import ERNEST_CONTEXT, seed_ernest_runs


def _counts(b: Bellamy, job_type: str) -> tuple[int, int, int]:
    return b.count_runs(), len(b.list_decisions(limit=None)), len(b.list_models(job_type))


@pytest.mark.postgres
@pytest.mark.slow
def test_a_read_only_store_launches_the_models_answer_unstored(
    airflow_db: str, postgres_url: str, read_only_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.sdk import DAG

    from airflow_provider_bellamy.operators.sizing import BellamySizingOperator

    owner = Bellamy(postgres_url)
    seed_ernest_runs(owner)  # Ernest's curve: 4 meets the 300 s target, 2 does not
    before = _counts(owner, "etl")
    monkeypatch.setenv(
        "AIRFLOW_CONN_BELLAMY_DEFAULT",
        connection_json("bellamy", extra={"store_url": read_only_url, "connect_timeout": 5}),
    )
    with DAG(
        "test_read_only_store", schedule=None, start_date=dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
    ):
        size = BellamySizingOperator(
            task_id="size", job_type="etl", properties=ERNEST_CONTEXT, scale_outs=[2, 4, 8, 16], target=300
        )
    dr = run_dag_test(size.dag)
    assert task_states(dr) == {"size": "success"}
    decision = xcom_value(dr, "size")
    assert decision["chosen_scale_out"] == 4, decision["reason"]  # Ernest's answer, not the largest (16)
    assert decision["fallback_reason"] is None or "StoreError" not in decision["fallback_reason"]
    assert decision["decision_id"] is None  # nothing pretends it was stored
    assert _counts(owner, "etl") == before
    # the same answer the owner's store gives (and stores)
    assert owner.size("etl", ERNEST_CONTEXT, [2, 4, 8, 16], target_s=300).chosen_scale_out == 4


def _sort_contexts() -> list[pd.DataFrame]:
    frame = load_traces("c3o", job_type="sort")
    return [group for _, group in frame.groupby(["machine_type", "data_size_mb", "lines"], sort=True)]


@pytest.mark.postgres
@pytest.mark.slow
def test_a_read_only_store_fine_tunes_without_storing_the_copy(postgres_url: str, read_only_url: str) -> None:
    owner = Bellamy(postgres_url)
    contexts = _sort_contexts()[:4]
    owner.record_runs(pd.concat(contexts, ignore_index=True))
    (report,) = owner.train(
        "sort", config=TrainingConfig(members=2, max_epochs=60, min_epochs=10, patience=10)
    )
    assert report.outcome == "promoted"
    row = contexts[0].iloc[0]
    context = {k: row[k] for k in context_columns(contexts[0].columns) if pd.notna(row[k])}
    scale_outs = sorted(int(s) for s in contexts[0]["scale_out"].unique())
    before = _counts(owner, "sort")

    reader = Bellamy(read_only_url)
    prediction = reader.predict("sort", context, scale_outs)  # a StoreError before
    assert "not stored" in str(prediction.model_version)
    with pytest.raises(DecisionNotStoredError, match="permission denied for table") as refused:
        reader.size("sort", context, scale_outs, target_s=float(prediction.upper_s[0]) + 1.0)
    unstored = refused.value.decision
    assert unstored.decision_id is None and unstored.fallback_reason is None
    assert _counts(owner, "sort") == before  # nothing stored, nothing lost

    # the copy the owner fine-tunes and stores answers as the unstored one did
    stored = owner.predict("sort", context, scale_outs)
    assert stored.mean_s == pytest.approx(prediction.mean_s)
