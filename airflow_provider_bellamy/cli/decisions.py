"""`bellamy decisions list|show|prune`: the stored sizing decisions, for auditing."""

from __future__ import annotations

import argparse
import json
from typing import Any

from airflow_provider_bellamy.cli._args import limit_from


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("decisions", help="list or show stored sizing decisions")
    sub = parser.add_subparsers(dest="decisions_command", required=True, metavar="ACTION")
    lst = sub.add_parser("list", help="the newest decisions, newest first")
    lst.add_argument("--job-type", default=None)
    lst.add_argument("--limit", type=int, default=20)
    lst.set_defaults(func=_list, reads_store=True)
    show = sub.add_parser("show", help="one decision with every candidate, as JSON")
    show.add_argument("decision_id", type=int, metavar="DECISION_ID")
    show.set_defaults(func=_show, reads_store=True)
    pr = sub.add_parser("prune", help="delete decisions older than a duration (their runs stay)")
    pr.add_argument(
        "--older-than", required=True, metavar="DURATION", help="e.g. 90d, 12h, 2w, 1d12h (s, m, h, d, w)"
    )
    pr.add_argument(
        "--keep-linked", action="store_true", help="keep the decisions that led to a recorded run"
    )
    pr.set_defaults(func=_prune)


def _fmt(value: float | None, unit: str = "s") -> str:
    return "-" if value is None else f"{value:,.1f}{unit}"


def _confidence(d: dict[str, Any]) -> str:
    """What the band honours, and what was asked where the calibration capped it."""
    from airflow_provider_bellamy.decisions import format_confidence

    honoured = format_confidence(d["confidence"])
    asked = d.get("requested_confidence")
    if asked is not None and asked > d["confidence"]:
        return f"{honoured} (asked {format_confidence(asked)})"
    return honoured


def _extrapolates_in(d: dict[str, Any]) -> str:
    """The kinds of extrapolation ("-": inside the training data; "?": not recorded)."""
    ext = d.get("extrapolation")
    if not ext or not ext.get("known", True):
        return "?"
    kinds = list(ext.get("kinds") or [])
    if ext.get("job_type_unseen"):
        kinds.insert(0, "job type")
    return ", ".join(kinds) or "-"


def _list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from airflow_provider_bellamy.facade import Bellamy

    rows = Bellamy(args.store_url).list_decisions(args.job_type, limit=limit_from(args))
    console = Console()
    if not rows:
        console.print("no decisions stored" + (f" for job type {args.job_type!r}" if args.job_type else ""))
        return 0
    table = Table(title=f"sizing decisions ({len(rows)} newest)")
    for col in (
        "id",
        "created",
        "job type",
        "chosen",
        "feasible",
        "target",
        "conf.",
        "extrapolates in",
        "model",
        "run",
        "reason",
    ):
        table.add_column(col, overflow="fold")
    for d in rows:
        table.add_row(
            str(d["id"]),
            (d["created_at"] or "")[:19],
            d["job_type"],
            str(d["chosen_scale_out"]),
            "yes" if d["feasible"] else "NO",
            _fmt(d["target_s"]),
            _confidence(d),
            _extrapolates_in(d),
            d["model_version"] or (d["fallback_reason"] and "fallback") or "-",
            str(d["run_row_id"] or "-"),
            d["reason"],
        )
    console.print(table)
    return 0


def _show(args: argparse.Namespace) -> int:
    from airflow_provider_bellamy.facade import Bellamy

    decision = Bellamy(args.store_url).get_decision(args.decision_id)
    print(json.dumps(decision.to_dict(), indent=2, default=str))
    return 0


def _prune(args: argparse.Namespace) -> int:
    from airflow_provider_bellamy.cli._args import parse_duration
    from airflow_provider_bellamy.facade import Bellamy

    older_than = parse_duration(args.older_than, "--older-than")
    deleted = Bellamy(args.store_url).prune_decisions(older_than, keep_linked=args.keep_linked)
    print(f"deleted {deleted} decision(s) older than {older_than}")
    return 0
