"""Operator overhead before spark-submit starts, in fresh task processes.

Setup (once, in a temporary store): the bundled C3O grep traces, a general grep model
trained on them, and a few runs of the benchmark's own context (so sizing fine-tunes).
One warm-up launch stores the context's fine-tuned copy, as the first real launch of a
context would. Then each sample is a fresh Python process that does what a task process
does before spark-submit: import the operator, size the job with the stored model
(open the store, load the model, predict the band, decide, store the decision), set the
executors and build the spark-submit command (``BellamySparkSubmitOperator.prepare_launch``).

Reported: median and p95 of the launch preparation, of the operator import, and of both.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CONTEXT: dict[str, Any] = {
    "machine_type": "c4.2xlarge",
    "environment": "aws-emr",
    "cores": 8.0,
    "memory_mb": 15000.0,
    "data_size_mb": 12000.0,
    "lines": 120_000_000.0,
    "line_length": 100.0,
    "p_occurrence": 0.4,
}
SCALE_OUTS = list(range(2, 13))
TARGET_S = 150.0

_CHILD = """
import json, sys, time
t0 = time.perf_counter()
from types import SimpleNamespace
from airflow_provider_bellamy.operators.spark import BellamySparkSubmitOperator
t1 = time.perf_counter()
args = json.loads(sys.argv[1])
op = BellamySparkSubmitOperator(
    task_id="bench", job_type="grep", properties=args["context"], scale_outs=args["scale_outs"],
    target=args["target_s"], conn_id="spark_bench", application="job.py", on_infeasible="warn",
)
ti = SimpleNamespace(dag_id="bench", task_id="bench", run_id=args["run_id"], map_index=-1, try_number=1)
t2 = time.perf_counter()
decision, target, facade, settings, command = op.prepare_launch({"ti": ti, "task": op})
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "prepare_s": t3 - t2, "total_s": t3 - t0,
                  "chosen": decision.chosen_scale_out, "model": decision.model_version,
                  "fallback": decision.fallback_reason, "master": settings["master"]}))
"""


def _child_env(store_url: str, home: str) -> dict[str, str]:
    env = dict(os.environ)
    # a deployed worker has its bytecode cached; without it every fresh process recompiles
    # Airflow and torch from source and the figure says more about the interpreter than us
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        {
            "AIRFLOW_HOME": home,
            "AIRFLOW_CONN_BELLAMY_DEFAULT": json.dumps(
                {"conn_type": "bellamy", "extra": {"store_url": store_url}}
            ),
            "AIRFLOW_CONN_SPARK_BENCH": json.dumps({"conn_type": "spark", "host": "local[*]"}),
        }
    )
    return env


def _launch(env: dict[str, str], run_id: str) -> dict[str, Any]:
    payload = json.dumps(
        {"context": CONTEXT, "scale_outs": SCALE_OUTS, "target_s": TARGET_S, "run_id": run_id}
    )
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, payload],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]
    return {"median_s": statistics.median(ordered), "p95_s": p95, "min_s": ordered[0], "max_s": ordered[-1]}


def run_overhead(
    samples: int = 7, *, train_budget_s: float = 30.0, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Set up a store with a trained grep model and time ``samples`` fresh launches."""
    from airflow_provider_bellamy.datasets import load_traces
    from airflow_provider_bellamy.facade import Bellamy

    say = progress or (lambda _msg: None)
    with tempfile.TemporaryDirectory(prefix="bellamy-overhead-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'bellamy.db'}"
        facade = Bellamy(url)
        facade.upgrade()
        facade.record_runs(load_traces("c3o", "grep"))
        say("training the grep model on the C3O traces")
        started = time.monotonic()
        reports = facade.train("grep", time_budget_s=train_budget_s)
        train_s = time.monotonic() - started
        facade.record_runs(
            [
                {"job_type": "grep", "framework": "spark", "scale_out": n, "runtime_s": t, **CONTEXT}
                for n, t in ((4, 132.0), (8, 81.0), (4, 128.0))
            ]
        )
        env = _child_env(url, tmp)
        say("warm-up launch (stores the context's fine-tuned copy)")
        warm = _launch(env, "warmup")
        results = []
        for i in range(samples):
            results.append(_launch(env, f"sample-{i}"))
            say(f"sample {i + 1}/{samples}: prepare {results[-1]['prepare_s']:.3f} s")
    return {
        "samples": samples,
        "train_s": round(train_s, 1),
        "model": reports[0].to_dict()["outcome"],
        "warmup_prepare_s": warm["prepare_s"],
        "prepare": _stats([r["prepare_s"] for r in results]),
        "import": _stats([r["import_s"] for r in results]),
        "total": _stats([r["total_s"] for r in results]),
        "chosen_scale_out": results[-1]["chosen"],
        "model_version": results[-1]["model"],
        "fallback_reason": results[-1]["fallback"],
        "target_s": 1.5,
        "cpu_count": os.cpu_count(),
    }


def render_overhead(report: dict[str, Any]) -> str:
    lines = [
        f"Operator overhead before spark-submit, {report['samples']} fresh processes "
        f"({report['cpu_count']} CPUs; model {report['model_version']}, chosen scale-out "
        f"{report['chosen_scale_out']}):",
    ]
    for key, label in (("prepare", "size + set executors + build command"), ("import", "import operator"),
                       ("total", "import + prepare")):  # fmt: skip
        s = report[key]
        lines.append(
            f"  {label:38s} median {s['median_s']:.3f} s  p95 {s['p95_s']:.3f} s  max {s['max_s']:.3f} s"
        )
    verdict = "meets" if report["prepare"]["median_s"] <= report["target_s"] else "MISSES"
    lines.append(f"  target: median preparation <= {report['target_s']} s: {verdict}")
    if report.get("fallback_reason"):
        lines.append(f"  note: {report['fallback_reason']}")
    return "\n".join(lines)


def add_parser(sub: Any) -> None:
    """Adds ``overhead`` to a ``bellamy benchmark`` sub-parser group."""
    parser = sub.add_parser("overhead", help="operator overhead before spark-submit (fresh processes)")
    parser.add_argument("--samples", type=int, default=7)
    parser.add_argument("--train-budget", type=float, default=30.0, help="seconds to train the grep model")
    parser.add_argument("--json", dest="json_path", default=None, help="write the results as JSON here")
    parser.set_defaults(func=main_from_args)


def main_from_args(args: Any) -> int:
    from airflow_provider_bellamy.exceptions import InvalidInputError

    if args.samples < 1:
        raise InvalidInputError("--samples", args.samples, "must be >= 1")
    report = run_overhead(
        args.samples, train_budget_s=args.train_budget, progress=lambda m: print(m, file=sys.stderr)
    )
    print(render_overhead(report))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    import argparse

    top = argparse.ArgumentParser(prog="python -m airflow_provider_bellamy.benchmarks.overhead")
    group = top.add_subparsers(dest="cmd", required=True)
    add_parser(group)
    parsed = top.parse_args(["overhead", *sys.argv[1:]])
    sys.exit(parsed.func(parsed))
