"""An unusable store fails fast with a StoreError naming it, never a hang."""

from __future__ import annotations

import socket
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError, StoreError
from airflow_provider_bellamy.facade import Bellamy
from airflow_provider_bellamy.store import engine as engine_module


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends


@pytest.mark.timeout(300)  # a hang guard, not a measurement
def test_unreachable_postgres_fails_at_once() -> None:
    url = f"postgresql+psycopg://bellamy:secret@127.0.0.1:{_closed_port()}/bellamy"
    b = Bellamy(url, connect_timeout_s=3)
    with pytest.raises(StoreError) as err:
        b.list_runs()
    assert "127.0.0.1" in str(err.value) and "secret" not in str(err.value)
    assert "refused" in str(err.value)
    with pytest.raises(StoreError, match="refused"):
        b.record_run(job_type="grep", framework="spark", scale_out=2, runtime_s=10.0)


@pytest.mark.timeout(100)  # a hang guard: without the connect timeout, minutes of SYN retries
def test_blackholed_postgres_host_respects_the_connect_timeout() -> None:
    # 192.0.2.0/24 is TEST-NET-1: packets go nowhere, so only the timeout can end the attempt.
    b = Bellamy("postgresql+psycopg://u@192.0.2.1:5432/db", connect_timeout_s=2)
    with pytest.raises(StoreError, match=r"192\.0\.2\.1"):
        b.list_runs()


def test_unwritable_sqlite_location_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises((StoreError, OSError)):
        Bellamy(f"sqlite:///{blocker}/bellamy.db").record_run(
            job_type="grep", framework="spark", scale_out=2, runtime_s=10.0
        )


def test_corrupt_sqlite_file_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "bellamy.db"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError):
        Bellamy(f"sqlite:///{path}").list_runs()


@pytest.mark.parametrize(
    "url", ["", "not a url", "mysql://u@localhost/db", "sqlite://", "sqlite:///:memory:"]
)
def test_bad_store_urls_are_input_errors(url: str) -> None:
    with pytest.raises(InvalidInputError, match="store_url"):
        Bellamy(url)


def test_bad_connect_timeout_is_an_input_error() -> None:
    with pytest.raises(InvalidInputError, match="connect_timeout_s"):
        Bellamy(None, connect_timeout_s=0)


def _hold_write_lock(
    path: Path, seconds: float, locked: threading.Event, released: list[float] | None = None
) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    locked.set()
    time.sleep(seconds)
    if released is not None:
        released.append(time.monotonic())
    conn.execute("COMMIT")
    conn.close()


def test_sqlite_writer_waits_for_a_held_lock(tmp_path: Path) -> None:
    path = tmp_path / "b.db"
    b = Bellamy(f"sqlite:///{path}")
    b.upgrade()
    locked = threading.Event()
    released: list[float] = []
    holder = threading.Thread(target=_hold_write_lock, args=(path, 1.5, locked, released))
    holder.start()
    locked.wait(5)
    row_id = b.record_run(job_type="grep", framework="spark", scale_out=2, runtime_s=10.0)
    written = time.monotonic()
    holder.join()
    assert row_id == 1 and written > released[0]  # it waited for the lock rather than failing


def test_sqlite_lock_held_too_long_is_a_store_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_module, "SQLITE_BUSY_TIMEOUT_MS", 200)
    monkeypatch.setattr(engine_module, "LOCK_RETRY_BUDGET_S", 0.5)
    path = tmp_path / "b.db"
    b = Bellamy(f"sqlite:///{path}")
    b.upgrade()
    locked = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(path, 3.0, locked))
    holder.start()
    locked.wait(5)
    with pytest.raises(StoreError, match="stayed locked"):  # the retry budget ended it
        b.record_run(job_type="grep", framework="spark", scale_out=2, runtime_s=10.0)
    holder.join()
    assert b.record_run(job_type="grep", framework="spark", scale_out=2, runtime_s=10.0) == 1
