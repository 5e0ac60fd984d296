"""The newest runs of one source (``list_runs(source="observed")``) read from an index.

Revision ID: 0005_runs_source_index
Revises: 0004_decision_claims
Create Date: 2026-11-24

``ix_runs_source`` (source, id): the newest observed (or trace) runs are a walk down it. Before,
SQLite found them in ``ix_runs_dataset`` (source, dataset) and sorted every run of the source for
the first few: 3.8 s on a store of 3·10^5 observed runs.
"""

from __future__ import annotations

from alembic import op

revision: str = "0005_runs_source_index"
down_revision: str | None = "0004_decision_claims"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_runs_source", "runs", ["source", "id"])


def downgrade() -> None:
    op.drop_index("ix_runs_source", table_name="runs")
