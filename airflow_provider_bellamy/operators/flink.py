"""``BellamyFlinkOperator``: a Flink job launched at the parallelism the Bellamy model chooses.

At launch, in order:

1. reattach: a task retried after its worker died finds the job its earlier try submitted
   (every job gets a deterministic id from dag/task/run/map index and an attempt counter; the
   DAG run's task state store names it before submission) and waits for that one instead of
   submitting it again; a FAILED/CANCELED earlier job, or one an earlier DAG run of the same
   run_id submitted, is not reattached: the retry submits a fresh attempt;
2. sizing (``BellamySizingMixin``): parallelism = the chosen scale-out; candidates default to
   1 … the cluster's total task slots;
3. the free slots of the cluster (``/overview``) must hold that parallelism, else the task
   fails before anything is submitted, naming the numbers;
4. ``flink run --detached -p N`` (argument list) for a PyFlink script or a jar;
5. the wait: blocking (default), deferred to ``BellamyJobTrigger`` (``deferrable=True``, no
   worker slot held), or none (``wait_for_completion=False``: a ``BellamyJobSensor``
   downstream records the run);
6. the write-back: runtime = the job's own duration from ``/jobs/<id>`` in ms / 1000, exactly;
   FAILED/CANCELED jobs are recorded as failed, Flink's failure cause goes to the log and the
   task fails.

Returns (XCom) ``job_id``, ``parallelism``, ``decision`` and the recorded run.
Importing this module imports neither torch nor pandas.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator

from airflow_provider_bellamy.callbacks import LAUNCH_STATE_KEY
from airflow_provider_bellamy.exceptions import InvalidInputError, JobFailedError
from airflow_provider_bellamy.hooks.flink import FlinkHook
from airflow_provider_bellamy.hooks.job import DEFAULT_UNREACHABLE_GRACE_S, parse_unreachable_grace
from airflow_provider_bellamy.operators.sizing import (
    SIZING_TEMPLATE_FIELDS,
    BellamySizingMixin,
)
from airflow_provider_bellamy.spec import is_template, parse_argument_list, parse_conf, parse_duration

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_bellamy.hooks.job_status import JobStatus

# Attempts of one task instance's job id (dag/task/run/map index): a retry after a FAILED job
# takes the next one. More than this many failed attempts of one task instance is a bug.
MAX_JOB_ATTEMPTS = 100


def deterministic_job_id(dag_id: str, task_id: str, run_id: str, map_index: int, attempt: int) -> str:
    """The Flink job id (32 hex) of one attempt of one task instance."""
    key = "\x1f".join(["bellamy", dag_id, task_id, run_id, str(map_index), str(attempt)])
    return hashlib.sha256(key.encode()).hexdigest()[:32]


class BellamyFlinkOperator(BellamySizingMixin, BaseOperator):
    """Size a Flink job by the Bellamy model, submit it, wait for it and write its runtime back.

    :param application: path of a PyFlink script (``.py``) or a job jar (``.jar``).
    :param application_args: arguments after the script/jar.

    and the sizing arguments of ``BellamySizingMixin``; ``scale_outs`` (candidate parallelisms)
    defaults to 1 … the cluster's total task slots.

    :param conf: Flink options passed as ``-D key=value``.
    :param entry_class: main class of a jar (``-c``).
    :param flink_conn_id: a ``flink`` connection (JobManager REST host/port).
    :param wait_for_completion: wait for the job and record it (default); False returns right
        after submission and leaves the recording to a ``BellamyJobSensor``.
    :param deferrable: wait in the triggerer instead of a worker slot.
    :param poll_interval_s: seconds between status polls (a number, or a duration's text: ``"5"``,
        ``"5s"``; as ``job_timeout_s`` and ``submit_timeout_s``).
    :param job_timeout_s: give up waiting after this long (the job keeps running unless
        ``cancel_on_kill``).
    :param reattach: on a retry, wait for the earlier try's job when it is still running or
        has finished, instead of submitting again.
    :param cancel_on_kill: cancel the Flink job when the task is killed.
    :param unreachable_grace_s: how long the JobManager may stay unreachable, or answer no status
        that parses, during the wait before the task fails with its error (default 60 s;
        templated; 0: at the first error), in the blocking and the deferred wait alike, as
        ``BellamyJobSensor`` takes it. Past ``job_timeout_s`` the error is raised at once.
    """

    template_fields: Sequence[str] = (
        *SIZING_TEMPLATE_FIELDS,
        "application",
        "application_args",
        "conf",
        "unreachable_grace_s",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"properties": "json", "conf": "json"}
    ui_color = "#f6e3f0"
    _bellamy_records_itself: ClassVar[bool] = True
    bellamy_framework: ClassVar[str | None] = "flink"
    # scale_outs None: 1 … the cluster's total task slots, read at launch
    bellamy_candidates_at_launch: ClassVar[bool] = True

    def __init__(
        self,
        *,
        application: str,
        application_args: Sequence[str] | None = None,
        conf: Mapping[str, Any] | None = None,
        entry_class: str | None = None,
        flink_conn_id: str = FlinkHook.default_conn_name,
        wait_for_completion: bool = True,
        deferrable: bool = False,
        poll_interval_s: float = 5.0,
        job_timeout_s: float | None = None,
        submit_timeout_s: float = 600.0,
        reattach: bool = True,
        cancel_on_kill: bool = True,
        record: bool = True,
        unreachable_grace_s: float | dt.timedelta | str = DEFAULT_UNREACHABLE_GRACE_S,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not isinstance(application, str) or not application.strip():
            raise InvalidInputError("application", application, "must be the path of a .py script or a .jar")
        if deferrable and not wait_for_completion:
            raise InvalidInputError("deferrable", deferrable, "needs wait_for_completion=True")
        self.application = application
        # a template (one string, or an XCom reference) is read once rendered, in execute
        self.application_args = (
            application_args if is_template(application_args) else parse_argument_list(application_args)
        )
        self.conf = conf if is_template(conf) else parse_conf(conf, "conf")
        self.entry_class = entry_class
        self.flink_conn_id = flink_conn_id
        self.wait_for_completion = wait_for_completion
        self.deferrable = deferrable
        # text as default_args or a pipeline file give it: "5" or "5s" is 5 s; "five", 0 refused, named
        self.poll_interval_s = parse_duration(poll_interval_s, "poll_interval_s")
        self.job_timeout_s = None if job_timeout_s is None else parse_duration(job_timeout_s, "job_timeout_s")
        self.submit_timeout_s = parse_duration(submit_timeout_s, "submit_timeout_s")
        # "30" (a rendered template) is 30; "abc" or -1 fails the DAG at parse, a template once rendered
        self.unreachable_grace_s: Any = (
            unreachable_grace_s
            if is_template(unreachable_grace_s)
            else parse_unreachable_grace(unreachable_grace_s)
        )
        self.reattach = reattach
        self.cancel_on_kill = cancel_on_kill
        # Without the wait there is no runtime to record here: the sensor records it.
        self.record = bool(record and wait_for_completion)
        self._job_id: str | None = None

    # -- launch ----------------------------------------------------------------------------------

    def _flink_hook(self) -> FlinkHook:
        hook = getattr(self, "_flink", None)
        if hook is None:
            hook = FlinkHook(self.flink_conn_id)
            self._flink = hook
        return hook

    def _previous_job(self, hook: FlinkHook, context: Context) -> tuple[Any, str]:
        """(a job of an earlier try to reattach to or None, the id for a new submission).

        With Airflow's task state store (3.3+; one namespace per DAG run, deleted with it), only the
        job this DAG run's tries named there before submitting is theirs: a job under the same id
        that the store does not name was submitted by an earlier DAG run of the same run_id (deleted
        and created again), and reattaching to it would run nothing and record nothing."""
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        map_index = -1 if map_index is None else int(map_index)
        store = context.get("task_state_store")
        launch = store.get(LAUNCH_STATE_KEY) if store is not None else None
        named = launch.get("job_id") if isinstance(launch, dict) else None
        for attempt in range(MAX_JOB_ATTEMPTS):
            job_id = deterministic_job_id(ti.dag_id, ti.task_id, ti.run_id, map_index, attempt)
            job = hook.find_job(job_id)
            if job is None:
                return None, job_id
            if store is not None and job_id != named:
                self.log.info(
                    "Bellamy: Flink job %s (%s) was submitted by an earlier DAG run of run_id %s; "
                    "not reattaching",
                    job_id,
                    job.state,
                    ti.run_id,
                )
                continue
            if self.reattach and (not job.terminal or job.succeeded):
                return job, job_id
        raise InvalidInputError(
            "attempt", MAX_JOB_ATTEMPTS, f"{ti.task_id} already has {MAX_JOB_ATTEMPTS} failed Flink jobs"
        )

    def execute(self, context: Context) -> dict[str, Any] | None:
        import os

        hook = self._flink_hook()
        application = str(self.application)
        if not os.path.isfile(application):
            raise InvalidInputError("application", application, "no such file")
        # as rendered (text, without render_template_as_native_obj): before anything is stored
        application_args = parse_argument_list(self.application_args)
        conf = parse_conf(self.conf, "conf")
        self.unreachable_grace_s = parse_unreachable_grace(self.unreachable_grace_s)
        # Reachability first: a dead JobManager must fail the task before sizing stores a decision.
        free, total = hook.free_slots()
        previous, job_id = self._previous_job(hook, context)
        if previous is not None:
            self.log.info(
                "Bellamy: reattaching to Flink job %s (%s) submitted by an earlier try; not submitting again",
                previous.job_id,
                previous.state,
            )
            self._job_id = previous.job_id
            decision = self._reuse_decision(context, previous.job_id)
            return self._wait(context, previous.job_id, previous.parallelism or 1, decision, reattached=True)

        if self.scale_outs in (None, "", []):
            if total < 1:
                raise InvalidInputError(
                    "scale_outs", None, f"the Flink cluster at {hook.rest_url} has no task slots to size over"
                )
            self.scale_outs = list(range(1, total + 1))
        decision, target, facade = self.size_for_launch(context)
        self._facade = facade
        parallelism = int(decision.chosen_scale_out)
        # Checked against a fresh reading: sizing may have taken a while.
        hook.check_free_slots(parallelism)
        decision_dict = decision.to_dict()
        decision_dict["target"] = target.to_dict()

        store = context.get("task_state_store")
        launch_state = {"decision": decision_dict, "job_id": job_id, "try_number": context["ti"].try_number}
        if store is not None:
            # Named before submitting: a try lost right after the submission leaves its retry the
            # name of its job (the only job under this id it reattaches to) and the decision.
            store.set(LAUNCH_STATE_KEY, launch_state)
        started = time.monotonic()
        submitted = hook.submit(
            application,
            parallelism,
            application_args=application_args,
            conf=conf,
            entry_class=self.entry_class,
            job_id=job_id,
            timeout_s=self.submit_timeout_s,
        )
        self._job_id = submitted
        if store is not None and submitted != job_id:
            store.set(LAUNCH_STATE_KEY, {**launch_state, "job_id": submitted})
        self.log.info(
            "Bellamy: submitted %s as Flink job %s with parallelism %s (free slots %s/%s) in %.1f s",
            self.job_type,
            submitted,
            parallelism,
            free,
            total,
            time.monotonic() - started,
        )
        ti = context["ti"]
        ti.xcom_push(key="bellamy_decision", value=decision_dict)
        ti.xcom_push(key="flink_job_id", value=submitted)
        if not self.wait_for_completion:
            return {"job_id": submitted, "parallelism": parallelism, "decision": decision_dict}
        return self._wait(context, submitted, parallelism, decision_dict, reattached=False)

    def _reuse_decision(self, context: Context, job_id: str) -> dict[str, Any] | None:
        """The decision the earlier try that submitted ``job_id`` sized it with (task state
        store), published again for this try (``reused_from_try``): no new sizing, no new row."""
        store = context.get("task_state_store")
        launch = store.get(LAUNCH_STATE_KEY) if store is not None else None
        ti = context["ti"]
        if (
            not isinstance(launch, dict)
            or launch.get("job_id") != job_id
            or not isinstance(launch.get("decision"), dict)
        ):
            self.log.warning(
                "Bellamy: no decision is stored with Flink job %s; its run is recorded without one", job_id
            )
            return None
        decision = {**launch["decision"], "reused_from_try": launch.get("try_number")}
        ti.xcom_push(key="bellamy_decision", value=decision)
        self.log.info(
            "Bellamy: try %s reattaches to Flink job %s of try %s: reusing decision %s (parallelism %s), "
            "no new sizing",
            getattr(ti, "try_number", "?"),
            job_id,
            launch.get("try_number"),
            decision.get("decision_id"),
            decision.get("chosen_scale_out"),
        )
        return decision

    def _wait(
        self,
        context: Context,
        job_id: str,
        parallelism: int,
        decision: dict[str, Any] | None,
        *,
        reattached: bool,
    ) -> dict[str, Any] | None:
        hook = self._flink_hook()
        grace_s = parse_unreachable_grace(self.unreachable_grace_s)  # parsed once rendered, in execute
        if self.deferrable:
            from airflow_provider_bellamy.triggers.job import BellamyJobTrigger

            deadline_at = None
            timeout = None
            if self.job_timeout_s is not None:
                timeout = dt.timedelta(seconds=float(self.job_timeout_s))
                deadline_at = (dt.datetime.now(dt.timezone.utc) + timeout).isoformat()
            self.defer(
                trigger=BellamyJobTrigger(
                    kind="flink",
                    job_id=job_id,
                    endpoint=hook.rest_url,
                    poll_interval_s=self.poll_interval_s,
                    deadline_at=deadline_at,
                    unreachable_grace_s=grace_s,
                ),
                method_name="execute_complete",
                kwargs={
                    "job_id": job_id,
                    "parallelism": parallelism,
                    "decision": decision,
                    "reattached": reattached,
                },
            )
        try:
            status = hook.job_status_hook().wait_for_status(
                job_id,
                poll_interval_s=self.poll_interval_s,
                timeout_s=self.job_timeout_s,
                unreachable_grace_s=grace_s,
            )
        except TimeoutError:
            self._leave_running_job_to_retry(context, job_id)
            raise
        except BaseException as exc:
            from airflow.sdk.exceptions import AirflowTaskTerminated, AirflowTaskTimeout

            # The wait ended, not the job (Airflow's execution_timeout, the endpoint gone past its
            # grace): it runs on unless on_kill cancels it (a timeout or a kill, cancel_on_kill).
            # The try's wall time is no failed run of the job; a retry reattaches and records it.
            if not (isinstance(exc, (AirflowTaskTimeout, AirflowTaskTerminated)) and self.cancel_on_kill):
                self._leave_running_job_to_retry(context, job_id)
            raise
        return self._finish(context, status, parallelism, decision, reattached=reattached)

    def _leave_running_job_to_retry(self, context: Context, job_id: str) -> None:
        """This try gives up on a job that runs on: a retry reattaches to it and records it, so
        nothing (operator, callbacks, listener) records this try."""
        if self.reattach:
            from airflow_provider_bellamy.callbacks import leave_to_retry

            leave_to_retry(context["ti"])
            self.log.info("Bellamy: Flink job %s runs on; a retry reattaches to it and records it", job_id)

    def execute_complete(
        self,
        context: Context,
        event: dict[str, Any],
        job_id: str | None = None,
        parallelism: int | None = None,
        decision: dict[str, Any] | None = None,
        reattached: bool = False,
    ) -> dict[str, Any] | None:
        """Resumed by the trigger's event: record the finished job (in a fresh worker slot)."""
        from airflow_provider_bellamy.hooks.job_status import JobStatus

        job_id = job_id or (event.get("job") or {}).get("job_id") or event.get("job_id")
        self._job_id = job_id
        if decision is None and not reattached:
            # Some runners (dag.test) resume with the event alone: the XCom pushed before
            # deferring belongs to this same try and still holds the decision.
            pulled = context["ti"].xcom_pull(task_ids=self.task_id, key="bellamy_decision")
            decision = pulled if isinstance(pulled, dict) else None
        if parallelism is None:
            parallelism = int((decision or {}).get("chosen_scale_out") or 0) or None
        kind = event.get("status")
        if kind == "error":
            from airflow_provider_bellamy.triggers.job import error_from_event

            if job_id and event.get("error_type") in ("unreachable", "unparsed"):
                self._leave_running_job_to_retry(context, job_id)  # as the blocking wait (_wait)
            raise error_from_event({"job_id": job_id, **event}, self._flink_hook().rest_url)
        if kind == "timeout":
            state = (event.get("job") or {}).get("state")
            if job_id:
                self._leave_running_job_to_retry(context, job_id)
            raise TimeoutError(f"Flink job {job_id} still {state} after job_timeout_s={self.job_timeout_s}")
        status = JobStatus.from_dict(event["job"])
        return self._finish(
            context, status, parallelism or status.parallelism or 1, decision, reattached=reattached
        )

    def _finish(
        self,
        context: Context,
        status: JobStatus,
        parallelism: int,
        decision: dict[str, Any] | None,
        *,
        reattached: bool,
    ) -> dict[str, Any] | None:

        if status.parallelism is not None and status.parallelism != parallelism:
            self.log.warning(
                "Flink ran job %s at parallelism %s, not the %s asked for (adaptive batch parallelism on?)",
                status.job_id,
                status.parallelism,
                parallelism,
            )
        # The scale-out recorded is what the job actually ran at.
        scale_out = int(status.parallelism or parallelism)
        self.log.info(
            "Bellamy: Flink job %s %s after %.3f s (REST duration %s ms) at parallelism %s",
            status.job_id,
            status.state,
            status.runtime_s or 0.0,
            status.duration_ms,
            scale_out,
        )
        if not status.succeeded:
            self.log.error(
                "Flink job %s ended %s; Flink's failure cause:\n%s", status.job_id, status.state, status.cause
            )
        row_id = None
        if self.record:
            with self.unrecorded_is_a_warning(f"Flink job {status.job_id}"):
                row_id = self.record_job_run(
                    context,
                    status,
                    facade=getattr(self, "_facade", None),
                    job_type=self.job_type,
                    framework="flink",
                    scale_out=scale_out,
                    properties=self.sizing_spec().properties,
                    decision_id=(decision or {}).get("decision_id"),
                    source="operator",
                    requested_scale_out=parallelism,
                )
        if not status.succeeded:
            raise JobFailedError(
                status.job_id, status.state, status.cause or "no cause reported", kind="flink"
            )
        return {
            "job_id": status.job_id,
            "parallelism": scale_out,
            "state": status.state,
            "runtime_s": status.runtime_s,
            "queue_s": status.queue_s,
            "duration_ms": status.duration_ms,
            "run_row_id": row_id,
            "reattached": reattached,
            "decision": decision,
        }

    def on_kill(self) -> None:
        if self.cancel_on_kill and self._job_id:
            self.log.info("Cancelling Flink job %s", self._job_id)
            try:
                self._flink_hook().cancel_job(self._job_id)
            except Exception as exc:
                self.log.warning("Could not cancel Flink job %s: %s", self._job_id, exc)
