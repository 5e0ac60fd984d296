"""The store object: one database (SQLite file or PostgreSQL), its schema, its sessions.

Schema rules (never migrate silently on a read path):
- a fresh embedded store (an SQLite file that does not exist yet, or exists empty) is
  created and migrated on its first *write*; a read of it sees an empty store;
- an existing store whose Alembic revision is older than the code's raises
  :class:`SchemaOutdatedError` asking for ``bellamy db upgrade``;
- PostgreSQL databases are only ever migrated by ``bellamy db upgrade`` / :meth:`Store.upgrade`.
The outcome of the check is cached per process and URL, so it costs one query per process.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import URL, Engine
from sqlalchemy.orm import Session

from airflow_provider_bellamy.exceptions import ModelFileError, SchemaOutdatedError, StoreError
from airflow_provider_bellamy.store.engine import (
    DEFAULT_CONNECT_TIMEOUT_S,
    airflow_home,
    parse_url,
    safe_url,
    shared_engine,
    sqlite_path,
    translate_errors,
    with_retry,
)

T = TypeVar("T")

# The newest migration in migrations/versions (a test checks it against Alembic's head).
HEAD_REVISION = "0006_task_instance_try_id"
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# Model weights above this size go to a file beside the store instead of a database row.
DEFAULT_BLOB_THRESHOLD_BYTES = 50 * 1024 * 1024
BELLAMY_TABLES = frozenset({"runs", "model_versions", "decisions"})
# Not Alembic's default name: the store may share a PostgreSQL database with Airflow's
# own tables, and Airflow keeps its revision in "alembic_version".
VERSION_TABLE = "bellamy_alembic_version"

_VERIFIED: set[str] = set()
_VERIFIED_LOCK = threading.Lock()


@dataclass(frozen=True)
class SchemaStatus:
    """Where a store's schema stands relative to the code.

    ``state``: "missing" (no file yet) | "empty" (no Bellamy tables) | "current" | "outdated"
    (an older known revision) | "unknown" (a revision this code does not know) | "drifted"
    (the code's revision, but tables, columns or indexes differ from the code's models) |
    "unversioned" (the code's tables, but no revision recorded) | "foreign" (tables named like
    ours that are not the code's, and no revision). ``differences``: what differs, in words;
    ``extra``: what the store has beyond the models (reported, harmless).
    """

    state: str
    revision: str | None
    head: str = HEAD_REVISION
    differences: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()

    @property
    def usable(self) -> bool:
        return self.state == "current"


def alembic_config(connection: sa.Connection | None = None) -> object:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def alembic_head() -> str:
    """The head revision as Alembic computes it from the migration files."""
    from alembic.script import ScriptDirectory

    heads = ScriptDirectory.from_config(alembic_config()).get_heads()  # type: ignore[arg-type]
    if len(heads) != 1:
        raise StoreError(f"the store migrations have {len(heads)} heads ({heads}); expected one")
    return heads[0]


def _known_revisions() -> set[str]:
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config())  # type: ignore[arg-type]
    return {rev.revision for rev in script.walk_revisions()}


class Store:
    """A model store at ``url`` (None → the embedded SQLite store under $AIRFLOW_HOME/bellamy/)."""

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        blob_dir: str | Path | None = None,
        blob_threshold_bytes: int = DEFAULT_BLOB_THRESHOLD_BYTES,
    ) -> None:
        self.url: URL = parse_url(url)
        self.connect_timeout_s = float(connect_timeout_s)
        self.engine: Engine = shared_engine(self.url, connect_timeout_s=self.connect_timeout_s)
        self.sqlite_file: Path | None = sqlite_path(self.url)
        if blob_dir is not None:
            self.blob_dir = Path(blob_dir)
        elif self.sqlite_file is not None:
            self.blob_dir = self.sqlite_file.parent / "models"
        else:
            self.blob_dir = airflow_home() / "bellamy" / "models"
        self.blob_threshold_bytes = int(blob_threshold_bytes)
        self._key = self.url.render_as_string(hide_password=False)

    @property
    def cache_key(self) -> str:
        """What identifies this store in the process's caches (the URL, password included)."""
        return self._key

    @property
    def display_url(self) -> str:
        return safe_url(self.url)

    @property
    def is_sqlite(self) -> bool:
        return self.sqlite_file is not None

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    # ---------------------------------------------------------------- schema

    def schema_status(self, *, thorough: bool = True) -> SchemaStatus:
        """Where the store's schema stands. ``thorough=False`` (the per-process check before use)
        compares the live schema with the models only where a quick look at table, column, index
        and constraint names finds a difference: Alembic's comparison costs more than the rest of
        opening a store."""
        if self.sqlite_file is not None and not self.sqlite_file.exists():
            return SchemaStatus("missing", None)
        with translate_errors(self.url, "reading the schema version"), self.engine.connect() as conn:
            tables = set(sa.inspect(conn).get_table_names())
            revision = None
            if VERSION_TABLE in tables:
                revision = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
            if revision is None:
                if not tables & BELLAMY_TABLES:
                    return SchemaStatus("empty", None)
                missing, extra = schema_differences(conn)
                return SchemaStatus(
                    "foreign" if missing else "unversioned", None, differences=missing, extra=extra
                )
            if revision == HEAD_REVISION:
                if not thorough and _has_model_names(conn):
                    return SchemaStatus("current", revision)
                missing, extra = schema_differences(conn)
                return SchemaStatus(
                    "drifted" if missing else "current", revision, differences=missing, extra=extra
                )
        if revision in _known_revisions():
            return SchemaStatus("outdated", revision)
        return SchemaStatus("unknown", revision)

    def require_existing(self) -> None:
        """StoreError when the embedded store's file does not exist: a command that only reads would
        otherwise report an empty store for a mistyped path. A PostgreSQL database that does not
        exist fails to connect, and one without the schema is refused by ensure_schema."""
        if self.sqlite_file is not None and not self.sqlite_file.exists():
            raise StoreError(
                f"there is no model store at {self.display_url} (no such file): check the store URL; a "
                "store is created by its first write (`bellamy history import`) or by `bellamy db upgrade`"
            )

    def current_revision(self) -> str | None:
        return self.schema_status().revision

    def upgrade(self, revision: str = "head") -> tuple[str | None, str | None]:
        """Create or migrate the schema; returns (revision before, revision after)."""
        self._make_folder()
        with self._migration_lock():
            return self._upgrade_locked(revision)

    def _make_folder(self) -> None:
        """The embedded store's folder, or a StoreError naming the path (no permission, a file there)."""
        if self.sqlite_file is None:
            return
        try:
            self.sqlite_file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(
                f"cannot create the folder of the model store {self.sqlite_file}: {exc.strerror or exc} "
                f"({exc.filename or self.sqlite_file.parent}); give a store URL in a folder this user can write"
            ) from exc

    def _upgrade_locked(self, revision: str) -> tuple[str | None, str | None]:
        from alembic import command

        with translate_errors(self.url, "migrating the schema"):
            before = self.schema_status()
            if before.state in ("foreign", "unknown"):
                raise StoreError(self.problem(before))
            if before.state == "drifted":
                self._repair(before)
                return before.revision, self.schema_status().revision
            with self.engine.connect() as conn:
                conn.execution_options(bellamy_write=True)
                with conn.begin():
                    if self.dialect == "postgresql":
                        # Two upgrades at once would both try to create the tables.
                        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_key("migrate")})
                    if before.state == "unversioned":
                        # the code's tables without their revision row (a lost or emptied version
                        # table): record the revision the tables are at; creating them would fail
                        command.stamp(alembic_config(conn), HEAD_REVISION)  # type: ignore[arg-type]
                    else:
                        command.upgrade(alembic_config(conn), revision)  # type: ignore[arg-type]
            after = self.schema_status()
        with _VERIFIED_LOCK:
            _VERIFIED.discard(self._key)
        return before.revision, after.revision

    @contextmanager
    def _migration_lock(self) -> Iterator[None]:
        if self.sqlite_file is None:
            yield
            return
        try:
            import fcntl
        except ImportError:  # Windows: SQLite's own locking is all we have
            yield
            return
        lock_path = self.sqlite_file.with_name(self.sqlite_file.name + ".migrate-lock")
        try:
            handle = open(lock_path, "a+b")  # noqa: SIM115 - closed by the with below
        except OSError as exc:
            raise StoreError(
                f"cannot create the model store {self.sqlite_file}: {exc.strerror or exc} writing "
                f"{lock_path}; give a store URL in a folder this user can write"
            ) from exc
        with handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def ensure_schema(self, *, write: bool) -> bool:
        """True when the store can be used; False on a read of a store that does not exist yet."""
        if self._key in _VERIFIED:
            return True
        status = self.schema_status(thorough=False)
        if status.state in ("missing", "empty") and self.sqlite_file is not None:
            if not write:
                return False
            self._make_folder()
            with self._migration_lock():
                # Another process may have created it while this one waited for the lock.
                if self.schema_status(thorough=False).state in ("missing", "empty"):
                    self._upgrade_locked("head")
            status = self.schema_status(thorough=False)
        if status.state == "current":
            with _VERIFIED_LOCK:
                _VERIFIED.add(self._key)
            return True
        if status.state in ("empty", "outdated", "unversioned", "drifted"):
            raise SchemaOutdatedError(self.problem(status))
        raise StoreError(self.problem(status))

    def problem(self, status: SchemaStatus) -> str:
        """What is wrong with a store that cannot be used, and the command that fixes it."""
        where = f"the store at {self.display_url}"
        upgrade = f"`bellamy --store-url '{self.display_url}' db upgrade`"
        shown = status.differences[:6]
        more = len(status.differences) - len(shown)
        found = "; ".join(shown) + (f"; and {more} more (`bellamy db current` lists them)" if more else "")
        if status.state == "empty":
            return f"{where} has no Bellamy schema yet; run {upgrade} once"
        if status.state == "outdated":
            return (
                f"{where} is at schema revision {status.revision}, older than this code's {HEAD_REVISION}; "
                f"run {upgrade}"
            )
        if status.state == "unknown":
            return (
                f"{where} is at schema revision {status.revision}, which this version of "
                f"airflow-provider-bellamy does not know (its head is {HEAD_REVISION}): written by a newer "
                "version of the package (upgrade it) or by another tool (give another store URL)"
            )
        if status.state == "unversioned":
            return (
                f"{where} has the tables of schema revision {HEAD_REVISION} but no revision recorded (its "
                f"{VERSION_TABLE} table is empty or gone); run {upgrade} to record it"
            )
        if status.state == "drifted":
            fix = (
                f"run {upgrade} to re-create them"
                if _repairable(status.differences)
                else "restore it from a backup; these cannot be re-created without losing data"
            )
            return (
                f"{where} is at schema revision {status.revision} but differs from this code's schema "
                f"(changed outside its migrations): {found}; {fix}"
            )
        return (
            f"the database at {self.display_url} has tables named like a Bellamy store's but no schema "
            f"version, and is not a Bellamy store ({found}); give an empty database or the URL of a "
            "Bellamy store"
        )

    def _repair(self, status: SchemaStatus) -> None:
        """Re-create what a drifted store lacks (tables, nullable columns, indexes); nothing is dropped."""
        if not _repairable(status.differences):
            raise StoreError(self.problem(status))
        from alembic.migration import MigrationContext
        from alembic.operations import Operations

        from airflow_provider_bellamy.store.schema import Base

        with self.engine.connect() as conn:
            conn.execution_options(bellamy_write=True)
            with conn.begin():
                ops = Operations(MigrationContext.configure(conn))
                for diff in _compare(conn):
                    kind = diff[0] if isinstance(diff, tuple) else None
                    if kind == "add_table":
                        diff[1].create(conn)
                    elif kind == "add_column":
                        column = Base.metadata.tables[diff[2]].c[diff[3].name]
                        ops.add_column(diff[2], sa.Column(column.name, column.type, nullable=True))
                    elif kind == "add_index":
                        diff[1].create(conn)  # the code's Index, partial WHERE and all
        with _VERIFIED_LOCK:
            _VERIFIED.discard(self._key)

    # -------------------------------------------------------------- sessions

    @contextmanager
    def read(self, what: str = "reading") -> Iterator[Session]:
        """A read session. An embedded store that does not exist yet reads as an empty store (every
        query finds nothing) and stays uncreated: a read never creates it (see the module docstring)."""
        engine = self.engine if self.ensure_schema(write=False) else _empty_engine()
        with translate_errors(self.url, what), Session(engine, expire_on_commit=False) as session:
            yield session

    def write(self, fn: Callable[[Session], T], *, what: str = "writing") -> T:
        """Run ``fn`` in one write transaction, retried from the start on lock conflicts."""
        self.ensure_schema(write=True)

        def attempt() -> T:
            with self.engine.connect() as conn:
                conn.execution_options(bellamy_write=True)
                with Session(bind=conn, expire_on_commit=False) as session, session.begin():
                    return fn(session)

        with translate_errors(self.url, what):
            return with_retry(attempt, what=what)

    def ping(self) -> None:
        """Connect once; StoreError within the connect timeout when the store is unreachable."""
        with translate_errors(self.url, "connecting"), self.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))

    # ----------------------------------------------------------- weight files

    def write_blob(self, data: bytes, sha256: str) -> str:
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        path = self.blob_dir / f"{sha256}.bin"
        if not path.exists():
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_bytes(data)
            os.replace(tmp, path)  # atomic: a reader never sees half a file
        return str(path)

    @staticmethod
    def read_blob(path: str, sha256: str) -> bytes:
        try:
            data = Path(path).read_bytes()
        except OSError as exc:
            raise ModelFileError(f"model weights file {path} cannot be read: {exc}") from exc
        if hashlib.sha256(data).hexdigest() != sha256:
            raise ModelFileError(
                f"model weights file {path} does not match its checksum (corrupt or replaced)"
            )
        return data


