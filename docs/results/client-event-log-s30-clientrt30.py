"""Client deploy mode on a local standalone master (2 workers x 1 core): for each run, the
application's duration from its own event log (read by the operator's code: ``event_log_files``
and ``timing_from_event_log``, with the conf the operator sets for a temporary log) against the
master's duration of it (``completedapps``), the runtime the master source records (that duration
split by the operator's ``MasterGrantSampler``) and spark-submit's wall time.

Usage: PYTHONPATH=. python docs/results/client-event-log-s30-clientrt30.py [runs per size]
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from airflow_provider_bellamy.cli._local_spark import spark_home, start_standalone_cluster
from airflow_provider_bellamy.hooks.spark import READABLE_EVENT_LOG_CONF, event_log_files
from airflow_provider_bellamy.hooks.spark_timing import MasterGrantSampler, timing_from_event_log

JOB = Path(__file__).resolve().parents[2] / "dags_examples" / "jobs" / "grep.py"
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
LINES = 20_000


def _load() -> float:
    return round(os.getloadavg()[0], 2)


out = []
print(
    json.dumps(
        {"job": "grep", "lines": LINES, "runs_per_size": RUNS, "cpus": os.cpu_count(), "load_1m": _load()}
    )
)
with (
    tempfile.TemporaryDirectory(prefix="event-log-s30-") as events,
    start_standalone_cluster(2, cores_per_worker=1, memory_per_worker="1g", timeout_s=300) as cluster,
):
    conf = {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": Path(events).as_uri(),
        **READABLE_EVENT_LOG_CONF,
    }
    for executors in (1, 2):
        for i in range(RUNS):
            since_ms = int(time.time() * 1000)
            name = f"eventlog-{executors}-{i}"
            cmd = [
                str(spark_home() / "bin" / "spark-submit"),
                "--master",
                cluster.master_url,
                "--deploy-mode",
                "client",
                "--driver-memory",
                "512m",
                "--executor-memory",
                "512m",
                "--total-executor-cores",
                str(executors),
                "--executor-cores",
                "1",
                "--name",
                name,
                *[a for k, v in conf.items() for a in ("--conf", f"{k}={v}")],
                str(JOB),
                "--lines",
                str(LINES),
                "--partitions",
                "4",
            ]
            load_before = _load()
            output = Path(events) / f"{name}.out"
            found: list[str] = []

            def app_id_so_far(output: Path = output, found: list[str] = found) -> str | None:
                # the id spark-submit logs at registration (the job names itself: --name does not stick)
                if not found:
                    match = re.search(r"\bapp-\d{14}-\d{4,}\b", output.read_text(errors="replace"))
                    found.extend([match.group(0)] if match else [])
                return found[0] if found else None

            # the operator's own sampler of the master's grants: the master source's split
            sampler = MasterGrantSampler(fetch=cluster.status, app_id=app_id_so_far, executor_cores=1)
            t0 = time.monotonic()
            with output.open("w") as sink:
                proc = subprocess.Popen(cmd, env=cluster.env(), stdout=sink, stderr=subprocess.STDOUT)
                sampler.start()
                rc = proc.wait(timeout=600)
            wall_s = time.monotonic() - t0
            sampler.stop()
            assert rc == 0, output.read_text()[-2000:]
            app_id = app_id_so_far()
            app = None
            for _ in range(40):
                app = cluster.completed_app(app_id=app_id)
                if app is not None:
                    break
                time.sleep(0.5)
            assert app is not None, f"the master never listed {app_id}"
            files = event_log_files(Path(events), app["id"])
            lines = files[0].read_text(encoding="utf-8").splitlines()
            log_s, timing = timing_from_event_log(lines, executor_cores=1, app_id=app["id"])
            # where the two start: the SparkContext's start (the log) and the master's registration
            (start_ms,) = [
                json.loads(line)["Timestamp"]
                for line in lines
                if "SparkListenerApplicationStart" in line[:45]
            ]
            master_s = app["duration"] / 1000
            master_timing = sampler.timing(master_s)
            row = {
                "executors": executors,
                "run": i,
                "app_id": app["id"],
                "wall_s": round(wall_s, 3),
                "master_s": master_s,
                "event_log_s": round(log_s, 3),
                "log_minus_master_s": round(log_s - master_s, 3),
                "log_start_before_master_s": round((app["starttime"] - start_ms) / 1000, 3),
                "log_end_minus_master_end_s": round(
                    (start_ms + log_s * 1000 - app["starttime"] - app["duration"]) / 1000, 3
                ),
                "wall_minus_log_s": round(wall_s - log_s, 3),
                "log_queue_s": round(timing.queue_s, 3) if timing else None,
                "log_runtime_s": round(timing.runtime_s, 3) if timing else None,
                "log_granted": timing.granted if timing else None,
                # what the master source records (its duration split by the 0.5 s samples)
                "master_runtime_s": round(master_timing.runtime_s, 3) if master_timing else None,
                "log_runtime_minus_master_runtime_s": round(timing.runtime_s - master_timing.runtime_s, 3)
                if timing and master_timing
                else None,
                "load_before": load_before,
                "load_after": _load(),
            }
            print(json.dumps(row), flush=True)
            out.append(row)
for executors in (1, 2):
    rows = [r for r in out if r["executors"] == executors]
    print(
        json.dumps(
            {
                "executors": executors,
                "n": len(rows),
                **{
                    f"median_{k}": round(statistics.median(r[k] for r in rows), 3)
                    for k in (
                        "wall_s",
                        "master_s",
                        "event_log_s",
                        "log_minus_master_s",
                        "log_start_before_master_s",
                        "log_end_minus_master_end_s",
                        "wall_minus_log_s",
                        "log_queue_s",
                        "log_runtime_s",
                        "master_runtime_s",
                        "log_runtime_minus_master_runtime_s",
                    )
                },
                "range_log_runtime_minus_master_runtime_s": [
                    min(r["log_runtime_minus_master_runtime_s"] for r in rows),
                    max(r["log_runtime_minus_master_runtime_s"] for r in rows),
                ],
                "range_log_minus_master_s": [
                    min(r["log_minus_master_s"] for r in rows),
                    max(r["log_minus_master_s"] for r in rows),
                ],
            }
        ),
        flush=True,
    )
print(json.dumps({"load_1m_end": _load()}))
