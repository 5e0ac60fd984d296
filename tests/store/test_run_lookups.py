"""The repository look-ups the operators and the sensor use (no SQL of their own), and reads of a
store that does not exist yet: every read gets a session, over an empty store, and creates nothing."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError, UnknownJobTypeError
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.store import DecisionRepository, ModelRepository, RunRepository, Store
from tests.store.conftest import observed_run


def test_a_cluster_job_is_found_by_framework_and_external_id(store: Store, bellamy: Bellamy) -> None:
    first = bellamy.record_run(**observed_run(external_id="job-1", framework="flink"))
    bellamy.record_run(**observed_run(external_id="job-2", framework="flink", try_number=2))
    with store.read() as session:
        repo = RunRepository(session)
        assert repo.id_of_job("flink", "job-1") == first
        assert repo.id_of_job("spark", "job-1") is None  # the same id on another framework
        assert repo.id_of_job("flink", "job-3") is None
    assert bellamy.recorded_job_run("flink", "job-1") == first


def test_a_task_s_runtimes_are_its_newest_successful_ones(store: Store, bellamy: Bellamy) -> None:
    for i, (runtime, status, task) in enumerate(
        [(10.0, "success", "t"), (20.0, "failed", "t"), (30.0, "success", "t"), (40.0, "success", "u")]
    ):
        bellamy.record_run(**observed_run(runtime_s=runtime, status=status, task_id=task, try_number=i + 1))
    bellamy.record_run(**observed_run(runtime_s=50.0, task_id="t", dag_id="other"))
    with store.read() as session:
        repo = RunRepository(session)
        assert repo.task_runtimes("etl", "t", limit=20) == [30.0, 10.0]
        assert repo.task_runtimes("etl", "t", limit=1) == [30.0]
        assert repo.task_runtimes("etl", "nobody", limit=20) == []
    assert bellamy.task_durations("etl", "t", last=5) == [30.0, 10.0]


def test_a_store_that_does_not_exist_reads_as_empty_and_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "bellamy.db"
    store = Store(f"sqlite:///{path}")
    with store.read("reading a missing store") as session:
        runs = RunRepository(session)
        assert runs.job_types() == [] and runs.count() == 0 and runs.newest_id("grep") is None
        assert runs.property_kinds("grep").kinds == {}
        assert runs.id_of_job("spark", "driver-1") is None
        assert runs.task_runtimes("etl", "t", limit=5) == []
        assert runs.newest_training_id("grep", "f" * 16) is None
        assert ModelRepository(session).active("grep") is None
        assert DecisionRepository(session).list() == []
    bellamy = Bellamy(f"sqlite:///{path}")
    assert bellamy.recorded_job_run("spark", "driver-1") is None
    assert bellamy.task_durations("etl", "t") == []
    assert bellamy.job_types() == [] and bellamy.list_decisions() == []
    assert bellamy.runs_frame().empty
    with pytest.raises(InvalidInputError, match="no such decision"):
        bellamy.get_decision(1)
    with pytest.raises(InvalidInputError, match="has no active model"):
        bellamy.load_model(job_type="grep")
    with pytest.raises(InvalidInputError, match="no successful runs"):
        bellamy.train()
    with pytest.raises(UnknownJobTypeError):
        bellamy.predict("grep", {"a": 1}, [1, 2])
    assert bellamy.prune_models() == {"general": 0, "context": 0, "files": 0, "deleted": []}
    assert not path.parent.exists()

    # each thread reads its own empty store (SQLite connections are per thread)
    seen: list[int] = []
    worker = threading.Thread(target=lambda: seen.append(bellamy.count_runs()))
    worker.start()
    worker.join()
    assert seen == [0] and not path.parent.exists()

    # the first write creates it; reads then see what it holds, not the empty store
    bellamy.record_run(**observed_run(external_id="driver-1"))
    assert path.exists()
    assert bellamy.recorded_job_run("spark", "driver-1") is not None
    assert bellamy.task_durations("etl", "grep_logs") == [120.5]
