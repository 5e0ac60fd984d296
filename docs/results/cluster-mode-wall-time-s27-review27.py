"""How far the wall time around spark-submit in cluster deploy mode is from the application's own
duration, on a local standalone cluster (2 workers, 1 core each, the master's REST server on).

Each run submits dags_examples/jobs/grep.py as a cluster-mode driver through the Spark provider's
own hook, which then tracks the driver as the operator's try does (``spark-submit --status`` every
``status_poll_interval``), and compares that wall time with the master's figures: the driver's
application's ``duration`` (what the operator records when the master lists it) and the driver's
start. ``--held S``: an application holds both cores while the driver is submitted and for S
seconds, so the driver waits ``SUBMITTED`` behind it (a busy cluster).

    PYTHONPATH=. python docs/results/cluster-mode-wall-time-s27-review27.py --runs 3 --held 15

Needs Java and the venv's pyspark (scripts/setup-services.sh). Prints one line per run (the
hook's log lines go to stdout too: ``| grep -E '^(#|case|idle|held)'``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GREP = ROOT / "dags_examples" / "jobs" / "grep.py"
HOLD = ROOT / "tests" / "airflow" / "jobs" / "hold.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs on an idle cluster")
    parser.add_argument(
        "--held", type=float, default=15.0, help="seconds a second application holds the cores"
    )
    parser.add_argument(
        "--poll", type=int, default=1, help="status_poll_interval (the provider's default: 1)"
    )
    args = parser.parse_args()

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from airflow_provider_bellamy.cli._local_spark import spark_home, start_standalone_cluster

    cluster = start_standalone_cluster(
        2, cores_per_worker=1, memory_per_worker="1g", rest=True, timeout_s=300.0
    )
    os.environ["AIRFLOW_CONN_SPARK_MEASURE"] = json.dumps(
        {
            "conn_type": "spark",
            "host": "spark://127.0.0.1",
            "port": cluster.master_port,
            "extra": {"deploy-mode": "cluster", "rest-port": cluster.rest_port},
        }
    )
    jar = str(sorted((spark_home() / "jars").glob("spark-core_*.jar"))[0])
    print(f"# {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} load {os.getloadavg()[0]:.1f}")
    print("case     wall_s  app_duration_s  driver_start_to_app_start_s  wall_minus_app_s  share_not_job")
    try:
        for i in range(args.runs + 1):
            held = i == args.runs
            if held and args.held <= 0:
                break
            blocker, release = _hold(cluster) if held else (None, None)
            hook = SparkSubmitHook(
                conn_id="spark_measure",
                java_class="org.apache.spark.deploy.PythonRunner",
                application_args=[str(GREP), "", "--lines", "20000", "--partitions", "2"],
                driver_memory="512m",
                executor_memory="512m",
                total_executor_cores=1,
                name=f"measure-{i}",
                status_poll_interval=args.poll,
            )
            if release is not None:
                threading.Timer(args.held, release.touch).start()
            before = {d["id"] for d in cluster.status()["completeddrivers"]}
            t0 = time.monotonic()
            hook.submit(jar)
            hook._start_driver_status_tracking()  # as the provider's operator tracks the driver
            wall = time.monotonic() - t0
            if blocker is not None:
                blocker.wait(timeout=120)
            driver, app = _driver_and_app(cluster, before)
            duration = app["duration"] / 1000.0
            lag = (int(app["starttime"]) - int(driver["starttime"])) / 1000.0
            print(
                f"{'held' if held else 'idle'}{i:<4} {wall:7.1f}  {duration:14.1f}  {lag:27.1f}"
                f"  {wall - duration:16.1f}  {(wall - duration) / wall:13.0%}"
            )
    finally:
        cluster.stop()
    return 0


def _hold(cluster: object) -> tuple[subprocess.Popen[bytes], Path]:
    """A client-mode application holding both cores until its release file appears."""
    from airflow_provider_bellamy.cli._local_spark import spark_home

    release = Path(tempfile.mkdtemp()) / "release"
    cmd = [
        str(spark_home() / "bin" / "spark-submit"),
        "--master",
        cluster.master_url,  # type: ignore[attr-defined]
        "--total-executor-cores",
        "2",
        "--executor-memory",
        "512m",
        str(HOLD),
        str(release),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cluster.env())  # type: ignore[attr-defined]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until it holds the cores
        apps = cluster.status()["activeapps"]  # type: ignore[attr-defined]
        if any(a.get("cores") == 2 for a in apps):
            break
        time.sleep(0.5)
    return proc, release


def _driver_and_app(cluster: object, before: set[str]) -> tuple[dict, dict]:
    """The driver this run submitted and its application, as the master lists them."""
    for _ in range(60):
        status = cluster.status()  # type: ignore[attr-defined]
        drivers = [d for d in status["completeddrivers"] if d["id"] not in before]
        if drivers:
            driver = drivers[0]
            apps = [
                a
                for a in status["completedapps"]
                if "grep" in a["name"]
                and int(a["starttime"]) >= int(driver["starttime"])
                and a.get("duration")
            ]
            if apps:
                return driver, min(apps, key=lambda a: int(a["starttime"]))
        time.sleep(0.5)
    raise RuntimeError("the master lists no finished driver with its application")


if __name__ == "__main__":
    sys.exit(main())
