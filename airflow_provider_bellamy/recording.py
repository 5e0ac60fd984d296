"""``BellamyRecordingMixin``: how the Bellamy operators and ``BellamyJobSensor`` write a
finished cluster job back to the store — one path, as the Databricks provider's operators and
sensors share ``execute_complete``.

A job is recorded once: per Airflow try (``callbacks.write_back``) and per cluster job id across
tries (a later try that reattached to the job does not store it again). Importing this module
imports neither torch nor pandas.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_bellamy.facade import Bellamy
    from airflow_provider_bellamy.hooks.bellamy import BellamyHook
    from airflow_provider_bellamy.hooks.job_status import JobStatus


class BellamyRecordingMixin:
    """The store access and the write-back shared by the Bellamy operators and sensor; the class
    using it sets ``bellamy_conn_id`` and ``connect_timeout_s``."""

    bellamy_conn_id: str
    connect_timeout_s: float | None
    log: Any

    def _bellamy_store_hook(self) -> BellamyHook:
        from airflow_provider_bellamy.hooks.bellamy import BellamyHook

        cached = getattr(self, "_bellamy_hook", None)
        if cached is None:
            cached = BellamyHook(self.bellamy_conn_id, connect_timeout_s=self.connect_timeout_s)
            self._bellamy_hook = cached
        return cached

    @contextmanager
    def unrecorded_is_a_warning(self, what: str) -> Iterator[None]:
        """Around a write-back of a job that has run: a failure (store down, …) is logged, never
        raised. Failing the task would make Airflow re-run the job (operators) or stop the tasks
        downstream of a job that succeeded (sensor)."""
        try:
            yield
        except Exception as exc:
            self.log.warning("Bellamy: could not record %s (%s): %s", what, type(exc).__name__, exc)

    def record_job_run(
        self,
        context: Context | Mapping[str, Any],
        status: JobStatus,
        *,
        facade: Bellamy | None = None,
        job_type: str,
        framework: str,
        scale_out: int,
        properties: Mapping[str, Any],
        decision_id: int | None,
        source: str,
        requested_scale_out: int | None = None,
    ) -> int | None:
        """Write one finished cluster job back (once); returns its run row id.

        The runtime is the time the job ran (``status.runtime_s``), the wait before it ``queue_s``;
        ``scale_out`` is what it ran at, ``requested_scale_out`` what sizing asked for."""
        from airflow_provider_bellamy.callbacks import write_job_row

        if status.unreadable:
            self.log.warning(
                "Bellamy: %s job %s: the cluster answered figures that do not parse (%s), read as not "
                "reported",
                status.kind,
                status.job_id,
                status.unreadable,
            )
        ti = context["ti"]
        if status.runtime_s is None:
            from airflow_provider_bellamy.callbacks import leave_unrecorded

            reason = (
                f"{status.kind} job {status.job_id} ended {status.state} but reports no readable runtime"
                + (f" ({status.unreadable})" if status.unreadable else " (no duration)")
            )
            # Nor by the listener or a callback: the task's wall time they would record instead
            # holds sizing, submission and polling besides the job, at the size asked for.
            leave_unrecorded(ti, reason)
            self.log.warning("Bellamy: %s; this try is not recorded as a run", reason)
            return None
        row = {
            "job_type": job_type,
            "framework": framework,
            "scale_out": scale_out,
            # A job that failed within its first millisecond still has to be a valid run (> 0 s).
            "runtime_s": status.runtime_s if status.runtime_s > 0 else 0.001,
            "status": "success" if status.succeeded else "failed",
            "properties": dict(properties),
            "started_at": status.started_at,
            "ended_at": status.ended_at,
            "external_id": status.job_id,
            "decision_id": decision_id,
            "source": source,
            "queue_s": status.queue_s,
            "requested_scale_out": requested_scale_out,
            "excluded_reason": None,
        }
        return write_job_row(ti, row, lambda: self._bellamy_store_hook().get_facade(), facade)
