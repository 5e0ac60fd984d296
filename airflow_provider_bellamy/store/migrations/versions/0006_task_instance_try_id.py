"""Observed runs and decisions keep Airflow's id of the task instance try (``ti_id``).

Revision ID: 0006_task_instance_try_id
Revises: 0005_runs_source_index
Create Date: 2026-11-25

A DAG run deleted and created again under the same run_id (a scheduled run deleted in the UI and
run again by the scheduler, ``airflow dags trigger --run-id X`` after deleting X) starts again at
try 1. Keyed by (dag_id, task_id, run_id, map_index, try_number) alone, its runtime hit the old
run's row and was dropped as a duplicate of it. Airflow gives each try a UUID of its own (``ti.id``;
new on every try, kept across deferral and sensor reschedules), so a row that has one is that try:
``uq_runs_ti_id``. Rows without one (recorded before this revision, or by a caller that does not
know it) keep the old key, ``uq_runs_airflow_try``, now over those rows only. Nothing is inferred
for rows stored before: their ti_id stays NULL.

Downgrade refuses a store in which two observed runs share the old key (a re-created run recorded
after the upgrade): the old unique index cannot hold both, and dropping either would lose a run.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006_task_instance_try_id"
down_revision: str | None = "0005_runs_source_index"
branch_labels = None
depends_on = None

_TRY_KEY = ["dag_id", "task_id", "run_id", "map_index", "try_number"]
# As in schema.py (TI_ID_WHERE, TRY_KEY_WHERE); written out: a revision must not change when the
# code's models do.
_TI_ID_WHERE = "ti_id IS NOT NULL"
_TRY_KEY_WHERE = "source = 'observed' AND ti_id IS NULL"
_OLD_TRY_KEY_WHERE = "source = 'observed'"


def _partial_index(name: str, columns: list[str], where: str) -> None:
    op.create_index(
        name,
        "runs",
        columns,
        unique=True,
        sqlite_where=sa.text(where),
        postgresql_where=sa.text(where),
    )


def upgrade() -> None:
    # Columns added in place, no batch: SQLite's copy of ``runs`` would drop a table that
    # decisions.run_row_id refers to. (Only observed runs carry a ti_id: records.prepare_run.)
    op.add_column("runs", sa.Column("ti_id", sa.String(36)))
    op.add_column("decisions", sa.Column("ti_id", sa.String(36)))
    op.drop_index("uq_runs_airflow_try", table_name="runs")
    _partial_index("uq_runs_ti_id", ["ti_id"], _TI_ID_WHERE)
    _partial_index("uq_runs_airflow_try", _TRY_KEY, _TRY_KEY_WHERE)


def downgrade() -> None:
    shared = (
        op.get_bind()
        .execute(
            sa.text(
                "SELECT dag_id, task_id, run_id, map_index, try_number, count(*) AS n FROM runs"
                " WHERE source = 'observed' GROUP BY dag_id, task_id, run_id, map_index, try_number"
                " HAVING count(*) > 1 ORDER BY n DESC, dag_id, task_id, run_id LIMIT 1"
            )
        )
        .first()
    )
    if shared is not None:
        raise RuntimeError(
            f"cannot downgrade below 0006_task_instance_try_id: {shared.n} observed runs share the try "
            f"key dag_id={shared.dag_id!r}, task_id={shared.task_id!r}, run_id={shared.run_id!r}, "
            f"map_index={shared.map_index}, try_number={shared.try_number} (a DAG run deleted and "
            "created again under the same run_id); the older schema keeps one run per key: export "
            "the runs (`bellamy history export`), then delete all but one run of each such key"
        )
    op.drop_index("uq_runs_airflow_try", table_name="runs")
    op.drop_index("uq_runs_ti_id", table_name="runs")
    # ALTER TABLE ... DROP COLUMN, in place on SQLite too (3.35 and later), as upgrade added them
    op.drop_column("decisions", "ti_id")
    op.drop_column("runs", "ti_id")
    _partial_index("uq_runs_airflow_try", _TRY_KEY, _OLD_TRY_KEY_WHERE)
