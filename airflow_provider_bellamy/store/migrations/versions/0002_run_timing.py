"""Run timing: the time a job waited for its executors/slots, the size it asked for, and why a
run is kept out of training.

Revision ID: 0002_run_timing
Revises: 0001_initial
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002_run_timing"
down_revision: str | None = "0001_initial"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch mode: SQLite cannot add a CHECK constraint to an existing table in place.
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("queue_s", sa.Float()))
        batch.add_column(sa.Column("requested_scale_out", sa.Integer()))
        batch.add_column(sa.Column("excluded_reason", sa.Text()))
        batch.create_check_constraint("ck_runs_queue", "queue_s IS NULL OR queue_s >= 0")
        batch.create_check_constraint(
            "ck_runs_requested", "requested_scale_out IS NULL OR requested_scale_out >= 1"
        )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint("ck_runs_requested", type_="check")
        batch.drop_constraint("ck_runs_queue", type_="check")
        batch.drop_column("excluded_reason")
        batch.drop_column("requested_scale_out")
        batch.drop_column("queue_s")
