"""`bellamy db upgrade|current`: create or migrate the model store's schema, show its revision."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("db", help="create/migrate the model store or show its schema revision")
    sub = parser.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    up = sub.add_parser("upgrade", help="create the store or migrate it to this version's schema")
    up.set_defaults(func=_upgrade)
    cur = sub.add_parser("current", help="show the store's URL and schema revision")
    cur.set_defaults(func=_current)


def _store(args: argparse.Namespace) -> Any:
    from airflow_provider_bellamy.store import Store

    return Store(args.store_url)


def _upgrade(args: argparse.Namespace) -> int:
    store = _store(args)
    status = store.schema_status()
    before, after = store.upgrade()
    if status.state == "drifted":
        print(f"store {store.display_url}: re-created what it lacked: {'; '.join(status.differences)}")
    elif status.state == "unversioned":
        print(f"store {store.display_url}: recorded schema revision {after} (its tables were already at it)")
    elif before == after:
        print(f"store {store.display_url}: already at schema revision {after}")
    else:
        print(f"store {store.display_url}: schema revision {before or '<none>'} -> {after}")
    return 0


def _current(args: argparse.Namespace) -> int:
    store = _store(args)
    status = store.schema_status()
    print(f"store:    {store.display_url}")
    print(f"revision: {status.revision or '<none>'} (code head {status.head})")
    if status.state == "current":
        note = "up to date"
    elif status.state == "missing":
        note = "no store yet (created on first write, or by `bellamy db upgrade`)"
    else:
        note = store.problem(status)
    print(f"state:    {status.state}: {note}")
    for line in status.differences[6:]:
        print(f"differs:  {line}")
    for line in status.extra:
        print(f"note:     {line} (kept; harmless to this code)")
    return 0 if status.state == "current" else 1
