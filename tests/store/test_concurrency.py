"""Many real processes recording at once: every run lands exactly once, no error surfaces."""

from __future__ import annotations

import multiprocessing as mp
from typing import Any

from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.store.concurrency import record_concurrently


def test_eight_processes_record_500_runs_each(store_url: str) -> None:
    report = record_concurrently(store_url, processes=8, runs_per_process=500)
    print(f"\nconcurrent recording: {report}")
    assert report["errors"] == []
    assert report["exit_codes"] == [0] * 8
    assert report["rows_added"] == 4000
    assert report["created_reported"] == 4000
    assert Bellamy(store_url).count_runs(job_type="concurrency") == 4000


def _same_tries(url: str, barrier: Any, out: Any) -> None:
    b = Bellamy(url)
    barrier.wait()
    ids = [
        b.record_run(
            job_type="grep",
            framework="spark",
            scale_out=2,
            runtime_s=10.0 + i,
            context={"data_size_mb": 5.0},
            dag_id="race",
            task_id="t",
            run_id=f"r{i}",
            try_number=1,
        )
        for i in range(60)
    ]
    out.put(ids)


def test_racing_processes_recording_the_same_tries_get_one_row_each(store_url: str) -> None:
    Bellamy(store_url).upgrade()
    ctx = mp.get_context("forkserver")
    barrier, out = ctx.Barrier(4), ctx.Queue()
    procs = [ctx.Process(target=_same_tries, args=(store_url, barrier, out)) for _ in range(4)]
    for p in procs:
        p.start()
    results = [out.get(timeout=300) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert all(ids == results[0] for ids in results)  # every process got the same row ids
    assert Bellamy(store_url).count_runs() == 60
