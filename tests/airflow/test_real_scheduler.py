"""End to end under a real Airflow deployment, not ``dag.test()``.

api-server, scheduler (LocalExecutor), dag-processor and triggerer run as separate processes on
127.0.0.1 with a temporary AIRFLOW_HOME (SQLite metadata DB), so tasks get their connections
and XComs through the execution API, the plugin is loaded by the worker, and the sensor defers
to the triggerer. The Spark standalone cluster is the test session's (master REST server on).
One deployment serves the module; each test costs its DAG runs only:

* ``bellamy_durable_retry``: the task process is killed (SIGKILL) while its driver runs; the
  retry reattaches to the driver with the first try's decision, and one run row is stored;
* the example ``bellamy_spark_sla`` (``dags_examples/``, pipeline ``spark_sla.yaml``), then
  ``bellamy_async_sensor`` (submit without waiting + deferrable sensor): each sized task's
  decision, one run row per try linked to it, the runtime (the application's duration less
  its wait for executors) and the executors it was granted.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.airflow import EXAMPLES, REPO, connection_json
from tests.fixtures.spark import WORKERS, free_port

pytestmark = [pytest.mark.slow, pytest.mark.spark]

SCHEDULER_DAGS = Path(__file__).parent / "scheduler_dags"
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
TIMEOUT_S = 600.0


@dataclass
class Deployment:
    home: Path
    env: dict[str, str]
    store_url: str
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    @property
    def db(self) -> Path:
        return self.home / "airflow.db"

    def query(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        with contextlib.closing(sqlite3.connect(self.db, timeout=30)) as conn:
            return conn.execute(sql, args).fetchall()

    def airflow(self, *args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "airflow", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, f"airflow {' '.join(args)}: {proc.stdout[-2000:]} {proc.stderr[-3000:]}"
        return proc.stdout

    def logs(self) -> str:
        out = []
        for name in COMPONENTS:
            path = self.home / f"{name}.log"
            if path.exists():
                out.append(f"--- {name} ---\n{path.read_text(errors='replace')[-3000:]}")
        return "\n".join(out)

    def task_logs(self, dag_id: str) -> str:
        return "\n".join(
            p.read_text(errors="replace")
            for p in sorted((self.home / "logs").rglob(f"dag_id={dag_id}/**/*.log"))
        )

    def wait(self, what: str, ready: Any, timeout_s: float = TIMEOUT_S) -> Any:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                assert proc.poll() is None, f"{name} exited ({proc.returncode}):\n{self.logs()}"
            with contextlib.suppress(sqlite3.OperationalError):
                found = ready()
                if found:
                    return found
            time.sleep(1.0)
        raise AssertionError(f"timed out waiting for {what}\n{self.logs()}")

    def trigger(self, dag_id: str) -> str:
        before = {r[0] for r in self.query("SELECT run_id FROM dag_run WHERE dag_id = ?", dag_id)}
        self.airflow("dags", "trigger", dag_id)
        new = {r[0] for r in self.query("SELECT run_id FROM dag_run WHERE dag_id = ?", dag_id)} - before
        assert len(new) == 1, new
        return new.pop()

    def finished(self, dag_id: str, run_id: str) -> str:
        def state() -> str | None:
            [(value,)] = self.query(
                "SELECT state FROM dag_run WHERE dag_id = ? AND run_id = ?", dag_id, run_id
            )
            return value if value in ("success", "failed") else None

        result = self.wait(f"{dag_id} {run_id} to finish", state)
        assert result == "success", f"{dag_id}: {result}\n{self.task_logs(dag_id)}\n{self.logs()}"
        return result

    def stop(self) -> None:
        for name in reversed(COMPONENTS):
            proc = self.procs.get(name)
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def deployment(spark_standalone: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    cluster = spark_standalone
    home = tmp_path_factory.mktemp("airflow-deployment")
    dags = home / "dags"
    dags.mkdir()
    shutil.copy(EXAMPLES / "spark_sla_sizing.py", dags)
    shutil.copytree(EXAMPLES / "pipelines", dags / "pipelines")
    shutil.copytree(EXAMPLES / "jobs", dags / "jobs")
    for dag_file in SCHEDULER_DAGS.glob("*.py"):
        shutil.copy(dag_file, dags)
    port = free_port()
    store_url = f"sqlite:///{home / 'bellamy.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "PYTEST"))}
    venv_bin = str(Path(sys.executable).parent)
    env.update(
        {
            "PATH": f"{venv_bin}{os.pathsep}{env.get('PATH', '')}",  # spark-submit of the pyspark wheel
            "PYTHONPATH": str(REPO),  # the test DAGs share tests/fixtures/spark.py
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "300",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(port),
            "AIRFLOW__API_AUTH__JWT_SECRET": "bellamy-real-scheduler-test",
            "AIRFLOW__API__SECRET_KEY": "bellamy-real-scheduler-test",
            # only the runs the test triggers: no run for the example's cron schedule
            "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            # a busy CI machine answers slowly; a task must not fail on its first API call
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "120",
            "AIRFLOW__WORKERS__EXECUTION_API_RETRIES": "10",
            "AIRFLOW_CONN_SPARK_DEFAULT": connection_json(
                "spark",
                host="spark://127.0.0.1",
                port=cluster.master_port,
                extra={"deploy-mode": "client", "master-webui": cluster.webui_url},
            ),
            "AIRFLOW_CONN_SPARK_CLUSTER": connection_json(
                "spark",
                host="spark://127.0.0.1",
                port=cluster.master_port,
                extra={
                    "deploy-mode": "cluster",
                    "rest-port": cluster.rest_port,
                    "master-webui": cluster.webui_url,
                },
            ),
            "AIRFLOW_CONN_BELLAMY_DEFAULT": connection_json("bellamy", extra={"store_url": store_url}),
        }
    )
    deployment = Deployment(home=home, env=env, store_url=store_url)
    deployment.airflow("db", "migrate")
    try:
        for name in COMPONENTS:
            log = (home / f"{name}.log").open("wb")
            deployment.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "airflow", name],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() ends it with its children
            )
        dag_ids = ("bellamy_spark_sla", "bellamy_async_sensor", "bellamy_durable_retry")
        deployment.wait(
            "the DAGs to be parsed",
            lambda: len(deployment.query("SELECT dag_id FROM dag WHERE dag_id IN (?, ?, ?)", *dag_ids)) == 3,
        )
        yield deployment
    finally:
        deployment.stop()


def _facade(deployment: Deployment) -> Any:
    from airflow_provider_bellamy.facade import Bellamy

    facade = Bellamy(deployment.store_url)
    facade.upgrade()
    return facade


def test_killed_worker_retry_reattaches_and_records_once(
    deployment: Deployment, spark_standalone: Any
) -> None:
    cluster = spark_standalone
    facade = _facade(deployment)
    # earlier runs of the DAG's context: sizing decides from them and stores its decision
    context = {"machine_type": "loopback-1c1g", "cores": 1, "memory_mb": 1024, "lines": 60000}
    facade.record_runs(
        [
            {"job_type": "grep", "framework": "spark", "scale_out": n, "runtime_s": s, **context}
            for n, s in ((1, 40.0), (2, 25.0), (1, 41.0), (2, 24.0))
        ]
    )
    drivers_before = {
        d["id"] for d in cluster.status()["completeddrivers"] + cluster.status()["activedrivers"]
    }
    run_id = deployment.trigger("bellamy_durable_retry")

    def running_driver_and_pid() -> tuple[str, int] | None:
        # Killed only once the provider has persisted the driver id: a try killed before that
        # (spark-submit still running) is the mixin's documented window, and its retry resubmits.
        stored = deployment.query(
            "SELECT value FROM task_state_store WHERE dag_id = ? AND run_id = ? AND task_id = 'grep'"
            " AND key = 'spark_job_id'",
            "bellamy_durable_retry",
            run_id,
        )
        rows = deployment.query(
            "SELECT pid FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = 'grep'"
            " AND state = 'running' AND try_number = 1",
            "bellamy_durable_retry",
            run_id,
        )
        if not stored or not rows or not rows[0][0]:
            return None
        driver_id = json.loads(stored[0][0])
        running = [
            d for d in cluster.status()["activedrivers"] if d["id"] == driver_id and d["state"] == "RUNNING"
        ]
        return (driver_id, int(rows[0][0])) if running else None

    driver_id, pid = deployment.wait("the first try to have a running driver", running_driver_and_pid)
    os.kill(pid, signal.SIGKILL)  # the worker's task process dies; the driver runs on in the cluster
    deployment.finished("bellamy_durable_retry", run_id)

    [(tries,)] = deployment.query(
        "SELECT try_number FROM task_instance WHERE dag_id = ? AND run_id = ? AND task_id = 'grep'",
        "bellamy_durable_retry",
        run_id,
    )
    assert tries == 2
    status = cluster.status()
    new_drivers = [
        d for d in status["completeddrivers"] + status["activedrivers"] if d["id"] not in drivers_before
    ]
    assert [d["id"] for d in new_drivers] == [driver_id]  # the retry submitted nothing
    decisions = [d for d in facade.list_decisions(limit=None) if d["run_id"] == run_id]
    assert len(decisions) == 1, decisions  # the retry did not size again
    [run] = [r for r in facade.list_runs(source="observed", limit=None) if r["run_id"] == run_id]
    assert run["external_id"] == driver_id and run["try_number"] == 2 and run["status"] == "success"
    assert run["decision_id"] == decisions[0]["id"]
    logs = deployment.task_logs("bellamy_durable_retry")
    assert "reusing decision" in logs, logs[-3000:]


def _seed_example_contexts(facade: Any) -> None:
    """Earlier runs of the example's two contexts, so its tasks are sized from them (no trained
    model in this store: Ernest fitted on the context's runs) and their decisions stored. They
    scale perfectly (runtime = work / executors): one executor misses each target by far, so
    the decision is 2 or 3 (as the band allows); the two 1-core workers grant a client-mode
    application at most 2."""
    from airflow_provider_bellamy.config import load_pipeline_config

    pipeline = load_pipeline_config(EXAMPLES / "pipelines" / "spark_sla.yaml")
    # grep: target 90 s; sort: 15 min from the run's start less a 30 s reserve, less grep's time
    work_s = {"grep": 150.0, "sort": 1000.0}
    rows = []
    for name, work in work_s.items():
        job = pipeline.job(name)
        for n in (1, 2, 3):
            for jitter in (0.99, 1.01):
                rows.append(
                    {
                        "job_type": job.job_type,
                        "framework": "spark",
                        "scale_out": n,
                        "runtime_s": work / n * jitter,
                        **job.properties,
                    }
                )
    facade.record_runs(rows)


def test_example_dag_and_deferrable_sensor_under_the_scheduler(
    deployment: Deployment, spark_standalone: Any
) -> None:
    cluster = spark_standalone
    facade = _facade(deployment)
    _seed_example_contexts(facade)

    # The example DAG, as a user deploys it: both Spark tasks sized, run, written back.
    run_id = deployment.trigger("bellamy_spark_sla")
    deployment.finished("bellamy_spark_sla", run_id)
    runs = [r for r in facade.list_runs(source="observed", limit=None) if r["run_id"] == run_id]
    assert sorted(r["task_id"] for r in runs) == ["grep", "sort"], runs  # one row per try
    decisions = [d for d in facade.list_decisions(limit=None) if d["run_id"] == run_id]
    assert sorted(d["task_id"] for d in decisions) == ["grep", "sort"], decisions  # one per launch
    for run in runs:
        [decision] = [d for d in decisions if d["task_id"] == run["task_id"]]
        # sized from the context's runs: the smallest candidate whose band meets the target
        assert [c["scale_out"] for c in decision["candidates"]] == [1, 2, 3]
        meeting = [c["scale_out"] for c in decision["candidates"] if c["meets_target"]]
        # (none meets sort's deadline where grep took most of its 15 minutes: on_infeasible=warn
        # launches the fastest)
        assert decision["chosen_scale_out"] == (meeting[0] if meeting else 3), decision
        assert decision["feasible"] == bool(meeting) and 1 not in meeting  # 1 misses by far
        assert run["try_number"] == 1 and run["status"] == "success"
        assert run["decision_id"] == decision["id"] and decision["run_row_id"] == run["id"]
        assert run["requested_scale_out"] == decision["chosen_scale_out"]
        app = cluster.completed_app(app_id=run["external_id"])
        assert app is not None, run
        # the runtime is the application's own duration less its wait for executors ...
        assert run["queue_s"] is not None and run["queue_s"] >= 0.0
        assert run["runtime_s"] + run["queue_s"] == pytest.approx(app["duration"] / 1000, abs=1e-3)
        # ... at the executors it was granted: all it asked for, up to the two 1-core workers
        assert run["scale_out"] == app["cores"] == min(decision["chosen_scale_out"], WORKERS)
        assert run["excluded_reason"] is None
    logs = deployment.task_logs("bellamy_spark_sla")
    assert "published:" in logs, logs[-3000:]

    # Submit without waiting, then the deferrable sensor records the driver's application.
    drivers_before = {d["id"] for d in cluster.status()["completeddrivers"]}
    run_id = deployment.trigger("bellamy_async_sensor")
    deployment.finished("bellamy_async_sensor", run_id)
    [decision] = [d for d in facade.list_decisions(limit=None) if d["run_id"] == run_id]
    assert decision["task_id"] == "submit" and decision["chosen_scale_out"] == 1
    [run] = [r for r in facade.list_runs(source="observed", limit=None) if r["run_id"] == run_id]
    assert run["task_id"] == "sense" and run["try_number"] == 1 and run["status"] == "success"
    assert run["decision_id"] == decision["id"] and decision["run_row_id"] == run["id"]
    status = cluster.status()
    [driver] = [d for d in status["completeddrivers"] if d["id"] not in drivers_before]
    assert run["external_id"] == driver["id"] and driver["state"] == "FINISHED"
    # the driver's application: the one that started after the driver (nothing else ran then)
    [app] = [a for a in status["completedapps"] if int(a["starttime"]) >= int(driver["starttime"])]
    assert run["runtime_s"] == pytest.approx(app["duration"] / 1000, abs=1e-3)
    assert run["scale_out"] == app["cores"] == 1 and run["requested_scale_out"] == 1
    # the sensor deferred: its wait ran in the triggerer, which wrote the trigger's own log
    assert "Pausing task as DEFERRED" in deployment.task_logs("bellamy_async_sensor")
    trigger_logs = list(
        (deployment.home / "logs").rglob("dag_id=bellamy_async_sensor/**/task_id=sense/*.trigger.*.log")
    )
    assert trigger_logs and "Trigger fired event" in trigger_logs[0].read_text(errors="replace")
