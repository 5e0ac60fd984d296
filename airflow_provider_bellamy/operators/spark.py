"""``BellamySparkSubmitOperator``: spark-submit at the scale-out the model chooses.

Before launch it sizes the job (see ``operators.sizing``) and sets the executor
count the way the connection's master understands it:

* ``local`` / ``local[*]`` / ``local[k]``: the master becomes ``local[n]``;
* standalone ``spark://``: ``--total-executor-cores n*executor_cores`` with
  ``--executor-cores executor_cores`` (n executors of that many cores);
* ``yarn`` and ``k8s://``: ``--num-executors n`` and
  ``spark.executor.instances=n``, with dynamic allocation switched off (it would
  override the count).

After spark-submit it writes the observed runtime back: the application's own
duration from a Spark history server (``history_server_url``), the standalone master's
``/json/`` (``completedapps``) or, in client deploy mode, the application's event log on this
machine (the user's local one, else one written for the run into a temporary directory:
``temporary_event_log``), else the submission's wall time.
A failed submission is recorded as ``failed`` (with its wall time) and re-raised.

With ``wait_for_completion=False`` (standalone masters only) it submits in cluster deploy
mode, returns the driver id as soon as spark-submit has handed the driver to the master, and
leaves waiting and recording to a ``BellamyJobSensor(submit_task_id=...)``.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.apache.spark.operators import spark_submit as _provider_spark_submit
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_provider_bellamy.callbacks import LAUNCH_STATE_KEY
from airflow_provider_bellamy.exceptions import BellamyError, InvalidInputError
from airflow_provider_bellamy.hooks.job_status import validate_endpoint
from airflow_provider_bellamy.hooks.spark import (
    READABLE_EVENT_LOG_CONF,
    BellamySparkSubmitHook,
    EventLogPlace,
)
from airflow_provider_bellamy.hooks.spark_timing import MasterGrantSampler, ObservedRun
from airflow_provider_bellamy.operators.sizing import (
    SIZING_TEMPLATE_FIELDS,
    BellamySizingMixin,
)
from airflow_provider_bellamy.spec import is_template, parse_argument_list, parse_conf

if TYPE_CHECKING:
    from airflow.sdk import Context


_LOCAL_RE = re.compile(r"^local(\[(\*|\d+)(,\s*\d+)?\])?$")


class SparkDriverIdMissingError(BellamyError, RuntimeError):
    """spark-submit ended without printing the standalone driver id of a cluster-mode submission."""

    def __init__(self, command: str, log_tail: str) -> None:
        self.command = command
        self.log_tail = log_tail
        super().__init__(
            "spark-submit printed no driver id (driver-YYYYMMDDhhmmss-NNNN) for a cluster deploy "
            "mode submission, so no sensor can follow the job; the master may have refused it, or "
            "the log level of org.apache.spark.deploy is above INFO.\n"
            f"Command: {command}\nLast spark-submit output:\n{log_tail or '(none)'}"
        )


def master_kind(master: str) -> str:
    """``local`` | ``standalone`` | ``yarn`` | ``k8s`` for a Spark master URL."""
    m = master.strip()
    if _LOCAL_RE.match(m):
        return "local"
    if m.startswith("spark://"):
        return "standalone"
    if m == "yarn" or m.startswith("yarn"):
        return "yarn"
    if m.startswith("k8s://"):
        return "k8s"
    raise InvalidInputError(
        "master", master, "unsupported Spark master (use local, spark://, yarn or k8s://)"
    )


def executor_settings(master: str, scale_out: int, executor_cores: int) -> dict[str, Any]:
    """What to pass to spark-submit for ``scale_out`` executors on ``master``.

    Returns ``master`` (possibly rewritten), ``num_executors``, ``total_executor_cores``,
    ``executor_cores`` and extra ``conf`` entries.
    """
    kind = master_kind(master)
    if kind == "local":
        return {"kind": kind, "master": f"local[{scale_out}]", "conf": {}}
    if kind == "standalone":
        return {
            "kind": kind,
            "master": master,
            "total_executor_cores": scale_out * executor_cores,
            "executor_cores": executor_cores,
            "conf": {},
        }
    return {
        "kind": kind,
        "master": master,
        "num_executors": scale_out,
        "executor_cores": executor_cores,
        "conf": {"spark.executor.instances": str(scale_out), "spark.dynamicAllocation.enabled": "false"},
    }


class BellamySparkSubmitOperator(BellamySizingMixin, SparkSubmitOperator):
    """A ``SparkSubmitOperator`` whose executor count is chosen by the Bellamy model.

    Takes every ``SparkSubmitOperator`` argument plus the sizing arguments of
    ``BellamySizingMixin``, and:

    :param executor_cores: cores per executor (one executor per scale-out unit).
    :param history_server_url: a Spark history server to read the application's
        duration from (``/api/v1/applications/<id>``), e.g. for local or YARN masters.
    :param temporary_event_log: in client deploy mode with neither a history server nor a
        standalone master to ask (local, YARN and Kubernetes masters), and no event logging in
        the conf or ``spark-defaults.conf``, have Spark write an uncompressed event log into a
        per-try temporary directory, read the application's own duration from it and remove
        it (default True). False: no such log; the runtime is spark-submit's wall time there.
    :param record: write the observed runtime back (default True).
    :param wait_for_completion: wait for the application and record it (default). False
        (standalone ``spark://`` masters only) submits in cluster deploy mode, returns as
        soon as the master has accepted the driver, records nothing, and returns what a
        ``BellamyJobSensor(submit_task_id=<this task>)`` needs to wait and record the run:
        ``job_id`` (the driver id), ``kind``, ``endpoint`` (the master web UI),
        ``scale_out``, ``decision_id``, ``job_type``, ``properties``, ``started_at``.

    Pushes XComs ``bellamy_decision`` (the decision dict) and
    ``spark_submit_command`` (the exact argument list, secrets masked); returns the
    recorded run as a dict (or, with ``wait_for_completion=False``, the submission).
    """

    template_fields: Sequence[str] = (*SparkSubmitOperator.template_fields, *SIZING_TEMPLATE_FIELDS)
    template_fields_renderers: ClassVar[dict[str, str]] = {"properties": "json", "conf": "json"}
    ui_color = "#e4f0e8"
    _bellamy_records_itself: ClassVar[bool] = True
    bellamy_framework: ClassVar[str | None] = "spark"

    def __init__(
        self,
        *,
        executor_cores: int = 1,
        history_server_url: str | None = None,
        temporary_event_log: bool = True,
        record: bool = True,
        wait_for_completion: bool = True,
        **kwargs: Any,
    ) -> None:
        for flag, value in (
            ("wait_for_completion", wait_for_completion),
            ("temporary_event_log", temporary_event_log),
        ):
            if not isinstance(value, bool):
                raise InvalidInputError(flag, value, "must be True or False")
        if not wait_for_completion:
            # Only a cluster-mode driver outlives spark-submit; in client mode the application
            # is spark-submit's own process, which the operator would have to wait for.
            deploy_mode = kwargs.get("deploy_mode")
            if deploy_mode not in (None, "cluster"):
                raise InvalidInputError(
                    "deploy_mode",
                    deploy_mode,
                    "wait_for_completion=False submits in cluster deploy mode (leave deploy_mode unset "
                    "or set it to 'cluster')",
                )
            kwargs["deploy_mode"] = "cluster"
        for owned in ("num_executors", "total_executor_cores"):
            if kwargs.get(owned) is not None:
                raise InvalidInputError(
                    owned, kwargs[owned], "is set by Bellamy sizing; give scale_outs instead"
                )
        if isinstance(executor_cores, bool) or not isinstance(executor_cores, int) or executor_cores < 1:
            raise InvalidInputError("executor_cores", executor_cores, "must be an integer >= 1")
        # a literal list / mapping is checked now; one template for the whole is read once rendered
        for name, parse in (("application_args", parse_argument_list), ("conf", parse_conf)):
            if kwargs.get(name) is not None and not is_template(kwargs[name]):
                kwargs[name] = parse(kwargs[name], name)
        kwargs.setdefault("name", f"bellamy-{kwargs.get('job_type')}")
        super().__init__(executor_cores=executor_cores, **kwargs)
        self.executor_cores_per_executor = executor_cores
        # checked now: read only once the job has ended, a bad URL would fail a finished job's
        # task (and its retry would run the job again)
        self.history_server_url = (
            None
            if history_server_url is None
            else validate_endpoint(history_server_url, "history_server_url")
        )
        # Without waiting there is no runtime to record here; the listener reads this too, so
        # the submission's wall time is never written back as the job's runtime.
        self.record = bool(record and wait_for_completion)
        self.wait_for_completion = wait_for_completion
        self.temporary_event_log = temporary_event_log
        # where this launch's event log is read from, once sized
        self._bellamy_event_log: EventLogPlace | None = None

    # -- execution ---------------------------------------------------------------

    def _read_rendered_arguments(self) -> None:
        """``conf`` and ``application_args`` as rendered, before anything is sized or stored: one
        template for the whole mapping or list renders text (without
        ``render_template_as_native_obj``), read back here; one argument string is refused, never
        split into characters."""
        self.conf = parse_conf(self.conf, "conf")
        if self.application_args is not None:
            self.application_args = parse_argument_list(self.application_args)

    def _check_master_webui(self) -> None:
        """A standalone master's web UI (the connection's ``master-webui`` extra), checked before
        sizing: it is read while and after the job runs, where a bad URL would fail the task of a
        job that ran (and store a decision for it)."""
        hook = self._launch_hook()
        if master_kind(str(hook._connection["master"])) == "standalone":
            hook.master_webui()

    def _get_hook(self) -> BellamySparkSubmitHook:
        return BellamySparkSubmitHook.adopt(super()._get_hook())

    def _launch_hook(self) -> BellamySparkSubmitHook:
        """The one hook of this launch, built on first use (after the arguments are rendered: the
        hook takes them when built). Every step of a launch reads and sizes this hook: each build
        looks the connection up and parses it again (and writes a keytab file when the connection
        carries one). The provider's own steps (``execute``, ``_backend``) reuse ``self._hook``."""
        if self._hook is None:
            self._hook = self._get_hook()
        hook = self._hook
        assert isinstance(hook, BellamySparkSubmitHook)
        return hook

    def _with_openlineage(self, conf: dict[str, Any], context: Context) -> dict[str, Any]:
        """``conf`` with the OpenLineage properties the provider's ``execute`` would inject.

        The provider injects them into ``self.conf`` and then builds its hook; ours is built and
        sized before, so without this they would never reach spark-submit. The functions are
        looked up where the provider's operator calls them (same rule: properties the user set
        keep theirs); its later injection into ``self.conf`` then finds them and adds nothing."""
        for flag, name in (
            ("_openlineage_inject_parent_job_info", "inject_parent_job_information_into_spark_properties"),
            ("_openlineage_inject_transport_info", "inject_transport_information_into_spark_properties"),
        ):
            if not getattr(self, flag, False):
                continue
            inject = getattr(_provider_spark_submit, name, None)
            if inject is None:
                # a provider that moved it: the launch goes on, without the properties, and says so
                self.log.warning(
                    "Bellamy: this Spark provider has no %s; OpenLineage properties not passed", name
                )
                continue
            conf = inject(conf, context)
        return conf

    def _apply_size(self, context: Context, scale_out: int) -> dict[str, Any]:
        """The hook's conf and executors for ``scale_out``: the one place every launch (waiting,
        detached, reattaching) builds what spark-submit is given."""
        hook = self._launch_hook()
        settings = executor_settings(hook._connection["master"], scale_out, self.executor_cores_per_executor)
        self._num_executors = settings.get("num_executors")
        self._total_executor_cores = settings.get("total_executor_cores")
        self._executor_cores = settings.get("executor_cores", self._executor_cores)
        conf = self._with_openlineage(dict(self.conf or {}), context)
        for key, value in settings["conf"].items():
            # the executor count is ours; dynamic allocation stays the user's call if set explicitly
            if key == "spark.executor.instances" or key not in conf:
                conf[key] = value
        self.conf = conf
        # kept off self.conf: a later try must not read this try's directory as the user's
        extra = self._plan_event_log(conf, settings, hook)
        hook.set_executors(
            conf={**conf, **extra},
            num_executors=self._num_executors,
            total_executor_cores=self._total_executor_cores,
            executor_cores=self._executor_cores,
        )
        if not self.wait_for_completion:
            hook.bellamy_detach()
        if settings["kind"] == "local":
            hook._connection["master"] = settings["master"]
        return settings

    def _plan_event_log(
        self, conf: Mapping[str, Any], settings: Mapping[str, Any], hook: BellamySparkSubmitHook
    ) -> dict[str, str]:
        """Where this launch's event log is read from, and the conf that puts it there.

        Client deploy mode only (a cluster-mode driver writes its log on another machine). The
        user's event logging stands as set (``--conf`` would override ``spark-defaults.conf``):
        read where it is local, never removed. Without it, on a master that reports no duration
        of its own (local, YARN, Kubernetes; no ``history_server_url``, which reads a log the user
        set up, maybe where this machine cannot see), a temporary directory, uncompressed and
        not rolled (``READABLE_EVENT_LOG_CONF`` says why)."""
        self._bellamy_event_log = None
        if hook._connection.get("deploy_mode") == "cluster":
            return {}
        setting = hook.event_log_setting(dict(conf))
        if setting.configured:
            directory = setting.local_directory()
            if directory is not None:
                self._bellamy_event_log = EventLogPlace(directory, temporary=False)
            elif setting.enabled:
                self.log.info(
                    "Bellamy: the event log (spark.eventLog.dir=%s, set in %s) is not on this machine: "
                    "the runtime is not read from it",
                    hook.masked_args([setting.directory])[0],  # an s3a://key:secret@ URL
                    setting.where,
                )
            return {}
        if not self.temporary_event_log or self.history_server_url or settings["kind"] == "standalone":
            return {}
        directory = Path(tempfile.gettempdir()) / f"bellamy-eventlog-{uuid.uuid4().hex}"
        self._bellamy_event_log = EventLogPlace(directory, temporary=True)
        return {
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": directory.as_uri(),
            **READABLE_EVENT_LOG_CONF,
        }

    def prepare_launch(self, context: Context) -> tuple[Any, Any, Any, dict[str, Any], list[str]]:
        """Everything before spark-submit starts: size, set the executors, build the command.

        Returns (decision, target, façade or None, executor settings, masked command);
        ``bellamy benchmark overhead`` times exactly this in a fresh process.
        """
        self._read_rendered_arguments()
        self._check_master_webui()
        decision, target, facade = self.size_for_launch(context)
        settings = self._apply_size(context, int(decision.chosen_scale_out))
        command = self._masked_command(self._launch_hook())
        return decision, target, facade, settings, command

    def _prepare_and_publish(self, context: Context) -> tuple[Any, Any, dict[str, Any], list[str]]:
        """``prepare_launch``, then the XComs every launch pushes: the decision (with its target)
        and the exact command. Returns (decision as a dict, façade or None, executor settings,
        command)."""
        decision, target, facade, settings, command = self.prepare_launch(context)
        decision_dict = decision.to_dict()
        decision_dict["target"] = target.to_dict()
        self._publish(context, decision_dict, command)
        return decision_dict, facade, settings, command

    def _masked_command(self, hook: BellamySparkSubmitHook) -> list[str]:
        """spark-submit's argument list, credentials masked, kept a list (the hook's ``_mask_cmd``
        joins it: an argument with a space would read as two)."""
        return hook.masked_args(hook._build_spark_submit_command(self.application))

    @staticmethod
    def _publish(context: Context, decision: dict[str, Any], command: list[str]) -> None:
        context["ti"].xcom_push(key="bellamy_decision", value=decision)
        context["ti"].xcom_push(key="spark_submit_command", value=command)

    # -- durable submissions (Airflow 3.3 ResumableJobMixin) ----------------------------------------

    def _durable_launch(self, context: Context) -> dict[str, Any] | None:
        """The launch of an earlier try that the provider will reattach to, or None.

        The provider persists the driver id (``spark_job_id``) in the task state store and, on a
        retry, reconnects to that driver when it is still active or finished well. Such a retry
        must keep the decision that sized the driver: sizing again would store a decision for a
        launch that never happens and record the runtime against a scale-out it did not run at.
        """
        store = context.get("task_state_store")
        if store is None or not getattr(self, "durable", False):
            return None
        launch = store.get(LAUNCH_STATE_KEY)
        job_id = store.get(self.external_id_key)
        if not isinstance(launch, dict) or not job_id or launch.get("job_id") != job_id:
            return None
        status = self.get_job_status(job_id, context)  # the provider asks the same before reattaching
        if not (self.is_job_active(status) or self.is_job_succeeded(status)):
            return None
        return launch

    def submit_job(self, context: Context) -> str | None:
        """The provider's submission, then the decision persisted with the driver id it returned."""
        external_id = super().submit_job(context)
        store = context.get("task_state_store")
        launch = getattr(self, "_bellamy_launch", None)
        if store is not None and launch is not None and external_id:
            store.set(LAUNCH_STATE_KEY, {**launch, "job_id": external_id})
        return external_id

    def _launch(self, context: Context) -> tuple[dict[str, Any], Any, dict[str, Any], bool]:
        """(decision, façade or None, executor settings, reattached): a fresh sizing, or the
        decision of the earlier try whose driver the provider is about to reattach to."""
        ti = context["ti"]
        earlier = self._durable_launch(context)
        if earlier is not None:
            decision = dict(earlier["decision"])
            settings = self._apply_size(context, int(decision["chosen_scale_out"]))
            # the command the driver was launched with: this try's rebuilt one names this try's
            # OpenLineage parentRunId, a command nobody ran (a launch stored before session 29
            # kept none: the rebuilt one stands in)
            ran = earlier.get("command")
            command = list(ran) if isinstance(ran, list) else self._masked_command(self._launch_hook())
            decision["reused_from_try"] = earlier.get("try_number")
            self._publish(context, decision, command)
            self.log.info(
                "Bellamy: try %s reattaches to driver %s of try %s: reusing decision %s (%s executor(s)), "
                "no new sizing",
                getattr(ti, "try_number", "?"),
                earlier["job_id"],
                earlier.get("try_number"),
                decision.get("decision_id"),
                decision["chosen_scale_out"],
            )
            return decision, None, settings, True
        decision, facade, settings, command = self._prepare_and_publish(context)
        # kept with the driver id (submit_job): a retry that reattaches publishes what ran
        self._bellamy_launch = {
            "decision": decision,
            "try_number": getattr(ti, "try_number", None),
            "command": command,
        }
        return decision, facade, settings, False

    def execute(self, context: Context) -> dict[str, Any] | None:
        # a try's hook holds its spark-submit's process, ids and log: never an earlier try's
        self._hook = None
        self._read_rendered_arguments()
        if not self.wait_for_completion:
            return self._submit_detached(context)
        decision, facade, settings, reattached = self._launch(context)
        scale_out = int(decision["chosen_scale_out"])
        hook = self._launch_hook()
        durable = bool(hook._should_track_driver_status)
        self.log.info(
            "Bellamy: launching %s with %s executor(s) on %s (%s)",
            self.job_type,
            scale_out,
            settings["master"],
            settings["kind"],
        )

        event_log = None if durable else self._bellamy_event_log
        if event_log is not None and event_log.temporary:
            # Spark refuses to start when spark.eventLog.dir does not exist
            os.makedirs(event_log.directory, mode=0o700)
        sampler = None if durable else self._grant_sampler(settings, hook)
        try:
            return self._run_and_record(context, decision, facade, settings, reattached, sampler, event_log)
        finally:
            if event_log is not None and event_log.temporary:
                shutil.rmtree(event_log.directory, ignore_errors=True)

    def _run_and_record(
        self,
        context: Context,
        decision: dict[str, Any],
        facade: Any,
        settings: Mapping[str, Any],
        reattached: bool,
        sampler: MasterGrantSampler | None,
        event_log: EventLogPlace | None,
    ) -> dict[str, Any] | None:
        """spark-submit, then the run recorded with what the cluster (or the event log) reports."""
        hook = self._launch_hook()
        ti = context["ti"]
        scale_out = int(decision["chosen_scale_out"])
        durable = bool(hook._should_track_driver_status)
        started_at = dt.datetime.now(dt.timezone.utc)
        t0 = time.monotonic()
        status, error = "success", None
        try:
            super().execute(context)
        except BaseException as exc:
            status, error = "failed", exc
        finally:
            if sampler is not None:
                sampler.stop()
        wall_s = time.monotonic() - t0
        ended_at = dt.datetime.now(dt.timezone.utc)

        if durable:
            return self._finish_durable(context, decision, settings, error, wall_s, reattached)

        app_id = getattr(hook, "bellamy_app_id", None)
        # in cluster deploy mode (YARN, Kubernetes) spark-submit waits for the driver it submitted
        cluster_mode = hook._connection.get("deploy_mode") == "cluster"
        observed = ObservedRun.wall_time(
            wall_s, "wall time of spark-submit", scale_out, cluster_mode=cluster_mode
        )
        if status == "success":
            observed = hook.observe_application(
                app_id,
                name=self.name,
                requested=scale_out,
                executor_cores=self.executor_cores_per_executor,
                history_server_url=self.history_server_url,
                standalone=settings.get("kind") == "standalone",
                sampler=sampler,
                event_log=event_log,
                fallback=observed,
            )
        self._log_observed(status, observed)

        result: dict[str, Any] | None = None
        if self.record:
            result = self._record(facade, ti, decision, observed, status, started_at, ended_at, app_id)
        if error is not None:
            raise error
        return result

    def _log_observed(self, status: str, observed: ObservedRun) -> None:
        self.log.info(
            "Bellamy: %s %s after %.2f s at %s executor(s) (%s; waited %s s for executors)",
            self.job_type,
            status,
            observed.runtime_s,
            observed.scale_out,
            observed.source,
            "?" if observed.queue_s is None else f"{observed.queue_s:.2f}",
        )
        if observed.excluded_reason:
            self.log.warning("Bellamy: run kept out of training: %s", observed.excluded_reason)

    def _finish_durable(
        self,
        context: Context,
        decision: dict[str, Any],
        settings: Mapping[str, Any],
        error: BaseException | None,
        wall_s: float,
        reattached: bool,
    ) -> dict[str, Any] | None:
        """Record a standalone cluster-mode driver once, whichever try sees it end.

        A try that fails while the driver still runs records nothing (the retry reattaches and
        records it); a driver recorded by an earlier try is not recorded again.
        """
        from airflow_provider_bellamy.callbacks import already_stored, leave_to_retry

        ti = context["ti"]
        hook = self._launch_hook()
        store = context.get("task_state_store")
        driver_id = (store.get(self.external_id_key) if store is not None else None) or getattr(
            hook, "_driver_id", None
        )
        if error is not None and driver_id:
            try:
                still = self.get_job_status(driver_id, context)
            except Exception:
                still = "UNKNOWN"
            if self.is_job_active(still):
                leave_to_retry(ti)
                self.log.warning(
                    "Bellamy: driver %s is still %s: not recorded now, a retry reattaches to it",
                    driver_id,
                    still,
                )
                raise error
        unread: list[str] = []
        status = hook.driver_status(driver_id, unread) if driver_id else None
        scale_out = int(decision["chosen_scale_out"])
        if not driver_id:
            why = "no driver id to ask the master about"
        elif unread:
            why = "; ".join(unread)
        else:
            why = f"the master listed no duration for driver {driver_id}"
        observed = ObservedRun.wall_time(
            wall_s, f"wall time of the try ({why})", scale_out, cluster_mode=True
        )
        if status is not None and status.runtime_s is not None:
            observed = ObservedRun(
                runtime_s=status.runtime_s,
                source=f"standalone master (driver {driver_id})",
                scale_out=int(status.parallelism or scale_out) // self.executor_cores_per_executor
                or scale_out,
            )
        run_status = "success" if error is None else "failed"
        self._log_observed(run_status, observed)
        result: dict[str, Any] | None = None
        if self.record:
            facade = None
            existing = None
            if driver_id:
                try:
                    facade = self._hook_bellamy_facade()
                    # this try's row too: the listener would otherwise store its wall time again
                    existing = already_stored(facade, ti, "spark", driver_id)
                except Exception as exc:
                    self.log.warning("Bellamy: could not look the driver up in the store: %s", exc)
            if existing is not None:
                result = {"run_row_id": existing, "app_id": driver_id, "reattached": reattached}
            else:
                started = status.started_at if status is not None else None
                ended = status.ended_at if status is not None else None
                now = dt.datetime.now(dt.timezone.utc)
                result = self._record(
                    facade, ti, decision, observed, run_status, started or now, ended or now, driver_id
                )
                if result is not None:
                    result["reattached"] = reattached
        if error is not None:
            raise error
        return result

    def _submit_detached(self, context: Context) -> dict[str, Any]:
        """Size, submit in cluster deploy mode and return the driver id without waiting."""

        # Checked before sizing, so a wrong connection stores no decision that never launches.
        master = str(self._launch_hook()._connection["master"])
        if master_kind(master) != "standalone":
            raise InvalidInputError(
                "master",
                master,
                f"wait_for_completion=False needs a standalone spark:// master (Spark connection "
                f"{self._conn_id!r}); wait for completion on this master instead",
            )
        decision, _facade, settings, command = self._prepare_and_publish(context)
        scale_out = int(decision["chosen_scale_out"])
        hook = self._launch_hook()
        self.log.info(
            "Bellamy: submitting %s with %s executor(s) to %s in cluster deploy mode (not waiting)",
            self.job_type,
            scale_out,
            settings["master"],
        )
        started_at = dt.datetime.now(dt.timezone.utc)
        super().execute(context)
        driver_id = self._driver_id_or_raise(hook, command)
        endpoint = hook.master_webui()
        self.log.info("Bellamy: driver %s submitted; the master's web UI is %s", driver_id, endpoint)
        return {
            "job_id": driver_id,
            "kind": "spark-master",
            "endpoint": endpoint,
            "framework": "spark",
            "master": settings["master"],
            "deploy_mode": "cluster",
            "job_type": self.job_type,
            "scale_out": scale_out,
            "properties": self.sizing_spec().properties,
            "decision_id": decision["decision_id"],
            "started_at": started_at.isoformat(),
        }

    @staticmethod
    def _driver_id_or_raise(hook: BellamySparkSubmitHook, command: Sequence[str]) -> str:
        """The driver id spark-submit printed; without it no sensor could follow the job."""
        if not hook.bellamy_driver_id:
            raise SparkDriverIdMissingError(" ".join(command), hook.bellamy_log_text())
        return hook.bellamy_driver_id

    def _record(
        self,
        facade: Any,
        ti: Any,
        decision: Any,
        observed: ObservedRun,
        status: str,
        started_at: dt.datetime,
        ended_at: dt.datetime,
        app_id: str | None,
    ) -> dict[str, Any] | None:
        from airflow_provider_bellamy.callbacks import write_job_row

        requested = int(decision["chosen_scale_out"])
        row = {
            "job_type": self.job_type,
            "framework": "spark",
            "scale_out": observed.scale_out,
            "runtime_s": max(observed.runtime_s, 1e-3),
            "status": status,
            "properties": self.sizing_spec().properties,
            "started_at": started_at,
            "ended_at": ended_at,
            "external_id": app_id,
            "decision_id": decision.get("decision_id"),
            "source": "operator",
            "queue_s": observed.queue_s,
            "requested_scale_out": requested,
            "excluded_reason": observed.excluded_reason,
        }
        with self.unrecorded_is_a_warning("the run"):
            row_id = write_job_row(ti, row, self._hook_bellamy_facade, facade)
            return {
                "run_row_id": row_id,
                "job_type": self.job_type,
                "scale_out": observed.scale_out,
                "requested_scale_out": requested,
                "runtime_s": observed.runtime_s,
                "queue_s": observed.queue_s,
                "runtime_source": observed.source,
                "excluded_reason": observed.excluded_reason,
                "status": status,
                "app_id": app_id,
                "decision_id": decision.get("decision_id"),
            }
        return None

    def _hook_bellamy_facade(self) -> Any:
        from airflow_provider_bellamy.operators.sizing import _run_with_timeout

        hook = self._bellamy_store_hook()
        return _run_with_timeout(hook.get_facade, hook.connect_timeout_s + 5.0, "opening the Bellamy store")

    def _grant_sampler(
        self, settings: Mapping[str, Any], hook: BellamySparkSubmitHook
    ) -> MasterGrantSampler | None:
        """Samples the executors a standalone master grants this application while it runs
        (client deploy mode only: a cluster-mode driver's application id is not in the log)."""
        if settings.get("kind") != "standalone" or hook._connection.get("deploy_mode") == "cluster":
            return None
        return hook.start_grant_sampler(self.executor_cores_per_executor)
