"""Tables of the model store (SQLAlchemy 2 declarative ORM).

The Alembic migrations under ``migrations/versions`` are the source of truth for
the database; these classes must describe the same schema (a test compares them).
Kept free of torch and pandas: the Airflow adapters import the store while running tasks.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import DeclarativeBase, Mapped, deferred, mapped_column

RUN_STATUSES: tuple[str, ...] = ("success", "failed")
RUN_SOURCES: tuple[str, ...] = ("trace", "observed")
MODEL_SCOPES: tuple[str, ...] = ("general", "context")
MODEL_STATUSES: tuple[str, ...] = ("candidate", "active", "retired")
# The rows each of the runs' two unique keys of an Airflow try covers (revision 0006); an insert
# names the same predicate to find its index (ON CONFLICT).
TI_ID_WHERE = "ti_id IS NOT NULL"
TRY_KEY_WHERE = "source = 'observed' AND ti_id IS NULL"


class UTCDateTime(sa.types.TypeDecorator[dt.datetime]):
    """Timestamps stored as naive UTC and returned timezone-aware.

    SQLite has no time zones; storing UTC everywhere keeps SQLite and PostgreSQL
    rows comparable and sortable.
    """

    impl = sa.DateTime
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: sa.Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value
        return value.astimezone(dt.timezone.utc).replace(tzinfo=None)

    def process_result_value(self, value: dt.datetime | None, dialect: sa.Dialect) -> dt.datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=dt.timezone.utc)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


class Base(DeclarativeBase):
    pass


class Run(Base):
    """One execution of a job: the canonical run record plus where it came from."""

    __tablename__ = "runs"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    job_type: Mapped[str] = mapped_column(sa.String(200), nullable=False)
    framework: Mapped[str] = mapped_column(sa.String(50), nullable=False)
    scale_out: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    runtime_s: Mapped[float] = mapped_column(sa.Float, nullable=False)
    context: Mapped[dict[str, Any]] = mapped_column(sa.JSON, nullable=False)
    context_fingerprint: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    status: Mapped[str] = mapped_column(sa.String(16), nullable=False, default="success")
    source: Mapped[str] = mapped_column(sa.String(16), nullable=False, default="trace")
    dataset: Mapped[str | None] = mapped_column(sa.String(200))
    dag_id: Mapped[str | None] = mapped_column(sa.String(250))
    task_id: Mapped[str | None] = mapped_column(sa.String(250))
    run_id: Mapped[str | None] = mapped_column(sa.String(250))
    map_index: Mapped[int | None] = mapped_column(sa.Integer)
    try_number: Mapped[int | None] = mapped_column(sa.Integer)
    # Airflow's id of the task instance try (a UUID, new each try; revision 0006): a DAG run deleted
    # and created again under the same run_id starts again at try 1, and only this tells its tries
    # from the old run's. NULL: recorded before 0006, or by a caller that does not know it.
    ti_id: Mapped[str | None] = mapped_column(sa.String(36))
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    ended_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    external_id: Mapped[str | None] = mapped_column(sa.String(250))
    decision_id: Mapped[int | None] = mapped_column(sa.Integer)
    recorded_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), nullable=False, default=utcnow)
    # runtime_s is the time the job ran at scale_out (the executors/slots it was granted);
    # queue_s is the time before, waiting for them, which the model must not learn as runtime.
    queue_s: Mapped[float | None] = mapped_column(sa.Float)
    # What sizing asked for, when the cluster granted something else (scale_out is what it got).
    requested_scale_out: Mapped[int | None] = mapped_column(sa.Integer)
    # Set: the run is kept (audit, export) but never trained on, for this reason.
    excluded_reason: Mapped[str | None] = mapped_column(sa.Text)

    __table_args__ = (
        sa.CheckConstraint("scale_out >= 1", name="ck_runs_scale_out"),
        sa.CheckConstraint("runtime_s > 0", name="ck_runs_runtime"),
        sa.CheckConstraint("status IN ('success', 'failed')", name="ck_runs_status"),
        sa.CheckConstraint("source IN ('trace', 'observed')", name="ck_runs_source"),
        sa.CheckConstraint("queue_s IS NULL OR queue_s >= 0", name="ck_runs_queue"),
        sa.CheckConstraint(
            "requested_scale_out IS NULL OR requested_scale_out >= 1", name="ck_runs_requested"
        ),
        # Observed runs always carry their Airflow try; the partial index below relies on it.
        sa.CheckConstraint(
            "source <> 'observed' OR (dag_id IS NOT NULL AND task_id IS NOT NULL AND run_id IS NOT NULL"
            " AND map_index IS NOT NULL AND try_number IS NOT NULL)",
            name="ck_runs_observed_provenance",
        ),
        # One row per Airflow task try: recording the same try twice is a no-op. A try is its
        # ti_id where the row has one; rows without (recorded before 0006, or by a caller that
        # does not know it) keep the provenance key. Partial, so trace rows (no provenance,
        # genuine repetitions) are never merged.
        sa.Index(
            "uq_runs_ti_id",
            "ti_id",
            unique=True,
            sqlite_where=sa.text(TI_ID_WHERE),
            postgresql_where=sa.text(TI_ID_WHERE),
        ),
        sa.Index(
            "uq_runs_airflow_try",
            "dag_id",
            "task_id",
            "run_id",
            "map_index",
            "try_number",
            unique=True,
            sqlite_where=sa.text(TRY_KEY_WHERE),
            postgresql_where=sa.text(TRY_KEY_WHERE),
        ),
        sa.Index("ix_runs_training", "job_type", "status", "id"),
        # Covers the launch path's look-ups of one context (its count and newest run, its newest
        # runs per scale-out) and training's window of a job type's newest runs per context and
        # scale-out, without reading table rows.
        sa.Index("ix_runs_context", "job_type", "context_fingerprint", "status", "scale_out", "id"),
        # Pruning a decision clears the runs that point at it (partial: most runs point nowhere).
        sa.Index(
            "ix_runs_decision",
            "decision_id",
            sqlite_where=sa.text("decision_id IS NOT NULL"),
            postgresql_where=sa.text("decision_id IS NOT NULL"),
        ),
        sa.Index("ix_runs_dataset", "source", "dataset"),
        # The newest runs of one source (list_runs(source="observed")): a walk, not a sort.
        sa.Index("ix_runs_source", "source", "id"),
        # Operators look up a cluster job (Spark app id, Flink job id) and a task's past runtimes.
        sa.Index("ix_runs_external", "framework", "external_id"),
        sa.Index("ix_runs_airflow_task", "dag_id", "task_id", "id"),
    )

    def to_dict(self) -> dict[str, Any]:
        out = {c.key: getattr(self, c.key) for c in sa.inspect(Run).column_attrs}
        for key in ("started_at", "ended_at", "recorded_at"):
            if out[key] is not None:
                out[key] = out[key].isoformat()
        return out


class ModelVersion(Base):
    """A stored model: a general one per job type, or a context's fine-tuned copy."""

    __tablename__ = "model_versions"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    job_type: Mapped[str] = mapped_column(sa.String(200), nullable=False)
    scope: Mapped[str] = mapped_column(sa.String(16), nullable=False)
    context_fingerprint: Mapped[str | None] = mapped_column(sa.String(32))
    version: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    parent_id: Mapped[int | None] = mapped_column(sa.Integer, sa.ForeignKey("model_versions.id"))
    kind: Mapped[str] = mapped_column(sa.String(32), nullable=False, default="bellamy")
    status: Mapped[str] = mapped_column(sa.String(16), nullable=False, default="candidate")
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), nullable=False, default=utcnow)
    activated_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime())
    train_rows: Mapped[int] = mapped_column(sa.Integer, nullable=False, default=0)
    newest_run_id: Mapped[int | None] = mapped_column(sa.Integer)
    metrics: Mapped[dict[str, Any]] = mapped_column(sa.JSON, nullable=False, default=dict)
    weights_sha256: Mapped[str] = mapped_column(sa.String(64), nullable=False)
    weights_size: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    # Small models live in the row; big ones in a file next to the store (weights_path).
    weights: Mapped[bytes | None] = deferred(mapped_column(sa.LargeBinary))
    weights_path: Mapped[str | None] = mapped_column(sa.String(1000))

    __table_args__ = (
        sa.CheckConstraint("scope IN ('general', 'context')", name="ck_model_scope"),
        sa.CheckConstraint("status IN ('candidate', 'active', 'retired')", name="ck_model_status"),
        sa.CheckConstraint(
            "(scope = 'general' AND context_fingerprint IS NULL)"
            " OR (scope = 'context' AND context_fingerprint IS NOT NULL)",
            name="ck_model_fingerprint",
        ),
        sa.CheckConstraint("weights IS NOT NULL OR weights_path IS NOT NULL", name="ck_model_weights"),
        sa.UniqueConstraint("job_type", "scope", "context_fingerprint", "version", name="uq_model_version"),
        # The database itself guarantees "exactly one active general version per job type"
        # (and one active fine-tuned copy per context), whatever a buggy caller does.
        sa.Index(
            "uq_model_active_general",
            "job_type",
            unique=True,
            sqlite_where=sa.text("status = 'active' AND scope = 'general'"),
            postgresql_where=sa.text("status = 'active' AND scope = 'general'"),
        ),
        sa.Index(
            "uq_model_active_context",
            "job_type",
            "context_fingerprint",
            unique=True,
            sqlite_where=sa.text("status = 'active' AND scope = 'context'"),
            postgresql_where=sa.text("status = 'active' AND scope = 'context'"),
        ),
        sa.Index("ix_model_lookup", "job_type", "scope", "status"),
        sa.Index("ix_model_parent", "parent_id"),
    )

    @property
    def label(self) -> str:
        if self.scope == "general":
            return f"{self.job_type}/v{self.version}"
        return f"{self.job_type}/ctx-{self.context_fingerprint}/v{self.version}"

    def to_dict(self) -> dict[str, Any]:
        keys = [c.key for c in sa.inspect(ModelVersion).column_attrs if c.key != "weights"]
        out = {k: getattr(self, k) for k in keys}
        for key in ("created_at", "activated_at"):
            if out[key] is not None:
                out[key] = out[key].isoformat()
        out["label"] = self.label
        return out


