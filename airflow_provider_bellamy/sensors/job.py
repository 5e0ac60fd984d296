"""``BellamyJobSensor``: wait for a submitted Flink job or Spark application, then record it.

The sensor only ever reads the job's status (Flink REST ``/jobs/<id>``, a Spark standalone
master's ``/json/`` or a Spark history server's ``/api/v1/applications/<id>``), so a sensor
that restarts on another worker, or after a worker died, simply resumes from the job id: it
submits nothing, and the run is recorded once (per try, and per cluster job id across tries).

Poke/reschedule modes poll from a worker; ``deferrable=True`` hands the wait to
``BellamyJobTrigger`` and holds no worker slot.

What is watched and recorded comes from, in order: the explicit arguments (``job_id``,
``kind``, ``endpoint``, ``job_type``, ``scale_out``, ``properties``, ``decision_id``), the
return value of ``submit_task_id`` (a ``BellamyFlinkOperator`` or ``BellamySparkSubmitOperator``
with ``wait_for_completion=False``, or any task returning a dict with ``job_id`` and any of
``kind``, ``endpoint``, ``job_type``, ``scale_out`` / ``parallelism``, ``properties``,
``decision_id``, ``decision``), and the job's own parallelism as the cluster reports it.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseSensorOperator, PokeReturnValue
from airflow.sdk.exceptions import AirflowSensorTimeout

from airflow_provider_bellamy.exceptions import InvalidInputError, JobEndpointUnreachableError, JobFailedError
from airflow_provider_bellamy.hooks.job import (
    DEFAULT_UNREACHABLE_GRACE_S,
    JobStatusHook,
    UnreachableGrace,
    parse_unreachable_grace,
)
from airflow_provider_bellamy.hooks.job_status import JOB_KINDS, validate_endpoint, validate_kind
from airflow_provider_bellamy.recording import BellamyRecordingMixin
from airflow_provider_bellamy.records import validate_scale_out
from airflow_provider_bellamy.spec import is_template, parse_duration, parse_properties

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_bellamy.hooks.job_status import JobStatus


# A watched job that ended unsuccessfully raises the neutral JobFailedError; the old name stays.
BellamyJobFailedError = JobFailedError

# Task state store key (Airflow 3.3, kept across reschedules) of when the status endpoint first
# failed in this try: each reschedule-mode poke is a process of its own, and the grace spans them.
UNREACHABLE_STATE_KEY = "bellamy_unreachable_since"


class BellamyJobSensor(BellamyRecordingMixin, BaseSensorOperator):
    """Wait for a Flink job / Spark application to finish and write its runtime back.

    :param job_id: the Flink job id, Spark application id (``app-…``) or driver id
        (``driver-…``); templated. Default: ``job_id`` from ``submit_task_id``'s XCom.
    :param kind: ``flink`` | ``spark-master`` | ``spark-history``. Default: ``kind`` from
        ``submit_task_id``'s XCom, else ``flink``.
    :param endpoint: the REST endpoint's base URL (templated). Default: ``endpoint`` from
        ``submit_task_id``'s XCom; for ``flink``, else the ``flink_conn_id`` connection.
    :param submit_task_id: the task that submitted the job; its return value supplies the job
        id, kind, endpoint, scale-out, job type, properties and the sizing decision.
    :param record: write the finished job back to the Bellamy store (default True).
    :param fail_on_job_failure: fail the task when the job ended unsuccessfully (after
        recording it as failed).
    :param deferrable: wait in the triggerer (no worker slot).
    :param unreachable_grace_s: how long the status endpoint may stay unreachable, or answer no
        status that parses, before the task fails with its error (default 60 s; templated). Every
        mode keeps waiting meanwhile: a poke logs a warning and returns False, the trigger asks
        again; an unknown job id fails at once.
    """

    template_fields: Sequence[str] = ("job_id", "endpoint", "job_type", "properties", "unreachable_grace_s")
    template_fields_renderers: ClassVar[dict[str, str]] = {"properties": "json"}
    ui_color = "#eef3d9"
    _bellamy_records_itself: ClassVar[bool] = True

    def __init__(
        self,
        *,
        job_id: str | None = None,
        kind: str | None = None,
        endpoint: str | None = None,
        flink_conn_id: str = "flink_default",
        submit_task_id: str | None = None,
        job_type: str | None = None,
        properties: Mapping[str, Any] | str | None = None,
        scale_out: int | str | None = None,
        decision_id: int | None = None,
        record: bool = True,
        bellamy_conn_id: str = "bellamy_default",
        connect_timeout_s: float | str | None = None,
        fail_on_job_failure: bool = True,
        deferrable: bool = False,
        request_timeout_s: float | dt.timedelta | str = 10.0,
        unreachable_grace_s: float | dt.timedelta | str = DEFAULT_UNREACHABLE_GRACE_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.kind = validate_kind(kind) if kind is not None else None
        if job_id is None and submit_task_id is None:
            raise InvalidInputError("job_id", None, "give job_id or submit_task_id")
        if submit_task_id is None and self.kind not in (None, "flink") and endpoint is None:
            raise InvalidInputError("endpoint", None, f"kind={self.kind} needs the REST endpoint URL")
        if endpoint is not None and "{{" not in endpoint:
            validate_endpoint(endpoint)
        if scale_out is not None:
            scale_out = validate_scale_out(scale_out)  # "4" is 4; "four" is refused, named
        if properties is not None and not is_template(properties):
            # checked now so a broken DAG fails at parse time; a template is parsed once rendered
            properties = parse_properties(properties)
        self.job_id = job_id
        self.endpoint = endpoint
        self.flink_conn_id = flink_conn_id
        self.submit_task_id = submit_task_id
        self.job_type = job_type
        self.properties = properties if properties is not None else {}
        self.scale_out = scale_out
        self.decision_id = decision_id
        self.record = record
        self.bellamy_conn_id = bellamy_conn_id
        # checked now (as the store's hook reads it), so "ten" or -1 fails the DAG at parse
        self.connect_timeout_s = (
            None if connect_timeout_s is None else parse_duration(connect_timeout_s, "connect_timeout_s")
        )
        self.fail_on_job_failure = fail_on_job_failure
        self.deferrable = deferrable
        self.request_timeout_s = parse_duration(request_timeout_s, "request_timeout_s")
        # "30" (a rendered template) is 30; "abc" or -1 fails the DAG at parse, a template once rendered
        self.unreachable_grace_s: Any = (
            unreachable_grace_s
            if is_template(unreachable_grace_s)
            else parse_unreachable_grace(unreachable_grace_s)
        )
        # poke mode's grace, for the try it counts in (reschedule mode keeps it in the state store)
        self._grace: tuple[Any, UnreachableGrace] | None = None

    # -- resolution ------------------------------------------------------------------------------

    def _submitted(self, context: Context) -> dict[str, Any]:
        if not self.submit_task_id:
            return {}
        value = context["ti"].xcom_pull(task_ids=self.submit_task_id)
        return dict(value) if isinstance(value, Mapping) else {}

    def _resolve(self, context: Context) -> tuple[str, str, str]:
        """(kind, job id, endpoint URL), checked."""
        submitted = self._submitted(context)
        source = f"task {self.submit_task_id!r} returned"
        job_id = self.job_id or submitted.get("job_id")
        if not job_id:
            raise InvalidInputError("job_id", job_id, f"none given and {source} no job_id")
        kind = self.kind
        if kind is None:
            kind = submitted.get("kind") or "flink"
            if kind not in JOB_KINDS:
                raise InvalidInputError(
                    "kind", kind, f"{source} an unknown kind: use one of {list(JOB_KINDS)}"
                )
        endpoint = self.endpoint or submitted.get("endpoint")
        if endpoint is None:
            if kind != "flink":
                raise InvalidInputError(
                    "endpoint",
                    None,
                    f"kind={kind} needs the REST endpoint URL: give endpoint, or have "
                    f"task {self.submit_task_id!r} return one",
                )
            from airflow_provider_bellamy.hooks.flink import FlinkHook

            endpoint = FlinkHook(self.flink_conn_id).rest_url
        return str(kind), str(job_id), validate_endpoint(endpoint)

    def _status_hook(self, kind: str, endpoint: str) -> JobStatusHook:
        return JobStatusHook(kind, endpoint, timeout_s=self.request_timeout_s)

    # -- waiting ---------------------------------------------------------------------------------

    def _unreachable_grace(self, context: Context) -> UnreachableGrace:
        """This try's grace for an endpoint that fails: in poke mode held by the sensor across its
        pokes; in reschedule mode read back from the task state store, on the wall clock."""
        grace_s = parse_unreachable_grace(self.unreachable_grace_s)
        try_number = getattr(context["ti"], "try_number", None)
        store = context.get("task_state_store") if self.reschedule else None
        if store is not None:
            kept = store.get(UNREACHABLE_STATE_KEY)
            # the store is shared by every try of the task: an earlier try's outage is not this one's
            since = (
                kept.get("since") if isinstance(kept, dict) and kept.get("try_number") == try_number else None
            )
            return UnreachableGrace(grace_s, since=since, clock=time.time)
        if self._grace is None or self._grace[0] != try_number:
            self._grace = (try_number, UnreachableGrace(grace_s))
        return self._grace[1]

    def _keep_grace(self, context: Context, grace: UnreachableGrace) -> None:
        """Write a reschedule-mode grace back to the task state store (poke mode holds it)."""
        store = context.get("task_state_store") if self.reschedule else None
        if store is None:
            return
        if grace.since is None:
            store.delete(UNREACHABLE_STATE_KEY)
        else:
            try_number = getattr(context["ti"], "try_number", None)
            store.set(UNREACHABLE_STATE_KEY, {"try_number": try_number, "since": grace.since})

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        from airflow_provider_bellamy.triggers.job import BellamyJobTrigger

        kind, job_id, endpoint = self._resolve(context)
        grace_s = parse_unreachable_grace(self.unreachable_grace_s)
        try:
            status = self._status_hook(kind, endpoint).get_status(job_id)
        except JobEndpointUnreachableError as exc:
            # the trigger rides it out, for the grace, as a poke does
            self.log.warning("%s (the trigger asks again for up to %s s)", exc, grace_s)
        else:
            if status.terminal:  # nothing to wait for: no trigger round trip
                return self._complete(context, status)
        timeout = dt.timedelta(seconds=float(self.timeout)) if self.timeout else None
        deadline_at = (dt.datetime.now(dt.timezone.utc) + timeout).isoformat() if timeout else None
        self.defer(
            trigger=BellamyJobTrigger(
                kind=kind,
                job_id=job_id,
                endpoint=endpoint,
                poll_interval_s=float(self.poke_interval),
                deadline_at=deadline_at,
                unreachable_grace_s=grace_s,
                request_timeout_s=self.request_timeout_s,
            ),
            method_name="execute_complete",
            timeout=timeout,
        )

    def poke(self, context: Context) -> bool | PokeReturnValue:
        kind, job_id, endpoint = self._resolve(context)
        grace = self._unreachable_grace(context)
        try:
            status = self._status_hook(kind, endpoint).get_status(job_id)
        except JobEndpointUnreachableError as exc:
            first = grace.since is None
            if not grace.failed():
                # as the trigger's event makes the task raise (triggers.job.unreachable_event)
                raise
            if first:
                self._keep_grace(context, grace)
            self.log.warning("%s (asking again for up to %s s)", exc, grace.grace_s)
            return False
        if grace.since is not None:
            grace.answered()
            self._keep_grace(context, grace)
        self.log.info("%s job %s is %s", kind, job_id, status.state)
        if not status.terminal:
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._complete(context, status))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        from airflow_provider_bellamy.hooks.job_status import JobStatus
        from airflow_provider_bellamy.triggers.job import error_from_event

        kind = event.get("status")
        if kind == "error":
            _, job_id, endpoint = self._resolve(context)
            raise error_from_event({"job_id": job_id, **event}, endpoint)
        if kind == "timeout":
            job = event.get("job") or {}
            # as poke mode's timeout: resume_execution turns it into a skip under soft_fail
            raise AirflowSensorTimeout(
                f"{job.get('kind') or self.kind or 'the'} job {job.get('job_id', '')} still "
                f"{job.get('state')} when the sensor's timeout ({self.timeout} s) ran out"
            )
        return self._complete(context, JobStatus.from_dict(event["job"]))

    # -- completion ------------------------------------------------------------------------------

    def _complete(self, context: Context, status: JobStatus) -> dict[str, Any]:
        submitted = self._submitted(context)
        decision = submitted.get("decision") or {}
        job_type = self.job_type or submitted.get("job_type") or decision.get("job_type")
        # A Flink job is recorded at the parallelism it ran at (its vertices'), as the Flink operator
        # records it, not the one asked for; a Spark master reports cores, not executors.
        ran_at = status.parallelism if status.kind == "flink" else None
        scale_out = (
            self.scale_out
            or ran_at
            or submitted.get("scale_out")
            or submitted.get("parallelism")
            or decision.get("chosen_scale_out")
            or status.parallelism
        )
        # as rendered: a mapping, or its text when the DAG does not render native objects
        properties = (
            parse_properties(self.properties) or submitted.get("properties") or decision.get("context") or {}
        )
        decision_id = self.decision_id or submitted.get("decision_id") or decision.get("decision_id")
        framework = "flink" if status.kind == "flink" else "spark"
        self.log.info(
            "%s job %s ended %s: duration %s ms (%s → %s)",
            status.kind,
            status.job_id,
            status.state,
            status.duration_ms,
            status.started_at,
            status.ended_at,
        )
        if not status.succeeded and status.cause:
            self.log.error("%s job %s failure cause:\n%s", status.kind, status.job_id, status.cause)
        row_id = None
        if self.record:
            if not job_type:
                raise InvalidInputError(
                    "job_type", job_type, "needed to record the run: give job_type or submit_task_id"
                )
            if not scale_out:
                raise InvalidInputError(
                    "scale_out", scale_out, "the cluster reports no parallelism: give scale_out"
                )
            with self.unrecorded_is_a_warning(f"{status.kind} job {status.job_id}"):
                row_id = self.record_job_run(
                    context,
                    status,
                    job_type=str(job_type),
                    framework=framework,
                    scale_out=int(scale_out),
                    properties=properties,
                    decision_id=decision_id,
                    source="sensor",
                    requested_scale_out=submitted.get("scale_out") or decision.get("chosen_scale_out"),
                )
        if not status.succeeded and self.fail_on_job_failure:
            raise JobFailedError(
                status.job_id, status.state, status.cause or "no cause reported", kind=status.kind
            )
        return {
            **status.to_dict(),
            "runtime_s": status.runtime_s,
            "queue_s": status.queue_s,
            "run_row_id": row_id,
        }
