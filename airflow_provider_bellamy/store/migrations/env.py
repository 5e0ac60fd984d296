"""Alembic environment of the Bellamy store.

``Store.upgrade()`` hands over an open connection in ``config.attributes["connection"]``;
the ``alembic`` command line instead gives ``-x url=...`` (or sqlalchemy.url in the ini).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context

from airflow_provider_bellamy.store.schema import Base
from airflow_provider_bellamy.store.store import VERSION_TABLE

config = context.config
target_metadata = Base.metadata


def _run(connection: sa.Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        # SQLite cannot ALTER most things; batch mode copies the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        version_table=VERSION_TABLE,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    if not url:
        raise SystemExit("give the store URL: alembic -x url=sqlite:///path/bellamy.db ...")
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        _run(conn)


def run_migrations_offline() -> None:
    url = context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url")
    context.configure(
        url=url, target_metadata=target_metadata, literal_binds=True, version_table=VERSION_TABLE
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
