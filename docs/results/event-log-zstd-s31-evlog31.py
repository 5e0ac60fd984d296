"""A user's own event log with Spark 4's defaults (only ``spark.eventLog.enabled``/``dir`` set: the
log is zstd-compressed and rolled), client deploy mode on ``local[2]``: for each run, spark-submit's
wall time (what the operator recorded as the runtime before session 31: no zstd reader) against the
duration and runtime the operator's code now reads from that log (the id found by the hook's
``_APP_ID_RE`` in spark-submit's output, the log by ``BellamySparkSubmitHook.read_event_log``).

Usage: PYTHONPATH=. python docs/results/event-log-zstd-s31-evlog31.py [runs]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_provider_bellamy.hooks.spark import _APP_ID_RE, BellamySparkSubmitHook, EventLogPlace

JOB = Path(__file__).resolve().parents[2] / "dags_examples" / "jobs" / "grep.py"
RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
LINES = 20_000

os.environ["AIRFLOW_CONN_SPARK_EVLOG"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
hook = BellamySparkSubmitHook.adopt(SparkSubmitHook(conn_id="spark_evlog"))
with tempfile.TemporaryDirectory() as tmp:
    logs = Path(tmp) / "events"
    logs.mkdir()
    env = {**os.environ, "SPARK_CONF_DIR": str(Path(tmp) / "no-conf")}  # no site defaults
    print(json.dumps({"job": "grep", "lines": LINES, "master": "local[2]", "cpus": os.cpu_count()}))
    for run in range(1, RUNS + 1):
        load = round(os.getloadavg()[0], 2)
        t0 = time.monotonic()
        proc = subprocess.run(
            [
                "spark-submit",
                "--master",
                "local[2]",
                "--conf",
                "spark.eventLog.enabled=true",
                "--conf",
                f"spark.eventLog.dir={logs.as_uri()}",
                str(JOB),
                "--lines",
                str(LINES),
                "--partitions",
                "2",
            ],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
        wall_s = time.monotonic() - t0
        # the first line naming an id, as the hook reads spark-submit's output
        app_id = next(m.group(1) for line in proc.stderr.splitlines() if (m := _APP_ID_RE.search(line)))
        files = sorted(p.name for p in (logs / f"eventlog_v2_{app_id}").iterdir())
        observed = hook.read_event_log(
            EventLogPlace(logs, temporary=False), app_id, requested=2, executor_cores=1
        )
        print(
            json.dumps(
                {
                    "run": run,
                    "load_1m": load,
                    "log_files": files,
                    "wall_s (recorded before)": round(wall_s, 2),
                    "runtime_s (from the log)": round(observed.runtime_s, 2),
                    "queue_s": round(observed.queue_s or 0.0, 2),
                    "log_duration_s": round(observed.runtime_s + (observed.queue_s or 0.0), 2),
                    "wall - log duration": round(wall_s - observed.runtime_s - (observed.queue_s or 0.0), 2),
                    "source": observed.source,
                }
            ),
            flush=True,
        )