_EMPTY_ENGINE: Engine | None = None
_EMPTY_LOCK = threading.Lock()


def _empty_engine() -> Engine:
    """An empty store in memory (SQLite, the dialect of every store that can be missing): what a
    read of a store that does not exist yet sees. One connection per thread, each its own empty
    database with the code's schema, so the repositories' queries run unchanged and find nothing."""
    global _EMPTY_ENGINE
    with _EMPTY_LOCK:
        if _EMPTY_ENGINE is None:
            from sqlalchemy.pool import SingletonThreadPool

            from airflow_provider_bellamy.store.schema import Base

            engine = sa.create_engine("sqlite://", poolclass=SingletonThreadPool)
            ddl = [
                str(sa.schema.CreateTable(t).compile(dialect=engine.dialect))
                for t in Base.metadata.sorted_tables
            ]
            ddl += [
                str(sa.schema.CreateIndex(i).compile(dialect=engine.dialect))
                for t in Base.metadata.sorted_tables
                for i in t.indexes
            ]

            @sa.event.listens_for(engine, "connect")
            def _create_schema(dbapi_conn: Any, _record: Any) -> None:
                for statement in ddl:
                    dbapi_conn.execute(statement)

            _EMPTY_ENGINE = engine
        return _EMPTY_ENGINE


