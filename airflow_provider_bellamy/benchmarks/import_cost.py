"""What importing the provider's Airflow modules adds to a DAG file's parse (``bellamy benchmark imports``).

A fresh interpreter first imports what any DAG file already has (``airflow.sdk`` with
BaseOperator/BaseHook/DAG; for the Spark operator also the Spark provider's own
SparkSubmitOperator, which it subclasses), then our modules under ``python -X importtime``.
The added cost is the cumulative import time of the top-level modules our import newly
loaded. The tests check the modules each group loads (never torch or pandas); the
milliseconds are a measurement of this machine, so they are reported here, not asserted.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

BASE = "from airflow.sdk import BaseOperator, BaseHook, DAG"
SPARK_BASE = BASE + "; from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator"
# What DAG files import, by what they import it over.
LIGHT = [
    "airflow_provider_bellamy.operators",
    "airflow_provider_bellamy.operators.sizing",
    "airflow_provider_bellamy.operators.train",
    "airflow_provider_bellamy.hooks.bellamy",
    "airflow_provider_bellamy.callbacks",
    "airflow_provider_bellamy.deadlines",
    "airflow_provider_bellamy.config",
    "airflow_provider_bellamy.plugins",
]
FLINK = [
    "airflow_provider_bellamy.hooks.flink",
    "airflow_provider_bellamy.hooks.job_status",
    "airflow_provider_bellamy.operators.flink",
    "airflow_provider_bellamy.sensors.job",
]
# The trigger module is loaded by the triggerer (and by a task only when it defers).
GROUPS: dict[str, tuple[str, list[str]]] = {
    # the baseline, in the same run: what every DAG file pays before any of our modules
    "baseline: airflow.sdk itself": ("", ["airflow.sdk"]),
    "operators, hooks, callbacks, config, plugins": (BASE, LIGHT),
    "Spark operator (over the Spark provider's)": (SPARK_BASE, ["airflow_provider_bellamy.operators.spark"]),
    "Flink hook and operator, job sensor": (BASE, FLINK),
    "job trigger (triggerer)": (BASE, ["airflow_provider_bellamy.triggers.job"]),
}
HEAVY = ("torch", "pandas")


def added_imports(base: str, modules: list[str]) -> tuple[float, set[str]]:
    """(milliseconds, modules newly loaded) of importing ``modules`` after ``base``, in a fresh process."""
    imports = "\n".join(f"import {m}" for m in modules)
    report = "print(json.dumps(sorted(set(sys.modules) - b)))"
    code = f"{base}\nimport sys, json\nb = set(sys.modules)\n{imports}\n{report}"
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a deployed worker has its bytecode cached
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
        env=env,
    )
    new = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    total_us = 0
    for line in proc.stderr.splitlines():
        # "import time: self | cumulative | <indent>name": a top-level entry's cumulative
        # column already holds everything it pulled in
        if line.startswith("import time:") and line.count("|") == 2:
            _, cumulative, name = line.split("|")
            if name.strip() in new and not name.startswith("  "):
                total_us += int(cumulative)
    return total_us / 1000.0, new


def heavy_modules(new: set[str]) -> list[str]:
    return sorted(m for m in new if m.split(".")[0] in HEAVY)


def run_import_cost(samples: int = 5) -> dict[str, Any]:
    out: dict[str, Any] = {"samples": samples, "cpu_count": os.cpu_count(), "groups": {}}
    for label, (base, modules) in GROUPS.items():
        costs: list[float] = []
        heavy: set[str] = set()
        for _ in range(samples):
            cost, new = added_imports(base, modules)
            costs.append(cost)
            heavy.update(heavy_modules(new))
        out["groups"][label] = {
            "modules": modules,
            "median_ms": round(statistics.median(costs), 1),
            "min_ms": round(min(costs), 1),
            "max_ms": round(max(costs), 1),
            "heavy": sorted(heavy),
        }
    return out


def render_import_cost(report: dict[str, Any]) -> str:
    lines = [
        f"Import cost added to a DAG file's parse, {report['samples']} fresh processes each "
        f"({report['cpu_count']} CPUs):"
    ]
    for label, g in report["groups"].items():
        heavy = ", ".join(g["heavy"]) or "no torch/pandas"
        lines.append(
            f"  {label:46s} median {g['median_ms']:6.1f} ms  min {g['min_ms']:6.1f}  "
            f"max {g['max_ms']:6.1f}  ({heavy})"
        )
    return "\n".join(lines)


def add_parser(sub: Any) -> None:
    """Adds ``imports`` to a ``bellamy benchmark`` sub-parser group."""
    parser = sub.add_parser("imports", help="what importing our Airflow modules adds to DAG parsing")
    parser.add_argument("--samples", type=int, default=5)
    parser.add_argument("--json", dest="json_path", default=None, help="write the results as JSON here")
    parser.set_defaults(func=main_from_args)


def main_from_args(args: Any) -> int:
    from airflow_provider_bellamy.exceptions import InvalidInputError

    if args.samples < 1:
        raise InvalidInputError("--samples", args.samples, "must be >= 1")
    report = run_import_cost(args.samples)
    print(render_import_cost(report))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=2) + "\n")
    return 0
