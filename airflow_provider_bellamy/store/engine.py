"""Engine factory: where the store lives and how to talk to it without hanging.

SQLite (the embedded default) gets WAL, a busy timeout and ``BEGIN IMMEDIATE`` for
writes, so many Airflow workers can record runs at once; PostgreSQL gets a connect
timeout. Connection failures become :class:`StoreError` with the URL (password hidden).
"""

from __future__ import annotations

import math
import os
import random
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError

from airflow_provider_bellamy.exceptions import InvalidInputError, StoreError

T = TypeVar("T")

DEFAULT_CONNECT_TIMEOUT_S = 10.0
# How long a write keeps retrying a locked SQLite file before giving up.
LOCK_RETRY_BUDGET_S = 60.0
# sqlite3's own busy handler waits this long per statement before it reports "locked".
SQLITE_BUSY_TIMEOUT_MS = 5000


def airflow_home() -> Path:
    return Path(os.environ.get("AIRFLOW_HOME") or Path.home() / "airflow").expanduser()


def default_store_path() -> Path:
    return airflow_home() / "bellamy" / "bellamy.db"


def default_store_url() -> str:
    return f"sqlite:///{default_store_path()}"


def parse_url(url: str | URL | None) -> URL:
    """A validated SQLAlchemy URL; ``None`` is the embedded default store."""
    if url is None:
        return make_url(default_store_url())
    if isinstance(url, URL):
        parsed = url
    else:
        if not isinstance(url, str) or not url.strip():
            raise InvalidInputError(
                "store_url", url, "must be a SQLAlchemy URL such as sqlite:///path/bellamy.db"
            )
        try:
            parsed = make_url(url.strip())
        except ArgumentError as exc:
            raise InvalidInputError("store_url", _mask(url), f"not a SQLAlchemy URL ({exc})") from None
        except ValueError:  # SQLAlchemy's int() of the port
            raise InvalidInputError(
                "store_url",
                _mask(url),
                "the port is not a number (scheme://user:password@host:PORT/database)",
            ) from None
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        if not parsed.database or parsed.database == ":memory:":
            # Each pooled connection would see its own empty in-memory database.
            raise InvalidInputError(
                "store_url", str(parsed), "in-memory SQLite cannot hold a store; give a file path"
            )
        parsed = parsed.set(drivername="sqlite+pysqlite")
    elif backend == "postgresql":
        if parsed.get_driver_name() not in ("psycopg", "psycopg2"):
            parsed = parsed.set(drivername="postgresql+psycopg")
    else:
        raise InvalidInputError(
            "store_url", safe_url(parsed), "only sqlite:// and postgresql:// stores are supported"
        )
    return parsed


def safe_url(url: URL | str) -> str:
    if isinstance(url, str):
        try:
            url = make_url(url)
        except (ArgumentError, ValueError):
            return "<unparsable url>"
    return url.render_as_string(hide_password=True)


