"""`bellamy predict` and `bellamy size`: what the operators ask before a launch."""

from __future__ import annotations

import argparse
import math
import sys
from typing import TYPE_CHECKING, Any

from airflow_provider_bellamy.cli._args import add_sizing_arguments, context_from, scale_outs_from
from airflow_provider_bellamy.decisions import OBJECTIVES, SizingDecision, format_confidence
from airflow_provider_bellamy.exceptions import DecisionNotStoredError
from airflow_provider_bellamy.spec import ON_INFEASIBLE, parse_duration

if TYPE_CHECKING:
    from rich.console import Console


def register(subparsers: Any) -> None:
    pred = subparsers.add_parser("predict", help="predicted runtime per scale-out, with its band")
    add_sizing_arguments(pred)
    pred.set_defaults(func=_predict, reads_store=True)

    size = subparsers.add_parser("size", help="the smallest scale-out that meets a runtime target")
    add_sizing_arguments(size)
    size.add_argument(
        "--target",
        default=None,
        metavar="DURATION",
        help="runtime target: seconds or a duration (900, 15m, 1h30m, PT15M)",
    )
    size.add_argument("--objective", default="min_scale_out", choices=OBJECTIVES)
    size.add_argument("--price-per-node-hour", type=float, default=None)
    size.add_argument("--default-scale-out", type=int, default=None)
    size.add_argument(
        "--on-infeasible",
        default="warn",
        # (fail is the exit status: 3 for any decision that misses the target)
        choices=[policy for policy in ON_INFEASIBLE if policy != "fail"],
        help="where no scale-out meets the target at the confidence: the most likely to meet it (warn), the smallest "
        "predicted to meet it, giving up the confidence (run-likely), or the largest (run-max)",
    )
    size.add_argument("--json", action="store_true", help="print the decision as JSON")
    size.set_defaults(func=_size, reads_store=True)


def _seconds(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:,.1f}"


def _predict(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from airflow_provider_bellamy.facade import Bellamy

    p = Bellamy(args.store_url).predict(
        args.job_type,
        context_from(args),
        scale_outs_from(args.scale_outs),
        args.confidence,
        framework=args.framework,
    )
    table = Table(title=f"{p.job_type}: predicted runtime ({p.model_version or p.method})")
    q = format_confidence(p.confidence)
    for col in ("scale-out", "predicted s", f"lower s ({q})", f"upper s ({q})"):
        table.add_column(col, justify="right")
    for n, mean, lo, hi in zip(p.scale_outs, p.mean_s, p.lower_s, p.upper_s, strict=True):
        table.add_row(str(n), _seconds(mean), _seconds(lo), _seconds(hi))
    console = Console()
    console.print(table)
    if p.fallback_reason:
        console.print(f"[yellow]fallback: {p.fallback_reason}")
    for note in p.notes:
        console.print(note, style="yellow", markup=False)
    return 0


def _size(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console

    from airflow_provider_bellamy.facade import Bellamy

    # one reader of durations, as the operators' and pipeline files' targets; refused naming the flag
    target = None if args.target is None else parse_duration(args.target, "--target")
    not_stored: DecisionNotStoredError | None = None
    try:
        d = Bellamy(args.store_url).size(
            args.job_type,
            context_from(args),
            scale_outs_from(args.scale_outs),
            target,
            args.confidence,
            args.objective,
            price_per_node_hour=args.price_per_node_hour,
            default_scale_out=args.default_scale_out,
            framework=args.framework,
            on_infeasible=args.on_infeasible,
        )
    except DecisionNotStoredError as exc:
        # the model answered; only its row is missing (a read-only role or replica): the answer is
        # printed and the status is the answer's, as the operators launch it (docs/architecture.md)
        d, not_stored = exc.decision, exc
    console = Console()
    if args.json:
        console.print_json(json.dumps(d.to_dict()))
    else:
        _print_decision(console, d)
    if not_stored is not None:
        print(f"bellamy: warning: this decision was not stored: {not_stored}", file=sys.stderr)
    return 0 if d.feasible else 3


def _print_decision(console: Console, d: SizingDecision) -> None:
    from rich.table import Table

    table = Table(
        title=f"{d.job_type}: sizing for target {_seconds(d.target_s)} s at {format_confidence(d.confidence)}"
    )
    cols = ["", "scale-out", "predicted s", "band s", "node-hours", "meets target"]
    if d.price_per_node_hour is not None:
        cols.insert(5, "cost")
    for col in cols:
        table.add_column(col, justify="right")
    for c in d.candidates:
        row = [
            "▶" if c.scale_out == d.chosen_scale_out else "",
            str(c.scale_out),
            _seconds(c.predicted_s),
            f"{_seconds(c.lower_s)} – {_seconds(c.upper_s)}",
            "-" if not math.isfinite(c.node_hours) else f"{c.node_hours:.3f}",
            "yes" if c.meets_target else "no",
        ]
        if d.price_per_node_hour is not None:
            row.insert(5, "-" if c.cost is None else f"{c.cost:.2f}")
        table.add_row(*row, style="bold green" if c.scale_out == d.chosen_scale_out else None)
    console.print(table)
    colour = "green" if d.feasible else "red"
    stored = "not stored" if d.decision_id is None else d.decision_id
    console.print(f"decision {stored}: {d.chosen_scale_out} — {d.reason}", style=colour, markup=False)