class Decision(Base):
    """A sizing decision as it was made: inputs, answer, model, and the run it led to."""

    __tablename__ = "decisions"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    job_type: Mapped[str] = mapped_column(sa.String(200), nullable=False)
    framework: Mapped[str | None] = mapped_column(sa.String(50))
    context: Mapped[dict[str, Any]] = mapped_column(sa.JSON, nullable=False)
    context_fingerprint: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    candidates: Mapped[list[dict[str, Any]]] = mapped_column(sa.JSON, nullable=False)
    target_s: Mapped[float | None] = mapped_column(sa.Float)
    confidence: Mapped[float] = mapped_column(sa.Float, nullable=False)
    objective: Mapped[str] = mapped_column(sa.String(32), nullable=False)
    price_per_node_hour: Mapped[float | None] = mapped_column(sa.Float)
    chosen_scale_out: Mapped[int] = mapped_column(sa.Integer, nullable=False)
    feasible: Mapped[bool] = mapped_column(sa.Boolean, nullable=False)
    reason: Mapped[str] = mapped_column(sa.Text, nullable=False)
    shortfall_s: Mapped[float | None] = mapped_column(sa.Float)
    model_version: Mapped[str | None] = mapped_column(sa.String(300))
    # Old fine-tuned copies are pruned; the decision keeps the model's label in model_version.
    model_version_id: Mapped[int | None] = mapped_column(
        sa.Integer, sa.ForeignKey("model_versions.id", ondelete="SET NULL")
    )
    fallback_reason: Mapped[str | None] = mapped_column(sa.Text)
    dag_id: Mapped[str | None] = mapped_column(sa.String(250))
    task_id: Mapped[str | None] = mapped_column(sa.String(250))
    run_id: Mapped[str | None] = mapped_column(sa.String(250))
    map_index: Mapped[int | None] = mapped_column(sa.Integer)
    try_number: Mapped[int | None] = mapped_column(sa.Integer)
    ti_id: Mapped[str | None] = mapped_column(sa.String(36))  # see Run.ti_id (revision 0006)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime(), nullable=False, default=utcnow)
    run_row_id: Mapped[int | None] = mapped_column(sa.Integer, sa.ForeignKey("runs.id"))
    # What the decision claimed besides its reason (revision 0004; NULL in older rows): the
    # confidence asked for (``confidence`` is what the band honours, lower where it was capped),
    # where the model extrapolated for the context (model/extrapolation.Extrapolation.to_dict())
    # and what the widened band was calibrated on.
    requested_confidence: Mapped[float | None] = mapped_column(sa.Float)
    extrapolation: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON(none_as_null=True))
    band_note: Mapped[str | None] = mapped_column(sa.Text)

    __table_args__ = (
        sa.CheckConstraint(
            "requested_confidence IS NULL OR (requested_confidence > 0 AND requested_confidence < 1)",
            name="ck_decisions_requested_confidence",
        ),
        sa.Index("ix_decisions_job", "job_type", "id"),
        sa.Index("ix_decisions_airflow", "dag_id", "task_id", "run_id"),
        # Retention (`bellamy decisions prune --older-than`) deletes by age.
        sa.Index("ix_decisions_created", "created_at"),
        # Deleting a model version clears the decisions that name it (fine-tuning prunes old
        # copies on the launch path): without these a scan of every decision.
        sa.Index("ix_decisions_model", "model_version_id"),
        sa.Index("ix_decisions_run", "run_row_id"),
    )

    def to_dict(self) -> dict[str, Any]:
        out = {c.key: getattr(self, c.key) for c in sa.inspect(Decision).column_attrs}
        out["created_at"] = self.created_at.isoformat() if self.created_at else None
        return out
