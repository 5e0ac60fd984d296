"""`bellamy history import|export|list`: past runs (a file or the bundled traces) into the store,
the stored runs out to a file."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from airflow_provider_bellamy.cli._args import limit_from


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("history", help="import past runs, export or list the stored ones")
    sub = parser.add_subparsers(dest="history_command", required=True, metavar="ACTION")
    imp = sub.add_parser(
        "import",
        help="import runs from a CSV/TSV file in the canonical columns, or the bundled traces",
        description="FILE: CSV/TSV with job_type, framework, scale_out, runtime_s and context columns "
        "(provenance columns optional). --traces: the bundled C3O and/or Bell traces.",
    )
    imp.add_argument("file", nargs="?", metavar="FILE", help="CSV or TSV file of runs")
    imp.add_argument("--traces", choices=("c3o", "bell", "all"), default=None, help="import bundled traces")
    imp.add_argument(
        "--append", action="store_true", help="import even if this file/trace set was imported before"
    )
    imp.set_defaults(func=_import)
    exp = sub.add_parser(
        "export",
        help="write the stored runs to a CSV/TSV file (what `history import` and `benchmark --traces` read)",
        description="FILE: .csv, or .tsv/.tab for tab-separated. The canonical columns, every context "
        "property and the provenance (Airflow dag/task/run/try, status, source) of each run.",
    )
    exp.add_argument("file", metavar="FILE")
    exp.add_argument("--job-type", default=None)
    exp.add_argument("--successful-only", action="store_true", help="leave out failed runs")
    exp.add_argument("--force", action="store_true", help="replace FILE if it exists")
    exp.set_defaults(func=_export, reads_store=True)
    lst = sub.add_parser("list", help="the newest stored runs")
    lst.add_argument("--job-type", default=None)
    lst.add_argument("--status", choices=("success", "failed"), default=None)
    lst.add_argument("--limit", type=int, default=20)
    lst.set_defaults(func=_list, reads_store=True)


def _import(args: argparse.Namespace) -> int:
    from airflow_provider_bellamy.exceptions import InvalidInputError
    from airflow_provider_bellamy.facade import Bellamy

    if (args.file is None) == (args.traces is None):
        raise InvalidInputError(
            "FILE/--traces", args.file or args.traces, "give exactly one of FILE or --traces"
        )
    b = Bellamy(args.store_url)
    if args.traces is not None:
        added = b.import_traces(args.traces, append=args.append)
        for name, count in added.items():
            if count:
                print(f"imported {count} runs of the {name} traces")
            else:
                print(f"the {name} traces are already in the store (pass --append to add them again)")
        print(f"store {b.store.display_url}: {b.count_runs()} runs")
        return 0

    from airflow_provider_bellamy.datasets import load_runs_file

    frame = load_runs_file(args.file)
    if "dataset" not in frame.columns:
        # A name per file makes a second import of the same file detectable.
        frame["dataset"] = f"file:{Path(args.file).name}"
    datasets = sorted({str(v) for v in frame["dataset"].dropna()})
    # An Airflow try stored already (an exported file read back) keeps its row and is returned
    # again: the count of rows gives what this import added.
    before = b.count_runs()
    try:
        ids = b.import_runs(frame, append=args.append)
    except InvalidInputError as exc:
        if exc.field != "dataset":
            raise
        raise InvalidInputError("FILE", args.file, f"dataset {exc.value!r} {exc.problem}") from None
    total = b.count_runs()
    added = min(len(ids), max(0, total - before))
    named = f" (dataset {', '.join(datasets)})" if datasets else ""
    kept = len(ids) - added
    stored = f"; {kept} were stored already (the same Airflow tries)" if kept else ""
    print(f"imported {added} runs from {args.file}{named}{stored}")
    print(f"store {b.store.display_url}: {total} runs")
    return 0


def _export(args: argparse.Namespace) -> int:
    from airflow_provider_bellamy.facade import Bellamy

    b = Bellamy(args.store_url)
    count = b.export_runs(
        args.file, args.job_type, successful_only=args.successful_only, overwrite=args.force
    )
    print(f"exported {count} runs from {b.store.display_url} to {args.file}")
    return 0


def _list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from airflow_provider_bellamy.facade import Bellamy

    b = Bellamy(args.store_url)
    rows = b.list_runs(args.job_type, status=args.status, limit=limit_from(args))
    console = Console()
    total = b.count_runs(args.job_type, status=args.status)
    if not rows:
        console.print("no runs stored" + (f" for job type {args.job_type!r}" if args.job_type else ""))
        return 0
    table = Table(title=f"runs ({len(rows)} newest of {total})")
    for col in (
        "id",
        "job type",
        "framework",
        "scale-out",
        "runtime",
        "status",
        "source",
        "origin",
        "context",
    ):
        table.add_column(col, overflow="fold")
    for r in rows:
        origin = (
            f"{r['dag_id']}.{r['task_id']} {r['run_id']} try {r['try_number']}"
            if r["source"] == "observed"
            else (r["dataset"] or "-")
        )
        context = ", ".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in r["context"].items()
        )
        table.add_row(
            str(r["id"]),
            r["job_type"],
            r["framework"],
            str(r["scale_out"]),
            f"{r['runtime_s']:,.1f}s",
            r["status"],
            r["source"],
            origin,
            context,
        )
    console.print(table)
    return 0
