"""`bellamy plot`: runtime against scale-out with the band, the target and the chosen point."""

from __future__ import annotations

import argparse
from typing import Any

from airflow_provider_bellamy.cli._args import add_sizing_arguments, context_from, scale_outs_from


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "plot", help="PNG of a sizing decision: runtime vs scale-out, band, target"
    )
    add_sizing_arguments(parser)
    parser.add_argument("--target", type=float, default=None, help="runtime target in seconds")
    parser.add_argument("--out", default="bellamy-sizing.png", help="PNG file to write")
    parser.set_defaults(func=_plot, reads_store=True)


def _plot(args: argparse.Namespace) -> int:
    from rich.console import Console

    from airflow_provider_bellamy.facade import Bellamy
    from airflow_provider_bellamy.plotting import plot_decisions, require_matplotlib

    require_matplotlib()  # before sizing: a missing extra must not leave a stored decision
    decision = Bellamy(args.store_url).size(
        args.job_type,
        context_from(args),
        scale_outs_from(args.scale_outs),
        args.target,
        args.confidence,
        framework=args.framework,
    )
    path = plot_decisions([decision.to_dict()], [], args.out, title=f"Bellamy sizing: {args.job_type}")
    Console().print(f"decision {decision.decision_id}: {decision.chosen_scale_out} — wrote {path}")
    return 0
