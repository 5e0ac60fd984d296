"""`bellamy overhead`: the operator-overhead benchmark (also available for `bellamy benchmark overhead`
through ``airflow_provider_bellamy.benchmarks.overhead.add_parser``)."""

from __future__ import annotations

from typing import Any


def register(subparsers: Any) -> None:
    from airflow_provider_bellamy.benchmarks.overhead import main_from_args

    parser = subparsers.add_parser("overhead", help="operator overhead before spark-submit (fresh processes)")
    parser.add_argument("--samples", type=int, default=7)
    parser.add_argument("--train-budget", type=float, default=30.0, help="seconds to train the grep model")
    parser.add_argument("--json", dest="json_path", default=None, help="write the results as JSON here")
    parser.set_defaults(func=main_from_args)
