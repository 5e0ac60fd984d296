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
from typing import TypeVar

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
HEAD_REVISION = "0003_scale_indexes"
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
    """Where a store's schema stands relative to the code."""

    state: str  # "missing" | "empty" | "current" | "outdated" | "ahead" | "foreign"
    revision: str | None
    head: str = HEAD_REVISION

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
    def display_url(self) -> str:
        return safe_url(self.url)

    @property
    def is_sqlite(self) -> bool:
        return self.sqlite_file is not None

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    # ---------------------------------------------------------------- schema

    def schema_status(self) -> SchemaStatus:
        if self.sqlite_file is not None and not self.sqlite_file.exists():
            return SchemaStatus("missing", None)
        with translate_errors(self.url, "reading the schema version"), self.engine.connect() as conn:
            tables = set(sa.inspect(conn).get_table_names())
            if VERSION_TABLE not in tables:
                return SchemaStatus("foreign" if tables & BELLAMY_TABLES else "empty", None)
            revision = conn.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
        if revision is None:
            return SchemaStatus("empty", None)
        if revision == HEAD_REVISION:
            return SchemaStatus("current", revision)
        if revision in _known_revisions():
            return SchemaStatus("outdated", revision)
        return SchemaStatus("ahead", revision)

    def current_revision(self) -> str | None:
        return self.schema_status().revision

    def upgrade(self, revision: str = "head") -> tuple[str | None, str | None]:
        """Create or migrate the schema; returns (revision before, revision after)."""
        if self.sqlite_file is not None:
            self.sqlite_file.parent.mkdir(parents=True, exist_ok=True)
        with self._migration_lock():
            return self._upgrade_locked(revision)

    def _upgrade_locked(self, revision: str) -> tuple[str | None, str | None]:
        from alembic import command

        with translate_errors(self.url, "migrating the schema"):
            before = self.schema_status()
            if before.state == "foreign":
                raise StoreError(
                    f"the database at {self.display_url} has Bellamy tables but no schema version; "
                    "give an empty database or the URL of a Bellamy store"
                )
            if before.state == "ahead":
                raise StoreError(
                    f"the store at {self.display_url} is at schema revision {before.revision}, newer than "
                    f"this version of airflow-provider-bellamy (head {HEAD_REVISION}); upgrade the package"
                )
            with self.engine.connect() as conn:
                conn.execution_options(bellamy_write=True)
                with conn.begin():
                    if self.dialect == "postgresql":
                        # Two upgrades at once would both try to create the tables.
                        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_key("migrate")})
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
        with open(lock_path, "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def ensure_schema(self, *, write: bool) -> bool:
        """True when the store can be used; False on a read of a store that does not exist yet."""
        if self._key in _VERIFIED:
            return True
        status = self.schema_status()
        if status.state in ("missing", "empty") and self.sqlite_file is not None:
            if not write:
                return False
            self.sqlite_file.parent.mkdir(parents=True, exist_ok=True)
            with self._migration_lock():
                # Another process may have created it while this one waited for the lock.
                if self.schema_status().state in ("missing", "empty"):
                    self._upgrade_locked("head")
            status = self.schema_status()
        if status.state == "current":
            with _VERIFIED_LOCK:
                _VERIFIED.add(self._key)
            return True
        if status.state == "empty":
            raise SchemaOutdatedError(
                f"the store at {self.display_url} has no Bellamy schema yet; run "
                f"`bellamy --store-url '{self.display_url}' db upgrade` once"
            )
        if status.state == "outdated":
            raise SchemaOutdatedError(
                f"the store at {self.display_url} is at schema revision {status.revision}, older than this "
                f"code's {HEAD_REVISION}; run `bellamy --store-url '{self.display_url}' db upgrade`"
            )
        if status.state == "ahead":
            raise StoreError(
                f"the store at {self.display_url} is at schema revision {status.revision}, newer than this "
                f"version of airflow-provider-bellamy (head {HEAD_REVISION}); upgrade the package"
            )
        raise StoreError(f"the database at {self.display_url} has tables but is not a Bellamy store")

    # -------------------------------------------------------------- sessions

    @contextmanager
    def read(self, what: str = "reading") -> Iterator[Session | None]:
        """A read session; ``None`` when the embedded store does not exist yet (nothing stored)."""
        if not self.ensure_schema(write=False):
            yield None
            return
        with translate_errors(self.url, what), Session(self.engine, expire_on_commit=False) as session:
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
