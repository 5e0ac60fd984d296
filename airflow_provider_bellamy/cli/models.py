"""`bellamy models list|promote|rollback|prune`: the stored model versions and which one is active."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("models", help="list model versions, promote one, or roll back")
    sub = parser.add_subparsers(dest="models_command", required=True, metavar="ACTION")
    lst = sub.add_parser("list", help="model versions per job type (general models; --all adds fine-tuned)")
    lst.add_argument("--job-type", default=None)
    lst.add_argument("--all", action="store_true", help="include the per-context fine-tuned copies")
    lst.set_defaults(func=_list, reads_store=True)
    pro = sub.add_parser("promote", help="make a version the active one of its job type")
    pro.add_argument("version_id", type=int, metavar="VERSION_ID")
    pro.set_defaults(func=_promote, reads_store=True)
    rb = sub.add_parser("rollback", help="re-activate the version that was active before the current one")
    rb.add_argument("job_type", metavar="JOB_TYPE")
    rb.set_defaults(func=_rollback, reads_store=True)
    pr = sub.add_parser(
        "prune",
        help="delete model versions nothing uses: never an active version nor a context's copy of it",
    )
    pr.add_argument(
        "--keep",
        type=int,
        default=3,
        help="older general versions kept per job type, for rollback (default 3)",
    )
    pr.add_argument("--job-type", default=None)
    pr.set_defaults(func=_prune)


def _mre(value: Any) -> str:
    return "-" if value is None else f"{value:.1%}"


def _list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from airflow_provider_bellamy.facade import Bellamy

    rows = Bellamy(args.store_url).list_models(args.job_type, scope=None if args.all else "general")
    console = Console()
    if not rows:
        console.print("no models stored yet: run `bellamy train`")
        return 0
    table = Table(title="model versions")
    for col in ("id", "version", "status", "created", "train runs", "hold-out MRE", "active MRE", "size"):
        table.add_column(col, overflow="fold")
    for m in rows:
        metrics = m["metrics"] or {}
        table.add_row(
            str(m["id"]),
            m["label"],
            m["status"],
            (m["created_at"] or "")[:19],
            str(m["train_rows"]),
            _mre(metrics.get("holdout_mre")),
            _mre(metrics.get("active_holdout_mre")),
            f"{m['weights_size'] / 1024:,.0f} KiB" + (" (file)" if m["weights_path"] else ""),
        )
    console.print(table)
    return 0


def _promote(args: argparse.Namespace) -> int:
    from airflow_provider_bellamy.facade import Bellamy

    mv = Bellamy(args.store_url).promote(args.version_id)
    print(f"active model of {mv['job_type']} is now {mv['label']} (id {mv['id']})")
    return 0


def _rollback(args: argparse.Namespace) -> int:
    from airflow_provider_bellamy.facade import Bellamy

    mv = Bellamy(args.store_url).rollback(args.job_type)
    print(f"rolled back: active model of {mv['job_type']} is now {mv['label']} (id {mv['id']})")
    return 0


def _prune(args: argparse.Namespace) -> int:
    from airflow_provider_bellamy.exceptions import InvalidInputError
    from airflow_provider_bellamy.facade import Bellamy

    if args.keep < 0:
        raise InvalidInputError("--keep", args.keep, "must be >= 0")
    done = Bellamy(args.store_url).prune_models(keep=args.keep, job_type=args.job_type)
    print(
        f"deleted {done['general']} general version(s) and {done['context']} fine-tuned cop(ies); "
        f"{done['files']} weight file(s) removed"
    )
    return 0
