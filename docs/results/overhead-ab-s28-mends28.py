"""`bellamy benchmark overhead`'s fresh-process launch preparation (prepare_launch), the code before
and after one change interleaved in one run over one store: A = sys.argv[1], B = sys.argv[2]
(source trees put first on PYTHONPATH of the child processes), N = sys.argv[3] samples each."""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

from airflow_provider_bellamy.benchmarks.overhead import CONTEXT, _child_env, _launch
from airflow_provider_bellamy.datasets import load_traces
from airflow_provider_bellamy.facade import Bellamy

trees = {"before": sys.argv[1], "after": sys.argv[2]}
n = int(sys.argv[3])
with tempfile.TemporaryDirectory(prefix="bellamy-overhead-ab-") as tmp:
    url = f"sqlite:///{Path(tmp) / 'bellamy.db'}"
    facade = Bellamy(url)
    facade.upgrade()
    facade.record_runs(load_traces("c3o", "grep"))
    facade.train("grep", time_budget_s=30.0)
    facade.record_runs(
        [{"job_type": "grep", "framework": "spark", "scale_out": k, "runtime_s": t, **CONTEXT}
         for k, t in ((4, 132.0), (8, 81.0), (4, 128.0))]
    )
    base_env = _child_env(url, tmp)
    envs = {name: {**base_env, "PYTHONPATH": tree} for name, tree in trees.items()}
    _launch(envs["after"], "warmup")  # stores the context's fine-tuned copy, as in the benchmark
    _launch(envs["before"], "warmup-b")
    got: dict[str, list[dict]] = {name: [] for name in trees}
    for i in range(n):
        for name in (("before", "after") if i % 2 == 0 else ("after", "before")):
            r = _launch(envs[name], f"{name}-{i}")
            got[name].append(r)
            print(json.dumps({"variant": name, "sample": i, **r}), flush=True)
for name, rows in got.items():
    print(json.dumps({
        "variant": name, "samples": len(rows),
        "median_prepare_s": round(statistics.median(r["prepare_s"] for r in rows), 4),
        "median_total_s": round(statistics.median(r["total_s"] for r in rows), 4),
        "min_prepare_s": round(min(r["prepare_s"] for r in rows), 4),
        "chosen": sorted({r["chosen"] for r in rows}), "master": sorted({r["master"] for r in rows}),
    }), flush=True)
