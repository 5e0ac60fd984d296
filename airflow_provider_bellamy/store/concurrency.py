"""Measure concurrent recording: N real processes writing M runs each into one store at once.

The project's target: 8 processes x 500 runs into SQLite and into PostgreSQL give exactly
4,000 rows and no error. Each run is its own transaction, as when every Airflow task
records its own run::

    python -m airflow_provider_bellamy.store.concurrency --url sqlite:////tmp/b.db --processes 8 --runs 500
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import statistics
import sys
import time
from typing import Any

from airflow_provider_bellamy.records import context_fingerprint, normalize_context
from airflow_provider_bellamy.store.repositories import RunRepository
from airflow_provider_bellamy.store.store import Store


def _worker(url: str, index: int, runs: int, dag_id: str, barrier: Any, results: Any) -> None:
    latencies: list[float] = []
    errors: list[str] = []
    created = 0
    store = Store(url)
    context = normalize_context({"machine_type": f"worker-{index}", "data_size_mb": 100.0 * (index + 1)})
    fingerprint = context_fingerprint("concurrency", context)
    barrier.wait()
    started = time.perf_counter()
    for j in range(runs):
        row = {
            "job_type": "concurrency",
            "framework": "spark",
            "scale_out": 1 + j % 8,
            "runtime_s": 10.0 + j,
            "context": context,
            "context_fingerprint": fingerprint,
            "source": "observed",
            "dag_id": dag_id,
            "task_id": f"worker_{index}",
            "run_id": f"run_{j}",
            "map_index": -1,
            "try_number": 1,
        }
        t0 = time.perf_counter()
        try:
            _, was_new = store.write(lambda s, row=row: RunRepository(s).add(row), what="recording a run")
            created += int(was_new)
        except Exception as exc:  # reported to the parent, which fails the measurement
            errors.append(f"{type(exc).__name__}: {exc}")
        latencies.append(time.perf_counter() - t0)
    results.put(
        {
            "worker": index,
            "created": created,
            "errors": errors,
            "seconds": time.perf_counter() - started,
            "latencies": latencies,
        }
    )


def record_concurrently(
    url: str, *, processes: int = 8, runs_per_process: int = 500, dag_id: str = "concurrency_bench"
) -> dict[str, Any]:
    """Run the measurement; returns row counts, errors and timings (seconds).

    The store is created or migrated first (a benchmark tool may do what a read path may not).
    """
    store = Store(url)
    store.upgrade()
    with store.read() as session:
        before = RunRepository(session).count(job_type="concurrency")
    # Not fork: children start clean (no inherited connections, no torch threads). The fork
    # server imports the store once, so eight children do not each pay SQLAlchemy's import.
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["airflow_provider_bellamy.store"])
    barrier = ctx.Barrier(processes)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(url, i, runs_per_process, dag_id, barrier, results))
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    reports = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    wall = max(r["seconds"] for r in reports)
    with store.read() as session:
        after = RunRepository(session).count(job_type="concurrency")
    latencies = sorted(x for r in reports for x in r["latencies"])
    return {
        "backend": store.dialect,
        "processes": processes,
        "runs_per_process": runs_per_process,
        "rows_added": after - before,
        "created_reported": sum(r["created"] for r in reports),
        "errors": [e for r in reports for e in r["errors"]],
        "exit_codes": [p.exitcode for p in procs],
        "wall_s": round(wall, 3),
        "runs_per_s": round(processes * runs_per_process / wall, 1),
        "latency_p50_ms": round(statistics.median(latencies) * 1000, 2),
        "latency_p95_ms": round(latencies[int(0.95 * (len(latencies) - 1))] * 1000, 2),
        "latency_max_ms": round(latencies[-1] * 1000, 2),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--url", required=True, help="store URL (sqlite:///... or postgresql+psycopg://...)")
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--runs", type=int, default=500, help="runs per process")
    args = parser.parse_args(argv)
    report = record_concurrently(args.url, processes=args.processes, runs_per_process=args.runs)
    print(json.dumps(report, indent=2))
    ok = not report["errors"] and report["rows_added"] == args.processes * args.runs
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