def _mask(url: str) -> str:
    """A URL SQLAlchemy cannot parse, for a message: the password (user:PASSWORD@) hidden."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url.strip())


def sqlite_path(url: URL) -> Path | None:
    if url.get_backend_name() != "sqlite" or not url.database:
        return None
    return Path(url.database).expanduser()


def is_sqlite(engine_or_url: Engine | URL) -> bool:
    url = engine_or_url.url if isinstance(engine_or_url, Engine) else engine_or_url
    return url.get_backend_name() == "sqlite"


def create_store_engine(url: URL, *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> Engine:
    """An engine tuned for the store; nothing is connected yet."""
    if url.get_backend_name() == "sqlite":
        engine = sa.create_engine(
            url,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
            pool_pre_ping=False,
        )
        _install_sqlite_hooks(engine)
        return engine
    # libpq rounds connect_timeout up to whole seconds and treats < 2 as 2.
    timeout = max(2, math.ceil(connect_timeout_s))
    return sa.create_engine(
        url,
        connect_args={"connect_timeout": timeout, "application_name": "airflow-provider-bellamy"},
        pool_pre_ping=True,
        pool_size=2,
        max_overflow=4,
        pool_timeout=connect_timeout_s,
    )


def _install_sqlite_hooks(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event below issue BEGIN itself: pysqlite's implicit
        # deferred BEGIN lets two writers deadlock on the upgrade from read to write lock,
        # which SQLite reports at once, without waiting for the busy timeout.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            cur.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
            cur.execute("PRAGMA journal_mode = WAL")
            cur.execute("PRAGMA synchronous = NORMAL")
            cur.execute("PRAGMA foreign_keys = ON")
        finally:
            cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: sa.Connection) -> None:
        if not conn.get_execution_options().get("bellamy_write"):
            conn.exec_driver_sql("BEGIN DEFERRED")
            return
        _begin_immediate(conn)


def _begin_immediate(conn: sa.Connection) -> None:
    """Take SQLite's write lock, polling every few milliseconds.

    SQLite's own busy handler sleeps up to 100 ms between attempts, so with many
    writers most of the waiting is idle; polling BEGIN IMMEDIATE (nothing is done
    before it, so a retry is free) hands the lock over within a few milliseconds.
    """
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    delay = 0.0005
    conn.exec_driver_sql("PRAGMA busy_timeout = 0")
    try:
        while True:
            try:
                conn.exec_driver_sql("BEGIN IMMEDIATE")
                return
            except OperationalError as exc:
                if not is_lock_error(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 1.5, 0.01)
    finally:
        conn.exec_driver_sql(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")


def is_lock_error(exc: BaseException) -> bool:
    """SQLite busy/locked, or a PostgreSQL serialization failure or deadlock: safe to retry."""
    if not isinstance(exc, DBAPIError):
        return False
    text = str(exc.orig).lower() if exc.orig is not None else str(exc).lower()
    if "database is locked" in text or "database is busy" in text or "database table is locked" in text:
        return True
    sqlstate = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
    return sqlstate in {"40001", "40P01"}


def is_connection_error(exc: BaseException) -> bool:
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    text = str(exc.orig).lower()
    if "file is not a database" in text or "malformed" in text:
        return True  # a corrupt or foreign SQLite file
    if isinstance(exc, OperationalError):
        markers = (
            "unable to open database file",
            "connection refused",
            "could not connect",
            "connection to server",
            "timeout expired",
            "could not translate host name",
            "no such host",
            "name or service not known",
            "server closed the connection",
            "password authentication failed",
            "does not exist",
            "readonly database",
            "disk i/o error",
        )
        return any(m in text for m in markers)
    return False


def with_retry(fn: Callable[[], T], *, what: str, budget_s: float | None = None) -> T:
    """Run ``fn`` and retry it while the database reports a lock conflict.

    ``fn`` must be a whole transaction (it is run again from the start).
    """
    deadline = time.monotonic() + (LOCK_RETRY_BUDGET_S if budget_s is None else budget_s)
    delay = 0.01
    while True:
        try:
            return fn()
        except DBAPIError as exc:
            if not is_lock_error(exc) or time.monotonic() >= deadline:
                raise
        # Jitter keeps the writers that collided from colliding again in lock step.
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 0.5)


@contextmanager
def translate_errors(url: URL, what: str) -> Iterator[None]:
    """Turn driver-level connection failures into a StoreError naming the store."""
    try:
        yield
    except DBAPIError as exc:
        if is_connection_error(exc):
            hint = ""
            path = sqlite_path(url)
            if path is not None and "readonly database" in str(exc.orig).lower():
                # WAL: even a read writes {name}-shm (and -wal) beside the file
                hint = (
                    f" (this user cannot write {path} or its folder {path.parent}: SQLite writes "
                    f"{path.name}-wal and {path.name}-shm there even to read the store; give this user "
                    "write access to both, or read a copy of the store in a folder it can write)"
                )
            raise StoreError(
                f"cannot use the model store at {safe_url(url)} while {what}: {_first_line(exc.orig)}{hint}"
            ) from exc
        if is_lock_error(exc):
            raise StoreError(
                f"the model store at {safe_url(url)} stayed locked by other writers while {what}: "
                f"{_first_line(exc.orig)}"
            ) from exc
        if is_permission_error(exc):
            raise StoreError(
                f"the model store at {safe_url(url)} refused this user while {what}: "
                f"{_first_line(exc.orig)} (a read-only role: grant it SELECT, INSERT, UPDATE and DELETE "
                "on the store's tables and USAGE on their sequences, or give a URL whose role may write)"
            ) from exc
        raise


def is_permission_error(exc: BaseException) -> bool:
    """PostgreSQL's insufficient privilege (a read-only role writing, or a role without SELECT)."""
    if not isinstance(exc, DBAPIError):
        return False
    sqlstate = getattr(exc.orig, "sqlstate", None) or getattr(exc.orig, "pgcode", None)
    return sqlstate == "42501"


def _first_line(err: object) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


# One engine (and connection pool) per URL and process: Bellamy objects are created per
# task execution and must not each open new pools.
_ENGINES: dict[tuple[str, float], Engine] = {}
_ENGINES_LOCK = threading.Lock()


def shared_engine(url: URL, *, connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S) -> Engine:
    key = (url.render_as_string(hide_password=False), float(connect_timeout_s))
    with _ENGINES_LOCK:
        engine = _ENGINES.get(key)
        if engine is None:
            engine = create_store_engine(url, connect_timeout_s=connect_timeout_s)
            _ENGINES[key] = engine
        return engine


def dispose_engines() -> None:
    with _ENGINES_LOCK:
        for engine in _ENGINES.values():
            engine.dispose()
        _ENGINES.clear()


def _after_fork_in_child() -> None:
    # A forked child must not reuse the parent's sockets or SQLite handles.
    for engine in list(_ENGINES.values()):
        engine.dispose(close=False)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
