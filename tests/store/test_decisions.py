"""Decisions are stored with their inputs and linked to the run they led to."""

from __future__ import annotations

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.store import DecisionRepository, Store
from tests.store.conftest import decision_values, observed_run


def test_decision_round_trip_and_link(store: Store, bellamy: Bellamy) -> None:
    row = store.write(lambda s: DecisionRepository(s).add(decision_values()))
    assert row.id >= 1 and row.created_at.tzinfo is not None
    decision = bellamy.get_decision(row.id)
    assert decision.chosen_scale_out == 4 and decision.feasible
    assert decision.candidates[0].upper_s == float("inf")  # stored as JSON null, read back as unbounded
    assert decision.model_version == "grep/v1"

    run_row = bellamy.record_run(**observed_run(decision_id=row.id))
    listed = bellamy.list_decisions()
    assert listed[0]["run_row_id"] == run_row  # recording the run linked it
    assert bellamy.list_runs()[0]["decision_id"] == row.id

    other = store.write(lambda s: DecisionRepository(s).add(decision_values(chosen_scale_out=2)))
    run2 = bellamy.record_run(**observed_run(try_number=2))
    bellamy.link_decision(other.id, run2)
    bellamy.link_decision(other.id, run2)  # again: no-op
    assert bellamy.list_decisions()[0]["run_row_id"] == run2


def test_link_errors_name_the_field(store: Store, bellamy: Bellamy) -> None:
    row = store.write(lambda s: DecisionRepository(s).add(decision_values()))
    flink_run = bellamy.record_run(**observed_run(job_type="wordcount", framework="flink"))
    with pytest.raises(InvalidInputError, match="decision_id=9999"):
        bellamy.link_decision(9999, flink_run)
    with pytest.raises(InvalidInputError, match="run_row_id=9999"):
        bellamy.link_decision(row.id, 9999)
    with pytest.raises(InvalidInputError, match="run_row_id"):
        bellamy.link_decision(row.id, flink_run)  # a wordcount run cannot answer a grep decision
    with pytest.raises(InvalidInputError, match="decision_id=0"):
        bellamy.link_decision(0, flink_run)
    assert bellamy.list_decisions()[0]["run_row_id"] is None


def test_run_with_unknown_decision_is_still_recorded(bellamy: Bellamy) -> None:
    row_id = bellamy.record_run(**observed_run(decision_id=424242))
    run = bellamy.list_runs()[0]
    assert run["id"] == row_id and run["decision_id"] == 424242


def test_decisions_list_newest_first_with_filter(store: Store, bellamy: Bellamy) -> None:
    for job in ("grep", "sort", "grep"):
        store.write(lambda s, job=job: DecisionRepository(s).add(decision_values(job_type=job)))
    assert [d["job_type"] for d in bellamy.list_decisions()] == ["grep", "sort", "grep"]
    assert len(bellamy.list_decisions("grep")) == 2
    assert len(bellamy.list_decisions(limit=1)) == 1
