"""Repositories: the only code that writes SQL for runs, model versions and decisions.

Each repository wraps a :class:`~sqlalchemy.orm.Session` that the caller opened with
:meth:`Store.read` or :meth:`Store.write`; none of them commits.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from airflow_provider_bellamy.exceptions import InvalidInputError
from airflow_provider_bellamy.records import StoredKinds, property_kinds
from airflow_provider_bellamy.store.schema import (
    RUN_STATUSES,
    TI_ID_WHERE,
    TRY_KEY_WHERE,
    Decision,
    ModelVersion,
    Run,
    utcnow,
)

# An Airflow try without its ti_id (a row recorded before revision 0006, or by a caller that does
# not know it): its provenance key.
TRY_KEY: tuple[str, ...] = ("dag_id", "task_id", "run_id", "map_index", "try_number")
_RUN_COLUMNS = frozenset(c.key for c in Run.__table__.columns) - {"id"}


def _insert(session: Session, table: Any) -> Any:
    name = session.get_bind().dialect.name
    if name == "postgresql":
        return postgresql.insert(table)
    if name == "sqlite":
        return sqlite.insert(table)
    return sa.insert(table)


# A recursive walk over the distinct values of an index column ("skip scan"): each step seeks
# the next value, so the statements below cost a seek per context or scale-out, not a read of
# every run. Plain SQL that SQLite and PostgreSQL both run.
_CONTEXTS_OF_JOB_TYPE = sa.text(
    """
    WITH RECURSIVE fps(fp) AS (
        SELECT min(context_fingerprint) FROM runs WHERE job_type = :job_type
        UNION ALL
        SELECT (SELECT min(context_fingerprint) FROM runs
                WHERE job_type = :job_type AND context_fingerprint > fps.fp)
        FROM fps WHERE fps.fp IS NOT NULL
    )
    SELECT (SELECT context FROM runs
            WHERE job_type = :job_type AND context_fingerprint = fps.fp LIMIT 1) AS context
    FROM fps WHERE fps.fp IS NOT NULL
    """
).columns(context=sa.JSON)

# The store's job types, a seek each in ix_runs_context (job type first): where DISTINCT reads
# every run's index entry (a year of a large deployment: millions, on an unknown job type's launch).
_JOB_TYPES = sa.text(
    """
    WITH RECURSIVE jobs(job_type) AS (
        SELECT min(job_type) FROM runs
        UNION ALL
        SELECT (SELECT min(job_type) FROM runs WHERE job_type > jobs.job_type)
        FROM jobs WHERE jobs.job_type IS NOT NULL
    )
    SELECT job_type FROM jobs WHERE job_type IS NOT NULL
    """
).columns(sa.column("job_type", sa.String))

# The scale-outs one context ran at (successful runs), a seek each.
_CONTEXT_SCALE_OUTS = """
    WITH RECURSIVE scale(n) AS (
        SELECT min(scale_out) FROM runs
        WHERE job_type = :job_type AND context_fingerprint = :fingerprint AND status = 'success'
        UNION ALL
        SELECT (SELECT min(scale_out) FROM runs
                WHERE job_type = :job_type AND context_fingerprint = :fingerprint
                  AND status = 'success' AND scale_out > scale.n)
        FROM scale WHERE scale.n IS NOT NULL
    )
