"""The ``bellamy`` command.

Each sub-command group lives in its own module of this package and exposes
``register(subparsers)``; a module is imported only when the command line needs it
would be nicer, but argparse needs every parser up front, so modules keep their
heavy imports (torch, pandas, the store) inside the command functions.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from airflow_provider_bellamy.exceptions import BellamyError

# Sub-command modules, in the order `bellamy --help` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "demo",
    "history",
    "train",
    "predict",
    "models",
    "decisions",
    "plot",
    "db",
    "benchmark",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bellamy",
        description="Size Spark and Flink jobs for their SLA with the Bellamy runtime model.",
    )
    parser.add_argument(
        "--store-url",
        default=None,
        help="SQLAlchemy URL of the model store (default: SQLite under $AIRFLOW_HOME/bellamy/)",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"airflow_provider_bellamy.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"airflow_provider_bellamy.cli.{name}":
                continue  # command group not built yet
            raise
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "reads_store", False):
            # A command that only reads must not report an empty store for a mistyped path.
            from airflow_provider_bellamy.store import Store

            Store(args.store_url).require_existing()
        return int(args.func(args) or 0)
    except BellamyError as exc:
        print(f"bellamy: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
