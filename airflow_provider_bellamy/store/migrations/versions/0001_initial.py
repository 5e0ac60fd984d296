"""Initial schema: runs, model versions, decisions.

Revision ID: 0001_initial
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001_initial"
down_revision: str | None = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_type", sa.String(200), nullable=False),
        sa.Column("framework", sa.String(50), nullable=False),
        sa.Column("scale_out", sa.Integer(), nullable=False),
        sa.Column("runtime_s", sa.Float(), nullable=False),
        sa.Column("context", sa.JSON(), nullable=False),
        sa.Column("context_fingerprint", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("dataset", sa.String(200)),
        sa.Column("dag_id", sa.String(250)),
        sa.Column("task_id", sa.String(250)),
        sa.Column("run_id", sa.String(250)),
        sa.Column("map_index", sa.Integer()),
        sa.Column("try_number", sa.Integer()),
        sa.Column("started_at", sa.DateTime()),
        sa.Column("ended_at", sa.DateTime()),
        sa.Column("external_id", sa.String(250)),
        sa.Column("decision_id", sa.Integer()),
        sa.Column("recorded_at", sa.DateTime(), nullable=False),
        sa.CheckConstraint("scale_out >= 1", name="ck_runs_scale_out"),
        sa.CheckConstraint("runtime_s > 0", name="ck_runs_runtime"),
        sa.CheckConstraint("status IN ('success', 'failed')", name="ck_runs_status"),
        sa.CheckConstraint("source IN ('trace', 'observed')", name="ck_runs_source"),
        sa.CheckConstraint(
            "source <> 'observed' OR (dag_id IS NOT NULL AND task_id IS NOT NULL AND run_id IS NOT NULL"
            " AND map_index IS NOT NULL AND try_number IS NOT NULL)",
            name="ck_runs_observed_provenance",
        ),
    )
    op.create_index(
        "uq_runs_airflow_try",
        "runs",
        ["dag_id", "task_id", "run_id", "map_index", "try_number"],
        unique=True,
        sqlite_where=sa.text("source = 'observed'"),
        postgresql_where=sa.text("source = 'observed'"),
    )
    op.create_index("ix_runs_training", "runs", ["job_type", "status", "id"])
    op.create_index("ix_runs_context", "runs", ["job_type", "context_fingerprint", "status", "id"])
    op.create_index("ix_runs_dataset", "runs", ["source", "dataset"])
    op.create_index("ix_runs_external", "runs", ["framework", "external_id"])
    op.create_index("ix_runs_airflow_task", "runs", ["dag_id", "task_id", "id"])

    op.create_table(
        "model_versions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_type", sa.String(200), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("context_fingerprint", sa.String(32)),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("parent_id", sa.Integer(), sa.ForeignKey("model_versions.id")),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("activated_at", sa.DateTime()),
        sa.Column("train_rows", sa.Integer(), nullable=False),
        sa.Column("newest_run_id", sa.Integer()),
        sa.Column("metrics", sa.JSON(), nullable=False),
        sa.Column("weights_sha256", sa.String(64), nullable=False),
        sa.Column("weights_size", sa.Integer(), nullable=False),
        sa.Column("weights", sa.LargeBinary()),
        sa.Column("weights_path", sa.String(1000)),
        sa.CheckConstraint("scope IN ('general', 'context')", name="ck_model_scope"),
        sa.CheckConstraint("status IN ('candidate', 'active', 'retired')", name="ck_model_status"),
        sa.CheckConstraint(
            "(scope = 'general' AND context_fingerprint IS NULL)"
            " OR (scope = 'context' AND context_fingerprint IS NOT NULL)",
            name="ck_model_fingerprint",
        ),
        sa.CheckConstraint("weights IS NOT NULL OR weights_path IS NOT NULL", name="ck_model_weights"),
        sa.UniqueConstraint("job_type", "scope", "context_fingerprint", "version", name="uq_model_version"),
    )
    op.create_index(
        "uq_model_active_general",
        "model_versions",
        ["job_type"],
        unique=True,
        sqlite_where=sa.text("status = 'active' AND scope = 'general'"),
        postgresql_where=sa.text("status = 'active' AND scope = 'general'"),
    )
    op.create_index(
        "uq_model_active_context",
        "model_versions",
        ["job_type", "context_fingerprint"],
        unique=True,
        sqlite_where=sa.text("status = 'active' AND scope = 'context'"),
        postgresql_where=sa.text("status = 'active' AND scope = 'context'"),
    )
    op.create_index("ix_model_lookup", "model_versions", ["job_type", "scope", "status"])

    op.create_table(
        "decisions",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_type", sa.String(200), nullable=False),
        sa.Column("framework", sa.String(50)),
        sa.Column("context", sa.JSON(), nullable=False),
        sa.Column("context_fingerprint", sa.String(32), nullable=False),
        sa.Column("candidates", sa.JSON(), nullable=False),
        sa.Column("target_s", sa.Float()),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("objective", sa.String(32), nullable=False),
        sa.Column("price_per_node_hour", sa.Float()),
        sa.Column("chosen_scale_out", sa.Integer(), nullable=False),
        sa.Column("feasible", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("shortfall_s", sa.Float()),
        sa.Column("model_version", sa.String(300)),
        sa.Column("model_version_id", sa.Integer(), sa.ForeignKey("model_versions.id", ondelete="SET NULL")),
        sa.Column("fallback_reason", sa.Text()),
        sa.Column("dag_id", sa.String(250)),
        sa.Column("task_id", sa.String(250)),
        sa.Column("run_id", sa.String(250)),
        sa.Column("map_index", sa.Integer()),
        sa.Column("try_number", sa.Integer()),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("run_row_id", sa.Integer(), sa.ForeignKey("runs.id")),
    )
    op.create_index("ix_decisions_job", "decisions", ["job_type", "id"])
    op.create_index("ix_decisions_airflow", "decisions", ["dag_id", "task_id", "run_id"])


def downgrade() -> None:
    op.drop_table("decisions")
    op.drop_table("model_versions")
    op.drop_table("runs")
