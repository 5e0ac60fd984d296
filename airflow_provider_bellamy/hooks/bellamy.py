"""``BellamyHook``: the ``bellamy`` connection type → a ``Bellamy`` façade over the store it names.

A ``bellamy`` connection names the model store:

* ``extra.store_url`` — a full SQLAlchemy URL (``sqlite:////var/lib/bellamy.db``,
  ``postgresql+psycopg://user@host/db``); a password in the connection's password
  field is added to it, so the URL in ``extra`` can stay free of secrets; or
* host / port / schema (database) / login / password, with ``extra.dialect``
  (default ``postgresql+psycopg``);
* ``extra.connect_timeout`` — how long to wait for the store (default 10 s; a
  duration as every other: ``10``, ``"10"``, ``"10s"``, ``"PT10S"``). An
  operator whose store does not answer in that time falls back (see
  ``on_infeasible``/``default_scale_out``) instead of hanging.

No connection at all (the default ``bellamy_default`` is not defined) means the
embedded default store: SQLite under ``$AIRFLOW_HOME/bellamy/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from airflow_provider_bellamy.exceptions import InvalidInputError

if TYPE_CHECKING:
    from airflow_provider_bellamy.facade import Bellamy

DEFAULT_CONNECT_TIMEOUT_S = 10.0


class BellamyHook(BaseHook):
    """Connects operators, callbacks and listeners to a Bellamy model store.

    :param bellamy_conn_id: the ``bellamy`` connection naming the store; when it is not
        defined the embedded SQLite store under ``$AIRFLOW_HOME/bellamy/`` is used.
    :param connect_timeout_s: overrides the connection's ``connect_timeout`` (a duration,
        read by ``spec.parse_duration``).
    """

    conn_name_attr = "bellamy_conn_id"
    default_conn_name = "bellamy_default"
    conn_type = "bellamy"
    hook_name = "Bellamy model store"

    def __init__(
        self, bellamy_conn_id: str = default_conn_name, *, connect_timeout_s: float | str | None = None
    ) -> None:
        super().__init__()
        self.bellamy_conn_id = bellamy_conn_id
        self._timeout_override = connect_timeout_s
        self._facade: Bellamy | None = None
        self._resolved: tuple[str | None, float] | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": [],
            "relabeling": {"schema": "Database", "host": "Host (PostgreSQL; empty with Store URL)"},
            "placeholders": {
                "host": "db.internal (leave empty to use Store URL or the embedded SQLite store)",
                "schema": "bellamy",
                "port": "5432",
                "login": "bellamy",
                "extra": '{"store_url": "postgresql+psycopg://bellamy@db/bellamy", "connect_timeout": 10}',
            },
        }

    def _connection(self) -> Any | None:
        from airflow.sdk.exceptions import AirflowNotFoundException

        try:
            return self.get_connection(self.bellamy_conn_id)
        except AirflowNotFoundException:
            return None

    def resolve(self) -> tuple[str | None, float]:
        """``(store_url, connect_timeout_s)``; ``store_url`` None means the embedded default store."""
        if self._resolved is not None:
            return self._resolved
        conn = self._connection()
        timeout = DEFAULT_CONNECT_TIMEOUT_S
        url: str | None = None
        if conn is None:
            self.log.info(
                "Connection %r is not defined: using the embedded Bellamy store under $AIRFLOW_HOME/bellamy",
                self.bellamy_conn_id,
            )
        else:
            extra = conn.extra_dejson or {}
            if extra.get("connect_timeout") not in (None, ""):
                timeout = _timeout(
                    extra["connect_timeout"], f"connection {self.bellamy_conn_id!r} connect_timeout"
                )
            url = _store_url(conn, extra, self.bellamy_conn_id)
        if self._timeout_override is not None:
            timeout = _timeout(self._timeout_override, "connect_timeout_s")
        self._resolved = (url, timeout)
        return self._resolved

    @property
    def connect_timeout_s(self) -> float:
        return self.resolve()[1]

    def get_facade(self) -> Bellamy:
        """The ``Bellamy`` façade over this connection's store (created once per hook)."""
        if self._facade is None:
            from airflow_provider_bellamy.facade import Bellamy

            url, timeout = self.resolve()
            self._facade = Bellamy(store_url=url, connect_timeout_s=timeout)
        return self._facade

    def get_conn(self) -> Bellamy:
        return self.get_facade()

    def test_connection(self) -> tuple[bool, str]:
        """Used by the UI's "Test" button: connect and read the store's schema version."""
        try:
            facade = self.get_facade()
            status = facade.schema_status()
            if status.state == "missing":
                # a mistyped path would otherwise test green and read as an empty store
                facade.store.require_existing()
            url, _ = self.resolve()
            return True, f"Bellamy store reachable ({_redact(url) if url else 'embedded SQLite'}): {status}"
        except Exception as exc:
            return False, f"{type(exc).__name__}: {exc}"


def _timeout(value: Any, field: str) -> float:
    """A connect timeout as every other duration is read ("10", "10s", 10, a timedelta)."""
    from airflow_provider_bellamy.spec import parse_duration

    return parse_duration(value, field)


def _store_url(conn: Any, extra: dict[str, Any], conn_id: str) -> str | None:
    """Build the SQLAlchemy URL; the password is only ever taken from the password field."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.engine.url import URL
    from sqlalchemy.exc import ArgumentError

    raw = extra.get("store_url")
    if raw:
        try:
            url = make_url(str(raw))
        except ArgumentError:
            raise InvalidInputError(
                f"connection {conn_id!r} extra.store_url", _redact(str(raw)), "is not a SQLAlchemy URL"
            ) from None
        if conn.password and not url.password:
            url = url.set(password=conn.password)
        return url.render_as_string(hide_password=False)
    if not conn.host:
        return None
    dialect = extra.get("dialect") or "postgresql+psycopg"
    url = URL.create(
        drivername=str(dialect),
        username=conn.login or None,
        password=conn.password or None,
        host=conn.host,
        port=int(conn.port) if conn.port else None,
        database=conn.schema or None,
    )
    return url.render_as_string(hide_password=False)


def _redact(url: str | None) -> str:
    if not url:
        return ""
    try:
        from sqlalchemy.engine import make_url

        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return "<unparseable URL>"