def _compare(conn: sa.Connection) -> list[Any]:
    """Alembic's comparison of the live schema with the code's models, for Bellamy's tables only
    (the store may share a database with Airflow's)."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from airflow_provider_bellamy.store.schema import Base

    def ours(name: str | None, type_: str, parent_names: Any) -> bool:
        return type_ != "table" or name in BELLAMY_TABLES

    context = MigrationContext.configure(
        conn, opts={"version_table": VERSION_TABLE, "include_name": ours, "compare_type": False}
    )
    return list(compare_metadata(context, Base.metadata))


def _has_model_names(conn: sa.Connection) -> bool:
    """Every table, column, index and unique constraint of the models is there, by name."""
    from airflow_provider_bellamy.store.schema import Base

    inspector = sa.inspect(conn)
    for table in Base.metadata.sorted_tables:
        if not inspector.has_table(table.name):
            return False
        live_columns = {c["name"] for c in inspector.get_columns(table.name)}
        live_indexes = {i["name"] for i in inspector.get_indexes(table.name)}
        live_unique = {u["name"] for u in inspector.get_unique_constraints(table.name)}
        unique = {c.name for c in table.constraints if isinstance(c, sa.UniqueConstraint)}
        if not (
            {c.name for c in table.columns} <= live_columns
            and {i.name for i in table.indexes} <= live_indexes
            and unique <= live_unique | live_indexes
        ):
            return False
    return True


def schema_differences(conn: sa.Connection) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(what the store lacks or has otherwise, what it has beyond the models) in words."""
    missing: list[str] = []
    extra: list[str] = []
    for diff in _compare(conn):
        for item in diff if isinstance(diff, list) else [diff]:
            lacking, text = _describe(item)
            (missing if lacking else extra).append(text)
    return tuple(missing), tuple(extra)


