"""Argument parsing shared by the sizing commands: contexts, scale-out lists, targets."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from typing import Any

from airflow_provider_bellamy import spec
from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.records import MAX_CANDIDATES


def add_sizing_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("job_type", metavar="JOB_TYPE")
    parser.add_argument(
        "--set",
        dest="properties",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a context property (repeatable); numbers are read as numbers",
    )
    parser.add_argument(
        "--context-json", default=None, help="the context as a JSON object (merged with --set)"
    )
    parser.add_argument(
        "--scale-outs", required=True, help="candidate scale-outs: 2,4,8 or a range 2-12 (step 1) or 2-12:2"
    )
    parser.add_argument("--confidence", type=float, default=0.9)
    parser.add_argument("--framework", default=None)


def parse_value(text: str) -> Any:
    try:
        return float(text) if any(c in text for c in ".eE") else int(text)
    except ValueError:
        return text


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
        context[key.strip()] = parse_value(value.strip())
    return context


def scale_outs_from(text: str) -> list[int]:
    """``2,4,8`` | ``2-12`` | ``2-12:2``."""
    try:
        if "-" in text and "," not in text:
            span, _, step = text.partition(":")
            lo, _, hi = span.partition("-")
            candidates: range | list[int] = range(int(lo), int(hi) + 1, int(step or 1))
        else:
            candidates = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InvalidInputError("--scale-outs", text, "expected 2,4,8 or 2-12 or 2-12:2") from None
    if len(candidates) > MAX_CANDIDATES:
        raise InvalidInputError(
            "--scale-outs", text, f"gives {len(candidates):,} candidates, more than {MAX_CANDIDATES:,}"
        )
    return list(candidates)


def parse_duration(text: str, field: str) -> dt.timedelta:
    """``90d``, ``12h``, ``1d12h``, ``2w`` (any duration ``spec.parse_duration`` reads) → a timedelta > 0."""
    return dt.timedelta(seconds=spec.parse_duration(text, field))
