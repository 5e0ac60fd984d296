"""Speed of the model and the façade, in process (DESIGN.md "Speed").

* pre-training one job type (full C3O traces of it, default configuration);
* fine-tuning one context (5 runs), predicting 20 scale-outs;
* ``Bellamy.size`` with the model cached in process (the operators' steady state), and
  the first ``size`` in a fresh process (open the store, load the model from it).
Fresh-process operator overhead and import cost: ``bellamy benchmark overhead``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

_FRESH = """
import json, sys, time
t0 = time.perf_counter()
from airflow_provider_bellamy import Bellamy
b = Bellamy(sys.argv[1])
d = b.size("grep", json.loads(sys.argv[2]), list(range(2, 13)), 150.0)
print(json.dumps({"first_size_s": time.perf_counter() - t0, "chosen": d.chosen_scale_out}))
"""


def _pcts(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "p95": float(np.percentile(values, 95)),
        "n": len(values),
    }


def run_speed(
    job_types: tuple[str, ...] = ("grep", "sort"), samples: int = 200, progress: Any = None
) -> dict[str, Any]:
    from airflow_provider_bellamy import Bellamy
    from airflow_provider_bellamy.datasets import load_traces
    from airflow_provider_bellamy.model import RuntimeModel

    report: dict[str, Any] = {
        "benchmark": "speed",
        "date": time.strftime("%Y-%m-%d"),
        "cores": os.cpu_count(),
    }
    pretrain, finetune, predict = {}, [], []
    for job in job_types:
        if progress:
            progress(f"pre-training {job}")
        runs = load_traces("c3o", job)
        t0 = time.perf_counter()
        model = RuntimeModel.pretrain(runs, seed=0)
        pretrain[job] = time.perf_counter() - t0
        contexts = runs.drop_duplicates(subset=["machine_type", "data_size_mb", "cores"]).head(10)
        for _, row in contexts.iterrows():
            same = (
                runs[["machine_type", "data_size_mb", "cores"]]
                == row[["machine_type", "data_size_mb", "cores"]]
            ).all(axis=1)
            ctx_runs = runs[same].groupby("scale_out").head(1).head(5)
            t1 = time.perf_counter()
            tuned = model.finetune(ctx_runs)
            finetune.append(time.perf_counter() - t1)
            for _ in range(20):
                t2 = time.perf_counter()
                tuned.predict(row.to_dict(), list(range(1, 21)))
                predict.append(time.perf_counter() - t2)
    report["pretrain_s"] = pretrain
    report["finetune_s"] = _pcts(finetune)
    report["predict_20_ms"] = {k: v * 1000 if k != "n" else v for k, v in _pcts(predict).items()}

    with tempfile.TemporaryDirectory(prefix="bellamy-speed-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'store.db'}"
        b = Bellamy(url)
        b.upgrade()
        b.record_runs(load_traces("c3o", "grep").drop(columns=["dataset"]))
        if progress:
            progress("training the stored grep model")
        b.train("grep", seed=0)
        grep = load_traces("c3o", "grep")
        ctx = grep.iloc[0][
            [
                "machine_type",
                "environment",
                "cores",
                "memory_mb",
                "data_size_mb",
                "lines",
                "line_length",
                "p_occurrence",
            ]
        ].to_dict()
        b.size("grep", ctx, list(range(2, 13)), 150.0)  # warm: model and fine-tuned copy cached
        cached = []
        for _ in range(samples):
            t0 = time.perf_counter()
            b.size("grep", ctx, list(range(2, 13)), 150.0)
            cached.append(time.perf_counter() - t0)
        report["size_cached_ms"] = {k: v * 1000 if k != "n" else v for k, v in _pcts(cached).items()}
        fresh = []
        for _ in range(5):
            out = subprocess.run(
                [sys.executable, "-c", _FRESH, url, json.dumps(ctx)],
                capture_output=True,
                text=True,
                check=True,
            )
            fresh.append(json.loads(out.stdout.strip().splitlines()[-1])["first_size_s"])
        report["size_first_in_fresh_process_s"] = _pcts(fresh)
    return report


def render_speed(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Speed ({report['cores']} cores, medians; p95 in brackets)")
    table.add_column("what")
    table.add_column("measured", justify="right")
    table.add_column("target", justify="right")
    for job, s in report["pretrain_s"].items():
        table.add_row(f"pre-train {job} (C3O, default config)", f"{s:.1f} s", "≤ 60 s")
    f = report["finetune_s"]
    table.add_row(
        "fine-tune one context (5 runs)", f"{1000 * f['median']:.1f} ms ({1000 * f['p95']:.1f})", "≤ 3 s"
    )
    p = report["predict_20_ms"]
    table.add_row("predict 20 scale-outs", f"{p['median']:.2f} ms ({p['p95']:.2f})", "≤ 5 ms")
    c = report["size_cached_ms"]
    table.add_row("Bellamy.size, model cached", f"{c['median']:.1f} ms ({c['p95']:.1f})", "≤ 20 ms")
    r = report["size_first_in_fresh_process_s"]
    table.add_row("first Bellamy.size in a fresh process", f"{r['median']:.2f} s ({r['p95']:.2f})", "≤ 1.5 s")
    Console().print(table)