def _describe(item: tuple[Any, ...]) -> tuple[bool, str]:
    """(whether the store lacks something the code needs, what) for one Alembic difference."""
    kind = item[0]
    if kind in ("add_table", "remove_table"):
        what = f"table {item[1].name}"
    elif kind in ("add_column", "remove_column"):
        what = f"column {item[2]}.{item[3].name}"
    elif kind in ("add_index", "remove_index"):
        what = f"index {item[1].name} on {item[1].table.name}"
    elif kind == "modify_nullable":  # (kind, schema, table, column, existing, live, code's)
        if item[5] and not item[6]:
            return False, f"column {item[2]}.{item[3]} accepts NULL"
        return True, f"column {item[2]}.{item[3]} refuses NULL, the code's does not"
    else:
        return True, f"{kind.replace('_', ' ')}: {item[1:]}"
    return (True, f"{what} is missing") if kind.startswith("add_") else (False, f"{what} is not the code's")


def _repairable(differences: tuple[str, ...]) -> bool:
    """Missing tables, indexes and nullable columns can be re-created; anything else cannot."""
    from airflow_provider_bellamy.store.schema import Base

    for text in differences:
        words = text.split()
        if text.startswith(("table ", "index ")) and text.endswith(" is missing"):
            continue
        if text.startswith("column ") and text.endswith(" is missing"):
            table, _, column = words[1].partition(".")
            if Base.metadata.tables[table].c[column].nullable:
                continue
        return False
    return True


def lock_key(*parts: object) -> int:
    """A stable signed 64-bit key for PostgreSQL advisory locks."""
    name = "bellamy\x1f" + "\x1f".join(str(p) for p in parts)
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def forget_verified() -> None:
    """Drop the per-process cache of schema checks (tests that rewrite a store use it)."""
    with _VERIFIED_LOCK:
        _VERIFIED.clear()


__all__ = [
    "DEFAULT_BLOB_THRESHOLD_BYTES",
    "HEAD_REVISION",
    "SchemaStatus",
    "Store",
    "alembic_head",
    "forget_verified",
    "lock_key",
]
