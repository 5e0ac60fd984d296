"""BellamyHook: the ``bellamy`` connection → the store it names (embedded default without one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.get_provider_info import get_provider_info
from airflow_provider_bellamy.hooks.bellamy import BellamyHook
from tests.fixtures.airflow import connection_json


def test_provider_declares_the_connection_type() -> None:
    info = get_provider_info()
    types = {c["connection-type"]: c["hook-class-name"] for c in info["connection-types"]}
    assert types["bellamy"] == "airflow_provider_bellamy.hooks.bellamy.BellamyHook"
    assert BellamyHook.conn_type == "bellamy" and BellamyHook.default_conn_name == "bellamy_default"
    behaviour = BellamyHook.get_ui_field_behaviour()
    assert set(behaviour) == {"hidden_fields", "relabeling", "placeholders"}
    assert "store_url" in behaviour["placeholders"]["extra"]


def test_missing_connection_means_the_embedded_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_BELLAMY_DEFAULT", raising=False)
    hook = BellamyHook()
    assert hook.resolve() == (None, 10.0)
    facade = hook.get_facade()
    home = Path(__import__("os").environ["AIRFLOW_HOME"])
    assert str(home / "bellamy") in facade.store.display_url
    assert hook.get_conn() is facade  # one façade per hook


def test_store_url_gets_the_password_from_the_password_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_BELLAMY_PG",
        connection_json(
            "bellamy",
            password="s3cret",
            extra={
                "store_url": "postgresql+psycopg://bellamy@db.internal:5432/bellamy",
                "connect_timeout": "3",
            },
        ),
    )
    url, timeout = BellamyHook("bellamy_pg").resolve()
    assert url == "postgresql+psycopg://bellamy:s3cret@db.internal:5432/bellamy"
    assert timeout == 3.0
    assert BellamyHook("bellamy_pg", connect_timeout_s=1.5).connect_timeout_s == 1.5


def test_url_from_host_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_BELLAMY_HOST",
        connection_json("bellamy", host="db", port=6543, schema="models", login="u", password="p@ss"),
    )
    url, _ = BellamyHook("bellamy_host").resolve()
    assert url == "postgresql+psycopg://u:p%40ss@db:6543/models"


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"store_url": "not a url"}, "connection 'bellamy_bad' extra.store_url"),
        ({"connect_timeout": "soon"}, "connection 'bellamy_bad' connect_timeout"),
        ({"connect_timeout": -1}, "connection 'bellamy_bad' connect_timeout"),
    ],
)
def test_bad_connection_fields_are_named(monkeypatch: pytest.MonkeyPatch, extra: dict, field: str) -> None:
    monkeypatch.setenv("AIRFLOW_CONN_BELLAMY_BAD", connection_json("bellamy", extra=extra))
    with pytest.raises(InvalidInputError) as err:
        BellamyHook("bellamy_bad").resolve()
    assert err.value.field == field


def test_test_connection_reports_reachability(bellamy_store: object, monkeypatch: pytest.MonkeyPatch) -> None:
    ok, message = BellamyHook().test_connection()
    assert ok, message
    monkeypatch.setenv(
        "AIRFLOW_CONN_BELLAMY_DOWN",
        connection_json(
            "bellamy", extra={"store_url": "postgresql+psycopg://x@127.0.0.1:1/x", "connect_timeout": 1}
        ),
    )
    ok, message = BellamyHook("bellamy_down").test_connection()
    assert not ok and message


def test_test_connection_fails_for_a_sqlite_store_that_does_not_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mistyped path tested green ("reachable ... missing") and read as an empty store."""
    typo = tmp_path / "bellamy-typo.db"
    monkeypatch.setenv(
        "AIRFLOW_CONN_BELLAMY_TYPO",
        connection_json("bellamy", extra={"store_url": f"sqlite:///{typo}"}),
    )
    ok, message = BellamyHook("bellamy_typo").test_connection()
    assert not ok and f"no model store at sqlite+pysqlite:///{typo} (no such file)" in message
    assert not typo.exists()
