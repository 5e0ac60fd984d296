"""What a decision claimed, beyond its reason text: the confidence asked for (``confidence`` keeps
what the band honours, lower where the calibration capped it), where the model extrapolated for the
context (the signals, with their sentence) and what the widened band was calibrated on.

Revision ID: 0004_decision_claims
Revises: 0003_scale_indexes
Create Date: 2026-11-22

Decisions made before this revision keep NULL in the new columns: their claims are in the reason
text only, and nothing is inferred from it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004_decision_claims"
down_revision: str | None = "0003_scale_indexes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # batch mode: SQLite cannot add a CHECK constraint to an existing table in place.
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("requested_confidence", sa.Float()))
        batch.add_column(sa.Column("extrapolation", sa.JSON()))
        batch.add_column(sa.Column("band_note", sa.Text()))
        batch.create_check_constraint(
            "ck_decisions_requested_confidence",
            "requested_confidence IS NULL OR (requested_confidence > 0 AND requested_confidence < 1)",
        )


def downgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.drop_constraint("ck_decisions_requested_confidence", type_="check")
        batch.drop_column("band_note")
        batch.drop_column("extrapolation")
        batch.drop_column("requested_confidence")
