"""Client deploy mode on the local standalone master: spark-submit's wall time against the
master's own duration of the application (completedapps), a few runs per size."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from airflow_provider_bellamy.cli._local_spark import spark_home, start_standalone_cluster

JOB = Path(sys.argv[1])
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
out = []
with start_standalone_cluster(2, cores_per_worker=1, memory_per_worker="1g", timeout_s=300) as cluster:
    for lines in (20_000, 2_000_000):
        for executors in (1, 2):
            for i in range(RUNS):
                since_ms = int(time.time() * 1000)
                cmd = [
                    str(spark_home() / "bin" / "spark-submit"), "--master", cluster.master_url,
                    "--deploy-mode", "client", "--driver-memory", "512m", "--executor-memory", "512m",
                    "--total-executor-cores", str(executors), "--executor-cores", "1",
                    "--name", f"wallcheck-{lines}-{executors}-{i}",
                    str(JOB), "--lines", str(lines), "--partitions", "4",
                ]
                t0 = time.monotonic()
                subprocess.run(cmd, env=cluster.env(), capture_output=True, timeout=600, check=True)
                wall_s = time.monotonic() - t0
                app = None
                for _ in range(40):
                    apps = [a for a in cluster.status().get("completedapps", []) if a["starttime"] >= since_ms]
                    app = apps[0] if apps else None
                    if app is not None:
                        break
                    time.sleep(0.5)
                row = {"lines": lines, "executors": executors, "run": i, "wall_s": round(wall_s, 3),
                       "master_s": app["duration"] / 1000 if app else None,
                       "start_lag_s": (app["starttime"] - since_ms) / 1000 if app else None}
                if app:
                    row["extra_s"] = round(row["wall_s"] - row["master_s"], 3)
                    row["ratio"] = round(row["wall_s"] / row["master_s"], 3)
                print(json.dumps(row), flush=True)
                out.append(row)
for lines in (20_000, 2_000_000):
    for executors in (1, 2):
        rows = [r for r in out if r["lines"] == lines and r["executors"] == executors and r["master_s"]]
        print(json.dumps({"lines": lines, "executors": executors, "n": len(rows),
                          "median_wall_s": statistics.median(r["wall_s"] for r in rows),
                          "median_master_s": statistics.median(r["master_s"] for r in rows),
                          "median_extra_s": statistics.median(r["extra_s"] for r in rows),
                          "median_ratio": statistics.median(r["ratio"] for r in rows)}), flush=True)