"""

_NEWEST_TRAINING_RUN = sa.text(
    _CONTEXT_SCALE_OUTS
    + """
    SELECT max((SELECT max(id) FROM runs
                WHERE job_type = :job_type AND context_fingerprint = :fingerprint
                  AND status = 'success' AND scale_out = scale.n AND excluded_reason IS NULL))
    FROM scale WHERE scale.n IS NOT NULL
    """
).columns(sa.column("newest", sa.Integer))

_CONTEXT_SCALE_OUT_LIST = sa.text(_CONTEXT_SCALE_OUTS + "SELECT n FROM scale WHERE n IS NOT NULL").columns(
    sa.column("n", sa.Integer)
)


class RunRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    # ---------------------------------------------------------------- writes

    def add(self, values: Mapping[str, Any]) -> tuple[int, bool]:
        """Insert one run; returns (row id, created). An Airflow try already stored is not added again.

        A try is its ``ti_id`` (Airflow's id of the task instance try) where the run has one: a DAG
        run deleted and created again under the same run_id starts again at try 1, its own run. A
        run without one is the try of its provenance key (``TRY_KEY``), stored with or without a
        ti_id."""
        row = self._row(values)
        if row["source"] != "observed":
            new_id = self.session.execute(sa.insert(Run).values(**row).returning(Run.id)).scalar_one()
            return int(new_id), True
        if row.get("ti_id") is None:
            # the try as a caller that knows its ti_id recorded it, if one did (found newest first
            # in ix_runs_airflow_task: a step or two); not under the insert's lock, a race only
            # between such callers and others for the same try
            existing = self.find_try(*(row[k] for k in TRY_KEY))
            if existing is not None:
                return existing.id, False
            index_elements, where = list(TRY_KEY), TRY_KEY_WHERE
        else:
            index_elements, where = ["ti_id"], TI_ID_WHERE
        stmt = (
            _insert(self.session, Run)
            .values(**row)
            .on_conflict_do_nothing(index_elements=index_elements, index_where=sa.text(where))
            .returning(Run.id)
        )
        new_id = self.session.execute(stmt).scalar_one_or_none()
        if new_id is not None:
            return int(new_id), True
        existing = (
            self.find_try(*(row[k] for k in TRY_KEY))
            if row.get("ti_id") is None
            else self.find_ti(row["ti_id"])
        )
        if existing is None:  # pragma: no cover - the conflicting row cannot vanish inside the transaction
            raise RuntimeError("run conflicted with a stored try that cannot be found")
        return existing.id, False

    def add_many(self, rows: Sequence[Mapping[str, Any]]) -> list[tuple[int, bool]]:
        """Insert many runs in order; trace rows go in one multi-row statement."""
        prepared = [self._row(r) for r in rows]
        out: list[tuple[int, bool] | None] = [None] * len(prepared)
        plain = [i for i, r in enumerate(prepared) if r["source"] != "observed"]
        if plain:
            ids = self.session.scalars(
                sa.insert(Run).returning(Run.id, sort_by_parameter_order=True),
                [prepared[i] for i in plain],
            ).all()
            for i, new_id in zip(plain, ids, strict=True):
                out[i] = (int(new_id), True)
        for i, r in enumerate(prepared):
            if r["source"] == "observed":
                out[i] = self.add(r)
        return [o for o in out if o is not None]

    @staticmethod
    def _row(values: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(values) - _RUN_COLUMNS
        if unknown:
            raise InvalidInputError("run", sorted(unknown), "unknown run column(s)")
        row = dict(values)
        row.setdefault("status", "success")
        row.setdefault("source", "trace")
        row.setdefault("recorded_at", utcnow())
        if row["source"] == "observed":
            row.setdefault("map_index", -1)
            row.setdefault("try_number", 1)
        return row

    # ----------------------------------------------------------------- reads

    def get(self, run_row_id: int) -> Run | None:
        return self.session.get(Run, run_row_id)

    def find_try(self, dag_id: str, task_id: str, run_id: str, map_index: int, try_number: int) -> Run | None:
        """The observed run of a provenance key; of several (a DAG run deleted and created again
        under its run_id: each incarnation's try has its own ti_id), the newest."""
        return self.session.scalars(
            sa.select(Run)
            .where(
                Run.source == "observed",
                Run.dag_id == dag_id,
                Run.task_id == task_id,
                Run.run_id == run_id,
                Run.map_index == map_index,
                Run.try_number == try_number,
            )
            .order_by(Run.id.desc())
            .limit(1)
        ).first()

    def find_ti(self, ti_id: str) -> Run | None:
        """The run of one Airflow task instance try, by its id."""
        return self.session.scalars(sa.select(Run).where(Run.ti_id == ti_id)).one_or_none()

    def id_of_job(self, framework: str, external_id: str) -> int | None:
        """The row of a cluster job (any Airflow try): a job that a later try reattached to is
        recorded once, not again under the new try number."""
        stmt = sa.select(Run.id).where(Run.framework == framework, Run.external_id == external_id).limit(1)
        row = self.session.scalars(stmt).first()
        return int(row) if row is not None else None

    def task_runtimes(self, dag_id: str, task_id: str, *, limit: int) -> list[float]:
        """An Airflow task's last ``limit`` successful runtimes, newest first."""
        stmt = (
            sa.select(Run.runtime_s)
            .where(Run.dag_id == dag_id, Run.task_id == task_id, Run.status == "success")
            .order_by(Run.id.desc())
            .limit(limit)
        )
        return [float(v) for v in self.session.scalars(stmt)]

    def list(
        self,
        *,
        job_type: str | None = None,
        status: str | None = None,
        source: str | None = None,
        dataset: str | None = None,
        fingerprint: str | None = None,
        limit: int | None = None,
        newest_first: bool = True,
    ) -> list[Run]:
        if job_type is not None and status is None and fingerprint is None and limit is not None:
            # A job type's newest runs (`history list --job-type`): the newest of each status, a
            # walk down ix_runs_training (job type, status, id) each, merged; in one statement
            # the database sorts every run of the job type for the first few.
            found = [
                run
                for each in RUN_STATUSES
                for run in self.list(
                    job_type=job_type, status=each, source=source, dataset=dataset, limit=limit,
                    newest_first=newest_first,
                )
            ]  # fmt: skip
            return sorted(found, key=lambda run: run.id, reverse=newest_first)[:limit]
        stmt = self._filtered(sa.select(Run), job_type, status, source, dataset)
        if fingerprint is not None:  # one context's: found in ix_runs_context
            stmt = stmt.where(Run.context_fingerprint == fingerprint)
        stmt = stmt.order_by(Run.id.desc() if newest_first else Run.id.asc())
        if limit is not None:
            stmt = stmt.limit(limit)
        return list(self.session.scalars(stmt))

    def count(
        self,
        *,
        job_type: str | None = None,
        status: str | None = None,
        source: str | None = None,
        dataset: str | None = None,
    ) -> int:
        stmt = self._filtered(sa.select(sa.func.count(Run.id)), job_type, status, source, dataset)
        return int(self.session.execute(stmt).scalar_one())

    def first_of_each_context(self, job_type: str | None = None) -> list[Run]:
        """The oldest run of every context (of ``job_type``), oldest first: which properties the
        store's runs have, in the order they first appear, without reading every run."""
        first = self._filtered(
            sa.select(sa.func.min(Run.id)).group_by(Run.job_type, Run.context_fingerprint),
            job_type,
            None,
            None,
            None,
        )
        return list(self.session.scalars(sa.select(Run).where(Run.id.in_(first)).order_by(Run.id)))

    def page(
        self, after_id: int, up_to_id: int, limit: int, job_type: str | None = None, status: str | None = None
    ) -> list[Run]:
        """Up to ``limit`` runs with ``after_id`` < id <= ``up_to_id``, oldest first (keyset paging,
        each page a seek: in the primary key, or with a job type and status in ``ix_runs_training``;
        a job type alone would sort all its runs for every page)."""
        stmt = self._filtered(
            sa.select(Run).where(Run.id > after_id, Run.id <= up_to_id), job_type, status, None, None
        )
        return list(self.session.scalars(stmt.order_by(Run.id).limit(limit)))

    def newest_any_id(self, job_type: str | None = None) -> int | None:
        """The newest run's id, whatever its status (of ``job_type``)."""
        return self.session.execute(
            self._filtered(sa.select(sa.func.max(Run.id)), job_type, None, None, None)
        ).scalar()

    @staticmethod
    def _filtered(
        stmt: Any, job_type: str | None, status: str | None, source: str | None, dataset: str | None
    ) -> Any:
        if job_type is not None:
            stmt = stmt.where(Run.job_type == job_type)
        if status is not None:
            stmt = stmt.where(Run.status == status)
        if source is not None:
            stmt = stmt.where(Run.source == source)
        if dataset is not None:
            stmt = stmt.where(Run.dataset == dataset)
        return stmt

    def training_runs(
        self,
        job_type: str | None,
        *,
        fingerprint: str | None = None,
        after_id: int | None = None,
        up_to_id: int | None = None,
    ) -> list[Run]:
        """Successful runs (failed ones are kept in the store but never trained on), oldest first."""
        stmt = sa.select(Run).where(Run.status == "success", Run.excluded_reason.is_(None))
        if job_type is not None:
            stmt = stmt.where(Run.job_type == job_type)
        if after_id is not None:
            stmt = stmt.where(Run.id > after_id)
        if up_to_id is not None:
            stmt = stmt.where(Run.id <= up_to_id)
        if fingerprint is not None:
            # One context's, sorted here: asked for in id order, SQLite walks ix_runs_training
            # (job type, status, id) and reads every successful run of the job type to filter
            # the context; without the order it seeks the context in ix_runs_context.
            stmt = stmt.where(Run.context_fingerprint == fingerprint)
            return sorted(self.session.scalars(stmt), key=lambda run: run.id)
        return list(self.session.scalars(stmt.order_by(Run.id)))

    def recent_training_runs(
        self,
        job_type: str | None,
        *,
        per_scale_out: int,
        limit: int,
        fingerprint: str | None = None,
    ) -> list[Run]:
        """The newest successful runs: at most ``per_scale_out`` of each (job type, context,
        scale-out), and of those the ``limit`` newest; oldest first.

        What training and fine-tuning read instead of the whole history, so that their cost
        stops growing with the store: every context and scale-out keeps its newest runs, and
        repetitions beyond them (the bulk of a year of daily runs) are left out, oldest first.
        The selection runs in the database (``ix_runs_context`` covers it); only the chosen
        rows come back.
        """
        if job_type is not None and fingerprint is not None:
            return self._context_window(job_type, fingerprint, per_scale_out, limit)
        rank = (
            sa.func.row_number()
            .over(
                partition_by=(Run.job_type, Run.context_fingerprint, Run.scale_out),
                order_by=Run.id.desc(),
            )
            .label("rank")
        )
        ranked = sa.select(Run.id.label("id"), rank).where(
            Run.status == "success", Run.excluded_reason.is_(None)
        )
        if job_type is not None:
            ranked = ranked.where(Run.job_type == job_type)
        if fingerprint is not None:
            ranked = ranked.where(Run.context_fingerprint == fingerprint)
        window = ranked.subquery()
        chosen = (
            sa.select(window.c.id)
            .where(window.c.rank <= per_scale_out)
            .order_by(window.c.id.desc())
            .limit(limit)
        ).subquery()
        stmt = sa.select(Run).join(chosen, Run.id == chosen.c.id).order_by(Run.id)
        return list(self.session.scalars(stmt))

    def _context_window(self, job_type: str, fingerprint: str, per_scale_out: int, limit: int) -> list[Run]:
        """:meth:`recent_training_runs` of one context (the launch path's fine-tuning): its
        scale-outs, then the newest runs of each, a seek each; where ranking every run of the
        context would read all of them."""
        scale_outs = list(
            self.session.execute(
                _CONTEXT_SCALE_OUT_LIST, {"job_type": job_type, "fingerprint": fingerprint}
            ).scalars()
        )
        if not scale_outs:
            return []
        newest = [
            sa.select(Run.id)
            .where(
                Run.job_type == job_type,
                Run.context_fingerprint == fingerprint,
                Run.status == "success",
                Run.scale_out == n,
                Run.excluded_reason.is_(None),
            )
            .order_by(Run.id.desc())
            .limit(per_scale_out)
            .subquery()
            .select()
            for n in scale_outs
        ]
        ids = sorted(self.session.scalars(sa.union_all(*newest)), reverse=True)[:limit]
        return list(self.session.scalars(sa.select(Run).where(Run.id.in_(ids)).order_by(Run.id)))

    def runs_since(self, after_id: int, *, job_type: str | None = None) -> list[Run]:
        """Every run (any status) recorded after row ``after_id``, oldest first."""
        stmt = sa.select(Run).where(Run.id > after_id)
        if job_type is not None:
            stmt = stmt.where(Run.job_type == job_type)
        return list(self.session.scalars(stmt.order_by(Run.id)))

    def training_summary(
        self, job_type: str | None, fingerprint: str | None = None
    ) -> tuple[int, int | None]:
        """(number of successful runs, newest of their row ids) of a job type (None: every job
        type) or one of its contexts."""
        stmt = sa.select(sa.func.count(Run.id), sa.func.max(Run.id)).where(
            Run.status == "success", Run.excluded_reason.is_(None)
        )
        if job_type is not None:
            stmt = stmt.where(Run.job_type == job_type)
        if fingerprint is not None:
            stmt = stmt.where(Run.context_fingerprint == fingerprint)
        count, newest = self.session.execute(stmt).one()
        return int(count), (int(newest) if newest is not None else None)

    def lock_datasets(self, names: Sequence[str]) -> None:
        """Serialise imports of the same data sets (PostgreSQL; SQLite writers are serial already)."""
        if self.session.get_bind().dialect.name == "postgresql":
            from airflow_provider_bellamy.store.store import lock_key

            for name in sorted(names):
                self.session.execute(
                    sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": lock_key("dataset", name)}
                )

    def newest_id(self, job_type: str) -> int | None:
        """The newest run row of a job type (any status).

        One max per status (the CHECK constraint names them all): ``ix_runs_training`` (job type,
        status, id) answers each with one index seek, where a max over the job type alone reads
        every index entry of the job type's history."""
        per_status = [
            sa.select(sa.func.max(Run.id))
            .where(Run.job_type == job_type, Run.status == status)
            .scalar_subquery()
            for status in RUN_STATUSES
        ]
        found = [v for v in self.session.execute(sa.select(*per_status)).one() if v is not None]
        return max(found) if found else None

    def property_kinds(self, job_type: str) -> StoredKinds:
        """What a job type's stored runs hold for each property: number, text or mixed, and a text
        property's texts that read as numbers (one context row each: every run of a context has the
        same properties).

        The contexts are walked through ``ix_runs_context`` one fingerprint at a time (a
        recursive "skip scan": a seek per context), so the cost grows with the job type's
        contexts, not with its runs."""
        return property_kinds(self.session.execute(_CONTEXTS_OF_JOB_TYPE, {"job_type": job_type}).scalars())

    def newest_training_id(self, job_type: str, fingerprint: str) -> int | None:
        """The newest run of one context that training and fine-tuning read (successful, not
        excluded): what tells whether the context's fine-tuned copy is current.

        A seek per scale-out the context ran at, through ``ix_runs_context`` (job type, context,
        status, scale-out, id): a max over the context alone would read every run of it, and
        the launch path asks on every call."""
        return self.session.execute(
            _NEWEST_TRAINING_RUN, {"job_type": job_type, "fingerprint": fingerprint}
        ).scalar()

    def job_types(self, *, successful_only: bool = False) -> list[str]:
        """The job types with stored runs (``successful_only``: with a successful one), sorted; a
        few index seeks per job type, whatever the runs (``_JOB_TYPES``)."""
        known = sorted(self.session.execute(_JOB_TYPES).scalars())
        if not successful_only or not known:
            return known
        has_success = [
            sa.exists().where(Run.job_type == job, Run.status == "success") for job in known
        ]  # a seek each in ix_runs_training
        found: list[bool] = []
        for start in range(0, len(has_success), 200):
            found += self.session.execute(sa.select(*has_success[start : start + 200])).one()
        return [job for job, ok in zip(known, found, strict=True) if ok]

    def has_job_type(self, job_type: str) -> bool:
        stmt = sa.select(Run.id).where(Run.job_type == job_type).limit(1)
        return self.session.execute(stmt).first() is not None

    def has_framework(self, framework: str) -> bool:
        """Whether any run of ``framework`` is stored (a seek in ``ix_runs_external``)."""
        stmt = sa.select(Run.id).where(Run.framework == framework).limit(1)
        return self.session.execute(stmt).first() is not None

    def frameworks(self) -> list[str]:
        """The frameworks of the stored runs, sorted."""
        return sorted(self.session.scalars(sa.select(Run.framework).distinct()))


class ModelRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    @property
    def _is_postgres(self) -> bool:
        return self.session.get_bind().dialect.name == "postgresql"

    def _lock(self, job_type: str, scope: str, fingerprint: str | None) -> None:
        """Serialise writers of one model lineage (PostgreSQL; SQLite writers are serial already)."""
        if self._is_postgres:
            from airflow_provider_bellamy.store.store import lock_key

            self.session.execute(
                sa.text("SELECT pg_advisory_xact_lock(:k)"),
                {"k": lock_key("model", job_type, scope, fingerprint)},
            )

    def add(
        self,
        *,
        job_type: str,
        scope: str,
        weights: bytes,
        kind: str = "bellamy",
        context_fingerprint: str | None = None,
        parent_id: int | None = None,
        train_rows: int = 0,
        newest_run_id: int | None = None,
        metrics: Mapping[str, Any] | None = None,
        status: str = "candidate",
        blob_writer: Any = None,
        blob_threshold_bytes: int | None = None,
    ) -> ModelVersion:
        """Store a new version (numbered after the lineage's last). Big weights go to ``blob_writer``."""
        if scope not in ("general", "context"):
            raise InvalidInputError("scope", scope, "must be 'general' or 'context'")
        if (scope == "context") != (context_fingerprint is not None):
            raise InvalidInputError(
                "context_fingerprint",
                context_fingerprint,
                "a context model needs one; a general model has none",
            )
        if not isinstance(weights, (bytes, bytearray)) or not weights:
            raise InvalidInputError("weights", type(weights).__name__, "must be non-empty bytes")
        self._lock(job_type, scope, context_fingerprint)
        last = self.session.execute(
            sa.select(sa.func.max(ModelVersion.version)).where(
                ModelVersion.job_type == job_type,
                ModelVersion.scope == scope,
                ModelVersion.context_fingerprint.is_(None)
                if context_fingerprint is None
                else ModelVersion.context_fingerprint == context_fingerprint,
            )
        ).scalar_one()
        data = bytes(weights)
        digest = hashlib.sha256(data).hexdigest()
        mv = ModelVersion(
            job_type=job_type,
            scope=scope,
            context_fingerprint=context_fingerprint,
            version=int(last or 0) + 1,
            parent_id=parent_id,
            kind=kind,
            status="candidate",
            created_at=utcnow(),
            train_rows=int(train_rows),
            newest_run_id=newest_run_id,
            metrics=_json_safe(dict(metrics or {})),
            weights_sha256=digest,
            weights_size=len(data),
        )
        if blob_writer is not None and blob_threshold_bytes is not None and len(data) > blob_threshold_bytes:
            mv.weights_path = blob_writer(data, digest)
        else:
            mv.weights = data
        self.session.add(mv)
        self.session.flush()
        if status == "active":
            self.promote(mv.id)
        elif status != "candidate":
            raise InvalidInputError("status", status, "a new version is 'candidate' or 'active'")
        return mv

    def get(self, version_id: int) -> ModelVersion | None:
        return self.session.get(ModelVersion, version_id)

    def active(
        self, job_type: str, *, scope: str = "general", fingerprint: str | None = None
    ) -> ModelVersion | None:
        stmt = sa.select(ModelVersion).where(
            ModelVersion.job_type == job_type, ModelVersion.scope == scope, ModelVersion.status == "active"
        )
        if scope == "context":
            stmt = stmt.where(ModelVersion.context_fingerprint == fingerprint)
        return self.session.scalars(stmt).one_or_none()

    def list(
        self,
        *,
        job_type: str | None = None,
        scope: str | None = None,
        status: str | None = None,
        fingerprint: str | None = None,
        limit: int | None = None,
    ) -> list[ModelVersion]:
        stmt = sa.select(ModelVersion)
        if job_type is not None:
            stmt = stmt.where(ModelVersion.job_type == job_type)
        if scope is not None:
            stmt = stmt.where(ModelVersion.scope == scope)
        if status is not None:
            stmt = stmt.where(ModelVersion.status == status)
        if fingerprint is not None:
            stmt = stmt.where(ModelVersion.context_fingerprint == fingerprint)
        stmt = stmt.order_by(ModelVersion.job_type, ModelVersion.scope, ModelVersion.id.desc())
        if limit is not None:
            stmt = stmt.limit(limit)
        return list(self.session.scalars(stmt))

    def prune_context(self, job_type: str, fingerprint: str, *, keep_retired: int = 1) -> int:
        """Delete a context's older retired fine-tuned copies (a cache); returns how many went."""
        retired = self.session.scalars(
            sa.select(ModelVersion)
            .where(
                ModelVersion.job_type == job_type,
                ModelVersion.scope == "context",
                ModelVersion.context_fingerprint == fingerprint,
                ModelVersion.status == "retired",
            )
            .order_by(ModelVersion.version.desc())
        ).all()
        doomed = [mv.id for mv in retired[keep_retired:]]
        if doomed:
            # Decisions keep the label (model_version); only their id link is cleared.
            self.session.execute(
                sa.update(Decision).where(Decision.model_version_id.in_(doomed)).values(model_version_id=None)
            )
            self.session.execute(sa.delete(ModelVersion).where(ModelVersion.id.in_(doomed)))
        return len(doomed)

    def prune(self, *, keep: int, job_type: str | None = None) -> list[ModelVersion]:
        """Delete model versions nothing uses; returns the deleted rows (their files are the caller's).

        Kept: every active general version, the ``keep`` newest other general versions of each
        job type (what ``rollback`` and a later ``promote`` can go back to), and each context's
        active fine-tuned copy of the active general version (the copy ``size`` uses). Deleted:
        older general versions and every other fine-tuned copy (retired ones, and copies of a
        general version that is no longer active: ``size`` would fine-tune again anyway).
        Decisions keep the deleted model's label; only their id link is cleared.
        """
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 0:
            raise InvalidInputError("keep", keep, "must be an integer >= 0")
        stmt = sa.select(ModelVersion)
        if job_type is not None:
            stmt = stmt.where(ModelVersion.job_type == job_type)
        rows = list(self.session.scalars(stmt.order_by(ModelVersion.id.desc())))
        active_general = {r.job_type: r.id for r in rows if r.scope == "general" and r.status == "active"}
        doomed: list[ModelVersion] = []
        kept_per_job: dict[str, int] = {}
        for row in rows:
            if row.scope == "general":
                if row.status == "active":
                    continue
                kept_per_job[row.job_type] = kept_per_job.get(row.job_type, 0) + 1
                if kept_per_job[row.job_type] <= keep:
                    continue
            elif row.status == "active" and row.parent_id == active_general.get(row.job_type):
                continue
            doomed.append(row)
        doomed_ids = {r.id for r in doomed}
        # A kept fine-tuned copy's parent is its job type's active version: never doomed. A doomed
        # general version's copies are doomed too (their parent is not active), so no dangling parent.
        assert not any(r.parent_id in doomed_ids for r in rows if r.id not in doomed_ids)
        ids = sorted(doomed_ids)
        for start in range(0, len(ids), 500):
            batch = ids[start : start + 500]
            self.session.execute(
                sa.update(Decision).where(Decision.model_version_id.in_(batch)).values(model_version_id=None)
            )
        # Children (fine-tuned copies) before their parents, for the parent_id foreign key.
        for scope in ("context", "general"):
            scoped = [r.id for r in doomed if r.scope == scope]
            for start in range(0, len(scoped), 500):
                self.session.execute(
                    sa.delete(ModelVersion).where(ModelVersion.id.in_(scoped[start : start + 500]))
                )
        return doomed

    def referenced_weight_files(self, paths: Iterable[str]) -> set[str]:
        """Those of ``paths`` that a stored version still keeps its weights in."""
        wanted = sorted(set(paths))
        if not wanted:
            return set()
        return set(
            self.session.scalars(
                sa.select(ModelVersion.weights_path).where(ModelVersion.weights_path.in_(wanted)).distinct()
            )
        )

    def latest(self, job_type: str, *, scope: str = "general") -> ModelVersion | None:
        """The most recently created version of a lineage, whatever its status."""
        stmt = (
            sa.select(ModelVersion)
            .where(ModelVersion.job_type == job_type, ModelVersion.scope == scope)
            .order_by(ModelVersion.id.desc())
            .limit(1)
        )
        return self.session.scalars(stmt).first()

    def weights(self, mv: ModelVersion) -> bytes:
        """The stored weights, checked against their checksum."""
        from airflow_provider_bellamy.exceptions import ModelFileError
        from airflow_provider_bellamy.store.store import Store

        if mv.weights_path:
            return Store.read_blob(mv.weights_path, mv.weights_sha256)
        data = self.session.execute(
            sa.select(ModelVersion.weights).where(ModelVersion.id == mv.id)
        ).scalar_one_or_none()
        if data is None or hashlib.sha256(data).hexdigest() != mv.weights_sha256:
            raise ModelFileError(f"model version {mv.id} ({mv.label}): stored weights are missing or corrupt")
        return bytes(data)

    def _lineage_rows(self, mv: ModelVersion) -> list[ModelVersion]:
        """Every version of ``mv``'s lineage, row-locked on PostgreSQL (SELECT ... FOR UPDATE)."""
        self._lock(mv.job_type, mv.scope, mv.context_fingerprint)
        stmt = sa.select(ModelVersion).where(
            ModelVersion.job_type == mv.job_type,
            ModelVersion.scope == mv.scope,
            ModelVersion.context_fingerprint.is_(None)
            if mv.context_fingerprint is None
            else ModelVersion.context_fingerprint == mv.context_fingerprint,
        )
        if self._is_postgres:
            stmt = stmt.with_for_update()
        # populate_existing: after waiting for the lock, see what the other writer committed.
        return list(self.session.scalars(stmt.execution_options(populate_existing=True)))

    def promote(self, version_id: int, *, keep_activation_time: bool = False) -> ModelVersion:
        """Make a version the active one of its lineage; the previous active one is retired."""
        target = self.get(version_id)
        if target is None:
            raise InvalidInputError("version_id", version_id, "no such model version")
        rows = self._lineage_rows(target)
        target = next(r for r in rows if r.id == version_id)
        if target.status == "active":
            return target
        for row in rows:
            if row.status == "active":
                row.status = "retired"
        # The old active row must be retired in the database before the new one turns
        # active, or the partial unique index sees two active rows for a moment.
        self.session.flush()
        target.status = "active"
        if not keep_activation_time or target.activated_at is None:
            target.activated_at = utcnow()
        self.session.flush()
        return target

    def rollback(self, job_type: str) -> ModelVersion:
        """Re-activate the general version that was active before the current one."""
        current = self.active(job_type)
        if current is None:
            raise InvalidInputError("job_type", job_type, "has no active general model to roll back")
        rows = self._lineage_rows(current)
        current = next(r for r in rows if r.id == current.id)
        if current.status != "active":  # another writer changed it while this one waited
            raise InvalidInputError("job_type", job_type, "the active model changed meanwhile; try again")
        assert current.activated_at is not None
        earlier = [
            r
            for r in rows
            if r.status == "retired" and r.activated_at is not None and r.activated_at < current.activated_at
        ]
        if not earlier:
            raise InvalidInputError("job_type", job_type, f"no version was active before {current.label}")
        previous = max(earlier, key=lambda r: (r.activated_at, r.id))
        # Keep the earlier activation time, so a second rollback steps further back instead
        # of toggling between the same two versions.
        return self.promote(previous.id, keep_activation_time=True)


class DecisionRepository:
    def __init__(self, session: Session) -> None:
        self.session = session

    def add(self, values: Mapping[str, Any]) -> Decision:
        row = dict(values)
        row.setdefault("created_at", utcnow())
        row["candidates"] = _json_safe(row.get("candidates") or [])
        row["context"] = _json_safe(row.get("context") or {})
        if row.get("extrapolation") is not None:
            row["extrapolation"] = _json_safe(row["extrapolation"])
        decision = Decision(**row)
        self.session.add(decision)
        self.session.flush()
        return decision

    def get(self, decision_id: int) -> Decision | None:
        return self.session.get(Decision, decision_id)

    def list(self, *, job_type: str | None = None, limit: int | None = None) -> list[Decision]:
        stmt = sa.select(Decision)
        if job_type is not None:
            stmt = stmt.where(Decision.job_type == job_type)
        stmt = stmt.order_by(Decision.id.desc())
        if limit is not None:
            stmt = stmt.limit(limit)
        return list(self.session.scalars(stmt))

    def prune_batch(self, older_than: dt.datetime, *, keep_linked: bool, batch: int = 5000) -> int:
        """Delete up to ``batch`` decisions made before ``older_than``; returns how many went.

        The runs they led to stay (they are training data); their ``decision_id`` is cleared so
        nothing points at a deleted decision. ``keep_linked`` keeps the decisions linked to a run.
        """
        stmt = sa.select(Decision.id).where(Decision.created_at < older_than)
        if keep_linked:
            stmt = stmt.where(Decision.run_row_id.is_(None))
        ids = list(self.session.scalars(stmt.order_by(Decision.created_at).limit(batch)))
        if not ids:
            return 0
        self.session.execute(sa.update(Run).where(Run.decision_id.in_(ids)).values(decision_id=None))
        self.session.execute(sa.delete(Decision).where(Decision.id.in_(ids)))
        return len(ids)

    def try_link(self, decision_id: int, run_row_id: int) -> bool:
        """Link when both rows exist and agree on the job type; False (nothing changed) otherwise.

        What :meth:`link` does, as two keyed UPDATEs (recording a run calls this on the launch
        path: loading the decision would parse its candidates for nothing). The newest try wins:
        a link to a newer run that still exists is kept."""
        linked = Run.__table__.alias("linked")
        result = self.session.execute(
            sa.update(Decision)
            .where(
                Decision.id == decision_id,
                Decision.job_type == sa.select(Run.job_type).where(Run.id == run_row_id).scalar_subquery(),
                sa.or_(
                    Decision.run_row_id.is_(None),
                    Decision.run_row_id <= run_row_id,
                    ~sa.exists().where(linked.c.id == Decision.run_row_id),
                ),
            )
            .values(run_row_id=run_row_id)
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:
            return False
        self.session.execute(
            sa.update(Run)
            .where(Run.id == run_row_id, Run.decision_id.is_(None))
            .values(decision_id=decision_id)
            .execution_options(synchronize_session=False)
        )
        return True

    def link(self, decision_id: int, run_row_id: int) -> Decision:
        """Attach the run a decision led to (the same link again is a no-op)."""
        decision = self.get(decision_id)
        if decision is None:
            raise InvalidInputError("decision_id", decision_id, "no such decision")
        run = self.session.get(Run, run_row_id)
        if run is None:
            raise InvalidInputError("run_row_id", run_row_id, "no such run")
        if run.job_type != decision.job_type:
            raise InvalidInputError(
                "run_row_id",
                run_row_id,
                f"is a {run.job_type!r} run; decision {decision_id} is for {decision.job_type!r}",
            )
        if decision.run_row_id not in (None, run_row_id):
            # A retried task writes a new run for the same decision: the newest try wins.
            newest = self.session.get(Run, decision.run_row_id)
            if newest is not None and newest.id > run_row_id:
                return decision
        decision.run_row_id = run_row_id
        if run.decision_id is None:
            run.decision_id = decision_id
        self.session.flush()
        return decision


def _json_safe(value: Any) -> Any:
    """JSON has no NaN or infinity; numpy scalars and datetimes become plain values."""
    import math

    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    if hasattr(value, "item"):
        return _json_safe(value.item())
    if isinstance(value, Iterable):
        return [_json_safe(v) for v in value]
    return str(value)
