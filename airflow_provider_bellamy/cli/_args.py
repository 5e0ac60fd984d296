"""Argument parsing shared by the sizing commands: contexts, scale-out lists, targets."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import Any

from airflow_provider_bellamy import spec
from airflow_provider_bellamy.exceptions import InvalidInputError


def add_sizing_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_type", metavar="JOB_TYPE")
    parser.add_argument(
        "--set",
        dest="properties",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a context property (repeatable); numbers are read as numbers where the job type's runs hold numbers",
    )
    parser.add_argument(
        "--context-json", default=None, help="the context as a JSON object (merged with --set)"
    )
    parser.add_argument(
        "--scale-outs",
        required=True,
        help="candidate scale-outs: 2,4,8 or a range 2-12 (step 1) or 2-12:2, as in pipeline files",
    )
    parser.add_argument("--confidence", type=float, default=0.9)
    parser.add_argument("--framework", default=None)


def context_from(args: argparse.Namespace) -> dict[str, Any]:
    context: dict[str, Any] = {}
    if args.context_json:
        try:
            loaded = json.loads(args.context_json)
        except json.JSONDecodeError as exc:
            raise InvalidInputError("--context-json", args.context_json, f"not JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise InvalidInputError("--context-json", args.context_json, "must be a JSON object")
        context.update(loaded)
    for item in args.properties:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidInputError("--set", item, "expected KEY=VALUE")
        # as given: the text is converted where the job type's runs are known (records.conform_context,
        # as for the operators' rendered properties), so "08" stays "08" where the runs hold text
        context[key.strip()] = value.strip()
    return context


def scale_outs_from(text: str) -> list[int]:
    """``2,4,8`` | ``2-12`` | ``2-12:2`` | ``[2, 4, 8]``: read as the operators and pipeline files
    read candidates (``spec.parse_scale_outs``), refused naming the flag."""
    return spec.parse_scale_outs(text, "--scale-outs")


def parse_duration(text: str, field: str) -> dt.timedelta:
    """``90d``, ``12h``, ``1d12h``, ``2w`` (any duration ``spec.parse_duration`` reads) → a timedelta > 0."""
    return dt.timedelta(seconds=spec.parse_duration(text, field))


def limit_from(args: argparse.Namespace) -> int:
    """``--limit`` of the listing commands (``history list``, ``decisions list``): rows >= 1."""
    if args.limit < 1:
        raise InvalidInputError("--limit", args.limit, "must be >= 1")
    return int(args.limit)
