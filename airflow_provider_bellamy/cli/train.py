"""`bellamy train`: pre-train general models on the stored runs, promote those not worse."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("train", help="pre-train general models from the stored runs")
    parser.add_argument(
        "--job-type",
        default=None,
        help="only this job type, or `all` for one model of every job type (sizes job types without a "
        "model of their own); default: every job type with runs, each its own model",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--time-budget", default=None, help="per job type: seconds or a duration (600, 10m, PT10M)"
    )
    parser.add_argument("--force", action="store_true", help="retrain even when no run changed")
    parser.set_defaults(func=_train, reads_store=True)


def _train(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from airflow_provider_bellamy.facade import Bellamy
    from airflow_provider_bellamy.spec import parse_duration

    # one reader of durations for every door; refused naming the flag before anything is read
    budget = None if args.time_budget is None else parse_duration(args.time_budget, "--time-budget")
    bellamy = Bellamy(args.store_url)
    job_types = [args.job_type] if args.job_type else bellamy.job_types()
    console = Console()
    if not job_types:
        console.print("no runs stored yet: `bellamy history import FILE` or `--traces c3o` first")
        return 1
    reports = []
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console
    ) as bar:
        task = bar.add_task("training", total=len(job_types))
        for job in job_types:
            bar.update(task, description=f"pre-training {job}")
            reports.extend(bellamy.train(job, seed=args.seed, time_budget_s=budget, force=args.force))
            bar.advance(task)
    table = Table(title="training")
    for col in (
        "job type",
        "outcome",
        "version",
        "train runs",
        "hold-out runs",
        "hold-out MRE",
        "active MRE",
        "s",
    ):
        table.add_column(col)
    for r in reports:
        m = r.metrics or {}
        fmt = lambda v: "-" if v is None else f"{v:.1%}"  # noqa: E731
        table.add_row(
            r.job_type,
            r.outcome,
            str(r.version or "-"),
            str(r.train_rows),
            str(r.holdout_rows),
            fmt(m.get("holdout_mre")),
            fmt(m.get("active_holdout_mre")),
            f"{r.seconds:.1f}",
        )
    console.print(table)
    return 0
