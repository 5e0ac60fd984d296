"""Indexes for a store of a million runs: the launch path, training's window, retention.

Revision ID: 0003_scale_indexes
Revises: 0001_initial
Create Date: 2026-11-22

* ``ix_runs_context`` gains ``scale_out``: the newest runs per scale-out of one context (what
  fine-tuning reads) and of every context of a job type (training's window) come from the index.
* ``ix_runs_decision``: pruning decisions clears ``runs.decision_id``.
* ``ix_decisions_created``: ``bellamy decisions prune --older-than``.
* ``ix_decisions_model`` / ``ix_decisions_run``: deleting a model version (or a run) finds the
  decisions that point at it without a scan of all of them.
* ``ix_model_parent``: pruning a general version finds its fine-tuned copies.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0003_scale_indexes"
down_revision: str | None = "0002_run_timing"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_runs_context", table_name="runs")
    op.create_index(
        "ix_runs_context", "runs", ["job_type", "context_fingerprint", "status", "scale_out", "id"]
    )
    op.create_index(
        "ix_runs_decision",
        "runs",
        ["decision_id"],
        sqlite_where=sa.text("decision_id IS NOT NULL"),
        postgresql_where=sa.text("decision_id IS NOT NULL"),
    )
    op.create_index("ix_model_parent", "model_versions", ["parent_id"])
    op.create_index("ix_decisions_created", "decisions", ["created_at"])
    op.create_index("ix_decisions_model", "decisions", ["model_version_id"])
    op.create_index("ix_decisions_run", "decisions", ["run_row_id"])


def downgrade() -> None:
    op.drop_index("ix_decisions_run", table_name="decisions")
    op.drop_index("ix_decisions_model", table_name="decisions")
    op.drop_index("ix_decisions_created", table_name="decisions")
    op.drop_index("ix_model_parent", table_name="model_versions")
    op.drop_index("ix_runs_decision", table_name="runs")
    op.drop_index("ix_runs_context", table_name="runs")
    op.create_index("ix_runs_context", "runs", ["job_type", "context_fingerprint", "status", "id"])
